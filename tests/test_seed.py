"""The seed bug: an external hit whose first continuation stays inside one Mamba block."""

from __future__ import annotations

import pytest

from testlib import SCENARIOS, by_oracle, mutant, run, seed_bug_release

SEED = "seed-external-hit-same-block.json"


def _assert_seed_findings(findings):
    live = by_oracle(findings, "live-column")
    assert len(live) == 1
    f = live[0]
    # the 14 -> 15 step: the worker appended the CoW block, the core replaced column 1 with it
    assert (f.step, f.request, f.group, f.columns) == (2, "a", 1, [1])
    assert f.actual == "worker row [0, 3, 4]" and f.expected == "core row [0, 4]"
    cache = by_oracle(findings, "cache-integrity")
    assert cache and cache[0].step == 2 and "a[:14]" in cache[0].expected and "a[:15]" in cache[0].actual
    prov = by_oracle(findings, "provenance")
    assert prov and prov[0].request == "b" and "a[:14]" in prov[0].expected and "a[:15]" in prov[0].actual


@pytest.mark.skipif(seed_bug_release, reason="vLLM 0.26.0-0.27.1 carry the seed bug")
def test_seed_scenario_holds_on_fixed_release():
    trace, findings = run(SEED)
    assert findings == []
    assert trace.steps_run >= 4 and trace.pool_end["num_free"] == 31


@pytest.mark.skipif(not seed_bug_release, reason="only 0.26.0-0.27.1 carry the seed bug as published")
def test_seed_scenario_trips_on_published_buggy_release():
    _, findings = run(SEED)
    _assert_seed_findings(findings)


@pytest.mark.skipif(seed_bug_release, reason="the published release already has the bug")
def test_seed_mutant_reproduces_the_published_bug():
    _, findings = run(SEED, "seed-unmarked-early-return")
    _assert_seed_findings(findings)


def test_mutant_is_undone_after_use():
    run(SEED, "seed-unmarked-early-return")
    _, findings = run(SEED)
    assert bool(findings) == seed_bug_release


def test_seed_bug_is_a_known_issue_recognised_by_its_fix():
    """0.26.0-0.27.1: every seed finding is credited to the seed bug's known issue, and 0.28.0's line (mark the
    request on the early return), applied as the fix, removes them all. Later releases have the line: the issue
    does not apply there, and the seed mutant's findings stay new."""
    from harness.known_issues import known_issue_by_id
    from harness.run_config import RunConfig
    from harness.verdict import replay_and_judge
    from testlib import fixes_applied
    from harness.scenario import load_scenario

    issue = known_issue_by_id("seed-external-hit-unmarked")
    assert issue.applicable() == seed_bug_release
    scenario = load_scenario(SCENARIOS / SEED)
    if seed_bug_release:
        _, _, verdict = replay_and_judge(scenario, config=RunConfig(known_fixes=False))
        assert not verdict.is_new and set(verdict.known.values()) == {issue.id}, verdict.to_json()
        with fixes_applied([issue]):
            _, findings = run(SEED)
        assert findings == []
    else:
        with mutant("seed-unmarked-early-return"):
            _, _, verdict = replay_and_judge(
                scenario, config=RunConfig(mutant="seed-unmarked-early-return", known_fixes=False))
        assert verdict.is_new and "live-column:RUNNING" in verdict.unexplained
