# vLLM file: tests/v1/core/test_mamba_align_chunk_split.py


def test_multi_module_mtp_keys_no_mamba_tail_below_its_state() -> None:
    """Multi-module MTP caches only the finalized prefix, NUM_SPEC - 1 tokens
    short of the computed ones. A Mamba block holds the state at its chunk's
    end, so the Mamba group may cache its computed tokens or whole blocks, never
    a tail in between: that key would name a state the block does not hold.
    """
    attention = FullAttentionSpec(
        block_size=ATTN_BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    mamba = MambaSpec(
        block_size=MAMBA_BLOCK_SIZE,
        shapes=((1, 1),),
        dtypes=(torch.float32,),
        mamba_cache_mode="align",
        num_speculative_blocks=NUM_SPEC,
    )
    config = KVCacheConfig(
        num_blocks=64,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["full_layer"], attention),
            KVCacheGroupSpec(["mamba_layer"], mamba),
        ],
    )
    manager = KVCacheManager(
        config,
        max_model_len=8192,
        scheduler_block_size=MAMBA_BLOCK_SIZE,
        hash_block_size=ATTN_BLOCK_SIZE,
        enable_caching=True,
        use_eagle=True,
        num_prefill_lookahead=NUM_SPEC,
    )
    computed = MAMBA_BLOCK_SIZE + 31  # a chunk ended there, off the hash grid
    cacheable = manager.coordinator.get_num_cacheable_tokens(computed, MAMBA_GROUP_ID)
    assert cacheable == computed or cacheable % MAMBA_BLOCK_SIZE == 0
