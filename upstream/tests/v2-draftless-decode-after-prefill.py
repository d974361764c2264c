# vLLM file: tests/v1/worker/test_gpu_batch_ordering.py


def test_decode_without_drafts_leads_a_prompt_chunk_of_decode_query_len():
    # MTP k=1: "spec" verifies a draft, "decode" got none this step (trimmed by
    # the token budget) and "prompt" is a fresh 2-token prompt. The Mamba
    # builder splits decodes from prefills at the first prefilling request: a
    # decode behind the prompt would run through the prefill kernels, which
    # ignore its accepted draft tokens.
    batch = {"prompt": (0, 2), "decode": (16, 16), "spec": (16, 16)}
    runner = _make_runner(batch, decode_query_len=2)
    scheduler_output = SimpleNamespace(
        num_scheduled_tokens={"prompt": 2, "decode": 1, "spec": 2},
        total_num_scheduled_tokens=5,
        scheduled_spec_decode_tokens={"spec": [7]},
    )
    state, _ = runner.gather_batch_req_state(scheduler_output, False)
    assert state is not None
    assert state.req_ids == ["spec", "decode", "prompt"]
    assert state.is_prefilling_np.tolist() == [False, False, True]
    # Every per-request array follows the same order.
    index = runner.req_states.req_id_to_index
    assert state.idx_mapping_np.tolist() == [index[r] for r in state.req_ids]
    assert state.num_scheduled_tokens.tolist() == [2, 1, 2]
    assert state.num_draft_tokens_np.tolist() == [1, 0, 0]
