#!/usr/bin/env python3
"""atheris target, symbolic tier: bytes -> scenario -> the real vLLM allocator + the worker shadow (the mirrored
scheduler loop) -> oracles.

    python fuzz/symbolic_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/symbolic_target.py CRASH_FILE                          # replay one input

The body is harness/fuzz_target.py (imported as a module, so PyInstaller, ClusterFuzzLite's
compile_python_fuzzer, bundles it); the tier is this target's own, whatever HH_TIER says. What it replays comes
from the run configuration's variables (harness/run_config.py RunConfig.from_env), how it searches from
harness/fuzz_target.py SearchOptions.
"""

from harness.fuzz_target import main

if __name__ == "__main__":
    main("symbolic")
