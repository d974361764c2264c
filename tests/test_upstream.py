"""Issue 38: bisect's release parsing and ranges, the known issue x release table, the vLLM-style regression test,
the source patches and the bug report. No network: tests that need a fetched tree or sdist skip, naming it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bisect import CLEAN, NA, OTHER, SHOWS, Target, issue_target, known_table, ranges, resolve, status
from harness.bug_report import patched_lines, severity
from harness.errors import BadInput
from harness.known_issues import KNOWN_ISSUES, ROOT, known_issue_by_id
from harness.vllm_trees import RELEASES, has_tree, parse_releases, tree_path

PATCHES = sorted((ROOT / "upstream" / "patches").glob("**/*.patch"))
_spec = importlib.util.spec_from_file_location("upstream", ROOT / "tools" / "upstream.py")
upstream = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(upstream)


def test_releases_parse_ranges_lists_and_refuse_garbage():
    assert parse_releases("0.27.1..0.29.0") == ["0.27.1", "0.28.0", "0.29.0"]
    assert parse_releases("..0.26.0") == ["0.26.0"]
    assert parse_releases("0.33.0..") == ["0.33.0", "0.34.0"]
    assert parse_releases("0.33.0,0.27.1") == ["0.27.1", "0.33.0"]
    assert parse_releases(None) == list(RELEASES)
    for bad in ("latest", "0.33..0.34", "0.40.0..0.41.0"):
        with pytest.raises(BadInput):
            parse_releases(bad)


def test_ranges_name_the_last_clean_and_first_showing_release():
    rel = ["0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0"]
    r = ranges(rel, [CLEAN, SHOWS, SHOWS, CLEAN, CLEAN])
    assert r.introduced == [("0.26.0", "0.27.0")] and r.fixed == [("0.28.0", "0.29.0")]
    r = ranges(rel, [NA, NA, SHOWS, "error", SHOWS])  # n/a and errors are skipped, not read as clean
    assert r.introduced == [("n/a:0.27.0", "0.28.0")] and r.fixed == [("0.30.0", None)]
    # a release that cannot express the repro is never called the last clean one
    assert "last clean" not in r.describe()[0] and r.describe()[0].startswith("regression range: n/a -> 0.28.0")
    r = ranges(rel, [SHOWS, OTHER, SHOWS, SHOWS, CLEAN])  # shows again after another finding hid it
    assert r.introduced == [(None, "0.26.0"), ("0.27.0", "0.28.0")]
    assert ranges(rel, [CLEAN] * 5).describe() == ["does not show on any release tried"]


def test_status_reads_the_verdict_for_an_issue_and_the_signatures_for_a_finding():
    issue = Target("x", "s.json", {}, issue="seed-external-hit-unmarked")
    row = {"signatures": ["cache-integrity"], "known": {"cache-integrity": "seed-external-hit-unmarked+other"}}
    assert status(issue, row) == SHOWS
    # attributed only because its fix changes the schedule: the other known fixes alone leave nothing it removes
    assert status(issue, {**row, "needed": False}) == OTHER
    assert status(issue, {"signatures": ["cache-integrity"], "known": {}}) == OTHER
    assert status(issue, {"signatures": [], "known": {}}) == CLEAN
    assert status(issue, {"error": "bad input"}) == NA
    assert status(issue, {"error": "harness error"}) == "error"  # never read as a vLLM verdict
    finding = Target("f", "f.json", {}, signatures=("liveness:stuck",))
    assert status(finding, {"signatures": ["liveness:stuck", "x"]}) == SHOWS
    assert status(finding, {"signatures": ["x"]}) == OTHER


def test_resolve_picks_the_issue_tier_and_refuses_what_is_not_a_target(tmp_path):
    t = resolve("v2-draftless-decode-after-prefill")
    assert t.issue == "v2-draftless-decode-after-prefill" and t.config == {"tier": "engine", "engine": {"runner": "v2"}}
    assert resolve("checkpoint-midblock-start").config == {"tier": "symbolic"}
    artifact = tmp_path / "a.json"
    artifact.write_text(json.dumps({"scenario": {}, "config": {"tier": "engine", "mutant": "m"},
                                    "findings": [{"signature": "liveness:stuck"}], "signature": "liveness:stuck"}))
    t = resolve(str(artifact), runner="v1")
    assert t.signatures == ("liveness:stuck",) and "mutant" not in t.config and t.config["engine"]["runner"] == "v1"
    for bad in ("no-such-issue-or-file", str(ROOT / "README.md")):
        with pytest.raises(BadInput):
            resolve(bad)


def test_known_table_marks_fixed_and_disagreements_with_known_check():
    rel = ["0.27.1", "0.28.0"]
    seed = "seed-external-hit-unmarked"
    row = {"signatures": ["cache-integrity"], "known": {"cache-integrity": seed}}
    results = {"0.27.1": {seed: {**row, "known_check": "reproduces, fix removes it"}},
               "0.28.0": {seed: {"signatures": [], "known": {}, "known_check": "NO LONGER REPRODUCES"}}}
    table, disagree = known_table(results, rel)
    line = next(x for x in table.splitlines() if f"`{seed}`" in x)
    assert "| reproduces | fixed | 0.27.1 -> 0.28.0 |" not in line  # the regression column comes first
    assert line.endswith("| reproduces | fixed | at or before 0.27.1 | 0.27.1 -> 0.28.0 | vllm#51766 (merged) |")
    assert not any(seed in d for d in disagree)
    results["0.28.0"][seed]["known_check"] = "reproduces, fix removes it"
    _, disagree = known_table(results, rel)
    assert any(d.startswith(f"{seed} on 0.28.0") for d in disagree)


def test_severity_and_patched_lines():
    assert severity(["vllm-exception:x", "liveness:stuck"])[0].startswith("crash")
    assert severity(["liveness:stuck"])[0].startswith("stall")
    hunk = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -644,5 +644,6 @@\n a\n b\n-c\n+C\n+D\n e\n"
    assert patched_lines(hunk) == ["vllm/x.py:646"]  # the line it replaces
    assert patched_lines(hunk.replace("-c\n", " c\n")) == ["vllm/x.py:after 646"]  # a pure insertion


def test_every_hand_sized_test_names_a_known_issue_and_imports_only_vllm_torch_and_pytest():
    hand = sorted((ROOT / "upstream" / "tests").glob("*.py"))
    assert hand, "upstream/tests/ is empty"
    for path in hand:
        known_issue_by_id(path.stem)  # StopIteration for a test of no known issue
        text = path.read_text()
        roots = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
        assert roots <= {"vllm", "torch", "pytest", "types"}, (path.name, roots)
        # a test for one of vLLM's own files (appended there: its license header is the file's), at most 80 lines
        assert text.startswith("# vLLM file: tests/") and "\ndef test_" in text and text.count("\n") <= 80


@pytest.mark.slow
def test_a_report_moves_the_repro_onto_a_real_model_and_checks_it_there():
    """report-bug's user configuration: the repro at Nemotron-H 4B's own block (vLLM's rule, no --block-size),
    replayed on the engine tier with the model's KV cache groups, shows the issue and its fix removes it."""
    from harness.bug_report import REAL_MODEL, on_real_model
    from harness.scenario import load_scenario

    issue = known_issue_by_id("sync-external-admission-undercount")
    real = on_real_model(issue, load_scenario(ROOT / issue.repro))
    if real is None:
        pytest.skip(f"this release builds no geometry for {REAL_MODEL}")
    g = real["doc"]["geometry"]
    assert real["checked"] and g["model"] == REAL_MODEL and g["mamba_block_size"] == real["block"] > 16
    hit = real["doc"]["requests"][0]["external"]["tokens"]
    assert hit % real["block"] == 0  # the hit still ends on a Mamba block boundary, the prompt one token past it
    assert real["doc"]["requests"][0]["prompt"]["length"] == hit + 1


def test_every_patch_names_an_open_issue_and_its_fix():
    assert PATCHES, "upstream/patches/ is empty"
    for p in PATCHES:
        issue = known_issue_by_id(p.stem)  # StopIteration for a patch of no known issue
        text = p.read_text()
        assert issue.fix_name in text and "\n--- a/vllm/" in text and "\n+++ b/vllm/" in text
        # one that also changes vLLM's tests says which and why, in the bug report (the issue's patch_note)
        for test_file in {line[6:].strip() for line in text.splitlines() if line.startswith("+++ b/tests/")}:
            assert test_file in issue.patch_note, (p, test_file)


@pytest.mark.slow
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_patch_applies_cleanly_to_the_tree_it_was_made_on(patch, tmp_path):
    """Its vllm/ hunks to the release's tree, its tests/ hunks (where it has some) to the release's sdist tests."""
    version = patch.parent.name if patch.parent.name[0].isdigit() else "0.33.0"
    tree = tree_path(version)
    if not has_tree(version):
        pytest.skip(f"vLLM {version}'s unpacked wheel is not cached at {tree} (python tools/upstream.py patch fills it)")
    parts = upstream.patch_parts(patch.stem, version)
    out = subprocess.run(["patch", "-p1", "--dry-run", "-d", str(tree)], input=parts["vllm"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "offset" not in out.stdout and "fuzz" not in out.stdout.lower(), out.stdout
    sdist_tests = upstream.SDIST_CACHE / "vllm-tests" / version
    if "tests" in parts and not (sdist_tests / "tests").is_dir():
        pytest.skip(f"vLLM {version}'s sdist tests are not extracted at {sdist_tests}")
    if "tests" in parts:
        upstream.patched_tests(sdist_tests, version, [patch.stem], tmp_path / "tests")  # BadInput unless clean


# a patch of the shape upstream/patches/ may hold: a fix under vllm/ and the vLLM test that pinned the bug
FIX_AND_TEST = """note for vLLM's maintainers

--- a/vllm/core.py
+++ b/vllm/core.py
@@ -1,2 +1,2 @@
 x = 1
-y = 2
+y = 3
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1,2 +1,2 @@
 def test_y():
-    assert y == 2
+    assert y == 3
"""


def _fake_release(tmp_path, monkeypatch, patch_text: str) -> tuple[Path, Path]:
    """A stock tree and sdist tests of one file each, the issue's patch `patch_text`: (tree, tests)."""
    tree, tests = tmp_path / "tree", tmp_path / "sdist"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "core.py").write_text("x = 1\ny = 2\n")
    (tree / ".complete").write_text("vllm-0.0.0.whl\n")
    (tests / "tests").mkdir(parents=True)
    (tests / "tests" / "test_core.py").write_text("def test_y():\n    assert y == 2\n")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "some-issue.patch").write_text(patch_text)
    monkeypatch.setattr(upstream, "PATCHES", tmp_path / "patches")
    monkeypatch.setattr(upstream, "PATCHED", tmp_path / "patched")
    monkeypatch.setattr(upstream, "fetch_tree", lambda version: tree)
    return tree, tests


def test_a_patch_with_test_hunks_patches_the_tree_and_a_copy_of_vllms_tests_apart(tmp_path, monkeypatch):
    tree, tests = _fake_release(tmp_path, monkeypatch, FIX_AND_TEST)
    assert sorted(upstream.patch_parts("some-issue", "0.33.0")) == ["tests", "vllm"]
    patched = upstream.patched_tree("0.33.0", ["some-issue"])
    assert (patched / "vllm" / "core.py").read_text() == "x = 1\ny = 3\n" and not (patched / "tests").exists()
    # the stock tree and its marker untouched (the copy is hard-linked)
    assert (tree / "vllm" / "core.py").read_text() == "x = 1\ny = 2\n"
    assert (tree / ".complete").read_text() == "vllm-0.0.0.whl\n"
    copy = upstream.patched_tests(tests, "0.33.0", ["some-issue"], tmp_path / "tests-patched")
    assert (copy / "tests" / "test_core.py").read_text().endswith("assert y == 3\n")
    assert (tests / "tests" / "test_core.py").read_text().endswith("assert y == 2\n")  # the stock run's tests
    # a patch of vllm/ alone runs vLLM's tests as shipped
    (tmp_path / "patches" / "some-issue.patch").write_text(FIX_AND_TEST.split("--- a/tests/")[0])
    assert upstream.patched_tests(tests, "0.33.0", ["some-issue"], tmp_path / "unused") == tests
    # the same vllm/ hunks keep the patched tree; changed ones rebuild it
    assert upstream.patched_tree("0.33.0", ["some-issue"]) == patched
    (tmp_path / "patches" / "some-issue.patch").write_text(FIX_AND_TEST.replace("+y = 3", "+y = 5"))
    assert (upstream.patched_tree("0.33.0", ["some-issue"]) / "vllm" / "core.py").read_text() == "x = 1\ny = 5\n"


@pytest.mark.parametrize("bad", [FIX_AND_TEST.replace("assert y == 2", "assert y == 4"),  # does not apply
                                 FIX_AND_TEST.replace("tests/test_core.py", "docs/core.md")])  # nowhere to place it
def test_a_test_hunk_that_does_not_apply_cleanly_or_a_file_outside_vllm_and_tests_is_bad_input(bad, tmp_path,
                                                                                                monkeypatch):
    _, tests = _fake_release(tmp_path, monkeypatch, bad)
    with pytest.raises(BadInput, match="some-issue.patch"):
        upstream.patched_tests(tests, "0.33.0", ["some-issue"], tmp_path / "tests-patched")


def _vllm_style_test(issue_id: str, tmp_path, *tier: str) -> tuple[Path, str]:
    """The issue's repro run here (a finding), then `regression --style vllm`: the test file and where it goes;
    the file imports only vLLM, torch and pytest (and the standard library's types)."""
    art = tmp_path / "art"
    run = subprocess.run([sys.executable, "-m", "harness", "run", str(ROOT / known_issue_by_id(issue_id).repro), *tier,
                          "--artifacts", str(art)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    out = tmp_path / "test_x.py"
    emit = subprocess.run([sys.executable, "-m", "harness", "regression", str(next(art.glob("*.json"))), "--style",
                           "vllm", "--issue", issue_id, "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert emit.returncode == 0, emit.stderr
    _assert_vllm_header_and_imports(out.read_text())
    return out, emit.stdout.split("its place in vLLM's tree: ", 1)[1].rstrip(")\n")


def _assert_vllm_header_and_imports(text: str) -> None:
    """vLLM's SPDX header; imports of vLLM, torch and pytest only (and the standard library's types)."""
    assert text.startswith("# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: Copyright contributors")
    roots = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert roots <= {"vllm", "torch", "pytest", "types", "__future__"}, roots


@pytest.mark.slow
def test_vllm_style_test_imports_only_vllm_torch_and_pytest(tmp_path):
    out, place = _vllm_style_test("sync-external-admission-undercount", tmp_path)
    assert place == "tests/v1/core/test_hh_sync_external_admission_undercount.py"
    text = out.read_text()
    assert "def test_sync_external_admission_undercount(" in text and "--kv-transfer-config" in text


RUNNER_BATCH_ISSUES = {"v2-draftless-decode-after-prefill": "v2", "v1-resumed-recompute-as-decode": "v1",
                       "v1-padded-prompt-tail-after-short-extend": "v1"}


def test_vllm_style_places_allocator_and_runner_batch_order_tests_and_refuses_other_runner_issues():
    from harness.vllm_style import folder_for

    assert folder_for(known_issue_by_id("checkpoint-midblock-start")) == "tests/v1/core"
    for issue_id in RUNNER_BATCH_ISSUES:
        assert folder_for(known_issue_by_id(issue_id)) == "tests/v1/worker"
    assert folder_for(known_issue_by_id("v1-readd-resets-num-accepted")) == "tests/v1/worker"  # accepted counts
    with pytest.raises(BadInput, match="v1"):
        folder_for(known_issue_by_id("v1-draftless-step-drops-accepted-offset"))


def test_the_vllm_test_shape_is_registry_data_naming_a_shape_the_emitters_have():
    """Which vLLM-style test an issue gets is the registry's `vllm_test`, never read off a fix's description: each
    names a shape an emitter has, and an issue without one is refused by name."""
    from harness.vllm_style import ACCEPTED_COUNTS, ALLOCATOR, SPLIT_GRID, folder_for
    from harness.vllm_style_runner import SHAPES

    shapes = {ALLOCATOR, SPLIT_GRID, ACCEPTED_COUNTS, *SHAPES}
    named = {k.id: k.vllm_test for k in KNOWN_ISSUES if k.vllm_test}
    assert set(named.values()) <= shapes and set(named.values()) == shapes, named
    for k in KNOWN_ISSUES:
        if not k.vllm_test:
            with pytest.raises(BadInput, match="vllm_test"):
                folder_for(k)


def test_a_decode_behind_a_prompt_chunk_without_drafts_is_the_batch_a_runner_test_keeps():
    from harness.vllm_style_runner import Batch

    # the repro's step 6: c decodes (its prompt done), a is a fresh 2-token prompt (1 + K)
    rows = {"c": (1, 0, 4, 4), "a": (2, 0, 0, 2)}
    assert Batch(6, rows, ("a", "c"), 2).decode_behind_prompt_chunk()
    assert not Batch(6, rows, ("c", "a"), 2).decode_behind_prompt_chunk()
    # a padded prompt tail (drafts) is decode-shaped: a decode after it stays a decode
    assert not Batch(6, {"c": (2, 1, 8, 8), "t": (2, 1, 7, 8)}, ("t", "c"), 2).decode_behind_prompt_chunk()


def test_the_v1_batches_a_runner_test_keeps_are_a_padded_tail_behind_a_chunk_and_a_draftless_recompute():
    from harness.vllm_style_runner import Batch

    # v1-padded-prompt-tail-after-short-extend's step 5: c a 2-token prompt chunk, d its last prompt token + 1 draft
    rows = {"c": (2, 0, 8, 11), "d": (2, 1, 8, 9)}
    assert Batch(5, rows, ("c", "d"), 2).padded_tail_behind_prompt_chunk()
    assert not Batch(5, rows, ("d", "c"), 2).padded_tail_behind_prompt_chunk()
    # a one-token chunk with prior state is a decode row to V1's Mamba builder: no split before the tail
    assert not Batch(5, {"c": (1, 0, 8, 11), "d": (2, 1, 8, 9)}, ("c", "d"), 2).padded_tail_behind_prompt_chunk()
    # v1-resumed-recompute-as-decode's step 4: a resumed request recomputes 2 tokens (1 + K) without drafts
    assert Batch(4, {"a": (2, 0, 8, 7)}, ("a",), 2).draftless_recompute()
    assert not Batch(4, {"a": (2, 1, 8, 7)}, ("a",), 2).draftless_recompute()  # a decode verifying a draft
    assert not Batch(4, {"a": (2, 0, 5, 7)}, ("a",), 2).draftless_recompute()  # a prompt chunk


def test_the_runner_tests_render_as_python_importing_only_vllm_torch_and_pytest():
    """Each shape's template, filled in for a batch, compiles; no vLLM needed."""
    from types import SimpleNamespace

    from harness.vllm_style_runner import SHAPES, Batch, render

    geometry = SimpleNamespace(mamba_block_size=16, max_model_len=256)
    for issue_id in RUNNER_BATCH_ISSUES:
        shape = SHAPES[known_issue_by_id(issue_id).vllm_test]
        text = render(shape, Batch(5, {"c": (2, 0, 8, 11), "d": (2, 1, 8, 9)}, ("c", "d"), 2), "x", '"""doc"""',
                      geometry)
        compile(text, issue_id, "exec")
        roots = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
        assert roots <= {"vllm", "torch", "pytest", "types"}, roots
        assert 'BATCH = {"c": (2, 0, 8, 11), "d": (2, 1, 8, 9)}' in text and "def test_x():" in text


@pytest.mark.slow
@pytest.mark.parametrize("issue_id", RUNNER_BATCH_ISSUES)
def test_vllm_style_runner_test_fails_on_stock_and_imports_only_vllm_torch_and_pytest(issue_id, tmp_path):
    """The emitted tests/v1/worker test replays the repro's misordered batch on a runner stub: on this release's
    runner it fails exactly as the issue says (a row goes to the wrong Mamba kernels). Skips where the installed
    release has no such runner (V1: 0.32.0-0.33.0, so the 0.33.0 venv runs those)."""
    import os

    issue = known_issue_by_id(issue_id)
    if not issue.repro_expected():
        pytest.skip(f"this release has no {RUNNER_BATCH_ISSUES[issue_id].upper()} runner with the issue's batch order")
    out, place = _vllm_style_test(issue.id, tmp_path, "--tier", "engine", "--runner", RUNNER_BATCH_ISSUES[issue_id])
    assert place == f"tests/v1/worker/test_hh_{issue_id.replace('-', '_')}.py"
    # vLLM's CPU settings (the V1 test's InputBatch pins host memory only with an accelerator)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    if "pin_memory=True requires a CUDA" in test.stdout:  # 0.26-0.27's InputBatch pins host memory unasked
        pytest.skip("this release's V1 InputBatch cannot be built on a CPU-only machine (pin_memory)")
    assert test.returncode == 1 and " to the Mamba " in test.stdout, test.stdout[-2000:]


def test_vllm_style_split_grid_test_has_vllm_shape_and_compiles():
    """The hidden-state issue's test (the engine core's grid, then the split on it), rendered from the repro's
    values without building a scheduler: vLLM's header and mark, the test named after the issue, the chunk ends
    recorded with the fix, vLLM's engine core and split called; it compiles."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, HiddenStateCacheSpec, KVCacheGroupSpec, MambaSpec

    from harness.vllm_style import folder_for
    from harness.vllm_style_split_grid import SplitCase, render_test

    assert folder_for(known_issue_by_id("hidden-state-group-splits-off-mamba-grid")) == "tests/v1/core"
    bf16 = torch.bfloat16
    groups = (KVCacheGroupSpec(["model.layers.0.mixer"], MambaSpec(block_size=992, shapes=((4, 9728),), dtypes=(bf16,),
                                                                   mamba_cache_mode="align")),
              KVCacheGroupSpec(["model.layers.12.self_attn.attn"],
                               FullAttentionSpec(block_size=992, num_kv_heads=8, head_size=128, dtype=bf16)),
              KVCacheGroupSpec(["hidden_states.cache_only_layers.0"],
                               HiddenStateCacheSpec(block_size=124, num_kv_heads=3, head_size=3136, dtype=bf16)))
    case = SplitCase(block=992, budget=1500, max_model_len=8192, prompt_len=2600, num_blocks=128, groups=groups,
                     fields={"use_eagle_block_drop": False}, long_prefill=0, expected=(992, 1984, 2480, 2600))
    text = render_test(case, '"""Doc."""', "hidden_state_group_splits_off_mamba_grid")
    compile(text, "test_hh_hidden_state_group_splits_off_mamba_grid.py", "exec")
    _assert_vllm_header_and_imports(text)
    for line in ("pytestmark = pytest.mark.cpu_test", "def test_hidden_state_group_splits_off_mamba_grid():",
                 "EXPECTED_CHUNK_ENDS = [992, 1984, 2480, 2600]", '"model.layers.0.mixer": MambaSpec(',
                 "dtypes=(torch.bfloat16,),", '"use_eagle_block_drop": False,', "engine._initialize_kv_caches(",
                 "Scheduler._mamba_block_aligned_split("):
        assert line in text, line


@pytest.mark.slow
def test_vllm_style_split_grid_test_fails_on_this_release(tmp_path):
    """The emitted test for the hidden-state issue, from its repro's finding on the engine tier, fails on this
    release (the issue is open in 0.28.0-0.34.0) where the issue says: chunk ends off the Mamba grid."""
    issue = known_issue_by_id("hidden-state-group-splits-off-mamba-grid")
    if not issue.repro_expected():
        pytest.skip("this release does not show the issue")
    out, place = _vllm_style_test(issue.id, tmp_path, "--tier", "engine")
    assert place == "tests/v1/core/test_hh_hidden_state_group_splits_off_mamba_grid.py"
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert test.returncode == 1 and "not the Mamba block (992)" in test.stdout, test.stdout[-2000:]


def test_every_known_issue_has_a_bisect_target():
    """The tier its code runs on: a bug only a real forward reaches (e2e_only) is bisected on tier e2e."""
    for k in KNOWN_ISSUES:
        t = issue_target(k)
        assert Path(t.scenario).exists()
        assert t.config["tier"] == "e2e" if k.e2e_only else t.config["tier"] in ("symbolic", "engine")


def test_user_configuration_names_a_shipped_connector_and_the_hidden_state_setup():
    """A report's flags run as given: a KV connector vLLM ships that loads as the repro's hits do, and for
    extract_hidden_states the aux layers and the connector that reads them out (vLLM's own example)."""
    from harness.scenario import load_scenario
    from harness.vllm_style import user_config

    sync = load_scenario(ROOT / known_issue_by_id("sync-external-admission-undercount").repro)
    kw, flags = user_config(sync)
    assert kw["kv_transfer_config"] == {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both",
                                        "kv_connector_extra_config": {"load_async": False}}
    assert not any("<" in flag for flag in flags)
    hidden = load_scenario(ROOT / known_issue_by_id("hidden-state-group-splits-off-mamba-grid").repro)
    kw, _ = user_config(hidden)
    layers = hidden.geometry.hidden_state_layers
    assert kw["speculative_config"]["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == \
        list(range(1, layers + 1))
    assert kw["kv_transfer_config"]["kv_connector"] == "ExampleHiddenStatesConnector"


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_every_issue_open_on_a_release_has_tests_that_fail_on_stock_and_pass_patched(version):
    """bench/results/upstream_tests_X.json (`tools/upstream.py tests`, what the bug reports cite): every known issue
    open on X in the known x release table has a test in vLLM X's own tree that fails on stock and passes with its
    patch, and its repro replays clean on the patched tree."""
    from harness.bisect import open_in

    records = json.loads((ROOT / f"bench/results/upstream_tests_{version}.json").read_text())["records"]
    open_ = open_in(json.loads((ROOT / "bench/results/known_releases.json").read_text()), version)
    assert set(open_) <= {r["issue"] for r in records}, "open issues without a test record"
    for r in records:
        assert "error" not in r, r
        assert (r["stock"], r["fixed"], r["repro_on_patched"], r["ok"]) == ("fails", "passes", "clean", True), r


def test_a_multi_module_mtp_user_config_is_checked_to_run_multi_module_mtp():
    """A multi-module MTP report's flags are checked on a model config carrying that many MTP layers, and vLLM is
    asked whether it then runs multi-module MTP: with K = 1 it does not, and the check says the config is no user
    config of the bug (accepted flags that never reach its path)."""
    from harness.bug_report import checked_config, serve_flags
    from harness.scenario import load_scenario

    from vllm.config import SpeculativeConfig

    if not hasattr(SpeculativeConfig, "use_multi_module_mtp"):
        pytest.skip("this vLLM has no multi-module MTP (0.28+)")
    scenario = load_scenario(ROOT / known_issue_by_id("mtp-reserve-undoes-split-stop").repro)
    if "mtp" not in str(serve_flags(scenario)[1]) or not scenario.geometry.multi_module_mtp:
        pytest.fail("the repro no longer runs multi-module MTP")
    _, flags = serve_flags(scenario)
    said = checked_config(flags, "", scenario.geometry.mtp_modules)
    if "refuses" in said and "speculative" not in said.lower():
        pytest.skip(f"this release's config builder cannot take the real model: {said}")
    assert "accepts it" in said and "runs multi-module MTP" in said and "NOT" not in said, said
    single = [f.replace('"num_speculative_tokens": 3', '"num_speculative_tokens": 1') for f in flags]
    assert "does NOT run multi-module MTP" in checked_config(single, "", scenario.geometry.mtp_modules)


def test_every_report_fits_one_page_and_leads_with_prior_art():
    """docs/upstream: each page at most 500 words of prose and 150 lines, prior art first; a page for a bug an open
    vLLM pull request already fixes is a comment for that pull request; the index lists every page, by severity x
    reach (issue 45)."""
    from harness.bug_report import LINES, WORDS, index, prose_words
    from harness.known_issues import KNOWN_ISSUES

    folder = ROOT / "docs" / "upstream"
    pages = sorted(p for p in folder.glob("*.md") if p.name != "README.md")
    assert len(pages) >= 10
    for page in pages:
        text = page.read_text()
        assert prose_words(text) <= WORDS and text.count("\n") <= LINES, page.name
        assert text.split("\n## ")[0].count("**Prior art"), page.name
        issue = next(k for k in KNOWN_ISSUES if k.id == page.stem)
        assert text.startswith(f"# Comment for [{issue.open_fix.ref}]") if issue.open_fix else \
            text.startswith("# [Bug]: "), page.name
    assert (folder / "README.md").read_text() == index(folder)
