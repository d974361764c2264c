"""The worker shadow reproduces the runner's rows from the protocol note (shared/docs, §1.3 and §2)."""

from __future__ import annotations

import pytest

from testlib import run


def _geometry(k=0, bs=4, hash_bs=None, blocks=64):
    return {"hash_block_size": hash_bs or bs, "attn_block_size": bs, "mamba_block_size": bs,
            "num_blocks": blocks, "num_speculative_tokens": k, "max_model_len": 128}


def _first_row(trace, request):
    return next(r for r in trace.rows if r.request == request)


def test_fresh_prompt_rows_have_null_padding_then_running_and_spec_blocks():
    # vLLM's split ends the first chunk of a 10-token prompt at 8 (the last cacheable boundary, bs=4)
    for k in (0, 2):
        trace, findings = run({"version": 1, "geometry": _geometry(k),
                               "requests": [{"id": "a", "prompt": {"length": 10}}]})
        first = _first_row(trace, "a")
        assert findings == [] and first.num_scheduled == 8
        assert len(first.worker_row) == 2 + k and first.worker_row[0] == 0 and 0 not in first.worker_row[1:]


def test_async_external_load_reaches_the_worker_as_new_with_full_table():
    trace, findings = run({"version": 1, "geometry": _geometry(2),
                           "requests": [{"id": "a", "prompt": {"length": 30},
                                         "external": {"tokens": 24, "async": True}, "max_tokens": 3}]})
    assert findings == []
    first = _first_row(trace, "a")
    assert first.kind == "NEW" and first.num_computed == 24 and first.step == 1
    # the loaded state sits in column (24-1)//4 = 5, after five null columns
    assert first.worker_row[:5] == [0] * 5 and first.worker_row[5] != 0 and first.prev == 5


def test_spec_decode_rejections_keep_state_exact():
    trace, findings = run({"version": 1, "geometry": _geometry(2, bs=4, hash_bs=2),
                           "requests": [{"id": "a", "prompt": {"length": 13}, "max_tokens": 12,
                                         "acceptance": [0, 2, 1, 2, 0]},
                                        {"id": "b", "prompt": {"length": 19, "share": {"request": "a", "tokens": 12}},
                                         "arrival_step": 6, "max_tokens": 5, "acceptance": [1]}]})
    assert findings == []
    assert any(rd.what == "postcopy" for rd in trace.reads)
    assert any(rd.what == "precopy" for rd in trace.reads)


def test_preemption_and_resume_replace_the_row():
    trace, findings = run({"version": 1, "geometry": _geometry(1, bs=4, hash_bs=2),
                           "requests": [{"id": "a", "prompt": {"length": 9}, "max_tokens": 10}],
                           "events": [{"step": 4, "kind": "preempt", "request": "a"}]})
    assert findings == []
    rows = [r for r in trace.rows if r.request == "a"]
    assert rows[0].kind == "NEW"
    # RESUMED up to 0.33; 0.34.0 re-sends a preempted request in full, as a new one (scheduler.py:1619-1626)
    i = next(i for i, r in enumerate(rows) if r.kind == "RESUMED" or (i > 0 and r.kind == "NEW"))
    resumed, before = rows[i], rows[i - 1]
    # a resumed request's row is replaced by the scheduler's whole table (gpu_model_runner.py _update_states,
    # resumed_from_preemption: block_ids replace the row), not appended to what the row held before preemption
    assert resumed.worker_row == resumed.core_row
    assert resumed.worker_row[: len(before.worker_row)] != before.worker_row


def test_rows_follow_the_persistent_batch():
    """The forward walks the V1 persistent batch (InputBatch, gpu_input_batch.py in 0.33.0): a request added
    takes the lowest row freed this step, else a new row at the end (:320-357); rows still free move the last
    row down (condense, :698-760); the scheduler's order does not decide the rows."""
    from harness.states import SymbolicStates
    from harness.trace import Trace
    from harness.worker import CachedReq, NewReq, SchedulerOutput, WorkerShadow

    shadow = WorkerShadow(block_size=4, num_spec=0, mamba_groups=(1,), states=SymbolicStates(0), trace=Trace("test", None),
                          checkpoint=None)

    def step(n, new=(), running=(), finished=()):
        so = SchedulerOutput(step=n, finished=set(finished))
        so.new_reqs = [NewReq(r, ([1], [1]), 0, 8) for r in new]
        so.cached_reqs = [CachedReq(r, None, 4, resumed=False) for r in running]
        so.num_scheduled = {r: 4 for r in (*running, *new)}
        shadow.update_states(so)
        return list(shadow.batch)

    assert step(0, new=("a", "b", "c", "d")) == ["a", "b", "c", "d"]
    assert step(1, running=("d", "c", "b", "a")) == ["a", "b", "c", "d"]  # scheduler order: rows stay
    assert step(2, running=("a", "c"), finished=("b",)) == ["a", "c"]  # b, d out: c stays, trailing row dropped
    assert step(3, new=("e",), running=("c", "a")) == ["a", "c", "e"]  # appended
    # f takes a's row, then the decode-first reorder (attention/backends/utils.py:939-1015) swaps the first chunk
    # behind the two extends, with vLLM's swap
    assert step(4, new=("f",), running=("e", "c"), finished=("a",)) == ["e", "c", "f"]
    assert step(5, running=("f", "e")) == ["e", "f"]  # c's row taken by the last row (condense)


def test_the_batch_is_reordered_decodes_first_as_vllm_reorders_it():
    """`_may_reorder_batch` at the Mamba2 builder's threshold 1 + K: decodes, short extends, long extends, first
    chunks; the rows land where vLLM's own reorder puts them (checked against vLLM's function on the same rows)."""
    import numpy as np

    from harness.states import SymbolicStates
    from harness.trace import Trace
    from harness.worker import CachedReq, NewReq, SchedulerOutput, WorkerShadow

    utils = pytest.importorskip("vllm.v1.attention.backends.utils")
    if not hasattr(utils, "reorder_batch_to_split_decodes_and_prefills"):
        pytest.skip("this vLLM has no V1 persistent-batch reorder (removed with the V1 runner in 0.34.0)")
    reorder_batch_to_split_decodes_and_prefills = utils.reorder_batch_to_split_decodes_and_prefills

    shadow = WorkerShadow(block_size=4, num_spec=1, mamba_groups=(1,), states=SymbolicStates(1), trace=Trace("test", None),
                          checkpoint=None)
    # (request, num_computed, num_prompt, num_scheduled): a first chunk, a long extend, a short extend, two decodes
    rows = [("p", 0, 8, 4), ("l", 4, 12, 4), ("s", 6, 8, 2), ("d1", 9, 8, 2), ("d2", 9, 8, 1)]
    so = SchedulerOutput(step=0)
    so.new_reqs = [NewReq(r, ([1], [1]), nc, prompt) for r, nc, prompt, _ in rows]
    so.num_scheduled = {r: ns for r, _, _, ns in rows}
    shadow.update_states(so)

    class Batch:  # the InputBatch fields vLLM's reorder reads, and its swap
        req_ids = [r for r, *_ in rows]
        num_computed_tokens_cpu = np.array([nc for _, nc, _, _ in rows])
        num_prompt_tokens = np.array([p for _, _, p, _ in rows])

        def swap_states(self, i, j):
            self.req_ids[i], self.req_ids[j] = self.req_ids[j], self.req_ids[i]
            for a in (self.num_computed_tokens_cpu, self.num_prompt_tokens):
                a[[i, j]] = a[[j, i]]

    batch = Batch()
    reorder_batch_to_split_decodes_and_prefills(batch, type("SO", (), {"num_scheduled_tokens": so.num_scheduled})(),
                                                decode_threshold=2)
    assert shadow.batch == batch.req_ids  # vLLM's own reorder of the same rows
    assert set(shadow.batch[:2]) == {"d1", "d2"} and shadow.batch[2:] == ["s", "l", "p"]
