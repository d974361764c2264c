#!/usr/bin/env python3
"""pytest-benchmark JSON -> github-action-benchmark `customSmallerIsBetter` JSON, one value per benchmark.

    bench_values.py bench-output.json bench-values.json [--stat min|median|mean]

The action's `pytest` tool compares means (as ops/s), and a mean over 3-30 rounds moves with one preempted
round. Measured on one commit, 5 runs on a shared 2-core machine (bench/reports/noise.md), the worst
run-to-run ratio was 27x for the mean, 6.9x for the median and 2.5x for the minimum (interference mostly
adds time), so the dashboard and its alert threshold track the minimum (the default).
"""

from __future__ import annotations

import argparse
import json


def values(doc: dict, stat: str = "min") -> list[dict]:
    out = []
    for b in doc["benchmarks"]:
        s = b["stats"]
        out.append({"name": b["fullname"], "unit": "s", "value": s[stat],
                    "range": f"iqr: {s['iqr']:.3g}",
                    "extra": f"{stat} of {s['rounds']} rounds\nmean: {s['mean']:.3g} s\nmedian: {s['median']:.3g} s"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--stat", choices=("min", "median", "mean"), default="min")
    args = ap.parse_args(argv)
    with open(args.src) as f:
        doc = json.load(f)
    with open(args.dst, "w") as f:
        json.dump(values(doc, args.stat), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
