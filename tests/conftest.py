"""Imported by pytest before any test module: the engine tier's environment is set before vLLM is imported
(harness/engine/__init__.py: on a machine without an NVIDIA driver, vLLM's Triton check then accepts it and
picks its model runner as on a GPU host), so a test's outcome never depends on which module imported vLLM
first."""

import harness.engine  # noqa: F401

import os  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _harness_environment_restored():
    """The CLI sets its options in the environment for the processes it starts (engine options, the model,
    a replayed artifact's recorded options): whatever a test leaves there is taken back after it, so no test
    runs under another's options."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("HH_")}
    yield
    for k in [k for k in os.environ if k.startswith("HH_") and k not in saved]:
        del os.environ[k]
    os.environ.update(saved)
