"""Blind mutant: relocating a speculative (draft) Mamba scratch block leaves the old slot pointing at it.

In align mode with speculative decoding, the scratch blocks behind the running state are moved to the end of the
block table when the state advances past a block boundary, and their old slot must become the null block. The
slip forgets to null the old slot: the same block is listed twice with one reference, so the later retirement of
the old slot frees a block the request still uses as scratch, and the pool can hand it to another request.
Only speculative-decoding configurations that cross a Mamba block boundary reach this code.
"""

from harness.mutants.base import mamba_mutant


def _make(original):
    def _relocate_speculative_block(self, req_blocks, block_idx):
        block = req_blocks[block_idx]
        original(self, req_blocks, block_idx)
        req_blocks[block_idx] = block

    return _relocate_speculative_block


MUTANT = mamba_mutant(
    "mamba-spec-relocation-leaves-alias",
    "speculative Mamba scratch block relocated without nulling its old slot: the block is aliased in two "
    "block-table slots with one reference and is freed while still in use",
    "_relocate_speculative_block",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
