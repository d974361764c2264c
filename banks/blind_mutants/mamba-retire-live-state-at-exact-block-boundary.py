"""Blind mutant: Mamba state retirement is off by one when the processed count lands on a block boundary.

``remove_skipped_blocks`` frees state blocks that only hold states strictly before the last processed token.
The slip treats the boundary as inclusive (``processed`` instead of ``processed - 1`` tokens are skippable) when
``processed_computed_tokens`` is an exact multiple of the Mamba block size, so the block holding the live state
at that boundary -- the one the next step reads from -- is freed and replaced by the null block. Off-boundary
counts behave exactly as before.
"""

from harness.mutants.base import bound_arguments, mamba_mutant


def _make(original):
    def remove_skipped_blocks(self, *args, **kwargs):
        bound = bound_arguments(original, self, *args, **kwargs)
        processed = bound.arguments["processed_computed_tokens"]
        if (getattr(self, "mamba_cache_mode", None) == "align" and processed > 0
                and processed % self.block_size == 0):
            bound.arguments["processed_computed_tokens"] = processed + 1
        return original(*bound.args, **bound.kwargs)

    return remove_skipped_blocks


MUTANT = mamba_mutant(
    "mamba-retire-live-state-at-exact-block-boundary",
    "Mamba retirement treats an exactly block-aligned processed count as inclusive and frees the block "
    "holding the live state the next step reads",
    "remove_skipped_blocks",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
