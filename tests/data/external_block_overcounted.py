"""The first source patch for sync-external-admission-undercount, as a mutant (issue 45): admission counted the
block a sync external hit loads whenever the continuation went past the hit, also where it stays inside the loaded
block and nothing more is taken; a pool stock fills exactly then never admits the request. Only the liveness
witness sees it (the stall lies below the largest the request may hold)."""

from harness.mutants.base import bound_arguments, mamba_mutant


def _counted_always(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        n = original(self, *args, **kwargs)
        b = bound_arguments(original, self, *args, **kwargs).arguments
        if (self.mamba_cache_mode == "align" and b["total_computed_tokens"] > b["num_local_computed_tokens"]
                and b["num_tokens_main_model"] > b["total_computed_tokens"] and n <= self.block_pool.num_gpu_blocks
                and b["request_id"] not in self._allocated_block_reqs):
            return n + 1
        return n
    return get_num_blocks_to_allocate


MUTANT = mamba_mutant("external-block-overcounted", "admission: a sync external hit's block counted where the "
                      "continuation stays inside it", "get_num_blocks_to_allocate", _counted_always,
                      releases="0.26.0-0.34.x", origin="hybrid-harness's first patch for "
                      "sync-external-admission-undercount")
