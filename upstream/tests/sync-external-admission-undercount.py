# vLLM file: tests/v1/core/prefix_cache/test_partial_prefix_cache_hits.py


def test_sync_external_hit_continued_across_a_block_counts_its_mamba_block():
    """A sync connector hit continued in the same allocate_slots call: the load
    takes the Mamba block it ends in, and the continuation crosses into the
    next one. Both must be counted, so a pool short of them defers the request
    (None) rather than failing in get_new_blocks.
    """
    manager = make_full_mamba_manager(
        dcp_world_size=1,
        hash_block_size=4,
        full_block_size=16,
        mamba_block_size=16,
        num_blocks=7,  # the null block and 6 free
    )
    request = make_request("0", list(range(1, 66)), 4, sha256)
    # 64 tokens loaded, the 65th computed: 5 attention blocks and 2 Mamba
    # blocks (the loaded state's and the running one's) do not fit in 6.
    new_blocks = manager.allocate_slots(
        request, num_new_tokens=1, num_external_computed_tokens=64
    )
    assert new_blocks is None
