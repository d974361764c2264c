#!/usr/bin/env python3
"""atheris target, engine tier: the symbolic target's decoder and mutator, decoding only the geometries vLLM
builds in align mode, replayed on vLLM's own Scheduler and KV connector with the engine worker the
environment picks (HH_ENGINE_RUNNER etc., harness/run_config.py; recorded in each kept finding).

    python fuzz/engine_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/engine_target.py CRASH_FILE                          # replay one input

Coverage also instruments vLLM's worker code (vllm.v1.worker.*). The shared body is imported from
symbolic_target.py as a module (see fuzz/model_target.py for why).
"""

import sys

# Fixed here, before symbolic_target builds its Target: this target always decodes with the engine tier's
# budget, whatever the caller's environment says.
TARGET_TIER = "engine"  # read by symbolic_target (the tier is the target's, whatever HH_TIER says)

import atheris  # noqa: E402

import symbolic_target  # noqa: E402  (fuzz/ is on sys.path: the script's directory, or the bundle)

TestOneInput = symbolic_target.TestOneInput
CustomMutator = symbolic_target.CustomMutator

if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput, custom_mutator=CustomMutator)
    atheris.Fuzz()
