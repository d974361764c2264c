"""The scheduler's Mamba block-aligned prefill split (Scheduler._mamba_block_aligned_split) and the speculative padding it clips."""

from __future__ import annotations

from harness.fixes.targets import SCHEDULER, Fix, has_checkpoint_blocks, method_fix
from harness.mutants.base import Mutant, bound_arguments, method_wrapped, wrap_method
from harness.patches import undo_all


# -- fix: a chunk starting mid-block stops at the next block boundary, where the release drops that stop ---------
def _stop_at_next_block_boundary(dropped=None):
    """make(original) for `_mamba_block_aligned_split`: `dropped(self, request, start, num_new_tokens)` says where
    the release's split drops the mid-block stop (the bug); only there is its schedule changed, so the fix never
    hides a finding by moving it. None: wherever the chunk runs past the boundary (a stop vLLM kept leaves none)."""
    def make(original):
        def _mamba_block_aligned_split(self, request, num_new_tokens, num_new_local_computed_tokens=0,
                                       num_external_computed_tokens=0):
            n = original(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
            start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
            if dropped is not None and not dropped(self, request, start, num_new_tokens):
                return n
            block_size = self.cache_config.block_size
            boundary = (start // block_size + 1) * block_size
            if start % block_size and start < boundary < start + n:
                return boundary - start  # the chunk stops at the boundary, whose state is then written
            return n
        return _mamba_block_aligned_split
    return make


def _checkpoint_prompt_final_chunk(self, request, start, num_new_tokens) -> bool:
    """0.33.0 drops the stop under use_internal_checkpoint (scheduler.py:644-648): checkpoint blocks and a chunk
    *asked for* up to the prompt's end (`end >= prefill_end` with end = start + num_new_tokens before any stop
    clips it, scheduler.py:586-605). (Judged on the returned n, the fix missed chunks that another stop clipped
    short of the prompt's end.)"""
    prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
    return getattr(self, "mamba_has_prefill_checkpoint_blocks", False) and start + num_new_tokens >= prefill_end


def _split_drops_stop_past_cacheable_range() -> bool:
    """0.26.0 keeps the mid-block stop only while the boundary is <= last_cache_position (scheduler.py:400-406),
    which an EAGLE drafter backs off one block (:383-385); 0.27.1 stops every chunk starting mid-block
    (scheduler.py:418-420 in 0.27.1)."""
    import inspect

    return "next_block_boundary <= last_cache_position" in inspect.getsource(SCHEDULER()._mamba_block_aligned_split)


# -- fix: a padded prompt tail that the Mamba split clips loses its padding (scheduler.py:1093-1104 in 0.30.0) -----
def _padding_dropped_when_clipped(original):
    """`_mamba_block_aligned_split` where the scheduler had padded a one-token prompt tail to 1 + K (scheduler.py:
    934-950 in 0.28.0) and the split would clip it: one token, and the request is marked so its K placeholder drafts
    are dropped before the SchedulerOutput is made (`_placeholders_dropped`), as 0.30.0 drops the padding."""
    def _mamba_block_aligned_split(self, request, num_new_tokens, *args, **kwargs):
        out = original(self, request, num_new_tokens, *args, **kwargs)
        b = bound_arguments(original, self, request, num_new_tokens, *args, **kwargs).arguments
        computed = (request.num_computed_tokens + b.get("num_new_local_computed_tokens", 0)
                    + b.get("num_external_computed_tokens", 0))
        k = getattr(self, "num_spec_tokens", 0)  # the mirror's split shim has none: its driver never pads
        padded = (k > 0 and num_new_tokens == 1 + k and request.num_tokens - computed == 1
                  and request.status.name != "RUNNING")  # the waiting queue's branch: the only one that pads
        if padded and 0 < out != 1 + k:
            self.__dict__.setdefault("_hh_unpadded", set()).add(request.request_id)
            return 1
        return out
    return _mamba_block_aligned_split


def _placeholders_dropped(original):
    def _make_cached_request_data(self, *args, **kwargs):
        # the step's spec-token dict, before the SchedulerOutput and _update_after_schedule read it
        drafts = bound_arguments(original, self, *args, **kwargs).arguments["spec_decode_tokens"]
        for rid in self.__dict__.pop("_hh_unpadded", ()):
            drafts.pop(rid, None)
        return original(self, *args, **kwargs)
    return _make_cached_request_data


def _padding_dropped_fix() -> Mutant:
    def patch():
        return undo_all([wrap_method(SCHEDULER(), "_mamba_block_aligned_split", _padding_dropped_when_clipped),
                         wrap_method(SCHEDULER(), "_make_cached_request_data", _placeholders_dropped)])

    return Mutant(name="fix-clipped-padding-dropped", bug_class="fix: a padded prompt tail the Mamba split clips is "
                  "scheduled as one token without placeholder drafts (0.30.0's rule)", releases="where the issue is "
                  "known", origin="hybrid-harness", patch=patch,
                  is_applied=lambda: method_wrapped(SCHEDULER(), "_make_cached_request_data"))


def _scheduler_keeps_clipped_padding() -> bool:
    """The scheduler pads prompt tails and lets the Mamba split clip them (0.30.0 resets `pad_spec_decode` after
    the split, a second assignment to False)."""
    import inspect

    try:
        source = inspect.getsource(SCHEDULER().schedule)
    except (ImportError, OSError, TypeError):
        return False
    return ("pad_spec_decode = True" in source and source.count("pad_spec_decode = False") == 1
            and hasattr(SCHEDULER(), "_make_cached_request_data"))


# -- fix: the split aligns chunk ends to the Mamba block where cache_config.block_size is below it ----------------
def _split_on_mamba_grid(original):
    """`_mamba_block_aligned_split` reading `cache_config.block_size` (its grid, scheduler.py:589 in 0.34.0) as the
    Mamba block (`cache_config.mamba_block_size`) where the engine core lowered it below that block to a smaller
    prefix-cacheable group's (core.py:366-377 in 0.34.0: extract_hidden_states's cache-only group). The same grid
    as upstream/patches' hidden-state-group-splits-off-mamba-grid.patch; getattr: the mirrored tiers' split shim
    (harness/vllm_adapter.py) has a cache config without mamba_block_size."""
    def _mamba_block_aligned_split(self, *args, **kwargs):
        cc = self.cache_config
        grid, mamba = cc.block_size, getattr(cc, "mamba_block_size", None) or 0
        if grid >= mamba:
            return original(self, *args, **kwargs)
        cc.block_size = mamba  # for this call only: the split's grid, nothing else the scheduler reads
        try:
            return original(self, *args, **kwargs)
        finally:
            cc.block_size = grid
    return _mamba_block_aligned_split


def _split_grid_below_mamba_block() -> bool:
    """The split aligns to `cache_config.block_size` (scheduler.py:589 in 0.34.0) and vLLM starts a configuration
    whose engine core sets it below the Mamba block: extract_hidden_states on Nemotron-H with 3 aux layers
    (0.28.0 on; 0.26.0-0.27.1 refuse it at engine start). A release that aligns the split to the Mamba block,
    keeps the hidden-state group out of the minimum or sizes it at the Mamba block is not one this fix applies to."""
    import inspect
    import re

    from harness.engine.model_catalog import hidden_blocks, model_entry

    source = inspect.getsource(SCHEDULER()._mamba_block_aligned_split)
    if not re.search(r"^\s*block_size = self\.cache_config\.block_size$", source, re.M):
        return False
    model = model_entry("nemotron-h-4b")
    blocks = hidden_blocks(model, 3)
    return blocks is not None and blocks[2] < model[1][1]  # the engine's block_size below the Mamba block at K = 1


# -- fix: multi-module MTP's prefill reserve undoes the split's stop at a Mamba block boundary -------------------
def _reserve_keeps_split_stop(original):
    """`_reserve_prefill_lookahead` (scheduler.py:695-714 in 0.34.0) never ends a prefill chunk within
    num_prefill_lookahead of the prompt's end, by cutting the chunk back. In Mamba align mode the chunk it is given
    is the split's, which stops a chunk that starts mid-block at the next block boundary (scheduler.py:660-665);
    where that boundary lies within the lookahead of the end, the cut leaves no token, and the same stop and cut
    recur every step: the request is never scheduled again. Here a cut to nothing keeps the split's chunk (the
    drafter reads fewer known prompt tokens at that one boundary; the Mamba state stays block-aligned)."""
    def _reserve_prefill_lookahead(self, request, num_computed_tokens, num_new_tokens):
        reserved = original(self, request, num_computed_tokens, num_new_tokens)
        return num_new_tokens if reserved == 0 < num_new_tokens else reserved
    return _reserve_prefill_lookahead


def _reserve_can_undo_split() -> bool:
    """The Scheduler reserves the multi-module MTP prefill lookahead after the Mamba split (0.28+)."""
    return hasattr(SCHEDULER(), "_reserve_prefill_lookahead") and hasattr(SCHEDULER(), "_mamba_block_aligned_split")


FIXES = (
    method_fix("fix-midblock-stop", SCHEDULER, "_mamba_block_aligned_split",
                     _stop_at_next_block_boundary(_checkpoint_prompt_final_chunk),
                     "a prompt-final chunk starting mid-block stops at the next block boundary (checkpoint geometries)",
                     applies=has_checkpoint_blocks),  # checkpoint-midblock-start (vLLM's code: 0.32.0 on, tier e2e)
    method_fix("fix-midblock-stop-every-chunk", SCHEDULER, "_mamba_block_aligned_split",
                     _stop_at_next_block_boundary(), "a chunk starting mid-block stops at the next block boundary", applies=_split_drops_stop_past_cacheable_range),  # eagle-midblock-stop-dropped
    Fix(_padding_dropped_fix(), "Scheduler._mamba_block_aligned_split + Scheduler._make_cached_request_data",
        _scheduler_keeps_clipped_padding),  # spec-padding-clipped-by-mamba-split
    # hidden-state-group-splits-off-mamba-grid
    method_fix("fix-split-on-mamba-grid", SCHEDULER, "_mamba_block_aligned_split", _split_on_mamba_grid,
               "the Mamba split aligns chunk ends to the Mamba block (cache_config.mamba_block_size) where "
               "cache_config.block_size is below it", applies=_split_grid_below_mamba_block),
    method_fix("fix-reserve-keeps-split-stop", SCHEDULER, "_reserve_prefill_lookahead", _reserve_keeps_split_stop,
               "multi-module MTP's prefill reserve never cuts the Mamba split's chunk to nothing",
               applies=_reserve_can_undo_split),  # mtp-reserve-undoes-split-stop
)
