"""Replay throughput and the share of replay time spent inside vLLM (not a test).

    python bench/measure/profile_replay.py [--count 400] [--seed 0] [--tier symbolic|model]

Replays generated scenarios (the `hybrid-harness sweep` generator, prefill checkpoints where the release
has them) on one core and reports scenarios/s and steps/s, for the replay alone and with the oracles. The
share inside vLLM is measured with wall clocks around the adapter methods that make the calls vLLM's
Scheduler and worker make (`VLLM_CALLS`: each a thin wrapper of vLLM code); the adapter's introspection for
the oracles (block tables, cache keys, pool walk) is timed apart, so neither is counted as vLLM's work and no
profiler overhead skews it. A cProfile table follows with --profile.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import inspect
import pstats
import time
from pathlib import Path

from harness.generate import random_scenario
from harness.oracles import judge
from harness.replay import replay as replay_tier
from harness.run_config import RunConfig
from harness.vllm_adapter import Allocator, installed_version, supports_prefill_checkpoints

# Adapter methods that are vLLM's own work as the engine does it (KVCacheManager construction and calls,
# Request construction and token appends, the Scheduler's chunk rule, the worker-side checkpoint formulas)
VLLM_CALLS = ("__init__", "make_request", "split", "lookup", "truncate", "allocate", "cache_blocks", "free",
              "new_step", "take_copies", "release_retained", "take_zero_ids", "append_output",
              "checkpoint_position", "checkpoint_valid")
# Adapter methods that only read vLLM's state for the harness (trace tables, oracles)
INTROSPECTION = ("block_ids", "holds_blocks", "cached_mamba_entries", "pool_snapshot")
TIMED = {"vllm": 0.0, "introspection": 0.0}


def _timed(fn, bucket: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMED[bucket] += time.perf_counter() - t0
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print a cProfile table too")
    parser.add_argument("--tier", choices=("symbolic", "model"), default="symbolic")
    parser.add_argument("--out", help="also write the figures (with their provenance) to this Markdown file")
    args = parser.parse_args()
    small = args.tier == "model"  # the model tier's generator: shorter prompts (as `sweep --tier model`)
    checkpoints = supports_prefill_checkpoints()
    scenarios = [random_scenario(s, checkpoints=checkpoints, small=small) for s in range(args.seed, args.seed + args.count)]
    replay = functools.partial(replay_tier, config=RunConfig(tier=args.tier))
    replay(scenarios[0])  # warm imports

    t0 = time.perf_counter()
    steps = sum(replay(sc).steps_run for sc in scenarios)
    t_replay = time.perf_counter() - t0
    t0 = time.perf_counter()
    for sc in scenarios:
        judge(replay(sc))
    t_total = time.perf_counter() - t0

    # Time vLLM's calls and the harness's introspection apart (methods do not call each other)
    for bucket, names in (("vllm", VLLM_CALLS), ("introspection", INTROSPECTION)):
        for name in names:
            fn = vars(Allocator).get(name)
            if fn is None:
                continue
            if isinstance(fn, staticmethod):
                setattr(Allocator, name, staticmethod(_timed(fn.__func__, bucket)))
            else:
                setattr(Allocator, name, _timed(fn, bucket))
    t0 = time.perf_counter()
    for sc in scenarios:
        replay(sc)
    t_timed = time.perf_counter() - t0
    lines = [f"vLLM {installed_version()}, {args.tier} tier, {args.count} scenarios, {steps} steps, 1 core",
             f"replay only:       {args.count / t_replay:7.1f} scenarios/s  {steps / t_replay:8.0f} steps/s",
             f"replay + oracles:  {args.count / t_total:7.1f} scenarios/s  {steps / t_total:8.0f} steps/s",
             f"inside vLLM (its own calls, wall clock): {100 * TIMED['vllm'] / t_timed:.1f} % of replay time; "
             f"harness introspection of vLLM's state: {100 * TIMED['introspection'] / t_timed:.1f} %"]
    print("\n".join(lines))
    if args.out:
        from harness.stamp import stamp

        command = f"taskset -c 0 python bench/measure/profile_replay.py --count {args.count} --tier {args.tier}"
        Path(args.out).write_text(f"# Replay profile\n\n{stamp(command)}\n\n```\n" + "\n".join(lines) + "\n```\n")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(lambda: [replay(sc) for sc in scenarios])
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
