"""Error kinds and the exit codes the CLI maps them to."""

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_HARNESS_ERROR = 3


class BadInput(Exception):
    """Malformed scenario, corrupt file, unsupported vLLM release: exit 2."""


class HarnessError(Exception):
    """A defect in the harness itself. Never reported as a vLLM finding."""
