"""The V1 runner under async scheduling with EAGLE drafts (harness/engine/v1_eagle.py) and the copy timing of
its device-to-host copies (harness/engine/copy_timing.py, `--copy-timing early|late`)."""

from __future__ import annotations

import pytest
import torch

from harness.engine.copy_timing import CopyTiming
from harness.engine.v1_eagle import verified_row
from harness.errors import BadInput
from harness.mutants import mutant_applied
from harness.oracles import judge
from harness.scenario import load_scenario
from harness.states import chain
from harness.tokens import true_token, wrong_token

from testlib import ROOT

EAGLE = ROOT / "tests" / "data" / "v1-async-eagle.json"  # K = 2, EAGLE, two requests, mixed acceptance
MUTANT = "v1-async-valid-count-unwaited"


def _run(scheduling="auto", timing="early", mutant=None):
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import EngineDriver

    try:
        driver = EngineDriver(load_scenario(EAGLE), mutant, EngineOptions(runner="v1", async_scheduling=scheduling,
                                                                          copy_timing=timing))
    except BadInput as exc:
        pytest.skip(f"the V1 worker cannot run here: {exc}")
    with mutant_applied(mutant):
        trace = driver.run()
    return trace, {rid: list(r.vreq.output_token_ids) for rid, r in driver.reqs.items()}


def test_v1_follows_async_scheduling_with_eagle_drafts():
    """vLLM schedules the EAGLE config asynchronously and the V1 worker follows it: the runner's own drafter
    path (next tokens, valid counts, drafts on the device) fills the scheduler's placeholders, and the run
    produces the synchronous run's tokens with every oracle holding, under early and late copies."""
    sync_trace, sync_tokens = _run("off")
    assert not sync_trace.async_scheduling and judge(sync_trace) == []
    for timing in ("early", "late"):
        trace, tokens = _run(timing=timing)
        assert trace.async_scheduling, timing
        assert judge(trace) == [], timing
        assert tokens == sync_tokens and all(tokens.values()), timing
        # drafts were accepted and rejected: some steps advance a request by more than one token, some by one
        steps = {}
        for r in trace.rows:
            steps.setdefault(r.request, []).append(r.num_computed)
        advances = {b - a for nc in steps.values() for a, b in zip(nc, nc[1:])}
        assert max(advances) > 1 and 1 in advances, (timing, steps)


def test_copy_ordering_mutant_shows_only_with_late_copies():
    """The mutant reads the valid sampled counts without waiting on their copy: with host copies landing at
    once (early) it changes nothing; with late copies the computed-count correction is stale."""
    trace, _ = _run(timing="early", mutant=MUTANT)
    assert judge(trace) == []
    trace, _ = _run(timing="late", mutant=MUTANT)
    assert {f.oracle for f in judge(trace)} & {"provenance", "cache-integrity"}


class _Runner:
    def __init__(self) -> None:
        from types import SimpleNamespace

        self.input_batch = SimpleNamespace(num_accepted_tokens_cpu_tensor=torch.zeros(4, dtype=torch.int32))
        self.valid_sampled_token_count_cpu = torch.zeros(4, dtype=torch.int32)
        self.num_accepted_tokens_event = self.valid_sampled_token_count_event = object()
        self.draft_token_ids_event = None  # no draft copy: left alone


def test_late_copies_land_when_the_host_waits_in_stream_order():
    r = _Runner()
    timing = CopyTiming(r, "late")
    assert r.draft_token_ids_event is None
    with timing.issue("num_accepted_tokens_event"):  # default stream
        r.input_batch.num_accepted_tokens_cpu_tensor[:2] = 3
    with timing.issue("valid_sampled_token_count_event"):  # side stream, after the default stream's copy
        r.valid_sampled_token_count_cpu[:2] = 2
    assert r.input_batch.num_accepted_tokens_cpu_tensor.tolist() == [0, 0, 0, 0]  # nothing waited: as it was
    assert r.valid_sampled_token_count_cpu.tolist() == [0, 0, 0, 0] and not r.valid_sampled_token_count_event.query()
    r.valid_sampled_token_count_event.synchronize()  # its stream waited for the default stream first
    assert r.valid_sampled_token_count_cpu.tolist() == [2, 2, 0, 0]
    assert r.input_batch.num_accepted_tokens_cpu_tensor.tolist() == [3, 3, 0, 0]
    with timing.issue("num_accepted_tokens_event"):
        r.input_batch.num_accepted_tokens_cpu_tensor[:1] = 5
    with timing.issue("num_accepted_tokens_event"):  # the earlier copy into this buffer lands first
        r.input_batch.num_accepted_tokens_cpu_tensor[1:2] = 6
    assert r.input_batch.num_accepted_tokens_cpu_tensor.tolist() == [5, 3, 0, 0]
    timing.default_stream_waited()
    assert r.input_batch.num_accepted_tokens_cpu_tensor.tolist() == [5, 6, 0, 0]


def test_early_copies_land_at_once():
    r = _Runner()
    timing = CopyTiming(r, "early")
    with timing.issue("valid_sampled_token_count_event"):
        r.valid_sampled_token_count_cpu[:1] = 7
    assert r.valid_sampled_token_count_cpu.tolist()[0] == 7 and r.valid_sampled_token_count_event.query()


def test_verified_row_is_rejection_sampling_by_the_token_rule():
    toks = [11, 12]  # the last real token and one more, then two drafts
    fed = chain([5], toks)
    right = true_token(fed[-1])
    fed_right = chain([5], toks + [right])
    second = true_token(fed_right[-1])
    drafts = [right, wrong_token(second)]
    all_fed = chain([5], toks + drafts)
    assert verified_row(all_fed, toks + drafts, 2) == [right, second]  # one accepted, then the correction
    assert verified_row(all_fed, toks + [wrong_token(right), 9], 2) == [right]
    assert verified_row(fed, toks, 0) == [right]  # no drafts: one token


def test_eagle_next_token_kernel_replacement_matches_its_contract():
    from harness.engine.kernels_v1 import eagle_prepare_next_token_padded_kernel as kernel

    sampled = torch.tensor([[4, 5, -1], [7, -1, -1], [1, 2, 9], [3, 3, 3], [-1, -1, -1]], dtype=torch.int32)
    discard = torch.tensor([False, False, False, True, False])
    backup = torch.tensor([40, 70, 10, 30, 50], dtype=torch.int32)
    next_ids, counts = torch.zeros(5, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)
    kernel(sampled, discard, backup, next_ids, counts, 8, 3, 5, sampled.stride(0), BLOCK_SIZE_TOKENS=4)
    # the last valid token and the count of valid ones (not -1, inside the vocabulary of 8); a discarded row, or
    # one with none valid, takes its backup token
    assert next_ids.tolist() == [5, 7, 2, 30, 50] and counts.tolist() == [2, 1, 2, 0, 0]


def test_forced_resume_under_late_copies_reads_a_clobbered_accepted_count():
    """Known issue v1-async-accepted-copy-race as the late-copy campaign found it (scenarios/findings/, stock
    0.33.0): a request resumed right after a forced preemption takes the previous step's accepted count, which
    lands on its row after add_request reset it. Only late copies show this form; the issue's fix removes it. The
    repro is for 0.33.0 (older releases hit other bugs first)."""
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import replay
    from harness.vllm_adapter import installed_version

    if not installed_version().startswith("0.33."):
        pytest.skip("the repro is minimized on vLLM 0.33.0")
    sc = load_scenario(ROOT / "scenarios" / "findings" / "v1-async-resume-accepted-count-clobbered.json")
    early = replay(sc, None, EngineOptions(runner="v1", copy_timing="early"))
    late = replay(sc, None, EngineOptions(runner="v1", copy_timing="late"))
    assert early.async_scheduling and judge(early) == []
    bad = judge(late)
    assert bad and {f.signature for f in bad} <= {"provenance:precopy", "provenance:initial"}
    assert all(f.request == "a" and f.step == 4 for f in bad)
    from harness.known_issues import known_issue_by_id
    from testlib import fixes_applied

    with fixes_applied([known_issue_by_id("v1-async-accepted-copy-race")]):
        assert judge(replay(sc, None, EngineOptions(runner="v1", copy_timing="late"))) == []
