# vLLM file: tests/v1/core/test_mamba_align_chunk_split.py


@pytest.mark.parametrize("resume_at", [800, 1584])
def test_checkpoint_resume_below_the_checkpoint_column_stops_at_its_block(
    resume_at: int,
) -> None:
    """A hash-aligned partial hit in a block below the prompt's checkpoint
    column can export the checkpoint, unlike the aliasing resume above. Its
    final chunk must still stop at the block's end: cache_blocks keys the block
    holding state@resume_at as state@1600, which only a chunk ending there
    writes.
    """
    prompt_len = 3602
    (request,) = create_requests(1, num_tokens=prompt_len, block_size=ATTN_BLOCK_SIZE)
    request.num_computed_tokens = resume_at
    num_new = _split(
        request,
        prompt_len - resume_at,
        use_eagle=False,
        partial_hit=True,
        num_prefill_checkpoint_blocks=1,
    )
    assert resume_at + num_new == MAMBA_BLOCK_SIZE
