"""pytest plugin for bench/measure/peer_tests.py: runs vLLM's own unit tests with one of the harness's mutants applied.

Loaded with `-p peer_plugin` (bench/ on PYTHONPATH). Options (or the environment, for a bare `pytest` call):
  --hh-mutant NAME   HH_PEER_MUTANT   a bank mutant's name or a mutant .py file, applied at session start
  --hh-report PATH   HH_PEER_REPORT   where to write the run's summary (JSON, rewritten as the run goes)
  --hh-full-cleanup  HH_PEER_FULL_CLEANUP  keep vLLM's per-test global cleanup (see SETTINGS)

Tests that cannot run on this CPU-only, offline machine are deselected by a named rule (RULES); stubs stand in
only where a test needs a network or a GPU (STUBS). Both lists are printed by peer_tests.py and footnoted in
its table, so a reader sees exactly what of vLLM's suite did not run as written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# (rule name, reason, entries): an entry "path::test" deselects that test (all its parameters); an entry that is
# a bare file path keeps the file from being imported at all (counted in files: a module that cannot import here)
_SCHED = "tests/v1/core/test_scheduler.py::"
_KV = "tests/v1/kv_connector/unit/"
RULES: list[tuple[str, str, tuple[str, ...]]] = [
    ("needs-served-model", "starts an OpenAI server or vLLM's LLM engine on a real model (weights and tokenizer from "
     "the hub, vLLM's compiled ops, a GPU)",
     ("tests/v1/core/prefix_cache/test_hybrid_prefix_cache_hit_rate.py",
      "tests/v1/core/test_scheduler_e2e.py",
      "tests/v1/core/test_reset_prefix_cache_e2e.py::test_reset_prefix_cache_e2e",
      _KV + "test_multi_connector.py::test_multi_example_connector_consistency",
      _KV + "test_nixl_connector_hma.py::test_fewer_blocks_with_hma",
      # 0.34.0: an engine with sleep mode (CUDA only) or one started on CPU with vLLM's compiled CPU ops
      _KV + "test_offloading_connector.py::test_sleep_keeps_offloaded_blocks_unless_reset",
      _KV + "test_offloading_connector.py::test_p2p_cache_reset_with_absent_decoder",
      *(_KV + "test_offloading_connector.py::" + t for t in (
          "test_fs_tiering_offloading", "test_tiering_offloading",
          "test_tiering_cache_reset_resumes_promotions_on_idle_engine")))),
    ("needs-rocm", "ROCm GPU memory check",
     ("tests/v1/kv_connector/unit/test_nixl_rocm_gpu_mem_diag.py",)),
    ("needs-gpu", "allocates on an accelerator (torch.accelerator device or pinned host memory)",
     (_KV + "test_hisparse_connector.py::test_draft_layer_rows_mirrored_after_drafter",)),
    ("httpx-is-httpx2", "this venv's huggingface_hub 2.x hands vLLM's Mooncake connector httpx2 as `httpx`; the test "
     "patches the httpx package, so its fake client is never used and the call goes to the network",
     tuple(f"tests/v1/kv_connector/unit/test_mooncake_connector.py::test_register_worker_{t}"
           for t in ("retries_on_read_timeout", "raises_after_max_attempts"))),
    ("needs-gpu-model-runner", "assumes the V2 model runner, which vLLM picks only on CUDA (on CPU: V1, which "
     "rejects async scheduling with pipeline parallelism)",
     (_SCHED + "test_async_scheduling_pp_allows_rescheduling_with_output_placeholders",)),
    ("needs-multimodal-model-code", "a multimodal model (LLaVA, Qwen2.5-VL): its vLLM class imports mistral_common "
     "(opencv) / torchvision, compiled packages not in this CPU venv, so ModelConfig cannot inspect it",
     ("tests/v1/core/test_priority_scheduler_random.py::test_priority_scheduling_blast",
      *(_SCHED + t for t in (
          "test_cpu_encoder_input_updates_preserve_shm_handles", "test_cpu_encoder_input_updates_resume_and_abort",
          "test_cpu_encoder_input_updates_restore_after_kv_load_failure",
          "test_cpu_encoder_input_updates_wait_for_completed_prefill", "test_eagle3_mm_encoder_cache_with_shift",
          "test_ec_connector_allocate_encoder_tokens_with_external_load", "test_ec_connector_cache_hit_external_load",
          "test_ec_connector_cache_miss_computes_locally", "test_ec_connector_defers_running_request_for_async_reload",
          "test_ec_connector_ensure_cache_available_defers_request", "test_ec_connector_schedule_multiple_requests",
          "test_ec_connector_text_only_request", "test_ec_connector_unable_to_allocate",
          "test_ec_connector_update_connector_output_called", "test_ec_connector_waits_for_embeddings_in_prefix_replay",
          "test_ec_connector_with_partial_cache_hit_multi_round", "test_encoder_cache_accepts_matching_embed_count",
          "test_encoder_cache_embed_count_mismatch_restores_prior_hit_state",
          "test_encoder_cache_recomputed_when_evicted_during_preemption",
          "test_encoder_cache_rejects_mismatched_embed_count",
          "test_encoder_cache_rejects_mismatched_embed_count_within_request",
          "test_encoder_cache_retained_across_preemption_and_resume",
          "test_encoder_only_prompt_longer_than_budget_is_chunked",
          # 0.34.0's, on LLaVA as well
          "test_encoder_cache_pressure_respects_disabled_chunked_prefill",
          "test_no_mm_input_chunking_after_prefix_cache_hit_inside_item",
          "test_free_encoder_inputs_notifies_the_ec_connector",
          "test_free_encoder_inputs_respects_unconfirmed_placeholders",
          "test_free_encoder_inputs_unchanged_without_spec_decode", "test_no_mm_input_chunking",
          "test_no_mm_input_chunking_at_item_boundary", "test_no_mm_input_chunking_for_same_step_duplicate",
          "test_priority_scheduling_ec_connector_preemption_and_resumption",
          "test_same_step_duplicate_encoder_input_stays_cached", "test_schedule_multimodal_requests",
          "test_schedule_partial_requests", "test_unavailable_encoder_input_fails_the_request_as_retryable",
          "test_waiting_encoder_stall_does_not_starve_later_requests",
          "test_waiting_encoder_stall_is_counted_as_deferred",
          "test_waiting_encoder_stall_kv_holder_keeps_drain_priority")))),
    ("needs-ray", "imports ray (a compiled distributed runtime, not installed)",
     ("tests/v1/kv_connector/unit/test_nixl_connector.py",
      "tests/v1/kv_connector/unit/test_bidirectional_kv_transfer.py")),
    ("needs-orjson", "the 3FS connector imports orjson (compiled, not installed)",
     ("tests/v1/kv_connector/unit/test_hf3fs_connector.py",
      "tests/v1/kv_connector/unit/test_hf3fs_metadata_server.py")),
]


def rule_for(nodeid: str) -> str | None:
    """The rule that deselects this test (a whole file, or a test function with any parameters), if any."""
    for name, _, entries in RULES:
        for entry in entries:
            if nodeid == entry or nodeid.startswith((entry + "[", entry + "::")):
                return name
    return None


# (stub name, why): stand-ins installed at session start, for a network or a GPU only
STUBS: list[tuple[str, str]] = [
    ("mooncake-device-index", "in the Mooncake connector's test files only, torch.accelerator.current_device_index() "
     "returns 0 instead of raising when no accelerator is present: the connector's worker records its device index "
     "at construction (CpuPlatform.set_device accepts it); nothing is allocated on a device"),
    ("hf-config-snapshots", "vLLM's tests build ModelConfig from public Hugging Face model names, which reads each "
     "model's config.json from the hub; this machine has no hub: a throwaway offline HF cache (HF_HUB_OFFLINE=1) "
     "holds a config.json only (no weights, no tokenizer) for each model in HF_CONFIGS, with the public values"),
]

# the public config.json of each model vLLM's selected tests name, as published on the hub (the fields vLLM reads;
# no weights, tokenizer or processor files anywhere)
_QWEN_IDS = {"bos_token_id": 151643, "eos_token_id": 151645, "vocab_size": 151936, "hidden_act": "silu",
             "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16"}
HF_CONFIGS: dict[str, dict] = {
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "activation_function": "relu",
        "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "do_layer_norm_before": True, "ffn_dim": 3072,
        "hidden_size": 768, "max_position_embeddings": 2048, "num_attention_heads": 12, "num_hidden_layers": 12,
        "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 768},
    "facebook/opt-350m": {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "activation_function": "relu",
        "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1, "do_layer_norm_before": False, "ffn_dim": 4096,
        "hidden_size": 1024, "max_position_embeddings": 2048, "num_attention_heads": 16, "num_hidden_layers": 24,
        "torch_dtype": "float16", "vocab_size": 50272, "word_embed_proj_dim": 512},
    "Qwen/Qwen1.5-7B": {
        **_QWEN_IDS, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "eos_token_id": 151643,
        "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 32768, "max_window_layers": 28,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_theta": 1000000.0,
        "sliding_window": 32768, "use_sliding_window": False, "tie_word_embeddings": False},
    "Qwen/Qwen3-0.6B": {
        **_QWEN_IDS, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960,
        "max_window_layers": 28, "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
        "rope_theta": 1000000, "sliding_window": None, "use_sliding_window": False, "tie_word_embeddings": True},
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {
        **_QWEN_IDS, "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "attention_bias": False,
        "decoder_sparse_step": 1, "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048,
        "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
        "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512,
        "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
        "num_hidden_layers": 48, "num_key_value_heads": 2, "partial_rotary_factor": 0.25, "rope_theta": 10000000,
        "shared_expert_intermediate_size": 512, "tie_word_embeddings": False},
}


def _offline_hf_cache() -> Path:
    """A Hugging Face hub cache holding one config-only snapshot per model of HF_CONFIGS."""
    root = Path(tempfile.mkdtemp(prefix="hh-peer-hf-"))
    revision = "0" * 40
    for repo, config in HF_CONFIGS.items():
        model = root / f"models--{repo.replace('/', '--')}"
        (model / "snapshots" / revision).mkdir(parents=True)
        (model / "snapshots" / revision / "config.json").write_text(json.dumps(config))
        (model / "refs").mkdir()
        (model / "refs" / "main").write_text(revision)
    return root


# vLLM here is the CUDA wheel installed --no-deps: without a driver it detects no platform at all
# (UnspecifiedPlatform) and the root conftest's cleanup calls into a missing accelerator. vLLM's CPU CI runs a CPU
# build, which this stands for; set before the conftests load (vLLM picks its platform on first import).
# CUDA_VISIBLE_DEVICES set and empty: vLLM's Triton check accepts the driverless machine (triton_utils/importing.py),
# which 0.34's CPU platform requires on x86 (platforms/cpu.py:241-243 in 0.34.0), as harness/vllm_env.py sets it
ENV = {} if os.path.exists("/proc/driver/nvidia/version") else {"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}

# (setting, why): what differs from vLLM's CI besides the rules and stubs
SETTINGS: list[tuple[str, str]] = [
    *((f"{k}={v}", "vLLM is the CUDA wheel without a driver here; vLLM's CPU CI runs a CPU build")
      for k, v in ENV.items()),
    ("skip_global_cleanup", "vLLM's marker, on every test: its conftest's per-test cleanup_dist_env_and_memory "
     "(distributed teardown, gc.collect, accelerator cache) is for GPU memory and costs 0.35 s a test here; the "
     "conftest names this marker for non-GPU unit tests (peer_tests.py --full-cleanup keeps the cleanup)"),
]


_DEVICE_INDEX_FILES = tuple(_KV + f"test_mooncake_connector{s}.py" for s in ("", "_hma", "_hybrid_mamba"))


@pytest.fixture(autouse=True)
def _hh_mooncake_device_index(request, monkeypatch):
    """The mooncake-device-index stub (STUBS)."""
    if request.node.nodeid.split("::")[0] in _DEVICE_INDEX_FILES:
        import torch

        if not torch.accelerator.is_available():
            monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Before the root conftest imports vLLM and huggingface_hub (both read these variables on import)."""
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    early_config._hh_hf_cache = _offline_hf_cache()
    os.environ.update(HF_HUB_CACHE=str(early_config._hh_hf_cache), HF_HUB_OFFLINE="1")


def pytest_addoption(parser):
    group = parser.getgroup("hybrid-harness peer tests")
    group.addoption("--hh-mutant", default=os.environ.get("HH_PEER_MUTANT") or None,
                    help="mutant to apply at session start (bank name or .py file)")
    group.addoption("--hh-full-cleanup", action="store_true", default=bool(os.environ.get("HH_PEER_FULL_CLEANUP")),
                    help="keep vLLM's per-test global cleanup (no skip_global_cleanup marker)")
    group.addoption("--hh-report", default=os.environ.get("HH_PEER_REPORT") or None,
                    help="write a JSON summary of the run here")


def _exception_line(text: str) -> str:
    """The exception's first line in a failure report: pytest's "E " line, or (--tb=native) the first unindented
    line after the last frame."""
    lines = text.splitlines()
    if e_lines := [ln for ln in lines if ln.startswith("E ")]:
        return e_lines[0][1:].strip()
    last_frame = max((i for i, ln in enumerate(lines) if ln.startswith("  File ")), default=-1)
    return next((ln for ln in lines[last_frame + 1:] if ln and not ln[0].isspace()), lines[-1] if lines else "")


class _Report:
    """Counts outcomes and keeps the first failure and the test now running (so a hang can be named)."""

    def __init__(self, path: str | None, mutant: str | None):
        self.path = Path(path) if path else None
        self.doc = {"mutant": mutant, "passed": 0, "failed": 0, "skipped": 0, "errors": 0,
                    "deselected": {name: {"tests": 0, "files": 0} for name, _, _ in RULES},
                    "first_failure": None, "failures": [], "running": None, "finished": False}

    def write(self):
        if self.path:
            self.path.write_text(json.dumps(self.doc, indent=1))

    def pytest_ignore_collect(self, collection_path, config):
        rel = collection_path.relative_to(config.rootpath).as_posix() if collection_path.is_relative_to(
            config.rootpath) else None
        rule = next((name for name, _, entries in RULES if rel in entries), None)
        if rule:
            self.doc["deselected"][rule]["files"] += 1
            return True
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config, items):
        keep, dropped = [], []
        for item in items:
            rule = rule_for(item.nodeid)
            if rule:
                self.doc["deselected"][rule]["tests"] += 1
                dropped.append(item)
            else:
                keep.append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
        if not config.getoption("--hh-full-cleanup"):
            for item in keep:
                item.add_marker(pytest.mark.skip_global_cleanup)
        self.write()

    def pytest_runtest_logstart(self, nodeid, location):
        self.doc["running"] = nodeid
        self.write()

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            key = {"passed": "passed", "skipped": "skipped"}.get(report.outcome,
                                                                    "failed" if report.when == "call" else "errors")
            self.doc[key] += 1
            if key in ("failed", "errors"):
                self.doc["first_failure"] = self.doc["first_failure"] or report.nodeid
                self.doc["failures"].append(f"{report.nodeid}: {_exception_line(report.longreprtext)[:300]}")

    def pytest_collectreport(self, report):
        if report.skipped:  # a module that skips itself (pytest.importorskip): pytest counts it as skipped
            self.doc["skipped"] += 1
        if report.failed:  # a module that does not import: an error, and under -x the end of the run
            self.doc["errors"] += 1
            self.doc["first_failure"] = self.doc["first_failure"] or report.nodeid
            self.doc["failures"].append(f"{report.nodeid}: {(report.longreprtext.strip().splitlines() or [''])[-1]}")

    def pytest_sessionfinish(self, session, exitstatus):
        self.doc["finished"] = True  # "running" keeps the last test started
        self.doc["exitstatus"] = int(exitstatus)
        self.write()


def pytest_configure(config):
    mutant = config.getoption("--hh-mutant")
    report = _Report(config.getoption("--hh-report"), mutant)
    config.pluginmanager.register(report, "hh-peer-report")
    # the harness's mutant module is imported in the stock run too, so both runs see the same import order
    from harness.mutants import get_mutant

    if mutant:
        config._hh_undo = get_mutant(mutant).apply()
        report.doc["applied"] = True
    report.write()


def pytest_unconfigure(config):
    undo = getattr(config, "_hh_undo", None)
    if undo:
        undo()
    if hasattr(config, "_hh_hf_cache"):
        shutil.rmtree(config._hh_hf_cache, ignore_errors=True)
