"""Verdicts: known issues are judged by replaying with their fix, every finding of an input is classified,
and a known finding never hides a new one (in a replay, a crash file, a sweep or a campaign)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from testlib import ROOT, fixes_applied, run, seed_bug_release, version_tuple

from harness.known_issues import KNOWN_ISSUES, known_issue_by_id
from harness.run_config import RunConfig
from harness.scenario import load_scenario
from harness.verdict import Verdict, classify, judge_scenario

LEAK = "mamba-free-leaks-block"  # a pool leak, on every release 0.26-0.33
# bytes that decode (on any release) to a 3-request K>0 scenario showing the known V1 accepted-count reset
SHARED_INPUT = ROOT / "tests" / "data" / "accepted-reset-input.bin"
TARGET = ROOT / "fuzz" / "symbolic_target.py"
# the tests that share an input with the known V1 accepted-count reset need a release whose scheduler reaches it
needs_accepted_reset = pytest.mark.skipif(
    not known_issue_by_id("v1-readd-resets-num-accepted").repro_expected(),
    reason="this release's chunk rule never reaches the accepted-count reset (known.py repro_from)")


def _sigs(findings) -> set[str]:
    return {f.signature for f in findings}


@pytest.mark.parametrize("issue", KNOWN_ISSUES, ids=lambda k: k.id)
def test_each_known_issue_repro_shows_it_and_its_fix_removes_it(issue):
    if not issue.runs_on("symbolic"):
        pytest.skip(f"{issue.id}: in {issue.code} code, judged on the engine tier (tests/test_engine*.py)")
    if not issue.repro_expected():
        pytest.skip(f"{issue.id}: not reachable by its repro on this vLLM release (fix target or scheduler rule)")
    trace, findings = run(ROOT / issue.repro)
    assert findings, f"{issue.repro} no longer shows {issue.id} on stock vLLM"
    with fixes_applied([issue]):
        _, fixed = run(ROOT / issue.repro)
    assert fixed == [], f"with the fix of {issue.id}: {[f.signature for f in fixed]}"
    verdict = judge_scenario(load_scenario(ROOT / issue.repro), findings, config=RunConfig(tier="symbolic"))
    assert not verdict.is_new and set(verdict.known.values()) == {issue.id}


def test_fixes_are_undone():
    issue = KNOWN_ISSUES[0]
    with fixes_applied([issue]):
        assert issue.fix.is_applied()
    assert not issue.fix.is_applied()


@needs_accepted_reset
def test_a_new_finding_sharing_an_input_with_a_known_one_is_new():
    """The known accepted reset and a pool leak in one input: the leak stays unexplained."""
    scenario = "spec-unscheduled-accepted-reset.json"
    _, stock = run(scenario)
    assert _sigs(stock) == {"provenance:initial-after-accepted-reset"}
    _, mutated = run(scenario, LEAK)
    assert _sigs(mutated) == {"provenance:initial-after-accepted-reset", "pool-accounting"}
    from testlib import mutant

    with mutant(LEAK):
        verdict = judge_scenario(load_scenario(ROOT / "scenarios" / scenario), mutated,
                                 config=RunConfig(tier="symbolic", mutant=LEAK))
    assert verdict.is_new and verdict.unexplained == ["pool-accounting"]
    assert verdict.known == {"provenance:initial-after-accepted-reset": "v1-readd-resets-num-accepted"}


def test_classify_reports_revealed_findings_and_dedups_by_new_set():
    shown = ["vllm-exception:x", "provenance:initial"]
    # the fixes remove the exception; the replay runs on and shows a leak it never reached before
    v = classify(shown, lambda issues: {"provenance:initial", "pool-accounting"})
    assert v.unexplained == ["provenance:initial"] and v.revealed == ["pool-accounting"] and v.is_new
    assert v.new == ["provenance:initial", "revealed:pool-accounting"]
    known_only = classify(["vllm-exception:x"], lambda issues: set())
    assert not known_only.is_new and known_only.known["vllm-exception:x"]
    # same new set, different known company: one dedup key; a different new set: another key
    a = Verdict(["live-column:RUNNING", "x"], known={"x": "k"}, unexplained=["live-column:RUNNING"])
    b = Verdict(["live-column:RUNNING"], unexplained=["live-column:RUNNING"])
    c = Verdict(["live-column:RUNNING", "pool-accounting"], unexplained=["live-column:RUNNING", "pool-accounting"])
    assert a.key == b.key != c.key
    assert Verdict(["x"], known={"x": "k"}).key != Verdict(["y"], known={"y": "k"}).key


def _replay_crash_file(tmp_path, mutant_name: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HH_ARTIFACTS=str(tmp_path / "art"), PYTHONPATH=str(ROOT), HH_MUTANT=mutant_name or "")
    env.pop("HH_KEEP_GOING", None)
    return subprocess.run([sys.executable, str(TARGET), str(SHARED_INPUT)], env=env, capture_output=True, text=True,
                          timeout=300)


@needs_accepted_reset
def test_crash_file_with_new_and_known_findings_fails_every_time(tmp_path):
    results = [_replay_crash_file(tmp_path, LEAK) for _ in range(3)]
    assert [r.returncode != 0 for r in results] == [True, True, True], results[-1].stderr[-2000:]
    assert all("new: pool-accounting" in r.stdout + r.stderr for r in results)
    (folder,) = (tmp_path / "art").glob("finding-*")
    verdict = json.loads((folder / "finding.json").read_text())["verdict"]
    assert verdict["unexplained"] == ["pool-accounting"] and verdict["known"]


@needs_accepted_reset
def test_crash_file_with_known_findings_only_passes(tmp_path):
    r = _replay_crash_file(tmp_path, None)
    assert r.returncode == 0, r.stderr[-2000:]
    (folder,) = (tmp_path / "art").glob("finding-*")
    assert json.loads((folder / "finding.json").read_text())["verdict"]["new"] is False


def _campaign(tmp_path, *extra) -> subprocess.CompletedProcess:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / SHARED_INPUT.name).write_bytes(SHARED_INPUT.read_bytes())
    return subprocess.run([sys.executable, "-m", "harness", "fuzz", "--runs", "2", "--corpus", str(corpus),
                           "--artifacts", str(tmp_path / "art"), "--no-minimize", "--no-progress", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@needs_accepted_reset
def test_campaign_exits_1_when_a_new_finding_shares_an_input_with_a_known_one(tmp_path):
    r = _campaign(tmp_path, "--mutant", LEAK)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert "[NEW]" in r.stdout and "pool-accounting" in r.stdout
    summary = json.loads((tmp_path / "art" / "campaign.json").read_text())
    assert "pool-accounting" in summary["findings_new_signatures"]


@needs_accepted_reset
def test_campaign_with_known_findings_only_exits_0(tmp_path):
    r = _campaign(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "[KNOWN]" in r.stdout and "v1-readd-resets-num-accepted" in r.stdout


@pytest.mark.skipif(seed_bug_release, reason="this release carries the seed bug: its sweep has new findings")
def test_sweep_classifies_every_finding(tmp_path, capsys):
    """A sweep over seeds that hit known issues on stock exits 0 and lists them as KNOWN."""
    from harness.cli import main

    code = main(["sweep", "--count", "40", "--seed", "0", "--artifacts", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    for path in tmp_path.glob("sweep-*.json"):
        doc = json.loads(path.read_text())
        assert doc["verdict"]["new"] is False and doc["verdict"]["known"]


@pytest.mark.skipif(version_tuple() < (0, 27, 0), reason="the sync undercount repro needs 0.27+ connector hits")
def test_pool_is_judged_after_an_exception():
    trace, findings = run("sync-external-admission-undercount.json", LEAK)
    assert trace.exception is not None and trace.pool_end is not None
    assert {"pool-accounting", next(f.signature for f in findings if f.oracle == "vllm-exception")} <= _sigs(findings)


@needs_accepted_reset
def test_minimizing_a_new_finding_keeps_it_new():
    from testlib import mutant

    from harness.minimize import minimize
    from harness.oracles import judge
    from harness.replay import replay

    scenario = load_scenario(ROOT / "scenarios" / "spec-unscheduled-accepted-reset.json")
    with mutant(LEAK):
        small = minimize(scenario, "pool-accounting", seconds=30, new_only=True, config=RunConfig(mutant=LEAK))
        findings = judge(replay(small, config=RunConfig(mutant=LEAK)))
        verdict = judge_scenario(small, findings, config=RunConfig(tier="symbolic", mutant=LEAK))
    assert "pool-accounting" in verdict.unexplained
    assert len(small.requests) <= len(scenario.requests)


def test_known_check_passes_on_this_release(capsys):
    """Every known issue this release should show still reproduces and its fix removes it."""
    from harness.cli import main

    code = main(["known", "check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "NO LONGER" not in out and "DOES NOT REMOVE" not in out


def test_known_check_tells_a_repro_blocked_by_another_finding_from_a_broken_fix():
    """A repro that shows the same findings with its fix applied never reached the issue (another finding
    stopped it first): reported as blocked, not as a fix that no longer works (that exit is a harness error)."""
    from types import SimpleNamespace

    from harness.known_check import BLOCKED, check_known

    other = [SimpleNamespace(signature="vllm-exception:elsewhere")]
    rows = check_known(lambda repro, issues: other)
    replayed = [r for r in rows if "shown" in r]
    assert replayed and all(r["status"] == BLOCKED for r in replayed)
    partly = check_known(lambda repro, issues: other if issues else other + [SimpleNamespace(signature="x")])
    assert all(r["status"] == "FIX DOES NOT REMOVE IT" for r in partly if "shown" in r)


def test_known_check_names_the_issue_a_repro_meets_first_when_only_both_fixes_clean_it():
    """0.27.0-0.31.0's V1 runner: v1-readd's repro is clean only with v1-draftless-step's fix too, and either fix
    alone leaves the same finding. The repro reaches both bugs: reproduces, naming the other, never blocked."""
    from types import SimpleNamespace

    from harness.known_check import check_known
    from harness.known_issues import issues_for

    symbolic = [k for k in issues_for("symbolic") if k.repro_expected()]
    if len(symbolic) < 2:
        pytest.skip("fewer than two known issues open on this release's mirrored tiers")
    issue, other = symbolic[:2]

    def replay(repro, issues):
        fixed = {k.id for k in issues}
        return [] if {issue.id, other.id} <= fixed else [SimpleNamespace(signature="provenance:initial")]

    (row,) = check_known(replay, issues=[issue])
    assert row["status"] == f"reproduces, fix removes it together with {other.id}'s (either alone leaves a finding)"


def test_a_finding_only_fixes_together_remove_is_attributed_to_the_smallest_such_set():
    """A signature no single fix removes is credited to the fixes it needs, not to every fix in force."""
    from types import SimpleNamespace

    issues = [SimpleNamespace(id=n) for n in ("p", "q", "r", "s")]

    def replay(fixes):  # "cache-integrity" goes only with p and r fixed together
        ids = {k.id for k in fixes}
        return set() if {"p", "r"} <= ids else {"cache-integrity"}

    v = classify(["cache-integrity"], replay, issues)
    assert v.known == {"cache-integrity": "p+r"} and not v.is_new


def test_a_campaign_judges_only_findings_kept_by_its_own_configuration(tmp_path):
    """Findings another campaign kept in the same folder (another vLLM release, mutant or tier) keep their own
    verdicts: they neither turn this campaign red nor vanish (listed as another configuration's)."""
    import json

    from harness.campaign import Campaign
    from harness.vllm_adapter import installed_version

    def keep(name, **fields):
        folder = tmp_path / "findings" / name
        folder.mkdir(parents=True)
        doc = {"vllm_version": installed_version(), "mutant": None, "tier": "symbolic",
               "verdict": {"signatures": ["x"], "known": {}, "unexplained": ["x"], "revealed": [], "new": True}}
        (folder / "finding.json").write_text(json.dumps({**doc, **fields}))

    keep("finding-ours")
    keep("finding-other-release", vllm_version="0.0.1")
    keep("finding-mutant", mutant="seed-unmarked-early-return")
    keep("finding-engine", tier="engine")
    c = Campaign(config=RunConfig(), corpus=tmp_path / "corpus", artifacts=tmp_path, jobs=1, seconds=1, runs=None,
                 seed=0, seed_corpus=False, progress=False)
    assert [p.name for p in c.kept_findings()] == ["finding-ours"]
    assert sorted(p.name for p in c.foreign_findings()) == ["finding-engine", "finding-mutant", "finding-other-release"]


@pytest.mark.parametrize("issue_id", ["checkpoint-midblock-start", "async-prompt-tail-rekeyed",
                                      "sync-external-admission-undercount", "v1-readd-resets-num-accepted"])
def test_a_fix_leaves_schedules_outside_its_bug_as_they_are(issue_id):
    """A fix that moved schedules where its bug cannot be would make unrelated findings vanish in the replay
    with fixes applied, and so be credited to it (a new bug hidden behind a known one). Generated scenarios
    without prefill checkpoints, replayed synchronously: identical traces with and without the fix
    (checkpoint-midblock-start stops a prompt-final chunk only where checkpoint blocks are exported;
    async-prompt-tail-rekeyed refuses only a key the synchronous schedule never asks for again)."""
    from dataclasses import astuple

    from harness.generate import random_scenario
    from harness.replay import replay

    issue = known_issue_by_id(issue_id)
    if not issue.applicable():
        pytest.skip(f"{issue_id}: the fix's target is not in this release")
    compared = 0
    for seed in range(40):
        sc = random_scenario(seed, checkpoints=False)
        stock = replay(sc, config=RunConfig(tier="symbolic"))
        with fixes_applied([issue]):
            fixed = replay(sc, config=RunConfig(tier="symbolic"))
        assert [astuple(r) for r in stock.rows] == [astuple(r) for r in fixed.rows], seed
        assert stock.copies == fixed.copies, seed
        compared += 1
    assert compared == 40
