# vLLM file: tests/v1/core/test_mamba_align_chunk_split.py


def test_prefill_lookahead_never_cuts_a_split_chunk_to_nothing() -> None:
    """Multi-module MTP reserves NUM_SPEC tokens of prefill lookahead after
    the align split. A chunk resuming mid-block (here after the reserve's own
    earlier cut) stops at the block's end; where that end lies within the
    lookahead of the prompt's end, a cut to 0 tokens recurs on every step and
    the request is never scheduled again.
    """
    prompt_len = MAMBA_BLOCK_SIZE + 2
    (request,) = create_requests(1, num_tokens=prompt_len, block_size=ATTN_BLOCK_SIZE)
    request.num_computed_tokens = MAMBA_BLOCK_SIZE - 1
    num_new = _split(request, prompt_len - request.num_computed_tokens, partial_hit=True)
    assert request.num_computed_tokens + num_new == MAMBA_BLOCK_SIZE

    stub = SimpleNamespace(num_prefill_lookahead=NUM_SPEC)
    reserved = Scheduler._reserve_prefill_lookahead(
        stub, request, request.num_computed_tokens, num_new
    )
    assert reserved > 0
