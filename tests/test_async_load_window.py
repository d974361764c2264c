"""An async connector load lands when it completes, not when its blocks are allocated (both tiers): until then its
Mamba block holds nothing valid, so a block vLLM caches, or another request reads, inside the load window is a
finding. The mutant async-load-cached-early drops allocate_slots' delay_cache_blocks for such loads."""

from __future__ import annotations

import pytest
from testlib import ROOT

from harness.errors import BadInput
from harness.run_config import RunConfig
from harness.scenario import load_scenario
from harness.verdict import replay_and_judge

MUTANT = "async-load-cached-early"
# random_scenario(4) and (51) on vLLM 0.33.0, each with an async connector load
CACHED = ROOT / "tests" / "data" / "async-load-cached-in-window.json"  # keyed in the window
HIT = ROOT / "tests" / "data" / "async-load-hit-in-window.json"  # keyed, then read by another request in the window
TIERS = [RunConfig(), RunConfig(tier="engine").but(async_scheduling="off")]


def _judge(path, config):
    scenario = load_scenario(path)
    assert any(r.external is not None and r.external.async_load for r in scenario.requests)
    try:
        return replay_and_judge(scenario, config=config)
    except BadInput as exc:  # a release whose scheduler cannot express the scenario says why
        pytest.skip(str(exc))


@pytest.mark.parametrize("config", TIERS, ids=lambda c: c.tier)
@pytest.mark.parametrize("path", [CACHED, HIT], ids=lambda p: p.stem)
def test_stock_async_loads_are_clean(path, config):
    _, findings, verdict = _judge(path, config)
    assert findings == [] and verdict is None


@pytest.mark.parametrize("config", TIERS, ids=lambda c: c.tier)
def test_a_block_cached_inside_the_load_window_is_a_finding(config):
    _, _, verdict = _judge(CACHED, config.but(mutant=MUTANT))
    assert verdict is not None and verdict.is_new and "cache-integrity" in verdict.unexplained, verdict


@pytest.mark.parametrize("config", TIERS, ids=lambda c: c.tier)
def test_a_request_hitting_the_block_inside_the_load_window_reads_nothing_valid(config):
    _, _, verdict = _judge(HIT, config.but(mutant=MUTANT))
    assert verdict is not None and verdict.is_new, verdict
    assert {"provenance:initial", "cache-integrity"} <= set(verdict.unexplained), verdict.to_json()
