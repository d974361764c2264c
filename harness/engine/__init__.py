"""Engine tier (`--tier engine`): vLLM's real `Scheduler` in the loop, the worker shadow on its output.

This package is the harness's second door into vLLM (the first is `harness/vllm_adapter.py`):
`harness.engine.scheduler` builds a real `VllmConfig` and `Scheduler` and drives them as `EngineCore` does;
`harness.engine.connector` is the KV connector class vLLM loads for the scenario's external hits;
`harness.engine.diff` compares this tier with the mirrored (symbolic) one. Importing this package itself
imports nothing from vLLM (it sets the environment vLLM reads on import).
"""

from __future__ import annotations

import os as _os

# Before vLLM is imported (the CLI imports this package to set the engine options before any tier runs):
# CPU device inference, and vLLM's Triton check accepting a driverless machine (CUDA_VISIBLE_DEVICES set and
# empty, vllm/triton_utils/importing.py) so vLLM picks its model runner as on a GPU host (--runner auto / v2);
# Triton kernels without a harness replacement run in Triton's interpreter.
# Only on a machine without an NVIDIA driver: on a GPU host the model tier's kernels need the GPU, and vLLM
# finds Triton and the device by itself.
if not _os.path.exists("/proc/driver/nvidia/version"):
    _os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    _os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    _os.environ.setdefault("TRITON_INTERPRET", "1")


def replay(scenario, mutant: str | None = None, options=None, model: str = "random"):
    """Run the scenario on the engine tier with these EngineOptions (default: the defaults) and, for the model
    forward, this model (mutants must already be applied by the caller)."""
    from harness.engine.scheduler import replay as engine_replay

    return engine_replay(scenario, mutant, options, model)


__all__ = ["replay"]
