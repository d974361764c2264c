"""Mutants: named run-time patches of vLLM's allocator (vLLM files on disk are never edited).

A mutant is a module-level `Mutant` with `apply()` returning an undo callable. The registry maps names to
mutants; `apply_mutant(name)` applies one for the rest of the process (the CLI runs one replay per process).
"""

from __future__ import annotations

from harness.errors import BadInput
from harness.mutants.base import Mutant
from harness.mutants.lifetime import MAMBA_FREE_LEAKS_BLOCK, MAMBA_OVERALLOCATE
from harness.mutants.seed import SEED_UNMARKED_EARLY_RETURN

REGISTRY: dict[str, Mutant] = {m.name: m for m in (SEED_UNMARKED_EARLY_RETURN, MAMBA_FREE_LEAKS_BLOCK, MAMBA_OVERALLOCATE)}


def get_mutant(name: str) -> Mutant:
    try:
        return REGISTRY[name]
    except KeyError:
        raise BadInput(f"unknown mutant {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def apply_mutant(name: str):
    """Apply a named mutant; returns the undo callable."""
    return get_mutant(name).apply()
