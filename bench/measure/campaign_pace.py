"""Campaign pace with a frequent bug: 1-minute campaigns on stock, with a bug that shows in almost every input, and
with that bug and a rarer one planted together ("A+B"), each on one core; execs/s and what each kept.

    .venv/bin/python bench/measure/campaign_pace.py --minutes 1 --out bench/results/campaign_pace.md

A campaign worker judges each set of signatures once (harness.verdict.replay_and_judge `judged`): without it every
input showing the frequent bug paid the replays with fixes, on stock and on the engine tier. Pairs run side by side
(two cores); `--before DIR` adds the same campaigns with the harness checked out in DIR (a git worktree) for a
before/after table on one machine in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FREQUENT = "cow-copies-dropped"
RARE = ("spec-block-not-relocated", "mamba-retention-resend-boundary-at-prompt-end")
LINE = re.compile(r"fuzz: (\d+) execs in ([\d.]+) s \(([\d.]+)/s")


def campaign(src: Path, minutes: float, mutant: str | None, work: Path) -> dict:
    out = work / f"{src.name}-{mutant or 'stock'}"
    cmd = [sys.executable, "-m", "harness", "fuzz", "--minutes", str(minutes), "--jobs", "1", "--seed", "0",
           "--seed-corpus", "--no-progress", "--artifacts", str(out)] + (["--mutant", mutant] if mutant else [])
    run = subprocess.run(cmd, cwd=src, env=dict(os.environ, PYTHONPATH=str(src)), capture_output=True, text=True)
    m = LINE.search(run.stdout)
    kept = []
    for f in sorted((out / "findings").glob("finding-*/finding.json")):
        verdict = json.loads(f.read_text())["verdict"]
        kept += verdict.get("unexplained", []) + [f"revealed:{s}" for s in verdict.get("revealed", [])]
    return {"mutant": mutant or "stock", "exit": run.returncode, "execs": int(m[1]) if m else None,
            "rate": float(m[3]) if m else None, "new_signatures": sorted(set(kept))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--before", type=Path, help="a checkout of the harness before the change, for its rates")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from harness.release import vllm_source
    from harness.stamp import stamp

    mutants = [None, FREQUENT, *(f"{FREQUENT}+{r}" for r in RARE)]
    jobs = [(ROOT, m) for m in mutants] + ([(args.before, m) for m in mutants[:2]] if args.before else [])
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda job: {"harness": "before" if job[0] == args.before else "now",
                                          **campaign(job[0], args.minutes, job[1], Path(tmp))}, jobs))
    stock = next(r["rate"] for r in rows if r["harness"] == "now" and r["mutant"] == "stock")
    lines = [f"# Campaign pace with a frequent bug (vLLM {vllm_source().version}, symbolic tier, 1 job each)", "",
             f"{args.minutes:g}-minute campaigns (`hybrid-harness fuzz --minutes {args.minutes:g} --jobs 1 --seed 0 "
             "--seed-corpus`), two side by side on two cores. `now`: each signature set judged once per worker "
             "(harness/verdict.py `judged`); `before`: every input judged in full.", "",
             "| harness | mutant | exit | execs | execs/s | share of stock now | new signatures kept |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        share = f"{r['rate'] / stock:.0%}" if r["rate"] and stock else "-"
        lines.append(f"| {r['harness']} | `{r['mutant']}` | {r['exit']} | {r['execs']} | {r['rate']} | {share} | "
                     + ", ".join(f"`{s}`" for s in r["new_signatures"]) + " |")
    command = f"python bench/measure/campaign_pace.py --minutes {args.minutes:g} --out {args.out}" + (
        f" --before {args.before}" if args.before else "")
    args.out.write_text("\n".join(lines + ["", stamp(command), ""]))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
