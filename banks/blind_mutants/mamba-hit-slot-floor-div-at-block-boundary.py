"""Blind mutant: a fine-grained Mamba hit that ends exactly on a Mamba block boundary is placed one slot too late.

The slip: the slot of the hit state is computed as ``hit_tokens // block_size`` instead of
``cdiv(hit_tokens, block_size) - 1``. The two agree for every sub-block (partial) hit, and differ only when the
hit length is an exact multiple of the Mamba block size, so the hit list gets one extra leading null block and
the cached state lands in the slot the request will treat as its own running state.
"""

from harness.mutants.base import bound_arguments, mamba_mutant


def _make(original):
    def find_longest_cache_hit(cls, *args, **kwargs):
        computed_blocks, hit_length = original(cls, *args, **kwargs)
        bound = bound_arguments(original, cls, *args, **kwargs)
        block_size = bound.arguments["kv_cache_spec"].block_size
        alignment = bound.arguments["alignment_tokens"]
        fine_grained = alignment < block_size and block_size % alignment == 0
        if fine_grained and hit_length > 0 and hit_length % block_size == 0:
            null_block = bound.arguments["block_pool"].null_block
            for blocks in computed_blocks:
                if blocks:
                    blocks.insert(len(blocks) - 1, null_block)
        return computed_blocks, hit_length

    return find_longest_cache_hit


MUTANT = mamba_mutant(
    "mamba-hit-slot-floor-div-at-block-boundary",
    "fine-grained Mamba hit ending exactly on a Mamba block boundary is put one block-table slot too late "
    "(hit_tokens // block_size instead of cdiv - 1): the shared cached state becomes the request's running slot",
    "find_longest_cache_hit",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
