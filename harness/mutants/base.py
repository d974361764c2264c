"""The interface every mutant implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    bug_class: str
    releases: str  # vLLM releases the patch applies to
    origin: str  # public issue/PR, or "" for a synthetic mutant
    patch: Callable[[], Callable[[], None]]  # applies the patch, returns undo
    is_applied: Callable[[], bool]

    def apply(self) -> Callable[[], None]:
        undo = self.patch()
        if not self.is_applied():
            undo()
            raise RuntimeError(f"mutant {self.name}: self-check failed, patch not in place")
        return undo
