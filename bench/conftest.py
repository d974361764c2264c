"""pytest-benchmark fixtures: extra_info with geometry, vLLM and torch versions, device."""

from __future__ import annotations

import platform

import pytest

from harness.vllm_env import prepare

prepare()  # the benchmark session's entry point: set up for vLLM before anything imports it

from harness.vllm_adapter import installed_version, torch_module  # noqa: E402


@pytest.fixture
def info(benchmark):
    def record(**extra):
        base = dict(vllm=installed_version(), torch=torch_module().__version__, device="cpu",
                    machine=platform.machine())
        benchmark.extra_info.update({**base, **extra})
    return record
