"""The one place a replay's patches of vLLM are applied: `patched(config)` puts on what the RunConfig names (its
mutant, then its known issues' fixes in the data file's order) for a with-block, then takes them off. Harness code
never patches vLLM by hand; it changes the configuration (`cfg.but(mutant=...)`, `cfg.but(fixes=...)`).

A patch already in force that the configuration names is used as it is (a campaign worker applies its mutant once
per process). One it does not name stays in force too: only a test's own enclosing context puts such a patch on,
and it means it (harness code never does; grep for "apply()" in harness/ finds the two places that apply)."""

from __future__ import annotations

import contextlib

from harness.errors import BadInput
from harness.patches import active

_LABEL = "patch:"  # harness/mutants/base.py: Mutant.apply records its patches under patch:NAME


def wanted(config) -> list:
    """The Mutants the configuration names, in the order they go on: the mutant, then the fixes (the data file's
    order: a fix that recompiles a method goes below one that wraps it)."""
    from harness.known_issues import KNOWN_ISSUES
    from harness.mutants import get_mutant

    out = [get_mutant(config.mutant)] if config.mutant else []
    ids = set(config.fixes or ())
    unknown = ids - {k.id for k in KNOWN_ISSUES}
    if unknown:
        raise BadInput(f"fixes: no known issue {', '.join(sorted(unknown))}")
    return out + [k.fix for k in KNOWN_ISSUES if k.id in ids]


def _live() -> set[str]:
    """The mutants and fixes in force now."""
    return {p.by.removeprefix(_LABEL) for p in active(_LABEL)}


@contextlib.contextmanager
def patched(config):
    """Run the with-block with `config`'s mutant and fixes in force."""
    live = _live()
    undo = []
    try:
        for mutant in wanted(config):
            if mutant.name not in live:
                undo.append(mutant.apply())
        yield
    finally:
        for u in reversed(undo):
            u()


__all__ = ["patched", "wanted"]
