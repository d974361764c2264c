#!/usr/bin/env bash
# Build the fuzz targets the way ClusterFuzzLite does -- OSS-Fuzz's compile_python_fuzzer runs
#   pyinstaller --distpath $OUT --workpath $SRC/pyfuzzworkdir/NAME --onefile --name NAME.pkg [FLAGS] TARGET.py
# with FLAGS from .clusterfuzzlite/pyinstaller.flags, as .clusterfuzzlite/build.sh passes them -- then run the
# bundles, not the checkout, on crash files and check each one's exit status and printed finding.
#
#   tools/pyinstaller_check.sh                  # both targets (~10 min build each on 2 cores, ~730 MB each)
#   tools/pyinstaller_check.sh symbolic_target  # one
#   SKIP_BUILD=1 tools/pyinstaller_check.sh     # replay with the bundles already in $WORK/out
#
# PY (default .venv/bin/python; PyInstaller pinned below is installed into it when missing), WORK (default
# /tmp/hh-pyinstaller: build folders, bundles, replay logs; nothing is written into the checkout).
# Exit 0 when every check passed; docs/clusterfuzzlite.md records a run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
WORK=${WORK:-/tmp/hh-pyinstaller}
PYINSTALLER=6.22.3
OUT=$WORK/out
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(symbolic_target model_target)
mkdir -p "$OUT" "$WORK/logs"
fail=0

if [ -z "${SKIP_BUILD:-}" ]; then
  if [ "$("$PY" -m PyInstaller --version 2>/dev/null)" != "$PYINSTALLER" ]; then
    "$PY" -m pip install -q "pyinstaller==$PYINSTALLER" || exit 1
  fi
  # build.sh's `pip install .`: harness/ and models/ as installed packages (PyInstaller does not see an
  # editable install's import hook), into a scratch folder passed with --paths
  # (built from a copy, so that setuptools' build/ folder is not written into the checkout)
  rm -rf "$WORK/site" "$WORK/pkgsrc" && mkdir -p "$WORK/pkgsrc"
  cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/harness" "$ROOT/models" "$WORK/pkgsrc/"
  "$PY" -m pip install -q --no-deps --no-build-isolation --target "$WORK/site" "$WORK/pkgsrc" || exit 1
  mapfile -t flags < <(grep -v '^#' "$ROOT/.clusterfuzzlite/pyinstaller.flags" | grep .)
  for name in "${targets[@]}"; do
    # a fresh copy of fuzz/*.py per target, as build.sh does
    src=$WORK/src/$name
    rm -rf "$src" "$WORK/pyfuzzworkdir/$name" && mkdir -p "$src" && cp "$ROOT"/fuzz/*.py "$src/"
    echo "== build $name ($(date -u +%H:%M:%S))"
    start=$(date +%s)
    (cd "$WORK" && "$PY" -m PyInstaller --noconfirm --distpath "$OUT" --workpath "$WORK/pyfuzzworkdir/$name" \
       --specpath "$WORK" --onefile --name "$name.pkg" --paths "$WORK/site" "${flags[@]}" "$src/$name.py") \
      > "$WORK/logs/build-$name.log" 2>&1
    rc=$?
    echo "   exit $rc in $(( $(date +%s) - start )) s; $(du -h "$OUT/$name.pkg" 2>/dev/null | cut -f1) $OUT/$name.pkg"
    [ $rc -eq 0 ] || { tail -20 "$WORK/logs/build-$name.log"; exit 1; }
  done
fi

# check NAME TARGET EXPECT_EXIT EXPECT_TEXT FILE [ENV=VALUE ...]
#   EXPECT_EXIT: 0 or "nonzero"; EXPECT_TEXT: a string the output (or the kept finding.json) must hold
check() {
  local label=$1 target=$2 want=$3 text=$4 file=$5; shift 5
  local art log rc ok
  art=$(mktemp -d "$WORK/art.XXXX"); log=$WORK/logs/$label.log
  (cd "$WORK" && env HH_ARTIFACTS="$art" "$@" "$OUT/$target.pkg" "$file") > "$log" 2>&1
  rc=$?
  ok=1
  if [ "$want" = nonzero ]; then [ $rc -ne 0 ] || ok=0; else [ $rc -eq "$want" ] || ok=0; fi
  grep -qF -- "$text" "$log" $art/finding-*/finding.json 2>/dev/null || ok=0
  printf '%-34s %-16s exit %-3s (want %s) %s\n' "$label" "$target" "$rc" "$want" "$([ $ok = 1 ] && echo PASS || echo FAIL)"
  grep -m1 -E '^(Finding|HarnessFailure|[A-Za-z]*Error)' "$log" | cut -c1-160 | sed 's/^/    /'
  [ $ok = 1 ] || fail=1
}

SEED=$ROOT/fuzz/corpus/symbolic/seed-external-hit-same-block
MUT=HH_MUTANT=seed-unmarked-early-return  # "mutant" below
for name in "${targets[@]}"; do
  [ -f "$OUT/$name.pkg" ] || { echo "missing $OUT/$name.pkg"; fail=1; continue; }
  # 1. libFuzzer itself, inside the bundle, fuzzes (custom mutator, vLLM instrumented) from an empty corpus
  #    with a mutant applied until it writes a crash file
  rm -rf "$WORK/fuzz-$name" && mkdir -p "$WORK/fuzz-$name/corpus"
  art=$(mktemp -d "$WORK/art.XXXX")
  (cd "$WORK/fuzz-$name" && env HH_ARTIFACTS="$art" $MUT "$OUT/$name.pkg" -runs=2000 -seed=1 corpus) \
    > "$WORK/logs/fuzz-$name.log" 2>&1
  rc=$?
  crash=$(ls "$WORK/fuzz-$name"/crash-* 2>/dev/null | head -1)
  printf '%-34s %-16s exit %-3s %s\n' "fuzz, empty corpus, mutant" "$name" "$rc" \
    "$([ -n "$crash" ] && echo "wrote $(basename "$crash") PASS" || echo "no crash file FAIL")"
  [ -n "$crash" ] || fail=1
  # 2. that crash file replays through the bundle: non-zero with the finding, every time
  if [ -n "$crash" ]; then
    check "replay that crash file, mutant" "$name" nonzero "Finding: new:" "$crash" $MUT
    check "replay it again, mutant" "$name" nonzero "Finding: new:" "$crash" $MUT
  fi
  # 3. the seed scenario with the mutant: the live-column finding
  check "seed scenario, mutant" "$name" nonzero "[live-column]" "$SEED" $MUT
  # 4. stock vLLM 0.33.0: the seed scenario is clean
  check "seed scenario, stock" "$name" 0 "Executed" "$SEED"
done
# 5. the checked-in regressions (symbolic target): known stock issues, kept as KNOWN, exit 0
if [[ " ${targets[*]} " == *" symbolic_target "* ]] && [ -f "$OUT/symbolic_target.pkg" ]; then
  check "checkpoint-midblock-start" symbolic_target 0 '"checkpoint-midblock-start"' \
    "$ROOT/fuzz/regressions/checkpoint-midblock-start"
  check "sync-external-admission-under" symbolic_target 0 '"sync-external-admission-undercount"' \
    "$ROOT/fuzz/regressions/sync-external-admission-undercount"
fi
echo "logs: $WORK/logs"
exit $fail
