"""GitHub Actions workflows lint clean (structural check with PyYAML; actionlint cannot be installed here)."""

from __future__ import annotations

import re

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


def test_ci_workflow_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()
