#!/usr/bin/env bash
# `make results [PART=all|bench|fast|mutants|verdicts|known]`: rewrite every committed table and plot from its
# command. Each file carries a provenance line (command, commit, machine, vLLM, date: harness/stamp.py).
# Seed-bug figures need a release that carries the seed bug (0.27.1: `make venv VLLM=0.27.1`, done here).
# Times on 2 cores: bench ~5 min, fast ~10 min, mutants ~35 min, verdicts ~55 min, known ~1 s (run parts in parallel on
# separate cores with CORE=N).
set -euo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
PY=${PY:-.venv/bin/python}
OLD=${OLD_VENV:-.venv-0.27.1}
CORE=${CORE:-0}
pin() { taskset -c "$CORE" "$@"; }
mkdir -p bench/results docs

if [[ $PART == all || $PART == bench ]]; then
  pin "$PY" -m pytest bench --benchmark-only --benchmark-json=bench/results/bench-0.33.0.json -q
  "$PY" bench/plot.py bench/results/bench-0.33.0.json --out bench/results
fi
if [[ $PART == all || $PART == fast ]]; then
  make venv VLLM=0.27.1 >/dev/null
  pin "$PY" bench/profile_replay.py --count 400 --out bench/results/profile_replay.md
  pin "$PY" bench/profile_replay.py --count 200 --tier model --out bench/results/profile_replay_model.md
  pin "$PY" bench/model_symptoms.py --count 100 --out bench/results/model_symptoms.md
  "$PY" bench/engine_throughput.py --table --core "$CORE" --out bench/results/engine_throughput.md
  pin "$OLD/bin/python" bench/trained_seed_symptoms.py --out bench/results/trained_seed_symptoms.md
  pin "$OLD/bin/python" bench/time_to_detect.py --trials 10 --budget 60 --out bench/results/time_to_detect.md
fi
if [[ $PART == all || $PART == mutants ]]; then
  pin "$PY" -m harness mutants check --budget-seconds 30 --out docs/mutants-check-30s.md || true  # exit 1 = a survivor, still a result
  # the worker-side mutants, each fuzzed for 2 minutes on the engine tier with its runner
  pin "$PY" -m harness mutants check --only v1-accepted-count-lost v1-stale-mamba-state-idx v2-postcopy-skipped \
    v2-stale-accepted-on-add v2-accepted-scattered-by-batch-row v2-async-trusts-scheduler-computed \
    v1-async-prev-row-as-current --budget-seconds 120 --trials 1 \
    --out bench/results/engine_worker_mutants.md || true
  pin "$PY" bench/time_to_detect.py --all-mutants --trials 3 --budget 20 --out docs/mutants-guided-vs-random.md
fi
if [[ $PART == all || $PART == known ]]; then
  "$PY" bench/known_table.py  # README.md's and docs/known-issues.md's tables, from harness/known.py
fi
if [[ $PART == all || $PART == verdicts ]]; then
  "$PY" bench/mutant_verdicts.py --trials 3 --minutes 2 --sweep 1000 --parallel 2
fi
