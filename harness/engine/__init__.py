"""Engine tier (`--tier engine`): vLLM's real `Scheduler` in the loop, the worker shadow on its output.

This package is the harness's second door into vLLM (the first is `harness/vllm_adapter.py`):
`harness.engine.scheduler` builds a real `VllmConfig` and `Scheduler` and drives them as `EngineCore` does;
`harness.engine.connector` is the KV connector class vLLM loads for the scenario's external hits;
`harness.diff` compares this tier with the mirrored (symbolic) one. Importing this package itself
imports nothing from vLLM.
"""

from __future__ import annotations

from harness.vllm_env import prepare

prepare()  # a no-op after the entry point's own call; a library user importing this door directly


def replay(scenario, mutant: str | None = None, options=None, model: str = "random"):
    """Run the scenario on the engine tier with these EngineOptions (default: the defaults) and, for the model
    forward, this model (mutants must already be applied by the caller)."""
    from harness.engine.scheduler import replay as engine_replay

    return engine_replay(scenario, mutant, options, model)


__all__ = ["replay"]
