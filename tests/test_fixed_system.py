"""Fuzzing the fixed system (issue 17): campaigns and sweeps replay with every applicable known fix applied, so
a known bug neither fires nor masks a new one; a finding of the fixed system is confirmed on stock vLLM. And
the search's own additions: generator inputs with swarm masks, abstract-state coverage."""

from __future__ import annotations

import json
import random

import pytest
from testlib import ROOT, fixes_applied, mutant, seed_bug_release

from harness.fuzzing import Finding, Target
from harness.generate import random_scenario
from harness.genome import (
    GENERATOR_INPUT,
    Budget,
    budget_scenario,
    decode,
    generator_input,
    release_budget,
    without_checkpoints,
)
from harness.known_issues import KNOWN_ISSUES, issues_for, known_issue_by_id
from harness.mutants import get_mutant
from harness.oracles import judge
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import load_scenario
from harness.state_coverage import abstract_states, slots
from harness.verdict import confirm_on_stock, replay_and_judge
from harness.vllm_adapter import installed_version, supports_prefill_checkpoints

LEAK = "mamba-free-leaks-block"  # fires on every input that frees a request: it shares inputs with every issue
REGRESSIONS = sorted((ROOT / "fuzz" / "regressions").iterdir())


def _symbolic_repros():
    return [k for k in KNOWN_ISSUES if k.runs_on("symbolic") and k.repro_expected()]


@pytest.mark.parametrize("issue", _symbolic_repros(), ids=lambda k: k.id)
def test_known_repro_is_clean_on_the_fixed_system_and_known_on_stock(issue):
    scenario = load_scenario(ROOT / issue.repro)
    _, findings, verdict = replay_and_judge(scenario, config=RunConfig(tier="symbolic", known_fixes=True))
    assert verdict is None and findings == []
    _, findings, verdict = replay_and_judge(scenario, config=RunConfig(tier="symbolic", known_fixes=False))
    assert findings and not verdict.is_new and issue.id in set(verdict.known.values())


def test_a_mutant_on_known_issues_inputs_is_never_credited_to_them():
    """The leak on each known issue's repro: on the fixed system it is new (shown on stock too, or revealed
    behind the known bug), or it does not happen at all (sync-external-admission-undercount's fix keeps the
    request out of a pool that cannot hold it, so it never frees); never credited to the known issue."""
    new, repros = 0, _symbolic_repros()
    for issue in repros:
        scenario = load_scenario(ROOT / issue.repro)
        with mutant(LEAK):
            _, _, verdict = replay_and_judge(scenario, config=RunConfig(tier="symbolic", mutant=LEAK, known_fixes=True))
        assert verdict is None or (verdict.is_new and "pool-accounting" not in verdict.known), (issue.id, verdict)
        new += verdict is not None
    # where the only repro is the admission undercount (0.26-0.27), the leak never happens on the fixed system
    assert new >= 1 or [k.id for k in repros] == ["sync-external-admission-undercount"]


def test_a_bank_mutant_sharing_every_known_issues_input_turns_the_target_red(tmp_path):
    """Every kept crash file of a known issue, replayed by a campaign worker's target with the leak mutant: the
    target raises Finding (new) on each, where the stock-judged target credited the leak to the known issue
    (the masking the fixed system removes)."""
    target = Target(RunConfig(mutant=LEAK), artifacts=tmp_path / "fixed")
    try:
        assert target.config.known_fixes
        for path in REGRESSIONS:
            with pytest.raises(Finding):
                target(path.read_bytes())
    finally:
        target.close()


def test_a_wrong_fix_turns_the_stock_gate_red(monkeypatch, tmp_path):
    """The fixes' own correctness is guarded by the stock gate: a sweep of stock vLLM with the fixes on must stay
    clean. A deliberately wrong fix (the leak mutant posing as sync-external-admission-undercount's fix) makes
    findings stock does not show: NEW, latent behind that fix, exit 1 (red), never a harness error."""
    from harness.cli import main
    from harness.fixes import Fix, all_fixes

    issue = known_issue_by_id("sync-external-admission-undercount")
    monkeypatch.setitem(all_fixes(), issue.fix_name, Fix(get_mutant(LEAK), "a wrong fix"))
    code = main(["sweep", "--count", "3", "--seed", "0", "--artifacts", str(tmp_path)])
    assert code == 1
    verdicts = [json.loads(p.read_text())["verdict"] for p in tmp_path.glob("*.json")]
    assert verdicts and all(v["new"] and v["latent"] == [issue.id] for v in verdicts), verdicts


def test_a_finding_the_wrong_fix_alone_makes_is_latent_behind_it():
    """confirm_on_stock names the fix that exposes a finding stock does not show."""
    from harness.fixes import Fix, all_fixes

    issue = known_issue_by_id("sync-external-admission-undercount")
    scenario = random_scenario(0, checkpoints=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(all_fixes(), issue.fix_name, Fix(get_mutant(LEAK), "a wrong fix"))
        fixed = judge(replay(scenario, config=RunConfig(fixes=(issue.id,))))
        assert fixed
        verdict = confirm_on_stock(scenario, fixed, issues_for("symbolic"), config=RunConfig())
    assert verdict.is_new and verdict.revealed and verdict.latent == [issue.id], verdict.to_json()
    assert verdict.label(verdict.revealed[0]) == f"NEW (latent behind {issue.id})"


@pytest.mark.skipif(not installed_version().startswith("0.33."), reason="a 0.33.0 campaign's input")
def test_a_mutant_shown_only_on_the_schedule_the_fixes_make_is_revealed():
    """`make fuzz --mutant cow-copies-dropped` hit this input and exited 3 ('known fixes misbehave'): the fixes
    change the schedule, so the dropped copy corrupts a cached block only on the fixed system, and stock shows
    nothing: NEW, revealed, latent behind the fixes that change the schedule. The same holds where the bug is
    vLLM's own code (the mutant in force, the configuration naming none): a real bug is never a harness error."""
    name = "cow-copies-dropped"
    scenario = load_scenario(ROOT / "tests" / "data" / "fixes-reveal-cow-copies-dropped.json")
    issues = issues_for("symbolic")
    assert judge(replay(scenario)) == []  # the fixed system as shipped, without the mutant
    with mutant(name):
        assert judge(replay(scenario, config=RunConfig(mutant=name))) == []  # stock with the mutant: nothing
        with fixes_applied(issues):
            fixed = judge(replay(scenario, config=RunConfig(mutant=name)))
        verdict = confirm_on_stock(scenario, fixed, issues, config=RunConfig(mutant=name))
        _, _, unnamed = replay_and_judge(scenario, config=RunConfig())  # the bug as vLLM's own: no mutant named
    for v in (verdict, unnamed):
        assert v.revealed == ["cache-integrity"] and v.is_new and v.latent, v.to_json()
        assert set(v.latent) <= {k.id for k in issues}


@pytest.mark.skipif(not installed_version().startswith("0.33."), reason="a 0.33.0 sweep's scenario")
def test_the_v1_accepted_count_fix_starts_a_preempted_and_resumed_row_over():
    """`sweep --tier engine --runner v1` seed 29 (K = 1, a forced preemption of b at step 9 that vLLM resumes in the
    same schedule()): the fix of v1-readd-resets-num-accepted restored b's old accepted count when its row came
    back as a resumed row, so the fixed system showed provenance findings stock vLLM does not (a harness error on
    every campaign input like it). A resumed row starts over, as in V2."""
    config = RunConfig(tier="engine").but(runner="v1")
    scenario = random_scenario(29, checkpoints=False)
    assert judge(replay(scenario, config=config)) == []
    with fixes_applied(issues_for("engine", "v1")):
        assert judge(replay(scenario, config=config)) == []


@pytest.mark.skipif(seed_bug_release, reason="vLLM 0.26.0-0.27.1 carry the seed bug, which is not a known issue: new")
def test_sweep_and_target_judge_alike_with_fixes_on_and_off():
    """On stock vLLM with its fixes applied nothing is new; with the fixes off, nothing the fixes remove is new."""
    for seed in range(40):
        scenario = random_scenario(seed, checkpoints=supports_prefill_checkpoints())
        for fixed in (True, False):
            _, _, verdict = replay_and_judge(scenario, config=RunConfig(tier="symbolic", known_fixes=fixed))
            assert verdict is None or not verdict.is_new, (seed, fixed, verdict)


# -- the search: generator inputs, swarm masks, state coverage ----------------------------------------------------
def test_a_generator_input_without_swarm_is_the_sweeps_scenario():
    budget = release_budget()
    for seed in (0, 7, 123456789):
        data = generator_input(random.Random(), seed=seed, mask=0)
        want = budget_scenario(seed, budget, checkpoints=budget.checkpoints)  # what `sweep` replays
        for got in (decode(data, budget), decode(data + b"trailing", budget)):
            assert got.requests == want.requests and got.geometry == want.geometry and got.events == want.events


def test_a_generator_input_kept_before_a_draw_existed_still_decodes_as_it_did():
    """Crash files and corpus entries of nine bytes after the magic predate the retention draw: no draw byte."""
    budget = release_budget()
    for seed in (0, 7, 123456789):
        old = b"GEN\x00" + seed.to_bytes(8, "little") + b"\x00"
        want = random_scenario(seed, checkpoints=budget.checkpoints)
        got = decode(old, budget)
        assert got.requests == want.requests and got.geometry == want.geometry and got.events == want.events


def test_swarm_masks_switch_whole_features_off():
    rng = random.Random(3)
    budget = Budget(checkpoints=True)
    for _ in range(300):
        data = bytearray(generator_input(rng))
        data[GENERATOR_INPUT - 1] = 0b0011_1110  # connector, spec decode, prefix sharing, events off (async load too)
        sc = decode(bytes(data), budget)
        assert sc.geometry.num_speculative_tokens == 0 and not sc.events
        assert all(r.external is None and r.prompt.share is None and not r.acceptance for r in sc.requests)
        assert not decode(without_checkpoints(bytes(data)), budget).geometry.prefill_checkpoint


def test_every_generator_input_decodes_for_every_tier_budget():
    rng = random.Random(5)
    budgets = [Budget(checkpoints=True), Budget(small=True), Budget(align=True, sub_block_hash=False)]
    for _ in range(500):
        data = generator_input(rng)
        for budget in budgets:
            sc = decode(data, budget)
            g = sc.geometry
            assert g.attn_block_size == g.mamba_block_size  # align mode's one block size
            if budget.align and not budget.sub_block_hash:
                assert g.hash_block_size == g.mamba_block_size


def test_state_coverage_is_a_pure_function_of_the_trace_and_keeps_growing():
    seen, growth = set(), []
    for seed in range(120):
        trace = replay(random_scenario(seed, checkpoints=supports_prefill_checkpoints()))
        assert abstract_states(trace) == abstract_states(trace)
        seen |= slots(trace)
        growth.append(len(seen))
    # new abstract transitions still appear late in the sample: the gradient edge coverage lacks
    assert growth[-1] > growth[59] > growth[9] > 0


def test_finer_attention_blocks_are_raised_to_the_mamba_block():
    doc = {"hash_block_size": 1, "attn_block_size": 2, "mamba_block_size": 8, "num_blocks": 32}
    from harness.scenario import Geometry

    assert Geometry(**doc).attn_block_size == 8
    with pytest.raises(ValueError, match="must divide"):
        Geometry(**dict(doc, attn_block_size=3, mamba_block_size=8))


def test_issues_for_the_symbolic_tier_are_applicable():
    assert all(k.applicable() and k.runs_on("symbolic") for k in issues_for("symbolic"))


@pytest.mark.skipif(not installed_version().startswith("0.33."), reason="the blind bank is written against vLLM 0.33.0")
def test_engine_confirmation_schedules_as_the_mirror_does():
    """A symbolic-tier finding is confirmed on vLLM's own Scheduler scheduled synchronously, as the mirrored loop
    schedules: a blind-bank allocator bug (admission under-reserves spec scratch blocks) that vLLM's V1 and V2
    runners show synchronously was filed 'departure' when the confirmation ran vLLM's async decision, whose
    schedule never reaches the pool pressure (a campaign that found the bug then exited 0)."""
    import json

    from harness.mutants import mutant_applied
    from harness.scenario import parse_scenario
    from harness.verdict import replay_and_judge

    mutant = str(ROOT / "banks" / "blind_mutants" / "mamba-spec-scratch-not-reserved-on-first-alloc.py")
    scenario = parse_scenario(json.loads((ROOT / "tests" / "data" / "engine-confirmation-sync-spec-scratch.json").read_text()))
    with mutant_applied(mutant):
        _, _, verdict = replay_and_judge(scenario, config=RunConfig(mutant=mutant))
    assert verdict is not None and verdict.is_new and verdict.engine == "confirmed", verdict.to_json()


@pytest.mark.skipif(not installed_version().startswith("0.33."), reason="the blind bank is written against vLLM 0.33.0")
def test_the_kill_rule_counts_a_bug_revealed_behind_a_known_one():
    """The replay judge of `mutants check` agrees with a fixed-system campaign: a mutant whose symptom shows
    only once the known fixes let the replay run on (stock: checkpoint-midblock-start fires first) kills it;
    the campaign filed this input NEW (revealed) and the judge used to disagree."""
    import json

    from harness.mutation import kills
    from harness.scenario import scenario_to_json

    mutant = str(ROOT / "banks" / "blind_mutants" / "mamba-spec-scratch-not-reserved-on-first-alloc.py")
    doc = json.loads((ROOT / "tests" / "data" / "kill-revealed-spec-scratch.json").read_text())
    assert kills(doc, config=RunConfig(mutant=mutant)) is not None
    stock_only = scenario_to_json(load_scenario(ROOT / "scenarios" / "seed-external-hit-same-block.json"))
    assert kills(stock_only, config=RunConfig(mutant=mutant)) is None  # no effect there: no kill



def test_the_admission_undercount_fix_counts_only_a_call_that_continues_past_the_hit():
    """The undercount is the continuation's block, allocated beside the external one by the same allocate_slots (a
    sync hit's per-step call, and any full-sequence check). An async load's per-step call comes with no new tokens
    (scheduler.py's load_kv_async branch: num_new_tokens = 0) and its count is right: the fix added a block there
    too and delayed a Falcon-H1 0.26.0 request by a step (a harness error, 'known fixes misbehave')."""
    from harness.vllm_adapter import Allocator, supported_kwargs

    geometry = load_scenario(ROOT / "scenarios" / "sync-external-admission-undercount.json").geometry
    manager = Allocator(geometry).mamba_manager

    def count(main_model_tokens):  # a fresh request, a 64-token external hit, nothing local
        return manager.get_num_blocks_to_allocate(**supported_kwargs(
            manager.get_num_blocks_to_allocate, request_id="r", num_tokens=main_model_tokens, new_computed_blocks=[],
            total_computed_tokens=64, num_local_computed_tokens=0, num_tokens_main_model=main_model_tokens))

    stock = {n: count(n) for n in (64, 65)}
    fix = [k for k in KNOWN_ISSUES if k.id == "sync-external-admission-undercount"]
    with fixes_applied(fix):
        fixed = {n: count(n) for n in (64, 65)}
    assert fixed == {64: stock[64], 65: stock[65] + 1}, (stock, fixed)


def test_the_midblock_stop_fix_clips_only_a_chunk_running_past_its_next_boundary():
    """Both mid-block stop fixes (0.33.0's checkpoint rule, 0.26.0's cacheable-range rule) share one wrapper: a
    chunk starting mid-block stops at the next boundary; an aligned start, a chunk short of the boundary and a
    call the release's rule does not drop are left as vLLM scheduled them."""
    from types import SimpleNamespace

    from harness.fixes.split import _stop_at_next_block_boundary

    split = _stop_at_next_block_boundary()(lambda self, request, n, local, external: n)
    never = _stop_at_next_block_boundary(lambda *_: False)(lambda self, request, n, local, external: n)
    sched = SimpleNamespace(cache_config=SimpleNamespace(block_size=16))

    def chunk(fn, computed, n, external=0):
        return fn(sched, SimpleNamespace(num_computed_tokens=computed), n, 0, external)

    assert chunk(split, 0, 2, external=47) == 1  # 47 -> 48, then on (the eagle-midblock-stop-dropped repro)
    assert chunk(split, 47, 20) == 1
    assert chunk(split, 32, 20) == 20  # an aligned start
    assert chunk(split, 40, 8) == 8  # ends at the boundary
    assert chunk(split, 40, 5) == 5  # short of it
    assert chunk(never, 47, 20) == 20


def test_an_engine_only_issue_is_judged_on_every_engine_runner_and_never_on_the_mirrored_tiers():
    """connector-lookup-deepest-group-hit is in vLLM's Scheduler code, which the mirrored tiers' scheduler loop does
    not follow: every engine runner (mirror worker included) runs it, the symbolic and model tiers never do."""
    issue = next(k for k in KNOWN_ISSUES if k.id == "connector-lookup-deepest-group-hit")
    assert issue.engine_only and issue.runners is None
    assert all(issue.runs_on("engine", r) for r in ("auto", "v1", "v2", "mirror"))
    assert not issue.runs_on("symbolic") and not issue.runs_on("model")
    assert issue not in issues_for("symbolic")
