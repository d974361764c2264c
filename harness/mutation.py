"""`hybrid-harness mutants check`: does the fuzzer kill each mutant, and how fast?

Per mutant and trial: a fuzz campaign from an empty corpus with the mutant applied in the workers, with
`make fuzz`'s settings (prefill checkpoints on). One kill rule, shared with the guided-vs-random bench
(`kills`): a kept finding kills the mutant when its scenario, replayed here, shows with the patch a signature
that no known fix explains and that stock vLLM does not show (fires with the patch, not on stock). The
killing scenario is then minimized under the same rule. A surviving mutant is replayed over the campaign's
corpus with and without the patch: if every allocator call returned the same blocks, it is "not shown to
change behaviour" (with the number of inputs compared as evidence) and kept out of the kill rate.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.artifacts import FindingArtifact, write_json_atomic
from harness.campaign import Campaign
from harness.errors import BadInput, HarnessError
from harness.genome import decode, run_budget
from harness.known_issues import issues_for
from harness.verdict import judge_scenario
from harness.minimize import minimize
from harness.mutants import get_mutant
from harness.replay import replay
from harness.witness import judge_replay, signatures as witness_signatures
from harness.run_config import RunConfig
from harness.scenario import parse_scenario, scenario_to_json


@dataclass
class MutantResult:
    name: str
    kill_times: list[float | None] = field(default_factory=list)
    signature: str = ""
    minimized: str = ""
    verdict: str = "survived"
    evidence: str = ""
    # per trial: the campaign's own exit verdict (red: a kept input is new) against the replay judge's kill
    disagreements: list[int] = field(default_factory=list)

    def row(self) -> str:
        times = [t for t in self.kill_times if t is not None]
        med = f"{statistics.median(times):.2f}" if times else "-"
        spread = f"{min(times):.2f}-{max(times):.2f}" if times else "-"
        return (f"| `{self.name}` | {self.verdict} | {len(times)}/{len(self.kill_times)} | {med} | {spread} | "
                f"`{self.signature or '-'}` | {self.minimized or self.evidence or '-'} | "
                f"{'trials ' + ', '.join(map(str, self.disagreements)) if self.disagreements else 'none'} |")


def kills(doc: dict, *, config: RunConfig) -> str | None:
    """The kill rule: the first signature this scenario shows with the mutant applied that no known fix
    explains and that stock vLLM does not show, else (revealed, as a fixed-system campaign calls it new) one the
    mutant shows with every known fix applied that the fixed system without it does not; None if neither. The
    caller has no mutant applied; the mutant is `config.mutant`."""
    scenario = parse_scenario(doc)
    issues = issues_for(config.tier, config.engine.runner)

    def signatures(name, fixed):
        fixes = tuple(k.id for k in issues) if fixed else ()
        return witness_signatures(scenario, config.but(mutant=name, fixes=fixes))

    findings = judge_replay(scenario, config)[1]
    new = set(judge_scenario(scenario, findings, config=config).unexplained) if findings else set()
    shown = new - signatures(None, False) if new else set()
    if shown or not issues:
        return min(shown, default=None)
    # revealed (what a campaign on the fixed system calls new): with every known fix applied the patch shows a
    # signature the fixed system without it does not, while on stock a known bug fires first
    fixed = signatures(config.mutant, True)
    return min(fixed - signatures(None, True), default=None) if fixed else None


def _kill(findings_dir: Path, config: RunConfig) -> tuple[float | None, str, FindingArtifact | None]:
    """The earliest kept finding that kills the mutant."""
    best = (None, "", None)
    for path in sorted(findings_dir.glob("finding-*/finding.json")):
        found = FindingArtifact.read(path)
        try:
            sig = kills(found.scenario, config=config)
        except (HarnessError, BadInput):
            continue
        if sig is None:
            continue
        t = found.detection.get("after_startup_s")
        if best[0] is None or (t is not None and t < best[0]):
            best = (t, sig, found)
    return best


def minimized_kill(doc: dict, signature: str, out: Path, seconds: float = 30.0, *, config: RunConfig) -> dict:
    """Minimize a killing scenario while the mutant (`config.mutant`) still fires `signature`; keep the result
    only if it still kills (fires with the patch, not on stock). Written to `out`; returns the document kept."""
    try:
        small = scenario_to_json(minimize(parse_scenario(doc), signature, seconds=seconds, new_only=True,
                                          config=config))
    except BadInput:  # a revealed kill (`kills`): the signature shows on the fixed system only, so it
        # is minimized there, every known fix applied, as the campaign found it
        fixed = config.but(fixes=tuple(k.id for k in issues_for(config.tier, config.engine.runner)))
        try:
            small = scenario_to_json(minimize(parse_scenario(doc), signature, seconds=seconds, config=fixed))
        except BadInput:
            small = doc
    kept = small if small is not doc and kills(small, config=config) else doc
    write_json_atomic(out, {"mutant": config.mutant, "signature": signature, "minimized": kept is small,
                            "config": config.as_json(), "scenario": kept})
    return kept


def describe_scenario(doc: dict) -> str:
    return (f"{len(doc['requests'])} request(s), {len(doc.get('events', []))} event(s), prompts "
            f"{[r['prompt'].get('length') for r in doc['requests']]}, max_tokens "
            f"{[r['max_tokens'] for r in doc['requests']]}, K={doc['geometry']['num_speculative_tokens']}")


def _changes_behaviour(corpus: Path, config: RunConfig, limit: int = 300) -> tuple[bool, int]:
    """Replay corpus inputs with and without the patch; compare every allocator call's result (and, on the
    engine tier, the worker's rows and the states it read)."""
    mutant = config.mutant

    def calls(scenario, name):
        trace = replay(scenario, config=config.but(mutant=name))
        return ([(c.step, c.request, c.name, repr(c.returned), repr(c.core_after)) for c in trace.calls],
                [repr(r) for r in trace.rows], [repr(r) for r in trace.reads])

    inputs = sorted(corpus.iterdir())[:limit]
    compared = 0
    for path in inputs:
        scenario = decode(path.read_bytes(), run_budget(config))
        stock = calls(scenario, None)
        try:
            mutated = calls(scenario, mutant)
        except HarnessError:
            return True, compared
        compared += 1
        if stock != mutated:
            return True, compared
    return False, compared


def mutant_config(name: str, tier: str | None = None) -> RunConfig:
    """The run configuration a mutant's campaigns use: worker code on the engine tier with its runner (and its
    copy timing, where a copy-ordering bug needs late copies; its model, where only one model's layers run it; its
    Mamba cache mode, where only one mode runs the patched code),
    allocator code on `tier` (default symbolic); `make fuzz`'s --checkpoints auto (on: every tier's worker runs
    prefill checkpoint geometries)."""
    mutant = get_mutant(name)
    config = RunConfig(tier=mutant.tier if mutant.runner or mutant.engine_only else (tier or mutant.tier), mutant=name)
    if mutant.runner:
        config = config.but(runner=mutant.runner)
    if mutant.copy_timing:
        config = config.but(copy_timing=mutant.copy_timing)
    if mutant.model_config:
        config = config.but(model_config=mutant.model_config)
    if mutant.cache_mode:
        config = config.but(cache_mode=mutant.cache_mode)
    return config


def check(names: list[str], *, budget_s: float, jobs: int, trials: int, work: Path | None = None,
          seed_corpus: bool = False, full_budget: bool = False, tier: str | None = None) -> list[MutantResult]:
    """A trial ends at its first new finding unless `full_budget`; `seed_corpus` starts from the seed corpus
    (`make fuzz`'s settings); `tier` runs an allocator mutant's campaigns on another tier (worker mutants
    always run on the engine tier with their runner)."""
    results = []
    root = Path(work or tempfile.mkdtemp(prefix="hh-mutants-"))
    for name in names:
        config = mutant_config(name, tier)
        res = MutantResult(name)
        corpus = None
        for trial in range(trials):
            art = root / name / f"trial-{trial}"
            camp = Campaign(config=config, corpus=art / "corpus", artifacts=art, jobs=jobs, seconds=budget_s,
                            runs=None, seed=trial, seed_corpus=seed_corpus, progress=False, stop_on_new=not full_budget)
            summary = camp.run()
            t, sig, found = _kill(art / "findings", config)
            res.kill_times.append(t if sig else None)
            red = any(v["new"] for v in summary["verdicts"].values())  # what `hybrid-harness fuzz` exits 1 on
            if red != bool(sig):
                res.disagreements.append(trial)
            if sig and not res.signature:
                res.signature = sig
                small = minimized_kill(found.scenario, sig, root / name / "minimized.json", config=config)
                res.minimized = ("minimized: " if small is not found.scenario else "not minimized: ") + \
                    describe_scenario(small)
            corpus = art / "corpus"
        if any(t is not None for t in res.kill_times) or res.signature:
            res.verdict = "killed"
        else:
            changed, compared = _changes_behaviour(corpus, config) if corpus else (True, 0)
            res.verdict = "survived" if changed else "not shown to change behaviour"
            res.evidence = ("allocator results differ on the corpus" if changed else
                            f"identical allocator results on all {compared} corpus inputs")
        results.append(res)
    return results


def table(results: list[MutantResult], command: str) -> str:
    considered = [r for r in results if r.verdict != "not shown to change behaviour"]
    killed = sum(r.verdict == "killed" for r in considered)
    from harness.stamp import stamp

    lines = [stamp(command), "",
             "| mutant | verdict | trials killed | median s to kill | spread s | signature | killing scenario / evidence "
             "| campaign exit disagrees with the replay judge |",
             "|---|---|---|---|---|---|---|---|", *[r.row() for r in results], "",
             f"Kill rate: {killed}/{len(considered)} behaviour-changing mutants "
             f"({len(results) - len(considered)} not shown to change behaviour)."]
    return "\n".join(lines)


def mutant_names(selection: list[str] | None) -> list[str]:
    from harness.mutants import REGISTRY

    if not selection:
        return list(REGISTRY)
    for name in selection:
        get_mutant(name)
    return selection


__all__ = ["check", "kills", "mutant_config", "table", "mutant_names"]
