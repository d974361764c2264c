"""Issue 38: bisect's release parsing and ranges, the known issue x release table, the vLLM-style regression test,
the source patches and the bug report. No network: tests that need a fetched tree or sdist skip, naming it."""

from __future__ import annotations

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
    assert r.introduced == [("0.27.0 (n/a: cannot express the repro)", "0.28.0")] and r.fixed == [("0.30.0", None)]
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
    assert line.endswith("| reproduces | fixed | at or before 0.27.1 | 0.27.1 -> 0.28.0 |")
    assert not any(seed in d for d in disagree)
    results["0.28.0"][seed]["known_check"] = "reproduces, fix removes it"
    _, disagree = known_table(results, rel)
    assert any(d.startswith(f"{seed} on 0.28.0") for d in disagree)


def test_severity_and_patched_lines():
    assert severity(["vllm-exception:x", "liveness:stuck"])[0].startswith("crash")
    assert severity(["liveness:stuck"])[0].startswith("stall")
    assert patched_lines("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -644,8 +644,11 @@\n") == ["vllm/x.py:647-648"]


def test_every_patch_names_an_open_issue_and_its_fix():
    assert PATCHES, "upstream/patches/ is empty"
    for p in PATCHES:
        issue = known_issue_by_id(p.stem)  # StopIteration for a patch of no known issue
        text = p.read_text()
        assert issue.fix_name in text and "\n--- a/vllm/" in text and "\n+++ b/vllm/" in text


@pytest.mark.slow
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_patch_applies_cleanly_to_the_tree_it_was_made_on(patch, tmp_path):
    version = patch.parent.name if patch.parent.name[0].isdigit() else "0.33.0"
    tree = tree_path(version)
    if not has_tree(version):
        pytest.skip(f"vLLM {version}'s unpacked wheel is not cached at {tree} (python tools/upstream.py patch fills it)")
    out = subprocess.run(["patch", "-p1", "--dry-run", "-d", str(tree), "-i", str(patch)], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "offset" not in out.stdout and "fuzz" not in out.stdout.lower(), out.stdout


@pytest.mark.slow
def test_vllm_style_test_imports_only_vllm_torch_and_pytest(tmp_path):
    scenario = ROOT / known_issue_by_id("sync-external-admission-undercount").repro
    art = tmp_path / "art"
    run = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--artifacts", str(art)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    out = tmp_path / "test_x.py"
    emit = subprocess.run([sys.executable, "-m", "harness", "regression", str(next(art.glob("*.json"))), "--style",
                           "vllm", "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert emit.returncode == 0, emit.stderr
    assert "tests/v1/core/test_hh_sync_external_admission_undercount.py" in emit.stdout
    text = out.read_text()
    assert text.startswith("# SPDX-License-Identifier: Apache-2.0\n# SPDX-FileCopyrightText: Copyright contributors")
    assert "def test_sync_external_admission_undercount(" in text and "--kv-transfer-config" in text
    roots = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert roots <= {"vllm", "torch", "pytest", "types", "__future__"}, roots


def test_runner_issues_are_refused_by_the_vllm_style_with_a_reason():
    from harness.vllm_style import folder_for

    assert folder_for(known_issue_by_id("checkpoint-midblock-start")) == "tests/v1/core"
    with pytest.raises(BadInput, match="v1"):
        folder_for(known_issue_by_id("v1-readd-resets-num-accepted"))


def test_every_known_issue_has_a_bisect_target():
    for k in KNOWN_ISSUES:
        t = issue_target(k)
        assert Path(t.scenario).exists() and t.config["tier"] in ("symbolic", "engine")
