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
"""

from __future__ import annotations

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


def _patch_module_function(module_name: str, attr: str, make):
    import importlib

    module = importlib.import_module(module_name)
    original = getattr(module, attr)
    patched = make(original)
    setattr(patched, _MARK, True)
    patched.__wrapped__ = original
    setattr(module, attr, patched)

    def undo() -> None:
        setattr(module, attr, original)
    return undo


def _module_function_patched(module_name: str, attr: str) -> bool:
    import importlib

    return getattr(getattr(importlib.import_module(module_name), attr), _MARK, False)


def _no_cleanup(original):
    def cleanup_mamba_state_idx(scheduler_output, mamba_state_idx):
        return None
    return cleanup_mamba_state_idx


V1_MUTANTS = (
    Mutant(name="v1-accepted-count-lost", bug_class="lost update: the V1 runner's accepted-token counts never reach "
           "the CPU copy the next pre-copy and kernels read", releases="0.26.0-0.33.x",
           origin="vLLM V1 accepted-count copy-back vs condense() under async scheduling (gpu_model_runner.py)",
           patch=lambda: wrap_method(_runner_class(), "_update_states_after_model_execute", _accepted_lost),
           is_applied=lambda: method_wrapped(_runner_class(), "_update_states_after_model_execute"), runner="v1"),
    Mutant(name="v1-stale-mamba-state-idx", bug_class="stale index: preempted/resumed requests keep their old "
           "running column in mamba_state_idx; the align pre-copy reads it", releases="0.26.0-0.33.x",
           origin="vLLM cleanup_mamba_state_idx (force-preempted requests left stale entries, mamba_utils.py)",
           patch=lambda: _patch_module_function("vllm.v1.worker.mamba_utils", "cleanup_mamba_state_idx", _no_cleanup),
           is_applied=lambda: _module_function_patched("vllm.v1.worker.mamba_utils", "cleanup_mamba_state_idx"),
           runner="v1"),
)
