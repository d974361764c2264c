"""Async scheduling and deferred frees: stale output discarded, victims whose blocks a step in flight keeps, a prompt tail keyed before it is computed."""

from __future__ import annotations

from harness.fixes.targets import ASYNC_SCHEDULER, MAMBA_MANAGER, SCHEDULER, Fix, method_fix
from harness.mutants.base import Mutant, method_wrapped, recompiled_with, wrap_method


# -- fix: key the prompt-end tail only while it is being computed (single_type_kv_cache_manager.py:2039-2117 in
# 0.30.0; 0.32 moved the tail to P-1, which no call after the prompt reaches) ------------------------------------
def _tail_keyed_while_computing(original):
    def _cache_partial_tail_block(self, request, num_tokens, *args, **kwargs):
        # the tail's block is the running state block, which the next forward mutates in place: it may be keyed
        # at num_tokens only while no token past num_tokens is scheduled. Under async scheduling the optimistic
        # num_computed_tokens counts the steps in flight: past the tail, or at it with output in flight (the next
        # step already advancing it). Synchronous schedules never meet either condition, so they stay as they
        # are; checkpoint re-keying targets a reserved block and is left alone.
        computed = request.num_computed_tokens
        in_flight = getattr(request, "num_output_placeholders", 0) > 0
        if (request.request_id not in getattr(self, "_checkpoints", {})
                and (computed > num_tokens or (in_flight and computed >= num_tokens))):
            return None
        return original(self, request, num_tokens, *args, **kwargs)
    return _cache_partial_tail_block


def _prompt_end_tail() -> bool:
    """The prompt-end tail sits at the prompt's end P (before 0.32.0, which moved it to P - 1)."""
    from harness.release import parse_version
    from harness.vllm_adapter import installed_version

    return hasattr(MAMBA_MANAGER(), "_cache_partial_tail_block") and parse_version(installed_version()) < (0, 32, 0)


# -- fix: a preemption that frees nothing now is not made (scheduler.py:755-757 in 0.30.0, :940-942 in 0.33.0) ---
def _victim_freeable(scheduler) -> bool:
    """Whether preempting the request the running loop picks next (scheduler.py:576-601 in 0.27.1: the lowest
    priority, or the last running) gives its blocks back now. With deferred frees (a KV consumer connector under
    async scheduling or PP, :150-156) a request scheduled in the step still in flight keeps them out of the pool
    until that step's output (:2341-2354): 0.30.0's `_request_blocks_can_be_freed`."""
    running = scheduler.running
    victim = (max(running, key=lambda r: (r.priority, r.arrival_time)) if scheduler.policy.name == "PRIORITY"
              else running[-1])
    return not scheduler.defer_block_free or victim.last_sched_seq <= scheduler.processed_step_seq


def _allocated(node) -> bool:
    """The running loop's `if new_blocks is not None: break` (scheduler.py:584-586 in 0.27.1)."""
    import ast

    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "new_blocks" and isinstance(test.ops[0], ast.IsNot))


def _unfreeable_preemption_skipped_fix() -> Mutant:
    """0.30.0's rule inside the release's own allocation loop: where the next victim's free would be deferred, the
    running request waits for this step (break) instead of preempting every request down to itself."""
    def make(original):
        return recompiled_with(original, _allocated, "if not _victim_freeable(self):\n    break",
                               {"_victim_freeable": _victim_freeable})

    return Mutant(name="fix-unfreeable-preemption-skipped", bug_class="fix: the scheduler preempts no request whose "
                  "blocks a step in flight keeps (0.30.0's rule)", releases="where the issue is known",
                  origin="hybrid-harness (vLLM 0.30.0's rule)", patch=lambda: wrap_method(SCHEDULER(), "schedule", make),
                  is_applied=lambda: method_wrapped(SCHEDULER(), "schedule"))


def _preempts_unfreeable() -> bool:
    """Deferred frees (0.26.0+) without 0.30.0's check before a preemption."""
    import inspect

    try:
        source = inspect.getsource(SCHEDULER().schedule)
        defers = "defer_block_free" in inspect.getsource(SCHEDULER()._free_request_blocks)
    except (AttributeError, ImportError, OSError, TypeError):
        return False
    return defers and "_request_blocks_can_be_freed" not in source


# -- fix: 0.26.0's async discard counts frames: one frame in flight per step without pipeline parallelism, so the
# first stale frame drains the counter (async_scheduler.py:53-59 drops one frame per call; scheduler.py:2353 set it
# to num_output_placeholders, 1 + K tokens per step) -------------------------------------------------------------
def _discard_one_frame(original):
    def _update_request_with_output(self, request, new_token_ids):
        if getattr(request, "async_tokens_to_discard", 0) > 0:
            request.async_tokens_to_discard = 0
            return [], False
        return original(self, request, new_token_ids)
    return _update_request_with_output


def _discards_by_count() -> bool:
    """0.26.0: a force-preempted request's stale async output is dropped by a counter on the Request (later
    releases drop it by step, `drop_stale_output`)."""
    from harness.vllm_adapter import parameters

    return ("drop_stale_output" not in parameters(SCHEDULER()._preempt_request)
            and "async_tokens_to_discard" in ASYNC_SCHEDULER()._update_request_with_output.__code__.co_names)


FIXES = (
    method_fix("fix-discard-one-frame", ASYNC_SCHEDULER, "_update_request_with_output", _discard_one_frame,
                     "the first stale frame drains the discard counter (one frame in flight per step)", applies=_discards_by_count),  # v026-discard-counts-tokens-as-frames
    Fix(_unfreeable_preemption_skipped_fix(), "Scheduler.schedule",
        _preempts_unfreeable),  # deferred-free-preemption-livelock
    method_fix("fix-tail-keyed-while-computing", MAMBA_MANAGER, "_cache_partial_tail_block",
                     _tail_keyed_while_computing, "the prompt-end tail is keyed only while no token past it is "
                     "scheduled", applies=_prompt_end_tail),  # async-prompt-tail-rekeyed
)
