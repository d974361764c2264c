#!/usr/bin/env python3
"""The peer table: for every allocator-side mutant, who kills it — vLLM's own unit tests (bench/measure/peer_tests.py),
a 1,000-scenario random sweep of the generator, and fuzz campaigns (`hybrid-harness mutants check` tables).

    python bench/measure/peer_table.py --peer bench/results/peer_tests.json --campaign TABLE.md [--campaign ...] \
        [--engine-campaign TABLE.md] [--mutants-dir banks/blind_mutants] [--workers] [--count 1000] [--trials 5] \
        --out bench/results/peer_table.md

The sweep column is measured here: generator seeds 0..count-1 replayed with the mutant on the fixed system
(fixes of every known issue applied, as `sweep` does); a seed kills the mutant under `mutants check`'s rule
(harness.mutation.kills: a signature that fires with the patch, that no known fix explains and that stock vLLM
does not show). Reported: killing seeds / count and the seconds to the first kill. The generator-only column
is the sweep as a search strategy: per trial its own seed stream until the first kill, against the campaign's
median time to kill (seconds after start-up in both).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# both strategies kill within their first few inputs below this (a replay with its verdict takes 5-50 ms on this
# box): a difference there is which input came first, not search power
TIE_S = 0.5
sys.path.insert(0, str(ROOT))


def _kills_seed(name: str, seed: int) -> bool:
    """Generator seed `seed` (the sweep's scenario) kills the mutant under `mutants check`'s rule."""
    from harness.errors import BadInput, HarnessError
    from harness.generate import random_scenario
    from harness.verdict import replay_and_judge
    from harness.mutation import kills
    from harness.run_config import RunConfig
    from harness.scenario import scenario_to_json
    from harness.vllm_adapter import supports_prefill_checkpoints, supports_retention

    scenario = random_scenario(seed, checkpoints=supports_prefill_checkpoints(), retention=supports_retention())
    try:
        config = RunConfig(tier="symbolic", mutant=name, known_fixes=True)
        _, _, verdict = replay_and_judge(scenario, config=config)
        return verdict is not None and verdict.is_new and kills(scenario_to_json(scenario), config=config) is not None
    except (HarnessError, BadInput):
        return False


def sweep_kills(name: str, count: int) -> tuple[int, float | None]:
    """Killing seeds among 0..count-1, and the seconds to the first."""
    killed, first, start = 0, None, time.perf_counter()
    for seed in range(count):
        if _kills_seed(name, seed):
            killed += 1
            if first is None:
                first = time.perf_counter() - start
    return killed, first


def generator_times(name: str, trials: int, budget: float) -> list[float | None]:
    """Generator-only time to kill: trial t draws seeds from its own stream (t * 10**6 + i) until the first kill
    or `budget` seconds (None: censored). The campaign's guided trials are measured against these."""
    out = []
    for trial in range(trials):
        start, seed, found = time.perf_counter(), trial * 10**6, None
        while time.perf_counter() - start < budget:
            if _kills_seed(name, seed):
                found = time.perf_counter() - start
                break
            seed += 1
        out.append(found)
    return out


def _median_text(times: list[float | None], budget: float) -> tuple[str, float]:
    values = sorted(t if t is not None else budget for t in times)
    med = statistics.median(values)
    return (f"{sum(t is not None for t in times)}/{len(times)}, {med:.1f} s ({values[0]:.1f}-{values[-1]:.1f})", med)


def campaign_rows(paths: list[str]) -> dict[str, tuple[str, str, str]]:
    """mutant -> (trials killed, median seconds, spread) from `mutants check` Markdown tables."""
    rows = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            m = re.match(r"\| `([^`]+)` \| ([^|]+) \| (\d+/\d+) \| ([^|]+) \| ([^|]+) \|", line)
            if m:
                rows[Path(m.group(1)).stem] = (m.group(3), m.group(4).strip(), m.group(5).strip())
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", action="append", default=[], help="bench/measure/peer_tests.py's JSON (repeatable)")
    ap.add_argument("--campaign", action="append", default=[], help="a symbolic-tier `mutants check` table")
    ap.add_argument("--engine-campaign", action="append", default=[], help="an engine-tier `mutants check` table")
    ap.add_argument("--mutants-dir", action="append", default=[], help="also every *.py mutant file here")
    ap.add_argument("--workers", action="store_true", help="also the worker-side mutants (engine campaigns only)")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=5, help="generator-only time-to-kill trials")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds per generator-only trial")
    ap.add_argument("--only", nargs="*", help="just these mutants (names or file stems)")
    ap.add_argument("--measured", help="JSON of the sweep and generator-only figures: read where present, added "
                    "to where not (the campaign tables can be merged later without measuring again)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from harness.mutants import REGISTRY
    from harness.stamp import stamp
    from harness.vllm_adapter import load_vllm

    load_vllm()
    names = [m.name for m in REGISTRY.values() if not m.runner]  # allocator/scheduler code: what vLLM's tests cover
    for folder in args.mutants_dir:
        names += [str(p.relative_to(ROOT)) for p in sorted((ROOT / folder).glob("*.py"))]
    workers = [m.name for m in REGISTRY.values() if m.runner] if args.workers else []
    peer = {}
    for path in args.peer:
        for row in json.loads(Path(path).read_text()).get("rows", []):
            if row.get("mutant"):
                peer[Path(row["mutant"]).stem] = row
    camp, eng = campaign_rows(args.campaign), campaign_rows(args.engine_campaign)
    measured = json.loads(Path(args.measured).read_text()) if args.measured and Path(args.measured).exists() else {}
    lines = [stamp(" ".join(["python bench/measure/peer_table.py", *(argv or sys.argv[1:])])), "",
             f"| mutant | vLLM's tests (tests/v1/core, kv_connector/unit) | sweep ({args.count} seeds): killing seeds, "
             f"s to first | generator only ({args.trials} trials, {args.budget:.0f} s): killed, median s (spread) "
             "| campaign: trials killed, median s (spread) | engine campaign: trials killed, median s "
             "| campaign median <= generator median |", "|---|---|---|---|---|---|---|"]
    for name in names + workers:
        stem = Path(name).stem
        if args.only and stem not in args.only and name not in args.only:
            continue
        worker = name in workers
        p = peer.get(stem)
        ptxt = ("n/a (worker code)" if worker else "-" if p is None else
                "killed" + (f" ({p.get('seconds', '?')} s)" if p.get("seconds") else "") if p.get("killed")
                else "survived")
        if worker:  # the generator's scenarios on the engine tier: `sweep --tier engine`
            stxt = gtxt = "see engine sweep"
            gmed = None
        else:
            key = f"{stem}|{args.count}|{args.trials}|{args.budget}"
            if key not in measured:
                try:
                    k, first = sweep_kills(name, args.count)
                    measured[key] = {"killed": k, "first": first,
                                     "generator": generator_times(name, args.trials, args.budget)}
                except Exception as exc:  # a mutant that does not apply on this release
                    measured[key] = {"error": repr(exc)}
                if args.measured:
                    Path(args.measured).write_text(json.dumps(measured, indent=1))
            m = measured[key]
            if "error" in m:
                stxt, gtxt, gmed = m["error"], "-", None
            else:
                stxt = f"{m['killed']}/{args.count}" + (f", {m['first']:.1f} s" if m["first"] is not None else "")
                gtxt, gmed = _median_text(m["generator"], args.budget)
        c, e = camp.get(stem), eng.get(stem)
        ctxt = f"{c[0]}, {c[1]} ({c[2]})" if c else "-"
        cmed = (args.budget if c[1] == "-" else float(c[1])) if c else None
        verdict = ("-" if cmed is None or gmed is None else
                   "neither kills it" if min(cmed, gmed) >= args.budget else "yes" if cmed <= gmed else
                   f"tie (both <= {TIE_S} s: the first few inputs)" if max(cmed, gmed) <= TIE_S else "**no**")
        lines.append(f"| `{stem}` | {ptxt} | {stxt} | {gtxt} | {ctxt} | {f'{e[0]}, {e[1]}' if e else '-'} | {verdict} |")
        print(lines[-1], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
