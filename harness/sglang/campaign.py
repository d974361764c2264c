"""`python -m harness.sglang campaign`: a coverage-guided atheris campaign on the SGLang wing, and its worker.

The campaign (`run_campaign`) starts one worker process (`python -m harness.sglang fuzz-worker`, atheris's
libFuzzer loop, which ends the process itself) for the time asked and then reads what the worker kept, so the exit
code is the campaign's: 0 nothing kept, 1 findings kept (each written to disk before it is printed), 3 the worker
failed. Inputs are the project's genome (harness/genome.py: the same bytes the vLLM campaigns mutate, decoded with
loads that fail) projected onto what the wing expresses (harness/sglang/sweep.py `decoded`); the Mamba strategy
is the parity of the input's CRC-32 (no_buffer when odd), so the search reaches both (a byte of the input would
not: every generator input starts with the same magic). The first 2 x `opening`
inputs are the generator's scenarios (a sweep, instrumented), then libFuzzer's mutations, half structure-aware
(`genome.mutate`), some fresh generator scenarios. Coverage: SGLang's radix cache, pools, scheduler-side
managers and the wing itself, instrumented function by function after SGLang is imported (the Rust tree core is
native code: not instrumented). A kept finding is one whose set of signatures is new to this worker.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path

from harness.artifacts import write_json_atomic
from harness.errors import EXIT_FINDING, EXIT_HARNESS_ERROR, EXIT_OK, BadInput
from harness.sglang.geometry import SglangRun
from harness.sglang.sweep import decoded, finding_record

# what libFuzzer's edges come from (packages, instrumented after import: harness/state_coverage.py)
COVERED = ("harness.sglang", "sglang.srt.mem_cache", "sglang.srt.managers.schedule_batch",
           "sglang.srt.managers.schedule_policy", "sglang.srt.managers.scheduler",
           "sglang.srt.managers.scheduler_components")
GENERATOR_SHARE = 0.2


class Target:
    """bytes -> scenario -> SGLang -> oracles; a new set of signatures is written to `artifacts` and printed."""

    def __init__(self, run: SglangRun, artifacts: Path) -> None:
        self.run, self.artifacts, self.kept, self.inputs = run, artifacts, set(), 0
        self.started = time.monotonic()

    def __call__(self, data: bytes) -> None:
        from harness.oracles import judge
        from harness.sglang.driver import replay

        self.inputs += 1
        try:
            scenario = decoded(data)
            run = replace(self.run, strategy="no_buffer") if zlib.crc32(data) % 2 else self.run
            findings = judge(replay(scenario, run))
        except BadInput:  # a geometry the wing refuses (a Mamba block off the page grid): not SGLang's
            return
        signatures = frozenset(f.signature for f in findings)
        if not findings or signatures in self.kept:
            return
        self.kept.add(signatures)
        name = f"finding-{len(self.kept)}-{hash(signatures) & 0xFFFFFF:06x}.json"
        path = write_json_atomic(self.artifacts / name, finding_record(scenario, run, findings, input=data.hex()))
        print(f"HH finding after {self.inputs} inputs (+{time.monotonic() - self.started:.1f} s): "
              f"{', '.join(sorted(signatures))} ({path})", flush=True)


def _mutator(opening: int):
    from harness import genome

    count = [0]

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        import atheris

        rng = random.Random(seed)
        count[0] += 1
        if count[0] <= opening or rng.random() < GENERATOR_SHARE:  # the generator's scenarios: a sweep's breadth
            out = genome.generator_input(rng, mask=0)
        elif len(data) < genome.MIN_FULL_INPUT:
            out = genome.random_bytes(rng)
        elif rng.random() < 0.5:
            out = genome.mutate(data, rng)
        else:
            out = atheris.Mutate(data, max_size)
        return out[:max_size]
    return custom_mutator


def worker(run: SglangRun, artifacts: Path, seconds: int, seed: int, opening: int) -> None:
    """One libFuzzer loop for `seconds` (atheris ends the process)."""
    import atheris

    from harness.genome import generator_input
    from harness.state_coverage import instrument_modules

    target = Target(run, artifacts)
    for i in range(opening):  # uninstrumented first: SGLang imported and warm, and the sweep's own seeds
        target(generator_input(random.Random(seed + i), mask=0))
    functions = instrument_modules(atheris.instrument_func, COVERED)
    print(f"HH worker: {opening} opening inputs, {functions} functions instrumented", file=sys.stderr, flush=True)
    atheris.Setup([sys.argv[0], f"-max_total_time={seconds}", f"-seed={seed}", "-rss_limit_mb=0",
                   "-print_final_stats=1"], target, custom_mutator=_mutator(opening))
    atheris.Fuzz()


def run_campaign(run: SglangRun, artifacts: Path, minutes: float, seed: int, opening: int = 64) -> int:
    """A worker for `minutes`, then its kept findings: exit 0 none, 1 some, 3 the worker failed."""
    artifacts.mkdir(parents=True, exist_ok=True)
    before = set(artifacts.glob("finding-*.json"))
    started = time.monotonic()
    cmd = [sys.executable, "-m", "harness.sglang", "fuzz-worker", "--seconds", str(max(1, round(60 * minutes))),
           "--seed", str(seed), "--opening", str(opening), "--artifacts", str(artifacts),
           "--tree-core", run.tree_core, *(["--mutant", run.mutant] if run.mutant else [])]
    worker_run = subprocess.run(cmd, check=False)
    kept = sorted(set(artifacts.glob("finding-*.json")) - before)
    signatures = sorted({f["signature"] for p in kept for f in json.loads(p.read_text())["findings"]})
    print(f"campaign (SGLang wing, {run.describe()}): {time.monotonic() - started:.0f} s, {len(kept)} kept "
          f"finding(s) {signatures or ''} in {artifacts}")
    if worker_run.returncode != 0 and not kept:
        print(f"the campaign's worker exited {worker_run.returncode} (a harness error, not an SGLang finding)",
              file=sys.stderr)
        return EXIT_HARNESS_ERROR
    return EXIT_FINDING if kept else EXIT_OK
