"""`hybrid-harness mutants check`: does the fuzzer kill each mutant, and how fast?

Per mutant and trial: a fuzz campaign from an empty corpus with the mutant applied in the workers
(known stock-vLLM issues never stop a worker). A kept finding *kills* the mutant when its scenario fires
that signature with the mutant and not on the stock allocator (replayed here, differentially), so stock
bugs never count as kills. A surviving mutant is replayed over the campaign's corpus with and without the
patch: if every allocator call returned the same blocks, it is "not shown to change behaviour" (with the
number of inputs compared as evidence) and kept out of the kill rate.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.campaign import Campaign
from harness.driver import replay
from harness.errors import HarnessError
from harness.genome import Budget, decode
from harness.mutants import get_mutant, mutant_applied
from harness.oracles import judge
from harness.scenario import parse_scenario


@dataclass
class MutantResult:
    name: str
    kill_times: list[float | None] = field(default_factory=list)
    signature: str = ""
    minimized: str = ""
    verdict: str = "survived"
    evidence: str = ""

    def row(self) -> str:
        times = [t for t in self.kill_times if t is not None]
        med = f"{statistics.median(times):.2f}" if times else "-"
        spread = f"{min(times):.2f}-{max(times):.2f}" if times else "-"
        return (f"| `{self.name}` | {self.verdict} | {len(times)}/{len(self.kill_times)} | {med} | {spread} | "
                f"`{self.signature or '-'}` | {self.minimized or self.evidence or '-'} |")


def fires_on_stock(doc: dict, signature: str) -> bool:
    """Does a finding's scenario fire this signature on unpatched vLLM too?"""
    return signature in {f.signature for f in judge(replay(parse_scenario(doc)))}


def _kill(findings_dir: Path, mutant: str) -> tuple[float | None, str, dict | None]:
    """The earliest kept finding that fires with the mutant and not on stock vLLM."""
    best = (None, "", None)
    for path in sorted(findings_dir.glob("finding-*/finding.json")):
        doc = json.loads(path.read_text())
        sig = doc.get("signature", "")
        try:
            if fires_on_stock(doc["scenario"], sig):
                continue  # stock vLLM shows it too: not this mutant's doing
        except HarnessError:
            continue
        t = (doc.get("detection") or {}).get("after_startup_s")
        if best[0] is None or (t is not None and t < best[0]):
            best = (t, sig, doc)
    return best


def _changes_behaviour(corpus: Path, mutant: str, limit: int = 300) -> tuple[bool, int]:
    """Replay corpus inputs with and without the patch; compare every allocator call's result."""
    def calls(scenario, name):
        return [(c.step, c.request, c.name, repr(c.returned), repr(c.core_after))
                for c in replay(scenario, name).calls]

    inputs = sorted(corpus.iterdir())[:limit]
    compared = 0
    for path in inputs:
        scenario = decode(path.read_bytes(), Budget())
        stock = calls(scenario, None)
        try:
            with mutant_applied(mutant):
                mutated = calls(scenario, mutant)
        except HarnessError:
            return True, compared
        compared += 1
        if stock != mutated:
            return True, compared
    return False, compared


def check(names: list[str], *, budget_s: float, jobs: int, trials: int, work: Path | None = None) -> list[MutantResult]:
    results = []
    root = Path(work or tempfile.mkdtemp(prefix="hh-mutants-"))
    for name in names:
        get_mutant(name)
        res = MutantResult(name)
        corpus = None
        for trial in range(trials):
            art = root / name / f"trial-{trial}"
            camp = Campaign(target="symbolic", corpus=art / "corpus", artifacts=art, jobs=jobs, seconds=budget_s,
                            runs=None, seed=trial, mutant=name, seed_corpus=False, checkpoints=False,
                            progress=False, extra_env={"HH_IGNORE_KNOWN": "1"})
            camp.run()
            t, sig, doc = _kill(art / "findings", name)
            res.kill_times.append(t if sig else None)
            if sig and not res.signature:
                res.signature = sig
                scenario = doc["scenario"]
                res.minimized = (f"{len(scenario['requests'])} request(s), "
                                 f"{len(scenario.get('events', []))} event(s), prompts "
                                 f"{[r['prompt'].get('length') for r in scenario['requests']]}")
            corpus = art / "corpus"
        if any(t is not None for t in res.kill_times) or res.signature:
            res.verdict = "killed"
        else:
            changed, compared = _changes_behaviour(corpus, name) if corpus else (True, 0)
            res.verdict = "survived" if changed else "not shown to change behaviour"
            res.evidence = ("allocator results differ on the corpus" if changed else
                            f"identical allocator results on all {compared} corpus inputs")
        results.append(res)
    return results


def table(results: list[MutantResult], command: str) -> str:
    considered = [r for r in results if r.verdict != "not shown to change behaviour"]
    killed = sum(r.verdict == "killed" for r in considered)
    lines = [f"Command: `{command}`", "",
             "| mutant | verdict | trials killed | median s to kill | spread s | signature | killing scenario / evidence |",
             "|---|---|---|---|---|---|---|", *[r.row() for r in results], "",
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


__all__ = ["check", "fires_on_stock", "table", "mutant_names"]
