"""The mutant bank: run-time patches modelling public hybrid-cache bugs and plausible slips.

Public history (shared/docs/hybrid-cache-bug-history.md): #43090 (attention hit kept while the Mamba group
missed), #48375/#57128 (Mamba hit ignores the EAGLE block drop), #57908 (a published boundary stays keyed
on a block its producer keeps writing), PR #33937 (null block used as a real state slot). The rest are
synthetic off-by-one, wrong-branch, missing-copy and lifetime slips across MambaManager, the CoW queue
and the block pool. Each patch wraps vLLM's own method (no vLLM code is copied) and marks itself so its
self-check can see it is in place.
"""

from __future__ import annotations

from harness.mutants.base import Mutant, bound_arguments, mamba_mutant, method_wrapped, wrap_method


# -- #43090: attention hit kept while the Mamba group missed ------------------------------------------
def _hit_without_state(original):
    def find_longest_cache_hit(cls, *args, **kwargs):
        blocks, hit = original(cls, *args, **kwargs)
        b = bound_arguments(original, cls, *args, **kwargs).arguments
        size = b["kv_cache_spec"].block_size
        if hit == 0 and b["max_length"] >= size:
            n = b["max_length"] // size
            null = b["block_pool"].null_block
            return tuple([null] * n for _ in b["kv_cache_group_ids"]), n * size
        return blocks, hit
    return find_longest_cache_hit


# -- #48375 / #57128: the Mamba lookup ignores the EAGLE drop and may overrun the verified hit ----------
def _eagle_drop_ignored(original):
    def find_longest_cache_hit(cls, *args, **kwargs):
        b = bound_arguments(original, cls, *args, **kwargs)
        if b.arguments.get("drop_eagle_block"):
            b.arguments["max_length"] += b.arguments["kv_cache_spec"].block_size
            b.arguments["drop_eagle_block"] = False
        return original(*b.args, **b.kwargs)
    return find_longest_cache_hit


# -- #57908: the producer's boundary key is not moved to the CoW copy; it keeps writing the keyed block --
def _hash_not_moved(original):
    def move_block_hashes(self, source, target):
        return None
    return move_block_hashes


# -- PR #33937: the null block handed out as a real running-state slot ---------------------------------
def _null_running_slot(original):
    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        returned = original(self, request_id, num_tokens, num_tokens_main_model)
        blocks = self.req_to_blocks[request_id]
        k = self.num_speculative_blocks
        if len(returned) > k and len(blocks) > 1 + k and not returned[-1 - k].is_null:
            idx = len(blocks) - 1 - self.num_speculative_blocks  # the running column
            if blocks[idx] is returned[-1 - self.num_speculative_blocks]:
                self.block_pool.free_blocks([blocks[idx]])
                blocks[idx] = self._null_block
                returned = list(returned)
                returned[-1 - self.num_speculative_blocks] = self._null_block
        return returned
    return allocate_new_blocks


# -- synthetic --------------------------------------------------------------------------------------------
def _cow_copies_dropped(original):
    def take_pending_cow_copies(self):
        pairs = original(self)
        for source, cow in pairs:  # release what the copy would have held, but never copy
            self.block_pool.free_blocks([source, cow])
        return []
    return take_pending_cow_copies


def _cow_direction_swapped(original):
    def take_pending_cow_copies(self):
        return [(cow, source) for source, cow in original(self)]
    return take_pending_cow_copies


def _same_step_hit(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        self.cached_blocks_this_step.clear()  # forget which blocks were only cached this step
        return original(self, *args, **kwargs)
    return get_num_blocks_to_allocate


def _frees_running_block_early(original):
    def remove_skipped_blocks(self, request_id, processed_computed_tokens, num_prompt_tokens=None):
        return original(self, request_id, processed_computed_tokens + self.block_size, num_prompt_tokens)
    return remove_skipped_blocks


def _last_state_off_by_one(original):
    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        returned = original(self, request_id, num_tokens, num_tokens_main_model)
        if request_id in getattr(self, "last_state_block_idx", {}):
            self.last_state_block_idx[request_id] += 1
        return returned
    return allocate_new_blocks


def _hit_one_hash_block_long(original):
    def find_longest_cache_hit(cls, *args, **kwargs):
        blocks, hit = original(cls, *args, **kwargs)
        b = bound_arguments(original, cls, *args, **kwargs).arguments
        if hit and hit % b["kv_cache_spec"].block_size and hit + b["alignment_tokens"] <= b["max_length"]:
            return blocks, hit + b["alignment_tokens"]  # claims one hash block more than the state holds
        return blocks, hit
    return find_longest_cache_hit


def _spec_block_not_relocated(original):
    def _relocate_speculative_block(self, req_blocks, block_idx):
        return None  # the scratch block stays below the running column; nothing is appended
    return _relocate_speculative_block


def _resend_boundary_at_prompt_end(original):
    def cache_blocks(self, request, num_tokens, *args, **kwargs):
        b = bound_arguments(original, self, request, num_tokens, *args, **kwargs)
        if b.arguments.get("retention_interval") is not None:
            # the resend's boundary taken at the prompt's end (P) instead of P - 1: on a block-aligned prompt the
            # kept state moves a block up and a resend, capped at P - 1, misses it
            b.arguments["replay_boundaries"] = [p + 1 for p in b.arguments["replay_boundaries"]]
        return original(*b.args, **b.kwargs)
    return cache_blocks


def _block_pool_class():
    from harness.vllm_adapter import block_pool_class

    return block_pool_class()


BANK = (
    mamba_mutant("mamba-retention-resend-boundary-at-prompt-end", "off-by-one boundary: under sparse prefix-cache "
           "retention the resend's replay boundary is kept at the prompt's end instead of P - 1, so on a "
           "block-aligned prompt the state a resend resumes from is dropped (silent hit-rate loss)", "cache_blocks",
           _resend_boundary_at_prompt_end, origin="the case vLLM's replay_boundaries docstring warns of "
           "(kv_cache_coordinator.py:74-80 in 0.33.0)", releases="0.33.x"),
    mamba_mutant("mamba-hit-without-state", "wrong-branch: a Mamba miss reported as a hit of null blocks; the layer "
           "starts from an empty state at num_computed > 0", "find_longest_cache_hit", _hit_without_state,
           origin="vLLM #43090"),
    mamba_mutant("mamba-eagle-drop-ignored", "off-by-one block: the Mamba lookup ignores drop_eagle_block and may hit "
           "past the attention-verified prefix", "find_longest_cache_hit", _eagle_drop_ignored,
           origin="vLLM #48375 / PR #57128", releases="0.31.0-0.33.x"),
    Mutant(name="producer-hash-not-moved", bug_class="missing CoW: a producer's partial-tail key stays on the "
           "block it keeps writing (no move to the copy)", releases="0.28.0-0.33.x", origin="vLLM PR #57908",
           patch=lambda: wrap_method(_block_pool_class(), "move_block_hashes", _hash_not_moved),
           is_applied=lambda: method_wrapped(_block_pool_class(), "move_block_hashes")),
    mamba_mutant("null-running-slot", "null block (id 0) handed out as the running state slot", "allocate_new_blocks",
           _null_running_slot, origin="vLLM PR #33937"),
    mamba_mutant("cow-copies-dropped", "missing copy: CoW pairs are released but never copied", "take_pending_cow_copies",
           _cow_copies_dropped),
    mamba_mutant("cow-direction-swapped", "wrong direction: CoW copies destination onto source", "take_pending_cow_copies",
           _cow_direction_swapped),
    mamba_mutant("same-step-hit-allowed", "lifetime: a block cached this step is served before its producer's forward",
           "get_num_blocks_to_allocate", _same_step_hit),
    mamba_mutant("frees-running-block-early", "off-by-one block: remove_skipped_blocks frees one block too far",
           "remove_skipped_blocks", _frees_running_block_early),
    mamba_mutant("last-state-idx-off-by-one", "off-by-one: last_state_block_idx points one column too far, the "
           "wrong block is retired", "allocate_new_blocks", _last_state_off_by_one),
    mamba_mutant("hit-one-hash-block-long", "off-by-one hash block: a sub-block hit claims one hash block more than "
           "its state covers", "find_longest_cache_hit", _hit_one_hash_block_long),
    mamba_mutant("spec-block-not-relocated", "wrong branch: speculative scratch blocks left below the running column "
           "instead of relocated", "_relocate_speculative_block", _spec_block_not_relocated,
           releases="0.29.0-0.33.x"),  # the relocation exists from 0.29.0 (checked 0.29-0.33), not in 0.28.0
)
