"""`hybrid-harness` command line: run a scenario (or a finding artifact) through the real allocator."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_HARNESS_ERROR, EXIT_OK, BadInput, HarnessError


def _cmd_run(args: argparse.Namespace) -> int:
    from harness.artifacts import finding_artifact, write_finding
    from harness.driver import replay
    from harness.mutants import apply_mutant, get_mutant
    from harness.oracles import judge
    from harness.scenario import load_scenario
    from harness.vllm_adapter import check_supported, installed_version

    scenario = load_scenario(args.scenario)
    version = installed_version()
    check_supported(version)
    if args.mutant:
        get_mutant(args.mutant)
        apply_mutant(args.mutant)
    trace = replay(scenario, args.mutant)
    findings = judge(trace)
    artifact_path = None
    if findings:
        stem = Path(args.scenario).stem
        artifact_path = write_finding(Path(args.artifacts), stem,
                                      finding_artifact(scenario, findings, version, args.mutant))
    if args.json:
        print(json.dumps({
            "scenario": str(args.scenario), "vllm_version": version, "mutant": args.mutant,
            "steps": trace.steps_run, "ok": not findings, "artifact": str(artifact_path) if artifact_path else None,
            "findings": [f.to_json() for f in findings],
        }, indent=1, default=str))
    else:
        label = f"vLLM {version}" + (f" + mutant {args.mutant}" if args.mutant else "")
        if not findings:
            print(f"OK  {args.scenario}: {trace.steps_run} steps on {label}; all oracles hold")
        else:
            print(f"FINDING  {args.scenario}: {len(findings)} finding(s) on {label} (artifact: {artifact_path})")
            for f in findings:
                print(f"  {f.headline()}")
                print(f"      {f.detail}")
    return EXIT_FINDING if findings else EXIT_OK


def _cmd_version(args: argparse.Namespace) -> int:
    from harness.vllm_adapter import check_supported, installed_version

    version = installed_version()
    check_supported(version)
    print(f"vllm {version}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybrid-harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="replay one scenario (or finding artifact); exit 0 ok, 1 finding, 2 bad input")
    run.add_argument("scenario", help="scenario JSON, or a finding artifact JSON")
    run.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    run.add_argument("--mutant", help="apply a named run-time patch of vLLM first")
    run.add_argument("--artifacts", default="artifacts", help="where finding artifacts are written (default: artifacts/)")
    run.set_defaults(func=_cmd_run)
    ver = sub.add_parser("vllm-version", help="print the installed vLLM release (exit 2 if unsupported)")
    ver.set_defaults(func=_cmd_version)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except HarnessError as exc:
        print(f"harness error (not a vLLM finding): {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR


if __name__ == "__main__":
    sys.exit(main())
