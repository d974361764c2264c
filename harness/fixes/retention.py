"""Which Mamba states the cache retains: prefill checkpoints under sparse retention and EAGLE's junction block (kv_cache_coordinator.py, MambaManager.cache_blocks)."""

from __future__ import annotations

from harness.fixes.targets import COORDINATOR, MAMBA_MANAGER, has_checkpoints, method_fix


# -- fix: under sparse retention 0, reserve a prefill checkpoint on every chunk, as the worker writes one on every
# chunk (kv_cache_coordinator.py:236-237 ignores prefill_end for every other retention; checkpoint.py:21-62 has no
# prefill_end) -------------------------------------------------------------------------------------------------
def _checkpoint_every_chunk(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        if "prefill_end" in kwargs:
            kwargs["prefill_end"] = 0
        return original(self, *args, **kwargs)
    return get_num_blocks_to_allocate


def _sparse_retention_checkpoints() -> bool:
    from harness.vllm_adapter import supports_retention

    return has_checkpoints() and supports_retention()


# -- fix: with EAGLE, sparse retention also keeps the block below a shared-prefix junction (single_type_kv_cache_
# manager.py:513-520 in 0.33.0: a sibling diverging right after the junction hits one block lower) -------------------
def _eagle_junction_block_retained(original):
    def cache_blocks(self, request, num_tokens, *args, **kwargs):
        junction = getattr(request, "shared_prefix_boundary", None)
        if self.use_eagle and junction and "replay_boundaries" in kwargs:
            kwargs["replay_boundaries"] = [*kwargs["replay_boundaries"], junction - self.block_size]
        return original(self, request, num_tokens, *args, **kwargs)
    return cache_blocks


def _eagle_junction_block_unretained() -> bool:
    """Sparse retention whose `cache_blocks` keeps only the junction itself (0.30-0.32), not 0.33.0's block below
    it with EAGLE."""
    import inspect

    from harness.vllm_adapter import parameters, supports_retention

    try:
        base = inspect.getsource(MAMBA_MANAGER().__mro__[1].cache_blocks)
        return (supports_retention() and "replay_boundaries" in parameters(MAMBA_MANAGER().cache_blocks)
                and "shared_prefix_boundary - self.block_size" not in base)
    except (ImportError, OSError, TypeError):
        return False


FIXES = (
    method_fix("fix-checkpoint-every-chunk", COORDINATOR, "get_num_blocks_to_allocate", _checkpoint_every_chunk,
                     "under sparse retention 0 MambaManager reserves a prefill checkpoint on every chunk, where the "
                     "worker writes one", applies=_sparse_retention_checkpoints),  # sparse-retention-checkpoint-unreserved
    method_fix("fix-eagle-junction-block-retained", MAMBA_MANAGER, "cache_blocks", _eagle_junction_block_retained,
                     "with EAGLE, sparse retention keeps the block below a shared-prefix junction", applies=_eagle_junction_block_unretained),  # eagle-junction-block-not-retained
)
