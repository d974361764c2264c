"""Findings go to disk, atomically, before anything reports them; `FindingArtifact` is the one finding-artifact
type: what `run`, `sweep`, a campaign worker and `report-bug` write, and what every reader (`run`, `minimize`,
`regression`, `report-bug`, `bisect`, the campaign, its report, `mutants check`) reads back, whatever layout an
older hybrid-harness wrote it in."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from harness.errors import BadInput
from harness.oracles import Finding
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


OLDER_CONFIG_FIELDS = ("tier", "model", "mutant", "engine")  # what artifacts carried before `config`


@dataclass(frozen=True)
class FindingArtifact:
    """One kept finding. `doc` is the JSON object as written (its fields in their order, those a reader does not
    know included), so `as_json` gives back exactly what was read or built; the properties read it in whatever
    layout it was written: a kept finding, a `run` artifact (no "signature": its first finding's), or an older
    one (no "config": the `tier`, `model`, `mutant` and `engine` it carried; no "verdict": every signature new)."""

    doc: Mapping = field(default_factory=dict)

    # -- writing -------------------------------------------------------------------------------------------
    @classmethod
    def of(cls, scenario: Scenario, findings: list[Finding], engine_build: Mapping, config: RunConfig, verdict=None,
           trace=None, e2e: dict | None = None) -> FindingArtifact:
        """A self-contained artifact: `hybrid-harness run ARTIFACT.json` replays its scenario under the recorded
        configuration (`config`: RunConfig.as_json, the engine tier's `auto` async scheduling as `trace` resolved
        it; `tier`, `mutant`, `model` and `engine` repeated for readers and older tools). With a verdict
        (harness.verdict.Verdict), it records which findings are known (and by which fix) and which are new;
        "signature" is the first new one (or the first finding of an all-known input). `engine_build`: the fields
        that name the engine build it ran on (the vLLM wing's: harness.verdict.finding_artifact); `e2e`: what users
        see (tier e2e). The core imports no engine: the wing hands both in."""
        config = config.with_resolved(trace)
        doc = {
            "kind": "hybrid-harness-finding",
            **engine_build,
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
            doc["verdict"] = verdict.to_json()
        if e2e is not None:
            doc["e2e"] = e2e
        return cls(doc)

    def but(self, **fields) -> FindingArtifact:
        """This artifact with fields set (a field it has keeps its place, a new one goes last)."""
        return FindingArtifact({**self.doc, **fields})

    def as_json(self) -> dict:
        return dict(self.doc)

    def write(self, directory: Path, stem: str) -> Path:
        """`run`'s and `sweep`'s artifact file: STEM-TIME-PID.json in `directory`, written atomically."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return write_json_atomic(Path(directory) / f"{stem}-{stamp}-{os.getpid()}.json", self.as_json())

    # -- reading -------------------------------------------------------------------------------------------
    @classmethod
    def from_json(cls, doc, strict: bool = True, where: str = "") -> FindingArtifact:
        """A finding in any layout hybrid-harness wrote. BadInput for a document that is none of them (a scenario,
        not an object), and (`strict`: to replay it) for one without its scenario or signature."""
        try:
            if not isinstance(doc, dict) or ("geometry" in doc and "scenario" not in doc):
                raise TypeError("a scenario, not a finding")
            if "signature" not in doc and doc.get("findings"):  # a `run` artifact: its first finding's
                doc = {**doc, "signature": doc["findings"][0]["signature"]}
            if strict and not (isinstance(doc.get("scenario"), dict) and doc.get("signature")):
                raise KeyError("scenario and signature")
        except (AttributeError, KeyError, IndexError, TypeError) as exc:
            raise BadInput(f"cannot read finding {where}: {exc!r}") from None
        return cls(doc)

    @classmethod
    def read(cls, path: str | os.PathLike, strict: bool = True) -> FindingArtifact:
        """A kept finding (its folder or its finding.json) or an artifact file; see `from_json`."""
        path = Path(path)
        if path.is_dir():
            path = path / "finding.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput(f"cannot read finding {path}: {exc!r}") from None
        return cls.from_json(doc, strict, where=str(path))

    # the fields read as written (None where a layout lacks one)
    scenario = property(lambda self: self.doc.get("scenario"), doc="The scenario as recorded (JSON).")
    signature = property(lambda self: self.doc.get("signature"))
    tier = property(lambda self: self.doc.get("tier"))
    mutant = property(lambda self: self.doc.get("mutant"))
    vllm_version = property(lambda self: self.doc.get("vllm_version"))
    vllm_commit = property(lambda self: self.doc.get("vllm_commit"))
    e2e = property(lambda self: self.doc.get("e2e"), doc="What users see (harness/e2e_verdict.py), where recorded.")

    @property
    def findings(self) -> list[dict]:
        return self.doc.get("findings") or []

    @property
    def detection(self) -> dict:
        """When a campaign worker found it (execs, start-up, seconds after start-up); empty outside campaigns."""
        return self.doc.get("detection") or {}

    @property
    def has_config(self) -> bool:
        """Whether it recorded its whole run configuration (`config`), as every artifact since RunConfig does."""
        return isinstance(self.doc.get("config"), dict)

    @property
    def config(self) -> dict:
        """The run configuration it recorded (RunConfig.as_json), or what an older one carried instead."""
        if self.has_config:
            return dict(self.doc["config"])
        return {k: self.doc.get(k) for k in OLDER_CONFIG_FIELDS if self.doc.get(k) is not None}

    @property
    def engine(self) -> dict:
        """The engine options it recorded (`config`'s, else an older artifact's `engine`)."""
        return dict(self.config.get("engine") or self.doc.get("engine") or {})

    def run_config(self, default: RunConfig) -> RunConfig:
        """The configuration it recorded as a RunConfig; `default` for an older one without `config`."""
        return RunConfig.from_json(self.doc["config"]) if self.has_config else default

    @property
    def verdict(self) -> dict | None:
        """The verdict it recorded (harness.verdict.Verdict.to_json), None for an older one kept without."""
        return self.doc.get("verdict")

    @property
    def is_new(self) -> bool:
        """Its recorded verdict calls it new (an older one without a verdict: not known to be)."""
        return bool((self.verdict or {}).get("new"))

    @property
    def verdict_or_new(self) -> dict:
        """The recorded verdict; an older finding kept without one showed nothing to be known, so every signature
        counts as new."""
        if "verdict" in self.doc:
            return self.doc["verdict"]
        sigs = [f["signature"] for f in self.findings if "signature" in f] or [self.doc.get("signature", "?")]
        return {"signatures": sigs, "known": {}, "unexplained": sigs, "revealed": [], "new": True}
