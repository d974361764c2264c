# vLLM file: tests/v1/core/test_mamba_align_chunk_split.py


def test_split_stays_on_the_mamba_grid_below_a_smaller_cache_block() -> None:
    """extract_hidden_states adds a cache-only group with a smaller block, and
    the engine core lowers cache_config.block_size to it. Chunks must still end
    on the Mamba grid: a chunk ending mid Mamba block leaves its slot at that
    end's state, which the next chunk publishes as the block's.
    """
    (request,) = create_requests(1, num_tokens=3602, block_size=ATTN_BLOCK_SIZE)
    stub = SimpleNamespace(
        block_size=MAMBA_BLOCK_SIZE,
        # The hidden-state group's block, 1/8 of the Mamba block.
        cache_config=SimpleNamespace(
            block_size=MAMBA_BLOCK_SIZE // 8, mamba_block_size=MAMBA_BLOCK_SIZE
        ),
        use_eagle_block_drop=False,
        num_hash_lookahead_tokens=0,
        max_num_scheduled_tokens=2048,
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
        mamba_partial_cache_hit=False,
        mamba_shared_prefix_checkpoint=False,
        hash_block_size=ATTN_BLOCK_SIZE,
        mamba_has_prefill_checkpoint_blocks=False,
        mamba_prefill_checkpoint_alignment=None,
    )
    num_new = Scheduler._mamba_block_aligned_split(stub, request, 2048)
    assert num_new == MAMBA_BLOCK_SIZE
