#!/usr/bin/env python3
"""The peer table: for every allocator-side mutant, who kills it — vLLM's own unit tests (bench/peer_tests.py),
a 1,000-scenario random sweep of the generator, and fuzz campaigns (`hybrid-harness mutants check` tables).

    python bench/peer_table.py --peer bench/results/peer_tests.json --campaign TABLE.md [--campaign ...] \
        [--mutants-dir mutants_blind] [--count 1000] --out bench/results/peer_table.md

The sweep column is measured here: generator seeds 0..count-1 replayed with the mutant on the fixed system
(fixes of every known issue applied, as `sweep` does); a seed kills the mutant under `mutants check`'s rule
(harness.mutation.kills: a signature that fires with the patch, that no known fix explains and that stock vLLM
does not show). Reported: killing seeds / count and the seconds to the first kill.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sweep_kills(name: str, count: int) -> tuple[int, float | None]:
    from harness.errors import BadInput, HarnessError
    from harness.generate import random_scenario
    from harness.known import replay_and_judge
    from harness.mutants import mutant_applied
    from harness.mutation import kills
    from harness.scenario import scenario_to_json
    from harness.vllm_adapter import supports_prefill_checkpoints

    killed, first, start = 0, None, time.perf_counter()
    for seed in range(count):
        scenario = random_scenario(seed, checkpoints=supports_prefill_checkpoints())
        try:
            with mutant_applied(name):
                _, _, verdict = replay_and_judge(scenario, name, "symbolic", known_fixes=True)
            if verdict is None or not verdict.is_new or not kills(scenario_to_json(scenario), name):
                continue
        except (HarnessError, BadInput):
            continue
        killed += 1
        if first is None:
            first = time.perf_counter() - start
    return killed, first


def campaign_rows(paths: list[str]) -> dict[str, tuple[str, str]]:
    """mutant -> (trials killed, median seconds) from `mutants check` Markdown tables."""
    rows = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            m = re.match(r"\| `([^`]+)` \| ([^|]+) \| (\d+/\d+) \| ([^|]+) \|", line)
            if m:
                rows[Path(m.group(1)).stem] = (m.group(3), m.group(4).strip())
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", help="bench/peer_tests.py's JSON")
    ap.add_argument("--campaign", action="append", default=[], help="a `mutants check` Markdown table")
    ap.add_argument("--mutants-dir", action="append", default=[], help="also every *.py mutant file here")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from harness.mutants import REGISTRY
    from harness.stamp import stamp
    from harness.vllm_adapter import load_vllm

    load_vllm()
    names = [m.name for m in REGISTRY.values() if not m.runner]  # allocator/scheduler code: what vLLM's tests cover
    for folder in args.mutants_dir:
        names += [str(p.relative_to(ROOT)) for p in sorted((ROOT / folder).glob("*.py"))]
    peer = {}
    if args.peer and Path(args.peer).exists():
        for row in json.loads(Path(args.peer).read_text()).get("rows", []):
            peer[Path(row["mutant"]).stem] = row
    camp = campaign_rows(args.campaign)
    lines = [stamp(" ".join(["python bench/peer_table.py", *(argv or sys.argv[1:])])), "",
             f"| mutant | vLLM's tests (tests/v1/core, kv_connector/unit) | sweep ({args.count} seeds): killing seeds, s to first "
             "| campaign: trials killed, median s |", "|---|---|---|---|"]
    for name in names:
        stem = Path(name).stem
        try:
            k, first = sweep_kills(name, args.count)
        except Exception as exc:  # a mutant that does not apply on this release
            k, first = None, repr(exc)
        p = peer.get(stem)
        ptxt = "-" if p is None else ("killed" + (f" ({p.get('seconds', '?')} s, {p.get('first_failure', '')})"
                                                  if p.get("killed") else "") if p.get("killed") else "survived")
        stxt = f"{k}/{args.count}, {first:.1f} s" if isinstance(first, float) else (f"0/{args.count}" if k == 0 else str(first))
        c = camp.get(stem, ("-", "-"))
        lines.append(f"| `{stem}` | {ptxt} | {stxt} | {c[0]}, {c[1]} |")
        print(lines[-1], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
