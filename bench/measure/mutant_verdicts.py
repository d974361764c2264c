"""The user-facing verdict per bank mutant: does `hybrid-harness fuzz --mutant NAME` exit 1, and does a seeded
sweep? (Issue 10's must-show; the table is bench/results/mutant_verdicts.md.)

    taskset -c 1 .venv/bin/python bench/measure/mutant_verdicts.py [--trials 3] [--minutes 2] [--sweep 1000] [--parallel 2]

Per mutant: one `hybrid-harness sweep --count SWEEP --mutant NAME` (make sweep's settings, checkpoints on) and
TRIALS campaigns `hybrid-harness fuzz --minutes M --mutant NAME --seed-corpus --seed T` (make fuzz's settings:
1 job, prefill checkpoints on, the checked-in seed corpus, an empty persistent corpus), each in a fresh
process and folder; `--no-minimize` only skips the post-processing after the verdict is decided. Each
campaign's kept findings are also judged by the rule before this change (first finding's signature matched
against signature patterns of known issues) to show how often a known finding masked a new one.
Results are appended to a JSON lines file as they come (a killed run keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the pre-change rule (the registry module before the fix-replay verdicts): prefix/suffix patterns on findings[0]
OLD_PATTERNS = (("vllm-exception:", " in get_new_blocks"), ("provenance:", "-after-accepted-reset"))


def old_rule_known(doc: dict) -> bool:
    first = doc["findings"][0]["signature"]
    return any(first.startswith(p) and first.endswith(s) for p, s in OLD_PATTERNS)


def campaign(name: str, trial: int, minutes: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"hh-verdict-{name}-") as tmp:
        started = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "harness", "fuzz", "--minutes", str(minutes), "--mutant", name,
                            "--seed-corpus", "--seed", str(trial), "--artifacts", tmp, "--no-minimize",
                            "--no-progress"], cwd=ROOT, capture_output=True, text=True)
        docs = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("findings/finding-*/finding.json"))]
        new = sorted({s for d in docs if d["verdict"]["new"] for s in d["verdict"]["unexplained"]})
        return {"mutant": name, "kind": "campaign", "trial": trial, "exit": r.returncode,
                "wall_s": round(time.monotonic() - started, 1), "kept": len(docs), "new_signatures": new,
                "old_rule_new": sum(not old_rule_known(d) for d in docs),
                "old_rule_masked": sum(d["verdict"]["new"] and old_rule_known(d) for d in docs),
                "tail": r.stdout.strip().splitlines()[:1] + r.stderr.strip().splitlines()[-1:]}


def sweep(name: str, count: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"hh-sweep-{name}-") as tmp:
        r = subprocess.run([sys.executable, "-m", "harness", "sweep", "--count", str(count), "--mutant", name,
                            "--artifacts", tmp], cwd=ROOT, capture_output=True, text=True)
        docs = [json.loads(p.read_text()) for p in Path(tmp).glob("sweep-*.json")]
        return {"mutant": name, "kind": "sweep", "exit": r.returncode,
                "new": sum(d["verdict"]["new"] for d in docs), "with_findings": len(docs),
                "tail": r.stdout.strip().splitlines()[-1:]}


def table(rows: list[dict], command: str, header: str) -> str:
    names = list(dict.fromkeys(r["mutant"] for r in rows))
    out = [header, "",
           "| mutant | campaign exits (trials) | campaigns red | new signatures kept | masked under the old rule | "
           "sweep exit | sweep scenarios with new findings |",
           "|---|---|---|---|---|---|---|"]
    for name in names:
        camps = [r for r in rows if r["mutant"] == name and r["kind"] == "campaign"]
        sw = next((r for r in rows if r["mutant"] == name and r["kind"] == "sweep"), None)
        sigs = sorted({s for c in camps for s in c["new_signatures"]})
        out.append(f"| `{name}` | {', '.join(str(c['exit']) for c in camps)} | "
                   f"{sum(c['exit'] == 1 for c in camps)}/{len(camps)} | {', '.join(f'`{s}`' for s in sigs) or '-'} | "
                   f"{sum(c['old_rule_masked'] for c in camps)} | {sw['exit'] if sw else '-'} | "
                   f"{sw['new'] if sw else '-'} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--sweep", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=1, help="campaigns run at once (one core each)")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--log", default=str(ROOT / "bench" / "results" / "mutant_verdicts.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "mutant_verdicts.md"))
    parser.add_argument("--render", action="store_true", help="only render the table from --log")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from harness.mutants import REGISTRY
    from harness.stamp import stamp
    from harness.vllm_adapter import installed_version

    log = Path(args.log)
    if not args.render:
        names = args.only or list(REGISTRY)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")

        def record(row: dict) -> None:
            with log.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)

        for name in names:
            record(sweep(name, args.sweep))
        jobs = [(name, t) for name in names for t in range(args.trials)]
        with ThreadPoolExecutor(args.parallel) as pool:
            for row in pool.map(lambda job: campaign(job[0], job[1], args.minutes), jobs):
                record(row)
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    command = (f"python bench/measure/mutant_verdicts.py --trials {args.trials} --minutes {args.minutes:g} "
               f"--sweep {args.sweep} --parallel {args.parallel}")
    header = (f"# Verdict per bank mutant (vLLM {installed_version()})\n\n{stamp(command)}\n\n"
              "A campaign is `hybrid-harness fuzz --minutes M --mutant NAME --seed-corpus --seed T` (make fuzz's "
              "settings, prefill checkpoints on, empty persistent corpus, 1 job); exit 1 = a new finding. The sweep "
              "is `hybrid-harness sweep --count N --mutant NAME` (checkpoints on). 'Masked under the old rule': kept "
              "findings with a new signature that the pre-change rule (the first finding's signature matched by "
              "pattern against known issues) would have filed KNOWN.")
    Path(args.out).write_text(table(rows, command, header) + "\n")
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
