"""Abstract-state coverage: what the allocator and runner *did* in a replay, reported to libFuzzer as edges.

libFuzzer's Python edge coverage saturates within seconds (~1,250 edges): after that every input runs the same
lines and the search has no gradient. Behaviour still differs in *states*: which kind of row a request has
(new, running, resumed), how far its live state column moved, whether a read is a pre-copy, an initial state or
a post-copy, whether a lookup hit nothing, a sub-block tail or whole blocks, how many CoW copies a step queued,
whether a call returned nothing (no room). Each abstract transition (a request's previous abstract state ->
its next) is hashed onto one of SLOTS tiny functions that atheris instruments: calling it is a new edge the
first time that transition is seen, so libFuzzer keeps the input that reached it (AFL's state feedback idea,
the same as IJON's annotations, driven by the trace instead of by hand).
"""

from __future__ import annotations

import sys
import types
import zlib

SLOTS = 2048


def _bucket(n: int) -> int:
    """0, 1, 2, 3-4, 5-8, 9+ (AFL's hit-count buckets, coarser)."""
    return n if n < 3 else 3 if n < 5 else 4 if n < 9 else 5


def abstract_states(trace) -> set[tuple]:
    """The abstract transitions one replay went through (pure function of the trace)."""
    states: set[tuple] = set()
    last: dict[str, tuple] = {}
    reads_by_step: dict[tuple, list] = {}
    for rd in trace.reads:
        reads_by_step.setdefault((rd.step, rd.request), []).append(rd.what)
    for row in trace.rows:
        moved = row.curr - row.prev
        now = (row.group, row.kind, _bucket(row.num_scheduled), max(-2, min(moved, 3)), _bucket(len(row.live_columns)),
               tuple(sorted(set(reads_by_step.get((row.step, row.request), ())))))
        states.add(("row", last.get(row.request), now))
        last[row.request] = now
    for call in trace.calls:  # which call, whether it found no room, its token counts (bucketed)
        counts = tuple(sorted((k, _bucket(v)) for k, v in call.args.items() if isinstance(v, int)))
        states.add(("call", call.name, call.returned is None, counts, last.get(call.request, (None, None))[:2]))
    copies_per_step: dict[int, int] = {}
    for step, _src, _dst in trace.copies:
        copies_per_step[step] = copies_per_step.get(step, 0) + 1
    states.update(("copies", _bucket(n)) for n in copies_per_step.values())
    states.add(("cache", _bucket(len({c.block for c in trace.cache}))))
    if trace.exception is not None:
        states.add(("exception", trace.exception.call))
    return states


def slots(trace) -> set[int]:
    return {zlib.crc32(repr(s).encode()) % SLOTS for s in abstract_states(trace)}


class StateCoverage:
    """SLOTS distinct instrumented functions; `feed(trace)` calls the ones its abstract transitions hash to."""

    def __init__(self, instrument) -> None:
        self.funcs = []
        for i in range(SLOTS):
            namespace: dict = {}
            # one code object per slot, so each gets its own coverage counter
            exec(compile(f"def state_slot_{i}():\n    return {i}\n", f"<state-slot-{i}>", "exec"), namespace)
            self.funcs.append(instrument(namespace[f"state_slot_{i}"]))

    def feed(self, trace) -> int:
        hit = slots(trace)
        for i in hit:
            self.funcs[i]()
        return len(hit)


def instrument_modules(instrument_func, prefixes: tuple[str, ...]) -> int:
    """Apply a coverage instrumenter (atheris.instrument_func) to every function and method defined in the
    imported modules under `prefixes` (packages), after import: a fuzz target runs uninstrumented first (its
    opening sweep) and instruments afterwards. Returns how many functions were instrumented."""
    count = 0
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == p or name.startswith(p + ".") for p in prefixes):
            continue
        for obj in list(vars(module).values()):
            members = vars(obj).values() if isinstance(obj, type) and obj.__module__ == name else [obj]
            for fn in members:
                fn = getattr(fn, "__func__", fn)  # classmethod / staticmethod
                if isinstance(fn, property):
                    fn = fn.fget
                if isinstance(fn, types.FunctionType) and fn.__module__ == name and not getattr(fn, "_hh_cov", False):
                    instrument_func(fn)
                    fn._hh_cov = True
                    count += 1
    return count
