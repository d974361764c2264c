"""Mamba cache mode "none" (prefix caching off, vLLM's default without --enable-prefix-caching): the engine tier
runs it with vLLM's own V1 and V2 runners; the mirrored tiers, align-only, refuse it as bad input."""

from __future__ import annotations

import json

import pytest

from harness.errors import BadInput
from harness.generate import random_scenario
from harness.oracles import judge
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import parse_scenario
from testlib import mutant

NONE = {"version": 1, "name": "mode none", "geometry": {
    "hash_block_size": 4, "attn_block_size": 4, "mamba_block_size": 4, "num_blocks": 64, "max_model_len": 64,
    "num_speculative_tokens": 2, "mamba_cache_mode": "none"},
    "requests": [{"id": "a", "prompt": {"length": 11, "seed": 1}, "max_tokens": 6, "acceptance": [2, 0, 1]},
                 {"id": "b", "prompt": {"length": 5, "seed": 2}, "arrival_step": 1, "max_tokens": 5,
                  "acceptance": [1]}]}


def _engine(runner: str) -> RunConfig:
    return RunConfig(tier="engine").but(runner=runner, async_scheduling="off")


def test_prefix_caching_features_are_refused_in_mode_none():
    for geometry in ({"prefill_checkpoint": True}, {"eagle_block_drop": True}):
        with pytest.raises(BadInput, match="prefix-caching features"):
            parse_scenario({**NONE, "geometry": {**NONE["geometry"], **geometry}})
    external = {**NONE["requests"][0], "external": {"tokens": 4}}
    with pytest.raises(BadInput, match="external"):
        parse_scenario({**NONE, "requests": [external]})


def test_the_mirrored_tiers_refuse_mode_none():
    with pytest.raises(BadInput, match="align mode only"):
        replay(parse_scenario(NONE))


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_vllms_runners_run_mode_none_and_read_each_state_where_the_kernels_do(runner):
    """One Mamba block per request (max_model_len long) plus K speculative blocks; the decode kernels read the
    state at column num_accepted - 1 and write one per token: every read holds the prefix it should."""
    try:
        trace = replay(parse_scenario(NONE), config=_engine(runner))
    except BadInput as exc:
        pytest.skip(f"runner {runner} cannot run here: {exc}")
    assert judge(trace) == [] and trace.end.reason == "done"
    assert {len(r.core_row) for r in trace.rows} == {3}  # 1 + K blocks in the Mamba group's row
    assert len(trace.reads) >= 4 and not trace.cache  # states read every decode step; nothing is cached


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_a_mode_none_allocator_mutant_is_caught_on_the_engine_tier(runner):
    name = "mamba-none-spec-blocks-dropped"
    config = _engine(runner)
    scenario = parse_scenario(NONE)
    try:
        assert judge(replay(scenario, config=config)) == []
    except BadInput as exc:
        pytest.skip(f"runner {runner} cannot run here: {exc}")
    with mutant(name):
        assert judge(replay(scenario, config=config.but(mutant=name)))


def test_engine_sweeps_draw_mode_none_only_where_vllms_runners_run():
    from harness.genome import release_budget

    assert release_budget(tier="engine", runner="mirror").cache_modes == ("align",)
    assert release_budget(tier="symbolic").cache_modes == ("align",)
    modes = release_budget(tier="engine", runner="auto").cache_modes
    drawn = [random_scenario(s, checkpoints=False, modes=modes).geometry.mamba_cache_mode for s in range(100)]
    assert 10 <= drawn.count("none") <= 45
    # the mode comes from a stream of its own: every other draw of the seed is the align scenario's
    seed = next(s for s in range(100) if drawn[s] == "none")
    none, align = random_scenario(seed, checkpoints=False, modes=modes), random_scenario(seed, checkpoints=False)
    assert align.geometry.mamba_cache_mode == "align"
    assert [(r.prompt, r.max_tokens, r.arrival_step) for r in none.requests] == \
        [(r.prompt, r.max_tokens, r.arrival_step) for r in align.requests]
    assert none.geometry.model_copy(update={"mamba_cache_mode": "align", "eagle_block_drop": align.geometry.eagle_block_drop}) \
        == align.geometry


ALL = {"version": 1, "name": "mode all", "geometry": {
    "hash_block_size": 256, "attn_block_size": 256, "mamba_block_size": 256, "num_blocks": 64, "max_model_len": 4096,
    "token_budget": 600, "mamba_cache_mode": "all"},
    "requests": [{"id": "a", "prompt": {"length": 900, "seed": 1}, "max_tokens": 4},
                 {"id": "b", "prompt": {"length": 1100, "seed": 2, "share": {"request": "a", "tokens": 800}},
                  "max_tokens": 4, "arrival_step": 4}]}


def _has_all() -> bool:
    from harness.engine.config import has_cache_mode_all

    return has_cache_mode_all()


def test_mode_all_is_bad_input_where_vllm_lacks_it_or_configures_it_otherwise():
    """0.26-0.32 ship a third mode, `all`; 0.33.0 does not (exit 2 naming the release). Where vLLM has it, a
    geometry vLLM would not build for it (a Mamba block that is no multiple of the Mamba2 chunk) is bad input."""
    from harness.vllm_adapter import installed_version

    doc = {**NONE, "geometry": {**NONE["geometry"], "mamba_cache_mode": "all"}}
    match = "multiple of the Mamba2 chunk" if _has_all() else installed_version().replace(".", r"\.")
    with pytest.raises(BadInput, match=match):
        replay(parse_scenario(doc), config=_engine("v1"))


def test_mode_all_caches_every_block_boundary_state_on_the_v1_runner():
    if not _has_all():
        pytest.skip("this vLLM release has no Mamba cache mode 'all' (0.26-0.32)")
    trace = replay(parse_scenario(ALL), config=_engine("v1"))
    assert judge(trace) == [] and trace.end.reason == "done"
    # every full block's state is cached (its key resolves to a block holding the state at that boundary)
    assert {c.prefix_tokens for c in trace.cache} >= {256, 512, 768, 1024}
    # b's 768-token hit: its first read is the state at the last cached boundary before its shared 800 tokens
    first_b = next(r for r in trace.reads if r.request == "b")
    assert first_b.fed[0] == 768 and first_b.conv == first_b.fed
    with pytest.raises(BadInput, match="mirrored tiers follow align mode only"):
        replay(parse_scenario(ALL))


def test_generated_mode_all_scenarios_are_ones_vllm_configures():
    from harness.generate import with_all_mode
    from harness.scenario import scenario_to_json

    for seed in range(30):
        doc = with_all_mode(scenario_to_json(random_scenario(seed, checkpoints=False)))
        g = parse_scenario(doc).geometry
        assert g.mamba_block_size % 256 == 0 and g.hash_block_size == g.mamba_block_size
        assert not g.eagle_block_drop and not g.prefill_checkpoint and g.mamba_cache_mode == "all"
    # speculative decoding as the generator drew it (vLLM runs drafts in mode all: mamba_mixer2.py, 0.26-0.31)
    assert {with_all_mode(scenario_to_json(random_scenario(s, checkpoints=False)))["geometry"]["num_speculative_tokens"]
            for s in range(30)} >= {0, 1}


def test_mode_all_with_drafts_misplaces_the_block_boundary_state():
    """vLLM 0.26.0-0.31.x, mode all with drafts (K = 2): a decode step whose drafts cross a block boundary writes
    the state after each query token to the columns from its last scheduled token's block on (mamba_mixer2.py:
    output_indices), so the block it completed is cached holding the state before the step; and after the drafts
    past the boundary are rejected, the next step reads its conv window from the last computed token's block,
    where the previous step did not write it (scenarios/releases/g15-mode-all-drafts-boundary-state.json)."""
    if not _has_all():
        pytest.skip("this vLLM release has no Mamba cache mode 'all' (0.26-0.31)")
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[1] / "scenarios" / "releases" /
                      "g15-mode-all-drafts-boundary-state.json").read_text())
    findings = judge(replay(parse_scenario(doc), config=_engine("v1")))
    wrong_block = [f for f in findings if f.oracle == "cache-integrity"]
    stale_conv = [f for f in findings if f.signature == "provenance:initial"]
    assert wrong_block and "a[:256]" in wrong_block[0].expected and "ssm a[:255]" in wrong_block[0].actual
    assert stale_conv and "conv a[:255], ssm a[:256]" in stale_conv[0].actual
    # all drafts accepted: the same block is still cached with the state before the step, and nothing is read stale
    doc["requests"][0]["acceptance"] = [2]
    findings = judge(replay(parse_scenario(doc), config=_engine("v1")))
    assert {f.oracle for f in findings} == {"cache-integrity"}


def test_a_replay_does_not_depend_on_the_one_before_it_in_the_process():
    """A scenario is a fresh engine: the V2 runner kept between replays gets its block tables back as built, so a
    kernel reading past a row (the mutant drops mode none's speculative blocks) reads what a fresh runner reads,
    whatever ran before (a stock replay of the same scenario left its block ids in that row)."""
    from pathlib import Path

    from harness.scenario import load_scenario

    scenario = load_scenario(Path(__file__).parent / "data" / "v2-replay-order-mode-none.json")
    config = RunConfig(tier="engine").but(runner="auto")
    name = "mamba-none-spec-blocks-dropped"
    try:
        replay(scenario, config=config)
    except BadInput as exc:
        pytest.skip(f"vLLM's pick cannot run here: {exc}")

    def signatures(with_mutant: bool) -> set[str]:
        if not with_mutant:
            return {f.signature for f in judge(replay(scenario, config=config))}
        with mutant(name):
            return {f.signature for f in judge(replay(scenario, config=config.but(mutant=name)))}

    first = signatures(True)
    assert first and signatures(False) == set()
    assert signatures(True) == first


def test_a_pinned_mamba_cache_mode_puts_every_generated_input_in_it():
    """`--mamba-cache-mode none|all` (sweep, fuzz): every generated scenario and every byte-genome input in that
    mode, for a nightly job per mode; where the tier, runner or release does not run it, bad input naming why."""
    import random as rnd

    from harness.genome import decode, generator_input, random_bytes, run_budget

    config = _engine("v1").but(cache_mode="none")
    budget = run_budget(config)
    assert budget.cache_modes == ("none",)
    rng = rnd.Random(0)
    generated = [decode(generator_input(rng, seed=s), budget) for s in range(20)]
    genomes = [decode(random_bytes(rng), budget) for _ in range(40)]
    assert {s.geometry.mamba_cache_mode for s in generated + genomes} == {"none"}
    # drawn by default: both modes among the same inputs
    drawn = {decode(random_bytes(rnd.Random(s)), run_budget(_engine("v1"))).geometry.mamba_cache_mode for s in range(80)}
    assert {"align", "none"} <= drawn
    assert RunConfig.from_json(config.as_json()) == config and RunConfig.from_env(config.to_env()) == config
    with pytest.raises(BadInput, match="engine tier with vLLM's runners"):
        RunConfig(tier="symbolic", cache_mode="none")
    with pytest.raises(BadInput, match="engine tier with vLLM's runners"):
        _engine("mirror").but(cache_mode="none")
    with pytest.raises(BadInput, match="unknown Mamba cache mode"):
        RunConfig(cache_mode="sometimes")
    if _has_all():
        assert {decode(random_bytes(rng), run_budget(_engine("v1").but(cache_mode="all"))).geometry.mamba_cache_mode
                for _ in range(20)} == {"all"}
    else:
        with pytest.raises(BadInput, match="has no mode all"):
            run_budget(_engine("v1").but(cache_mode="all"))


def test_a_mutant_of_one_mode_runs_its_campaigns_in_that_mode():
    from harness.mutation import mutant_config

    config = mutant_config("mamba-none-spec-blocks-dropped")
    assert config.tier == "engine" and config.cache_mode == "none"
