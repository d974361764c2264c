"""Engine tier: vLLM's real Scheduler (built from a real VllmConfig) drives the worker shadow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run_config import RunConfig
from harness.errors import BadInput
from harness.mutants import mutant_applied
from harness.oracles import judge
from harness.replay import TIERS, replay
from harness.scenario import load_scenario, parse_scenario
from harness.vllm_adapter import installed_version

from testlib import version_tuple

SEED = Path(__file__).resolve().parent.parent / "scenarios" / "seed-external-hit-same-block.json"
VERSION = tuple(int(x) for x in installed_version().split(".")[:3])
SEED_BUG = (0, 26, 0) <= VERSION < (0, 28, 0)


# These tests are about vLLM's Scheduler and connector: they run the mirror worker (the real runners have their
# own test modules), whatever runner vLLM would pick here; the CLI ones say --runner mirror.
MIRROR = RunConfig(tier="engine").but(runner="mirror")


def _engine_unavailable() -> str | None:
    """Why the engine cannot be built on this release (None: it can)."""
    try:
        from harness.engine_options import EngineOptions
        from harness.engine.scheduler import EngineDriver

        EngineDriver(load_scenario(SEED), None, EngineOptions(runner="mirror"))
    except (BadInput, ImportError, AttributeError, TypeError) as exc:
        return f"vLLM {installed_version()}: the engine tier cannot build its Scheduler here: {exc!r}"
    return None


_WHY = _engine_unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def _scenario(requests, events=(), **geometry):
    g = {"hash_block_size": 2, "attn_block_size": 8, "mamba_block_size": 8, "num_blocks": 32,
         "max_model_len": 64, "token_budget": 64}
    g.update(geometry)
    return parse_scenario({"version": 1, "geometry": g, "requests": list(requests), "events": list(events)})


def _engine(scenario):
    trace = replay(scenario, config=MIRROR)
    return trace, judge(trace)


def test_engine_is_a_tier():
    assert "engine" in TIERS


@pytest.mark.skipif(SEED_BUG, reason="vLLM 0.26.0-0.27.1 carry the seed bug")
def test_seed_scenario_holds_on_fixed_release():
    trace, findings = _engine(load_scenario(SEED))
    assert findings == []
    assert trace.steps_run >= 4 and trace.pool_end["num_free"] == 31
    # the async load reached the worker as NEW with the loaded count, then the 14 -> 15 chunk
    assert [(r.step, r.request, r.kind, r.num_computed, r.num_scheduled) for r in trace.rows][:2] == [
        (1, "a", "NEW", 10, 4), (2, "a", "RUNNING", 14, 1)]


@pytest.mark.skipif(not SEED_BUG, reason="only 0.26.0-0.27.1 carry the seed bug as published")
def test_seed_scenario_trips_on_published_buggy_release():
    _, findings = _engine(load_scenario(SEED))
    live = [f for f in findings if f.oracle == "live-column"]
    assert [(f.step, f.request, f.group, f.columns) for f in live] == [(2, "a", 1, [1])]
    prov = [f for f in findings if f.oracle == "provenance"]
    assert prov and prov[0].request == "b" and "a[:14]" in prov[0].expected and "a[:15]" in prov[0].actual
    assert any(f.oracle == "cache-integrity" for f in findings)


@pytest.mark.skipif(SEED_BUG, reason="the published release already has the bug")
def test_seed_mutant_trips_the_engine_tier():
    with mutant_applied("seed-unmarked-early-return"):
        _, findings = _engine(load_scenario(SEED))
    assert {f.oracle for f in findings} >= {"live-column", "provenance"}


def test_sync_external_hit_is_delivered_by_the_connector():
    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1}, "external": {"tokens": 16, "async": False},
                     "max_tokens": 3}])
    trace, findings = _engine(sc)
    assert findings == []
    first = trace.rows[0]
    assert (first.step, first.kind, first.num_computed) == (0, "NEW", 16)  # admitted in the step it was matched
    assert [(rd.step, rd.what, trace.name(rd.ssm)) for rd in trace.reads if rd.step == 0] == [
        (0, "precopy", "a[:16]"), (0, "initial", "a[:16]")]


def test_async_external_hit_waits_for_remote_kvs():
    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1},
                     "external": {"tokens": 13, "async": True, "load_steps": 3}, "max_tokens": 3}])
    trace, findings = _engine(sc)
    assert findings == []
    first = trace.rows[0]
    # allocated at step 0, finished_recving reported with step 2's output, scheduled as NEW at step 3
    assert (first.step, first.kind, first.num_computed) == (3, "NEW", 13)
    assert trace.name(trace.reads[0].ssm) == "a[:13]"


def test_preemption_under_pool_pressure_comes_from_the_scheduler():
    sc = _scenario([{"id": "a", "prompt": {"length": 14, "seed": 1}, "max_tokens": 12},
                    {"id": "b", "prompt": {"length": 14, "seed": 2}, "max_tokens": 12}],
                   hash_block_size=4, attn_block_size=4, mamba_block_size=4, num_blocks=12)
    assert sc.events == []
    trace, findings = _engine(sc)
    assert findings == []
    # preempted b comes back: RESUMED up to 0.33, re-sent in full as a new request from 0.34.0 (scheduler.py:1619-1626)
    b_rows = [r.kind for r in trace.rows if r.request == "b"]
    assert "RESUMED" in b_rows or b_rows.count("NEW") >= 2
    assert trace.pool_end["num_free"] == 11 and not trace.pool_end["live_requests"]


# 0.26.0: its chunk rule and connector lookup differ from the mirror's model of them (docs/engine-tier.md:
# open differences); the agreement tests are checked on 0.27.1 and later
MIRROR_MODELS_THIS_RELEASE = pytest.mark.skipif(
    VERSION < (0, 27, 0), reason="vLLM 0.26.0: mirror/engine differences are open (docs/engine-tier.md)")


@MIRROR_MODELS_THIS_RELEASE
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 8])
def test_rows_agree_with_the_mirrored_tier(seed):
    from harness.diff import diff
    from harness.generate import random_scenario

    report = diff(random_scenario(seed, checkpoints=False), config=MIRROR)
    assert report.same, report.describe()


def test_seed_scenario_rows_agree_with_the_mirrored_tier():
    from harness.diff import diff

    report = diff(load_scenario(SEED), config=MIRROR)
    assert report.same, report.describe()
    assert report.notes == []


def test_explicit_chunk_the_scheduler_would_not_schedule_is_bad_input():
    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1}, "chunks": [3], "max_tokens": 1}])
    with pytest.raises(BadInput, match=r"requests\[a\]\.chunks\[0\] = 3"):
        replay(sc, config=MIRROR)


def test_eagle_block_drop_runs_with_vllms_eagle_lookahead_and_block_drop():
    from harness.engine.scheduler import EngineDriver

    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1}, "max_tokens": 3}],
                   num_speculative_tokens=2, eagle_block_drop=True)
    engine = EngineDriver(sc, None, MIRROR.engine)
    assert engine.sched.use_eagle and engine.sched.num_lookahead_tokens == 2
    if hasattr(engine.sched, "use_eagle_block_drop"):
        assert engine.sched.use_eagle_block_drop
    assert judge(engine.run()) == []


def test_mtp_modules_and_lookahead_hashes_reach_vllms_scheduler_and_pool():
    """geometry.mtp_modules: vLLM's own rule picks multi-module MTP from the stand-in checkpoint, and its Scheduler
    reserves num_speculative_tokens of prefill lookahead; lookahead_hashes: the connector asks for core lookahead
    hashing, and vLLM's block pool keys blocks with the drafter's lookahead (0.34+)."""
    from harness.engine.scheduler import EngineDriver
    from harness.release import vllm_release

    if not vllm_release().mtp_reserve:
        pytest.skip("no multi-module MTP prefill reserve in this release")
    request = [{"id": "a", "prompt": {"length": 20, "seed": 1}, "max_tokens": 3}]
    engine = EngineDriver(_scenario(request, num_speculative_tokens=3, eagle_block_drop=True, mtp_modules=3,
                                    attn_block_size=16, mamba_block_size=16), None, MIRROR.engine)
    assert engine.vc.speculative_config.use_multi_module_mtp() and engine.sched.num_prefill_lookahead == 3
    single = EngineDriver(_scenario(request, num_speculative_tokens=3, eagle_block_drop=True, mtp_modules=1,
                                    attn_block_size=16, mamba_block_size=16), None, MIRROR.engine)
    assert not single.vc.speculative_config.use_multi_module_mtp() and single.sched.num_prefill_lookahead == 1
    if vllm_release().lookahead_hashes:
        hashed = EngineDriver(_scenario(request, num_speculative_tokens=2, eagle_block_drop=True,
                                        lookahead_hashes=True), None, MIRROR.engine)
        assert hashed.sched.kv_cache_manager.block_pool.num_hash_lookahead_tokens > 0
        plain = EngineDriver(_scenario(request, num_speculative_tokens=2, eagle_block_drop=True), None, MIRROR.engine)
        assert plain.sched.kv_cache_manager.block_pool.num_hash_lookahead_tokens == 0  # a connector's default


def test_the_retention_oracle_follows_the_eagle_block_drop_vllm_resolves_under_lookahead_hashes():
    """vLLM 0.34 drops no EAGLE block where blocks are keyed with the drafter's lookahead (scheduler.py:342-345): a
    resend's state is then kept at the resend's own block, not a block lower. The retention oracle reads the drop
    the scheduler resolved (a 651-token prompt, 320-token blocks, sparse retention: was a false retention finding)."""
    from harness.engine.scheduler import EngineDriver
    from harness.oracles import judge
    from harness.release import vllm_release

    if not vllm_release().lookahead_hashes:
        pytest.skip("no lookahead block hashes in this release")
    request = [{"id": "a", "prompt": {"length": 651, "seed": 1}, "max_tokens": 2}]
    geometry = dict(num_speculative_tokens=1, eagle_block_drop=True, attn_block_size=320, mamba_block_size=320,
                    hash_block_size=320, token_budget=320, num_blocks=96, max_model_len=2048,
                    prefix_cache_retention_interval=0)
    hashed = EngineDriver(_scenario(request, lookahead_hashes=True, **geometry), None, MIRROR.engine)
    assert not hashed.trace.retention.eagle_block_drop
    assert [f.signature for f in judge(hashed.run())] == []
    plain = EngineDriver(_scenario(request, **geometry), None, MIRROR.engine)
    assert plain.trace.retention.eagle_block_drop


def test_engine_campaigns_draw_the_drafters_the_release_has():
    from harness.genome import budget_scenario, run_budget
    from harness.release import vllm_release

    release = vllm_release()
    budget = run_budget(RunConfig(tier="engine"))
    geometries = [budget_scenario(seed, budget, True).geometry for seed in range(800)]
    if budget.scheduler_knobs:  # 0.34+: the drafter draws go with the scheduler knobs
        assert any(g.multi_module_mtp for g in geometries) == release.mtp_reserve
        assert any(g.lookahead_hashes for g in geometries) == release.lookahead_hashes
        assert any(g.mtp_modules == 1 for g in geometries)
    else:
        assert not any(g.mtp_modules or g.lookahead_hashes for g in geometries)


def test_multi_module_mtp_and_lookahead_hashes_are_the_engine_tiers():
    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1}, "max_tokens": 3}], num_speculative_tokens=2,
                   eagle_block_drop=True, mtp_modules=2)
    with pytest.raises(BadInput, match="geometry.mtp_modules: vLLM's own scheduler code"):
        replay(sc, config=RunConfig(tier="symbolic"))
    with pytest.raises(BadInput, match="need eagle_block_drop"):
        _scenario([], num_speculative_tokens=2, mtp_modules=2)


@MIRROR_MODELS_THIS_RELEASE
@pytest.mark.parametrize("seed", [4, 36, 45])
def test_eagle_scenarios_agree_with_the_mirrored_tier(seed):
    from harness.diff import diff
    from harness.generate import random_scenario

    sc = random_scenario(seed, checkpoints=False)
    assert sc.geometry.eagle_block_drop
    report = diff(sc, config=MIRROR)
    assert report.same, report.describe()


def test_eagle_block_drop_without_drafts_is_bad_input():
    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1}, "max_tokens": 3}], eagle_block_drop=True)
    with pytest.raises(BadInput, match="num_speculative_tokens > 0"):
        replay(sc, config=MIRROR)


def test_speculative_decoding_runs_through_update_draft_token_ids():
    sc = _scenario([{"id": "a", "prompt": {"length": 12, "seed": 1}, "max_tokens": 8, "acceptance": [2, 0, 1]}],
                   num_speculative_tokens=2)
    trace, findings = _engine(sc)
    assert findings == []
    spec_rows = [r for r in trace.rows if r.num_scheduled == 3]
    assert spec_rows, "no step scheduled 1 + K tokens"
    assert any(rd.what == "postcopy" for rd in trace.reads) or trace.steps_run > 4


def test_clipped_spec_decode_padding_is_a_vllm_finding_on_old_releases():
    """0.27.1 pads a newly admitted 1-token request to 1 + K rows with K placeholder drafts, then the Mamba
    split clips the rows and keeps the drafts (no row left for the sampled token); 0.33.0 drops the padding
    in that case (scheduler.py:1359-1370). Generated scenario 37 reaches it at step 5."""
    from harness.generate import random_scenario

    if not ((0, 27, 0) <= VERSION < (0, 28, 0) or VERSION >= (0, 33, 0)):
        pytest.skip("checked on 0.27.1 (finding) and 0.33.0 (fixed) only; where 0.26 and 0.28-0.32 stand is not known")
    trace, findings = _engine(random_scenario(37, checkpoints=False))
    exc = [f for f in findings if f.oracle == "vllm-exception"]
    if VERSION < (0, 28, 0):
        assert [(f.step, f.request) for f in exc] == [(5, "a")]
        assert "2 token(s) with 2 spec-decode token(s)" in exc[0].actual
    else:
        assert findings == [] and trace.exception is None


@MIRROR_MODELS_THIS_RELEASE
def test_mirror_pads_a_decode_ready_admission_as_vllm_does():
    """Generated scenario 21 (K = 1): request a is admitted at step 8 with one prompt token left; vLLM pads it
    to 1 + K rows with a placeholder draft (pad_spec_decode, scheduler.py:1305-1330), and so does the mirror."""
    from harness.diff import diff
    from harness.generate import random_scenario

    report = diff(random_scenario(21, checkpoints=False), config=MIRROR)
    assert report.same, report.describe()
    mirror = replay(random_scenario(21, checkpoints=False))
    (row,) = [r for r in mirror.rows if (r.step, r.request) == (8, "a")]
    assert (row.kind, row.num_computed, row.num_scheduled) == ("NEW", 12, 2)


@MIRROR_MODELS_THIS_RELEASE
def test_sync_admission_undercount_raises_on_both_tiers():
    """The known admission undercount in its prompt-final-chunk form (a 65-token prompt, a 64-token sync hit,
    6 free blocks): vLLM's own scheduler admits it under its default full-sequence admission and
    get_new_blocks raises, as in the mirrored tier; with one more block both admit it."""
    from harness.diff import diff

    sc = load_scenario(Path(SEED).parent / "sync-external-admission-undercount.json")
    trace, findings = _engine(sc)
    assert trace.exception is not None and "get_new_blocks" in trace.exception.site
    assert [f.oracle for f in findings] == ["vllm-exception"]
    report = diff(sc, config=MIRROR)
    assert report.same, report.describe()
    roomy = sc.model_copy(update={"geometry": sc.geometry.model_copy(update={"num_blocks": 8})})
    assert _engine(roomy)[1] == [] and diff(roomy, config=MIRROR).same


@pytest.mark.parametrize("abort_step", [1, 5])
def test_abort_during_async_load_frees_once_the_load_reports(abort_step):
    """vLLM keeps the blocks of a request aborted in WAITING_FOR_REMOTE_KVS until finished_recving reports
    the load: the engine still reports it (at its step, or in one more step at shutdown)."""
    sc = _scenario([{"id": "a", "prompt": {"length": 20, "seed": 1},
                     "external": {"tokens": 13, "async": True, "load_steps": 3}, "max_tokens": 3},
                    {"id": "b", "prompt": {"length": 9, "seed": 2}, "max_tokens": 2}],
                   [{"step": abort_step, "kind": "abort", "request": "a"}])
    trace, findings = _engine(sc)
    assert findings == []
    assert trace.pool_end["num_free"] == 31 and not trace.pool_end["live_requests"]
    assert all(r.request == "b" for r in trace.rows) == (abort_step == 1)


FAILED_LOAD = {
    "version": 1, "name": "failed async load",
    "geometry": {"hash_block_size": 4, "attn_block_size": 16, "mamba_block_size": 16, "num_blocks": 16,
                 "max_model_len": 128},
    "requests": [
        {"id": "a", "prompt": {"length": 40, "seed": 1}, "external": {"tokens": 33, "async": True, "load_fails": True},
         "max_tokens": 3},
        {"id": "b", "prompt": {"length": 40, "seed": 2, "share": {"request": "a", "tokens": 36}}, "arrival_step": 4,
         "max_tokens": 2}],
    "max_steps": 20}


@pytest.mark.skipif(version_tuple()[:2] < (0, 30), reason="KVConnectorOutput.failed_recving is 0.30+")
@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_a_failed_async_load_takes_vllms_own_recovery_path(policy):
    """The connector writes nothing and reports the request in failed_recving: under "fail" (vLLM's default)
    the request ends with an error, under "recompute" it recomputes from token 0 and later requests hit the
    blocks it cached; no oracle fires either way (the undelivered state is never read)."""
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import EngineDriver
    from harness.oracles import judge
    from harness.scenario import parse_scenario

    doc = json.loads(json.dumps(FAILED_LOAD))
    doc["geometry"]["kv_load_failure_policy"] = policy
    driver = EngineDriver(parse_scenario(doc), None, EngineOptions(runner="mirror"))
    trace = driver.run()
    assert judge(trace) == []
    a = driver.reqs["a"].vreq
    if policy == "fail":
        assert str(a.status).endswith("FINISHED_ERROR") and a.num_output_tokens == 0
    else:
        assert a.num_output_tokens == 3 and any(r.request == "a" for r in trace.rows)


def test_a_failed_load_is_engine_tier_only():
    from harness.errors import BadInput
    from harness.replay import replay
    from harness.scenario import parse_scenario

    with pytest.raises(BadInput, match="engine tier only"):
        replay(parse_scenario(FAILED_LOAD), config=RunConfig(tier="symbolic"))


def test_known_issues_rejudged_on_the_engine_tier(capsys):
    """`known check --tier engine --runner mirror`: each repro shows its issue on vLLM's own Scheduler and its
    fix removes it (none reproduces only in our model of the scheduler)."""
    from harness.cli import main
    from harness.known_issues import KNOWN_ISSUES

    code = main(["known", "check", "--tier", "engine", "--runner", "mirror"])
    out = capsys.readouterr().out
    assert code == 0, out
    expected = [k.id for k in KNOWN_ISSUES if k.repro_expected() and k.runs_on("engine", "mirror")]
    for issue in expected:
        line = next(ln for ln in out.splitlines() if ln.startswith(issue))
        assert "reproduces, fix removes it" in line, line
