"""Blind mutant: moving a prefix-cache entry to the CoW copy leaves the source block's entry in place.

When a running producer keeps writing into the block that holds its own cached sub-block tail state, the
allocator re-points that block's cache keys to a private copy (``move_block_hashes``). The slip implements the
move as a copy: the keys are added to the destination but never dropped from the source, and the source entry
stays first in the hash map. Later lookups of that key return the producer's running block, which by then holds
a later state than its key promises. Only the producer partial-tail CoW path calls this.
"""

from harness.mutants.base import Mutant, method_wrapped, wrap_method


def _block_pool():
    from vllm.v1.core.block_pool import BlockPool

    return BlockPool


def _make(original):
    def move_block_hashes(self, src_block, dst_block):
        primary = src_block.block_hash
        num_tokens = src_block.block_hash_num_tokens
        secondary = set(self.cached_block_hashes_by_block.get(src_block.block_id, ()))
        result = original(self, src_block, dst_block)
        if primary is None:
            return result
        lookup = self.cached_block_hash_to_block
        for key in [primary, *secondary]:
            # source entry first (as if it had never been removed), then the copy
            lookup.pop(key, dst_block.block_id)
            lookup.insert(key, src_block)
            lookup.insert(key, dst_block)
        src_block.set_block_hash(primary, num_tokens=num_tokens)
        if secondary:
            self.cached_block_hashes_by_block.setdefault(src_block.block_id, set()).update(secondary)
        return result

    return move_block_hashes


MUTANT = Mutant(
    name="blockpool-move-hashes-keeps-source-entry",
    bug_class="producer CoW 'moves' the tail's cache keys by copying them: the running source block stays "
    "registered (and is found first), so later hits read a state newer than the key",
    releases="0.33.0",
    origin="blind bank (synthetic)",
    patch=lambda: wrap_method(_block_pool(), "move_block_hashes", _make),
    is_applied=lambda: method_wrapped(_block_pool(), "move_block_hashes"),
)
