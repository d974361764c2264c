"""Tier e2e (`--tier e2e`): the scenario on vLLM's whole engine with a real forward, on CPU (vLLM's CPU build).

This package is the harness's third door into vLLM (beside harness/vllm_adapter.py and harness/engine/): an
in-process `LLMEngine` per geometry running the tiny local models (harness/e2e/models.py), a real KV connector
for the external hits (harness/e2e/connector.py) and the output oracle against the uncached reference
(harness/e2e/engine.py). Importing this package imports nothing from vLLM; `replay` sets the process up for one
in-process engine on one core first (`cpu_engine_env`)."""

from __future__ import annotations

import os

from harness.vllm_env import ENGINE_ENV, prepare


def cpu_engine_env() -> None:
    """The in-process engine's variables (harness.vllm_env.ENGINE_ENV; prepare() sets them at entry points)."""
    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)


def replay(scenario, mutant: str | None = None, family: str = "nemotron-h", seed: int = 0):
    """Run the scenario on vLLM's whole engine (mutants and fixes already applied by the caller)."""
    from harness.errors import BadInput
    from harness.release import cpu_build_reason

    why = cpu_build_reason()
    if why:
        raise BadInput(why)
    cpu_engine_env()
    prepare()
    from harness.e2e.engine import replay as e2e_replay

    return e2e_replay(scenario, mutant, family, seed)


__all__ = ["ENGINE_ENV", "cpu_engine_env", "replay"]
