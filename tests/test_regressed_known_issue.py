"""A known issue that shows up in a vLLM past the last release it was known in (a developer's branch that brings a
fixed bug back) is a regression: new (exit 1), marked with the issue its fix still removes, never filed KNOWN
because its old code is back."""

from __future__ import annotations

import pytest
from testlib import ROOT

import harness.known_issues as known_issues
from harness.fixes import all_fixes
from harness.fixes.targets import Fix
from harness.run_config import RunConfig
from harness.scenario import load_scenario
from harness.verdict import replay_and_judge

SEED = "seed-external-hit-unmarked"  # fixed in 0.28.0 (harness/known_issues.toml fixed_in)
MUTANT = "seed-unmarked-early-return"  # the seed bug's code, put back


def _pretend(monkeypatch, version):
    """vLLM `version` whose allocator has the seed bug's code: the fix's probe finds its target (a tree with the
    old line back), the bug itself is put back by the mutant."""
    issue = known_issues.known_issue_by_id(SEED)
    monkeypatch.setattr(known_issues, "_installed", lambda: version)
    fix = all_fixes()[issue.fix_name]
    monkeypatch.setitem(all_fixes(), issue.fix_name, Fix(fix.mutant, fix.target, lambda: True))
    _forget()
    return issue


def _forget():
    for cached in (known_issues._applicable_ids, known_issues.issues_for, known_issues.regressed_for):
        cached.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_release_facts():
    yield
    _forget()  # what the release has is read once per process: not the pretended one after a test


@pytest.mark.parametrize("known_fixes", [True, False], ids=["fixed-system", "stock"])
def test_a_fixed_bug_back_past_its_fix_is_a_new_regression(monkeypatch, known_fixes):
    issue = _pretend(monkeypatch, (0, 35, 0))  # a branch past 0.28.0, the release that fixed it
    assert not issue.open_here() and issue in known_issues.regressed_for("symbolic")
    assert issue not in known_issues.issues_for("symbolic")
    scenario = load_scenario(ROOT / issue.repro)
    _, findings, verdict = replay_and_judge(scenario, config=RunConfig(mutant=MUTANT, known_fixes=known_fixes))
    assert findings and verdict.is_new, verdict
    assert SEED not in verdict.known.values(), verdict.to_json()
    assert verdict.regressions and set(verdict.regressions.values()) == {SEED}, verdict.to_json()
    sig = next(iter(verdict.regressions))
    assert verdict.label(sig) == f"NEW (regression of {SEED})"


def test_on_the_releases_it_was_known_in_the_same_bug_is_known(monkeypatch):
    """The same probe and bug on a release before the fix (0.27.1 here): KNOWN, as registered."""
    issue = _pretend(monkeypatch, (0, 27, 1))
    assert issue.open_here() and issue in known_issues.issues_for("symbolic")
    _, _, verdict = replay_and_judge(load_scenario(ROOT / issue.repro),
                                     config=RunConfig(mutant=MUTANT, known_fixes=False))
    assert not verdict.is_new and set(verdict.known.values()) == {SEED}, verdict.to_json()
