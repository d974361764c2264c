"""Synthetic lifetime and sizing mutants (bug classes from shared/docs/hybrid-cache-bug-history.md)."""

from __future__ import annotations

from dataclasses import replace

from harness.mutants.base import Mutant, bound_arguments, mamba_mutant, method_wrapped, wrap_method


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


def _uncapped_admission(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        n = original(self, *args, **kwargs)
        a = bound_arguments(original, self, *args, **kwargs).arguments
        rid = a["request_id"]
        if (getattr(self, "mamba_cache_mode", "align") != "align" or n > self.block_pool.num_gpu_blocks
                or rid in getattr(self, "_allocated_block_reqs", ())):
            return n  # not align mode, a deferral (num_gpu_blocks + 1), or a running request
        # single_type_kv_cache_manager.py:1779-1784 (0.33.0) caps a request's first align-mode allocation at
        # the blocks it keeps physically; this counts every block of its table, as if none were skipped
        table = -(-a["num_tokens_main_model"] // self.block_size) + self.num_speculative_blocks
        return max(n, table - len(a["new_computed_blocks"]) - len(self.req_to_blocks[rid]))
    return get_num_blocks_to_allocate


def _no_spec_blocks_without_caching(original):
    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        if getattr(self, "mamba_cache_mode", "align") == "align" or not self.num_speculative_blocks:
            return original(self, request_id, num_tokens, num_tokens_main_model)
        # single_type_kv_cache_manager.py:1801-1808 (0.33.0) adds a block per speculative token when prefix caching
        # is off; this allocation forgets them (the admission count still has them)
        spec, self.num_speculative_blocks = self.num_speculative_blocks, 0
        try:
            return original(self, request_id, num_tokens, num_tokens_main_model)
        finally:
            self.num_speculative_blocks = spec
    return allocate_new_blocks


MAMBA_FREE_LEAKS_BLOCK = mamba_mutant(
    "mamba-free-leaks-block", "lifetime: a freed request keeps one Mamba block referenced (pool leak)",
    "free", _leaking_free, releases="0.26.0-0.33.x")

MAMBA_OVERALLOCATE = mamba_mutant(
    "mamba-overallocate-running", "off-by-one: a running request asks for one Mamba block too many per step",
    "allocate_new_blocks", _overallocating, releases="0.26.0-0.33.x")

MAMBA_ADMISSION_UNCAPPED = mamba_mutant(
    "mamba-admission-uncapped", "stall: admission reserves a Mamba block for every block of the prompt (the align-mode "
    "cap dropped), so a request the pool could hold waits forever", "get_num_blocks_to_allocate",
    _uncapped_admission, releases="0.26.0-0.33.x")

MAMBA_NONE_SPEC_BLOCKS_DROPPED = replace(mamba_mutant(
    "mamba-none-spec-blocks-dropped", "sizing in mode none: a request's speculative state blocks are never allocated "
    "(prefix caching off), so the decode kernels' per-draft states land in the null block",
    "allocate_new_blocks", _no_spec_blocks_without_caching, releases="0.26.0-0.33.x"), engine_only=True,
    cache_mode="none")


# -- an async connector load's blocks cached at allocation, before the load lands (kv_cache_manager.py allocate_slots
# takes delay_cache_blocks=True for WAITING_FOR_REMOTE_KVS, scheduler.py:1514-1545 in 0.33.0; this drops it) -----
def _cached_before_load(original):
    def allocate_slots(self, *args, **kwargs):
        call = bound_arguments(original, self, *args, **kwargs)
        call.arguments["delay_cache_blocks"] = False
        return original(*call.args, **call.kwargs)
    return allocate_slots


def _kv_cache_manager():
    from harness.vllm_adapter import kv_cache_manager_class

    return kv_cache_manager_class()


ASYNC_LOAD_CACHED_EARLY = Mutant(
    name="async-load-cached-early", bug_class="lifetime: an async connector load's blocks are cached (keyed) when "
    "they are allocated, before the load fills them; a request hitting them inside the load window resumes from "
    "nothing valid", releases="0.26.0-0.34.x", origin="",
    patch=lambda: wrap_method(_kv_cache_manager(), "allocate_slots", _cached_before_load),
    is_applied=lambda: method_wrapped(_kv_cache_manager(), "allocate_slots"))


# -- a block's alias keys forgotten when its keys are removed (block_pool.py:605-623 in 0.34.0 pops the primary and
# every alias in `cached_block_hashes_by_block`; this pops the primary only): the aliases keep naming the block after
# it is evicted and reused, so a partial-tail hit under one reads whatever the block holds next ---------------------
def _aliases_forgotten(original):
    def _remove_cached_block_hashes(self, block):
        self.cached_block_hashes_by_block.pop(block.block_id, None)
        return original(self, block)
    return _remove_cached_block_hashes


def _block_pool():
    from harness.vllm_adapter import block_pool_class

    return block_pool_class()


CACHE_KEY_OUTLIVES_BLOCK = Mutant(
    name="cache-key-outlives-block", bug_class="lifetime: a block's alias keys (partial-tail hashes beside its "
    "primary) are not removed with it, so they name the block after it is reused", releases="0.32.0-0.34.x",
    origin="", patch=lambda: wrap_method(_block_pool(), "_remove_cached_block_hashes", _aliases_forgotten),
    is_applied=lambda: method_wrapped(_block_pool(), "_remove_cached_block_hashes"))
