"""GitHub Actions workflows lint clean (structural check with PyYAML; actionlint cannot be installed here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from testlib import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
KNOWN_ACTIONS = re.compile(r"^(actions/(checkout|setup-python|upload-artifact|cache)@v\d+|"
                           r"benchmark-action/github-action-benchmark@v1|google/clusterfuzzlite/actions/\w+@v1)$")


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_is_well_formed(path):
    text = path.read_text()
    doc = yaml.safe_load(text)
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on:` key as True
    assert doc.get("name") and triggers, "name and on: are required"
    assert doc["jobs"], "at least one job"
    for job_id, job in doc["jobs"].items():
        assert job.get("runs-on"), f"{job_id}: runs-on"
        for i, step in enumerate(job["steps"]):
            assert ("uses" in step) != ("run" in step), f"{job_id} step {i}: exactly one of uses/run"
            if "uses" in step:
                assert KNOWN_ACTIONS.match(step["uses"]), f"{job_id} step {i}: unexpected action {step['uses']}"
    assert text.count("${{") == text.count("}}"), "unbalanced ${{ }} expressions"
    for expr in re.findall(r"\$\{\{(.*?)\}\}", text):
        assert re.fullmatch(r"[\w.\s'\"=!&|()-]+", expr), f"odd expression {expr!r}"


def _commands(script: str) -> list[list[str]]:
    """The commands a shell script runs (comments and blank lines dropped, backslash-continued lines joined),
    each split into words."""
    import shlex

    return [shlex.split(line, comments=True) for line in script.replace("\\\n", " ").splitlines()
            if line.strip() and not line.strip().startswith("#")]


def _readme_test_command() -> list[str]:
    """The test command of the README's two-commands block (`make test    # ...`)."""
    block = (ROOT / "README.md").read_text().split("## The two commands", 1)[1].split("```")[1]
    return next(c for c in _commands(block) if c[:2] == ["make", "test"])


def test_ci_workflow_runs_the_readme_test_command():
    want = _readme_test_command()
    assert want == ["make", "test"]
    assert want in _commands((ROOT / ".ci" / "run").read_text()), ".ci/run must run the README's test command"
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    runs = [c for job in doc["jobs"].values() for step in job["steps"] if "run" in step
            for c in _commands(step["run"])]
    assert any(c[: len(want)] == want for c in runs), "the CI workflow must run the README's test command"


def _campaign(tmp_path, signatures=(), code=None):
    tmp_path.mkdir()
    for i, sig in enumerate(signatures):
        folder = tmp_path / "findings" / f"finding-{i}"
        folder.mkdir(parents=True)
        (folder / "finding.json").write_text(json.dumps({"signature": sig, "findings": [{"signature": sig}]}))
    (tmp_path / "campaign.json").write_text(json.dumps({"signatures": {f"finding-{i}": s
                                                                       for i, s in enumerate(signatures)}}))
    if code is not None:
        (tmp_path / "exit-code").write_text(f"{code}\n")
    return tmp_path


def _expect(*args):
    return subprocess.run([sys.executable, str(ROOT / ".github" / "scripts" / "expect_campaign.py"), *map(str, args)],
                          capture_output=True, text=True).returncode


def test_campaign_expectation_script(tmp_path):
    """The nightly/CI check: a clean release must exit 0; a release with a known bug must exit 1 and keep
    a finding with the expected signature; exit 3 (harness error) always fails."""
    seed = _campaign(tmp_path / "seed", ["live-column:RUNNING"], code=1)
    assert _expect(seed, "--expect", "findings", "--signature-prefix", "live-column") == 0
    assert _expect(seed, "--expect", "findings", "--signature-prefix", "provenance:") == 1
    assert _expect(seed, "--expect", "clean") == 1
    assert _expect(seed, 3, "--expect", "findings") == 1
    clean = _campaign(tmp_path / "clean", code=0)
    assert _expect(clean, "--expect", "clean") == 0
    assert _expect(clean, "--expect", "findings") == 1  # the bug stopped being found
    assert _expect(clean, 1, "--expect", "findings") == 1  # exit 1 but nothing kept
    assert _expect(clean, 3, "--expect", "clean") == 1
    assert _expect(tmp_path / "never-ran", "--expect", "clean") == 1  # no exit-code file
    # with verdicts, only new (unexplained or revealed) signatures count: a known issue's live-column does not
    verdicts = _campaign(tmp_path / "verdicts", code=1)
    for name, verdict in (("finding-k", {"unexplained": [], "known": {"live-column:RUNNING": "some-issue"}}),
                          ("finding-n", {"unexplained": ["pool-accounting"], "revealed": []})):
        (verdicts / "findings" / name).mkdir(parents=True)
        (verdicts / "findings" / name / "finding.json").write_text(json.dumps({"verdict": verdict}))
    assert _expect(verdicts, "--expect", "findings", "--signature-prefix", "live-column") == 1
    assert _expect(verdicts, "--expect", "findings", "--signature-prefix", "pool-accounting") == 0


def test_campaign_expectation_known_issues_reported(tmp_path):
    """--expect known (a release carrying registered known issues; the campaign fuzzes the fixed system): exit 0
    and the campaign's summary attributes a kept signature to each named issue."""
    seed = {"signatures": ["live-column:RUNNING"], "known": {"live-column:RUNNING": "seed-external-hit-unmarked"},
            "unexplained": [], "revealed": [], "new": False}
    known = _campaign(tmp_path / "known", code=0)
    (known / "campaign.json").write_text(json.dumps({"verdicts": {"finding-k": seed}}))
    assert _expect(known, "--expect", "known", "--known-issues", "seed-external-hit-unmarked") == 0
    assert _expect(known, "--expect", "clean", "--known-issues", "") == 0  # the workflow's empty `known`
    assert _expect(known, "--expect", "known", "--known-issues", "seed-external-hit-unmarked other-issue") == 1
    assert _expect(known, 1, "--expect", "known", "--known-issues", "seed-external-hit-unmarked") == 1  # new finding
    assert _expect(known, 3, "--expect", "known", "--known-issues", "seed-external-hit-unmarked") == 1
    assert _expect(known, "--expect", "known") == 2  # which issues is part of the expectation
    assert _expect(known, "--expect", "clean", "--known-issues", "seed-external-hit-unmarked") == 2
    silent = _campaign(tmp_path / "silent", code=0)  # exit 0 but nothing reported as known
    (silent / "campaign.json").write_text(json.dumps({"verdicts": {}}))
    assert _expect(silent, "--expect", "known", "--known-issues", "seed-external-hit-unmarked") == 1
    (silent / "campaign.json").unlink()
    assert _expect(silent, "--expect", "known", "--known-issues", "seed-external-hit-unmarked") == 1


def test_bench_values_hand_the_action_one_value_per_benchmark(tmp_path):
    stats = {"min": 1.0, "median": 2.0, "mean": 5.0, "iqr": 0.5, "rounds": 3}
    src = tmp_path / "bench.json"
    src.write_text(json.dumps({"benchmarks": [{"fullname": "bench/x.py::test_a", "stats": stats}]}))
    script = ROOT / ".github" / "scripts" / "bench_values.py"
    for stat, want in (("min", 1.0), ("median", 2.0)):
        subprocess.run([sys.executable, str(script), str(src), str(tmp_path / "out.json"), "--stat", stat], check=True)
        (entry,) = json.loads((tmp_path / "out.json").read_text())
        assert entry["name"] == "bench/x.py::test_a" and entry["unit"] == "s" and entry["value"] == want
    assert "tool: customSmallerIsBetter" in (ROOT / ".github" / "workflows" / "bench.yml").read_text()


def test_every_slow_marked_test_exists():
    """`make test-fast` leaves out the tests tests/conftest.py marks slow: a renamed test must not silently
    move into the fast loop's blind spot or out of it."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    root = ROOT
    assert conftest.SLOW
    for nodeid in conftest.SLOW:
        path, name = nodeid.split("::")
        assert re.search(rf"^def {name}\(", (root / path).read_text(), re.M), nodeid
