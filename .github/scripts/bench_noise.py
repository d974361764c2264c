#!/usr/bin/env python3
"""Run-to-run noise of the benchmark suite: per benchmark, the largest ratio between any two runs of the
same commit, for the mean (what the action's `pytest` tool compares), the median and the minimum (what
bench_values.py hands the action).

    bench_noise.py b1.json b2.json [b3.json ...]      # pytest-benchmark JSON files of the same commit

Prints a Markdown table and the worst ratios; the bench workflow's alert threshold sits above the worst
minimum ratio (bench/reports/noise.md).
"""

from __future__ import annotations

import itertools
import json
import sys


def worst_ratio(values: list[float]) -> float:
    return max(max(a / b, b / a) for a, b in itertools.combinations(values, 2))


def main(paths: list[str]) -> int:
    if len(paths) < 2:
        print("usage: bench_noise.py b1.json b2.json [b3.json ...]", file=sys.stderr)
        return 2
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append({b["fullname"]: b["stats"] for b in json.load(f)["benchmarks"]})
    names = sorted(set.intersection(*(set(r) for r in runs)))
    print("| benchmark | rounds | min per run (ms) | worst mean ratio | worst median ratio | worst min ratio |")
    print("|---|---:|---|---:|---:|---:|")
    worst = {"mean": (0.0, ""), "median": (0.0, ""), "min": (0.0, "")}
    for n in names:
        ratios = {k: worst_ratio([r[n][k] for r in runs]) for k in worst}
        for k, v in ratios.items():
            worst[k] = max(worst[k], (v, n))
        mins = " / ".join(f"{r[n]['min'] * 1e3:.3g}" for r in runs)
        print(f"| `{n.split('::', 1)[1]}` | {runs[0][n]['rounds']} | {mins} | {ratios['mean']:.2f} | "
              f"{ratios['median']:.2f} | {ratios['min']:.2f} |")
    print()
    for k, (v, n) in worst.items():
        print(f"worst {k} ratio over {len(runs)} runs: {v:.2f}x ({n})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
