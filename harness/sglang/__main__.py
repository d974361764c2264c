"""`python -m harness.sglang SCENARIO.json [--mutant NAME] [--tree-core C] [--strategy S] [--json]`: replay on
SGLang's own code, judge, print (a sweep's finding file replays with the run it recorded).
`python -m harness.sglang campaign [--minutes M] [--seed S] [--mutant NAME] [--tree-core C] [--artifacts DIR]`: a
coverage-guided atheris campaign (harness/sglang/campaign.py; `make fuzz ENGINE=sglang`).
`python -m harness.sglang sweep [--count N | --minutes M] [--seed S] [--mutant NAME] [--tree-core C] [--strategy S]
[--artifacts DIR]`: generated scenarios (harness/sglang/sweep.py), each one with findings written to DIR before it
is printed.

Exit 0: no finding; 1: findings; 2: bad input (the scenario, a field the wing cannot express, an unknown mutant;
message on stderr); 3: an unexpected harness error (never reported as an SGLang bug).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from harness.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_HARNESS_ERROR, EXIT_OK, BadInput


def _run_options(ap) -> None:
    ap.add_argument("--mutant", help="the planted bug to run with (harness/sglang/runtime.py MUTANTS)")
    ap.add_argument("--tree-core", default="rust", help="the radix tree's core: rust (SGLang's default) or python")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.sglang", description=__doc__.splitlines()[0])
    ap.add_argument("scenario", help="a scenario JSON file (docs/scenario-format.md), or a finding the sweep wrote "
                                     "(replayed as it ran: its mutant, tree core and strategy)")
    _run_options(ap)
    ap.add_argument("--strategy", default="extra_buffer", help="--mamba-radix-cache-strategy: extra_buffer or "
                                                               "no_buffer (page size 1)")
    ap.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    ap.add_argument("--summary", action="store_true", help="print what `hybrid-harness engines` compares (JSON)")
    return ap


def _print(trace, findings, as_json: bool, as_summary: bool = False) -> None:
    if as_summary:
        from harness.engines import summary

        print(json.dumps(summary(trace, findings)))
        return
    if as_json:
        from harness.sglang.sweep import findings_json

        print(json.dumps(findings_json(findings), indent=1))
        return
    for f in findings:
        print(f"FINDING {f.signature} step {f.step} request {f.request}: expected {f.expected}; actual {f.actual}")
    print(f"{len(findings)} finding(s), {trace.steps_run} steps, {len(trace.reads)} reads, "
          f"{len(trace.cache)} cache checks ({trace.vllm_version}, mutant {trace.mutant})")
    for oracle, why in sorted(trace.unjudged.items()):
        print(f"not judged: {oracle}: {why}", file=sys.stderr)


def _sweep_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.sglang sweep", description="generated scenarios, judged")
    ap.add_argument("--count", type=int, default=None, help="scenarios to run (default: until --minutes pass)")
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0, help="the first generator seed")
    _run_options(ap)
    ap.add_argument("--strategy", default="alternate", help="extra_buffer, no_buffer, or alternate (even seeds "
                                                            "extra_buffer, odd no_buffer)")
    ap.add_argument("--artifacts", default="artifacts/fuzz-sglang", help="where findings are written")
    return ap


def _sweep(argv) -> int:
    from pathlib import Path

    from harness.sglang.geometry import SglangRun
    from harness.sglang.sweep import run_sweep

    args = _sweep_parser().parse_args(argv)
    if args.count is None and args.minutes is None:
        args.minutes = 2.0
    started = time.monotonic()
    run = SglangRun(args.mutant, args.tree_core, "extra_buffer" if args.strategy == "alternate" else args.strategy)
    summary = run_sweep(args.seed, args.count, args.minutes, run.check(), Path(args.artifacts),
                        alternate=args.strategy == "alternate")
    elapsed = time.monotonic() - started
    print(f"sweep (SGLang wing, {args.tree_core} tree core, {args.strategy}, mutant {args.mutant}): seeds "
          f"{summary['seeds'][0]}..{summary['seeds'][1]}, {summary['ran']} replayed "
          f"({summary['speculative']} speculative) "
          f"({summary['ran'] / elapsed:.1f}/s), "
          f"{summary['not_expressible']} not expressible, {summary['with_findings']} with findings "
          f"{summary['signatures'] or ''}")
    return EXIT_FINDING if summary["with_findings"] else EXIT_OK


def _campaign(argv, worker: bool) -> int:
    from pathlib import Path

    from harness.sglang.campaign import run_campaign
    from harness.sglang.campaign import worker as fuzz_worker
    from harness.sglang.geometry import SglangRun

    ap = argparse.ArgumentParser(prog=f"python -m harness.sglang {'fuzz-worker' if worker else 'campaign'}",
                                 description="a coverage-guided atheris campaign (harness/sglang/campaign.py)")
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--seconds", type=int, default=None, help="(the worker's budget)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opening", type=int, default=64, help="generator scenarios run first, uninstrumented")
    ap.add_argument("--artifacts", default="artifacts/fuzz-sglang", help="where findings are written")
    _run_options(ap)
    args = ap.parse_args(argv)
    run = SglangRun(args.mutant, args.tree_core).check()
    if worker:
        fuzz_worker(run, Path(args.artifacts), args.seconds or round(60 * args.minutes), args.seed, args.opening)
        return EXIT_OK
    return run_campaign(run, Path(args.artifacts), args.minutes, args.seed, args.opening)


def _replay_file(args):
    """The scenario and run a file names: a scenario with the command line's run, or a sweep's finding with its own."""
    from pathlib import Path

    from harness.scenario import load_scenario, parse_scenario
    from harness.sglang.geometry import SglangRun
    from harness.sglang.sweep import FINDING_KIND

    try:
        doc = json.loads(Path(args.scenario).read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{args.scenario}: {exc}") from None
    if isinstance(doc, dict) and doc.get("kind") == FINDING_KIND:
        try:
            return parse_scenario(doc["scenario"]), SglangRun(**doc["run"])
        except (KeyError, TypeError) as exc:
            raise BadInput(f"{args.scenario}: a malformed SGLang finding ({exc!r})") from None
    return load_scenario(args.scenario), SglangRun(args.mutant, args.tree_core, args.strategy)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in ("sweep", "campaign", "fuzz-worker") else None
    args = None if command else _parser().parse_args(argv)
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # vLLM's process set-up leaves it empty; SGLang's fixture
        del os.environ["CUDA_VISIBLE_DEVICES"]  # imports test_utils.py, whose line 246 indexes its first character
    try:
        from harness.oracles import judge
        from harness.sglang.driver import replay

        if command == "sweep":
            return _sweep(argv[1:])
        if command:
            return _campaign(argv[1:], worker=command == "fuzz-worker")
        trace = replay(*_replay_file(args))
        findings = judge(trace)
    except BadInput as exc:
        print(f"bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception:  # a harness defect or an SGLang call the wing drives wrongly: never an SGLang finding
        traceback.print_exc()
        print("harness error (not an SGLang finding)", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    _print(trace, findings, args.json, args.summary)
    return EXIT_FINDING if findings else EXIT_OK


sys.exit(main())
