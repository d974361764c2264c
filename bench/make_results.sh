#!/usr/bin/env bash
# `make results [PART=all|bench|fast|mutants|banks|peer|verdicts|known|upstream|e2e|scheduler|sglang]`: rewrite every file in bench/results/
# (and the known-issue tables of README.md and docs/known-issues.md) from its command. Each file carries a
# provenance line (command, commit, machine, vLLM, date: harness/stamp.py). Every file in bench/results/ is written
# by a command below (tests/test_results_layout.py checks the list); dated reports that no one command rewrites
# (campaign notes across releases and commits) are in bench/reports/ instead.
# Seed-bug figures need a release that carries the seed bug (0.27.1: `make venv VLLM=0.27.1`, done here).
# `peer` downloads vLLM's sdist from PyPI and needs vLLM's test-only packages (docs/commands.md); its peer table
# reads the `banks` part's campaign tables.
# Times on 2 cores: bench ~5 min, fast ~15 min, mutants ~35 min, banks ~90 min, peer ~3 h, verdicts ~55 min,
# known ~1 s, e2e ~10 min, scheduler ~45 min, upstream ~7 min + the peer suite per patch (run parts in parallel on separate cores with CORE=N).
set -euo pipefail
cd "$(dirname "$0")/.."
PART=${1:-all}
PY=${PY:-.venv/bin/python}
OLD=${OLD_VENV:-.venv-0.27.1}
CORE=${CORE:-0}
R=bench/results
M=bench/measure
BLIND=banks/blind_mutants
pin() { taskset -c "$CORE" "$@"; }
part() { [[ $PART == all || $PART == "$1" ]]; }
# `mutants check` exits 1 when a mutant survives: still a result
check() { pin "$PY" -m harness mutants check "$@" || [[ $? == 1 ]]; }
mkdir -p "$R"

# the tuned bank's allocator/scheduler-side mutants (the worker-side and reach ones are listed where they run)
ALLOC=(seed-unmarked-early-return mamba-free-leaks-block mamba-overallocate-running mamba-hit-without-state
  mamba-eagle-drop-ignored producer-hash-not-moved null-running-slot cow-copies-dropped cow-direction-swapped
  same-step-hit-allowed frees-running-block-early last-state-idx-off-by-one hit-one-hash-block-long
  spec-block-not-relocated mamba-retention-resend-boundary-at-prompt-end)
WORKERS=(v1-accepted-count-lost v1-stale-mamba-state-idx v1-async-prev-row-as-current v1-reorder-threshold-off-by-one
  v1-async-valid-count-unwaited mamba-copies-first-group-only v2-postcopy-skipped v2-stale-accepted-on-add
  v2-accepted-scattered-by-batch-row v2-async-trusts-scheduler-computed)

if part bench; then
  pin "$PY" -m pytest bench --benchmark-only --benchmark-json=$R/bench-0.33.0.json -q
  "$PY" $M/plot.py $R/bench-0.33.0.json --out $R
fi
if part fast; then
  make venv VLLM=0.27.1 >/dev/null
  pin "$PY" $M/profile_replay.py --count 400 --out $R/profile_replay.md
  pin "$PY" $M/profile_replay.py --count 200 --tier model --out $R/profile_replay_model.md
  pin "$PY" $M/model_symptoms.py --count 100 --out $R/model_symptoms.md
  "$PY" $M/engine_throughput.py --table --core "$CORE" --out $R/engine_throughput.md
  pin "$OLD/bin/python" $M/trained_seed_symptoms.py --out $R/trained_seed_symptoms.md
  pin "$OLD/bin/python" $M/time_to_detect.py --trials 10 --budget 60 --out $R/time_to_detect.md
  pin "$PY" $M/input_distribution.py --count 1000 --out $R/input_distribution.md
  # every release's block sizes per user configuration (its venv, else its unpacked wheel: `make results PART=upstream`
  # fetches them)
  pin "$PY" $M/block_sizes.py --out $R/block_sizes.md
fi
if part mutants; then
  check --budget-seconds 30 --out $R/mutants_check_30s.md
  # the worker-side mutants, each fuzzed for 2 minutes on the engine tier with its runner
  check --only v1-accepted-count-lost v1-stale-mamba-state-idx v2-postcopy-skipped \
    v2-stale-accepted-on-add v2-accepted-scattered-by-batch-row v2-async-trusts-scheduler-computed \
    v1-async-prev-row-as-current --budget-seconds 120 --trials 1 --out $R/engine_worker_mutants.md
  pin "$PY" $M/time_to_detect.py --all-mutants --trials 3 --budget 20 --out $R/mutants_guided_vs_random.md
fi
if part banks; then
  # every bank, make fuzz's settings (the seed corpus), a trial ending at its first kill
  check --trials 5 --budget-seconds 120 --seed-corpus --only "${ALLOC[@]}" --out $R/mutants_check_symbolic.md
  check --trials 3 --budget-seconds 120 --seed-corpus --only $BLIND/*.py --out $R/mutants_check_blind.md
  check --tier engine --trials 1 --budget-seconds 90 --seed-corpus --only "${ALLOC[@]}" \
    --out $R/mutants_check_engine_alloc.md
  check --trials 3 --budget-seconds 120 --seed-corpus --only "${WORKERS[@]}" --out $R/mutants_check_engine_workers.md
  # the stall, V1-reorder and mode-none mutants (what the engine tier's reach added)
  check --trials 3 --budget-seconds 120 --jobs 1 --seed-corpus \
    --only mamba-admission-uncapped v1-reorder-threshold-off-by-one mamba-none-spec-blocks-dropped \
    --out $R/mutants_check_reach.md
  check --trials 3 --budget-seconds 120 --seed-corpus \
    --only gdn-zero-draft-decode-as-plain gdn-spec-accepted-offset-dropped --out $R/mutants_check_gdn.md
  check --trials 3 --budget-seconds 120 --seed-corpus \
    --only mamba-retention-resend-boundary-at-prompt-end $BLIND/mamba-retention-mask-boundary-off-by-one.py \
    --out $R/mutants_check_retention.md
  # vLLM 0.34's new paths: the pool's key rule (every tier), parked loads, hit limits, cache-aware admission (engine)
  check --trials 3 --budget-seconds 120 --seed-corpus --only cache-key-outlives-block hit-limit-ignored-locally \
    aborted-load-freed-early cache-aware-probe-takes-refs --out $R/mutants_check_034.md
fi
if part peer; then
  # vLLM's own unit tests per allocator-side mutant (each peer_tests.md with its .json beside it)
  pin "$PY" $M/peer_tests.py --out $R/peer_tests.md
  blind=(); for f in $BLIND/*.py; do blind+=(--only "$f"); done
  pin "$PY" $M/peer_tests.py "${blind[@]}" --out $R/peer_tests_blind.md
  pin "$PY" $M/peer_tests.py --only mamba-retention-resend-boundary-at-prompt-end --out $R/peer_tests_retention.md
  # the peer tables: the sweep and generator-only columns are measured afresh (peer_sweep*.json keeps them)
  rm -f $R/peer_sweep.json $R/peer_sweep_retention.json
  pin "$PY" $M/peer_table.py --mutants-dir $BLIND --workers --measured $R/peer_sweep.json \
    --peer $R/peer_tests.json --peer $R/peer_tests_blind.json --peer $R/peer_tests_retention.json \
    --campaign $R/mutants_check_reach.md --campaign $R/mutants_check_symbolic.md \
    --campaign $R/mutants_check_blind.md --engine-campaign $R/mutants_check_engine_alloc.md \
    --engine-campaign $R/mutants_check_engine_workers.md --out $R/peer_table.md
  pin "$PY" $M/peer_table.py --only mamba-retention-resend-boundary-at-prompt-end \
    mamba-retention-mask-boundary-off-by-one --mutants-dir $BLIND --measured $R/peer_sweep_retention.json \
    --peer $R/peer_tests_retention.json --peer $R/peer_tests_blind.json --campaign $R/mutants_check_retention.md \
    --out $R/peer_table_retention.md
fi
if part verdicts; then
  "$PY" $M/mutant_verdicts.py --trials 3 --minutes 2 --sweep 1000 --parallel 2 --log $R/mutant_verdicts.jsonl \
    --out $R/mutant_verdicts.md
fi
if part known; then
  "$PY" tools/known_table.py  # README.md's and docs/known-issues.md's tables, from the known-issue registry
fi
if part e2e; then
  # tier e2e (vLLM's whole engine, real forward) on vLLM's CPU builds: what users see of each known issue, of the
  # bank's symbolic findings, and its throughput beside the engine tier's (make venv VLLM=0.27.1 / 0.32.0)
  make venv VLLM=0.27.1 && make venv VLLM=0.32.0
  pin .venv-0.27.1/bin/python -m harness known check --tier e2e -o $R/e2e_known_0.27.1.md
  pin .venv-0.32.0/bin/python -m harness known check --tier e2e -o $R/e2e_known_0.32.0.md
  pin .venv-0.32.0/bin/python $M/e2e_mutant_bank.py --count 150 --keep 3 --out $R/e2e_mutant_bank_0.32.0.md
  pin .venv-0.32.0/bin/python $M/e2e_throughput.py --count 60 --out $R/e2e_throughput.md
fi
if part scheduler; then
  # issue 44: the main job over vLLM's Scheduler. Campaign pace with a frequent bug (signatures judged once), then
  # the bank of mutants of 0.34.0's new code: vLLM 0.34.0's own tests (peer, from its sdist) and the 2-minute main
  # job and a sweep on each (bank_034.py reads the peer's JSON)
  "$PY" $M/campaign_pace.py --minutes 1 --out $R/campaign_pace.md
  BANK034="publish-counts-in-flight parked-reservation-kept parked-reservation-doubled inflight-cap-ignores-aborted
    hash-map-pop-keeps-stale-head hit-limit-ignored-locally aborted-load-freed-early cache-aware-probe-takes-refs
    cache-key-outlives-block"
  "$PY" $M/peer_tests.py --vllm 0.34.0 $(printf -- '--only %s ' $BANK034) --out $R/peer_tests_034_bank.md
  "$PY" $M/bank_034.py --minutes 2 --sweep 200 --out $R/bank_034.md
fi
if part scheduler || part sglang; then
  # issue 46: the SGLang wing's bank of planted SGLang bugs, a generator sweep each (needs `make venv-sglang`)
  "$PY" $M/sglang_bank.py --count 300 --campaign-minutes 2 --out $R/sglang_bank.md
fi
if part upstream; then
  # issue 38: the known issue x release table (each release in its own process: its venv, else its unpacked wheel,
  # downloaded once into artifacts/cache/), then one bug report per known issue open in the newest release
  # (`bisect --known` exits 1 where a release's known check disagrees: still a result, marked (!) in the table)
  "$PY" -m harness bisect --known --jobs 2 -o $R/known_releases.md || [[ $? == 1 ]]
  # vLLM's peer suite on every patched tree beside stock, then each open issue's tests stock against patched (and
  # the seed bug's on the release that shipped it against the one that fixed it); the reports read both
  "$PY" tools/upstream.py suite --vllm 0.33.0 --out $R/upstream_peer_suite_0.33.0.md || [[ $? == 1 ]]
  "$PY" tools/upstream.py suite --vllm 0.34.0 --out $R/upstream_peer_suite_0.34.0.md || [[ $? == 1 ]]
  "$PY" tools/upstream.py tests --vllm 0.33.0 --jobs 2 --out $R/upstream_tests_0.33.0.md || [[ $? == 1 ]]
  "$PY" tools/upstream.py tests --vllm 0.34.0 --jobs 2 --out $R/upstream_tests_0.34.0.md || [[ $? == 1 ]]
  SEED="seed-external-hit-unmarked --vllm 0.27.1 --fixed-in 0.28.0"
  "$PY" tools/upstream.py tests $SEED --out $R/upstream_tests_0.27.1.md || [[ $? == 1 ]]
  # every emitted vLLM-style test in each release's own test tree: red exactly where its issue reproduces (~25 min)
  "$PY" tools/emitted_across.py --out $R/emitted_across_releases.md || [[ $? == 1 ]]
  # issue 45: every patch's tree fuzzed by the harness (2-minute campaigns per tier, the stock tree as liveness
  # witness; ~90 min), the first sync-external patch beside it; rows of unchanged patches are kept
  "$PY" $M/patched_trees.py --out $R/patched_trees.md --releases 0.33.0 0.34.0 --minutes 2 \
    --as-was 7153686^ sync-external-admission-undercount
  "$PY" -m harness report-bug --open -o docs/upstream
  # the CPU build's pages (tier e2e), then the index over every page
  for i in cpu-mamba2-prefill-checkpoint cpu-mamba-align-spec-decode-triton cpu-mamba2-spec-conv-drops-accepted \
      cpu-mamba2-spec-ssm-ignores-accepted; do
    .venv-0.32.0/bin/python -m harness report-bug $i -o docs/upstream/$i.md
  done
fi
