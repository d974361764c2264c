"""No false alarms: generated scenarios on a stock release hold every oracle (fixed seeds)."""

from __future__ import annotations

from harness.generate import random_scenario

from testlib import run, seed_bug_release


def test_generated_scenarios_hold_on_stock_release():
    if seed_bug_release:
        return
    failures = []
    for seed in range(40):
        _, findings = run(random_scenario(seed, checkpoints=False))
        failures += [(seed, f.headline()) for f in findings]
    assert failures == []


def test_seed_mutant_is_visible_to_the_generator():
    if seed_bug_release:
        return
    hits = 0
    for seed in range(200):
        _, findings = run(random_scenario(seed, checkpoints=False), "seed-unmarked-early-return")
        hits += any(f.oracle == "live-column" for f in findings)
        if hits:
            break
    assert hits
