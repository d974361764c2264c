"""Engine tier with vLLM's own V1 model runner as the worker (`--runner v1`, harness/engine/runner_v1.py)."""

from __future__ import annotations

import json

import pytest
from testlib import ROOT, fixes_applied, mutant, needs_v1_runner

from harness.errors import BadInput
from harness.generate import random_scenario
from harness.known_issues import known_issue_by_id
from harness.oracles import judge
from harness.scenario import load_scenario, parse_scenario, scenario_to_json
from harness.vllm_adapter import installed_version

SEED = ROOT / "scenarios" / "seed-external-hit-same-block.json"
SEED_BUG_RELEASES = ("0.26.", "0.27.")  # the seed bug is in these releases' MambaManager

pytestmark = needs_v1_runner  # every test here drives vLLM's V1 model runner


def _replay(scenario, name=None, runner="v1", kernels="torch", scheduling="auto"):
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import replay

    return replay(scenario, name, EngineOptions(runner=runner, kernels=kernels, async_scheduling=scheduling))


def _v1_or_skip(scenario):
    try:
        return _replay(scenario)
    except BadInput as exc:
        pytest.skip(f"the V1 worker cannot run here: {exc}")


def _signatures(trace):
    return sorted({f.signature for f in judge(trace)})


def test_seed_scenario_as_the_mirror_judges_it():
    """Synchronously, as the (synchronous) mirror judges it; under async scheduling (vLLM's decision for this
    K = 0 config, which the V1 worker follows) the seed bug still shows as the live-column disagreement."""
    _v1_or_skip(load_scenario(SEED))
    trace = _replay(load_scenario(SEED), scheduling="off")
    sigs = _signatures(trace)
    asynchronous = _replay(load_scenario(SEED))
    assert asynchronous.async_scheduling and not trace.async_scheduling
    tail = known_issue_by_id("async-prompt-tail-rekeyed")
    if installed_version().startswith(SEED_BUG_RELEASES):
        assert {"live-column:RUNNING", "provenance:initial", "cache-integrity"} <= set(sigs)
        assert "live-column:RUNNING" in _signatures(asynchronous)
    elif tail.repro_expected():  # 0.28-0.31: under async scheduling the prompt tail is keyed again, a known issue
        assert sigs == [] and _signatures(asynchronous) == ["cache-integrity"]
        with fixes_applied([tail]):
            assert _signatures(_replay(load_scenario(SEED))) == []
    else:
        assert sigs == [] and _signatures(asynchronous) == []
    assert sigs == _signatures(_replay(load_scenario(SEED), runner="mirror"))
    # every request finishes: the runner's sampled tokens reach the scheduler (0.26-0.27 return one element fewer
    # from _bookkeeping_sync than 0.33; the worker read the wrong ones there and both requests stalled)
    assert trace.end.reason == "done" and asynchronous.end.reason == "done"
    # the worker row is the runner's persistent block-table row; reads carry the oracles' names
    assert trace.rows and all(r.worker_row for r in trace.rows)
    assert {r.what for r in trace.reads} <= {"initial", "precopy", "postcopy"}


# Seeds whose scenarios share a runner config (harness.engine.v1_pool.runner_key, vLLM 0.33.0): K = 0
# (7, 22), K = 1 (21, 47), K = 2 (23, 52), three of one (12, 24, 27); replayed interleaved so that every
# replay after the first of its group runs on a runner another scenario used.
_LEAK_SEQUENCE = (7, 22, 7, 21, 47, 21, 23, 52, 23, 12, 24, 27, 12)

_FRESH_PROCESS = """
import json, sys
from harness.engine import v1_pool
out = {}
for seed in sys.argv[1:]:
    v1_pool.POOL.clear()  # a runner built for this scenario alone
    out[seed] = _digest(_replay(random_scenario(int(seed), checkpoints=False)))
print(json.dumps(out))
"""


def _digest(trace) -> str:
    """Everything the oracles and the diff read of a trace."""
    import hashlib

    rows = [(r.step, r.request, r.group, r.kind, r.num_computed, r.num_scheduled, r.prev, r.curr, r.live_columns,
             r.worker_row, r.core_row) for r in trace.rows]
    reads = [(d.step, d.request, d.what, d.column, d.block, d.conv, d.ssm, d.fed) for d in trace.reads]
    exc = trace.exception and (trace.exception.site, trace.exception.error)
    return hashlib.sha1(repr((rows, reads, list(trace.copies), _signatures(trace), exc)).encode()).hexdigest()


def test_no_state_leaks_across_scenarios():
    """A runner kept per runner config and reset between scenarios gives each scenario the trace a fresh
    process gives it (A, B, A, ... on shared runners against each scenario on its own runner in a new
    process)."""
    import json
    import subprocess
    import sys

    from harness.engine import v1_pool

    _v1_or_skip(load_scenario(SEED))
    v1_pool.POOL.clear()
    pooled = [(seed, _digest(_replay(random_scenario(seed, checkpoints=False)))) for seed in _LEAK_SEQUENCE]
    assert len(v1_pool.POOL) < len(set(_LEAK_SEQUENCE)), "no runner was reused: the sequence tests nothing"
    code = ("import sys; sys.path.insert(0, %r); sys.path.insert(0, %r)\n" % (str(ROOT), str(ROOT / "tests"))
            + "from test_engine_v1 import _digest, _replay, random_scenario\n" + _FRESH_PROCESS)
    proc = subprocess.run([sys.executable, "-c", code, *map(str, sorted(set(_LEAK_SEQUENCE)))], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(seed, fresh[str(seed)]) for seed, _ in pooled] == pooled


def test_prefill_checkpoints_come_from_vllms_builder_where_the_release_has_them():
    """The checkpoint export is the Mamba2 builder's (its offsets and state indices), as on the V2 worker: the repro
    of sparse-retention-checkpoint-unreserved shows the same four findings on V1, and none with its fix. A release
    without checkpoint blocks refuses the geometry."""
    doc = load_scenario(SEED)
    sc = doc.model_copy(update={"geometry": doc.geometry.model_copy(update={"prefill_checkpoint": True})})
    from harness.vllm_adapter import supports_prefill_checkpoints

    if not supports_prefill_checkpoints():
        with pytest.raises(BadInput):
            _replay(sc)
        return
    issue = known_issue_by_id("sparse-retention-checkpoint-unreserved")
    repro = load_scenario(ROOT / issue.repro)
    found = {f.signature for f in judge(_replay(repro, scheduling="off"))}
    assert found == {"live-column:RUNNING", "provenance:precopy", "provenance:initial", "cache-integrity"}
    with fixes_applied([issue]):
        assert judge(_replay(repro, scheduling="off")) == []


@pytest.mark.parametrize("name", ["v1-accepted-count-lost", "v1-stale-mamba-state-idx", "v1-reorder-threshold-off-by-one"])
def test_worker_mutant_killed_and_absent_on_stock(name):
    _v1_or_skip(load_scenario(SEED))
    if name == "v1-accepted-count-lost" and installed_version().startswith(SEED_BUG_RELEASES):
        pytest.skip("0.26-0.27: stock shows the seed bug's signatures in most generated scenarios (60 and 51 of 100) "
                    "and the mutant's provenance findings carry the same signatures: nothing new to kill on")
    killed = None
    for seed in range(300):
        sc = random_scenario(seed, checkpoints=False)
        try:
            with mutant(name):
                sigs = set(_signatures(_replay(sc, name)))
        except BadInput:
            continue
        if sigs - set(_signatures(_replay(sc))):
            killed = seed
            break
    assert killed is not None, f"{name} survived 300 generated scenarios on the V1 worker"


def _traces(kernels: str, seeds) -> dict:
    """Rows, the kernels' initial reads, copies and signatures per seed. Both kernel sets run in this process:
    `--kernels triton` unbinds every replacement registered before it (kernels_v1.mode)."""
    out = {}
    for seed in seeds:
        t = _replay(random_scenario(seed, checkpoints=False), kernels=kernels)
        # the copies' own source reads are observed inside the torch replacements only (not under Triton):
        # compared are the rows without their live columns, and the kernels' initial reads (what the copies made)
        rows = [repr(r.__class__(**{**{f: getattr(r, f) for f in r.__slots__}, "live_columns": []})) for r in t.rows]
        reads = [repr(r) for r in t.reads if r.what.startswith("initial")]
        out[seed] = [rows, reads, t.copies, [f.signature for f in judge(t)]]
    return out


def test_torch_kernels_give_the_triton_kernels_trace():
    """--kernels torch (harness/engine/kernels_v1.py) against vLLM's own Triton kernels under Triton's
    interpreter: the same rows, the same states every forward starts from and the same copies, step by step,
    on scenarios with spec decode (the fused align pre/post-copy kernels) and without (batch_memcpy). Under
    --kernels triton the V1 worker does not see the copies' own source reads (docs/engine-tier.md)."""
    pytest.importorskip("triton", reason="Triton is not installed: only the replacements can run here")
    _v1_or_skip(load_scenario(SEED))
    seeds = (1, 3, 21)  # K = 0, 2, 1
    assert any(random_scenario(s, checkpoints=False).geometry.num_speculative_tokens for s in seeds)
    torch_traces, triton_traces = _traces("torch", seeds), _traces("triton", seeds)
    for seed in seeds:
        rows, reads, copies, sigs = torch_traces[seed]
        assert rows and triton_traces[seed] == [rows, reads, copies, sigs], seed


def test_v1_follows_async_scheduling_without_drafts():
    """The V1 worker follows vLLM's async decision where the config has no drafts (the K = 0 seed scenario);
    a config with n-gram drafts runs synchronously, and `on` is refused for it (EAGLE drafts:
    tests/test_v1_async_drafts.py)."""
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import replay

    _v1_or_skip(load_scenario(SEED))
    doc = scenario_to_json(load_scenario(ROOT / "scenarios" / "spec-unscheduled-accepted-reset.json"))
    doc["geometry"]["token_budget"] = 4  # its block: vLLM 0.26.0 refuses the scenario's 3-token budget at engine start
    spec = parse_scenario(doc)
    assert spec.geometry.num_speculative_tokens > 0
    assert replay(load_scenario(SEED), None, EngineOptions(runner="v1", async_scheduling="on")).async_scheduling
    assert not _replay(spec).async_scheduling
    with pytest.raises(BadInput):  # vLLM refuses it for n-gram drafting on V1 (0.33); elsewhere the harness does
        replay(spec, None, EngineOptions(runner="v1", async_scheduling="on"))


# a forced preemption right before the request is scheduled again: vLLM's own forced preemption
# (reset_prefix_cache(reset_running_requests=True)) takes it out of the previous step's scheduled set, so that
# the V1 runner under async scheduling gets its tokens (`all_token_ids`); 0.26.0 raised KeyError without it
PREEMPT_THEN_RESUME = {
    "version": 1, "name": "v1-async-preempt-resume",
    "geometry": {"hash_block_size": 4, "attn_block_size": 4, "mamba_block_size": 8, "num_blocks": 256,
                 "max_model_len": 256, "num_speculative_tokens": 0, "token_budget": 16},
    "requests": [
        {"id": "a", "prompt": {"length": 16, "seed": 24559}, "arrival_step": 0, "max_tokens": 2,
         "temperature": 0.0},
        {"id": "b", "prompt": {"length": 15, "seed": 38621, "share": {"request": "a", "tokens": 12}},
         "arrival_step": 1, "external": {"tokens": 8, "load_steps": 2}, "max_tokens": 8}],
    "events": [{"step": 6, "kind": "preempt", "request": "b"}],
}


def test_preempted_request_resumes_under_async_scheduling():
    from harness.scenario import parse_scenario

    sc = parse_scenario(PREEMPT_THEN_RESUME)
    _v1_or_skip(sc)
    trace = _replay(sc)
    assert trace.async_scheduling and trace.exception is None
    assert any(r.request == "b" and r.kind == "RESUMED" for r in trace.rows)
    assert _signatures(trace) == _signatures(_replay(sc, scheduling="off"))


def test_async_only_worker_mutant_killed_under_async_scheduling_only():
    """v1-async-prev-row-as-current: placeholders filled from the wrong row of the previous batch. Under async
    scheduling it shows on a generated scenario stock V1 runs clean; synchronously the same scenario is
    clean with the mutant (no placeholders to fill)."""
    _v1_or_skip(load_scenario(SEED))
    if installed_version().startswith(SEED_BUG_RELEASES):
        pytest.skip("0.26-0.27: stock shows the seed bug's signatures in most generated scenarios")
    killed = None
    for seed in range(400):
        sc = random_scenario(seed, checkpoints=False)
        try:
            stock = _signatures(_replay(sc))
            with mutant("v1-async-prev-row-as-current"):
                mutated = _replay(sc, "v1-async-prev-row-as-current")
                sync = _signatures(_replay(sc, "v1-async-prev-row-as-current", scheduling="off"))
        except BadInput:
            continue
        if set(_signatures(mutated)) - set(stock):
            killed = seed
            assert mutated.async_scheduling and set(sync) <= set(stock), seed
            break
    assert killed is not None, "v1-async-prev-row-as-current survived 400 generated scenarios under async scheduling"


def test_known_issues_rejudged_on_the_v1_runner(capsys):
    """`known check --tier engine --runner v1` (async scheduling as vLLM decides, which the V1 worker follows
    without drafts): every repro in code the V1 runner runs shows its issue and its fix removes it; 0.26-0.31's
    async-prompt-tail-rekeyed among them (0.26.0-0.27.1's seed repro reaches it too under async scheduling)."""
    from harness.cli import main
    from harness.known_issues import KNOWN_ISSUES
    from harness.known_check import BLOCKED

    with capsys.disabled():  # the runner's first build sets up torch.distributed, which needs a real stdout
        _v1_or_skip(load_scenario(SEED))
    main(["known", "check", "--tier", "engine", "--runner", "v1"])
    out = capsys.readouterr().out
    expected = [k.id for k in KNOWN_ISSUES if k.repro_expected() and k.runs_on("engine", "v1")]
    assert ("async-prompt-tail-rekeyed" in expected) == installed_version().startswith(("0.26.", "0.27.", "0.28.",
                                                                                        "0.29.", "0.30.", "0.31."))
    # the builder's own padded-tail rule arrived in 0.30.0: before, the fix of v1-padded-prompt-tail-prefilled
    assert ("v1-padded-prompt-tail-prefilled" in expected) == installed_version().startswith(("0.26.", "0.27.",
                                                                                              "0.28.", "0.29."))
    for issue in expected:
        line = next(ln for ln in out.splitlines() if ln.startswith(issue))
        # 0.27.1: v1-readd's repro stops at that release's spec-decode padding bug first (docs/known-issues.md)
        assert any(ok in line for ok in ("reproduces, fix removes it", "not expressible", BLOCKED)), line


def test_the_v1_runner_reorders_and_builds_its_own_mamba_metadata():
    """The V1 runner is built with attention backends: vLLM's Mamba2 metadata builder sets the batch reorder
    threshold (1 + K) and hands the kernels their state indices; the simulated forward reads only from it. The
    mirror reorders the same way (harness/worker.py `_reorder`), so the two tiers walk the same rows."""
    from harness.diff import diff
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import EngineDriver
    from harness.run_config import RunConfig

    scenario = random_scenario(3, checkpoints=False)  # K = 2
    try:
        driver = EngineDriver(scenario, None, EngineOptions(runner="v1"))
    except BadInput as exc:
        pytest.skip(f"the V1 worker cannot run here: {exc}")
    runner = driver.worker.runner
    builders = [type(group.get_metadata_builder()).__name__ for groups in runner.attn_groups for group in groups]
    assert "Mamba2AttentionMetadataBuilder" in builders
    assert runner.reorder_batch_threshold == 1 + scenario.geometry.num_speculative_tokens
    found = judge(driver.run())
    if known_issue_by_id("v1-draftless-step-drops-accepted-offset").applicable():  # 0.26-0.31: a draftless step
        assert {f.signature for f in found} <= {"provenance:initial"}  # reads the state a token short (known)
    else:
        assert found == []
    if not installed_version().startswith("0.33."):
        return  # the mirror's scheduler loop is 0.33.0's (older releases: docs/engine-tier.md, "Releases before 0.33")
    for seed in range(40):  # mixed batches of decodes, extends and first chunks: same rows, same order
        report = diff(random_scenario(seed, checkpoints=False),
                      config=RunConfig(tier="engine").but(runner="v1", async_scheduling="off"))  # as `diff` runs
        assert report.differences == [], (seed, report.differences)


# a one-request EAGLE scenario (K = 1) where v1-accepted-count-lost reads the state a token short under async
# scheduling (minimized from a V1 async campaign's finding; clean on stock)
_ASYNC_EAGLE = {"version": 1, "name": "v1-async-eagle", "max_steps": 5, "events": [],
                "geometry": {"hash_block_size": 16, "attn_block_size": 16, "mamba_block_size": 16, "num_blocks": 24,
                             "max_model_len": 512, "num_speculative_tokens": 1, "eagle_block_drop": True,
                             "token_budget": 32},
                "requests": [{"id": "b", "prompt": {"length": 2, "seed": 2}, "max_tokens": 4}]}


def test_an_async_eagle_finding_replays_in_an_empty_environment(tmp_path):
    """V1 under async scheduling with EAGLE drafts runs vLLM's async-spec-decode correction, which vLLM
    compiles with torch.compile (inductor needs a C++ toolchain on PATH): it runs eagerly here, so a finding
    replays the same in a fresh process with an empty environment, as artifacts promise, and stock is clean."""
    import subprocess
    import sys

    path = tmp_path / "async-eagle.json"
    path.write_text(json.dumps(_ASYNC_EAGLE))
    flags = ["--tier", "engine", "--runner", "v1", "--async-scheduling", "on", "--json", "--artifacts", str(tmp_path)]

    def run(*extra):
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(path), *flags, *extra], env={},
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        if done.returncode == 2:
            pytest.skip(f"V1 async with EAGLE drafts cannot run on this release: {done.stderr[-500:]}")
        assert done.returncode in (0, 1), done.stderr[-2000:]
        return {f["signature"] for f in json.loads(done.stdout)["findings"]}

    assert "provenance:initial" in run("--mutant", "v1-accepted-count-lost")
    assert run() == set()


def test_async_scheduling_is_asked_only_of_workers_that_follow_it():
    """The fuzzer's inputs for V1 under async scheduling draft as EAGLE (vLLM refuses async n-gram drafting
    on V1), so none is refused per input; a worker that never follows async scheduling is refused up front."""
    import random

    from harness.genome import budget_scenario, decode, random_bytes, run_budget
    from harness.run_config import RunConfig

    with pytest.raises(BadInput, match="--async-scheduling on"):
        RunConfig(tier="engine").but(runner="mirror", async_scheduling="on")
    with pytest.raises(BadInput, match="model forward"):
        RunConfig(tier="engine").but(runner="v1", async_scheduling="on", forward="model")
    config = RunConfig(tier="engine").but(runner="v1", async_scheduling="on")
    budget, rng = run_budget(config), random.Random(0)
    scenarios = [budget_scenario(s, budget, True) for s in range(100)] + [decode(random_bytes(rng), budget)
                                                                          for _ in range(300)]
    drafted = [s.geometry for s in scenarios if s.geometry.num_speculative_tokens]
    assert drafted and all(g.eagle_block_drop and g.mamba_cache_mode == "align" for g in drafted)
    ngram = [g for g in (budget_scenario(s, run_budget(config.but(async_scheduling="auto")), True).geometry
                         for s in range(100)) if g.num_speculative_tokens and not g.eagle_block_drop]
    assert ngram  # the decision vLLM makes itself (auto) keeps n-gram drafts
    sample = [sc for sc in scenarios[:12] if sc.geometry.num_speculative_tokens]
    for sc in sample[:4]:  # and vLLM accepts each such config
        _replay(sc, scheduling="on")


@pytest.mark.parametrize("group", ["g11-resumed-recompute-k2", "g12-one-token-short-0.30"])
def test_draftless_steps_get_the_spec_decode_arguments_the_release_gives(group):
    """The V1 worker builds the attention metadata as the release's execute_model does: 0.26-0.32 pass the
    builders the spec-decode arguments (accepted counts, draft counts) only in a step with drafts scheduled, 0.33
    whenever drafting is configured. Passing them always on 0.26-0.30 made a Mamba2 builder split a draftless step
    at 1 + K tokens, and these two release groups were NEW there; as vLLM builds it, every oracle holds."""
    from harness.engine.runner_v1 import spec_metadata_per_step

    scenario = load_scenario(ROOT / "scenarios" / "releases" / f"{group}.json")
    _v1_or_skip(scenario)
    if not spec_metadata_per_step():
        pytest.skip("0.33+: the builders get the spec-decode arguments in every step")
    assert _signatures(_replay(scenario, scheduling="off")) == []
