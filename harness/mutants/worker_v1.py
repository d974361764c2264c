"""Worker-side mutants: run-time patches of vLLM's V1 model runner code (`runner="v1"`: only the engine tier
with `--runner v1` runs that code, harness/engine/runner_v1.py). Each wraps vLLM's own function.

- v1-accepted-count-lost: the accepted-token counts the spec-decode step produced never reach the CPU copy
  the next step's pre-copy and kernels read (`input_batch.num_accepted_tokens_cpu`): the class of the async
  scheduling race where the D2H copy of the counts lands before/after `condense()` moves rows
  (gpu_model_runner.py:2067-2096 in 0.33.0 reads them through prev_positions for that reason; vLLM PR #28006
  era fixes of num_accepted_tokens with async scheduling).
- v1-stale-mamba-state-idx: `cleanup_mamba_state_idx` does nothing, so a preempted / resumed request keeps
  its old running column and the align pre-copy reads it (mamba_utils.py:1398-1415 in 0.33.0: its
  docstring names the force-preemption case that left stale entries pointing past the new allocation).
- v1-async-prev-row-as-current: under async scheduling the last step's sampled tokens are copied into this
  step's placeholders from the row each request held in the previous batch (`prev_positions`, current row ->
  previous row, gpu_model_runner.py:1740-1800 in 0.33.0: "Carefully handles the prev_sampled_token_ids");
  the mutant takes the current row for the previous one. Synchronous steps carry no placeholders, so only
  async scheduling reaches it, and only once rows moved (a request finished and condense() closed the gap,
  or the batch was reordered).
- v1-reorder-threshold-off-by-one: the decode-first batch reorder (`_may_reorder_batch`,
  attention/backends/utils.py:939-1015) runs one token below the Mamba2 builder's threshold, so a decode row
  with all its drafts (1 + K tokens) ranks with the long extends; the builder's split (at the first prefilling
  row, mamba_attn.py:451-455) then sends it to the prefill kernels, which ignore its accepted count (the class
  of vLLM's V2 sort bug, v2-draftless-decode-after-prefill, and of SGLang #31833's per-row misplacement).
- v1-async-valid-count-unwaited: under async scheduling with EAGLE drafts, the deferred correction of the
  optimistic computed counts reads the previous step's valid sampled counts without waiting on their
  device-to-host copy (`_get_valid_sampled_token_count` waits on `valid_sampled_token_count_event`,
  gpu_model_runner.py:4673-4683 in 0.33.0). A host copy lands at once, so only `--copy-timing late`
  (harness/engine/copy_timing.py) shows it: the correction then uses the counts of an earlier step.
- mamba-copies-first-group-only: the V1 runner's align copies (pre-copy and spec post-copy buffers, built from
  `mamba_utils.get_mamba_groups`) cover only the first Mamba group, as code written for one Mamba group would; a
  real model has several (Nemotron-H 4B: six, harness/engine/model_geometry.py), whose running columns then
  start from a state nobody copied. Only the real models' geometries (`geometry.model`) reach it.
"""

from __future__ import annotations

import numpy as np

from harness.patches import patch_attr
from harness.mutants.base import Mutant, method_wrapped, wrap_method

_MARK = "_hybrid_harness_mutant"


def _runner_class():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner


def _accepted_lost(original):
    def _update_states_after_model_execute(self, output_token_ids, scheduler_output):
        original(self, output_token_ids, scheduler_output)
        n = output_token_ids.shape[0]
        self.input_batch.num_accepted_tokens_cpu[:n] = 1  # the count copied back is lost
    return _update_states_after_model_execute


def _prev_row_as_current(original):
    def _prepare_input_ids(self, scheduler_output, num_reqs, *args, **kwargs):
        if self.input_batch.prev_sampled_token_ids is not None:
            prev = self.prev_positions.np[:num_reqs]
            rows = prev >= 0
            prev[rows] = np.arange(num_reqs)[rows]  # the current row read as the one it held last step
        return original(self, scheduler_output, num_reqs, *args, **kwargs)
    return _prepare_input_ids


def _threshold_off_by_one(original):
    def _may_reorder_batch(self, scheduler_output):
        threshold = self.reorder_batch_threshold
        if threshold is None or threshold <= 1:
            return original(self, scheduler_output)
        self.reorder_batch_threshold = threshold - 1  # the builder keeps its own (the split uses that one)
        try:
            return original(self, scheduler_output)
        finally:
            self.reorder_batch_threshold = threshold
    return _may_reorder_batch


def _count_unwaited(original):
    def _get_valid_sampled_token_count(self):
        prev = self.input_batch.prev_sampled_token_ids
        if self.valid_sampled_token_count_event is None or prev is None:
            return []
        return self.valid_sampled_token_count_cpu[: prev.shape[0]].tolist()  # read without waiting on the copy
    return _get_valid_sampled_token_count


def _patch_module_function(module_name: str, attr: str, make):
    import importlib

    module = importlib.import_module(module_name)
    original = getattr(module, attr)
    patched = make(original)
    setattr(patched, _MARK, True)
    patched.__wrapped__ = original
    return patch_attr(module, attr, patched)  # the patch layer (harness/patches.py) records and undoes it


def _module_function_patched(module_name: str, attr: str) -> bool:
    import importlib

    return getattr(getattr(importlib.import_module(module_name), attr), _MARK, False)


def _no_cleanup(original):
    def cleanup_mamba_state_idx(scheduler_output, mamba_state_idx):
        return None
    return cleanup_mamba_state_idx


def _first_group_only(original):
    def get_mamba_groups(kv_cache_config):
        groups = original(kv_cache_config)
        if isinstance(groups, tuple):  # 0.26-0.29: (group ids, spec)
            return groups[0][:1], groups[1]
        spec, ids = next(iter(groups.items()))  # 0.30+: {spec: group ids}
        return {spec: ids[:1]}
    return get_mamba_groups


def _runner_mutant(name: str, bug_class: str, origin: str, method: str, make, copy_timing: str | None = None) -> Mutant:
    """A mutant that wraps one GPUModelRunner method with make(original)."""
    return Mutant(name=name, bug_class=bug_class, releases="0.26.0-0.33.x", origin=origin,
                  patch=lambda: wrap_method(_runner_class(), method, make),
                  is_applied=lambda: method_wrapped(_runner_class(), method), runner="v1", copy_timing=copy_timing)


V1_MUTANTS = (
    _runner_mutant("v1-accepted-count-lost", "lost update: the V1 runner's accepted-token counts never reach the CPU "
                   "copy the next pre-copy and kernels read",
                   "vLLM V1 accepted-count copy-back vs condense() under async scheduling (gpu_model_runner.py)",
                   "_update_states_after_model_execute", _accepted_lost),
    Mutant(name="v1-stale-mamba-state-idx", bug_class="stale index: preempted/resumed requests keep their old "
           "running column in mamba_state_idx; the align pre-copy reads it", releases="0.26.0-0.33.x",
           origin="vLLM cleanup_mamba_state_idx (force-preempted requests left stale entries, mamba_utils.py)",
           patch=lambda: _patch_module_function("vllm.v1.worker.mamba_utils", "cleanup_mamba_state_idx", _no_cleanup),
           is_applied=lambda: _module_function_patched("vllm.v1.worker.mamba_utils", "cleanup_mamba_state_idx"),
           runner="v1"),
    _runner_mutant("v1-async-prev-row-as-current", "stale row map under async scheduling: the V1 runner fills this "
                   "step's placeholders from the previous batch's sampled tokens at the current row, not the row the "
                   "request held then",
                   "vLLM V1 async scheduling placeholder fill (prev_positions, gpu_model_runner.py _prepare_input_ids)",
                   "_prepare_input_ids", _prev_row_as_current),
    _runner_mutant("v1-reorder-threshold-off-by-one", "batch reorder vs metadata split: V1 reorders its batch one token "
                   "below the Mamba2 builder's decode threshold, so full spec-decode rows land behind prefills and run "
                   "through the prefill kernels",
                   "vLLM V1 _may_reorder_batch / reorder_batch_threshold (gpu_model_runner.py:1105-1128, :6817-6834); "
                   "the same split-by-order class as vLLM's V2 sort bug and SGLang #31833",
                   "_may_reorder_batch", _threshold_off_by_one),
    _runner_mutant("v1-async-valid-count-unwaited", "unordered read: under async scheduling with EAGLE drafts the "
                   "V1 runner reads the previous step's valid sampled counts (the computed-token correction) without "
                   "waiting on their device-to-host copy; with late copies it corrects from stale counts",
                   "vLLM V1 async spec decode: _get_valid_sampled_token_count waits on valid_sampled_token_count_event "
                   "(gpu_model_runner.py:4673-4683 in 0.33.0); the class of the async accepted-count copy races "
                   "(gpu_model_runner.py:2068-2070 names one)",
                   "_get_valid_sampled_token_count", _count_unwaited, copy_timing="late"),
    Mutant(name="mamba-copies-first-group-only", bug_class="one group for many: the V1 runner's align copies cover the "
           "first Mamba group only; a real model's other Mamba groups keep uncopied running columns",
           releases="0.26.0-0.33.x",
           origin="synthetic; vLLM's copies loop over every Mamba group (mamba_utils.py:1364 in 0.33.0) since models "
           "with several Mamba groups (Nemotron-H, granite-4.0-h) are served",
           patch=lambda: _patch_module_function("vllm.v1.worker.mamba_utils", "get_mamba_groups", _first_group_only),
           is_applied=lambda: _module_function_patched("vllm.v1.worker.mamba_utils", "get_mamba_groups"),
           runner="v1"),
)
