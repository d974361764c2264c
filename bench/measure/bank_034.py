"""The harness's own bank of mutants of vLLM 0.34.0's new code, three ways: vLLM 0.34.0's own tests (the peer), the
main job as the README runs it, and a seeded sweep on the mutant's tier.

    .venv/bin/python bench/measure/peer_tests.py --vllm 0.34.0 --only M ... --out bench/results/peer_tests_034_bank.md
    .venv/bin/python bench/measure/bank_034.py --minutes 2 --sweep 200 --out bench/results/bank_034.md

Main job: `hybrid-harness fuzz --tier main --minutes 2 --seed-corpus --mutant M` (what `make fuzz` runs: the
symbolic campaign and an engine-tier worker side by side); killed = exit 1 with a new finding kept, and by which
half. Sweep: `hybrid-harness sweep --count N --tier T --mutant M` on the mutant's tier (engine for Scheduler code);
killed = exit 1. The peer column is read from peer_tests' JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BANK = ("publish-counts-in-flight", "parked-reservation-kept", "parked-reservation-doubled",
        "inflight-cap-ignores-aborted", "hash-map-pop-keeps-stale-head", "hit-limit-ignored-locally",
        "aborted-load-freed-early", "cache-aware-probe-takes-refs", "cache-key-outlives-block")


def _harness(*args: str, cwd: Path) -> tuple[int, float]:
    start = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True).returncode
    return code, round(time.monotonic() - start, 1)


def _new_kept(folder: Path) -> list[str]:
    out = []
    for f in sorted(folder.glob("findings/finding-*/finding.json")):
        v = json.loads(f.read_text())["verdict"]
        if v.get("new"):
            out += v.get("unexplained") or v.get("revealed") or []
    return sorted(set(out))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--sweep", type=int, default=200)
    ap.add_argument("--peer", type=Path, default=ROOT / "bench" / "results" / "peer_tests_034_bank.json")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from harness.mutants import get_mutant
    from harness.release import vllm_source
    from harness.stamp import stamp

    peer = {}
    if args.peer.exists():
        peer = {r["mutant"]: r for r in json.loads(args.peer.read_text()).get("rows", []) if r.get("mutant")}
    rows = []
    for name in args.only or BANK:
        mutant = get_mutant(name)
        with tempfile.TemporaryDirectory() as tmp:
            art = Path(tmp) / "fuzz"
            code, secs = _harness("fuzz", "--tier", "main", "--minutes", f"{args.minutes:g}", "--seed-corpus",
                                  "--no-progress", "--no-minimize", "--artifacts", str(art), "--mutant", name, cwd=ROOT)
            halves = {h: _new_kept(p) for h, p in (("symbolic", art), ("engine", art / "engine"))}
            sweep_code, sweep_s = _harness("sweep", "--count", str(args.sweep), "--seed", "0", "--tier", mutant.tier,
                                           "--mutant", name, "--artifacts", str(Path(tmp) / "sweep"), cwd=ROOT)
        p = peer.get(name, {})
        rows.append({"mutant": name, "tier": mutant.tier, "peer": p.get("killed"), "peer_test": p.get("first_failure"),
                     "main_exit": code, "main_s": secs, "killed_by": [h for h, s in halves.items() if s],
                     "signatures": sorted({s for s in halves["symbolic"] + halves["engine"]}),
                     "sweep_exit": sweep_code, "sweep_s": sweep_s, "bug_class": mutant.bug_class})
        print(json.dumps(rows[-1]), flush=True)
    json_out = args.out.with_suffix(".json")
    if args.only and json_out.exists():  # rerun of some mutants: the other rows as they were
        kept = [r for r in json.loads(json_out.read_text()) if r["mutant"] not in args.only]
        rows = sorted(kept + rows, key=lambda r: BANK.index(r["mutant"]) if r["mutant"] in BANK else len(BANK))
    yes = lambda b: "yes" if b else ("no" if b is not None else "n/a")  # noqa: E731
    lines = [f"# Own bank of vLLM {vllm_source().version}'s new code: vLLM's tests, the main job, a sweep", "",
             f"Main job: `hybrid-harness fuzz --tier main --minutes {args.minutes:g} --seed-corpus --mutant M` (`make "
             "fuzz`: symbolic campaign and one engine-tier worker side by side, two cores); killed = exit 1 (the half "
             f"that kept the new finding). Sweep: {args.sweep} seeded scenarios on the mutant's tier. vLLM's tests: "
             f"`bench/measure/peer_tests.py --vllm {vllm_source().version}` (tests/v1/core, tests/v1/kv_connector/unit,"
             " -x), from bench/results/peer_tests_034_bank.md.", "",
             "| mutant | what it breaks | vLLM's tests | main job (exit, half) | sweep | signatures |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['mutant']}` | {r['bug_class']} | {yes(r['peer'])} | {r['main_exit']}"
                     f"{' (' + ', '.join(r['killed_by']) + ')' if r['killed_by'] else ''} | "
                     f"{yes(r['sweep_exit'] == 1)} ({r['mutant'] and 'exit ' + str(r['sweep_exit'])}) | "
                     + ", ".join(f"`{s}`" for s in r["signatures"]) + " |")
    totals = (sum(bool(r["peer"]) for r in rows), sum(r["main_exit"] == 1 for r in rows),
              sum(r["sweep_exit"] == 1 for r in rows))
    lines += ["", f"Killed: vLLM's tests {totals[0]}/{len(rows)}, the main job {totals[1]}/{len(rows)}, the sweep "
                  f"{totals[2]}/{len(rows)}."]
    command = (f"python bench/measure/bank_034.py --minutes {args.minutes:g} --sweep {args.sweep} --out {args.out}"
               + "".join(f" --only {m}" for m in args.only) + (" (the other rows kept)" if args.only else ""))
    args.out.write_text("\n".join(lines + ["", stamp(command), ""]))
    json_out.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
