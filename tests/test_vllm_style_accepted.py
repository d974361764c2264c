"""`regression --style vllm` for V1's accepted-token bookkeeping (harness/vllm_style_accepted.py): where the test
goes, what the emitted file is made of, and (slow, on a release with the V1 runner) that it fails on stock vLLM."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from harness.errors import BadInput
from harness.known_issues import ROOT, known_issue_by_id

ISSUES = ("v1-readd-resets-num-accepted", "v1-async-accepted-copy-race")

# one step of the copy-race repro (stock 0.33.0): y arrives, x leaves, the decode-first reorder swaps d ahead of y
STEP = {"new": [{"req_id": "y", "prompt_token_ids": [5, 6, 7], "block_ids": [[9], [0, 11]], "num_computed_tokens": 0}],
        "cached": [{"req_id": "d", "resumed": False, "new_token_ids": [], "all_token_ids": [], "new_block_ids": None,
                    "num_computed_tokens": 9, "num_output_tokens": 3}],
        "num_scheduled_tokens": {"d": 2, "y": 3}, "spec_tokens": {"d": [-1]}, "finished": [], "preempted": [],
        "left": {"x": 1, "d": 2}, "prev_rows": ["x", "d"]}
SETTINGS = {"block_sizes": [8, 8], "async_scheduling": True, "mamba_cache_mode": "align", "num_spec_tokens": 1,
            "reorder_batch_threshold": 2, "max_model_len": 256, "max_num_tokens": 2048, "max_num_reqs": 4}


@pytest.mark.parametrize("issue", ISSUES)
def test_both_issues_go_to_vllms_worker_tests(issue):
    from harness.vllm_style import folder_for

    assert folder_for(known_issue_by_id(issue)) == "tests/v1/worker"


def test_the_template_is_a_test_of_vllms_own_runner_methods_importing_only_vllm_torch_and_pytest():
    from harness.vllm_style_accepted import TEMPLATE, _literal

    text = TEMPLATE.format(docstring='"""doc"""', name="v1_async_accepted_copy_race", steps=_literal([STEP]),
                           checked_step=0, wrong="# d reads 1, not 2", expected=_literal({"d": 2, "y": 1}), **SETTINGS)
    # the data as literals (vLLM's V1 runner module, gone in 0.34.0, is not imported here)
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(text).body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()
              and node.targets[0].id != "pytestmark"}
    assert values["STEPS"] == [STEP] and values["EXPECTED"] == {"d": 2, "y": 1} and values["CHECKED_STEP"] == 0
    assert "runner._update_states(scheduler_output)" in text and "runner._prepare_inputs(" in text
    roots = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert roots <= {"vllm", "torch", "pytest", "types"}, roots
    assert max(len(line) for line in text.splitlines()[3:]) <= 88  # ruff's line length in vLLM


def test_a_finding_with_late_copies_is_refused():
    """The emitted test puts each step's accepted counts in place before the step: copies landed early."""
    from harness.artifacts import FindingArtifact
    from harness.vllm_style_accepted import _options

    def recorded(config):
        return FindingArtifact.from_json({"config": config}, strict=False)

    with pytest.raises(BadInput, match="copy-timing early"):
        _options(recorded({"tier": "engine", "engine": {"runner": "v1", "copy_timing": "late"}}))
    options = _options(recorded({"tier": "engine", "engine": {"runner": "v1", "async_scheduling": "on"}}))
    assert (options.runner, options.async_scheduling, options.copy_timing) == ("v1", "on", "early")
    assert _options(recorded({"tier": "symbolic"})).runner == "v1"  # the mirror's finding: vLLM's own V1 runner


@pytest.mark.slow
@pytest.mark.parametrize("issue_id", ISSUES)
def test_the_emitted_test_fails_on_stock_v1(issue_id, tmp_path):
    """On a release whose V1 runner has the bug (0.33.0: .venv-0.33.0/bin/python -m pytest ...), the repro's finding
    on vLLM's own V1 runner gives a test that fails in vLLM's runner code, naming the step's wrong counts."""
    from harness.release import vllm_release

    issue = known_issue_by_id(issue_id)
    if not vllm_release().v1_runner or not issue.repro_expected():
        pytest.skip(f"vLLM {vllm_release().version} has no V1 runner with {issue_id}")
    art, out = tmp_path / "art", tmp_path / "test_hh.py"
    run = subprocess.run([sys.executable, "-m", "harness", "run", str(ROOT / issue.repro), "--tier", "engine",
                          "--runner", "v1", "--artifacts", str(art)], check=False, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    emit = subprocess.run([sys.executable, "-m", "harness", "regression", str(next(art.glob("*.json"))), "--style",
                           "vllm", "-o", str(out)], check=False, cwd=ROOT, capture_output=True, text=True)
    assert emit.returncode == 0 and "tests/v1/worker/test_hh_" in emit.stdout, emit.stderr
    # vLLM's CPU settings, as bench/measure/peer_plugin.py sets them for vLLM's own tests on this machine
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], check=False,
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert test.returncode == 1 and "a Mamba state would start tokens off" in test.stdout, test.stdout[-2000:]
