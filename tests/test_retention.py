"""Sparse prefix-cache retention (CacheConfig.prefix_cache_retention_interval, vLLM 0.33.0's default 0): the scenario
field, vLLM's own validation, the generator's draw, and the retention oracle (a prompt's replay-boundary state must
be cached where a chunk ends on it)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.errors import BadInput
from harness.generate import random_scenario
from harness.oracles import judge, replay_boundaries, retained_positions, retention
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import load_scenario, parse_scenario, scenario_to_json
from harness.trace import CacheCheck, Retention, RowView, Trace, _record_junctions
from harness.vllm_adapter import supports_retention
from testlib import ROOT, mutant

needs_retention = pytest.mark.skipif(not supports_retention(), reason="vLLM before 0.33.0: no sparse retention")

# a 22-token prompt prefilled one block per step (token budget 4): its chunks end on every block boundary, among them
# the resend's replay boundary 20; b resends it, c shares 13 tokens
CHUNKED = {"version": 1, "name": "retention", "geometry": {
    "hash_block_size": 4, "attn_block_size": 4, "mamba_block_size": 4, "num_blocks": 64, "max_model_len": 256,
    "token_budget": 4, "prefix_cache_retention_interval": 0},
    "requests": [{"id": "a", "prompt": {"length": 22, "seed": 1}, "max_tokens": 2},
                 {"id": "b", "prompt": {"length": 22, "seed": 1, "share": {"request": "a", "tokens": 22}},
                  "arrival_step": 8, "max_tokens": 2},
                 {"id": "c", "prompt": {"length": 30, "seed": 3, "share": {"request": "a", "tokens": 13}},
                  "arrival_step": 12, "max_tokens": 2}],
    "max_steps": 80}


def _with(interval) -> dict:
    doc = json.loads(json.dumps(CHUNKED))
    doc["geometry"]["prefix_cache_retention_interval"] = interval
    return doc


def test_a_dense_scenario_document_is_unchanged_and_a_sparse_one_keeps_its_interval():
    dense = _with(None)
    del dense["geometry"]["prefix_cache_retention_interval"]
    assert "prefix_cache_retention_interval" not in scenario_to_json(parse_scenario(dense))["geometry"]
    assert scenario_to_json(parse_scenario(_with(0)))["geometry"]["prefix_cache_retention_interval"] == 0
    with pytest.raises(BadInput):
        parse_scenario(_with(-4))


def test_a_release_without_sparse_retention_refuses_it(monkeypatch):
    import harness.vllm_adapter as adapter

    monkeypatch.setattr(adapter, "supports_retention", lambda: False)
    with pytest.raises(BadInput, match="no sparse prefix-cache retention"):
        replay(parse_scenario(_with(0)))
    assert judge(replay(parse_scenario(_with(None)))) == []  # dense needs nothing of the release


@needs_retention
def test_vllm_refuses_an_interval_that_is_not_a_multiple_of_the_scheduler_block():
    with pytest.raises(BadInput, match="multiple of scheduler_block_size"):
        replay(parse_scenario(_with(6)))


@needs_retention
@pytest.mark.parametrize("tier", ["symbolic", "engine"])
def test_sparse_retention_caches_only_semantic_checkpoints_and_every_oracle_holds(tier):
    """Dense: every chunk end is cached. Interval 0: a's replay boundary (20) and the junction c establishes (12)
    only; interval 8 adds one per 8 tokens. b's resend hits 20 under all three (mirrored tier)."""
    config = RunConfig(tier=tier).but(async_scheduling="off") if tier == "engine" else RunConfig(tier=tier)
    keys = {}
    for interval in (None, 0, 8):
        trace = replay(parse_scenario(_with(interval)), config=config)
        assert judge(trace) == [], interval
        keys[interval] = {(c.prefix_owner, c.prefix_tokens) for c in trace.cache if c.prefix_owner == "a"}
        hits = {c.request: c.returned for c in trace.calls if c.name == "get_computed_blocks"}
        assert tier == "engine" or hits["b"] == 20  # (the engine tier records no allocator calls)
    assert keys[None] == {("a", n) for n in (4, 8, 12, 16, 20)}
    assert keys[0] == {("a", 12), ("a", 20)}
    assert keys[0] < keys[8] < keys[None]


@needs_retention
@pytest.mark.parametrize("name", ["mamba-retention-resend-boundary-at-prompt-end"])
def test_the_retention_oracle_catches_a_dropped_replay_boundary(name):
    """A block-aligned 16-token prompt prefilled a block per step: its resend boundary is 8; the mutant keeps 16. A
    hash unit finer than the block (1 token), so the prompt-tail key (at P - 1 = 15) is not the boundary's."""
    doc = _with(0)
    doc["geometry"].update(hash_block_size=1, attn_block_size=8, mamba_block_size=8, token_budget=8)
    doc["requests"] = [{"id": "a", "prompt": {"length": 16, "seed": 1}, "max_tokens": 1}]
    scenario = parse_scenario(doc)
    assert judge(replay(scenario)) == []
    with mutant(name):
        found = judge(replay(scenario, config=RunConfig(mutant=name)))
    assert [f.signature for f in found] == ["retention:replay-boundary"]
    assert "a[:8]" in found[0].expected


def test_replay_boundaries_follow_vllms_contract():
    assert replay_boundaries(22, 4, False) == (20,)
    assert replay_boundaries(20, 4, False) == (16,)  # a resend is capped at P - 1
    assert replay_boundaries(3, 4, False) == ()
    assert replay_boundaries(22, 4, True) == (16,)  # EAGLE: both land a block lower
    assert replay_boundaries(20, 4, True) == (12, 16)


def _trace(cached_at: int | None) -> Trace:
    trace = Trace(vllm_version="test", mutant=None, retention=Retention(0, 4, False))
    trace.prefixes["a"] = list(range(100, 123))
    trace.prompt_tokens["a"] = 22
    trace.rows.append(RowView(3, "a", 1, "RUNNING", 16, 4, 3, 4, [3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]))
    if cached_at is not None:
        state = (20, trace.prefixes["a"][20])
        trace.cache.append(CacheCheck(cached_at, 5, 20, "a", state, state))
    return trace


def test_junctions_and_interval_multiples_are_retained_positions_too():
    trace = _trace(None)
    trace.junctions["a"] = [(2, 13), (4, 17)]
    assert retained_positions(trace, "a", 1) == {20}  # the junction was found only at step 2
    assert retained_positions(trace, "a", 2) == {12, 20}  # floored to the block
    assert retained_positions(trace, "a", 4) == {16, 20}  # a later lookup replaced it
    trace.junctions["a"].append((6, 0))
    assert retained_positions(trace, "a", 6) == {20}  # a lookup that found none resets it
    del trace.junctions["a"][-1]
    trace.retention = Retention(8, 4, True)
    assert retained_positions(trace, "a", 2) == {8, 12, 16}  # EAGLE: a block lower; multiples of 8
    trace.rows[0] = RowView(3, "a", 1, "RUNNING", 8, 4, 2, 3, [2, 3], [0, 1, 2, 3], [0, 1, 2, 3])
    assert [f.signature for f in retention(trace)] == ["retention:checkpoint"]


def test_the_retention_oracle_is_a_pure_function_of_the_trace():
    assert [f.signature for f in retention(_trace(None))] == ["retention:replay-boundary"]
    assert retention(_trace(3)) == [] and retention(_trace(1)) == []  # cached this step, or earlier
    assert [f.step for f in retention(_trace(4))] == [3]  # cached only after the step: too late
    dense = _trace(None)
    dense.retention = None
    assert retention(dense) == []


@needs_retention
def test_the_sweep_draws_vllms_retention_values_from_a_stream_of_its_own():
    plain = [random_scenario(s, checkpoints=False) for s in range(60)]
    drawn = [random_scenario(s, checkpoints=False, retention=True) for s in range(60)]
    values = [d.geometry.prefix_cache_retention_interval for d in drawn]
    assert {None, 0} <= set(values) and any(v for v in values)
    for p, d in zip(plain, drawn):
        assert scenario_to_json(p)["requests"] == scenario_to_json(d)["requests"]
        v = d.geometry.prefix_cache_retention_interval
        assert v is None or v % d.geometry.scheduler_block_size == 0


def test_a_lookup_that_finds_no_junction_is_recorded_as_a_reset():
    """vLLM assigns every lookup's junction (0 when none), and cache_blocks reads the current one: a request
    deferred after a lookup that found a junction, then looked up again after the sharer's blocks were evicted,
    keeps no junction state (the seed-7 harness error of a stock make fuzz, where a stale junction was judged)."""
    trace = _trace(None)
    steps = [(7, 5), (8, 5), (12, 0), (13, 0), (15, 9)]
    for step, junction in steps:
        _record_junctions(trace, step, {"b": SimpleNamespace(vreq=SimpleNamespace(shared_prefix_boundary=junction))})
    assert trace.junctions["b"] == [(7, 5), (12, 0), (15, 9)]


@pytest.mark.skipif(not supports_retention(), reason="sparse retention arrives in vLLM 0.33.0")
def test_a_reset_junction_is_not_judged_on_the_fixed_system():
    """Stock make fuzz (seed 7) once exited 3 on this input: with the known fixes applied request b's first chunk
    ends on its stale junction's block, which vLLM no longer holds (a later lookup found none)."""
    from harness.verdict import replay_and_judge

    sc = load_scenario(ROOT / "scenarios/findings/retention-junction-reset-by-a-later-lookup.json")
    trace, findings, verdict = replay_and_judge(sc, config=RunConfig(tier="symbolic", known_fixes=True))
    assert trace.junctions["b"][-1][1] == 0
    assert not [f for f in findings if f.oracle == "retention"]
    assert verdict is None or not verdict.revealed


def test_the_0_29_retention_fixes_give_the_boundaries_later_releases_keep(monkeypatch):
    """0.29.0 hands reachable_block_mask [num_prompt - 1, junction]; its two fixes rewrite that list as 0.30.0
    (get_replay_boundaries: the blocks an EAGLE resend and a longer sibling land on) and 0.33.0 (the block below the
    junction) keep it, each alone or both, and leave a run without EAGLE alone."""
    from harness.fixes import retention

    monkeypatch.setattr(retention, "_ON_029", set())
    mask = retention._boundaries_029(lambda cls, **kwargs: kwargs["reachable_boundaries"])

    def kept(boundaries, use_eagle=True):
        return mask(None, use_eagle=use_eagle, alignment_tokens=16, kv_cache_spec=SimpleNamespace(block_size=16),
                    reachable_boundaries=boundaries)

    assert kept([64, 32]) == [64, 32]  # neither fix on: vLLM's own list
    retention._ON_029.add("replay")
    assert kept([64]) == [48]  # a 65-token prompt: resend and sibling both land at 48
    assert kept([63]) == [32, 48]  # a block-aligned 64-token prompt: the resend at 32, a sibling at 48
    retention._ON_029.add("junction")
    assert kept([64, 32]) == [48, 32, 16]
    retention._ON_029.discard("replay")
    assert kept([64, 32]) == [64, 32, 16]
    assert kept([64, 32], use_eagle=False) == [64, 32]
