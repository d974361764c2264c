"""The scheduler's KV connector path: the local lookup a remote hit continues, and its truncation (scheduler.py, kv_cache_manager.py, kv_cache_coordinator.py)."""

from __future__ import annotations

from harness.fixes.targets import HYBRID_COORDINATOR, KV_CACHE_MANAGER, SCHEDULER, Fix, method_fix, wrapped_by
from harness.mutants.base import Mutant, wrap_method

# -- fix: a KV connector's local lookup reports the full-attention hit and reconciles a diverged one (0.27.1:
# kv_cache_manager.py:297-342 get_computed_blocks_for_connector, scheduler.py:743-821) ---------------------------
_SCHEDULING: list = []  # the Scheduler whose schedule() runs: the coordinator's lookup alone cannot see it


def _scheduling(original):
    def schedule(self, *args, **kwargs):
        _SCHEDULING.append(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            _SCHEDULING.pop()
    return schedule


def _looked_up(scheduler, block_hashes):
    """The request whose block hashes the scheduler's lookup was given (scheduler.py:726-727 in 0.26.0)."""
    return next(r for r in scheduler.requests.values() if r.block_hashes is block_hashes)


def _lookup_reconciled(original):
    """0.26.0's connector path resumes a request at max(per_group_hits) (scheduler.py:725-742), a boundary where a
    group that hit less has no state. 0.27.1 resumes at the full-attention hit, and at the boundary every group
    agrees on (`get_computed_blocks`) where a group hit deeper, or where the hit diverged and the connector loads
    nothing past it. Departure: the 0.26 path zeroes shared_prefix_boundary after the lookup, so a reconciled hit
    pins no junction here (0.27.1 keeps get_computed_blocks' junction)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    def find_longest_cache_hit_per_group(self, block_hashes, max_length):
        computed, hits = original(self, block_hashes, max_length)
        first = self.attention_groups[0]  # full attention sorts first (kv_cache_coordinator.py:631-635)
        if not _SCHEDULING or not isinstance(first.spec, FullAttentionSpec):
            return computed, hits
        scheduler = _SCHEDULING[-1]
        full = hits[first.group_ids[0]]
        request = _looked_up(scheduler, block_hashes)
        # the harness's connector answers from its plan alone: asking it first changes nothing the scheduler's own
        # call (with the same count) does not redo
        unbacked = min(hits) < full and scheduler.connector.get_num_new_matched_tokens(request, full)[0] == 0
        if any(hit > full for hit in hits) or unbacked:
            blocks, num_computed, _ = scheduler.kv_cache_manager.get_computed_blocks(request)
            return blocks.blocks, [num_computed] * len(hits)
        return computed, hits
    return find_longest_cache_hit_per_group


def _connector_lookup_fix(name: str, make, what: str) -> Mutant:
    """A fix of the scheduler's connector-path lookup: `make` wraps the coordinator's per-group lookup, which
    learns the running scheduler from a wrap of schedule()."""
    def patch():
        undo_schedule = wrap_method(SCHEDULER(), "schedule", _scheduling)
        undo_lookup = wrap_method(HYBRID_COORDINATOR(), "find_longest_cache_hit_per_group", make)

        def undo():
            undo_lookup()
            undo_schedule()
        return undo

    return Mutant(name=name, bug_class=f"fix: {what}", releases="where the issue is known",
                  origin="hybrid-harness (vLLM 0.27.1's rule)", patch=patch,
                  is_applied=lambda: wrapped_by(HYBRID_COORDINATOR(), "find_longest_cache_hit_per_group", make))


# -- fix: a remote hit longer than a local sub-block tail supersedes it (0.27.1: scheduler.py:771-810,
# kv_cache_manager.py:777-794 truncate_computed_blocks) ------------------------------------------------------------
def _tail_superseded(original):
    """0.26.0 asks the connector for what lies past the whole local hit, a sub-block tail included (scheduler.py:
    766-780): the tail's copy-on-write (a private copy of the cached partial state) and the load that continues
    past it fill the same Mamba block, and the request resumes from the copy. 0.27.1 asks from the block-aligned
    hit and, where the remote hit exceeds the tail, drops the tail from the lookup so no copy is made and the load
    covers it. Applied after the lookup reconcile (KNOWN_ISSUES order), as 0.27.1 does."""
    def find_longest_cache_hit_per_group(self, block_hashes, max_length):
        computed, hits = original(self, block_hashes, max_length)
        if not _SCHEDULING:
            return computed, hits
        scheduler = _SCHEDULING[-1]
        local = max(hits)
        aligned = local - local % scheduler.block_size
        if aligned == local:
            return computed, hits
        # the harness's connector answers from its plan alone (see _lookup_reconciled)
        remote = scheduler.connector.get_num_new_matched_tokens(_looked_up(scheduler, block_hashes), aligned)[0]
        if remote is None or remote <= local - aligned:
            return computed, hits  # the tail stands, and the scheduler's own call finds nothing past it
        truncated = tuple(list(blocks[:aligned // manager.block_size])
                          for blocks, manager in zip(computed, self.single_type_managers))
        return truncated, [min(hit, aligned) for hit in hits]
    return find_longest_cache_hit_per_group


def _short_mamba_group_kept(original):
    """0.27.1's truncate_computed_blocks asserts that every group covers the block-aligned endpoint (kv_cache_manager.
    py:790-792 in 0.27.1), but a local Mamba hit may end below it where the remote hit that supersedes the tail
    supplies the final state; 0.28.0 keeps such a Mamba group's blocks as they are. vLLM's own slicing runs
    wherever no Mamba group is short."""
    from vllm.v1.kv_cache_interface import MambaSpec

    def truncate_computed_blocks(self, blocks, num_computed_tokens):
        managers = self.coordinator.single_type_managers
        specs = [group.kv_cache_spec for group in self.kv_cache_config.kv_cache_groups]
        short = [len(group_blocks) < num_computed_tokens // manager.block_size
                 for group_blocks, manager in zip(blocks.blocks, managers)]
        if not any(is_short and isinstance(spec, MambaSpec) for is_short, spec in zip(short, specs)):
            return original(self, blocks, num_computed_tokens)
        assert not any(is_short and not isinstance(spec, MambaSpec) for is_short, spec in zip(short, specs))
        return self.create_kv_cache_blocks(tuple(list(group_blocks[:num_computed_tokens // manager.block_size])
                                                 for group_blocks, manager in zip(blocks.blocks, managers)))
    return truncate_computed_blocks


def _truncate_asserts_every_group() -> bool:
    import inspect

    truncate = getattr(KV_CACHE_MANAGER(), "truncate_computed_blocks", None)
    return truncate is not None and "MambaSpec" not in inspect.getsource(truncate)


def _connector_lookup_takes_max() -> bool:
    """The scheduler's connector path does its own per-group lookup (0.26.0); 0.27.1 moved it into
    KVCacheManager.get_computed_blocks_for_connector."""
    return "find_longest_cache_hit_per_group" in SCHEDULER().schedule.__code__.co_names


FIXES = (
    Fix(_connector_lookup_fix("fix-connector-lookup-reconciled", _lookup_reconciled, "a KV connector's local "
                                      "prefix lookup resumes at the full-attention hit, reconciled where the groups' "
                                      "hits diverge"), "HybridKVCacheCoordinator.find_longest_cache_hit_per_group",
        _connector_lookup_takes_max),  # connector-lookup-deepest-group-hit
    Fix(_connector_lookup_fix("fix-remote-hit-supersedes-tail", _tail_superseded, "a remote hit longer than a "
                                      "local sub-block tail supersedes it (the connector is asked from the block-aligned "
                                      "local hit)"), "HybridKVCacheCoordinator.find_longest_cache_hit_per_group",
        _connector_lookup_takes_max),  # connector-load-over-partial-tail
    method_fix("fix-short-mamba-group-kept", KV_CACHE_MANAGER, "truncate_computed_blocks", _short_mamba_group_kept,
                     "a truncated lookup keeps a Mamba group that ends before the endpoint", applies=_truncate_asserts_every_group),  # truncated-lookup-asserts-short-mamba-hit
)
