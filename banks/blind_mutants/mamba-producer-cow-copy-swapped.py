"""Blind mutant: the producer-side partial-tail copy-on-write queues its copy in the wrong direction.

When a running request (the producer) registered its own sub-block prompt-tail state and keeps decoding, the
allocator moves the cache entry to a fresh ``cow_block`` and queues ``source -> cow`` so the cached state is
preserved before the forward overwrites ``source``. The slip swaps the pair in that branch only (the first-prefill
CoW branch is untouched), so the worker copies the fresh, unwritten block over the running state and the cache
entry keeps pointing at garbage.
"""

from harness.mutants.base import mamba_mutant


def _make(original):
    def allocate_new_blocks(self, request_id, *args, **kwargs):
        if getattr(self, "mamba_cache_mode", None) != "align":
            return original(self, request_id, *args, **kwargs)
        producer_cow = (request_id in self._allocated_block_reqs
                        and request_id in self._partial_hit_reqs)
        num_before = len(self._pending_cow_copies)
        result = original(self, request_id, *args, **kwargs)
        if producer_cow and len(self._pending_cow_copies) > num_before:
            src, dst = self._pending_cow_copies[num_before]
            self._pending_cow_copies[num_before] = (dst, src)
        return result

    return allocate_new_blocks


MUTANT = mamba_mutant(
    "mamba-producer-cow-copy-swapped",
    "running-request (producer) partial-tail CoW queues cow->source instead of source->cow: the cached tail "
    "entry holds an unwritten block and the running state is overwritten",
    "allocate_new_blocks",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
