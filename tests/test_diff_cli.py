"""`hybrid-harness diff`: the mirrored tier against the engine tier (vLLM's own Scheduler)."""

from __future__ import annotations

import pytest

from harness.cli import main
from testlib import SCENARIOS


def _engine_available() -> str | None:
    try:
        from harness.engine.scheduler import EngineDriver
        from harness.scenario import load_scenario

        EngineDriver(load_scenario(SCENARIOS / "seed-external-hit-same-block.json"))  # builds vLLM's Scheduler
    except Exception as exc:  # noqa: BLE001 - the reason is the skip message
        return repr(exc)
    return None


pytestmark = pytest.mark.skipif(_engine_available() is not None, reason=f"engine tier unavailable: {_engine_available()}")


def test_diff_of_the_seed_scenario_agrees(capsys):
    assert main(["diff", str(SCENARIOS / "seed-external-hit-same-block.json")]) == 0
    assert "tiers agree" in capsys.readouterr().out


def test_diff_count_reports_a_summary(capsys):
    code = main(["diff", "--count", "5", "--seed", "0"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "diff: 5 scenarios" in out


def test_diff_needs_a_scenario_or_a_count(capsys):
    assert main(["diff"]) == 2
