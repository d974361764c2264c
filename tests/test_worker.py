"""The worker shadow reproduces the runner's rows from the protocol note (shared/docs, §1.3 and §2)."""

from __future__ import annotations

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
    kinds = [r.kind for r in trace.rows if r.request == "a"]
    assert "RESUMED" in kinds and kinds[0] == "NEW"
