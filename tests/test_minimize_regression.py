"""Minimization keeps the signature and shrinks; emitted regression tests fail exactly where the bug is."""

from __future__ import annotations

from harness.minimize import minimize
from harness.oracles import judge
from harness.regression import emit_regression
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import load_scenario

from testlib import SCENARIOS, mutant, run_emitted, seed_bug_release

SEED = SCENARIOS / "seed-external-hit-same-block.json"
MUTANT = None if seed_bug_release else "seed-unmarked-early-return"


def _minimized():
    scenario, config = load_scenario(SEED), RunConfig(mutant=MUTANT)
    with mutant(MUTANT):
        sig = judge(replay(scenario, config=config))[0].signature
        small = minimize(scenario, sig, seconds=60, config=config)
        trace = replay(small, config=config)
        sigs = {f.signature for f in judge(trace)}
    return sig, small, trace, sigs


def test_minimized_seed_keeps_its_signature_and_shrinks():
    sig, small, trace, sigs = _minimized()
    assert sig.startswith("live-column") and sig in sigs
    assert len(small.requests) <= 2 and trace.steps_run <= 4


def test_emitted_regression_fails_with_the_bug_and_passes_without():
    sig, small, _, _ = _minimized()
    source = emit_regression(small, sig, MUTANT)  # recorded without the mutant
    assert "from harness" not in source and "import harness" not in source
    with mutant(MUTANT):
        try:
            run_emitted(source)
        except AssertionError as exc:
            assert "worker row" in str(exc)
        else:
            raise AssertionError("the emitted test passed on the buggy allocator")
    if not seed_bug_release:
        run_emitted(source)  # the fixed allocator passes
