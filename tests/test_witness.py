"""Liveness by witness (issue 45): a request stock vLLM finishes in a scenario and pool must finish on the system
under test, also where the liveness oracle cannot judge (between the fewest blocks a request needs and the most it
may hold). The case: the first source patch for sync-external-admission-undercount counted a sync external hit's
block also where the continuation stays inside it, so a pool stock fills exactly never admitted the request."""

from __future__ import annotations

import pytest

from harness.oracles import judge, liveness, witness_liveness
from harness.replay import replay
from harness.run_config import RunConfig
from harness.verdict import replay_and_judge
from harness.witness import judged, witness_config, witness_trace
from testlib import ROOT, SCENARIOS, load_scenario, supports_prefill_checkpoints

OVERCOUNTED = str(ROOT / "tests" / "data" / "external_block_overcounted.py")
SCENARIO = SCENARIOS / "sync-external-inside-block.json"


@pytest.mark.parametrize("tier", ["symbolic", "engine"])
def test_a_stall_in_the_unjudged_band_turns_red_by_witness(tier):
    scenario = load_scenario(SCENARIO)
    config = RunConfig(tier=tier, mutant=OVERCOUNTED)
    trace = replay(scenario, config=config)
    assert trace.end.reason == "stuck" and set(trace.end.unfinished) == {"a"}
    # the request's largest need exceeds the pool, so the liveness oracle alone calls the run clean ...
    assert liveness(trace) == [] and judge(trace) == []
    # ... and the witness, stock vLLM in the same pool, finishes it
    witness = witness_trace(scenario, config)
    assert witness.end.reason == "done" and "a" in witness.end.finished
    assert [f.signature for f in witness_liveness(trace, witness)] == ["liveness:witness"]
    assert [f.signature for f in judged(scenario, config, trace)] == ["liveness:witness"]


def test_the_verdict_calls_it_new_on_stock_and_on_the_fixed_system():
    scenario = load_scenario(SCENARIO)
    for known_fixes in (True, False):
        _, findings, verdict = replay_and_judge(scenario, config=RunConfig(mutant=OVERCOUNTED, known_fixes=known_fixes))
        assert [f.signature for f in findings] == ["liveness:witness"]
        assert verdict.is_new and verdict.unexplained == ["liveness:witness"]


@pytest.mark.parametrize("name", ["sync-external-inside-block.json", "sync-external-local-hit-skipped.json"])
def test_the_fixed_system_serves_what_stock_serves(name):
    """The run-time fix of sync-external-admission-undercount counts what the allocation takes: a continuation
    inside the loaded block takes nothing more, and a local hit the load skips is never touched; in both, stock
    counts right and the fixed system admits the request as stock does."""
    scenario = load_scenario(SCENARIOS / name)
    if scenario.geometry.prefill_checkpoint and not supports_prefill_checkpoints():
        pytest.skip(f"{name} has prefill checkpoint blocks (0.33+), which this vLLM lacks")
    for tier in ("symbolic", "engine"):
        trace, findings, verdict = replay_and_judge(scenario, config=RunConfig(tier=tier, known_fixes=True))
        assert trace.end.reason == "done" and findings == [] and verdict is None


def test_the_witness_is_stock_and_none_for_stock_itself():
    config = RunConfig(fixes=("sync-external-admission-undercount",), mutant="seed-unmarked-early-return")
    assert witness_config(config) == RunConfig()
    assert witness_config(RunConfig()) is None  # stock is its own witness
    assert witness_config(RunConfig(tier="e2e", fixes=("x",))) is None  # no step-loop end recorded there
    tree = RunConfig(witness_vllm="/trees/stock", fixes=("a",), mutant="m")
    assert witness_config(tree) == RunConfig(witness_vllm="/trees/stock", fixes=("a",))  # same fixes, other tree


def test_no_witness_finding_where_the_witness_stalls_too_or_the_run_finished():
    scenario = load_scenario(SCENARIO)
    stuck = replay(scenario, config=RunConfig(mutant=OVERCOUNTED))
    done = replay(scenario, config=RunConfig())
    assert witness_liveness(stuck, stuck) == []  # the witness did not finish it either
    assert witness_liveness(done, done) == [] and witness_liveness(stuck, None) == []


def test_a_witness_tree_replays_in_its_own_process():
    """--witness-vllm: the stock tree's replays come from a `witness-serve` process (here the installed vLLM's
    own directory stands for a tree: no download in tests)."""
    import vllm
    from pathlib import Path

    tree = str(Path(vllm.__file__).resolve().parent.parent)
    scenario = load_scenario(SCENARIO)
    config = RunConfig(mutant=OVERCOUNTED, witness_vllm=tree)
    witness = witness_trace(scenario, config)
    assert witness.end.reason == "done" and "a" in witness.end.finished and witness.vllm_source == tree
    # the run's end crossed a process boundary as JSON and came back whole, tuples included
    assert witness.end == witness_trace(scenario, config.but(witness_vllm=None)).end
    trace = replay(scenario, config=config)
    assert [f.signature for f in judged(scenario, config, trace)] == ["liveness:witness"]


def test_generators_reach_the_band_only_the_witness_judges():
    """Now and then a generated request lies past the most it could hold, at the pool's edge (where stock fills the
    pool exactly): the band only the witness judges; every such scenario is one vLLM could admit."""
    from harness.generate import random_scenario
    from harness.trace import blocks_at_least, largest_request

    past = 0
    for seed in range(600):
        sc = random_scenario(seed)  # a request vLLM could never admit would be refused (BadInput)
        g = sc.geometry
        for r in sc.requests:
            tokens = r.prompt.num_tokens + r.max_tokens
            assert blocks_at_least(tokens, (g.attn_block_size, g.mamba_block_size)) <= g.num_blocks - 1
            past += tokens > largest_request(g.num_blocks, g.mamba_block_size, g.num_speculative_tokens)
    assert past >= 3
