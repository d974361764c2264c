"""`hybrid-harness diff`: the mirrored tier against the engine tier (vLLM's own Scheduler)."""

from __future__ import annotations

import functools

import pytest

from harness.cli import main
from harness.errors import BadInput
from harness.vllm_adapter import supports_retention
from testlib import SCENARIOS


@functools.cache
def _engine_unavailable() -> str | None:
    """Why this release cannot run the engine tier (the BadInput naming what it lacks), None where it can. Any
    other error building vLLM's Scheduler is a failure of the tier, which each test then reports (not a skip)."""
    from harness.engine.scheduler import EngineDriver
    from harness.scenario import load_scenario

    try:
        EngineDriver(load_scenario(SCENARIOS / "seed-external-hit-same-block.json"))  # builds vLLM's Scheduler
    except BadInput as exc:
        return str(exc)
    return None


@pytest.fixture(autouse=True)
def _engine_tier():
    why = _engine_unavailable()
    if why is not None:
        pytest.skip(f"engine tier unavailable on this release: {why}")


def test_diff_of_the_seed_scenario_agrees(capsys):
    assert main(["diff", str(SCENARIOS / "seed-external-hit-same-block.json")]) == 0
    assert "tiers agree" in capsys.readouterr().out


def test_diff_count_reports_a_summary(capsys):
    code = main(["diff", "--count", "5", "--seed", "0"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "diff: 5 scenarios" in out


def test_diff_needs_a_scenario_or_a_count(capsys):
    assert main(["diff"]) == 2


def test_diff_refuses_a_model_config_instead_of_comparing_nothing(capsys):
    """The mirrored tier has no real-model geometries: every scenario would be skipped and the run look green."""
    assert main(["diff", "--count", "3", "--model-config", "qwen3-next-80b-a3b"]) == 2
    assert "mirrored tier" in capsys.readouterr().err


@pytest.mark.skipif(not supports_retention(), reason="sparse prefix-cache retention: vLLM 0.33+")
def test_a_finished_requests_out_of_window_blocks_are_freed_first_on_both_tiers(capsys):
    """Under sparse retention a finished request holds Mamba blocks no longer needed; every engine with a KV
    connector frees them first (`_connector_finished` -> remove_skipped_blocks), then the rest, and that order
    decides which block a later allocation takes. The mirrored loop does the same: the tiers' rows agree
    (generated seed 364 differed in a block id at step 12 while the mirror freed them all at once)."""
    from pathlib import Path

    scenario = Path(__file__).parent / "data" / "diff-sparse-retention-finish.json"
    assert main(["diff", str(scenario)]) == 0, capsys.readouterr().out
