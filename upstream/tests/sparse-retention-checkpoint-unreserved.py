# vLLM file: tests/v1/core/prefix_cache/test_partial_prefix_cache_hits.py


def test_unreserved_checkpoint_column_is_null_in_the_worker_row():
    """Under sparse retention a chunk short of the prefill end reserves no
    checkpoint, so the worker's export into its column must be masked: the
    column must be null in the worker's row. That row only appends the block ids
    each step hands out, so a speculative block the manager relocates out of
    the column stays there, and the export would overwrite it.
    """
    block_size = 32
    manager = make_full_mamba_manager(
        dcp_world_size=1,
        hash_block_size=block_size,
        full_block_size=block_size,
        mamba_block_size=block_size,
        num_blocks=64,
        use_eagle=True,
        num_speculative_blocks=3,
        num_prefill_checkpoint_blocks=1,
    )
    manager.coordinator.retention_interval = 0
    mamba_manager = manager.coordinator.single_type_managers[1]
    request = make_request("req", list(range(200)), block_size, sha256)
    null_block_id = manager.block_pool.null_block.block_id

    worker_row: list[int] = []
    for start in range(0, 200, 2 * block_size):
        end = min(start + 2 * block_size, 200)
        new_blocks = manager.allocate_slots(request, end - start)
        assert new_blocks is not None
        worker_row += new_blocks.get_block_ids()[1]
        offsets, cols = compute_mamba_prefill_checkpoints(
            [end],
            [end - start],
            hash_block_size=block_size,
            mamba_block_size=block_size,
            checkpoint_alignment=16,
            drop_eagle_block=True,
            cache_hit_alignment_tokens=mamba_manager.cache_hit_alignment_tokens,
        )
        if offsets[0]:  # the worker exports a checkpoint into column cols[0]
            row = mamba_manager.req_to_blocks[request.request_id]
            reserved = request.request_id in mamba_manager._checkpoints
            expected = row[cols[0]].block_id if reserved else null_block_id
            assert worker_row[cols[0]] == expected, f"chunk [{start}, {end})"
        request.num_computed_tokens = end
        manager.new_step_starts()
