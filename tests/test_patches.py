"""The one patch layer (harness/patches.py): every mutant and every known issue's fix patches through it, is
listed while applied, and leaves vLLM exactly as it found it: every class attribute and module global of every
loaded vLLM module (and the harness's worker shadow, which fixes patch too) is the same object afterwards."""

from __future__ import annotations

import sys

import pytest

from harness import patches
from harness.known_issues import KNOWN_ISSUES
from harness.errors import BadInput
from harness.mutants import REGISTRY, get_mutant
from harness.vllm_adapter import load_vllm


def _snapshot() -> dict:
    """id() of every module global and every class attribute of the loaded vllm.* modules and the harness."""
    out = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "vllm" or name.startswith(("vllm.", "harness."))):
            continue
        for attr, value in list(vars(module).items()):
            out[(name, attr)] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    out[(name, attr, cattr)] = id(cvalue)
    return out


def _patchers():
    """Every bank mutant and every applicable known fix that applies on this release."""
    found = []
    for name in REGISTRY:
        found.append((f"mutant {name}", get_mutant(name)))
    for issue in KNOWN_ISSUES:
        if issue.applicable():
            found.append((f"fix {issue.id}", issue.fix))
    return found


def _apply(mutant):
    try:
        return mutant.apply()
    except (ImportError, AttributeError, RuntimeError, BadInput) as exc:  # code this release does not have
        pytest.skip(f"{mutant.name}: not on this release ({exc!r})")


@pytest.fixture(scope="module")
def warm():
    """Load every module the patches import (a first apply/undo of each), so the snapshot sees them."""
    load_vllm()
    for _, mutant in _patchers():
        try:
            mutant.apply()()
        except (ImportError, AttributeError, RuntimeError, BadInput):
            pass
    assert not patches.active("patch:"), [p.describe() for p in patches.active("patch:")]


@pytest.mark.parametrize("label, mutant", _patchers(), ids=lambda x: x if isinstance(x, str) else "")
def test_apply_lists_and_undo_restores_everything(warm, label, mutant):
    before = _snapshot()
    undo = _apply(mutant)
    live = patches.active(f"patch:{mutant.name}")
    assert live, f"{label}: applied outside the patch layer (nothing listed)"
    assert patches.check() == []
    changed = {k for k, v in _snapshot().items() if before.get(k) != v}
    listed = {(getattr(p.owner, "__module__", None) if isinstance(p.owner, type) else getattr(p.owner, "__name__", None),
               p.attr) for p in live}
    assert changed, f"{label}: nothing changed"
    undo()
    assert not patches.active(f"patch:{mutant.name}")
    after = _snapshot()
    restored = {k for k, v in before.items() if after.get(k) != v}
    assert not restored, f"{label}: not restored: {sorted(restored)[:5]}"
    assert all(attr in {k[-1] for k in changed} for _, attr in listed), (label, listed, changed)


def test_patch_attr_restores_inherited_and_own_attributes():
    class Base:
        def f(self):
            return "base"

    class Child(Base):
        pass

    undo = patches.patch_attr(Child, "f", lambda self: "patched", by="test")
    assert Child().f() == "patched" and [p.by for p in patches.active("test")] == ["test"]
    undo()
    assert "f" not in vars(Child) and Child().f() == "base" and not patches.active("test")
    undo()  # a second undo is a no-op
    assert Child().f() == "base"


def test_check_reports_a_patch_overwritten_behind_its_back():
    class Owner:
        x = 1

    undo = patches.patch_attr(Owner, "x", 2, by="test")
    Owner.x = 3
    assert patches.check() == [p.describe() for p in patches.active("test")]
    undo()
    assert Owner.x == 1 and patches.check() == []


def test_suspended_takes_a_label_out_and_puts_it_back():
    class Owner:
        x = 1

    undo_a = patches.patch_attr(Owner, "x", 2, by="a")
    undo_b = patches.patch_attr(Owner, "y", 5, by="b")
    with patches.suspended("a") as taken:
        assert Owner.x == 1 and Owner.y == 5 and [p.by for p in taken] == ["a"]
    assert Owner.x == 2 and patches.check() == []
    undo_b()
    undo_a()
    assert Owner.x == 1 and not hasattr(Owner, "y")


def _tries(limit):
    tried = []
    while True:
        tried.append(len(tried))
        if len(tried) >= limit:
            break
    return tried


def test_recompiled_with_inserts_a_check_in_the_functions_own_loop():
    """A fix that adds a check inside vLLM's own loop (deferred-free-preemption-livelock's) recompiles the installed
    source: the statement lands after each anchor, names come from the module plus the fix's, tracebacks keep the
    file and line, and a function already wrapped or without the anchor is refused rather than patched wrongly."""
    import ast

    from harness.mutants.base import recompiled_with

    def appended(node):
        return isinstance(node, ast.Expr) and "tried.append" in ast.unparse(node)

    stop_early = recompiled_with(_tries, appended, "if _enough(tried):\n    break", {"_enough": lambda t: len(t) == 2})
    assert _tries(5) == [0, 1, 2, 3, 4] and stop_early(5) == [0, 1]
    assert stop_early.__code__.co_filename == __file__
    assert stop_early.__code__.co_firstlineno == _tries.__code__.co_firstlineno

    def wrapper(limit):
        return _tries(limit)
    wrapper.__wrapped__ = _tries
    with pytest.raises(RuntimeError, match="wrapped already"):
        recompiled_with(wrapper, appended, "pass", {})
    with pytest.raises(RuntimeError, match="no statement"):
        recompiled_with(_tries, lambda node: False, "pass", {})
