"""Differential: the mirrored (symbolic) tier against the engine tier on the same scenario.

Both tiers run the scenario with the attention block set to the Mamba block (vLLM's align-mode rule, which
the engine tier applies anyway), so pool pressure is the same on both sides. Compared, step by step:
Mamba rows (request kind, computed / scheduled tokens, the worker row, the core row, live columns), CoW
copies per step, and every state the worker read, with block ids renamed per request in order of first
use on each side (what, column, block, conv and SSM state, the prefix fed); with `--forward model` (the
model tier against the engine tier with the same backend) each request's generated tokens; then
the oracle verdicts (signatures) and any vLLM exception. Where they differ, one side is wrong about vLLM:
the engine tier runs vLLM's own scheduler, the mirrored tier our model of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from harness.scenario import Scenario


@dataclass
class Difference:
    kind: str  # row | copy | order | read | output | verdict | exception
    step: int | None
    request: str | None
    mirror: object
    engine: object

    def describe(self) -> str:
        where = "" if self.step is None else f"step {self.step}"
        where += f", request {self.request}" if self.request else ""
        return f"[{self.kind}] {where or 'whole run'}: mirror {self.mirror}; engine {self.engine}"


@dataclass
class DiffReport:
    scenario: str
    notes: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    mirror_findings: list[str] = field(default_factory=list)
    engine_findings: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.differences

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self, limit: int = 10) -> str:
        head = f"{self.scenario}: " + ("tiers agree" if self.same else f"{len(self.differences)} difference(s)")
        lines = [head] + [f"  note: {n}" for n in self.notes]
        lines += [f"  {d.describe()}" for d in self.differences[:limit]]
        if len(self.differences) > limit:
            lines.append(f"  … {len(self.differences) - limit} more")
        return "\n".join(lines)


class _Labels:
    """Physical block ids renamed per request, in order of first appearance in that request's rows and reads
    (step by step): two runs that give a request the same logical blocks compare equal even when the pool
    handed out other ids, and one difference elsewhere does not rename everything after it (the null block
    stays 0). Shared blocks are not matched across requests: the states read (by prefix name) cover that."""

    def __init__(self, trace) -> None:
        self.names: dict[str, dict[int, int]] = {}
        seen: list[tuple] = [(r.step, r.request, r.core_row + r.worker_row) for r in trace.rows]
        seen += [(rd.step, rd.request, [rd.block]) for rd in trace.reads]
        for _, request, ids in sorted(seen, key=lambda x: (x[0], x[1])):
            names = self.names.setdefault(request, {0: 0})
            for b in ids:
                names.setdefault(b, len(names))

    def __call__(self, request: str, ids) -> tuple:
        names = self.names.get(request, {})
        return tuple(names.get(b, -1) for b in ids)


def _rows(trace, lab: _Labels) -> dict:
    return {(r.step, r.request, r.group): (r.kind, r.num_computed, r.num_scheduled, r.prev, r.curr,
                                           tuple(r.live_columns), lab(r.request, r.worker_row),
                                           lab(r.request, r.core_row))
            for r in trace.rows}


def _reads(trace, lab: _Labels) -> dict:
    out: dict = {}
    for rd in trace.reads:
        out.setdefault((rd.step, rd.request), []).append(
            (rd.what, rd.group, rd.column, lab(rd.request, [rd.block])[0], trace.name(rd.conv), trace.name(rd.ssm),
             trace.name(rd.fed)))
    return out


def _order(trace) -> dict:
    out: dict = {}
    for r in trace.rows:
        if r.request not in out.setdefault(r.step, []):
            out[r.step].append(r.request)
    return out


def _copies(trace) -> dict:
    """CoW copies per step (how many: their endpoints are pool blocks outside any row)."""
    out: dict = {}
    for step, _, _ in trace.copies:
        out[step] = out.get(step, 0) + 1
    return out


def _keyed(kind: str, mirror: dict, engine: dict, split) -> list[Difference]:
    out = []
    for key in sorted(set(mirror) | set(engine), key=repr):
        a, b = mirror.get(key), engine.get(key)
        if a != b:
            step, request = split(key)
            out.append(Difference(kind, step, request, a, b))
    return out


def _outputs(trace) -> dict[str, list[int]]:
    return {r.request: r.tokens[r.prompt_len:] for r in trace.outputs}


def compare(mirror_trace, engine_trace) -> list[Difference]:
    """Differences between two traces of the same scenario (mirror first)."""
    from harness.oracles import judge

    ml, el = _Labels(mirror_trace), _Labels(engine_trace)
    diffs = _keyed("row", _rows(mirror_trace, ml), _rows(engine_trace, el), lambda k: (k[0], k[1]))
    diffs += _keyed("copy", _copies(mirror_trace), _copies(engine_trace), lambda k: (k, None))
    diffs += _keyed("order", _order(mirror_trace), _order(engine_trace), lambda k: (k, None))
    diffs += _keyed("read", _reads(mirror_trace, ml), _reads(engine_trace, el), lambda k: (k[0], k[1]))
    if mirror_trace.outputs is not None and engine_trace.outputs is not None:  # --forward model: generated tokens
        diffs += _keyed("output", _outputs(mirror_trace), _outputs(engine_trace), lambda k: (None, k))
    ma = sorted({f.signature for f in judge(mirror_trace)})
    ea = sorted({f.signature for f in judge(engine_trace)})
    if ma != ea:
        diffs.append(Difference("verdict", None, None, ma, ea))
    me, ee = mirror_trace.exception, engine_trace.exception
    if (me is None) != (ee is None) or (me and ee and me.site != ee.site):
        diffs.append(Difference("exception", None, None, me and f"{me.error} at {me.site}",
                                ee and f"{ee.error} at {ee.site}"))
    return diffs


def diff(scenario: Scenario, *, config=None) -> DiffReport:
    """Replay the scenario on the mirrored (symbolic; model with `--forward model`) and the engine tier under
    `config` (harness.run_config.RunConfig, its tier set to engine) and report what differs.
    BadInput from either tier propagates (a scenario one tier cannot express is not a disagreement); a
    mutant must already be applied by the caller (as for `replay`)."""
    from harness.oracles import judge
    from harness.replay import replay
    from harness.run_config import RunConfig

    engine = (config or RunConfig()).but(tier="engine")
    # both tiers get the scenario as read: align mode's one block size is the scenario model's rule (Geometry)
    engine_trace = replay(scenario, config=engine)
    # --forward model: the mirrored loop with the same forward backend (the model tier), tokens and all
    mirror_trace = replay(scenario, config=engine.but(tier="model" if engine.runs_model else "symbolic"))
    report = DiffReport(scenario.name or "scenario", [], compare(mirror_trace, engine_trace))
    report.mirror_findings = [f.headline() for f in judge(mirror_trace)]
    report.engine_findings = [f.headline() for f in judge(engine_trace)]
    return report


@dataclass
class DiffSweep:
    count: int
    first_seed: int
    differing: dict[int, list[str]] = field(default_factory=dict)  # seed -> the kinds of difference
    skipped: int = 0  # scenarios the engine tier cannot express

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kinds in self.differing.values():
            for k in kinds:
                counts[k] = counts.get(k, 0) + 1
        return dict(sorted(counts.items()))

    def summary(self, version: str) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in self.kinds().items()) or "none"
        return (f"diff: {self.count} scenarios (seeds {self.first_seed}..{self.first_seed + self.count - 1}), vLLM "
                f"{version}: {len(self.differing)} differ ({kinds}), {self.skipped} not expressible on the engine tier")


def diff_sweep(config, first_seed: int, count: int, checkpoints: bool, retention: bool, out=print) -> DiffSweep:
    """`diff` on generated scenarios (seeds first_seed..), each difference's first line printed through `out`."""
    from harness.errors import BadInput
    from harness.generate import random_scenario

    result = DiffSweep(count, first_seed)
    for seed in range(first_seed, first_seed + count):
        try:
            report = diff(random_scenario(seed, checkpoints=checkpoints, retention=retention), config=config)
        except BadInput:  # a scenario vLLM's scheduler cannot express (the engine tier says why)
            result.skipped += 1
            continue
        if not report.same:
            result.differing[seed] = sorted({d.kind for d in report.differences})
            out(f"seed {seed}: {', '.join(result.differing[seed])}: {report.differences[0].describe()}")
    return result


__all__ = ["DiffReport", "DiffSweep", "Difference", "compare", "diff", "diff_sweep"]
