"""Blind mutant: the first-prefill partial-hit CoW forgets the extra reference that keeps the copy target
alive until the copy has run.

``_apply_cow`` gives ``cow_block`` one reference for the request and one for the pending copy (released by the
scheduler once the copy has executed). The slip drops the copy's reference for Mamba groups only: when the
scheduler releases the copy endpoints, the request's private state block falls to ref_cnt 0 and back into the
free queue while still in the request's block table, so a later allocation hands it to someone else. Fires only
for a new request whose Mamba hit ends inside a Mamba block (sub-block partial hit).
"""

from harness.mutants.base import mamba_mutant


def _make(original):
    def _apply_cow(self, request_id, block_idx, source_block, cow_block):
        result = original(self, request_id, block_idx, source_block, cow_block)
        cow_block.ref_cnt -= 1
        return result

    return _apply_cow


MUTANT = mamba_mutant(
    "mamba-cow-target-missing-retain-ref",
    "first-prefill partial-hit CoW on a Mamba group does not retain cow_block for the pending copy: after "
    "the copy endpoints are released the request's private state block is back in the free queue",
    "_apply_cow",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
