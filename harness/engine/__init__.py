"""Engine tier (`--tier engine`): vLLM's real `Scheduler` in the loop, the worker shadow on its output.

This package is the harness's second door into vLLM (the first is `harness/vllm_adapter.py`):
`harness.engine.scheduler` builds a real `VllmConfig` and `Scheduler` and drives them as `EngineCore` does;
`harness.engine.connector` is the KV connector class vLLM loads for the scenario's external hits;
`harness.engine.diff` compares this tier with the mirrored (symbolic) one. Importing this package itself
imports nothing from vLLM.
"""

from __future__ import annotations


def replay(scenario, mutant: str | None = None):
    """Run the scenario on the engine tier (mutants must already be applied by the caller)."""
    from harness.engine.scheduler import replay as engine_replay

    return engine_replay(scenario, mutant)


__all__ = ["replay"]
