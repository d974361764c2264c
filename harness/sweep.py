"""A seeded sweep: generated scenarios (seeds first..first+count-1, each on the run's budget) judged one by one
(harness.verdict.judge_input), findings and harness errors written to disk before they are reported."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError


@dataclass
class SweepResult:
    count: int
    first_seed: int
    steps: int = 0
    new: list = field(default_factory=list)  # (seed, artifact path)
    known: list = field(default_factory=list)  # seeds
    errors: list = field(default_factory=list)  # (seed, error, artifact path)
    outputs: dict | None = None  # the model forward's output summaries, added up
    startup_s: float = 0.0
    elapsed_s: float = 0.0

    @property
    def per_second(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s else 0.0


def tier_label(config) -> str:
    """"engine tier" names the model forward when it runs (`--forward model`)."""
    return f"{config.tier} tier" + (", model forward" if config.tier == "engine" and config.runs_model else "")


def run_sweep(config, first_seed: int, count: int, artifacts: Path, out=print) -> SweepResult:
    from harness.artifacts import write_json_atomic
    from harness.genome import budget_scenario, run_budget
    from harness.oracles import merge_output_summaries, output_summary
    from harness.scenario import scenario_to_json
    from harness.verdict import finding_artifact, judge_input
    from harness.vllm_adapter import installed_version, load_vllm, supports_prefill_checkpoints

    version = installed_version()
    result = SweepResult(count, first_seed, startup_s=load_vllm())
    checkpoints = config.checkpoints and supports_prefill_checkpoints()
    budget = run_budget(config)  # mode none: vLLM's runners; real models' geometries: the engine tier
    started = time.perf_counter()
    for seed in range(first_seed, first_seed + count):
        scenario = budget_scenario(seed, budget, checkpoints)
        try:
            trace, findings, verdict = judge_input(scenario, config)
        except HarnessError as exc:  # replaying, or replaying with the known fixes applied
            path = write_json_atomic(artifacts / f"harness-error-{seed}.json",
                                     {"kind": "hybrid-harness-error", "error": str(exc),
                                      "scenario": scenario_to_json(scenario)})
            result.errors.append((seed, str(exc), path))
            continue
        result.steps += trace.steps_run
        if trace.outputs is not None:
            result.outputs = merge_output_summaries(result.outputs, output_summary(trace))
        if not findings:
            continue
        path = finding_artifact(scenario, findings, version, config, verdict, trace).write(artifacts, f"sweep-{seed}")
        if verdict.is_new:
            result.new.append((seed, path))
            latent = f"; latent behind {'+'.join(verdict.latent)}" if verdict.latent else ""
            latent += "".join(f"; {sig} a regression of {i}" for sig, i in verdict.regressions.items())
            out(f"FINDING seed {seed}: new {', '.join(verdict.new)} (known: {verdict.known or 'none'}{latent}) ({path})")
        elif verdict.departure:
            out(f"MIRROR DEPARTURE seed {seed} (not a vLLM finding): {', '.join(verdict.new)}; {verdict.engine} "
                f"({path})")
        else:
            result.known.append(seed)
            out(f"KNOWN seed {seed}: {verdict.known} ({path})")
    result.elapsed_s = time.perf_counter() - started
    return result


__all__ = ["SweepResult", "run_sweep", "tier_label"]
