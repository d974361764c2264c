"""How many symbolic findings users would see: each allocator mutant of the bank swept on the symbolic tier, its
new findings replayed on tier e2e (vLLM's whole engine, real forward) under the same mutant and fixes.

    .venv-0.27.1/bin/python bench/measure/e2e_mutant_bank.py --count 200 --keep 3 --out bench/results/e2e_mutant_bank_0.27.1.md

Per mutant: the sweep's scenarios (seed 0 on) in their e2e form (harness.e2e.geometry.expressible: no scenario
drafts, align mode; the rest of each scenario as drawn) judged on the symbolic tier as a campaign judges them (the fixed
system); the first `--keep` inputs with a new finding (one per signature set) get their e2e verdict
(harness/e2e_verdict.py: visible, logprobs, clean, not expressible). Worker-side mutants (V1/V2 runner code) are
the engine tier's and are left out.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def measure(mutant, count: int, keep: int) -> dict:
    from harness.errors import BadInput
    from harness.genome import budget_scenario, run_budget
    from harness.run_config import RunConfig
    from harness.verdict import confirm_on_e2e, judge_input

    config = RunConfig(tier="symbolic", mutant=mutant.name)
    budget = run_budget(config)
    seen, verdicts, scanned, findings = set(), Counter(), 0, 0
    from harness.e2e.geometry import expressible

    for seed in range(count):
        scanned += 1
        # the sweep's scenario in its e2e form (no scenario drafts, align mode): both tiers run the same input
        scenario = expressible(budget_scenario(seed, budget, False))
        try:
            _, _, verdict = judge_input(scenario, config, report_known=False)
        except BadInput:
            continue
        if verdict is None or not verdict.is_new:
            continue
        findings += 1
        if verdict.key in seen:
            continue
        seen.add(verdict.key)
        verdicts[confirm_on_e2e(scenario, config, verdict)["verdict"]] += 1
        if len(seen) >= keep:
            break
    return {"mutant": mutant.name, "scanned": scanned, "findings": findings, "kept": len(seen), **verdicts}


def main() -> int:
    from harness.vllm_env import prepare

    prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    from harness.e2e_verdict import VERDICTS
    from harness.errors import BadInput
    from harness.mutants import REGISTRY

    rows = []
    for mutant in REGISTRY.values():
        if mutant.tier != "symbolic":
            continue
        try:
            rows.append(measure(mutant, args.count, args.keep))
        except BadInput as exc:  # the mutant's target is code this release lacks
            rows.append({"mutant": mutant.name, "skipped": str(exc).split(":")[0]})
        print(rows[-1], flush=True)
    if args.out:
        from harness.stamp import stamp

        lines = ["# Symbolic findings on vLLM's whole engine: what users see", "",
                 "Each allocator mutant swept on the symbolic tier (the fixed system) over the sweep's scenarios in "
                 "their e2e form; its first new findings (one per signature set) replayed on tier e2e under the same "
                 "mutant and fixes.", "",
                 "| mutant | sweep scenarios | new findings | kept | " + " | ".join(VERDICTS) + " |",
                 "|---|---|---|---|" + "---|" * len(VERDICTS)]
        totals = Counter()
        for r in rows:
            if "skipped" in r:
                lines.append(f"| {r['mutant']} | - | - | - | " + " | ".join("-" for _ in VERDICTS) + " |")
                continue
            totals.update({v: r.get(v, 0) for v in VERDICTS})
            totals["kept"] += r["kept"]
            lines.append(f"| {r['mutant']} | {r['scanned']} | {r['findings']} | {r['kept']} | "
                         + " | ".join(str(r.get(v, 0)) for v in VERDICTS) + " |")
        lines.append("| **all** | | | " + str(totals["kept"]) + " | " + " | ".join(str(totals[v]) for v in VERDICTS) + " |")
        command = (f"python bench/measure/e2e_mutant_bank.py --count {args.count} --keep {args.keep} "
                   f"--out {args.out}")
        Path(args.out).write_text("\n".join(lines + ["", stamp(command), ""]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
