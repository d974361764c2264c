"""Imported by pytest before any test module: the process is set up for vLLM (harness.vllm_env.prepare, the
test session's entry point: on a machine without an NVIDIA driver, vLLM's Triton check then accepts it and picks
its model runner as on a GPU host), so a test's outcome never depends on which module imported vLLM first. Tests that start vLLM in a fresh process, run a campaign or sweep long are marked `slow`
(`make test-fast` leaves them out)."""

import pytest

from harness.vllm_env import prepare

prepare()

# measured: `pytest --durations=100` on this 2-core box, each over ~1.5 s (most start a fuzz worker or a CLI
# process that imports vLLM); `make test` runs them, `make test-fast` (the inner loop) does not
SLOW = {
    "tests/test_verdicts.py::test_crash_file_with_new_and_known_findings_fails_every_time",
    "tests/test_verdicts.py::test_campaign_with_known_findings_only_exits_0",
    "tests/test_verdicts.py::test_campaign_exits_1_when_a_new_finding_shares_an_input_with_a_known_one",
    "tests/test_verdicts.py::test_crash_file_with_known_findings_only_passes",
    "tests/test_engine_model.py::test_engine_target_with_the_model_forward_keeps_an_output_finding",
    "tests/test_campaign_stop.py::test_a_campaign_that_keeps_a_new_finding_stops_early",
    "tests/test_campaign_stop.py::test_a_clean_campaign_is_not_stopped",
    "tests/test_fuzz_target.py::test_crash_file_replays_and_keeps_the_finding",
    "tests/test_fuzz_target.py::test_short_campaign_keeps_minimizes_and_exits_1",
    "tests/test_fuzz_target.py::test_engine_target_replays_on_vllms_scheduler_and_records_the_worker",
    "tests/test_fuzz_target.py::test_model_target_replays_in_the_model_tier",
    "tests/test_cflite.py::test_regression_crash_file_replays_as_a_known_issue",
    "tests/test_engine_v2.py::test_campaign_finding_behind_the_checkpoint_issue_is_the_draftless_decode_issue",
    "tests/test_engine_v1.py::test_no_state_leaks_across_scenarios",
    "tests/test_engine_kernels.py::test_every_tensor_kernel_launch_of_real_runs_matches_triton",
    "tests/test_engine_kernels.py::test_triton_kernels_run_after_the_v1_workers_replacements_were_registered",
    "tests/test_engine_kernels.py::test_scenario_traces_identical_with_torch_and_triton_kernels",
    "tests/test_gpu_backend.py::test_check_script_skips_cleanly",
    "tests/test_engine_v1.py::test_an_async_eagle_finding_replays_in_an_empty_environment",  # 2 fresh processes
    "tests/test_release_triage.py::test_a_known_issue_repro_is_judged_on_the_installed_release",  # a fresh process
    "tests/test_e2e_tier.py::test_e2e_tests_pass_on_the_cpu_build",  # vLLM's whole engine in the CPU build's venv
    # each 1.5-3 s (make test-fast under 60 s on this box)
    "tests/test_model_configs.py::test_a_short_conv_model_keeps_a_conv_window_only_and_is_judged_with_drafts",
    "tests/test_engine_v2.py::test_v2_worker_mutant_killed_and_absent_on_stock",
    "tests/test_engine_v1.py::test_worker_mutant_killed_and_absent_on_stock",
    "tests/test_peer_tests.py::test_plugin_verdict_on_a_tiny_suite",
    "tests/test_peer_tests.py::test_a_collection_error_is_no_verdict_and_a_mutant_file_path_keeps_the_rootdir",
    "tests/test_engine_v1.py::test_torch_kernels_give_the_triton_kernels_trace",
    "tests/test_engine_v2.py::test_async_only_mutant_killed_with_async_scheduling_and_invisible_without",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)
