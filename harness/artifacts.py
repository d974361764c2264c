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


# -- reading: one reader for every layout a finding was written in -----------------------------------------------
OLDER_CONFIG_FIELDS = ("tier", "model", "mutant", "engine")  # what artifacts carried before `config`


def read_artifact(path: str | os.PathLike, strict: bool = True) -> dict:
    """A finding in any layout hybrid-harness wrote, as one dict: a kept finding (its folder or its finding.json),
    a `run` artifact (no "signature": its first finding's), or an older one (no "config": `artifact_config`; no
    "verdict": `artifact_verdict`). BadInput for a file that is none of them, and (`strict`: to replay it) for one
    without its scenario or signature."""
    from harness.errors import BadInput

    path = Path(path)
    if path.is_dir():
        path = path / "finding.json"
    try:
        artifact = json.loads(path.read_text())
        if not isinstance(artifact, dict) or ("geometry" in artifact and "scenario" not in artifact):
            raise TypeError("a scenario, not a finding")
        if "signature" not in artifact and artifact.get("findings"):  # a `run` artifact: its first finding's
            artifact["signature"] = artifact["findings"][0]["signature"]
        if strict and not (isinstance(artifact.get("scenario"), dict) and artifact.get("signature")):
            raise KeyError("scenario and signature")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, IndexError, TypeError) as exc:
        raise BadInput(f"cannot read finding {path}: {exc!r}") from None
    return artifact


def artifact_config(artifact: dict) -> dict:
    """The run configuration a finding recorded (RunConfig.as_json), or what an older one carried instead."""
    if isinstance(artifact.get("config"), dict):
        return dict(artifact["config"])
    return {k: artifact.get(k) for k in OLDER_CONFIG_FIELDS if artifact.get(k) is not None}


def artifact_verdict(artifact: dict) -> dict:
    """A finding's verdict (harness.verdict.Verdict.to_json); an older finding kept without one showed nothing to
    be known, so every signature counts as new."""
    if "verdict" in artifact:
        return artifact["verdict"]
    sigs = [f["signature"] for f in artifact.get("findings", []) if "signature" in f] or [artifact.get("signature", "?")]
    return {"signatures": sigs, "known": {}, "unexplained": sigs, "revealed": [], "new": True}
