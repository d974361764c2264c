"""Blind mutant: a sub-block (partial) Mamba key registered this step is not marked "cached this step".

A Mamba state registered during scheduling is only written by this step's forward, so a sibling request that
looks it up in the same step must be deferred (``cached_blocks_this_step``). The slip records only full-block
keys: a partial prompt-tail / checkpoint key registered this step is hit by a same-step sibling, which then reads
a state that has not been computed yet. Needs two requests sharing a prefix whose tail ends inside a Mamba block,
scheduled in the same step.
"""

from harness.mutants.base import mamba_mutant


def _make(original):
    def cache_blocks(self, *args, **kwargs):
        if getattr(self, "mamba_cache_mode", None) != "align":
            return original(self, *args, **kwargs)
        before = set(self.cached_blocks_this_step)
        result = original(self, *args, **kwargs)
        added = self.cached_blocks_this_step - before
        lookup = self.block_pool.cached_block_hash_to_block
        for key in added:
            block = lookup.get_one_block(key)
            if block is None or block.block_hash != key:
                continue
            num_tokens = block.block_hash_num_tokens
            if num_tokens is not None and num_tokens % self.block_size != 0:
                self.cached_blocks_this_step.discard(key)
        return result

    return cache_blocks


MUTANT = mamba_mutant(
    "mamba-same-step-partial-tail-not-deferred",
    "partial (sub-block) Mamba keys registered this step are left out of cached_blocks_this_step, so a "
    "same-step sibling hits a state that this step's forward has not written yet",
    "cache_blocks",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
