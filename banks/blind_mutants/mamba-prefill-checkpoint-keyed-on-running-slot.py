"""Blind mutant: the internal prefill checkpoint is recorded against the wrong block-table slot.

When the backend exports a prefill checkpoint inside the final chunk (``num_prefill_checkpoint_blocks > 0``),
the reserved checkpoint slot is ``cdiv(query_end, block_size) - 2``. The slip uses ``- 1``, i.e. the running
state slot, so the checkpoint boundary's key is registered on the block that ends up holding the chunk-end
state. Only configurations with prefill checkpoint blocks, on the chunk that reaches the prefill end, are hit.
"""

from harness.mutants.base import bound_arguments, mamba_mutant


def _make(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if getattr(self, "mamba_cache_mode", None) != "align":
            return result
        bound = bound_arguments(original, self, *args, **kwargs)
        request_id = bound.arguments["request_id"]
        if not bound.arguments.get("apply_admission_cap", False) and request_id in self._checkpoints:
            position, idx = self._checkpoints[request_id]
            self._checkpoints[request_id] = (position, idx + 1)
        return result

    return get_num_blocks_to_allocate


MUTANT = mamba_mutant(
    "mamba-prefill-checkpoint-keyed-on-running-slot",
    "internal prefill checkpoint slot computed as cdiv(end, block)-1 instead of -2: the checkpoint key is "
    "registered on the running-state block, which holds the chunk-end state",
    "get_num_blocks_to_allocate",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
