"""The environment vLLM reads when it is imported, set before either door into vLLM (`harness.vllm_adapter`,
`harness.engine`) imports it. vLLM resolves its platform once, at first use: a process that imported vLLM before
these were set saw another platform (another Mamba state dtype, so other block sizes for a real model), and wrote
those into the shared model-geometry cache (artifacts/cache/model-geometries.json) for every later process."""

from __future__ import annotations

import os

from harness.release import use_tree

# the vLLM tree this run names (--vllm PATH, HH_VLLM), first on sys.path before anything imports vLLM
use_tree()

# CPU device inference, and vLLM's Triton check accepting a driverless machine (CUDA_VISIBLE_DEVICES set and
# empty, vllm/triton_utils/importing.py) so vLLM picks its model runner as on a GPU host (--runner auto / v2);
# Triton kernels without a harness replacement run in Triton's interpreter.
# Only on a machine without an NVIDIA driver: on a GPU host the model tier's kernels need the GPU, and vLLM
# finds Triton and the device by itself.
if not os.path.exists("/proc/driver/nvidia/version"):
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("TRITON_INTERPRET", "1")
