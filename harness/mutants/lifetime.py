"""Synthetic lifetime and sizing mutants (bug classes from shared/docs/hybrid-cache-bug-history.md)."""

from __future__ import annotations

from harness.mutants.base import Mutant
from harness.vllm_adapter import mamba_manager_class

_MARK = "_hybrid_harness_mutant"


def _wrap(method_name: str, make):
    """Replace MambaManager.<method_name> by make(original); return the undo callable."""
    cls = mamba_manager_class()
    original = getattr(cls, method_name)
    patched = make(original)
    setattr(patched, _MARK, True)
    setattr(cls, method_name, patched)
    return lambda: setattr(cls, method_name, original)


def _is_wrapped(method_name: str) -> bool:
    return getattr(getattr(mamba_manager_class(), method_name), _MARK, False)


def _leak_patch():
    def make(original):
        def free(self, request_id):
            # single_type_kv_cache_manager.py:591-599 frees every popped block; this forgets the first real one
            blocks = list(reversed(self.pop_blocks_for_free(request_id)))
            real = [b for b in blocks if not b.is_null]
            self.block_pool.free_blocks([b for b in blocks if b is not real[-1]] if real else blocks)
        return free
    return _wrap("free", make)


def _overallocate_patch():
    def make(original):
        def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
            # off by one block per step on every running request: vLLM's own sizing assert must catch it
            bump = self.block_size if request_id in getattr(self, "_allocated_block_reqs", ()) else 0
            return original(self, request_id, num_tokens, num_tokens_main_model + bump)
        return allocate_new_blocks
    return _wrap("allocate_new_blocks", make)


MAMBA_FREE_LEAKS_BLOCK = Mutant(
    name="mamba-free-leaks-block",
    bug_class="lifetime: a freed request keeps one Mamba block referenced (pool leak)",
    releases="0.26.0-0.33.x",
    origin="",
    patch=_leak_patch,
    is_applied=lambda: _is_wrapped("free"),
)

MAMBA_OVERALLOCATE = Mutant(
    name="mamba-overallocate-running",
    bug_class="off-by-one: a running request asks for one Mamba block too many per step",
    releases="0.26.0-0.33.x",
    origin="",
    patch=_overallocate_patch,
    is_applied=lambda: _is_wrapped("allocate_new_blocks"),
)
