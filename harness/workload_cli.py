"""`hybrid-harness workload` (also `python -m harness.workload_cli`): write a seeded synthetic chat workload,
or a scenario whose requests come from a workload file (harness/workloads.py reads and expands them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput
from harness.scenario import parse_scenario
from harness.workloads import GEOMETRY_PRESETS, write_workload


def workload_scenario(workload: str | Path, out: str | Path, *, preset: str = "small", limit: int | None = None,
                      max_tokens: int = 2, arrival_gap: int = 4) -> dict:
    """A scenario document pointing at `workload` (path relative to `out`'s folder), checked to expand."""
    workload, out = Path(workload), Path(out)
    spec = {"path": Path(os.path.relpath(workload.resolve(), out.resolve().parent)).as_posix(), "limit": limit,
            "max_tokens": max_tokens, "arrival_gap": arrival_gap}
    doc = {"version": 1, "name": f"workload {workload.name}", "geometry": GEOMETRY_PRESETS[preset], "workload": spec}
    parse_scenario(doc, base_dir=out.resolve().parent)  # a workload that cannot expand is bad input now
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybrid-harness workload", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    make = sub.add_parser("make", help="write a seeded synthetic chat workload (.jsonl, .json or .parquet)")
    make.add_argument("out")
    make.add_argument("--sessions", type=int, default=4)
    make.add_argument("--turns", type=int, default=3)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--system-prompts", type=int, default=2)
    make.add_argument("--max-prompt-tokens", type=int, default=120)
    scen = sub.add_parser("scenario", help="write a scenario JSON whose requests come from a workload file")
    scen.add_argument("workload")
    scen.add_argument("-o", "--out", required=True)
    scen.add_argument("--geometry-preset", choices=sorted(GEOMETRY_PRESETS), default="small")
    scen.add_argument("--limit", type=int, default=None, help="first N sessions only")
    scen.add_argument("--max-tokens", type=int, default=2)
    scen.add_argument("--arrival-gap", type=int, default=4)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "make":
            if args.sessions < 1 or args.turns < 1 or args.max_prompt_tokens < 1:
                raise BadInput("--sessions, --turns and --max-prompt-tokens must be positive")
            path = write_workload(args.out, sessions=args.sessions, turns=args.turns, seed=args.seed,
                                  system_prompts=args.system_prompts, max_prompt_tokens=args.max_prompt_tokens)
            print(f"wrote {path}")
        else:
            doc = workload_scenario(args.workload, args.out, preset=args.geometry_preset, limit=args.limit,
                                    max_tokens=args.max_tokens, arrival_gap=args.arrival_gap)
            Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
            print(f"wrote {args.out}")
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
