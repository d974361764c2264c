"""Each oracle is tripped by a scenario that must trip it, and stays quiet where it must."""

from __future__ import annotations

import pytest

from harness.oracles import (cache_integrity, live_columns, liveness, pool_accounting, provenance, publication,
                             vllm_exception)
from harness.trace import CacheCheck, Read, RowView, Trace, VllmException

from harness.scenario import load_scenario

from testlib import SCENARIOS, by_oracle, needs_checkpoints, needs_v1_runner, release_in, run, version_tuple


def _trace() -> Trace:
    t = Trace(vllm_version="test", mutant=None)
    t.prefixes = {"a": [0, 1, 2, 3, 11, 5, 6, 7, 12]}
    return t


# -- pure-function checks on hand-made traces ---------------------------------------------------------
def test_live_column_ignores_stale_columns_below_the_window():
    t = _trace()
    t.rows.append(RowView(3, "a", 1, "RUNNING", 8, 4, 1, 2, [1, 2], [5, 6, 7], [0, 6, 7]))
    assert live_columns(t) == []
    t.rows.append(RowView(4, "a", 1, "RUNNING", 8, 4, 1, 2, [1, 2], [5, 6, 7], [0, 6, 9]))
    (f,) = live_columns(t)
    assert f.columns == [2] and f.step == 4


def test_provenance_compares_both_conv_and_ssm():
    t = _trace()
    t.reads.append(Read(1, "a", "initial", 1, 0, 3, (4, 11), (4, 11), (4, 11)))
    assert provenance(t) == []
    t.reads.append(Read(2, "a", "initial", 1, 0, 3, (4, 11), (8, 12), (4, 11)))
    (f,) = provenance(t)
    assert "a[:8]" in f.actual and "a[:4]" in f.expected


def test_publication_names_each_key_published_while_its_writer_is_in_flight():
    t = _trace()
    assert publication(t) == []
    t.published_in_flight.append((6, 9, "a[:32]", 7))
    (f,) = publication(t)
    assert f.signature == "publication:in-flight" and f.step == 6 and "step 7" in f.actual and "block 9" in f.actual


def test_cache_integrity_reports_a_poisoned_entry_once():
    t = _trace()
    for step in (1, 2, 3):
        t.cache.append(CacheCheck(step, 6, 8, "a", (4, 11), (4, 11)))  # the key names a[:8]
    (f,) = cache_integrity(t)
    assert f.step == 1 and "block 6" in f.expected


def test_pool_accounting_and_exception():
    t = _trace()
    t.pool_end = {"num_blocks": 8, "num_free": 7, "free_walk": list(range(1, 8)), "free_cycle": [],
                  "ref_cnt": {}, "null_block": 0, "live_requests": []}
    assert pool_accounting(t) == []
    t.pool_end = dict(t.pool_end, num_free=6, free_walk=list(range(1, 7)), ref_cnt={7: 1})
    assert len(pool_accounting(t)) == 2
    t.exception = VllmException(5, "a", "allocate_slots", "ValueError()", "vllm/x.py:1 in f")
    # the pool is judged after an exception too (the driver frees every request first)
    assert len(pool_accounting(t)) == 2 and vllm_exception(t)[0].step == 5
    t.pool_end = None  # freeing after the exception raised as well: nothing to judge, trace.unjudged says why
    assert pool_accounting(t) == []


# -- scenarios through the real allocator ------------------------------------------------------------
def test_pool_accounting_trips_on_a_leaking_free():
    _, findings = run("seed-external-hit-same-block.json", "mamba-free-leaks-block")
    pool = by_oracle(findings, "pool-accounting")
    assert pool and any("ref counts" in f.actual for f in pool)


def test_vllm_exception_trips_on_admission_undercount():
    """A real vLLM behaviour: a sync external hit crossing a Mamba block is under-counted at admission."""
    trace, findings = run("sync-external-admission-undercount.json")
    (f,) = findings
    assert f.oracle == "vllm-exception" and f.request == "a" and "free blocks" in f.actual
    assert f.detail.startswith("allocate_slots raised at vllm/v1/core/block_pool.py")
    # judged after the exception: freeing the request returns every block (no leak besides the raise)
    assert trace.pool_end["num_free"] == trace.pool_end["num_blocks"] - 1 and not trace.unjudged


def test_vllm_exception_absent_when_the_pool_has_room():
    scenario = load_scenario(SCENARIOS / "sync-external-admission-undercount.json")
    roomy = scenario.model_copy(update={"geometry": scenario.geometry.model_copy(update={"num_blocks": 8})})
    _, findings = run(roomy)
    assert findings == []


@needs_checkpoints
def test_provenance_and_cache_trip_on_checkpoint_mid_block_start():
    """A real vLLM 0.33.0 behaviour: with prefill checkpoints a final chunk starting mid-block runs past
    the block boundary and its start block is cached under the boundary hash (docs/oracles.md)."""
    _, findings = run("checkpoint-midblock-start.json")
    cache = by_oracle(findings, "cache-integrity")
    prov = by_oracle(findings, "provenance")
    assert cache and "b[:48]" in cache[0].expected and "a[:36]" in cache[0].actual
    assert prov and prov[0].request == "c" and "b[:48]" in prov[0].expected


@pytest.mark.skipif(version_tuple() < (0, 27), reason="vLLM 0.26.0 refuses this scenario at engine start: its "
                    "3-token budget is below the 4-token Mamba block (sub-block chunks since 0.27.0)")
@needs_v1_runner  # the reset is V1's InputBatch.add_request: the mirror keeps the count where V1 is gone
def test_provenance_names_the_v1_accepted_reset():
    """A real V1 behaviour (protocol doc §6.6): re-adding a skipped spec-decode row resets num_accepted."""
    _, findings = run("spec-unscheduled-accepted-reset.json")
    prov = by_oracle(findings, "provenance")
    assert prov and prov[0].signature == "provenance:initial-after-accepted-reset"
    assert prov[0].request == "c" and "c[:6]" in prov[0].expected and "c[:5]" in prov[0].actual


# -- liveness -------------------------------------------------------------------------------------------
def _ended(reason, unfinished, *, tokens=40, idle=1, load=0, blocks=32, stalled=0):
    from harness.trace import RunEnd

    t = _trace()
    t.end = RunEnd(reason, 9, idle, {r: "waiting" for r in unfinished}, {"a": tokens, "b": 4}, load, blocks, (8, 8), 0,
                   stalled_steps=stalled)
    return t


def test_liveness_trips_when_a_request_the_pool_holds_is_never_finished():
    (f,) = liveness(_ended("stuck", ["a"]))
    assert f.signature == "liveness:stuck" and f.request == "a" and "of the pool's 31 usable blocks" in f.expected
    assert liveness(_ended("done", [])) == [] and liveness(_ended("stuck", [])) == []


def test_liveness_leaves_a_request_larger_than_the_pool_and_a_load_in_flight():
    from harness.trace import blocks_to_hold, largest_request

    largest = largest_request(32, 8, 0)
    assert blocks_to_hold(largest, (8, 8), 0) == 31 and blocks_to_hold(largest + 1, (8, 8), 0) == 32
    assert liveness(_ended("stuck", ["a"], tokens=largest)) and not liveness(_ended("stuck", ["a"], tokens=largest + 1))
    # at the step limit, idle steps a load in flight explains (plus the report step and the async lag) are fine
    assert liveness(_ended("step-limit", ["a"], idle=5, load=3)) == []
    assert liveness(_ended("step-limit", ["a"], idle=6, load=3))[0].signature == "liveness:step-limit"


def test_liveness_trips_on_a_thrash_that_only_recomputes_past_the_bound():
    from harness.oracles import livelock_bound

    bound = livelock_bound(_ended("step-limit", ["a"], load=3).end)
    assert bound == 40 + 4 + 3 + 2  # every request recomputing all it holds, a token a step, after the load
    assert liveness(_ended("step-limit", ["a"], load=3, stalled=bound)) == []
    (f,) = liveness(_ended("step-limit", ["a"], load=3, stalled=bound + 1))
    assert f.signature == "liveness:livelock" and "computed past" in f.detail
    assert liveness(_ended("done", [], stalled=bound + 1)) == []  # a run that finished is never one


def test_a_request_larger_than_the_pool_is_bad_input():
    from harness.errors import BadInput
    from harness.scenario import parse_scenario

    doc = {"version": 1, "geometry": {"hash_block_size": 8, "attn_block_size": 8, "mamba_block_size": 8,
                                      "num_blocks": 16, "max_model_len": 512},
           "requests": [{"id": "a", "prompt": {"length": 113, "seed": 1}, "max_tokens": 1}]}
    with pytest.raises(BadInput, match="more than the pool's 15 usable"):
        parse_scenario(doc)  # 114 tokens: at least 15 attention blocks and the Mamba group's running state
    doc["requests"][0]["prompt"]["length"] = 95
    parse_scenario(doc)  # 96 tokens: 12 attention blocks, and at most 3 Mamba blocks: the liveness oracle judges it


@pytest.mark.parametrize("tier", ["symbolic", "engine"])
def test_liveness_trips_on_an_admission_that_over_reserves(tier):
    """The stall mutant (admission counts a Mamba block for every block of the prompt) on a generated
    scenario with a prompt near the pool's capacity: the request waits forever; stock vLLM finishes it."""
    from harness.generate import random_scenario
    from harness.oracles import judge
    from harness.replay import replay
    from harness.run_config import RunConfig
    from testlib import mutant

    scenario = random_scenario(18, checkpoints=False)
    stock = replay(scenario, config=RunConfig(tier=tier))  # (0.26-0.27 show their seed bug here; no stall)
    assert stock.end.reason == "done" and not [f for f in judge(stock) if f.oracle == "liveness"]
    with mutant("mamba-admission-uncapped"):
        trace = replay(scenario, config=RunConfig(tier=tier, mutant="mamba-admission-uncapped"))
    assert "liveness:stuck" in [f.signature for f in judge(trace)], judge(trace)


@pytest.mark.parametrize("tier", ["symbolic", "engine"])
def test_a_step_that_only_preempts_is_not_a_stall(tier):
    """A stock `make fuzz` input filed liveness:stuck: a running request preempted itself (pool full: a waiting
    request holds blocks after its async load), so the step scheduled nothing, and the loop called the run stuck;
    the next step schedules the holder and both finish. Under async scheduling (the engine tier's V2 runner) the
    preemption waits a step for the in-flight batch (scheduler.py:940-941). Stuck now means: nothing scheduled
    and nothing changed (harness.trace.run_steps, each tier's `_progress`)."""
    from harness.oracles import judge
    from harness.replay import replay
    from harness.run_config import RunConfig
    from harness.scenario import load_scenario
    from testlib import ROOT

    trace = replay(load_scenario(ROOT / "tests" / "data" / "no-stall-after-self-preemption.json"),
                   config=RunConfig(tier=tier))
    assert trace.end.reason == "done" and not [f for f in judge(trace) if f.oracle == "liveness"]


def test_only_computing_past_a_high_water_mark_is_progress():
    from types import SimpleNamespace

    from harness.trace import _computed_past

    def reqs(**computed):
        return {r: SimpleNamespace(vreq=SimpleNamespace(num_computed_tokens=n)) for r, n in computed.items()}

    high = {}
    assert _computed_past(high, reqs(a=8, b=4)) and high == {"a": 8, "b": 4}
    assert not _computed_past(high, reqs(a=0, b=4))  # a preempted
    assert not _computed_past(high, reqs(a=8, b=0))  # a recomputed, b preempted: a thrash
    assert _computed_past(high, reqs(a=9, b=0)) and high["a"] == 9


@pytest.mark.skipif(not release_in("0.27.0-0.28.x"), reason="the livelock is 0.27.x-0.28.x's (0.26.0 schedules this "
                    "input otherwise; 0.30.0 makes no preemption that frees nothing)")
def test_a_preemption_thrash_is_a_livelock_the_known_deferred_free_fix_removes():
    """vLLM 0.27.1's V1 engine under async scheduling with a KV consumer connector: preempting a request the step in
    flight holds frees nothing, so two requests preempt each other and themselves for ever (366 steps without
    progress). The run used to end at the step limit as "all oracles hold"; the thrash was first credited to the
    admission undercount, whose broader early fix only moved the schedule. The known issue is recognised by 0.30.0's
    rule (deferred-free-preemption-livelock), and with every known fix the run finishes clean."""
    from harness.verdict import replay_and_judge
    from harness.run_config import RunConfig

    sc = load_scenario(SCENARIOS / "findings/admission-livelock-hides-draft-state.json")
    v1 = RunConfig(tier="engine").but(runner="v1")
    _, findings, verdict = replay_and_judge(sc, config=v1.but(known_fixes=False))
    assert verdict.known == {"liveness:livelock": "deferred-free-preemption-livelock"} and not verdict.is_new
    _, findings, verdict = replay_and_judge(sc, config=v1.but(known_fixes=True))
    assert findings == [] and verdict is None


def test_a_budget_below_the_block_is_bad_input_where_the_release_refuses_it(tmp_path):
    """A token budget below the Mamba block (align mode): vLLM 0.26.0's engine start refuses it
    (`VllmConfig.validate_block_size`), so a request it would never schedule is no liveness finding but bad input
    (exit 2), on the mirrored tier and on the engine tier (vLLM's own check); 0.27.0+ chunk sub-block and run it."""
    import json

    from harness.cli import main
    from harness.vllm_adapter import supports_budget_below_block

    doc = {"version": 1, "name": "budget-below-block", "max_steps": 40,
           "geometry": {"hash_block_size": 16, "attn_block_size": 16, "mamba_block_size": 16, "num_blocks": 96,
                        "max_model_len": 512, "token_budget": 9},
           "requests": [{"id": "b", "prompt": {"length": 21, "seed": 2}, "max_tokens": 2}]}
    path = tmp_path / "budget.json"
    path.write_text(json.dumps(doc))
    expected = 0 if supports_budget_below_block() else 2
    assert supports_budget_below_block() == (version_tuple() >= (0, 27))
    for tier in ("symbolic", "engine"):
        assert main(["run", str(path), "--tier", tier, "--artifacts", str(tmp_path / tier)]) == expected, tier


@pytest.mark.slow
@pytest.mark.skipif(not release_in("0.26.0-0.29.x"), reason="the fix of deferred-free-preemption-livelock applies "
                    "where the scheduler has no check of its own (0.30.0+)")
def test_a_step_the_deferred_free_fix_leaves_empty_is_no_stall():
    """With the fix of deferred-free-preemption-livelock (0.30.0's rule) on 0.26-0.29, a running request whose victim's
    blocks the step in flight keeps waits a step: that step schedules nothing but takes the step in flight's output,
    after which the request preempts itself and resumes from its prefix. The step loop counts the processed step as a
    change (`processed_step_seq`); before, a Falcon-H1 0.26.0 campaign kept that empty step as a NEW liveness:stuck."""
    from harness.verdict import replay_and_judge
    from harness.run_config import RunConfig

    sc = load_scenario(SCENARIOS / "findings/unfreeable-preemption-waits-a-step.json")
    _, findings, _ = replay_and_judge(sc, config=RunConfig(tier="engine", known_fixes=True).but(runner="v1"))
    assert findings == []
