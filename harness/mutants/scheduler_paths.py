"""Mutants of the scheduler paths vLLM 0.34 added (engine tier: they live in vLLM's own Scheduler, which only the
engine tier runs). Each wraps vLLM's methods at run time; no vLLM code is copied."""

from __future__ import annotations

from harness.mutants.base import method_mutant


def _scheduler_path_mutant(name: str, bug_class: str, owner, method: str, make, engine_only: bool = True):
    """A mutant of 0.34's new code wrapping owner().<method>; engine_only (the default): Scheduler code that only
    the engine tier runs (the block-hash map is allocator code every tier runs)."""
    return method_mutant(name, bug_class, owner, method, make, releases="0.34.0-0.34.x", engine_only=engine_only)


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


HIT_LIMIT_IGNORED_LOCALLY = _scheduler_path_mutant(
    "hit-limit-ignored-locally", "bound: the local prefix-cache lookup ignores the request's hit limit, so a request "
    "asking for prompt logprobs from token L starts past L (its logprob rows are lost)",
    _request, "get_max_cache_hit_length", _limit_ignored)


# -- an async load aborted in flight (scheduler.py:3150-3166 in 0.34.0: a request aborted in WAITING_FOR_REMOTE_KVS
# whose load started keeps its blocks until the connector reports the load finished, `_aborted_kv_loads`, which
# --max-num-inflight-kv-loads counts, :2844-2850); this frees them at the abort, while the load still writes them -----
def _freed_at_abort(original):
    def _free_request(self, request, delay_free_blocks=False):
        return original(self, request, delay_free_blocks=False)
    return _free_request


ABORTED_LOAD_FREED_EARLY = _scheduler_path_mutant(
    "aborted-load-freed-early", "lifetime: a request aborted while its async connector load is in flight has its "
    "blocks freed at once; the load lands in blocks another request may own by then",
    _scheduler, "_free_request", _freed_at_abort)

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


CACHE_AWARE_PROBE_TAKES_REFS = _scheduler_path_mutant(
    "cache-aware-probe-takes-refs", "lifetime: cache-aware admission's prefix probe takes a reference to every block "
    "it hits and never drops it (a pool leak on every reordering step)",
    _kv_cache_manager, "get_num_cached_tokens", _probe_takes_refs)

# -- states published after sampled steps (scheduler.py:2449-2470 in 0.34.0): update_from_output caches a request's
# blocks up to `num_computed_tokens - num_in_flight_tokens`, the tokens whose states are written; this one publishes
# the in-flight tokens too (a block keyed by tokens whose state a step still in flight has not written) ---------------
def _publishes_in_flight(original):
    import sys

    def cache_blocks(self, request, num_computed_tokens):
        if sys._getframe(1).f_code.co_name == "update_from_output":  # the publish after a sampled step only
            num_computed_tokens = request.num_computed_tokens
        return original(self, request, num_computed_tokens)
    return cache_blocks


PUBLISH_COUNTS_IN_FLIGHT = _scheduler_path_mutant(
    "publish-counts-in-flight", "publication: after a sampled step the scheduler publishes (caches) blocks up to "
    "every computed token, in-flight ones included, before their states are written",
    _kv_cache_manager, "cache_blocks", _publishes_in_flight)


# -- parked async loads' reservations (scheduler.py:3566-3585 in 0.34.0): a load parked in async_kv_waiting reserves
# the blocks it still needs, refreshed at promotion and released when it is scheduled or aborted ----------------------
def _keeps_reservation(original):
    def _unreserve_parked(self, request):
        return None  # the reservation is never released
    return _unreserve_parked


PARKED_RESERVATION_KEPT = _scheduler_path_mutant(
    "parked-reservation-kept", "accounting: a parked async load's block reservation is never released once it is "
    "scheduled or aborted; later async loads see the pool as fuller than it is",
    _scheduler, "_unreserve_parked", _keeps_reservation)


def _refresh_adds(original):
    def _reserve_parked(self, request):
        cached = self._parked_reservations.get(request, 0)
        original(self, request)
        self._parked_reserved_blocks += cached  # the refresh adds the new count instead of replacing the old
    return _reserve_parked


PARKED_RESERVATION_DOUBLED = _scheduler_path_mutant(
    "parked-reservation-doubled", "accounting: refreshing a parked load's reservation at promotion adds its blocks "
    "again instead of replacing the cached count",
    _scheduler, "_reserve_parked", _refresh_adds)


# -- the in-flight load cap (--max-num-inflight-kv-loads, scheduler.py:2842-2850 in 0.34.0) counts loads in progress,
# completed but not yet scheduled, and aborted ones whose transfer still runs; this one forgets the aborted ---------
def _cap_ignores_aborted(original):
    def _admits_inflight_kv_load(self):
        aborted, self._aborted_kv_loads = self._aborted_kv_loads, type(self._aborted_kv_loads)()
        try:
            return original(self)
        finally:
            self._aborted_kv_loads = aborted
    return _admits_inflight_kv_load


INFLIGHT_CAP_IGNORES_ABORTED = _scheduler_path_mutant(
    "inflight-cap-ignores-aborted", "bound: the in-flight KV load cap does not count aborted loads whose transfer "
    "still runs, so more loads than --max-num-inflight-kv-loads hold blocks",
    _scheduler, "_admits_inflight_kv_load", _cap_ignores_aborted)


# -- the integer-id block-hash map (block_pool.py:38-105 in 0.34.0): a key cached by several blocks keeps one head id
# in `_cache` and every id in `_dup_ids`; popping the head moves it to the next. This one leaves the popped head ------
def _block_hash_map():
    from harness.vllm_adapter import block_pool_class
    import sys

    return sys.modules[block_pool_class().__module__].BlockHashToBlockMap


def _pop_keeps_head(original):
    def pop(self, key, block_id):
        head, shared = self._cache.get(key), key in self._dup_ids
        out = original(self, key, block_id)
        if out is not None and shared and head == block_id and key in self._cache:
            self._cache[key] = head  # still names the block just evicted
        return out
    return pop


MAP_POP_KEEPS_STALE_HEAD = _scheduler_path_mutant(
    "hash-map-pop-keeps-stale-head", "cache-key: evicting the head block of a hash cached by several blocks leaves "
    "the key naming it; a later hit gets the evicted (reused) block",
    _block_hash_map, "pop", _pop_keeps_head, engine_only=False)

SCHEDULER_PATH_MUTANTS = (HIT_LIMIT_IGNORED_LOCALLY, ABORTED_LOAD_FREED_EARLY, CACHE_AWARE_PROBE_TAKES_REFS,
                          PUBLISH_COUNTS_IN_FLIGHT, PARKED_RESERVATION_KEPT, PARKED_RESERVATION_DOUBLED,
                          INFLIGHT_CAP_IGNORES_ABORTED, MAP_POP_KEEPS_STALE_HEAD)
