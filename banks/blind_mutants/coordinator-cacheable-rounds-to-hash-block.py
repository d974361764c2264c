"""Blind mutant: with fine-grained (partial) hash hits, the cacheable prefix is rounded down to a hash block.

``HybridKVCacheCoordinator._align_cacheable`` must not round at all when partial hash hits are enabled. The slip
"harmlessly" rounds to ``hash_block_size``. While a request's computed count sits past its prompt's sub-block
tail boundary but before the next hash boundary, every step hands the managers the old tail boundary again, and
the Mamba manager re-keys the request's running state block (already privatized by the producer CoW) under the
tail hash although it now holds a later state. Off only when the computed count is not hash aligned.
"""

from harness.mutants.base import Mutant, method_wrapped, wrap_method


def _coordinator():
    from vllm.v1.core.kv_cache_coordinator import HybridKVCacheCoordinator

    return HybridKVCacheCoordinator


def _make(original):
    def _align_cacheable(self, num_tokens):
        if self.enable_partial_hash_hits:
            return num_tokens // self.hash_block_size * self.hash_block_size
        return original(self, num_tokens)

    return _align_cacheable


MUTANT = Mutant(
    name="coordinator-cacheable-rounds-to-hash-block",
    bug_class="cacheable prefix rounded to hash_block_size in partial-hit mode: a producer's privatized "
    "partial tail is re-registered on its running state block, keyed at a boundary its state has moved past",
    releases="0.33.0",
    origin="blind bank (synthetic)",
    patch=lambda: wrap_method(_coordinator(), "_align_cacheable", _make),
    is_applied=lambda: method_wrapped(_coordinator(), "_align_cacheable"),
)
