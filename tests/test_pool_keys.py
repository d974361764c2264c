"""The pool's key rule (pool-accounting:cache-key), on both tiers: after every step each prefix-cache key maps to a
block that holds it as its primary hash or as an alias beside one (vLLM 0.34.0 block_pool.py:605-623 removes a
block's keys through its primary). The mutant cache-key-outlives-block forgets a block's aliases when its keys are
removed; evicting the block then leaves them naming whatever it holds next."""

from __future__ import annotations

import pytest
from testlib import ROOT, release_in

from harness.oracles import pool_accounting
from harness.run_config import RunConfig
from harness.trace import Trace
from harness.verdict import replay_and_judge

MUTANT = "cache-key-outlives-block"
REPRO = ROOT / "scenarios" / "mutants" / f"{MUTANT}.json"  # a one-block prompt's keys, evicted by two long ones
TIERS = [RunConfig(), RunConfig(tier="engine").but(async_scheduling="off")]


def _scenario():
    import json

    from harness.scenario import parse_scenario

    return parse_scenario(json.loads(REPRO.read_text())["scenario"])


@pytest.mark.parametrize("config", TIERS, ids=lambda c: c.tier)
def test_stock_keys_follow_the_rule_when_the_cache_is_evicted(config):
    _, findings, verdict = replay_and_judge(_scenario(), config=config)
    assert findings == [] and verdict is None


@pytest.mark.parametrize("config", TIERS, ids=lambda c: c.tier)
def test_an_alias_that_outlives_its_block_is_a_finding(config):
    if not release_in("0.32.0-0.34.x"):  # before 0.32 its one-block prompt gets no alias key (partial entries)
        pytest.skip("the repro's prompt gets no alias key on this release")
    trace, _, verdict = replay_and_judge(_scenario(), config=config.but(mutant=MUTANT))
    assert verdict is not None and verdict.is_new and "pool-accounting:cache-key" in verdict.unexplained, verdict
    assert trace.key_breaks and all(what.startswith("the block it maps to") for _, _, what, _ in trace.key_breaks)


def test_the_rule_is_judged_from_the_trace_alone():
    t = Trace(vllm_version="test", mutant=None)
    assert pool_accounting(t) == []
    t.key_breaks.append((7, 3, "the block it maps to has no primary hash", "a[:4]"))
    (f,) = pool_accounting(t)
    assert f.step == 7 and f.signature == "pool-accounting:cache-key" and "a[:4]" in f.detail
