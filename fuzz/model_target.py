#!/usr/bin/env python3
"""atheris target, model tier: the symbolic target's decoder and mutator with smaller scenarios, replayed
with the tiny hybrid LM on real state tensors and judged against the uncached reference as well.

    python fuzz/model_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/model_target.py CRASH_FILE                          # replay one input

The shared body (instrumented imports, the Target, TestOneInput, CustomMutator) is imported from
symbolic_target.py as a module, not run from a path next to __file__: PyInstaller (ClusterFuzzLite's
compile_python_fuzzer) follows the import and bundles it, so the onefile bundle runs on its own.
"""

import sys

# Fixed here, before symbolic_target builds its Target: this target always decodes with the model tier's
# budget, whatever the caller's environment says.
TARGET_TIER = "model"  # read by symbolic_target (the tier is the target's, whatever HH_TIER says)

import atheris  # noqa: E402

import symbolic_target  # noqa: E402  (fuzz/ is on sys.path: the script's directory, or the bundle)

TestOneInput = symbolic_target.TestOneInput
CustomMutator = symbolic_target.CustomMutator

if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput, custom_mutator=CustomMutator)
    atheris.Fuzz()
