"""Mutants of the scheduler paths vLLM 0.34 added (engine tier: they live in vLLM's own Scheduler, which only the
engine tier runs). Each wraps vLLM's methods at run time; no vLLM code is copied."""

from __future__ import annotations

from harness.mutants.base import Mutant, method_wrapped, wrap_method


def _scheduler():
    from harness.vllm_adapter import scheduler_class

    return scheduler_class()


# -- prefix-cache hit limits (v1/request.py:352-362 in 0.34.0): a request with prompt logprobs from token L reads at
# most L tokens from the prefix cache and none from a connector -----------------------------------------------------
def _request():
    from harness.vllm_adapter import request_class

    return request_class()


def _limit_ignored(original):
    def get_max_cache_hit_length(self, bound=None):
        # the local lookup's bound without the request's own limit (only the last token and the caller's bound)
        return min(limit for limit in (self.num_tokens - 1, bound) if limit is not None)
    return get_max_cache_hit_length


HIT_LIMIT_IGNORED_LOCALLY = Mutant(
    name="hit-limit-ignored-locally", bug_class="bound: the local prefix-cache lookup ignores the request's hit limit, "
    "so a request asking for prompt logprobs from token L starts past L (its logprob rows are lost)",
    releases="0.34.0-0.34.x", origin="",
    patch=lambda: wrap_method(_request(), "get_max_cache_hit_length", _limit_ignored),
    is_applied=lambda: method_wrapped(_request(), "get_max_cache_hit_length"), engine_only=True)


# -- an async load aborted in flight (scheduler.py:3150-3166 in 0.34.0: a request aborted in WAITING_FOR_REMOTE_KVS
# whose load started keeps its blocks until the connector reports the load finished, `_aborted_kv_loads`, which
# --max-num-inflight-kv-loads counts, :2844-2850); this frees them at the abort, while the load still writes them -----
def _freed_at_abort(original):
    def _free_request(self, request, delay_free_blocks=False):
        return original(self, request, delay_free_blocks=False)
    return _free_request


ABORTED_LOAD_FREED_EARLY = Mutant(
    name="aborted-load-freed-early", bug_class="lifetime: a request aborted while its async connector load is in "
    "flight has its blocks freed at once; the load lands in blocks another request may own by then",
    releases="0.34.0-0.34.x", origin="", patch=lambda: wrap_method(_scheduler(), "_free_request", _freed_at_abort),
    is_applied=lambda: method_wrapped(_scheduler(), "_free_request"), engine_only=True)

# -- cache-aware admission's probe (kv_cache_manager.py:255-275 in 0.34.0, called by the scheduler's
# `_reorder_waiting_by_cached_prefix` for each waiting request in the window): "it takes no references"; this one
# looks the prefix up as admission does and keeps a reference to every block it hit ---------------------------------
def _kv_cache_manager():
    from harness.vllm_adapter import kv_cache_manager_class

    return kv_cache_manager_class()


def _probe_takes_refs(original):
    def get_num_cached_tokens(self, request):
        if not self.prefix_cache_lookup_enabled(request):
            return 0
        blocks, num_tokens, *_ = self.get_computed_blocks(request)
        for group in blocks.blocks:
            self.block_pool.touch(group)
        return num_tokens
    return get_num_cached_tokens


CACHE_AWARE_PROBE_TAKES_REFS = Mutant(
    name="cache-aware-probe-takes-refs", bug_class="lifetime: cache-aware admission's prefix probe takes a reference "
    "to every block it hits and never drops it (a pool leak on every reordering step)", releases="0.34.0-0.34.x",
    origin="", patch=lambda: wrap_method(_kv_cache_manager(), "get_num_cached_tokens", _probe_takes_refs),
    is_applied=lambda: method_wrapped(_kv_cache_manager(), "get_num_cached_tokens"), engine_only=True)

SCHEDULER_PATH_MUTANTS = (HIT_LIMIT_IGNORED_LOCALLY, ABORTED_LOAD_FREED_EARLY, CACHE_AWARE_PROBE_TAKES_REFS)
