"""The body of the three atheris targets (fuzz/symbolic_target.py, model_target.py, engine_target.py), each of
which names its tier and calls `main`: bytes -> scenario -> the tier's replay -> oracles -> verdict.

The tier is the target's own, never the environment's (how bytes decode must not depend on it). What to replay
comes from the run configuration alone (`RunConfig.from_env`, the variables a campaign writes for its workers);
how to search from `SearchOptions.from_env` (below). The entry point is the only reader of either.

Coverage: the harness and vLLM's allocator package (vllm.v1.core; the engine tier also vLLM's worker code) are
instrumented function by function after import (harness/state_coverage.py instrument_modules), and only after a
campaign worker's opening sweep: the seed corpus, then up to N of the sweep's own scenarios, replayed
uninstrumented at the sweep's speed (harness/fuzzing.py opening_sweep). (atheris.instrument_imports would
instrument at import, and widens "vllm.v1.core" to the whole top-level "vllm" package: hundreds of modules and
~25 s of start-up for code the target never runs.)
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SearchOptions:
    """How a target searches (not what it replays): read from the environment a campaign writes."""

    artifacts: str = "artifacts/fuzz"  # HH_ARTIFACTS: kept findings
    keep_going: bool = False  # HH_KEEP_GOING: a campaign worker keeps a new finding and goes on
    # HH_OPENING_SWEEP="COUNT,SECONDS[,SEED_CORPUS_DIR]": a campaign worker's first start sweeps first
    opening_sweep: str = ""
    # HH_GENERATOR_SHARE: the share of the mutator's outputs that are fresh generator scenarios (the sweep's,
    # with a swarm mask), so a campaign samples at least as broadly as the sweep (0: genome inputs only)
    generator_share: float = 0.25
    # HH_SWEEP_FIRST: after the opening sweep, a worker's first N mutations are the sweep's own scenarios too
    # (fresh seeds, every feature on), now instrumented: they seed the corpus with the sweep's coverage
    sweep_first: int = 512
    state_coverage: bool = True  # HH_STATE_COVERAGE=off: Python edges only, no abstract-state edges

    @classmethod
    def from_env(cls, env=None) -> SearchOptions:
        env = os.environ if env is None else env
        return cls(artifacts=env.get("HH_ARTIFACTS") or cls.artifacts, keep_going=bool(env.get("HH_KEEP_GOING")),
                   opening_sweep=env.get("HH_OPENING_SWEEP", ""),
                   generator_share=float(env.get("HH_GENERATOR_SHARE", cls.generator_share)),
                   sweep_first=int(env.get("HH_SWEEP_FIRST", cls.sweep_first)),
                   state_coverage=env.get("HH_STATE_COVERAGE", "on") != "off")


def _flag(name: str) -> int | None:
    """A libFuzzer flag's integer value in this process's command line (-name=N), or None."""
    for arg in sys.argv[1:]:
        m = re.fullmatch(rf"-{name}=(\d+)", arg)
        if m:
            return int(m.group(1))
    return None


class FuzzTarget:
    """One tier's target: `test_one_input` and `custom_mutator` for atheris.Setup."""

    def __init__(self, tier: str, search: SearchOptions | None = None) -> None:
        from harness import fuzzing
        from harness.run_config import RunConfig

        self.search = search or SearchOptions.from_env()
        self.target = fuzzing.Target(RunConfig.from_env(tier=tier), artifacts=self.search.artifacts,
                                     keep_going=self.search.keep_going)
        self.tier = tier
        self.mutations = 0

    def opening_sweep(self) -> None:
        """Run the opening sweep (the seed corpus's files first), then take its time off libFuzzer's
        -max_total_time so the worker still ends when the campaign's budget does."""
        from harness import fuzzing

        count, seconds, *corpus = self.search.opening_sweep.split(",", 2)
        first = sorted(p for p in Path(corpus[0]).iterdir() if p.is_file()) if corpus and corpus[0] else []
        start = time.monotonic()
        ran = fuzzing.opening_sweep(self.target, _flag("seed") or 0, int(count), float(seconds), first)
        spent = time.monotonic() - start
        total = _flag("max_total_time")
        if total is not None:
            sys.argv = [a for a in sys.argv if not a.startswith("-max_total_time=")]
            sys.argv.append(f"-max_total_time={max(1, round(total - spent))}")
        print(f"HH opening sweep: {ran} scenarios in {spent:.1f} s", file=sys.stderr, flush=True)

    def instrument(self, atheris) -> None:
        from harness.state_coverage import StateCoverage, instrument_modules
        from harness.vllm_adapter import instrument_allocator

        if self.tier == "model":
            import harness.model_tier  # noqa: F401 - instrumented with the rest of the harness
        if self.tier == "engine":
            import harness.engine.scheduler  # noqa: F401 - instrumented with the rest of the harness
        instrument_modules(atheris.instrument_func, ("harness", "models"))
        # vllm.v1.core.* (allocator and Scheduler); the engine tier also runs vLLM's worker code
        instrument_allocator(atheris.instrument_func, worker=self.tier == "engine")
        if self.search.state_coverage:  # abstract allocator/runner transitions as extra edges
            self.target.on_trace = StateCoverage(atheris.instrument_func).feed

    def test_one_input(self, data: bytes) -> None:
        self.target(data)

    def custom_mutator(self, data: bytes, max_size: int, seed: int) -> bytes:
        import atheris

        from harness import genome

        rng = random.Random(seed)
        self.mutations += 1
        if self.mutations <= self.search.sweep_first:
            out = genome.generator_input(rng, mask=0)
        elif rng.random() < self.search.generator_share:
            out = genome.generator_input(rng)
        elif genome.is_generator_input(data):  # another seed, or the same scenario with other features switched off
            out = genome.generator_input(rng, None if rng.random() < 0.5 else genome.generator_fields(data)[0])
        elif len(data) < genome.MIN_FULL_INPUT:
            # libFuzzer starts from tiny inputs that decode to one bare request; start from a full-layout
            # random input instead (external hits, shared prefixes, several requests) and let coverage take over
            out = genome.random_bytes(rng)
        elif rng.random() < 0.5:
            out = genome.mutate(data, rng, self.target.budget)
        else:
            out = atheris.Mutate(data, max_size)
        out = out[:max_size]
        # `fuzz --checkpoints off`: the mutator never makes checkpoint geometries; decoding ignores the setting
        return genome.without_checkpoints(out) if self.target.no_checkpoints else out


def main(tier: str) -> None:
    """A target script's whole body: set up, sweep where a campaign asks, instrument, fuzz (or replay a file)."""
    import atheris

    from harness.vllm_env import prepare

    prepare()  # before anything imports vLLM
    target = FuzzTarget(tier)
    if target.search.opening_sweep and target.search.keep_going:
        target.opening_sweep()
    target.instrument(atheris)
    atheris.Setup(sys.argv, target.test_one_input, custom_mutator=target.custom_mutator)
    atheris.Fuzz()


__all__ = ["FuzzTarget", "SearchOptions", "main"]
