"""extract_hidden_states (`geometry.hidden_state_layers`, `--extract-hidden-states N`): vLLM gives its cache-only
layer a group whose block is below the Mamba block, and the engine core lowers `cache_config.block_size`, the grid
the Scheduler's Mamba split aligns chunk ends to, to that block (bench/results/block_sizes.md)."""

from __future__ import annotations

import random

import pytest

from harness.errors import BadInput
from harness.genome import budget_scenario, decode, random_bytes, run_budget
from harness.oracles import judge
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import parse_scenario, scenario_to_json

from testlib import release_in


def _doc(**geometry) -> dict:
    g = {"hash_block_size": 124, "attn_block_size": 992, "mamba_block_size": 992, "num_blocks": 128,
         "max_model_len": 8192, "num_speculative_tokens": 1, "token_budget": 1500, "model": "nemotron-h-4b",
         "hidden_state_layers": 3, **geometry}
    return {"version": 1, "name": "hidden-states", "geometry": g, "max_steps": 400, "events": [], "requests": [
        {"id": "a", "prompt": {"length": 2600, "seed": 1}, "max_tokens": 2, "acceptance": [0]},
        {"id": "b", "prompt": {"length": 2700, "seed": 2, "share": {"request": "a", "tokens": 2000}},
         "arrival_step": 8, "max_tokens": 2, "acceptance": [0]}]}


def test_the_field_names_its_cause_and_stays_out_of_documents_without_it():
    for bad in ({"model": None}, {"num_speculative_tokens": 2}, {"eagle_block_drop": True},
                {"mamba_cache_mode": "none"}):
        with pytest.raises(BadInput, match="hidden_state_layers"):
            parse_scenario(_doc(**bad))
    assert scenario_to_json(parse_scenario(_doc()))["geometry"]["hidden_state_layers"] == 3
    assert "hidden_state_layers" not in scenario_to_json(parse_scenario(_doc(hidden_state_layers=0)))["geometry"]
    with pytest.raises(BadInput, match="--extract-hidden-states"):
        RunConfig(tier="symbolic", hidden_states=3)
    config = RunConfig(tier="engine", hidden_states=3)
    assert RunConfig.from_json(config.as_json()) == config == RunConfig.from_env(config.to_env())
    assert "hidden_states" not in RunConfig(tier="engine").as_json()


def _nemotron_hidden():
    """Nemotron-H 4B under `--block-size 16` (blocks 976, 992 with a draft, on every release; vLLM 0.34.0's 64-token
    default gives 1024), with three aux hidden-state layers."""
    from harness.engine.model_catalog import hidden_entry

    return hidden_entry(("nemotron-h-4b", (976, 992), 7), 3)


def test_vllm_puts_the_hidden_states_in_a_group_below_the_mamba_block_and_the_engine_core_takes_it():
    """vLLM's grouping gives the cache-only layer (3 aux layers of Nemotron-H's hidden size 3136, bf16: 18816
    bytes a token) the block whose page matches the others' (992 tokens of 4096 bytes): 124 from 0.28.0 (a
    divisor of the group blocks), 215 before; `cache_config.block_size` becomes it on every release. 0.26-0.27
    hash by lcm(992, 215), which divides no group's block: vLLM refuses that at engine start (the coordinator)."""
    from harness.engine.config import vllm_config
    from harness.engine.model_geometry import engine_block_size, group_kinds, model_groups

    name, blocks, _ = "nemotron-h-4b", (976, 992), None  # --block-size 16 (_nemotron_hidden)
    groups = model_groups(name, vllm_config(8, 2048, 65536, blocks[1], blocks[1], 1, False, "v1"), blocks[1],
                          "align", 1, 3).groups
    kinds = group_kinds(groups)
    hidden = groups[kinds.index("hidden")].kv_cache_spec.block_size
    mamba = {g.kv_cache_spec.block_size for g, k in zip(groups, kinds) if k == "mamba"}
    assert mamba == {blocks[1]} and hidden < blocks[1] and engine_block_size(groups) == hidden
    entry = _nemotron_hidden()
    if release_in("0.26.0-0.27.x"):  # hashed by lcm(992, 215), which vLLM's coordinator refuses at engine start
        assert entry is None and blocks[1] % hidden
    else:
        assert entry[2:] == (hidden, hidden) and blocks[1] % hidden == 0


def test_the_flag_puts_every_generated_input_under_extract_hidden_states():
    if _nemotron_hidden() is None:  # 0.26-0.27: no model runs it (Qwen3-Next's 4 aux layers: 68 and hash 544)
        for layers in (3, 4):
            with pytest.raises(BadInput, match="--extract-hidden-states"):
                run_budget(RunConfig(tier="engine", hidden_states=layers))
        return
    budget, rng = run_budget(RunConfig(tier="engine", hidden_states=3)), random.Random(0)
    scenarios = [decode(random_bytes(rng), budget) for _ in range(40)] + [budget_scenario(s, budget, True)
                                                                          for s in range(40)]
    assert all(sc.geometry.hidden_state_layers == 3 and sc.geometry.num_speculative_tokens == 1 for sc in scenarios)
    assert {sc.geometry.model for sc in scenarios} <= {"nemotron-h-4b", "qwen3-next-80b-a3b"}
    plain = run_budget(RunConfig(tier="engine"))  # without the flag inputs decode as they did
    assert not any(budget_scenario(s, plain, True).geometry.hidden_state_layers for s in range(40))


ISSUE = "hidden-state-group-splits-off-mamba-grid"
REPRO = "scenarios/hidden-state-group-splits-off-mamba-grid.json"


def test_a_chunk_ending_on_the_hidden_state_grid_leaves_a_wrong_state_under_a_mamba_block_key():
    """A's first chunk (budget 1500) ends at 1488 = 12 x 124, the hidden-state group's block, not at the Mamba
    block's 992; the state after 1488 tokens sits in the block vLLM then caches as the state after 1984, and B,
    sharing 2000 tokens, resumes from it. The finding is credited to the known issue, whose fix (the split on the
    Mamba block) removes it; with `cache_config.block_size` at the Mamba block the same scenario is clean too: the
    wrong state comes from the engine core's minimum (a vLLM bug, 0.28.0 on)."""
    import json

    import harness.engine.model_geometry as mg
    from harness.known_issues import ROOT, known_issue_by_id
    from harness.verdict import judge_scenario

    entry = _nemotron_hidden()
    issue = known_issue_by_id(ISSUE)
    assert issue.applicable() == (entry is not None) and issue.runs_on("engine") and not issue.runs_on("symbolic")
    if entry is None:
        pytest.skip("vLLM hashes extract_hidden_states's groups by a unit no scenario holds on this release")
    sc = parse_scenario(_doc(hash_block_size=entry[2]))
    repro = scenario_to_json(parse_scenario(json.loads((ROOT / REPRO).read_text())))
    assert {**repro, "name": "hidden-states"} == scenario_to_json(sc)  # the issue's repro is this scenario
    config = RunConfig(tier="engine")
    findings = judge(replay(sc, config=config))
    found = {f.signature for f in findings}
    assert {"cache-integrity", "provenance:precopy"} <= found or {"cache-integrity", "provenance:initial"} <= found
    verdict = judge_scenario(sc, findings, config=config)
    assert not verdict.is_new and verdict.known == dict.fromkeys(found, ISSUE)
    assert not judge(replay(sc, config=config.but(fixes=(ISSUE,))))
    real = mg.engine_block_size
    try:
        mg.engine_block_size = lambda groups: max(g.kv_cache_spec.block_size for g in groups)
        assert not judge(replay(sc, config=config))
    finally:
        mg.engine_block_size = real


def test_the_fix_applies_only_where_the_engine_core_lowers_the_split_grid(monkeypatch):
    """The fix's probe: a release whose engine core left `cache_config.block_size` at the Mamba block (an upstream
    fix keeping the hidden-state group out of the minimum) is not one the issue applies to."""
    import harness.engine.model_geometry as mg
    from harness.fixes import fix_by_name
    from harness.known_issues import known_issue_by_id

    probe = fix_by_name(known_issue_by_id(ISSUE).fix_name).applies
    assert probe() == (_nemotron_hidden() is not None)
    monkeypatch.setattr(mg, "engine_block_size", lambda groups: max(g.kv_cache_spec.block_size for g in groups))
    assert not probe()
