# vLLM file: tests/v1/core/prefix_cache/test_partial_prefix_cache_hits.py


def test_partial_hit_admission_counts_the_cow_tail_once():
    """Full-sequence admission of a partial prefix hit: the request shares the
    hit's evictable attention tail block and replaces it by a copy-on-write
    block, so it holds one of the two, never both. Counting both refuses a
    request on a pool vLLM's start-up check accepts for max_model_len, and the
    engine waits on it forever.
    """
    attention = FullAttentionSpec(
        block_size=8, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    mamba = MambaSpec(
        block_size=8,
        shapes=(1, 1),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
        num_prefill_checkpoint_blocks=1,
        prefill_checkpoint_alignment=1,
    )
    manager = make_kv_cache_manager(
        KVCacheConfig(
            num_blocks=32,  # what the start-up check accepts for 224 tokens
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(["full"], attention),
                KVCacheGroupSpec(["mamba"], mamba),
            ],
        ),
        max_model_len=224,
        enable_caching=True,
        hash_block_size=2,
        retention_interval=0,
    )
    shared = list(range(1, 13))
    # The first request caches 12 tokens: one block and half of the next.
    first = make_request("first", [*shared, 100], 2, sha256)
    assert manager.allocate_slots(first, 13, full_sequence_must_fit=True)
    first.num_computed_tokens = 13
    manager.free(first)
    manager.new_step_starts()

    # A 209-token prompt shares those 12 (a partial hit); admission counts the
    # whole prompt's blocks, the shared tail or its copy once.
    request = make_request("second", [*shared, *range(200, 397)], 2, sha256)
    hit, num_hit, _ = manager.get_computed_blocks(request)
    assert num_hit == 12
    new_blocks = manager.allocate_slots(
        request,
        4,  # up to the block boundary
        num_new_computed_tokens=num_hit,
        new_computed_blocks=hit,
        full_sequence_must_fit=True,
    )
    assert new_blocks is not None
