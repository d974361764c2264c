"""Which Mamba states the cache retains: prefill checkpoints under sparse retention and EAGLE's junction block (kv_cache_coordinator.py, MambaManager.cache_blocks)."""

from __future__ import annotations

from harness.fixes.targets import MAMBA_MANAGER, has_checkpoints, method_fix


# -- fix: under sparse retention a chunk short of the prefill end reserves no checkpoint and relies on a null column
# to mask the worker's export (single_type_kv_cache_manager.py:1664-1695 in 0.34.0), but a speculative block relocated
# out of that column (:1867-1875, 1930-1939) nulls it in the core's table only: the worker's is append-only
# (v1/worker/gpu/model_runner.py:1349-1352, block_table.py:125-145) and still names the block there, where the export
# lands (checkpoint.py:62-70; with one speculative block, the relocated block is the running one). So that column
# keeps its block as the checkpoint, as under dense retention ------------------------------------------------------
def _relocated_export_column_kept(original):
    def _needs_internal_checkpoint(self, request_id, query_start, query_end, checkpoint_position, prefill_end):
        blocks = self.req_to_blocks[request_id]
        column = -(-query_end // self.block_size) - 2
        if (query_end < prefill_end and request_id in self._allocated_block_reqs
                and len(blocks) - self.num_speculative_blocks <= column < len(blocks)):
            prefill_end = 0
        return original(self, request_id, query_start, query_end, checkpoint_position, prefill_end)
    return _needs_internal_checkpoint


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
    method_fix("fix-relocated-export-column-kept", MAMBA_MANAGER, "_needs_internal_checkpoint",
                     _relocated_export_column_kept, "a chunk short of the prefill end keeps the speculative block at "
                     "its checkpoint column as the checkpoint, not relocating it", applies=_sparse_retention_checkpoints),  # sparse-retention-checkpoint-unreserved
    method_fix("fix-eagle-junction-block-retained", MAMBA_MANAGER, "cache_blocks", _eagle_junction_block_retained,
                     "with EAGLE, sparse retention keeps the block below a shared-prefix junction", applies=_eagle_junction_block_unretained),  # eagle-junction-block-not-retained
)
