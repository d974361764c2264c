"""Admission and allocation: what MambaManager and the attention managers count and mark when a request is admitted or allocated (single_type_kv_cache_manager.py)."""

from __future__ import annotations

from harness.fixes.targets import FULL_ATTENTION_MANAGER, MAMBA_MANAGER, method_fix
from harness.mutants.base import bound_arguments


# -- fix: count the external block at admission (single_type_kv_cache_manager.py:1697-1800 in 0.34.0) ------
def _count_external_block(original):
    from harness.worker import cdiv

    def get_num_blocks_to_allocate(self, *args, **kwargs):
        n = original(self, *args, **kwargs)
        b = bound_arguments(original, self, *args, **kwargs).arguments
        rid, bs = b["request_id"], self.block_size
        if (self.mamba_cache_mode != "align" or b["total_computed_tokens"] <= b["num_local_computed_tokens"]
                or n > self.block_pool.num_gpu_blocks or rid in self._allocated_block_reqs):
            return n
        # a sync external hit continued in the same call (an async load comes with no new tokens: scheduler.py's
        # load_kv_async branch sets num_new_tokens = 0). allocate_external_computed_blocks takes the block the load
        # ends in unless a local hit holds it (:347-373), then allocate_new_blocks the continuation's (:1802-1925,
        # after null-padding to the running block, a checkpoint column left open); the physical-block cap
        # (:1788-1793) counts only the latter's. Count what the three steps take (the touched hit blocks, the
        # load's block, the continuation's), or stock's count where larger: never less than stock, never more
        # than the allocation takes where stock counts less (a request stock serves stays served)
        spec = self.num_speculative_blocks
        required = cdiv(b["num_tokens_main_model"], bs) + spec
        held = len(b["new_computed_blocks"]) + len(self.req_to_blocks[rid])
        loaded = cdiv(b["total_computed_tokens"], bs)
        after = max(held, loaded)
        skipped = required - spec - 1
        if after < skipped:
            after = skipped - int(rid in getattr(self, "_checkpoints", {}))
        partial = (self._has_partial_local_hit(b["new_computed_blocks"], b["num_local_computed_tokens"])
                   or rid in getattr(self, "_partial_hit_reqs", {}))
        # the hit blocks the load skips are never touched (add_local_computed_blocks pads them with nulls, :300-312)
        touched = self._get_num_evictable_blocks(b["new_computed_blocks"][(b["total_computed_tokens"] - 1) // bs:])
        taken = int(loaded > held) + max(required - after, 0) + int(partial)
        return max(n, touched + taken)
    return get_num_blocks_to_allocate


# -- fix: the align-mode early return marks the request allocated (single_type_kv_cache_manager.py:1526-1529 in
# 0.26.0 returns without it; 0.28.0 adds `self._allocated_block_reqs.add(request_id)` there, :1572-1574) -------
def _marked_on_early_return(original):
    from harness.worker import cdiv

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        # the early return's own condition (0.26.0 :1521-1528): nothing to allocate and no partial hit to copy
        early = (self.mamba_cache_mode == "align" and request_id not in self._partial_hit_reqs
                 and cdiv(num_tokens_main_model, self.block_size) + self.num_speculative_blocks
                 <= len(self.req_to_blocks[request_id]))
        returned = original(self, request_id, num_tokens, num_tokens_main_model)
        if early:
            self._allocated_block_reqs.add(request_id)
        return returned
    return allocate_new_blocks


def _early_return_unmarked() -> bool:
    """The release's align-mode early return leaves the request unmarked (0.26.0-0.27.1)."""
    import inspect

    body = inspect.getsource(MAMBA_MANAGER().allocate_new_blocks)
    early = body.split("and not has_partial_hit:", 1)
    return len(early) == 2 and early[1].lstrip().startswith("return []")


# -- fix: full-sequence admission counts a partial hit's shared tail block once (single_type_kv_cache_manager.py:
# 253-265 in 0.33.0: the touched tail block, if evictable, and the copy-on-write block that replaces it are both
# counted; the request holds only the copy, so admission asks one block more than the request ever holds) ---------
def _cow_tail_counted_once(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        n = original(self, *args, **kwargs)
        b = bound_arguments(original, self, *args, **kwargs).arguments
        hit = b["new_computed_blocks"]
        # only the admission forecast (kv_cache_manager.py:531-545, apply_admission_cap): a chunk's own allocation
        # needs the source and its copy at once, as vLLM counts them
        if (b.get("apply_admission_cap") and self._has_partial_local_hit(hit, b["num_local_computed_tokens"])
                and hit[-1].ref_cnt == 0 and not hit[-1].is_null and n <= self.block_pool.num_gpu_blocks):
            return n - 1
        return n
    return get_num_blocks_to_allocate


def _admission_cap_exists() -> bool:
    """The full-sequence admission forecast (`apply_admission_cap`, with `_has_partial_local_hit`)."""
    import inspect

    cls = FULL_ATTENTION_MANAGER()
    return (hasattr(cls, "_has_partial_local_hit")
            and "apply_admission_cap" in inspect.signature(cls.get_num_blocks_to_allocate).parameters)


FIXES = (
    method_fix("fix-marked-on-early-return", MAMBA_MANAGER, "allocate_new_blocks", _marked_on_early_return,
                     "the align-mode early return marks the request allocated (0.28.0's line)", applies=_early_return_unmarked),  # seed-external-hit-unmarked
    method_fix("fix-count-external-block", MAMBA_MANAGER, "get_num_blocks_to_allocate", _count_external_block,
                     "admission counts the block an external hit takes"),  # sync-external-admission-undercount
    method_fix("fix-cow-tail-counted-once", FULL_ATTENTION_MANAGER, "get_num_blocks_to_allocate",
                     _cow_tail_counted_once, "the admission forecast counts a partial hit's tail block and its copy once", applies=_admission_cap_exists),  # admission-partial-hit-cow-counted-twice
)
