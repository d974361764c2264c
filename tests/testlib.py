"""Shared test helpers: scenarios from disk, replays with a mutant applied and always undone."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.driver import replay
from harness.mutants import mutant_applied
from harness.oracles import judge
from harness.scenario import load_scenario, parse_scenario
from harness.vllm_adapter import installed_version, supports_prefill_checkpoints

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def version_tuple() -> tuple[int, ...]:
    return tuple(int(x) for x in installed_version().split(".")[:3])


mutant = mutant_applied


def run(scenario, mutant_name: str | None = None):
    """Replay a scenario (path, dict or Scenario) and judge it: (trace, findings)."""
    if isinstance(scenario, (str, Path)):
        scenario = load_scenario(SCENARIOS / scenario if not Path(scenario).exists() else scenario)
    elif isinstance(scenario, dict):
        scenario = parse_scenario(scenario)
    with mutant(mutant_name):
        trace = replay(scenario, mutant_name)
    return trace, judge(trace)


def by_oracle(findings, oracle):
    return [f for f in findings if f.oracle == oracle]


needs_checkpoints = pytest.mark.skipif(
    not supports_prefill_checkpoints(), reason="this vLLM release has no Mamba prefill checkpoint blocks")
seed_bug_release = (0, 26, 0) <= version_tuple() < (0, 28, 0)
