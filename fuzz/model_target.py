#!/usr/bin/env python3
"""atheris target, model tier: bytes -> scenario -> the mirrored loop with the tiny hybrid LM on real state tensors,
judged against the uncached reference as well (smaller scenarios) -> oracles.

    python fuzz/model_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/model_target.py CRASH_FILE                          # replay one input

The body is harness/fuzz_target.py (imported as a module, so PyInstaller, ClusterFuzzLite's
compile_python_fuzzer, bundles it); the tier is this target's own, whatever HH_TIER says. What it replays comes
from the run configuration's variables (harness/run_config.py RunConfig.from_env), how it searches from
harness/fuzz_target.py SearchOptions.
"""

from harness.fuzz_target import main

if __name__ == "__main__":
    main("model")
