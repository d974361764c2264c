"""Blind mutant: under sparse prefix-cache retention the Mamba state kept for a reachable boundary is the block
after the boundary instead of the block ending on it.

``reachable_block_mask`` must keep block ``aligned_boundary // block_size - 1`` (the block whose end is the
replay boundary / shared-prefix junction). The slip keeps ``aligned_boundary // block_size``. Keys stay
truthful (every kept block is keyed at its own boundary), but the replay-boundary and junction states are
dropped, so repeated prompts and siblings silently miss the Mamba cache. Only with
``prefix_cache_retention_interval`` set (sparse retention).
"""

from harness.mutants.base import bound_arguments, mamba_mutant


def _make(original):
    def reachable_block_mask(cls, *args, **kwargs):
        bound = bound_arguments(original, cls, *args, **kwargs)
        boundaries = bound.arguments.get("reachable_boundaries") or ()
        if boundaries and bound.arguments.get("retention_interval") is not None:
            block_size = bound.arguments["kv_cache_spec"].block_size
            bound.arguments["reachable_boundaries"] = [b + block_size for b in boundaries]
        return original(*bound.args, **bound.kwargs)

    return reachable_block_mask


MUTANT = mamba_mutant(
    "mamba-retention-mask-boundary-off-by-one",
    "sparse-retention mask keeps the Mamba block after each reachable boundary instead of the one ending on "
    "it: replay-boundary and shared-prefix states are dropped (silent hit-rate loss)",
    "reachable_block_mask",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
