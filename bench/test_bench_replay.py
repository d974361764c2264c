"""The harness itself: symbolic-tier replay of generated scenarios (scenarios per round = 50)."""

from __future__ import annotations

from harness.driver import replay
from harness.generate import random_scenario
from harness.oracles import judge

SCENARIOS = [random_scenario(s, checkpoints=False) for s in range(50)]


def test_replay_symbolic_scenarios(benchmark, info):
    info(tier="symbolic", scenarios=len(SCENARIOS))

    def run():
        for sc in SCENARIOS:
            judge(replay(sc))

    benchmark.pedantic(run, rounds=3, iterations=1)
