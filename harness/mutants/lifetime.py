"""Synthetic lifetime and sizing mutants (bug classes from shared/docs/hybrid-cache-bug-history.md)."""

from __future__ import annotations

from harness.mutants.base import mamba_mutant


def _leaking_free(original):
    def free(self, request_id):
        # single_type_kv_cache_manager.py:591-599 frees every popped block; this forgets the first real one
        blocks = list(reversed(self.pop_blocks_for_free(request_id)))
        real = [b for b in blocks if not b.is_null]
        self.block_pool.free_blocks([b for b in blocks if b is not real[-1]] if real else blocks)
    return free


def _overallocating(original):
    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        # one block too many per step for a request that already holds blocks
        bump = self.block_size if request_id in getattr(self, "_allocated_block_reqs", ()) else 0
        return original(self, request_id, num_tokens, num_tokens_main_model + bump)
    return allocate_new_blocks


MAMBA_FREE_LEAKS_BLOCK = mamba_mutant(
    "mamba-free-leaks-block", "lifetime: a freed request keeps one Mamba block referenced (pool leak)",
    "free", _leaking_free, releases="0.26.0-0.33.x")

MAMBA_OVERALLOCATE = mamba_mutant(
    "mamba-overallocate-running", "off-by-one: a running request asks for one Mamba block too many per step",
    "allocate_new_blocks", _overallocating, releases="0.26.0-0.33.x")
