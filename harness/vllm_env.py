"""Process set-up for vLLM: `prepare()`, one explicit call at each entry point (harness.cli.main,
harness.fuzz_target.main, the test and bench conftests, the measurement scripts) before anything imports vLLM.

vLLM resolves its platform once, at first use: a process that imported vLLM before these were set saw another
platform (another Mamba state dtype, so other block sizes for a real model), and once wrote those into the shared
model-geometry cache (artifacts/cache/model-geometries.json) for every later process. The two doors into vLLM
(harness.vllm_adapter, harness.engine) call `prepare()` as well, for a library user who imports them directly (a
no-op after an entry point's call); nothing else in the harness touches the environment when imported (a test
imports the configuration and judging modules in a fresh process and finds it untouched)."""

from __future__ import annotations

import os

_PREPARED: list[bool] = []
# tier e2e: vLLM's engine in this process, its CPU worker not binding OpenMP threads (the engine runs torch on one
# thread: harness/e2e/engine.py); set before vLLM is imported, read when an engine is built
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
              "VLLM_CPU_KVCACHE_SPACE": "1"}


def prepare(tree: str | os.PathLike | None = None) -> None:
    """Set this process up for vLLM: the vLLM tree (`tree`, else HH_VLLM) first on sys.path and PYTHONPATH
    (harness.release.use_tree; BadInput for a path without vLLM), and, on a machine without an NVIDIA driver,
    CPU device inference with vLLM's Triton check accepting the driverless machine (CUDA_VISIBLE_DEVICES set and
    empty, vllm/triton_utils/importing.py), so vLLM picks its model runner as on a GPU host (--runner auto / v2);
    Triton kernels without a harness replacement run in Triton's interpreter. On a GPU host the model tier's
    kernels need the GPU, and vLLM finds Triton and the device by itself."""
    if _PREPARED and tree is None:  # the doors' calls after the entry point's (every fix applied makes one)
        return
    from harness.release import use_tree

    use_tree(tree)
    if _PREPARED:
        return
    for name, value in ENGINE_ENV.items():  # tier e2e's in-process engine (read by vLLM when it builds one)
        os.environ.setdefault(name, value)
    if not os.path.exists("/proc/driver/nvidia/version"):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        os.environ.setdefault("TRITON_INTERPRET", "1")
    _PREPARED.append(True)


__all__ = ["ENGINE_ENV", "prepare"]
