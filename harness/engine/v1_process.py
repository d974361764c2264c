"""Process set-up for vLLM's V1 model runner on this CPU-only machine (harness/engine/runner_v1.py): whether
the release has what the V1 worker drives, the once-per-process distributed init and copy observer, and the
stand-ins for what a GPU host has (CUDA streams and events, host memory instead of pinned memory, one scan of
the installed distributions' entry points per process). Every change to vLLM, torch or the standard library
goes through the patch layer (harness/patches.py).
"""

from __future__ import annotations

import contextlib
import inspect
import socket

from harness.patches import patch_attr, undo_all

PROCESS: dict = {}  # once per process: distributed init, kernel registration, the collect wrapper; "observer"


def supported() -> str | None:
    """None when the installed release has what V1Worker drives, else why not."""
    try:
        import vllm.v1.worker.cpu_model_runner  # noqa: F401
        from vllm.v1.worker import mamba_utils
        from vllm.v1.attention.backends.utils import mamba_get_block_table_tensor  # noqa: F401
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError as exc:
        return f"cannot import the V1 CPU model runner pieces ({exc})"
    missing = [n for n in ("preprocess_mamba", "collect_mamba_copy_meta", "MambaBuffers",
                           "stage_postprocess_inputs_to_gpu", "postprocess_mamba_align_gpu")
               if not hasattr(mamba_utils, n)]
    missing += [n for n in ("_update_states", "_prepare_inputs", "_get_mamba_bufs", "_bookkeeping_sync",
                            "_update_states_after_model_execute") if not hasattr(GPUModelRunner, n)]
    if missing:
        return f"its V1 runner has no {', '.join(missing)}"
    return None


def init_process(vc) -> None:
    if PROCESS:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.v1.worker import mamba_utils

    from harness.engine import kernels_v1

    if not model_parallel_is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with set_current_vllm_config(vc):
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
            initialize_model_parallel(1, 1)
    _host_memory_only()
    _eager_compiled_helpers()
    original = mamba_utils.collect_mamba_copy_meta

    def collect_mamba_copy_meta(copy_bufs, kv_cache_config, funcs, group_ids, src_block_idx, dest_block_idx,
                                accept_token_bias, req_state, forward_context):
        # the non-fused pre-copy: every copy listed here runs in do_mamba_copy_block after the loop
        # (mamba_utils.py:1345-1396), so the source pages read now are what the copy consumes
        if not (src_block_idx == dest_block_idx and accept_token_bias == 0) and PROCESS.get("observer"):
            PROCESS["observer"]("precopy", req_state.req_id, src_block_idx, dest_block_idx, accept_token_bias)
        return original(copy_bufs, kv_cache_config, funcs, group_ids, src_block_idx, dest_block_idx,
                        accept_token_bias, req_state, forward_context)

    collect_mamba_copy_meta.__wrapped__ = original
    # for the process's life: the observer hook reports nothing while no V1 worker is set
    patch_attr(mamba_utils, "collect_mamba_copy_meta", collect_mamba_copy_meta, by="engine:copy-observer")
    PROCESS["init"] = True


class _HostEvent:
    """A CUDA event on host memory: the work it marks is done when recorded (the CPU runner's tensors are
    host tensors, written synchronously)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, *args) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class _HostStream(_HostEvent):
    device = "cpu"

    def wait_stream(self, *args) -> None:
        pass

    def wait_event(self, *args) -> None:
        pass


@contextlib.contextmanager
def host_streams():
    """The CUDA stream and event calls of vLLM's async output path (AsyncGPUModelRunnerOutput, the runner's
    copy stream) on a CPU-only torch, where they raise: vLLM's CPU platform turns async scheduling off, so
    its CPU runner has no stand-ins for them beyond its build (`_torch_cuda_wrapper`). Host copies are
    synchronous, so every event is complete when recorded."""
    import torch

    cuda = torch.cuda
    stand_ins = {"Event": _HostEvent, "Stream": _HostStream, "current_stream": lambda *a, **k: _HostStream(),
                 "stream": lambda *a, **k: contextlib.nullcontext()}
    undo = undo_all(patch_attr(cuda, name, value, by="engine:host-streams") for name, value in stand_ins.items())
    try:
        yield
    finally:
        undo()


def _host_memory_only() -> None:
    """Releases before 0.28 resolve no CPU platform on a CPU-only machine (platforms/__init__.py
    cpu_platform_plugin: a "cpu" build or macOS only) and report pinned memory available, which torch
    cannot allocate without an accelerator; the runner's buffers are then plain host memory."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu() or not current_platform.is_pin_memory_available():
        return
    import sys

    import vllm.v1.worker.cpu_model_runner  # noqa: F401  (imports every module holding PIN_MEMORY)

    # stand-ins for the process's life (the patch layer lists them under engine:host-memory)
    patch_attr(current_platform, "is_pin_memory_available", lambda: False, by="engine:host-memory")
    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm"):
            continue
        if getattr(mod, "PIN_MEMORY", None) is True:  # the module constant `PIN_MEMORY = is_pin_memory_available()`
            patch_attr(mod, "PIN_MEMORY", False, by="engine:host-memory")
        fn = getattr(mod, "is_pin_memory_available", None)
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()
    from vllm.v1.utils import CpuGpuBuffer

    kw = CpuGpuBuffer.__init__.__kwdefaults__ or {}
    if kw.get("pin_memory") is True:  # the default captured from PIN_MEMORY at import (v1/utils.py)
        kw["pin_memory"] = False


def _eager_compiled_helpers() -> None:
    """vLLM's V1 code compiles a few small tensor helpers with `torch.compile` (e.g. the async-spec-decode
    correction `update_num_computed_tokens_for_batch_change`, v1/spec_decode/utils.py:815, which
    `_prepare_inputs` calls, gpu_model_runner.py:2117): on a host, inductor builds them with the system's C++
    compiler, which a replay in an empty environment (no PATH) cannot run, and the build costs seconds. They run
    eagerly instead: the same torch operations, the function vLLM compiled (`_torchdynamo_orig_callable`),
    for the process's life (the patch layer lists them under engine:eager)."""
    import sys

    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm.v1.") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            original = vars(value).get("_torchdynamo_orig_callable") if inspect.isfunction(value) else None
            if original is not None:
                patch_attr(mod, attr, original, by="engine:eager")


class entry_points_scanned_once:
    """While a runner is built, the installed distributions' entry points are read once per process: the
    runner's logits-processor set-up looks up its plugin group on every build (`_load_logitsprocs_plugins`,
    v1/sample/logits_processor/__init__.py:57), which reads every distribution's metadata (most of a
    build's cost); the installed distributions do not change while the harness runs. vLLM's code runs as
    it is; only the standard library's lookup is answered from the first scan."""

    _scan = None

    def __enter__(self):
        import importlib.metadata as md

        cls = type(self)
        if cls._scan is None:
            cls._scan = md.entry_points()

        def entry_points(**params):
            return cls._scan.select(**params) if params else cls._scan
        self.undo = patch_attr(md, "entry_points", entry_points, by="engine:entry-points")
        return self

    def __exit__(self, *exc) -> None:
        self.undo()
