"""Blind mutant: when adopting a local prefix hit, Mamba computes its skipped (state-less) prefix from the local
hit only, forgetting the external (KV-connector) tokens that follow it.

With an external hit on top of a local one, every Mamba slot up to the external boundary's own slot must be the
null block. The slip keeps the local hit block in the table and leaves the slots between the local and external
boundaries to ``allocate_external_computed_blocks``, which fills them with fresh, never-written blocks; they
are later cached under their full-block hashes. Only requests with external (connector) computed tokens reach it.
"""

from harness.mutants.base import bound_arguments, mamba_mutant


def _make(original):
    def add_local_computed_blocks(self, *args, **kwargs):
        bound = bound_arguments(original, self, *args, **kwargs)
        if (getattr(self, "mamba_cache_mode", None) == "align"
                and bound.arguments["num_external_computed_tokens"] > 0):
            bound.arguments["num_external_computed_tokens"] = 0
        return original(*bound.args, **bound.kwargs)

    return add_local_computed_blocks


MUTANT = mamba_mutant(
    "mamba-local-hit-skip-ignores-external-tokens",
    "Mamba hit adoption skips state-less slots up to the local hit only, ignoring external connector tokens: "
    "never-written blocks fill the gap and get cached under full-block hashes",
    "add_local_computed_blocks",
    _make,
    origin="blind bank (synthetic)",
    releases="0.33.0",
)
