"""Imported by pytest before any test module: the engine tier's environment is set before vLLM is imported
(harness/engine/__init__.py: on a machine without an NVIDIA driver, vLLM's Triton check then accepts it and
picks its model runner as on a GPU host), so a test's outcome never depends on which module imported vLLM
first."""

import harness.engine  # noqa: F401
