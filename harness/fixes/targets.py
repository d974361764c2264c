"""What every fix is made of: the `Fix` record, the vLLM classes fixes patch (named by module and class, imported
only when a fix is applied or probed) and `method_fix`, a fix that wraps one vLLM method."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from harness.mutants.base import Mutant, method_wrapped, wrap_method


@dataclass(frozen=True)
class Fix:
    """A known issue's fix: the run-time patch that removes the bug (the change vLLM would ship), the vLLM code it
    patches by name, and `applies`: whether the installed release carries the code the fix changes (None:
    every release)."""

    mutant: Mutant
    target: str
    applies: Callable[[], bool] | None = None

    @property
    def name(self) -> str:
        return self.mutant.name

    @property
    def what(self) -> str:
        return self.mutant.bug_class.removeprefix("fix: ")


@dataclass(frozen=True)
class VllmClass:
    """A vLLM class by module and name; calling it imports the class (vLLM's environment set first)."""

    module: str
    name: str

    def __call__(self):
        from harness.vllm_env import prepare

        prepare()  # a no-op after the entry point's own call
        return getattr(importlib.import_module(self.module), self.name)


_STM = "vllm.v1.core.single_type_kv_cache_manager"
FULL_ATTENTION_MANAGER = VllmClass(_STM, "FullAttentionManager")
MAMBA_MANAGER = VllmClass(_STM, "MambaManager")
SCHEDULER = VllmClass("vllm.v1.core.sched.scheduler", "Scheduler")
ASYNC_SCHEDULER = VllmClass("vllm.v1.core.sched.async_scheduler", "AsyncScheduler")
COORDINATOR = VllmClass("vllm.v1.core.kv_cache_coordinator", "KVCacheCoordinator")
HYBRID_COORDINATOR = VllmClass("vllm.v1.core.kv_cache_coordinator", "HybridKVCacheCoordinator")
KV_CACHE_MANAGER = VllmClass("vllm.v1.core.kv_cache_manager", "KVCacheManager")
V1_RUNNER = VllmClass("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
V2_RUNNER = VllmClass("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")
MAMBA_BUILDER = VllmClass("vllm.v1.attention.backends.mamba_attn", "BaseMambaAttentionMetadataBuilder")


def v2_runner_module():
    import vllm.v1.worker.gpu.model_runner as module

    return module


def worker_shadow():
    """The harness's mirror of V1's batch bookkeeping (the mirrored tiers' worker), which some runner fixes patch
    beside vLLM's own runner."""
    from harness.worker import WorkerShadow

    return WorkerShadow


def target_name(owner, method: str) -> str:
    return f"{getattr(owner, 'name', getattr(owner, '__name__', 'vLLM'))}.{method}"


def patch_fix(name: str, target: str, what: str, patch, is_applied, *, applies=None) -> Fix:
    """A fix from its own patch and self-check (patch() returns the undo)."""
    mutant = Mutant(name=name, bug_class=f"fix: {what}", releases="where the issue is known", origin="hybrid-harness",
                    patch=patch, is_applied=is_applied)
    return Fix(mutant, target, applies)


def method_fix(name: str, owner, method: str, make, what: str, *, applies=None) -> Fix:
    """A fix that replaces owner().<method> by make(original)."""
    return patch_fix(name, target_name(owner, method), what, lambda: wrap_method(owner(), method, make),
                     lambda: method_wrapped(owner(), method), applies=applies)


def has_checkpoints() -> bool:
    from harness.vllm_adapter import supports_prefill_checkpoints

    return supports_prefill_checkpoints()


def has_checkpoint_blocks() -> bool:
    """vLLM's own code has Mamba prefill checkpoint blocks (MambaSpec's fields and kv_cache_interface's helpers),
    whether or not the mirrored tiers' worker shadow follows them (0.32.0 has them: tier e2e runs them)."""
    from vllm.v1 import kv_cache_interface as kci

    return ({"num_prefill_checkpoint_blocks", "prefill_checkpoint_alignment"} <= set(kci.MambaSpec.__dataclass_fields__)
            and hasattr(kci, "get_mamba_prefill_checkpoint_position"))


def wrapped_by(cls, method: str, make) -> bool:
    """`make`'s wrapper is somewhere in cls.<method>'s stack of patches (two fixes wrap the same lookup)."""
    fn = getattr(cls, method)
    while fn is not None:
        if fn.__qualname__.startswith(make.__name__ + "."):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def v1_reorders() -> bool:
    try:
        return hasattr(V1_RUNNER(), "_may_reorder_batch")
    except ImportError:
        return False
