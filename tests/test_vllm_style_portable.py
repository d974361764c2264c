"""The vLLM-style test must hold on every release without its bug: `regression --style vllm` asserts the bug's
consequence, not the emitting release's schedule (chunk splits, step counts), and tools/emitted_across.py checks each
emitted test across the releases bisect covers (bench/results/emitted_across_releases.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from harness.known_issues import ROOT, known_issue_by_id
from harness.scenario import load_scenario
from harness.vllm_adapter import installed_version

SEED = "seed-external-hit-unmarked"
SEED_FINDING = ROOT / "tests" / "data" / "seed-finding-0.27.1.json"  # its repro's finding on vLLM 0.27.1
RESULTS = ROOT / "bench" / "results" / "emitted_across_releases.json"

_spec = importlib.util.spec_from_file_location("emitted_across", ROOT / "tools" / "emitted_across.py")
emitted_across = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(emitted_across)


def _scenario(issue_id: str):
    return load_scenario(ROOT / known_issue_by_id(issue_id).repro)


# -- the emitter --------------------------------------------------------------------------------------------------
def test_the_replay_stops_after_the_last_step_the_issue_showed_at():
    from harness.artifacts import FindingArtifact
    from harness.vllm_style import last_finding_step

    seed = known_issue_by_id(SEED)
    doc = {"verdict": {"known": {"live-column:RUNNING": SEED, "cache-integrity": f"{SEED}+other",
                                      "vllm-exception:x": "other"}},
                "findings": [{"signature": "live-column:RUNNING", "step": 2}, {"signature": "cache-integrity", "step": 3},
                             {"signature": "vllm-exception:x", "step": 9}]}
    assert last_finding_step(FindingArtifact.from_json(doc, strict=False), [seed]) == 3  # not the other issue's
    assert last_finding_step(FindingArtifact.read(SEED_FINDING), [seed]) == 3
    # a finding without a step (an end-of-run oracle): the whole schedule
    doc["findings"].append({"signature": "live-column:RUNNING", "step": None})
    assert last_finding_step(FindingArtifact.from_json(doc, strict=False), [seed]) is None


@pytest.mark.parametrize("issue_id", [SEED, "checkpoint-midblock-start", "eagle-midblock-stop-dropped",
                                      "sync-external-admission-undercount"])
def test_the_tests_split_stub_clips_as_the_harness_split_does(issue_id):
    """The emitted `mamba_split` (a stub self built from the geometry, the release-dependent switches read off the
    test's manager) clips every chunk as the harness's own split shim does on this release."""
    from harness.errors import BadInput
    from harness.regression import _split_helper
    from harness.vllm_adapter import Allocator

    g = _scenario(issue_id).geometry
    try:
        alloc = Allocator(g)
    except BadInput as exc:  # a geometry this release cannot express
        pytest.skip(str(exc))
    namespace = {"SimpleNamespace": SimpleNamespace}
    exec(_split_helper(g), namespace)
    request = alloc.make_request("r", list(range(3 * g.mamba_block_size + 3)), 4)
    checked = 0
    for computed in range(0, request.num_prompt_tokens, 3):
        for n in (1, g.mamba_block_size - 1, g.mamba_block_size + 2, request.num_prompt_tokens - computed):
            if n <= 0 or computed + n > request.num_prompt_tokens:
                continue
            request.num_computed_tokens = computed
            assert namespace["mamba_split"](alloc.manager, request, n, 0, 0) == alloc.split(request, n, 0, 0), \
                (computed, n)
            checked += 1
    assert checked > 20


def test_a_chunk_is_asserted_only_where_the_bug_changes_it():
    """The seed's fix changes no chunk: its test asserts none. checkpoint-midblock-start's is the split's (open on
    this release): one call, the one whose chunk runs past the Mamba block boundary without the fix."""
    from harness.regression import emit_regression, split_points

    assert split_points(_scenario(SEED), [known_issue_by_id(SEED)]) == {}
    issue = known_issue_by_id("checkpoint-midblock-start")
    if not issue.repro_expected():
        pytest.skip("this release does not show checkpoint-midblock-start")
    assert len(split_points(_scenario(issue.id), [issue])) == 1
    text = emit_regression(_scenario(issue.id), "x", None, [issue], split=True)
    asserted = [line.strip() for line in text.splitlines() if line.strip().startswith("assert ") and "mamba_split(" in line]
    assert len(asserted) == 1 and "runs past the Mamba block boundary at" in asserted[0], asserted


def test_the_seed_test_asserts_state_not_this_releases_schedule():
    """From the seed's 0.27.1 finding, recorded here with its fix: no chunk split asserted, the replay ends with the
    step the bug last showed at (3: b reads its hit's state), then every request still holding blocks is aborted and
    the pool must be whole."""
    from harness.artifacts import FindingArtifact
    from harness.vllm_style import emit_vllm_test

    text, place = emit_vllm_test(FindingArtifact.read(SEED_FINDING), [known_issue_by_id(SEED)])
    compile(text, place, "exec")
    assert place == "tests/v1/core/test_hh_seed_external_hit_unmarked.py"
    assert "mamba_split" not in text and "SimpleNamespace" not in text
    assert "'initial of b at step 3'" in text and "at step 4" not in text
    body = text.split("def test_seed_external_hit_unmarked():", 1)[1]
    tail = body.rstrip().splitlines()
    assert tail[-1].strip() == "check_pool()"
    assert "# the end of the schedule: abort every request still holding blocks" in body
    assert "manager.free(reqs['b'])" in "\n".join(tail[-4:])
    roots = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert roots <= {"vllm", "torch", "pytest", "types", "__future__"}, roots


@pytest.mark.slow
def test_the_seed_test_passes_here_and_fails_on_0_27_1(tmp_path):
    """The seed test from its 0.27.1 finding, recorded on this release (the bug fixed since 0.28.0): green here; red on
    vLLM 0.27.1 (its venv, where built) for the bug's reason (a live column, a state read), not a chunk size."""
    from harness.artifacts import FindingArtifact
    from harness.vllm_style import emit_vllm_test

    if tuple(int(x) for x in installed_version().split(".")[:2]) < (0, 28):
        pytest.skip("this release carries the seed bug: the test is red here by design")

    text, _ = emit_vllm_test(FindingArtifact.read(SEED_FINDING), [known_issue_by_id(SEED)])
    test = tmp_path / "test_seed.py"
    test.write_text(text)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}

    def run(python: str) -> subprocess.CompletedProcess:
        return subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], cwd=tmp_path,
                              capture_output=True, text=True, env=env)

    here = run(sys.executable)
    assert here.returncode == 0, here.stdout[-2000:]
    old = ROOT / ".venv-0.27.1" / "bin" / "python"
    if not old.exists():
        pytest.skip("no .venv-0.27.1 (make venv VLLM=0.27.1)")
    there = run(str(old))
    assert there.returncode == 1 and "AssertionError: a: column 1 worker row" in there.stdout, there.stdout[-2000:]


# -- tools/emitted_across.py ----------------------------------------------------------------------------------------
def test_every_issue_with_a_vllm_style_test_is_checked_and_only_those():
    ids = emitted_across.issues_with_test()
    assert SEED in ids and "hidden-state-group-splits-off-mamba-grid" in ids and "v1-readd-resets-num-accepted" in ids
    assert "v1-draftless-step-drops-accepted-offset" not in ids  # no vLLM-style test for it


def test_the_expected_outcome_follows_the_known_release_table():
    statuses = emitted_across.table_status(SEED, ["0.26.0", "0.27.1", "0.28.0", "0.34.0"])
    assert statuses == {"0.26.0": "shows", "0.27.1": "shows", "0.28.0": "clean", "0.34.0": "clean"}
    assert [emitted_across.expected_outcome(s) for s in ("shows", "clean", "other", "n/a")] == \
        ["fails", "passes", "passes", None]
    assert emitted_across.judge("fails", "shows") == "yes"
    assert emitted_across.judge("errors", "shows") == "no"  # red, but not for the test's reason
    assert emitted_across.judge("fails", "clean") == "no"
    assert emitted_across.judge("errors", "n/a") == "n/a"
    # not judged: what this machine cannot run, and a release without the module the test drives
    assert emitted_across.judge("cannot run", "shows", f"{emitted_across.MACHINE}: RuntimeError: pin_memory") == "n/a"
    assert emitted_across.judge("cannot run", "clean", f"{emitted_across.ABSENT} vllm.v1.worker.x") == "n/a"
    assert emitted_across.judge("cannot run", "shows", "ImportError: cannot import name 'A'") == "no"
    all_statuses = emitted_across.table_status(SEED, list(emitted_across.RELEASES))
    assert emitted_across.emit_release(SEED, all_statuses) == "0.27.1"  # the newest release it reproduces on
    assert emitted_across.emit_release(SEED, all_statuses, "0.26.0") == "0.26.0"
    from harness.errors import BadInput

    with pytest.raises(BadInput, match="does not reproduce"):
        emitted_across.emit_release(SEED, all_statuses, "0.34.0")


@pytest.mark.parametrize("xml, outcome", [
    ("<testcase classname='t' name='x'/>", "passes"),
    ("<testcase classname='t' name='x'><failure message='AssertionError: a: column 1'>Traceback\n"
     "AssertionError: a: column 1 worker row [0, 3, 4]</failure></testcase>", "fails"),
    ("<testcase classname='t' name='x'><failure message='TypeError: f() got'>Traceback\nTypeError: f() got an "
     "unexpected keyword argument 'x'</failure></testcase>", "errors"),
    ("<testcase classname='t' name='x'><failure message='ValueError: Cannot get 1 free blocks from the pool'>"
     "Traceback\nValueError: Cannot get 1 free blocks from the pool</failure></testcase>", "fails"),
    ("<testcase classname='t' name='x'><failure message='RuntimeError: pin_memory=True requires a CUDA or other "
     "accelerator backend'>RuntimeError: pin_memory=True requires a CUDA or other accelerator backend</failure>"
     "</testcase>", "cannot run"),
    ("<testcase classname='t' name='x'><error message='collection failure'>ImportError: cannot import name 'A'"
     "</error></testcase>", "cannot run"),
    ("<testcase classname='t' name='x'><skipped message='no V1 runner'/></testcase>", "cannot run"),
    ("<testcase classname='' name='tests.v1.worker.test_hh_x'><error message='collection failure'>E   "
     "ModuleNotFoundError: No module named 'vllm.v1.worker.gpu_model_runner'</error></testcase>", "cannot run"),
])
def test_a_junit_case_reads_as_an_outcome_and_the_line_that_says_why(xml, outcome):
    got, why = emitted_across._outcome_of(ET.fromstring(xml))
    assert got == outcome
    if outcome in ("fails", "errors"):
        assert why.startswith(("AssertionError: a: column 1", "TypeError: f() got", "ValueError: Cannot get"))


def test_the_table_marks_mismatches_and_counts_only_judged_releases():
    records = [{"issue": SEED, "emitted_on": "0.27.1", "place": "tests/v1/core/test_hh_x.py", "releases": {
        "0.27.1": {"outcome": "fails", "status": "shows", "matches": "yes", "why": "AssertionError: a"},
        "0.28.0": {"outcome": "passes", "status": "clean", "matches": "yes", "why": ""},
        "0.33.0": {"outcome": "fails", "status": "clean", "matches": "no", "why": "AssertionError: b"}}},
        {"issue": "checkpoint-midblock-start", "emitted_on": "0.34.0", "place": "p", "releases": {
            "0.27.1": {"outcome": "errors", "status": "n/a", "matches": "n/a", "why": "TypeError: x"},
            "0.28.0": {"outcome": "errors", "status": "n/a", "matches": "n/a", "why": "TypeError: x"},
            "0.33.0": {"outcome": "fails", "status": "shows", "matches": "yes", "why": "AssertionError: c"}}}]
    text = emitted_across.render(records, ["0.27.1", "0.28.0", "0.33.0"], "python tools/emitted_across.py")
    seed_row = next(line for line in text.splitlines() if line.startswith(f"| `{SEED}`"))
    assert "passes / fixed" in seed_row and "fails / fixed **MISMATCH**" in seed_row and seed_row.endswith(
        "| 2/3 **no** |")
    other = next(line for line in text.splitlines() if line.startswith("| `checkpoint-midblock-start`"))
    assert other.endswith("| 1/1 |") and "errors / n/a" in other
    assert f"- `{SEED}` on 0.33.0: fails where the table says fixed: AssertionError: b" in text
    assert "- `checkpoint-midblock-start` on 0.27.1, 0.28.0 (n/a): errors: TypeError: x" in text


# -- the committed table ----------------------------------------------------------------------------------------------
def test_the_committed_table_has_the_seed_red_exactly_where_it_reproduces():
    """bench/results/emitted_across_releases.json: the seed's test fails on 0.26.0-0.27.1 (the bug) and passes on
    every later release, 0.28.0 through 0.34.0."""
    records = {r["issue"]: r for r in json.loads(RESULTS.read_text())["records"]}
    seed = records[SEED]["releases"]
    assert {v: c["outcome"] for v, c in seed.items()} == {
        **{v: "fails" for v in ("0.26.0", "0.27.0", "0.27.1")},
        **{v: "passes" for v in ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")}}
    assert all(c["matches"] == "yes" for c in seed.values())
    assert set(records) == set(emitted_across.issues_with_test())
