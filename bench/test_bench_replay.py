"""The harness itself: replay of generated scenarios, symbolic tier (50 per round) and model tier (20)."""

from __future__ import annotations

from harness.generate import random_scenario
from harness.oracles import judge
from harness.replay import replay

SCENARIOS = [random_scenario(s, checkpoints=False) for s in range(50)]


def test_replay_symbolic_scenarios(benchmark, info):
    info(tier="symbolic", scenarios=len(SCENARIOS))

    def run():
        for sc in SCENARIOS:
            judge(replay(sc))

    benchmark.pedantic(run, rounds=3, iterations=1)


MODEL_SCENARIOS = [random_scenario(s, checkpoints=False, small=True) for s in range(20)]


def test_replay_model_scenarios(benchmark, info):
    """Model tier: the tiny hybrid LM on pooled state tensors, scored against the uncached reference."""
    info(tier="model", scenarios=len(MODEL_SCENARIOS))

    def run():
        for sc in MODEL_SCENARIOS:
            judge(replay(sc, tier="model"))

    benchmark.pedantic(run, rounds=3, iterations=1)
