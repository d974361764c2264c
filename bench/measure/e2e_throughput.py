"""Tier e2e beside the engine tier, one process, one core: scenarios/s with engines reused, engine start, memory.

    taskset -c 0 .venv-0.32.0/bin/python bench/measure/e2e_throughput.py --count 60 --out bench/results/e2e_throughput.md

The same generated scenarios (the sweep's, in their e2e form: harness.genome.budget_scenario with tier e2e's
budget) are judged as a campaign judges them (`judge_input`, the fixed system, no stock replay) on tier e2e, then
on the engine tier. Each tier runs the list twice: the first pass pays the engines' start (one per block and
prefix-match unit on tier e2e), the second is the rate with every engine reused. Scenarios a tier cannot express
are counted, not timed out.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def measure(tier: str, scenarios: list) -> dict:
    from harness.errors import BadInput
    from harness.run_config import RunConfig
    from harness.verdict import judge_input

    config = RunConfig(tier=tier)
    passes, skipped = [], 0
    for _ in range(2):
        start, skipped = time.perf_counter(), 0
        for sc in scenarios:
            try:
                judge_input(sc, config, report_known=False)
            except BadInput:
                skipped += 1
        passes.append(time.perf_counter() - start)
    n = len(scenarios) - skipped
    out = {"tier": tier, "scenarios": n, "skipped": skipped, "first_pass_s": round(passes[0], 2),
           "rate": round(n / passes[1], 1), "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    if tier == "e2e":
        from harness.e2e.engine import ENGINES

        out["engines"] = len(ENGINES)
        out["engine_start_s"] = round(sum(e.build_s for e in ENGINES.values()) / max(len(ENGINES), 1), 2)
    return out


def main() -> int:
    from harness.vllm_env import prepare

    prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--out")
    args = parser.parse_args()
    from harness.genome import budget_scenario, run_budget
    from harness.run_config import RunConfig

    budget = run_budget(RunConfig(tier="e2e"))
    scenarios = [budget_scenario(seed, budget, False) for seed in range(args.count)]
    rows = [measure("e2e", scenarios), measure("engine", scenarios)]
    for r in rows:
        print(r)
    if args.out:
        from harness.stamp import stamp

        lines = ["# Tier e2e beside the engine tier (one process, one core)", "",
                 "The sweep's scenarios in their e2e form, judged as a campaign judges them (fixed system). First "
                 "pass: engines built (tier e2e: one per block and prefix-match unit); rate: the second pass, every "
                 "engine reused. Max RSS is the process's after both tiers.", "",
                 "| tier | scenarios | first pass (s) | scenarios/s reused | engines | engine start (s, mean) | "
                 "max RSS (MiB) |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['tier']} | {r['scenarios']} | {r['first_pass_s']} | {r['rate']} | "
                         f"{r.get('engines', '-')} | {r.get('engine_start_s', '-')} | {r['maxrss_mib']} |")
        command = f"taskset -c 0 python bench/measure/e2e_throughput.py --count {args.count} --out {args.out}"
        Path(args.out).write_text("\n".join(lines + ["", stamp(command), ""]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
