"""Replay throughput and the share of replay time spent inside vLLM (not a test).

    python bench/profile_replay.py [--count 400] [--seed 0] [--tier symbolic|model]

Replays generated scenarios (the `hybrid-harness sweep` generator, prefill checkpoints off) on one core
and reports scenarios/s and steps/s, for the replay alone and with the oracles. The share inside vLLM is
measured with wall clocks around every `Allocator` method (the adapter is the only door into vLLM, each
method a thin wrapper of vLLM calls), so no profiler overhead skews it; a cProfile table follows for
where the rest goes.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import inspect
import pstats
import time

from harness.driver import replay as replay_tier
from harness.generate import random_scenario
from harness.oracles import judge
from harness.vllm_adapter import Allocator, installed_version

INSIDE = [0.0]


def _timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            INSIDE[0] += time.perf_counter() - t0
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print a cProfile table too")
    parser.add_argument("--tier", choices=("symbolic", "model"), default="symbolic")
    args = parser.parse_args()
    small = args.tier == "model"  # the model tier's generator: shorter prompts (as `sweep --tier model`)
    scenarios = [random_scenario(s, checkpoints=False, small=small) for s in range(args.seed, args.seed + args.count)]
    replay = functools.partial(replay_tier, tier=args.tier)
    replay(scenarios[0])  # warm imports

    t0 = time.perf_counter()
    steps = sum(replay(sc).steps_run for sc in scenarios)
    t_replay = time.perf_counter() - t0
    t0 = time.perf_counter()
    for sc in scenarios:
        judge(replay(sc))
    t_total = time.perf_counter() - t0

    # Time every adapter method (constructor included: it builds vLLM's KVCacheManager).
    for name, fn in list(vars(Allocator).items()):
        if inspect.isfunction(fn):
            setattr(Allocator, name, _timed(fn))
    t0 = time.perf_counter()
    for sc in scenarios:
        replay(sc)
    t_timed = time.perf_counter() - t0
    print(f"vLLM {installed_version()}, {args.tier} tier, {args.count} scenarios, {steps} steps, 1 core")
    print(f"replay only:       {args.count / t_replay:7.1f} scenarios/s  {steps / t_replay:8.0f} steps/s")
    print(f"replay + oracles:  {args.count / t_total:7.1f} scenarios/s  {steps / t_total:8.0f} steps/s")
    print(f"inside vLLM (adapter calls, wall clock): {100 * INSIDE[0] / t_timed:.1f} % of replay time")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(lambda: [replay(sc) for sc in scenarios])
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
