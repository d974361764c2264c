"""Findings go to disk, atomically, before anything reports them."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from harness.oracles import Finding
from harness.release import vllm_source
from harness.run_config import RunConfig
from harness.scenario import Scenario, scenario_to_json


def write_json_atomic(path: Path, payload: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=1, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def finding_artifact(scenario: Scenario, findings: list[Finding], vllm_version: str, config: RunConfig,
                     verdict=None, trace=None) -> dict:
    """A self-contained artifact: `hybrid-harness run ARTIFACT.json` replays its scenario under the recorded
    configuration (`config`: RunConfig.as_json, the engine tier's `auto` async scheduling as `trace` resolved it;
    `tier`, `mutant`, `model` and `engine` repeated for readers and older tools). With a verdict
    (harness.verdict.Verdict), it records which findings are known (and by which fix) and which are new;
    "signature" is the first new one (or the first finding of an all-known input)."""
    config = config.with_resolved(trace)
    artifact = {
        "kind": "hybrid-harness-finding",
        **vllm_source().as_json(),
        "vllm_version": vllm_version,
        "mutant": config.mutant,
        "tier": config.tier,
        "model": config.model if config.runs_model else None,
        "engine": config.engine.as_json() if config.tier == "engine" else None,
        "config": config.as_json(),
        "scenario": scenario_to_json(scenario),
        "findings": [f.to_json() for f in findings],
        "signature": verdict.headline_signature if verdict else findings[0].signature,
    }
    if verdict is not None:
        artifact["verdict"] = verdict.to_json()
    if config.tier == "e2e" and trace is not None:  # what users see, from the trace itself
        from harness.e2e_verdict import from_trace

        artifact["e2e"] = from_trace(trace)
    return artifact


def write_finding(directory: Path, stem: str, artifact: dict) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(directory) / f"{stem}-{stamp}-{os.getpid()}.json"
    return write_json_atomic(path, artifact)
