"""The seed bug (vLLM 0.26.0-0.27.1, fixed in 0.28.0).

After an external hit whose first continuation stays inside one Mamba block, `MambaManager.
allocate_new_blocks` takes its no-new-block early return (single_type_kv_cache_manager.py:1826-1833 in
0.33.0) without adding the request to `_allocated_block_reqs`. The next partial-tail CoW then takes the
first-allocation branch (`_apply_cow`, the block is replaced in the core's table) while the worker
appends the returned id: core and worker disagree on the live state column.
"""

from __future__ import annotations

from harness.mutants.base import mamba_mutant


def _make(original):
    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        marked_before = request_id in getattr(self, "_allocated_block_reqs", ())
        table_len = len(self.req_to_blocks[request_id])
        returned = original(self, request_id, num_tokens, num_tokens_main_model)
        # The early return is the only path that returns nothing and leaves the table as it was.
        if not marked_before and not returned and len(self.req_to_blocks[request_id]) == table_len:
            self._allocated_block_reqs.discard(request_id)
        return returned

    return allocate_new_blocks


SEED_UNMARKED_EARLY_RETURN = mamba_mutant(
    "seed-unmarked-early-return",
    "lifetime/marking: request not marked allocated on the no-new-block early return",
    "allocate_new_blocks", _make, origin="seed PR (fixed in vLLM 0.28.0)",
    releases="0.28.0-0.33.x (reintroduces the 0.26.0-0.27.1 bug)")
