"""Turn pytest-benchmark JSON into PNG scaling curves and a Markdown table; compare two runs.

    python bench/measure/plot.py bench/results/bench-0.33.0.json --out bench/results
    python bench/measure/plot.py OLD.json NEW.json --compare [--threshold 0.20]   # exit 1 on a slowdown past it

Scaling groups are the parametrized benchmarks whose single parameter is a number (prompt length,
concurrent requests, pool size, K, copies): one PNG each, mean time against the parameter (log-log).
The CoW ratio (page-wise state copy vs a plain torch copy of the same bytes) is reported per copy count.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path


def load(path: str) -> dict[str, dict]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: cannot read benchmark JSON {path}: {exc}", file=sys.stderr)
        sys.exit(2)
    return {b["fullname"]: b for b in doc["benchmarks"]}


def _group(bench: dict) -> tuple[str, float | None]:
    m = re.match(r"(.+)\[(.+)\]$", bench["name"])
    if not m:
        return bench["name"], None
    try:
        return m.group(1), float(m.group(2))
    except ValueError:
        return bench["name"], None


def table(benches: dict[str, dict]) -> list[str]:
    lines = ["| benchmark | mean µs | median µs | stddev µs | rounds |", "|---|---|---|---|---|"]
    for b in sorted(benches.values(), key=lambda b: b["fullname"]):
        s = b["stats"]
        lines.append(f"| `{b['name']}` | {s['mean'] * 1e6:,.1f} | {s['median'] * 1e6:,.1f} | "
                     f"{s['stddev'] * 1e6:,.1f} | {s['rounds']} |")
    ratios = cow_ratios(benches)
    if ratios:
        lines += ["", "| CoW copies | page-wise µs | plain torch copy µs | ratio (page-wise / plain) | page-wise GB/s |",
                  "|---|---|---|---|---|"]
        for n, (pw, plain, gbs) in sorted(ratios.items()):
            lines.append(f"| {n} | {pw * 1e6:,.1f} | {plain * 1e6:,.1f} | {pw / plain:.2f} | {gbs:.2f} |")
    return lines


def cow_ratios(benches: dict[str, dict]) -> dict[int, tuple[float, float, float]]:
    pagewise, plain, nbytes = {}, {}, {}
    for b in benches.values():
        name, param = _group(b)
        if param is None:
            continue
        if name == "test_cow_apply_pagewise":
            pagewise[int(param)] = b["stats"]["mean"]
            nbytes[int(param)] = b["extra_info"].get("bytes", 0)
        elif name == "test_plain_torch_copy_same_bytes":
            plain[int(param)] = b["stats"]["mean"]
    return {n: (pagewise[n], plain[n], nbytes[n] / pagewise[n] / 1e9) for n in pagewise if n in plain}


def plots(benches: dict[str, dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for b in benches.values():
        name, param = _group(b)
        if param is not None:
            groups[name].append((param, b["stats"]["mean"] * 1e6))
    written = []
    for name, points in sorted(groups.items()):
        if len(points) < 3:
            continue
        points.sort()
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(name.replace("test_scaling_", "").replace("test_", ""))
        ax.set_ylabel("mean µs")
        ax.set_title(name.replace("test_", ""), fontsize=10)
        ax.grid(alpha=0.3, which="both")
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def compare(old: dict[str, dict], new: dict[str, dict], threshold: float) -> tuple[list[str], bool]:
    lines = ["| benchmark | old mean µs | new mean µs | change |", "|---|---|---|---|"]
    regressed = False
    for name in sorted(set(old) & set(new)):
        a, b = old[name]["stats"]["mean"], new[name]["stats"]["mean"]
        change = b / a - 1
        flag = " **regression**" if change > threshold else ""
        regressed |= change > threshold
        lines.append(f"| `{new[name]['name']}` | {a * 1e6:,.1f} | {b * 1e6:,.1f} | {change:+.1%}{flag} |")
    return lines, regressed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("json", nargs="+")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--threshold", type=float, default=0.20)
    args = parser.parse_args()
    if args.compare:
        if len(args.json) != 2:
            parser.error("--compare takes OLD.json NEW.json")
        lines, regressed = compare(load(args.json[0]), load(args.json[1]), args.threshold)
        print("\n".join(lines))
        sys.exit(1 if regressed else 0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    benches = load(args.json[0])
    md = out / (Path(args.json[0]).stem + ".md")
    from harness.stamp import stamp

    head = [f"# pytest-benchmark results ({Path(args.json[0]).name})", "",
            stamp(f"python -m pytest bench --benchmark-only --benchmark-json={args.json[0]} && "
                  f"python bench/measure/plot.py {args.json[0]} --out {args.out}"), ""]
    md.write_text("\n".join(head + table(benches)) + "\n")
    for path in plots(benches, out):
        print(f"wrote {path}")
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
