"""Engine tier on vLLM's own V2 model runner (`--runner v2`, harness/engine/runner_v2.py): vLLM's request
slots, block tables, MambaHybridModelState, sampler and rejection sampler run for real; the forward and the
drafter's proposal are the harness's. Skipped where V2 cannot run (no Triton, or a release whose V2 runner
cannot be built on CPU: exit 2)."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pytest

from harness.engine_options import EngineOptions
from harness.errors import BadInput
from harness.oracles import judge
from harness.scenario import load_scenario
from harness.vllm_adapter import installed_version
from testlib import engine_runners, needs_v1_runner

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SEED = SCENARIOS / "seed-external-hit-same-block.json"
SPEC = SCENARIOS / "spec-unscheduled-accepted-reset.json"
V2 = EngineOptions(runner="v2", kernels="torch")  # tests/test_engine_kernels.py compares torch with triton
# async scheduling as vLLM decides (on for V2) shifts schedules by a step; compared with the mirror, synchronous
V2_SYNC = EngineOptions(runner="v2", kernels="torch", async_scheduling="off")


def _replay(path: Path, options: EngineOptions):
    from harness.engine.scheduler import EngineDriver

    return EngineDriver(load_scenario(path), None, options).run()


def _v2_unavailable() -> str | None:
    try:
        _replay(SEED, V2)
    except (BadInput, ImportError) as exc:
        return f"vLLM {installed_version()}: no V2 model runner here: {exc}"
    return None


_WHY = _v2_unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def test_v2_seed_rows_and_reads_equal_the_mirror():
    """On the seed scenario (external hit inside one Mamba block) V2 keeps the same rows, reads the same
    states at the same columns (a pre-copy at step 4 included) and every oracle holds on 0.33.0."""
    v2 = _replay(SEED, V2_SYNC)
    mirror = _replay(SEED, EngineOptions(runner="mirror"))
    assert v2.runner == "v2" and mirror.runner == "mirror"
    assert [astuple(r) for r in v2.rows] == [astuple(r) for r in mirror.rows]
    assert [astuple(r) for r in v2.reads] == [astuple(r) for r in mirror.reads]
    assert any(r.what == "precopy" for r in v2.reads)
    assert v2.exception is None
    if installed_version() == "0.33.0":
        assert judge(v2) == []


def test_v2_keeps_accepted_count_across_a_skipped_step():
    """A running request skipped for a step: V1 re-adds its row with num_accepted reset to 1 (known issue
    v1-readd-resets-num-accepted, the mirror shows it); V2 keeps num_accepted per request slot, so the
    state it reads is right. vLLM's own rejection sampler decided acceptance here. Where vLLM ships no V1 runner
    (0.34+) the mirror keeps the count as V2 does (harness/worker.py readded_num_accepted)."""
    from testlib import HAS_V1_RUNNER

    v2 = _replay(SPEC, V2)
    mirror = _replay(SPEC, EngineOptions(runner="mirror"))
    assert {f.oracle for f in judge(mirror)} == ({"provenance"} if HAS_V1_RUNNER else set())
    assert judge(v2) == []
    decode_reads = [r for r in v2.reads if r.what == "initial"]
    assert decode_reads and all(r.conv == r.fed and r.ssm == r.fed for r in decode_reads)


def test_auto_is_the_runner_vllm_picks_and_the_default():
    """`--runner auto` (the default) resolves from vLLM's own pick (`VllmConfig.use_v2_model_runner`): V2 for
    this hybrid align-mode config with Triton importable."""
    assert EngineOptions().runner == "auto"
    trace = _replay(SEED, EngineOptions())
    assert trace.runner == "v2"


V2T = EngineOptions(runner="v2", kernels="torch")


def _first_seed(pred, limit=300, checkpoints=False):
    from harness.generate import random_scenario

    for seed in range(limit):
        sc = random_scenario(seed, checkpoints=checkpoints)
        try:
            if pred(sc):
                return seed
        except BadInput:
            continue
    return None


def test_v2_no_leak_across_scenarios():
    """One runner per shape, reset between scenarios: a scenario replays the same after others ran."""
    from harness.engine.scheduler import EngineDriver
    from harness.generate import random_scenario

    sc = random_scenario(7, checkpoints=False)
    first = EngineDriver(sc, None, V2T).run()
    for seed in (1, 2, 3, 11):
        EngineDriver(random_scenario(seed, checkpoints=False), None, V2T).run()
    again = EngineDriver(sc, None, V2T).run()
    assert [astuple(r) for r in first.rows] == [astuple(r) for r in again.rows]
    assert [astuple(r) for r in first.reads] == [astuple(r) for r in again.reads]


def _no_checkpoints() -> bool:
    from harness.vllm_adapter import supports_prefill_checkpoints

    return not supports_prefill_checkpoints()


def _async_why() -> str | None:
    """Why vLLM does not schedule asynchronously for the spec scenario's config (n-gram drafting) here."""
    from harness.engine.scheduler import EngineDriver

    if _WHY is not None or EngineDriver(load_scenario(SPEC), None, V2).asynchronous:
        return None
    return (f"vLLM {installed_version()} turns async scheduling off for n-gram drafting (config/vllm.py); "
            "0.33 keeps it on for V2")


_ASYNC_WHY = _async_why()
needs_async = pytest.mark.skipif(_ASYNC_WHY is not None, reason=_ASYNC_WHY or "")


@pytest.mark.skipif(_no_checkpoints(), reason="this release has no Mamba prefill checkpoint blocks")
def test_v2_prefill_checkpoints_exported_and_clean_on_stock():
    """Prefill checkpoint geometries run on V2: the Mamba2 metadata builder's checkpoint (offset, block) gets the
    state after that many query tokens (a live column beyond the running block), and stock 0.33.0 is clean."""
    from harness.engine.scheduler import EngineDriver

    def exported(sc):
        if not sc.geometry.prefill_checkpoint:
            return False
        trace = EngineDriver(sc, None, V2T).run()
        assert judge(trace) == [] or installed_version() != "0.33.0"
        # a prefill row's live columns: the running one, the pre-copy source, and the checkpoint's below them
        return any(c < r.curr and c != r.prev for r in trace.rows for c in r.live_columns)
    assert _first_seed(exported, limit=120, checkpoints=True) is not None


@pytest.mark.parametrize("name", ["v2-postcopy-skipped", "v2-stale-accepted-on-add",
                                  "v2-accepted-scattered-by-batch-row"])
def test_v2_worker_mutant_killed_and_absent_on_stock(name):
    from harness.engine.scheduler import EngineDriver
    from harness.mutants import mutant_applied

    def sigs(sc, m=None):
        return {f.signature for f in judge(EngineDriver(sc, m, V2T).run())}

    def killed(sc):
        with mutant_applied(name):
            bad = sigs(sc, name)
        return bool(bad - sigs(sc))
    assert _first_seed(killed) is not None, f"{name} survived 300 generated scenarios on the V2 worker"


@needs_async
def test_async_only_mutant_killed_with_async_scheduling_and_invisible_without():
    """v2-async-trusts-scheduler-computed is harmless when the scheduler's count is exact (synchronous) and
    wrong under async scheduling (the count is optimistic before the previous step's drafts are verified):
    only the batch-queue loop can kill it."""
    from harness.engine.scheduler import EngineDriver
    from harness.mutants import mutant_applied

    name = "v2-async-trusts-scheduler-computed"

    def shows(sc, options):
        with mutant_applied(name):
            return bool(judge(EngineDriver(sc, name, options).run()))

    seed = _first_seed(lambda sc: shows(sc, V2) and not judge(EngineDriver(sc, None, V2).run()))
    assert seed is not None, f"{name} survived 300 generated scenarios with async scheduling"
    assert _first_seed(lambda sc: shows(sc, V2_SYNC), limit=40) is None


@needs_async
def test_async_scheduling_is_vllms_decision_and_v2_follows_it():
    """`auto`: vLLM's decision for the config (on for V2: AsyncScheduler, two batches in flight); the V1 and
    mirror workers run synchronously and refuse `on`; `off` is EngineCore.step."""
    from harness.engine.scheduler import EngineDriver

    sc = load_scenario(SPEC)
    d = EngineDriver(sc, None, V2)
    assert d.asynchronous and type(d.sched).__name__ == "AsyncScheduler" and d.vc.max_concurrent_batches == 2
    assert not EngineDriver(sc, None, V2_SYNC).asynchronous
    for runner in engine_runners("v1", "mirror"):
        assert not EngineDriver(sc, None, EngineOptions(runner=runner)).asynchronous
        with pytest.raises(BadInput, match="(?i)async"):
            EngineDriver(sc, None, EngineOptions(runner=runner, async_scheduling="on"))


@needs_async
@pytest.mark.parametrize("path", [SPEC, SEED, SCENARIOS / "checkpoint-midblock-start.json"], ids=lambda p: p.stem)
def test_async_v2_schedules_a_step_ahead_and_generates_what_sync_does(path):
    """Under async scheduling the scheduler runs a step ahead of the outputs (a request still holds output
    placeholders when the next step is scheduled, its drafts are -1 placeholders), yet every request
    generates the same tokens as synchronously and the same oracles hold."""
    from harness.engine.scheduler import EngineDriver

    runs = {}
    for options in (V2, V2_SYNC):
        d = EngineDriver(load_scenario(path), None, options)
        ahead, placeholders = [], []
        schedule = d.sched.schedule

        def scheduled(*args, d=d, schedule=schedule, ahead=ahead, placeholders=placeholders, **kwargs):
            ahead.append(any(r.num_output_placeholders for r in d.sched.requests.values()))
            so = schedule(*args, **kwargs)
            placeholders.extend(t for ts in so.scheduled_spec_decode_tokens.values() for t in ts)
            return so

        d.sched.schedule = scheduled
        trace = d.run()
        runs[options.async_scheduling] = (any(ahead), set(placeholders), {f.signature for f in judge(trace)},
                                          {rid: list(r.vreq.all_token_ids) for rid, r in d.reqs.items()})
    (ahead_on, drafts_on, sigs_on, tokens_on), (ahead_off, _, sigs_off, tokens_off) = runs["auto"], runs["off"]
    assert ahead_on and not ahead_off
    if path == SPEC:
        assert drafts_on == {-1}
    assert tokens_on == tokens_off and sigs_on == sigs_off


@pytest.mark.parametrize("scheduling", ["auto", "off"])
def test_model_forward_on_v2_reads_and_writes_at_v2s_indices(scheduling):
    """`--forward model --runner v2`: the tiny LM's states move with V2's own indices and copies, its greedy
    choices are what vLLM's sampler and rejection sampler pick; stock generations match the uncached reference
    (async and sync), and the known checkpoint issue reaches the model's logits."""
    from harness.oracles import output_summary

    options = EngineOptions(runner="v2", forward="model", async_scheduling=scheduling)
    for path in (SEED, SPEC):
        trace = _replay(path, options)
        assert trace.runner == "v2" and judge(trace) == []
        summary = output_summary(trace)
        assert summary["generations"] >= 2 and summary["diverged"] == 0, summary
    if installed_version().startswith("0.33."):
        bad = judge(_replay(SCENARIOS / "checkpoint-midblock-start.json", options))
        assert "output" in {f.oracle for f in bad}


def test_async_decision_is_vllms_for_the_drafting_method():
    """vLLM decides async scheduling per drafting method: on for EAGLE with V2 (0.32 and 0.33), and for n-gram
    only from 0.33 (0.32 turns it off); an EAGLE geometry gets the EAGLE decision although its config is built
    as n-gram (harness/engine/config.py _as_eagle)."""
    from harness.engine.scheduler import EngineDriver
    from harness.release import parse_version

    ngram = load_scenario(SPEC)
    eagle = ngram.model_copy(update={"geometry": ngram.geometry.model_copy(update={"eagle_block_drop": True})})
    assert EngineDriver(eagle, None, V2).asynchronous
    assert EngineDriver(ngram, None, V2).asynchronous == (parse_version(installed_version()) >= (0, 33))


@needs_async
def test_async_run_goes_on_while_a_batch_is_in_flight():
    """A request preempted while its batch is in flight leaves a step with nothing scheduled; the loop must not
    take that for the end (the batch still reports, the request is rescheduled): it finishes as synchronously
    (found by tools/async_differential.py: the run used to stop there and abort it)."""
    from harness.engine.scheduler import EngineDriver
    from harness.scenario import parse_scenario

    sc = parse_scenario({"version": 1, "geometry": {"hash_block_size": 16, "attn_block_size": 16, "mamba_block_size": 16,
                                                    "num_blocks": 48, "max_model_len": 256, "token_budget": 64},
                         "requests": [{"id": "a", "prompt": {"length": 69, "seed": 1}, "max_tokens": 4}],
                         "events": [{"step": 1, "kind": "preempt", "request": "a"}]})
    outputs = {}
    for options in (V2, V2_SYNC):
        d = EngineDriver(sc, None, options)
        assert judge(d.run()) == []
        outputs[options.async_scheduling] = list(d.reqs["a"].vreq.output_token_ids)
    assert len(outputs["off"]) == 4 and outputs["auto"] == outputs["off"]


@needs_v1_runner
def test_auto_follows_a_v1_pick_with_vllms_v1_runner():
    """Where vLLM picks its V1 runner (`use_v2_model_runner` false: no Triton, a release before V2, a config
    V2 refuses) `auto` is the V1 worker (vLLM's own V1 runner), never the mirror; a scenario it cannot follow
    is bad input naming the pick."""
    from harness.engine.scheduler import EngineDriver
    from harness.engine.workers import make_worker

    driver = EngineDriver(load_scenario(SEED), None, EngineOptions(runner="v1"))
    driver.sched.use_v2_model_runner = False  # vLLM's pick, as the Scheduler records it
    assert make_worker(driver, "auto").runner_name == "v1"
    sc = load_scenario(SEED)
    sc = sc.model_copy(update={"geometry": sc.geometry.model_copy(update={"prefill_checkpoint": True})})
    try:
        driver = EngineDriver(sc, None, EngineOptions(runner="mirror"))
    except BadInput:
        pytest.skip("this release has no prefill checkpoint blocks")
    driver.sched.use_v2_model_runner = False
    try:  # the V1 worker did not simulate prefill checkpoints when this was written
        assert make_worker(driver, "auto").runner_name == "v1"
    except BadInput as exc:
        assert "--runner auto" in str(exc) and "V1 model runner" in str(exc), exc


DRAFTLESS = SCENARIOS / "v2-draftless-decode-after-prefill.json"
FINDING = SCENARIOS / "findings" / "v2-draftless-decode-after-short-prefill.json"
FINDING_INPUT = Path(__file__).resolve().parent / "data" / "engine-v2-draftless-decode.bin"


def _verdict(path: Path, runner: str, async_scheduling: str = "auto"):
    from harness.verdict import judge_scenario
    from harness.run_config import RunConfig

    config = RunConfig(tier="engine").but(runner=runner, async_scheduling=async_scheduling)  # the fix replays too
    findings = judge(_replay(path, config.engine))
    return findings, judge_scenario(load_scenario(path), findings, config=config)


@pytest.mark.skipif(not installed_version().startswith("0.33."), reason="the V2 worker follows 0.33.x")
def test_v2_draftless_decode_after_prefill_is_a_v2_bug_its_fix_removes():
    """Known issue v2-draftless-decode-after-prefill, stock: a decode row without drafts (max_model_len trims
    it) after an accepted draft, batched with a new (1+K)-token prompt, reads its running column through the
    prefill path on V2 (provenance:initial); the fix (decode rows lead) removes it; V1 and the mirror worker
    run the same schedule clean."""
    from harness.known_issues import known_issue_by_id
    from testlib import fixes_applied

    issue = known_issue_by_id("v2-draftless-decode-after-prefill")
    findings, verdict = _verdict(DRAFTLESS, "v2")
    assert [f.signature for f in findings] == ["provenance:initial"]
    assert verdict.known == {"provenance:initial": issue.id} and not verdict.is_new
    with fixes_applied([issue]):
        assert judge(_replay(DRAFTLESS, V2)) == []
    for runner in ("v1", "mirror"):
        assert judge(_replay(DRAFTLESS, EngineOptions(runner=runner))) == [], runner


@pytest.mark.skipif(not installed_version().startswith("0.33."), reason="found on 0.33.0 with prefill checkpoints")
def test_campaign_finding_behind_the_checkpoint_issue_is_the_draftless_decode_issue():
    """The 10-minute engine campaign's input that first showed the bug (revealed behind checkpoint-midblock-start
    before the V2 issue was known): with both fixes known it is all known, from the scenario file and from the
    input bytes; the V2 fix alone removes its provenance finding once the checkpoint fix lets it show."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    _campaign_finding_verdicts()  # found when the engine tier ran synchronously only
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, HH_ARTIFACTS="art", PYTHONPATH=str(root), HH_ENGINE_RUNNER="v2", HH_MUTANT="",
               HH_ENGINE_ASYNC="off")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, str(root / "fuzz" / "engine_target.py"), str(FINDING_INPUT)], env=env,
                              capture_output=True, text=True, timeout=600, cwd=tmp)
        assert proc.returncode == 0, proc.stderr[-2000:]  # all known: the target does not crash
        (doc,) = [json.loads(p.read_text()) for p in Path(tmp, "art").glob("finding-*/finding.json")]
    assert doc["verdict"]["new"] is False and doc["engine"]["runner"] == "v2"
    assert doc["engine"]["async_scheduling"] == "off"


def _campaign_finding_verdicts():
    from harness.known_issues import known_issue_by_id
    from testlib import fixes_applied

    for runner in ("v2", "mirror"):
        _, verdict = _verdict(FINDING, runner, "off")
        assert verdict.known == {"cache-integrity": "checkpoint-midblock-start"} and not verdict.is_new, runner
    checkpoint = known_issue_by_id("checkpoint-midblock-start")
    with fixes_applied([checkpoint]):
        assert [f.signature for f in judge(_replay(FINDING, V2_SYNC))] == ["provenance:initial"]
        with fixes_applied([known_issue_by_id("v2-draftless-decode-after-prefill")]):
            assert judge(_replay(FINDING, V2_SYNC)) == []
