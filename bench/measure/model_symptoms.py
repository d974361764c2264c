"""What users would see under each mutant of the bank: model-tier sweep, symptoms and repeat rate (not a test).

    python bench/measure/model_symptoms.py [--count 100] [--seed 0] [--out bench/results/model_symptoms.md]

For every mutant (and stock vLLM) it replays the same generated model-tier scenarios and counts the
generations whose outputs diverge from the uncached reference, by symptom (repeat / garbage / drift), the
scenarios with any finding, and the largest logit difference.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.generate import random_scenario
from harness.mutants import REGISTRY
from harness.oracles import judge, merge_output_summaries, output_summary
from harness.replay import replay
from harness.run_config import RunConfig
from harness.stamp import stamp
from harness.vllm_adapter import installed_version, load_vllm, supports_prefill_checkpoints


def sweep(scenarios, mutant: str | None) -> dict:
    total = {"scenarios_with_findings": 0, "symbolic_only": 0}
    for sc in scenarios:
        trace = replay(sc, config=RunConfig(tier="model", mutant=mutant))
        total = merge_output_summaries(total, output_summary(trace))
        findings = judge(trace)
        total["scenarios_with_findings"] += bool(findings)
        total["symbolic_only"] += bool(findings) and not any(f.oracle == "output" for f in findings)
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/model_symptoms.md")
    args = parser.parse_args()
    load_vllm()
    checkpoints = supports_prefill_checkpoints()
    scenarios = [random_scenario(s, checkpoints=checkpoints, small=True) for s in range(args.seed, args.seed + args.count)]
    rows = []
    for name in [None, *REGISTRY]:
        t0 = time.perf_counter()
        try:
            s = sweep(scenarios, name)
        except Exception as exc:  # noqa: BLE001 - a mutant that cannot run here is reported, not fatal
            rows.append(f"| {name} | error: {exc!r} |||||||")
            continue
        rows.append(f"| {name or 'stock'} | {s['scenarios_with_findings']} | {s['symbolic_only']} | {s['generations']} | "
                    f"{s['diverged']} | {s['repeat']}/{s['generations']} | {s['garbage']} | {s['drift']} | "
                    f"{s['max_logit_diff']:.3g} |")
        print(rows[-1], f"({time.perf_counter() - t0:.0f} s)", flush=True)
    text = "\n".join([
        f"# Model-tier symptoms per mutant (vLLM {installed_version()}, {args.count} scenarios, seeds "
        f"{args.seed}..{args.seed + args.count - 1}, checkpoints {'on' if checkpoints else 'off'})", "",
        stamp(f"python bench/measure/model_symptoms.py --count {args.count} --seed {args.seed}"), "",
        "| mutant | scenarios with findings | symbolic only | generations | diverged | repeat rate | garbage | "
        "drift | max logit diff |", "|---|---|---|---|---|---|---|---|---|", *rows])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
