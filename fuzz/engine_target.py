#!/usr/bin/env python3
"""atheris target, engine tier: bytes -> scenario -> vLLM's own Scheduler and KV connector with the engine worker
the environment picks (HH_ENGINE_RUNNER etc.); coverage also instruments vLLM's worker code -> oracles.

    python fuzz/engine_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/engine_target.py CRASH_FILE                          # replay one input

The body is harness/fuzz_target.py (imported as a module, so PyInstaller, ClusterFuzzLite's
compile_python_fuzzer, bundles it); the tier is this target's own, whatever HH_TIER says. What it replays comes
from the run configuration's variables (harness/run_config.py RunConfig.from_env), how it searches from
harness/fuzz_target.py SearchOptions.
"""

from harness.fuzz_target import main

if __name__ == "__main__":
    main("engine")
