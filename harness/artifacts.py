"""Findings go to disk, atomically, before anything reports them."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from harness.oracles import Finding
from harness.replay import runs_model
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


def finding_artifact(scenario: Scenario, findings: list[Finding], vllm_version: str, mutant: str | None,
                     tier: str = "symbolic", verdict=None) -> dict:
    """A self-contained artifact: `hybrid-harness run ARTIFACT.json` replays its scenario (in its tier).
    With a verdict (harness.known.Verdict), it records which findings are known (and by which fix) and which
    are new; "signature" is the first new one (or the first finding of an all-known input)."""
    artifact = {
        "kind": "hybrid-harness-finding",
        "vllm_version": vllm_version,
        "mutant": mutant,
        "tier": tier,
        "model": (os.environ.get("HH_MODEL") or "random") if runs_model(tier) else None,
        "engine": _engine_options() if tier == "engine" else None,
        "scenario": scenario_to_json(scenario),
        "findings": [f.to_json() for f in findings],
        "signature": verdict.headline_signature if verdict else findings[0].signature,
    }
    if verdict is not None:
        artifact["verdict"] = verdict.to_json()
    return artifact


def _engine_options() -> dict:
    from harness.engine.options import resolved

    return resolved().as_json()  # `auto` as it resolved: the replay runs the input the same way


def write_finding(directory: Path, stem: str, artifact: dict) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(directory) / f"{stem}-{stamp}-{os.getpid()}.json"
    return write_json_atomic(path, artifact)
