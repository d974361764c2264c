#!/usr/bin/env python3
"""atheris target, model tier: the symbolic target's decoder and mutator with smaller scenarios, replayed
with the tiny hybrid LM on real state tensors and judged against the uncached reference as well.

    python fuzz/model_target.py [libFuzzer flags] [CORPUS_DIR ...]   # fuzz
    python fuzz/model_target.py CRASH_FILE                          # replay one input
"""

import os
import runpy
from pathlib import Path

os.environ["HH_TIER"] = "model"
runpy.run_path(str(Path(__file__).with_name("symbolic_target.py")), run_name="__main__")
