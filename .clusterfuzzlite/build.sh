#!/bin/bash -eu
# Build every fuzz/*_target.py with OSS-Fuzz's Python helper; ship its seed corpus and dictionary.
cd "$SRC/hybrid-harness"
python3 -m pip install --no-deps --no-build-isolation .
for target in fuzz/*_target.py; do
  name=$(basename "$target" .py)
  compile_python_fuzzer "$target" --add-data "fuzz:fuzz"
  kind=${name%_target}
  if [ -d "fuzz/corpus/$kind" ]; then
    (cd "fuzz/corpus/$kind" && zip -q "$OUT/${name}_seed_corpus.zip" ./*)
  fi
  if [ -f "fuzz/$kind.dict" ]; then
    cp "fuzz/$kind.dict" "$OUT/$name.dict"
  fi
done
