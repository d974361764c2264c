"""Which Mamba states the cache retains: prefill checkpoints under sparse retention and EAGLE's junction block (kv_cache_coordinator.py, MambaManager.cache_blocks)."""

from __future__ import annotations

from harness.fixes.targets import (HYBRID_COORDINATOR, MAMBA_MANAGER, Fix, has_checkpoints, method_fix, patch_fix,
                                   target_name, wrapped_by)
from harness.mutants.base import method_wrapped, wrap_method


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


# -- fix: with EAGLE, 0.29.0 retains the prompt's replay position (num_prompt - 1, single_type_kv_cache_manager.py:
# 458 in 0.29.0), but an EAGLE hit drops back one block from its match (kv_cache_utils: the drafter recomputes the
# last matched block), so a resend or a resumed request hits one block lower, whose state is not kept. 0.30.0
# retains the blocks below both reachable positions instead (get_replay_boundaries, kv_cache_coordinator.py:314-333
# in 0.30.0): the resend's, capped at num_prompt - 1, and a longer sibling's, at the last full block
# 0.29.0's cache_blocks builds its boundaries itself, [num_prompt - 1, junction] (single_type_kv_cache_manager.py:
# 458-461 in 0.29.0), and hands them to reachable_block_mask: both 0.29.0 fixes rewrite that list, in one wrapper that
# knows which of them are on (two stacked rewrites would each misread the other's list)
_ON_029: set[str] = set()


def _boundaries_029(original):
    def reachable_block_mask(cls, *args, **kwargs):
        boundaries = list(kwargs.get("reachable_boundaries", ()))
        block = kwargs.get("alignment_tokens")
        if kwargs.get("use_eagle") and boundaries and block:
            replay, junctions = [boundaries[0]], boundaries[1:]
            if "replay" in _ON_029:  # 0.30.0's get_replay_boundaries: the resend's and a longer sibling's
                replay = sorted({max(replay[0] // block * block - block, 0),
                                 max((replay[0] + 1) // block * block - block, 0)})
            if "junction" in _ON_029:  # 0.33.0: the junction and the block below it
                junctions += [j - kwargs["kv_cache_spec"].block_size for j in junctions]
            kwargs["reachable_boundaries"] = [*replay, *junctions]
        return original(cls, *args, **kwargs)
    return reachable_block_mask


def _turn_on_029(part: str):
    """Turn one 0.29.0 rewrite on (the wrapper goes in with the first); returns the undo."""
    owner = MAMBA_MANAGER()
    unwrap = None if wrapped_by(owner, "reachable_block_mask", _boundaries_029) else \
        wrap_method(owner, "reachable_block_mask", _boundaries_029)
    _ON_029.add(part)

    def undo() -> None:
        _ON_029.discard(part)
        if unwrap is not None:
            unwrap()
    return undo


def _on_029(part: str) -> bool:
    return part in _ON_029 and wrapped_by(MAMBA_MANAGER(), "reachable_block_mask", _boundaries_029)


def _retention_boundaries_029() -> bool:
    """Sparse retention whose cache_blocks passes reachable_block_mask the prompt's replay position and the junction
    itself (0.29.0), before 0.30.0's coordinator computed the replay boundaries (get_replay_boundaries)."""
    from harness.vllm_adapter import parameters, supports_retention

    try:
        return (supports_retention() and "reachable_boundaries" in parameters(MAMBA_MANAGER().reachable_block_mask)
                and "replay_boundaries" not in parameters(MAMBA_MANAGER().cache_blocks))
    except (ImportError, TypeError):
        return False


def _eagle_junction_fix() -> Fix:
    """One fix in its two forms: 0.30+ passes cache_blocks the replay boundaries (extended there), 0.29.0 builds them
    inside cache_blocks and passes reachable_block_mask the list (rewritten there)."""
    def patch():
        if _retention_boundaries_029():
            return _turn_on_029("junction")
        return wrap_method(MAMBA_MANAGER(), "cache_blocks", _eagle_junction_block_retained)

    def applied() -> bool:
        return _on_029("junction") if _retention_boundaries_029() else method_wrapped(MAMBA_MANAGER(), "cache_blocks")

    return patch_fix("fix-eagle-junction-block-retained", target_name(MAMBA_MANAGER, "cache_blocks"),
                     "with EAGLE, sparse retention keeps the block below a shared-prefix junction", patch, applied,
                     applies=lambda: _eagle_junction_block_unretained() or _retention_boundaries_029())


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


# -- fix: multi-module MTP caches only the finalized prefix, num_computed_tokens - (lookahead - 1) (kv_cache_
# coordinator.py:350-356 and 789-804 in 0.34.0): a Mamba block's state is its chunk end's, so a partial tail keyed
# at the finalized prefix names a state the block does not hold (the block holds the state a few tokens on) --------
def _mamba_keys_whole_blocks(original):
    def get_num_cacheable_tokens(self, num_computed_tokens, kv_cache_group_id):
        cacheable = original(self, num_computed_tokens, kv_cache_group_id)
        manager = self.single_type_managers[kv_cache_group_id]
        spec = manager.kv_cache_spec
        if (cacheable < num_computed_tokens and getattr(self, "num_reprefillable_tokens", 0)
                and getattr(spec, "mamba_cache_mode", None) == "align"):
            return cacheable // manager.block_size * manager.block_size  # the block boundaries it holds states of
        return cacheable
    return get_num_cacheable_tokens


def _trims_finalized_prefix() -> bool:
    """The coordinator caches only the finalized prefix of a multi-module MTP request in a method of its own (0.32+;
    inline before)."""
    return hasattr(HYBRID_COORDINATOR(), "get_num_cacheable_tokens")


FIXES = (
    method_fix("fix-relocated-export-column-kept", MAMBA_MANAGER, "_needs_internal_checkpoint",
                     _relocated_export_column_kept, "a chunk short of the prefill end keeps the speculative block at "
                     "its checkpoint column as the checkpoint, not relocating it", applies=_sparse_retention_checkpoints),  # sparse-retention-checkpoint-unreserved
    _eagle_junction_fix(),  # eagle-junction-block-not-retained
    patch_fix("fix-eagle-replay-boundary-block-retained", target_name(MAMBA_MANAGER, "reachable_block_mask"),
              "with EAGLE, sparse retention keeps the blocks an EAGLE hit on the prompt drops back to",
              lambda: _turn_on_029("replay"), lambda: _on_029("replay"),
              applies=_retention_boundaries_029),  # eagle-replay-boundary-block-not-retained
    method_fix("fix-mamba-keys-whole-blocks", HYBRID_COORDINATOR, "get_num_cacheable_tokens",
               _mamba_keys_whole_blocks, "under multi-module MTP a Mamba group caches the finalized prefix's whole "
               "blocks only, never a tail below its state", applies=_trims_finalized_prefix),  # mtp-tail-keyed-below-state
)
