"""Blind mutant: the first Mamba allocation of a request is sized without its speculative scratch blocks.

In align mode a request's first allocation pulls ``1 + num_speculative_blocks`` state blocks (plus a CoW /
checkpoint block when needed), and ``get_num_blocks_to_allocate`` must report all of them so the admission check
(free blocks vs. required blocks) is honest. The slip drops the speculative scratch blocks from the reported
count for requests that have not been allocated yet. Without pool pressure nothing changes; near a full pool the
scheduler admits a request whose ``allocate_new_blocks`` then asks the pool for more blocks than it checked
for (it fails, or eats blocks other accounting relied on). Only configurations with speculative decoding.
"""

from harness.mutants.base import bound_arguments, mamba_mutant


def _make(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if getattr(self, "mamba_cache_mode", None) != "align" or self.num_speculative_blocks <= 0:
            return result
        if result > self.block_pool.num_gpu_blocks:  # the same-step deferral sentinel: keep it
            return result
        request_id = bound_arguments(original, self, *args, **kwargs).arguments["request_id"]
        if request_id in self._allocated_block_reqs or request_id in self.num_cached_block:
            return result
        return max(0, result - self.num_speculative_blocks)

    return get_num_blocks_to_allocate


MUTANT = mamba_mutant(
    "mamba-spec-scratch-not-reserved-on-first-alloc",
    "speculative-decoding Mamba scratch blocks left out of a new request's reported block demand: admission "
    "under-reserves and the first allocation over-draws the pool under pressure",
    "get_num_blocks_to_allocate",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
