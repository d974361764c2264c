"""One run configuration (harness/run_config.py): built at an entry point, passed down, recorded in artifacts;
no module below the entry points reads the environment's HH_* variables."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.run_config import ENV, RunConfig

from testlib import ROOT

# the entry points: the CLI (flags over HH_* defaults), the campaign (writes its workers' variables) and this
# module's from_env, which only entry points call (fuzz/*_target.py, the CLI)
ENTRY_POINTS = {"harness/cli.py", "harness/campaign.py", "harness/run_config.py"}


def test_environment_round_trip():
    config = RunConfig(tier="engine", mutant="cow-copies-dropped", model="trained", known_fixes=False,
                       checkpoints=False).but(runner="v1", async_scheduling="off", kernels="triton", forward="model")
    assert RunConfig.from_env(config.to_env()) == config
    assert RunConfig.from_env({}) == RunConfig()
    assert set(config.to_env()) == set(ENV.values())


def test_json_round_trip_and_older_artifacts():
    config = RunConfig(tier="engine").but(runner="v2", async_scheduling="on")
    assert RunConfig.from_json(config.as_json()) == config
    assert RunConfig.from_json({"config": config.as_json(), "tier": "symbolic"}) == config  # `config` wins
    older = {"tier": "engine", "model": None, "mutant": None,
             "engine": {"runner": "v1", "async_scheduling": "off", "kernels": "torch", "forward": "symbolic"}}
    assert RunConfig.from_json(older) == RunConfig(tier="engine").but(runner="v1", async_scheduling="off")


def test_bad_values_are_bad_input_naming_where_they_came_from():
    with pytest.raises(BadInput, match="HH_ENGINE_RUNNER"):
        RunConfig.from_env({"HH_ENGINE_RUNNER": "v3"})
    with pytest.raises(BadInput, match="HH_KNOWN_FIXES"):
        RunConfig.from_env({"HH_KNOWN_FIXES": "maybe"})
    with pytest.raises(BadInput, match="--runner"):
        RunConfig().but(runner="v3")
    with pytest.raises(BadInput, match="tier"):
        RunConfig(tier="gpu")
    with pytest.raises(BadInput, match="model"):
        RunConfig.from_json({"model": "huge"})


def test_model_forward_defaults_to_the_mirror_worker_unless_a_runner_is_named():
    assert RunConfig.from_env({"HH_ENGINE_FORWARD": "model"}).engine.runner == "mirror"
    assert RunConfig.from_env({"HH_ENGINE_FORWARD": "model", "HH_ENGINE_RUNNER": "v1"}).engine.runner == "v1"
    assert RunConfig.from_env({}).engine.runner == "auto"


def test_runs_model_and_resolution():
    assert RunConfig(tier="model").runs_model and not RunConfig(tier="engine").runs_model
    assert RunConfig(tier="engine").but(forward="model").runs_model

    class Trace:
        async_scheduling = True

    assert RunConfig(tier="engine").with_resolved(Trace()).engine.async_scheduling == "on"
    assert RunConfig(tier="engine").but(async_scheduling="off").with_resolved(Trace()).engine.async_scheduling == "off"
    assert RunConfig().with_resolved(Trace()) == RunConfig()


def _reads_hh_environment(path: Path) -> list[int]:
    """Lines where a module reads an HH_* variable from os.environ / os.getenv."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Subscript, ast.Call)):
            text = ast.unparse(node)
            if ("environ" in text or "getenv" in text) and ("'HH_" in text or "ENV[" in text):
                lines.append(node.lineno)
    return lines


def test_no_module_below_the_entry_points_reads_hh_variables():
    offenders = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in ENTRY_POINTS and (lines := _reads_hh_environment(path)):
            offenders[rel] = lines
    assert not offenders, f"HH_* read below the entry points: {offenders}"
    assert _reads_hh_environment(ROOT / "harness" / "cli.py")  # the check sees a read where there is one


def test_mutant_campaigns_run_what_their_tier_can():
    """Worker mutants' campaigns run on their runner's engine tier, allocator mutants on the mirrored tier; all keep
    make fuzz's checkpoints on (both of vLLM's runners' workers export them)."""
    from harness.mutation import mutant_config

    v1 = mutant_config("v1-accepted-count-lost")
    assert (v1.tier, v1.engine.runner, v1.checkpoints) == ("engine", "v1", True)
    v2 = mutant_config("v2-postcopy-skipped")
    assert (v2.tier, v2.engine.runner, v2.checkpoints) == ("engine", "v2", True)
    core = mutant_config("cow-copies-dropped")
    assert (core.tier, core.checkpoints, core.mutant) == ("symbolic", True, "cow-copies-dropped")
    assert mutant_config("cow-copies-dropped", "engine").tier == "engine"
