"""`python -m harness.sglang SCENARIO.json [--mutant NAME] [--json]`: replay on SGLang's own code, judge, print.

Exit 0: no finding; 1: findings; 2: bad input (the scenario, a field the wing cannot express, an unknown mutant;
message on stderr); 3: an unexpected harness error (never reported as an SGLang bug).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from harness.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_HARNESS_ERROR, EXIT_OK, BadInput


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.sglang", description=__doc__.splitlines()[0])
    ap.add_argument("scenario", help="a scenario JSON file (docs/scenario-format.md)")
    ap.add_argument("--mutant", help="the planted bug to run with (sglang-cow-source-dropped)")
    ap.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    return ap


def _print(trace, findings, as_json: bool) -> None:
    if as_json:
        print(json.dumps([{k: v for k, v in f.to_json().items() if k != "excerpt"} for f in findings], indent=1))
        return
    for f in findings:
        print(f"FINDING {f.signature} step {f.step} request {f.request}: expected {f.expected}; actual {f.actual}")
    print(f"{len(findings)} finding(s), {trace.steps_run} steps, {len(trace.reads)} reads, "
          f"{len(trace.cache)} cache checks ({trace.vllm_version}, mutant {trace.mutant})")
    for oracle, why in sorted(trace.unjudged.items()):
        print(f"not judged: {oracle}: {why}", file=sys.stderr)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # vLLM's process set-up leaves it empty; SGLang's fixture
        del os.environ["CUDA_VISIBLE_DEVICES"]  # imports test_utils.py, whose line 246 indexes its first character
    try:
        from harness.oracles import judge
        from harness.scenario import load_scenario
        from harness.sglang.driver import replay

        trace = replay(load_scenario(args.scenario), args.mutant)
        findings = judge(trace)
    except BadInput as exc:
        print(f"bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception:  # a harness defect or an SGLang call the wing drives wrongly: never an SGLang finding
        traceback.print_exc()
        print("harness error (not an SGLang finding)", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    _print(trace, findings, args.json)
    return EXIT_FINDING if findings else EXIT_OK


sys.exit(main())
