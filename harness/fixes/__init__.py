"""Known issues' fixes, grouped by the vLLM concern they patch. The known-issue data (harness/known_issues.toml)
names each issue's fix; `fix_by_name` finds it. Importing this package patches nothing: a fix is applied by the
run's patch context (harness/patching.py) when a RunConfig names it."""

from __future__ import annotations

import functools
import importlib

from harness.fixes.targets import Fix

CONCERNS = ("admission", "split", "connector", "retention", "async_scheduling", "runner_accepted", "runner_batch",
            "cpu_kernels", "runner_connector")


@functools.cache
def all_fixes() -> dict[str, Fix]:
    fixes: dict[str, Fix] = {}
    for concern in CONCERNS:
        for fix in importlib.import_module(f"harness.fixes.{concern}").FIXES:
            if fix.name in fixes:
                raise RuntimeError(f"two fixes named {fix.name}")
            fixes[fix.name] = fix
    return fixes


def fix_by_name(name: str) -> Fix:
    try:
        return all_fixes()[name]
    except KeyError:
        raise KeyError(f"no fix named {name!r}; known: {', '.join(sorted(all_fixes()))}") from None


__all__ = ["CONCERNS", "Fix", "all_fixes", "fix_by_name"]
