#!/usr/bin/env python3
"""atheris target, symbolic tier: bytes -> scenario -> real vLLM allocator + worker shadow -> oracles.

    python fuzz/symbolic_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/symbolic_target.py CRASH_FILE                          # replay one input
Environment: HH_ARTIFACTS (kept findings, default artifacts/fuzz), HH_MUTANT (mutant to apply).
vLLM's allocator (vllm.v1.core) and the harness are instrumented for coverage.
"""

import random
import sys

import atheris

with atheris.instrument_imports(include=["harness", "vllm.v1.core"]):
    from harness import fuzzing, genome
    from harness.vllm_adapter import load_vllm

    load_vllm()  # vLLM's allocator is imported (and instrumented) here

TARGET = fuzzing.Target()


def TestOneInput(data: bytes) -> None:
    TARGET(data)


def CustomMutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if rng.random() < 0.5:
        out = genome.mutate(data, rng, TARGET.budget)
    else:
        out = atheris.Mutate(data, max_size)
    return out[:max_size]


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput, custom_mutator=CustomMutator)
    atheris.Fuzz()
