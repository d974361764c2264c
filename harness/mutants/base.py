"""The interface every mutant implements."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from harness.patches import applying, patch_attr


@dataclass(frozen=True)
class Mutant:
    name: str
    bug_class: str
    releases: str  # vLLM releases the patch applies to
    origin: str  # public issue/PR, or "" for a synthetic mutant
    patch: Callable[[], Callable[[], None]]  # applies the patch, returns undo
    is_applied: Callable[[], bool]
    # a worker-side mutant patches a model runner's code ("v1" or "v2"): only the engine tier with that
    # runner runs it, so `mutants check` fuzzes it there (None: allocator/scheduler code, every tier runs it)
    runner: str | None = None
    # allocator code only configurations the mirrored tiers cannot express reach (Mamba cache mode none): its
    # campaigns run on the engine tier with vLLM's runner
    engine_only: bool = False
    # the engine tier's copy timing its campaigns run with (harness/engine/copy_timing.py): a copy-ordering bug
    # shows only where the device-to-host copies land late (None: the default, early)
    copy_timing: str | None = None
    # the real model (`--model-config`, harness/model_configs) whose layers run the patched code: its campaigns run
    # every input on that model (None: the harness's own geometry and the generators' draw)
    model_config: str | None = None
    # the Mamba cache mode its campaigns pin (`--mamba-cache-mode`): the only mode whose code it patches (None: drawn)
    cache_mode: str | None = None

    @property
    def tier(self) -> str:
        return "engine" if self.runner or self.engine_only else "symbolic"

    def apply(self) -> Callable[[], None]:
        with applying(f"patch:{self.name}"):  # harness/patches.py records what it replaces under this name
            try:
                undo = self.patch()
            except (AttributeError, ImportError) as exc:  # its target is code this release does not have
                from harness.errors import BadInput
                from harness.release import vllm_source

                raise BadInput(f"mutant {self.name} patches vLLM {self.releases}: vLLM {vllm_source().version} lacks "
                               f"its target ({exc})") from None
        if not self.is_applied():
            undo()
            raise RuntimeError(f"mutant {self.name}: self-check failed, patch not in place")
        return undo


_MARK = "_hybrid_harness_mutant"


def wrap_method(cls, method_name: str, make) -> Callable[[], None]:
    """Replace cls.<method_name> by make(original) at run time (classmethods stay classmethods), through the
    patch layer (harness/patches.py); return undo."""
    raw = cls.__dict__.get(method_name)
    if isinstance(raw, classmethod):
        original = raw.__func__
        patched = make(original)
        setattr(patched, _MARK, True)
        patched.__wrapped__ = original  # as below: signatures and inspect.unwrap see vLLM's own
        return patch_attr(cls, method_name, classmethod(patched))
    original = getattr(cls, method_name)
    patched = make(original)
    setattr(patched, _MARK, True)
    patched.__wrapped__ = original  # inspect.unwrap finds vLLM's own code under any stack of patches
    return patch_attr(cls, method_name, patched)


def recompiled_with(original, insert_after, statement: str, names: dict):
    """vLLM's own `original`, recompiled from its installed source (read at run time, never copied here) with
    `statement` inserted after each statement of a block that `insert_after(node)` accepts (one at least), in the
    module's globals plus `names`. For a fix that adds a check inside a loop, where no wrapper reaches. The new code
    keeps the file's name and line numbers, so a traceback still points at vLLM's line. `original` must be vLLM's
    own function: a wrapper below it would be lost."""
    import ast
    import sys
    import textwrap

    if hasattr(original, "__wrapped__"):
        raise RuntimeError(f"{original.__qualname__} is wrapped already: a recompiled method must be patched first")
    lines, first = inspect.getsourcelines(original)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    inserted = 0
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for i in reversed(range(len(block))):
                if isinstance(block[i], ast.stmt) and insert_after(block[i]):
                    new = ast.parse(statement).body
                    for n in (n for stmt in new for n in ast.walk(stmt)):
                        n.lineno = n.end_lineno = block[i].lineno
                        n.col_offset, n.end_col_offset = 0, 0
                    block[i + 1:i + 1] = new
                    inserted += 1
    if not inserted:
        raise RuntimeError(f"{original.__qualname__}: no statement to insert after in this release")
    namespace = dict(vars(sys.modules[original.__module__]), **names)
    exec(compile(tree, inspect.getsourcefile(original), "exec"), namespace)
    return namespace[original.__name__]


def method_wrapped(cls, method_name: str) -> bool:
    fn = getattr(cls, method_name)
    return getattr(getattr(fn, "__func__", fn), _MARK, False)


def _mamba_manager():
    from harness.vllm_adapter import mamba_manager_class

    return mamba_manager_class()


def wrap_mamba_method(method_name: str, make) -> Callable[[], None]:
    """Replace MambaManager.<method_name> by make(original) at run time; return the undo callable."""
    return wrap_method(_mamba_manager(), method_name, make)


def mamba_method_wrapped(method_name: str) -> bool:
    return method_wrapped(_mamba_manager(), method_name)


def method_mutant(name: str, bug_class: str, owner, method: str, make, *, releases: str, origin: str = "",
                  **fields) -> Mutant:
    """A mutant that wraps owner().<method> with make(original); `owner` returns the vLLM class (imported only when
    the mutant is applied or checked); `fields`: the Mutant's other fields (engine_only, runner, ...)."""
    return Mutant(name=name, bug_class=bug_class, releases=releases, origin=origin,
                  patch=lambda: wrap_method(owner(), method, make),
                  is_applied=lambda: method_wrapped(owner(), method), **fields)


def mamba_mutant(name: str, bug_class: str, method: str, make, *, origin: str = "",
                 releases: str = "0.28.0-0.33.x") -> Mutant:
    """A mutant that wraps one MambaManager method with make(original)."""
    return method_mutant(name, bug_class, _mamba_manager, method, make, releases=releases, origin=origin)


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def bound_arguments(original, *args, **kwargs) -> inspect.BoundArguments:
    """A wrapped vLLM method's arguments by name, defaults applied (signatures differ across releases); the
    signature is read once per function (fixes and mutants bind on every allocator call)."""
    bound = _signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound
