"""Synthetic lifetime and sizing mutants (bug classes from shared/docs/hybrid-cache-bug-history.md)."""

from __future__ import annotations

from harness.mutants.base import Mutant, mamba_method_wrapped, wrap_mamba_method


def _leak_patch():
    def make(original):
        def free(self, request_id):
            # single_type_kv_cache_manager.py:591-599 frees every popped block; this forgets the first real one
            blocks = list(reversed(self.pop_blocks_for_free(request_id)))
            real = [b for b in blocks if not b.is_null]
            self.block_pool.free_blocks([b for b in blocks if b is not real[-1]] if real else blocks)
        return free
    return wrap_mamba_method("free", make)


def _overallocate_patch():
    def make(original):
        def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
            # off by one block per step on every running request: vLLM's own sizing assert must catch it
            bump = self.block_size if request_id in getattr(self, "_allocated_block_reqs", ()) else 0
            return original(self, request_id, num_tokens, num_tokens_main_model + bump)
        return allocate_new_blocks
    return wrap_mamba_method("allocate_new_blocks", make)


MAMBA_FREE_LEAKS_BLOCK = Mutant(
    name="mamba-free-leaks-block",
    bug_class="lifetime: a freed request keeps one Mamba block referenced (pool leak)",
    releases="0.26.0-0.33.x",
    origin="",
    patch=_leak_patch,
    is_applied=lambda: mamba_method_wrapped("free"),
)

MAMBA_OVERALLOCATE = Mutant(
    name="mamba-overallocate-running",
    bug_class="off-by-one: a running request asks for one Mamba block too many per step",
    releases="0.26.0-0.33.x",
    origin="",
    patch=_overallocate_patch,
    is_applied=lambda: mamba_method_wrapped("allocate_new_blocks"),
)
