"""Real hybrid models' geometries (`geometry.model`, harness/engine/model_geometry.py): vLLM builds the KV cache
groups and the block size from a shipped config.json; every tier that runs them records and judges each group."""

from __future__ import annotations

import json
import re
import random
from collections import Counter
from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.generate import random_scenario, with_model
from harness.genome import Budget, decode, random_bytes
from harness.model_configs import load, read_path_or_name, shipped
from harness.oracles import judge
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import load_scenario, parse_scenario, scenario_to_json

from testlib import engine_runners, fixed_system, needs_v1_runner

DATA = Path(__file__).parent / "data"
SCENARIO = DATA / "model-granitemoehybrid-tiny.json"


def _engine(runner: str) -> RunConfig:
    return RunConfig(tier="engine").but(runner=runner)


def test_shipped_configs_load_and_unknown_names_are_bad_input(tmp_path):
    assert {"nemotron-h-4b", "granite-4.0-h-small", "granitemoehybrid-tiny"} <= set(shipped())
    for name in shipped():
        assert load(name)[1]["architectures"]
    with pytest.raises(BadInput, match="not a shipped model config"):
        load("no-such-model")
    doc = load_scenario(SCENARIO).model_dump()
    doc["geometry"]["model"] = "no-such-model"
    with pytest.raises(BadInput, match="geometry.model"):
        parse_scenario(doc)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(BadInput, match="not a JSON config"):
        read_path_or_name(str(tmp_path / "bad.json"))


def test_vllm_groups_a_real_model_into_several_mamba_groups_and_sets_the_block():
    from harness.engine.config import vllm_config
    from harness.engine.model_catalog import model_entry
    from harness.engine.model_geometry import model_groups

    name, blocks, num_groups = model_entry("nemotron-h-4b")
    vc = vllm_config(8, 2048, 65536, blocks[0], blocks[0], 0, False, "v1")
    mg = model_groups(name, vc, blocks[0], "align", 0)
    assert len(mg.groups) == num_groups
    assert len(mg.attn_groups) == 1 and len(mg.mamba_groups) > 1  # vLLM's grouping, not one group per kind
    assert all(g.kv_cache_spec.block_size == blocks[0] for g in mg.groups)  # align: attention block = Mamba block
    assert blocks[0] % 16 == 0 and blocks[1] >= blocks[0]  # FlashAttention's alignment; K drafts widen the state
    with pytest.raises(BadInput, match=r"sets the block size to (\d+)") as refused:
        model_groups(name, vc, 16, "align", 0)  # a block whose page cannot hold the model's Mamba state
    # --block-size 16 is raised to the least block that holds it; the default (64 from 0.34.0) to at least that
    raised = int(re.search(r"sets the block size to (\d+)", str(refused.value)).group(1))
    assert raised % 16 == 0 and raised <= blocks[0]


def test_with_model_keeps_every_count_against_hash_and_block_boundaries():
    doc = scenario_to_json(load_scenario(DATA / "model-granitemoehybrid-tiny.json"))
    base = scenario_to_json(random_scenario(3, checkpoints=False))
    g = base["geometry"]
    h, b = g["hash_block_size"], g["mamba_block_size"]
    before = [r["prompt"]["length"] for r in base["requests"]]
    moved = with_model(json.loads(json.dumps(base)), ("granitemoehybrid-tiny", (b * 34, b * 40, b * 44), 4))
    g2 = moved["geometry"]
    h2, b2 = g2["hash_block_size"], g2["mamba_block_size"]
    assert g2["model"] == "granitemoehybrid-tiny" and g2["attn_block_size"] == b2
    for x, y in zip(before, (r["prompt"]["length"] for r in moved["requests"])):
        assert (x % h, -(-x // b), x // h) == (y % h2, -(-y // b2), y // h2)
    assert g2["num_blocks"] == -(-g["num_blocks"] * 4 // 2)  # each group holds its own blocks
    assert doc["geometry"]["model"] == "granitemoehybrid-tiny"


@pytest.mark.parametrize("runner", ["v1", "v2", "mirror"])
def test_every_mamba_group_is_recorded_and_judged(runner):
    if runner not in engine_runners(runner):
        pytest.skip("this vLLM has no V1 model runner (removed in 0.34.0)")
    try:
        trace = replay(load_scenario(SCENARIO), config=_engine(runner))
    except BadInput as exc:  # vLLM's V2 runner where the release has none the harness follows (< 0.32)
        if runner != "v2":
            raise
        pytest.skip(str(exc))
    assert judge(trace) == [] and trace.end.reason == "done"
    rows = Counter(r.group for r in trace.rows)
    groups = sorted(rows)
    assert len(groups) == 3 and len(set(rows.values())) == 1  # three Mamba groups, each row recorded per group
    reads = Counter((r.group, r.what) for r in trace.reads)
    assert {g for g, _ in reads} == set(groups) and reads[(groups[-1], "initial")] == reads[(groups[0], "initial")]
    assert {c.block for c in trace.cache} and trace.end.groups == (1, 3)


@needs_v1_runner  # the V1 runner and its mutants; V2 runs these groups in the parametrized tests
def test_a_bug_in_the_second_mamba_group_is_found_only_on_a_multi_group_model():
    from harness.mutants import mutant_applied

    scenario = load_scenario(SCENARIO)
    doc = scenario_to_json(scenario)
    doc["geometry"].update(model=None, hash_block_size=4, attn_block_size=8, mamba_block_size=8, num_blocks=32,
                           max_model_len=256, token_budget=2048)
    for req, n in zip(doc["requests"], (30, 35)):
        req["prompt"]["length"] = n
    doc["requests"][1]["prompt"]["share"]["tokens"] = 25
    doc["requests"][1]["external"]["tokens"] = 31
    two_groups = parse_scenario(doc)
    with mutant_applied("mamba-copies-first-group-only"):
        red = judge(replay(scenario, config=_engine("v1").but(mutant="mamba-copies-first-group-only")))
        clean = judge(replay(two_groups, config=_engine("v1").but(mutant="mamba-copies-first-group-only")))
    assert red and {f.oracle for f in red} == {"provenance"} and min(f.group for f in red) > 0
    assert clean == []


def test_model_geometries_are_engine_tier_only_and_fuzzed_there():
    scenario = load_scenario(SCENARIO)
    with pytest.raises(BadInput, match="mirrored tiers"):
        replay(scenario, config=RunConfig(tier="symbolic"))
    with pytest.raises(BadInput, match="engine tier"):
        RunConfig(tier="symbolic", model_config="nemotron-h-4b")
    import random

    entry = ("granitemoehybrid-tiny", (272, 272, 272), 4)
    rng = random.Random(0)
    drawn = [decode(random_bytes(rng), Budget(align=True, models=(entry,))).geometry.model for _ in range(200)]
    assert 0 < drawn.count("granitemoehybrid-tiny") < 200  # a genome field picks it now and then
    always = [decode(random_bytes(rng), Budget(align=True, models=(entry,), model_always=True)) for _ in range(50)]
    assert all(s.geometry.model == "granitemoehybrid-tiny" for s in always)


def test_shipped_geometries_are_built_once_then_read_from_the_disk_cache(tmp_path, monkeypatch):
    """The catalog's entries (block per K, group count) are what vLLM builds; a second process reads them from
    the disk cache (keyed by release and the building code), and a corrupt cache file is rebuilt, not trusted. A
    refusal is not kept: it can come from the process's state (0.27.1's full suite once cached one for good)."""
    from harness.engine import model_catalog

    cache = tmp_path / "cache" / "model-geometries.json"
    monkeypatch.setattr(model_catalog, "CACHE", cache)
    monkeypatch.setattr(model_catalog, "_ENTRIES", {})
    built = model_catalog.model_entry("granitemoehybrid-tiny")
    assert built == ("granitemoehybrid-tiny", *model_catalog._build_entry("granitemoehybrid-tiny")[1:])
    doc = json.loads(cache.read_text())
    assert [v for v in doc.values()] == [{"blocks": list(built[1]), "groups": built[2]}]
    monkeypatch.setattr(model_catalog, "_ENTRIES", {})  # a fresh process: read from disk, not built
    monkeypatch.setattr(model_catalog, "_build_entry", lambda model: pytest.fail("built again"))
    assert model_catalog.model_entry("granitemoehybrid-tiny") == built
    cache.write_text("{corrupt")
    monkeypatch.setattr(model_catalog, "_ENTRIES", {})
    monkeypatch.setattr(model_catalog, "_build_entry", lambda model: (model, (8, 8, 8), 2))
    assert model_catalog.model_entry("granitemoehybrid-tiny") == ("granitemoehybrid-tiny", (8, 8, 8), 2)

    def refuse(model):
        raise BadInput("refused here")

    cache.unlink()
    monkeypatch.setattr(model_catalog, "_ENTRIES", {})
    monkeypatch.setattr(model_catalog, "_build_entry", refuse)
    with pytest.raises(BadInput, match="refused here"):
        model_catalog.model_entry("nemotron-h-4b")
    assert not cache.exists()  # nothing kept: the next process builds it again
    monkeypatch.setattr(model_catalog, "_build_entry", lambda model: (model, (16, 16, 16), 7))
    assert model_catalog.model_entry("nemotron-h-4b") == ("nemotron-h-4b", (16, 16, 16), 7)


@needs_v1_runner  # the V1 runner and its mutants; V2 runs these groups in the parametrized tests
def test_a_mamba1_model_runs_on_vllms_mamba1_builder_without_drafts_or_checkpoints(monkeypatch):
    """Jamba's Mamba layers are vLLM's `MambaMixer` (Mamba1): its groups are Mamba1 groups, both runners build them
    vLLM's Mamba1 metadata builder, the group declares no prefill checkpoint (vLLM's Mamba1 layer has none, whatever
    the scenario's flag), and drafts are refused (its decode kernels take no accepted counts)."""
    from vllm.v1.attention.backends import mamba1_attn, mamba2_attn

    from harness.engine.config import vllm_config
    from harness.engine.model_catalog import model_entry
    from harness.engine.model_geometry import group_mixers, model_groups

    name, blocks, num_groups = model_entry("jamba-v0.1")
    assert len(blocks) == 1 and num_groups > 2  # K = 0 only; several Mamba groups
    vc = vllm_config(8, 2048, 65536, blocks[0], blocks[0], 0, False, "v1")
    assert set(group_mixers(model_groups(name, vc, blocks[0], "align", 0).groups)) == {"attention", "mamba1"}
    with pytest.raises(BadInput, match="Mamba1 model with speculative decoding"):
        model_groups(name, vllm_config(8, 2048, 65536, blocks[0], blocks[0], 1, False, "v1"), blocks[0], "align", 1)
    built = Counter()
    for cls, key in ((mamba1_attn.Mamba1AttentionMetadataBuilder, 1), (mamba2_attn.Mamba2AttentionMetadataBuilder, 2)):
        def counted(self, *args, _original=cls.build, _key=key, **kwargs):
            built[_key] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(cls, "build", counted)
    doc = scenario_to_json(random_scenario(1))
    from harness.vllm_adapter import supports_prefill_checkpoints

    doc["geometry"].update(num_speculative_tokens=0, eagle_block_drop=False,
                           prefill_checkpoint=supports_prefill_checkpoints())
    for req in doc["requests"]:
        req["acceptance"] = []
    scenario = parse_scenario(with_model(doc, model_entry("jamba-v0.1")))
    assert scenario.geometry.model == "jamba-v0.1"
    for runner in ("v1", "v2"):
        try:
            trace = replay(scenario, config=_engine(runner))
        except BadInput as exc:  # vLLM's V2 runner where the release has none the harness follows (< 0.32)
            assert runner == "v2", exc
            continue
        assert judge(trace) == [] and trace.end.reason == "done" and trace.end.groups == (1, num_groups - 1)
    assert built[1] > 0 and built[2] == 0
    from harness.engine.config import build_scheduler, derive_geometry

    _, sched = build_scheduler(scenario, derive_geometry(scenario), "v1")
    specs = [g.kv_cache_spec for g in sched.kv_cache_config.kv_cache_groups]
    assert all(getattr(s, "num_prefill_checkpoint_blocks", 0) == 0 for s in specs)


@needs_v1_runner  # the V1 runner and its mutants; V2 runs these groups in the parametrized tests
def test_a_short_conv_model_keeps_a_conv_window_only_and_is_judged_with_drafts():
    """LFM2's conv layers are vLLM's `ShortConv`: its Mamba-like groups are ShortConv groups whose layers hold one
    state, the conv window, which vLLM's copies move alone (`short_conv_state_copy_func`); with drafts where the
    release's conv update takes the accepted counts (0.33; K = 0 before), every oracle holds on stock on both
    runners (releases without the seed bug), and a copy bug in a later conv group is found there."""
    from harness.engine.config import vllm_config
    from harness.engine.model_catalog import model_entry
    from harness.engine.model_geometry import decodes_with_accepted_counts, group_mixers, model_groups
    from harness.mutants import mutant_applied
    from harness.vllm_adapter import supports_budget_below_block
    from testlib import seed_bug_release

    try:
        name, blocks, num_groups = model_entry("lfm2-1.2b")
    except BadInput as exc:  # a release without vLLM's ShortConv state copy function or LFM2 class
        pytest.skip(f"LFM2 on this release: {exc}")
    drafts = decodes_with_accepted_counts("short_conv")
    assert len(blocks) == (3 if drafts else 1) and num_groups > 2  # several conv groups
    K = 1 if drafts else 0
    vc = vllm_config(8, 2048, 65536, blocks[K], blocks[K], K, False, "v1")
    assert set(group_mixers(model_groups(name, vc, blocks[K], "align", K).groups)) == {"attention", "short_conv"}
    budget = Budget(align=True, models=(model_entry("lfm2-1.2b"),), model_always=True,
                    budget_below_block=supports_budget_below_block())
    scenarios = [sc for sc in (decode(random_bytes(random.Random(s)), budget) for s in range(24))
                 if sc.geometry.model == name]
    assert any(sc.geometry.num_speculative_tokens for sc in scenarios) == drafts
    red = set()
    for sc in scenarios:
        for runner in ("v1", "v2"):
            try:
                with fixed_system(_engine(runner)):
                    found = judge(replay(sc, config=_engine(runner)))
            except BadInput as exc:  # vLLM's V2 runner where the release has none the harness follows (< 0.32)
                assert runner == "v2", exc
                continue
            assert seed_bug_release or found == [], (sc.name, runner)
            if runner == "v1":
                stock = {(f.signature, f.group) for f in found}
        config = _engine("v1").but(mutant="mamba-copies-first-group-only")
        with mutant_applied("mamba-copies-first-group-only"), fixed_system(config):
            red |= {f.group for f in judge(replay(sc, config=config))
                    if f.oracle == "provenance" and (f.signature, f.group) not in stock}
    assert red and min(red) > 0  # the first conv group is copied; the later ones are not


def test_conv_only_tags_read_the_conv_window_for_both_parts():
    from harness.engine.tagged import TaggedStates

    states = TaggedStates(4, 1, False, conv_only=True)
    assert len(states.tensors()) == 1
    states.write_tokens(2, [3, 3], [(5, 50), (6, 60)])
    assert states.read(2, 1, 3) == ((6, 60), (6, 60)) and states.page(3)[1] is None
    states.write_final(3, (7, 70))
    assert states.page(3) == (((7, 70), None), (7, 70))


def test_generator_inputs_keep_the_models_shipped_when_they_were_written():
    """A generator input draws from the models DRAW_ORDER had when it was written (the count in its draws byte; an
    input from before the count: four without DRAWS_EVERY_MODEL, five with it), so a model shipped later never
    changes the scenario a stored input decodes to; a new input draws from every shipped model."""
    from harness import genome
    from harness.engine.model_catalog import shipped_geometries
    from harness.model_configs import DRAW_ORDER

    models = shipped_geometries()
    if not {"lfm2-1.2b", "qwen3-next-80b-a3b"} <= {m[0] for m in models}:
        pytest.skip("this release builds no LFM2 or no Qwen3-Next geometry")
    budget = Budget(align=True, models=models)

    def drawn(draws: int) -> set:
        inputs = (genome.GENERATOR_MAGIC + seed.to_bytes(8, "little") + bytes([0, draws]) for seed in range(400))
        return {decode(data, budget).geometry.model for data in inputs} - {None}

    assert drawn(genome.DRAWS_RETENTION) == set(DRAW_ORDER[:4])
    assert drawn(genome.DRAWS_RETENTION | genome.DRAWS_EVERY_MODEL) == set(DRAW_ORDER[:5])
    assert drawn(genome.DRAWS_RETENTION | 5 << genome.MODELS_SHIFT) == set(DRAW_ORDER[:5])
    assert drawn(genome.generator_draws_byte()) == set(DRAW_ORDER) == {m[0] for m in models}
    # the same seed decodes alike under the legacy bit and its explicit count
    data = genome.GENERATOR_MAGIC + (7).to_bytes(8, "little")
    assert decode(data + bytes([0, 3]), budget) == decode(data + bytes([0, 1 | 5 << 2]), budget)


def test_model_config_puts_every_generated_input_on_the_model():
    """`--model-config` runs every generated scenario on that model: on a model followed without drafts only
    (Jamba: Mamba1), an input that drew drafts loses them instead of running on the harness's own geometry
    (before: 112 of 300 byte inputs and 145 of 300 generator inputs were on Jamba)."""
    from harness.genome import budget_scenario, run_budget

    config = RunConfig(tier="engine", model_config="jamba-v0.1")
    budget, rng = run_budget(config), random.Random(0)
    scenarios = [decode(random_bytes(rng), budget) for _ in range(100)] + [budget_scenario(s, budget, True)
                                                                           for s in range(100)]
    assert all(sc.geometry.model == "jamba-v0.1" and sc.geometry.num_speculative_tokens == 0 for sc in scenarios)
    assert all(not req.acceptance for sc in scenarios for req in sc.requests)


@pytest.mark.slow
@needs_v1_runner  # the V1 runner and its mutants; V2 runs these groups in the parametrized tests
def test_a_gated_delta_net_model_runs_on_vllms_gdn_builder_and_its_mutants_are_found(monkeypatch):
    """Qwen3-Next's linear-attention layers are vLLM's GatedDeltaNet: its Mamba-like groups are GDN groups whose
    metadata vLLM's own `GDNAttentionMetadataBuilder` builds (speculative rows by the runner's draft counts, not by
    query length). With drafts, every kernel path is reached (speculative rows, plain decodes, prefills in batches
    with and without speculative rows), every oracle holds on stock on both runners, and both GDN builder mutants
    are found by the V1 runner where stock is clean (releases with 0.32's zero-draft speculative rows; before, the
    known issue gdn-draftless-decode-first-column shows on stock, tests/test_engine_v1.py judges its repro)."""
    from harness.engine import mamba_meta
    from harness.engine.model_catalog import model_entry
    from harness.known_issues import known_issue_by_id
    from harness.genome import budget_scenario, run_budget
    from harness.mutants import mutant_applied
    from harness.mutants.gdn import GDN_MUTANTS, QWEN3_NEXT

    try:
        name, blocks, num_groups = model_entry(QWEN3_NEXT)
    except BadInput as exc:  # a release whose model class or GDN layer the harness does not follow
        pytest.skip(f"Qwen3-Next on this release: {exc}")
    assert len(blocks) == 3 and num_groups == 4  # drafts followed; 1 attention + 3 GDN groups (12 layers each)
    config = RunConfig(tier="engine", model_config=QWEN3_NEXT)
    budget = run_budget(config.but(runner="v1"))
    from harness.vllm_adapter import supports_prefill_checkpoints

    scenarios = [budget_scenario(seed, budget, supports_prefill_checkpoints()) for seed in range(30, 38)]
    assert all(sc.geometry.model == name for sc in scenarios)
    stock_clean = not known_issue_by_id("gdn-draftless-decode-first-column").applicable()
    paths = Counter()
    row = mamba_meta.GDNRows.row

    def counted(self, i, n):
        kr = row(self, i, n)
        paths["spec" if i in self._spec_rank else "decode" if kr.decode else
              "prefill beside spec" if self.spec_mask else "prefill"] += 1
        return kr

    with monkeypatch.context() as patched:
        patched.setattr(mamba_meta.GDNRows, "row", counted)
        for sc in scenarios:
            for runner in ("v1", "v2"):
                try:
                    found = judge(replay(sc, config=config.but(runner=runner)))
                    assert found == [] or not stock_clean, (sc.name, runner, found)
                except BadInput as exc:  # vLLM's V2 runner where the release has none the harness follows
                    assert runner == "v2", exc
    assert set(paths) == {"spec", "decode", "prefill beside spec", "prefill"}, paths
    if not stock_clean:
        return
    for mutant in GDN_MUTANTS:
        with mutant_applied(mutant.name):
            red = [sc.name for sc in scenarios
                   if any(f.oracle == "provenance" for f in judge(replay(sc, config=config.but(
                       runner="v1", mutant=mutant.name))))]
        assert red, mutant.name


def test_qwen3_next_mtp_drafter_layer_joins_the_attention_group(monkeypatch):
    """With EAGLE-style drafts the engine core groups the drafter's layers with the target's: Qwen3-Next's MTP head
    (one full-attention decoder layer at the target's spec) makes its attention group 13 layers, no new group; n-gram
    drafting adds none."""
    from harness.engine.config import vllm_config
    from harness.engine.model_catalog import model_entry
    from harness.engine.model_geometry import group_kinds, model_groups

    try:
        name, blocks, _ = model_entry("qwen3-next-80b-a3b")
    except BadInput as exc:
        pytest.skip(f"Qwen3-Next on this release: {exc}")
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")  # vLLM's V1 runner, whatever an earlier test picked
    sizes = {}
    for eagle in (False, True):
        vc = vllm_config(8, 2048, 65536, blocks[1], blocks[1], 1, eagle, "v1")
        groups = model_groups(name, vc, blocks[1], "align", 1).groups
        assert group_kinds(groups).count("attention") == 1 and len(groups) == 4
        sizes[eagle] = {kind: len(g.layer_names) for kind, g in zip(group_kinds(groups), groups)}
    assert sizes[False]["attention"] == 12 and sizes[True]["attention"] == 13


@needs_v1_runner  # the V1 runner and its mutants; V2 runs these groups in the parametrized tests
def test_a_parallel_hybrid_runs_attention_and_mamba_in_every_layer():
    """Falcon-H1's decoder layers each hold an attention layer and a Mamba2 mixer (vLLM's FalconH1ParallelHybrid):
    its 36 layers give vLLM 36 attention and 36 Mamba specs, one group each; a V1 runner bug is found there and stock
    is clean."""
    from harness.engine.config import vllm_config
    from harness.engine.model_catalog import model_entry
    from harness.engine.model_geometry import group_kinds, model_groups
    from harness.genome import budget_scenario, run_budget
    from harness.mutants import mutant_applied
    from harness.vllm_adapter import supports_prefill_checkpoints
    from testlib import seed_bug_release

    try:
        name, blocks, num_groups = model_entry("falcon-h1-0.5b")
    except BadInput as exc:
        pytest.skip(f"Falcon-H1 on this release: {exc}")
    groups = model_groups(name, vllm_config(8, 2048, 65536, blocks[0], blocks[0], 0, False, "v1"), blocks[0],
                          "align", 0).groups
    assert sorted(group_kinds(groups)) == ["attention", "mamba"] and [len(g.layer_names) for g in groups] == [36, 36]
    config = RunConfig(tier="engine", model_config=name).but(runner="v1")
    budget = run_budget(config)
    scenarios = [budget_scenario(seed, budget, supports_prefill_checkpoints()) for seed in range(8)]
    assert any(sc.geometry.num_speculative_tokens for sc in scenarios)
    red = []
    for sc in scenarios:
        with fixed_system(config):
            stock = {f.signature for f in judge(replay(sc, config=config))}
        assert seed_bug_release or not stock, (sc.name, stock)
        with mutant_applied("v1-accepted-count-lost"), fixed_system(config):
            found = {f.signature for f in judge(replay(sc, config=config.but(mutant="v1-accepted-count-lost")))}
        red += [sc.name] if found - stock else []
    assert red


def test_a_config_is_validated_for_the_runner_asked_for(monkeypatch):
    """vLLM validates a config for the model runner it will pick (0.26.0's V2 refuses n-gram drafts). A model-catalog
    build asks for V1; it once inherited the environment's V2 pick instead (another test had imported Triton), so
    every shipped model was left out of the fuzzers' draw for the rest of that process."""
    from harness.engine.config import vllm_config

    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    for K in (0, 1, 2):
        config = vllm_config(8, 2048, 65536, 16, 16, K, False, "v1")  # BadInput before (on 0.26.0)
        # the config vLLM validated is the one asked for: its drafts (n-gram, which 0.26.0's V2 refuses), or none.
        # (Which runner it was validated for is not on the config: VllmConfig.use_v2_model_runner reads the
        # environment whenever it is asked, and a cached config was built by an earlier call.)
        spec = config.speculative_config
        assert ((spec.num_speculative_tokens, spec.method) == (K, "ngram")) if K else spec is None, K
