"""The one patch layer: every change the harness makes at run time to vLLM, torch or the standard library goes
through `patch_attr` (or `wrap_method` on top of it), which records it, so what is patched at any moment is
listed (`active()`), each live patch can be checked to still be in place (`check()`), and an undo restores the
exact object that was there before (a class's own attribute, or no own attribute where it was inherited).

Who patches (the `by` label): a mutant or a known issue's fix (`patch:NAME`, harness/mutants/base.py), the engine tier's
stand-ins for what a GPU host has (`engine:...`: CUDA streams and events, kernel replacements and,
for a call on vLLM's own Triton kernels, `engine:kernels-triton`, pinned memory) and the harness's own recorders. tests/test_patches.py applies every mutant and every fix, undoes
them, and proves every vLLM class attribute and module global is back to the object it was.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

_MISSING = object()
_ids = itertools.count()


@dataclass(frozen=True)
class Patch:
    id: int
    by: str  # who applied it: mutant:NAME, fix:ID, engine:WHAT, ...
    owner: object  # the class, module or object whose attribute was replaced
    attr: str
    original: object  # the owner's own attribute before (_MISSING: none, it was inherited or absent)
    value: object  # what was put there

    def describe(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", None) or repr(self.owner)
        module = getattr(self.owner, "__module__", "") if isinstance(self.owner, type) else ""
        return f"{self.by}: {module + '.' if module else ''}{owner}.{self.attr}"

    def in_place(self) -> bool:
        return _own(self.owner, self.attr) is self.value


_ACTIVE: dict[int, Patch] = {}
_SUSPENDED: set[int] = set()  # live patches a `suspended` block has taken out for now


def _own(owner, attr: str):
    """The owner's own attribute (a class's __dict__ entry, a module's global, an instance attribute), or
    _MISSING (inherited or absent)."""
    try:
        return vars(owner).get(attr, _MISSING)
    except TypeError:  # no __dict__ (slots): what getattr sees is its own
        return getattr(owner, attr, _MISSING)


_LABEL: list[str] = []  # who is applying patches now (Mutant.apply: the mutant's or fix's name)


class applying:
    """`with applying("mutant:NAME"):` patches made inside without their own `by` are recorded under it."""

    def __init__(self, by: str) -> None:
        self.by = by

    def __enter__(self):
        _LABEL.append(self.by)

    def __exit__(self, *exc) -> None:
        _LABEL.pop()


def patch_attr(owner, attr: str, value, *, by: str | None = None) -> Callable[[], None]:
    """Set owner.<attr> = value, recorded under `by` (default: the `applying` label in force); returns the undo
    (restores the owner's own attribute as it was, or removes the override so an inherited one shows through
    again)."""
    by = by or (_LABEL[-1] if _LABEL else "unlabelled")
    patch = Patch(next(_ids), by, owner, attr, _own(owner, attr), value)
    setattr(owner, attr, value)
    _ACTIVE[patch.id] = patch

    def undo() -> None:
        if _ACTIVE.pop(patch.id, None) is None:
            return  # undone already
        _restore(patch)
    return undo


def active(by_prefix: str = "") -> list[Patch]:
    """The patches in force now, oldest first (those whose `by` starts with `by_prefix`; not those a `suspended`
    block has taken out)."""
    return [p for p in _ACTIVE.values() if p.by.startswith(by_prefix) and p.id not in _SUSPENDED]


def check() -> list[str]:
    """Live patches that something else has since overwritten (empty: every recorded patch is in place)."""
    return [p.describe() for p in active() if not p.in_place()]


class suspended:
    """`with suspended("patch:NAME"):` the live patches recorded under that label (`prefix=True`: every label that
    starts with it) are taken out (their owners get back what was there before) for the with-block and put back
    after it, in order: harness.known_issues asks each fix's probe of vLLM's code as shipped this way."""

    def __init__(self, by: str, *, prefix: bool = False) -> None:
        self.by, self.prefix = by, prefix  # prefix: every live patch whose label starts with `by`
        self.patches: list[Patch] = []

    def __enter__(self):
        self.patches = [p for p in _ACTIVE.values() if (p.by.startswith(self.by) if self.prefix else p.by == self.by)
                        and p.id not in _SUSPENDED]  # an enclosing `suspended` took those out already
        for patch in reversed(self.patches):
            _restore(patch)
            _SUSPENDED.add(patch.id)
        return self.patches

    def __exit__(self, *exc) -> None:
        for patch in self.patches:
            setattr(patch.owner, patch.attr, patch.value)
            _SUSPENDED.discard(patch.id)


def _restore(patch: Patch) -> None:
    if patch.original is _MISSING:
        if _own(patch.owner, patch.attr) is not _MISSING:
            delattr(patch.owner, patch.attr)
    else:
        setattr(patch.owner, patch.attr, patch.original)


def undo_all(undos) -> Callable[[], None]:
    """One undo for several, run last-applied first."""
    undos = list(undos)

    def undo() -> None:
        for u in reversed(undos):
            u()
    return undo


__all__ = ["Patch", "active", "applying", "check", "patch_attr", "suspended", "undo_all"]
