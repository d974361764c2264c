"""Mutants: named run-time patches of vLLM's allocator (vLLM files on disk are never edited).

A mutant is a `Mutant` (harness/mutants/base.py) with `apply()` returning an undo callable. Built-ins live
in the registry; a user's own file works the same way: `--mutant path/to/my_patch.py`, a Python file that
defines `MUTANT = Mutant(...)` (docs/mutants.md), so a vLLM developer can fuzz a local change before sending it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from pathlib import Path

from harness.errors import BadInput
from harness.mutants.base import Mutant
from harness.mutants.bank import BANK
from harness.mutants.gdn import GDN_MUTANTS
from harness.mutants.lifetime import (
    ASYNC_LOAD_CACHED_EARLY,
    CACHE_KEY_OUTLIVES_BLOCK,
    MAMBA_ADMISSION_UNCAPPED,
    MAMBA_FREE_LEAKS_BLOCK,
    MAMBA_NONE_SPEC_BLOCKS_DROPPED,
    MAMBA_OVERALLOCATE,
)
from harness.mutants.scheduler_paths import SCHEDULER_PATH_MUTANTS
from harness.mutants.seed import SEED_UNMARKED_EARLY_RETURN
from harness.mutants.worker_v1 import V1_MUTANTS
from harness.mutants.worker_v2 import V2_MUTANTS
from harness.patches import suspended

REGISTRY: dict[str, Mutant] = {
    m.name: m for m in (SEED_UNMARKED_EARLY_RETURN, MAMBA_FREE_LEAKS_BLOCK, MAMBA_OVERALLOCATE, MAMBA_ADMISSION_UNCAPPED,
                     MAMBA_NONE_SPEC_BLOCKS_DROPPED, ASYNC_LOAD_CACHED_EARLY, CACHE_KEY_OUTLIVES_BLOCK, *BANK,
                     *V1_MUTANTS, *V2_MUTANTS, *GDN_MUTANTS, *SCHEDULER_PATH_MUTANTS)}


@functools.cache
def _from_file(path: Path) -> Mutant:
    """Loaded once per process (every replay's configuration names the mutant, harness/patching.py)."""
    spec = importlib.util.spec_from_file_location(f"hybrid_harness_user_mutant_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise BadInput(f"cannot load mutant file {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: report, do not crash
        raise BadInput(f"mutant file {path} failed to import: {exc!r}") from None
    mutant = getattr(module, "MUTANT", None)
    if not isinstance(mutant, Mutant):
        raise BadInput(f"mutant file {path} must define MUTANT = harness.mutants.base.Mutant(...)")
    return mutant


def get_mutant(name: str) -> Mutant:
    """A built-in mutant by name, a user's mutant file (a path ending in .py), or several at once ("A+B": bugs
    planted together, e.g. a frequent one and a rare one behind it)."""
    if "+" in name:
        return _together(name)
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise BadInput(f"mutant file {name} does not exist")
        return _from_file(path.resolve())
    try:
        return REGISTRY[name]
    except KeyError:
        raise BadInput(f"unknown mutant {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


@functools.cache
def _together(name: str) -> Mutant:
    """One mutant that applies its parts in order and undoes them in reverse."""
    from harness.patches import undo_all

    parts = [get_mutant(part) for part in name.split("+")]
    if len(parts) < 2 or any(not p.name for p in parts):
        raise BadInput(f"mutant {name!r}: give two or more mutant names joined by '+'")
    runners = {p.runner for p in parts} - {None}
    if len(runners) > 1:
        raise BadInput(f"mutant {name!r}: its parts patch different model runners ({', '.join(sorted(runners))})")
    unique = lambda values: next(iter(values)) if len(values) == 1 else None  # noqa: E731
    return Mutant(name=name, bug_class=" + ".join(p.bug_class for p in parts),
                  releases="; ".join(p.releases for p in parts), origin="; ".join(p.origin for p in parts),
                  patch=lambda: undo_all([p.patch() for p in parts]),
                  is_applied=lambda: all(p.is_applied() for p in parts), runner=unique(runners),
                  engine_only=any(p.engine_only for p in parts),
                  copy_timing=unique({p.copy_timing for p in parts} - {None}),
                  model_config=unique({p.model_config for p in parts} - {None}),
                  cache_mode=unique({p.cache_mode for p in parts} - {None}))


def apply_mutant(name: str):
    """Apply a named mutant; returns the undo callable."""
    return get_mutant(name).apply()


def mutant_suspended(name: str | None):
    """A with-block in which the mutant applied in this process (none when name is empty) is taken out and
    vLLM runs as shipped; it is put back after (harness/patches.py `suspended`)."""
    return suspended(f"patch:{get_mutant(name).name}") if name else contextlib.nullcontext()


@contextlib.contextmanager
def mutant_applied(name: str | None):
    """Apply a mutant (none when name is empty) for the duration of a with-block, then undo it."""
    undo = apply_mutant(name) if name else None
    try:
        yield
    finally:
        if undo:
            undo()
