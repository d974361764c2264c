"""Async against synchronous scheduling on vLLM's V2 (or V1) runner: the same generations, the same verdicts.

    taskset -c 0 .venv/bin/python tools/async_differential.py --count 500 [--seed 0] [--mutant NAME] [--against v1]
    taskset -c 0 .venv/bin/python tools/async_differential.py --runner v1 --count 500

Each generated scenario replays twice on the engine tier with vLLM's V2 runner: under async scheduling
(`EngineCore.step_with_batch_queue`, the next step scheduled before the previous step's tokens are known) and
synchronously (`EngineCore.step`). Scheduling must not change what a request generates, so every request's
tokens must agree; where one run is cut short the difference is explained only by an abort event (events
are step-indexed) or a vLLM exception ending that replay, with the tokens agreeing up to the shorter run. The
oracles' signatures are compared too (a bug only one loop reaches shows there: `--mutant
v2-async-trusts-scheduler-computed`). Scenarios vLLM refuses (BadInput) are counted and skipped. `--against v1`
compares with vLLM's V1 runner instead (the same generations whichever runner runs them). `--runner v1`: both
sides on vLLM's V1 runner, which follows async scheduling without drafts (scenarios with drafts run synchronously
on both sides; prefill checkpoints off: the V1 worker does not simulate them). Exit 1 when
a difference is unexplained (a bug on one side, the harness's included: find which), 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness.engine  # noqa: E402,F401  (the engine environment before vLLM is imported: Triton for V2)
from harness.errors import BadInput  # noqa: E402


def _run(scenario, mutant, scheduling: str, runner: str = "v2"):
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import EngineDriver
    from harness.oracles import judge

    from harness.patching import patched
    from harness.run_config import RunConfig

    driver = EngineDriver(scenario, mutant, EngineOptions(runner=runner, async_scheduling=scheduling))
    with patched(RunConfig(mutant=mutant)):  # the driver is vLLM's loop itself: the mutant goes on around it
        trace = driver.run()
    tokens = {rid: list(r.vreq.all_token_ids) for rid, r in driver.reqs.items()}
    return driver.asynchronous, tokens, sorted({f.signature for f in judge(trace)})


def _explained(scenario, on, off) -> str | None:
    """Why two generations may differ although both loops are right: each request's tokens agree up to the
    shorter one, and either an `abort` event (scenario events are step-indexed; under async scheduling a step
    has processed one step's output fewer) or a vLLM exception that ended one replay cut it short."""
    if any(a[:min(len(a), len(b))] != b[:min(len(a), len(b))] for a, b in
           ((on[1][rid], off[1][rid]) for rid in on[1])):
        return None
    if any(e.kind == "abort" for e in scenario.events):
        return "abort at a fixed step"
    if any(sig.startswith("vllm-exception") for sig in on[2] + off[2]):
        return "a vLLM exception ended one replay"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mutant", default=None)
    ap.add_argument("--runner", choices=("v2", "v1"), default="v2", help="the async side's runner")
    ap.add_argument("--against", choices=("sync", "v1"), default="sync",
                    help="the other side: V2 synchronously (default), or vLLM's V1 runner (synchronous; prefill "
                    "checkpoints off: the V1 worker does not simulate them)")
    args = ap.parse_args(argv)

    from harness.generate import random_scenario
    from harness.vllm_adapter import installed_version, supports_prefill_checkpoints

    checkpoints = supports_prefill_checkpoints() and args.against == "sync" and args.runner == "v2"
    other_runner = args.runner if args.against == "sync" else "v1"
    tokens_differ, explained, verdicts_differ, skipped, ran, asynchronous = [], [], [], 0, 0, 0
    started = time.perf_counter()
    for seed in range(args.seed, args.seed + args.count):
        scenario = random_scenario(seed, checkpoints=checkpoints)
        try:
            on = _run(scenario, args.mutant, "auto", args.runner)
            off = _run(scenario, args.mutant, "off", other_runner)
        except BadInput as exc:
            skipped += 1
            print(f"seed {seed}: skipped: {exc}", flush=True)
            continue
        ran += 1
        asynchronous += on[0]
        if on[1] != off[1]:
            why = _explained(scenario, on, off)
            (explained if why else tokens_differ).append(seed)
            print(f"seed {seed}: tokens differ ({why or 'UNEXPLAINED'}): async {on[1]} sync {off[1]}", flush=True)
        if on[2] != off[2]:
            verdicts_differ.append(seed)
            print(f"seed {seed}: verdicts differ: async {on[2]} sync {off[2]}", flush=True)
    elapsed = time.perf_counter() - started
    other = f"{args.runner.upper()} synchronously" if args.against == "sync" else "the V1 runner (synchronous)"
    print(f"async differential, vLLM {installed_version()}, {args.runner.upper()} runner against {other}"
          f"{' + ' + args.mutant if args.mutant else ''}: "
          f"{ran} scenarios (seeds {args.seed}..{args.seed + args.count - 1}, {skipped} skipped, {asynchronous} ran "
          f"async as vLLM decided), tokens differ in {len(tokens_differ) + len(explained)} ({len(explained)} explained: "
          f"an abort event at a fixed step, or a vLLM exception that ends one replay; {len(tokens_differ)} unexplained), "
          f"verdicts differ in {len(verdicts_differ)}; {elapsed:.1f} s")
    return 1 if tokens_differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
