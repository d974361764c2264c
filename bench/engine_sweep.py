"""Engine-tier sweep with the mirrored tier beside it: rate, verdicts and differences on generated scenarios.

    taskset -c 0 .venv/bin/python bench/engine_sweep.py --count 300            # rate only (engine tier)
    .venv/bin/python bench/engine_sweep.py --count 200 --compare               # + symbolic verdicts, diff

Scenarios the engine tier cannot express (BadInput: EAGLE block drop; an explicit chunk vLLM's scheduler
would not schedule) are counted and skipped, not fatal as in `hybrid-harness sweep`. With --compare every
scenario also runs on the symbolic tier (`harness.engine.diff`): verdicts that differ are listed, and so is
every scenario whose Mamba rows, copies, batch order or states read differ.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.errors import BadInput, HarnessError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoints", choices=("on", "off"), default="on")
    ap.add_argument("--compare", action="store_true", help="also run the symbolic tier and diff the traces")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    from harness.replay import replay
    from harness.engine.diff import diff
    from harness.generate import random_scenario
    from harness.oracles import judge
    from harness.vllm_adapter import installed_version, load_vllm, supports_prefill_checkpoints

    vllm_import = load_vllm()
    import harness.engine.scheduler  # noqa: F401  (the engine's own imports, part of start-up)

    startup = time.perf_counter() - t0
    checkpoints = args.checkpoints == "on" and supports_prefill_checkpoints()
    bad: collections.Counter = collections.Counter()
    errors, with_findings, verdict_diffs, trace_diffs = [], [], [], []
    steps = ran = 0
    started = time.perf_counter()
    for seed in range(args.seed, args.seed + args.count):
        scenario = random_scenario(seed, checkpoints=checkpoints)
        try:
            trace = replay(scenario, None, "engine")
            findings = judge(trace)
            report = diff(scenario) if args.compare else None
        except BadInput as exc:
            bad[str(exc).split(":")[0]] += 1
            continue
        except HarnessError as exc:
            errors.append((seed, str(exc)))
            print(f"HARNESS ERROR seed {seed}: {exc}", file=sys.stderr)
            continue
        ran += 1
        steps += trace.steps_run
        if findings:
            with_findings.append((seed, sorted({f.signature for f in findings})))
        if report is not None and not report.same:
            kinds = sorted({d.kind for d in report.differences})
            trace_diffs.append((seed, kinds))
            if "verdict" in kinds or "exception" in kinds:
                verdict_diffs.append(seed)
                print(report.describe(4))
    elapsed = time.perf_counter() - started
    rate = "" if args.compare else f"; {ran / elapsed:.1f} scenarios/s, {steps / elapsed:.0f} steps/s"
    print(f"engine tier, vLLM {installed_version()}: seeds {args.seed}..{args.seed + args.count - 1}: {ran} ran, "
          f"{sum(bad.values())} not expressible {dict(bad)}, {len(errors)} harness errors, "
          f"{len(with_findings)} with findings{rate}; start-up {startup:.1f} s (vLLM import {vllm_import:.1f} s)")
    for seed, sigs in with_findings:
        print(f"  findings seed {seed}: {', '.join(sigs)}")
    if args.compare:
        kinds = collections.Counter(k for _, ks in trace_diffs for k in ks)
        print(f"  vs symbolic: {len(trace_diffs)} scenario(s) differ {dict(kinds)}; verdicts differ on {verdict_diffs}")
    return 3 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
