#!/usr/bin/env python3
"""atheris target, symbolic tier: bytes -> scenario -> real vLLM allocator + worker shadow -> oracles.

    python fuzz/symbolic_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/symbolic_target.py CRASH_FILE                          # replay one input
Environment (this entry point is the only reader): the run configuration's variables (HH_MUTANT, HH_MODEL,
HH_KNOWN_FIXES, HH_NO_CHECKPOINTS, HH_ENGINE_*: harness/run_config.py RunConfig.from_env, what a campaign
writes for its workers), HH_ARTIFACTS (kept findings, default artifacts/fuzz), HH_KEEP_GOING (campaign
workers), and for the search only HH_OPENING_SWEEP, HH_GENERATOR_SHARE, HH_SWEEP_FIRST and HH_STATE_COVERAGE. The tier is the target's own:
fuzz/model_target.py and fuzz/engine_target.py fix it.

Coverage: the harness and vLLM's allocator package (vllm.v1.core; the engine tier also vLLM's worker code) are
instrumented function by function after import (harness/state_coverage.py instrument_modules), and only after
a campaign worker's opening sweep (HH_OPENING_SWEEP, set by the campaign for a worker's first start): the seed
corpus, then up to N of the sweep's own scenarios, replayed uninstrumented at the sweep's speed
(harness/fuzzing.py opening_sweep).
(atheris.instrument_imports would instrument at import, and widens "vllm.v1.core" to the whole top-level
"vllm" package: hundreds of modules and ~25 s of start-up for code the target never runs.)
"""

import os
import random
import re
import sys
import time
from pathlib import Path

import atheris

# The tier is the target's, not the environment's: run as a script this is the symbolic target whatever
# HH_TIER says (how bytes decode must not depend on the environment); fuzz/model_target.py and
# fuzz/engine_target.py import this module after setting TARGET_TIER.
TIER = "symbolic" if __name__ == "__main__" else getattr(sys.modules["__main__"], "TARGET_TIER", "symbolic")

from harness import fuzzing, genome  # noqa: E402
from harness.run_config import RunConfig  # noqa: E402
from harness.state_coverage import StateCoverage, instrument_modules  # noqa: E402
from harness.vllm_adapter import instrument_allocator  # noqa: E402

if TIER == "model":
    import harness.model_tier  # noqa: F401 - instrumented with the rest of the harness
if TIER == "engine":
    import harness.engine.scheduler  # noqa: F401 - instrumented with the rest of the harness

TARGET = fuzzing.Target(RunConfig.from_env(tier=TIER), artifacts=os.environ.get("HH_ARTIFACTS") or "artifacts/fuzz",
                        keep_going=bool(os.environ.get("HH_KEEP_GOING")))


def _flag(name: str) -> int | None:
    """A libFuzzer flag's integer value in this process's command line (-name=N), or None."""
    for arg in sys.argv[1:]:
        m = re.fullmatch(rf"-{name}=(\d+)", arg)
        if m:
            return int(m.group(1))
    return None


def _opening_sweep(spec: str) -> None:
    """HH_OPENING_SWEEP="COUNT,SECONDS[,SEED_CORPUS_DIR]": run the opening sweep (the seed corpus's files
    first), then take its time off libFuzzer's -max_total_time so the worker still ends when the campaign's
    budget does."""
    count, seconds, *corpus = spec.split(",", 2)
    first = sorted(p for p in Path(corpus[0]).iterdir() if p.is_file()) if corpus and corpus[0] else []
    start = time.monotonic()
    ran = fuzzing.opening_sweep(TARGET, _flag("seed") or 0, int(count), float(seconds), first)
    spent = time.monotonic() - start
    total = _flag("max_total_time")
    if total is not None:
        sys.argv = [a for a in sys.argv if not a.startswith("-max_total_time=")]
        sys.argv.append(f"-max_total_time={max(1, round(total - spent))}")
    print(f"HH opening sweep: {ran} scenarios in {spent:.1f} s", file=sys.stderr, flush=True)


if os.environ.get("HH_OPENING_SWEEP") and TARGET.keep_going:
    _opening_sweep(os.environ["HH_OPENING_SWEEP"])
instrument_modules(atheris.instrument_func, ("harness", "models"))
# vllm.v1.core.* (allocator and Scheduler); the engine tier also runs vLLM's worker code
instrument_allocator(atheris.instrument_func, worker=TIER == "engine")
# abstract allocator/runner transitions as extra edges (HH_STATE_COVERAGE=off: Python edges only)
if os.environ.get("HH_STATE_COVERAGE", "on") != "off":
    TARGET.on_trace = StateCoverage(atheris.instrument_func).feed
# a share of the mutator's outputs are fresh generator scenarios (the sweep's, with a swarm mask): the campaign
# samples at least as broadly as the sweep (HH_GENERATOR_SHARE=0: genome inputs only)
GENERATOR_SHARE = float(os.environ.get("HH_GENERATOR_SHARE", "0.25"))
# after the opening sweep, a worker's first SWEEP_FIRST mutations are the sweep's own scenarios too (fresh
# seeds, every feature on), now instrumented: they seed the corpus with the sweep's coverage; then the mix
# above, with coverage guidance for the long tail (HH_SWEEP_FIRST=0: mix from the start)
SWEEP_FIRST = int(os.environ.get("HH_SWEEP_FIRST", "512"))
_MUTATIONS = [0]


def TestOneInput(data: bytes) -> None:
    TARGET(data)


def CustomMutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    _MUTATIONS[0] += 1
    if _MUTATIONS[0] <= SWEEP_FIRST:
        out = genome.generator_input(rng, mask=0)
    elif rng.random() < GENERATOR_SHARE:
        out = genome.generator_input(rng)
    elif genome.is_generator_input(data):  # another seed, or the same scenario with other features switched off
        out = genome.generator_input(rng, None if rng.random() < 0.5 else genome.generator_fields(data)[0])
    elif len(data) < genome.MIN_FULL_INPUT:
        # libFuzzer starts from tiny inputs that decode to one bare request; start from a full-layout
        # random input instead (external hits, shared prefixes, several requests) and let coverage take over
        out = genome.random_bytes(rng)
    elif rng.random() < 0.5:
        out = genome.mutate(data, rng, TARGET.budget)
    else:
        out = atheris.Mutate(data, max_size)
    out = out[:max_size]
    # `fuzz --checkpoints off`: the mutator never makes checkpoint geometries; decoding ignores the setting
    return genome.without_checkpoints(out) if TARGET.no_checkpoints else out


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput, custom_mutator=CustomMutator)
    atheris.Fuzz()
