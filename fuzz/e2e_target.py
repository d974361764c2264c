#!/usr/bin/env python3
"""atheris target, e2e tier: bytes -> scenario (its e2e form) -> vLLM's whole engine with a real forward (vLLM's
CPU build, the tiny local models) -> outputs against the uncached reference and the oracles the engine's own state
lets the harness check.

    python fuzz/e2e_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/e2e_target.py CRASH_FILE                          # replay one input

The body is harness/fuzz_target.py; the tier is this target's own, whatever HH_TIER says.
"""

from harness.fuzz_target import main

if __name__ == "__main__":
    main("e2e")
