"""Shared test helpers: scenarios from disk, replays with a mutant applied and always undone."""

from __future__ import annotations

import contextlib

import re
from pathlib import Path

import pytest

from harness.mutants import mutant_applied
from harness.oracles import judge
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import load_scenario, parse_scenario
from harness.vllm_adapter import installed_version, supports_prefill_checkpoints

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def version_tuple() -> tuple[int, ...]:
    return tuple(int(x) for x in installed_version().split(".")[:3])


def release_in(releases: str) -> bool:
    """Whether the installed vLLM is in a mutant's `releases` string: "any", "0.33" or "0.28.0-0.33.x"
    (an "x" part matches any; trailing words such as "(reintroduces ...)" are commentary)."""
    spec = releases.split()[0] if releases.strip() else ""
    if spec == "any":
        return True
    if not re.fullmatch(r"\d+(\.(\d+|x))*(-\d+(\.(\d+|x))*)?", spec):
        raise ValueError(f"unreadable releases string {releases!r}")
    lo, _, hi = spec.partition("-")
    lo_t, hi_t = ([int(p) for p in b.split(".") if p != "x"] for b in (lo, hi or lo))
    v = list(version_tuple())
    return lo_t <= v[:len(lo_t)] and v[:len(hi_t)] <= hi_t


mutant = mutant_applied


def run(scenario, mutant_name: str | None = None):
    """Replay a scenario (path, dict or Scenario) and judge it: (trace, findings)."""
    if isinstance(scenario, (str, Path)):
        scenario = load_scenario(SCENARIOS / scenario if not Path(scenario).exists() else scenario)
    elif isinstance(scenario, dict):
        scenario = parse_scenario(scenario)
    with mutant(mutant_name):
        trace = replay(scenario, config=RunConfig(mutant=mutant_name))
    return trace, judge(trace)


def by_oracle(findings, oracle):
    return [f for f in findings if f.oracle == oracle]


def _has_v1_runner() -> bool:
    from harness.release import vllm_release

    return vllm_release().v1_runner


# vLLM's V1 model runner (v1/worker/gpu_model_runner.py): gone from 0.34.0, where V2 is the only runner
HAS_V1_RUNNER = _has_v1_runner()
needs_v1_runner = pytest.mark.skipif(not HAS_V1_RUNNER, reason="this vLLM has no V1 model runner (removed in 0.34.0)")


def engine_runners(*runners: str) -> tuple[str, ...]:
    """The given engine runners this vLLM has (`v1` left out where it has no V1 model runner)."""
    return tuple(r for r in runners if r != "v1" or HAS_V1_RUNNER)


needs_checkpoints = pytest.mark.skipif(
    not supports_prefill_checkpoints(), reason="this vLLM release has no Mamba prefill checkpoint blocks")
seed_bug_release = (0, 26, 0) <= version_tuple() < (0, 28, 0)


@contextlib.contextmanager
def fixed_system(config):
    """The fixes of the known issues this run configuration can reach, in force: where a release ships known bugs
    (0.28.0's V1 runner: v1-draftless-step-drops-accepted-offset, ...), "stock is clean" means the fixed system,
    which is what campaigns fuzz."""
    from harness.known_issues import issues_for

    with fixes_applied(issues_for(config.tier, config.engine.runner)):
        yield


def fixes_applied(issues):
    """These known issues' fixes in force for a with-block, on top of what a test put on (harness/patching.py,
    as a replay whose configuration names them applies them)."""
    from harness.patching import patched
    from harness.run_config import RunConfig

    return patched(RunConfig(fixes=tuple(k.id for k in issues)))


def run_emitted(source: str) -> None:
    """Execute an emitted regression test file's source and call its one test function."""
    namespace: dict = {}
    exec(compile(source, "test_regression.py", "exec"), namespace)
    (test,) = [v for k, v in namespace.items() if k.startswith("test_")]
    test()
