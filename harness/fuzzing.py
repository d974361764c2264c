"""What a fuzz target does with one input: decode, replay, judge, keep new findings on disk.

The target raises `Finding` for an input whose finding signature this campaign has not kept yet (the
libFuzzer worker stops, so a crash file replays with a non-zero exit; campaign workers set HH_KEEP_GOING
and go on instead), and `HarnessFailure` for a harness error, which is
kept apart and never reported as a vLLM finding. Known signatures return normally so the search goes on.
Configuration comes from the environment, so that `python fuzz/TARGET.py FILE` replays like any
libFuzzer target: HH_ARTIFACTS (where findings go), HH_MUTANT (a mutant to apply first), HH_NO_CHECKPOINTS
(no prefill-checkpoint geometries), HH_STOP_ON (signature prefixes that stop the worker), HH_IGNORE_KNOWN
(findings of known stock-vLLM issues are kept but never stop the worker), HH_TIER (symbolic | model),
HH_KEEP_GOING (campaign workers: keep every new finding on disk and go on instead of stopping).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from pathlib import Path

import psutil

from harness.artifacts import finding_artifact, write_json_atomic
from harness.driver import replay
from harness.errors import BadInput, HarnessError
from harness.genome import Budget, decode
from harness.known import known_issue
from harness.oracles import Finding as OracleFinding
from harness.oracles import judge, merge_output_summaries, output_summary
from harness.scenario import scenario_to_json


class Finding(Exception):
    """An oracle fired on this input (a new signature for this campaign)."""


class HarnessFailure(Exception):
    """The harness itself failed on this input; not a vLLM finding."""


def signature_id(signature: str) -> str:
    return hashlib.sha1(signature.encode()).hexdigest()[:12]


def finding_signature(findings: list[OracleFinding]) -> str:
    """One signature per input: the first oracle that fired (oracles are judged in a fixed order)."""
    return findings[0].signature


class Target:
    def __init__(self, artifacts: str | os.PathLike | None = None, mutant: str | None = None,
                 tier: str | None = None) -> None:
        from harness.mutants import apply_mutant
        from harness.vllm_adapter import installed_version, load_vllm, supports_prefill_checkpoints

        load_vllm()
        self.version = installed_version()
        self.mutant = mutant if mutant is not None else os.environ.get("HH_MUTANT") or None
        if self.mutant:
            apply_mutant(self.mutant)
        self.tier = tier or os.environ.get("HH_TIER") or "symbolic"
        self.budget = Budget(checkpoints=supports_prefill_checkpoints() and not os.environ.get("HH_NO_CHECKPOINTS"),
                             small=self.tier == "model")
        self.dir = Path(artifacts or os.environ.get("HH_ARTIFACTS") or "artifacts/fuzz")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.execs = 0
        # HH_STOP_ON=prefix,prefix: only these signatures stop the worker (others are kept and the search goes on)
        self.stop_on = tuple(p for p in os.environ.get("HH_STOP_ON", "").split(",") if p)
        self.ignore_known = bool(os.environ.get("HH_IGNORE_KNOWN"))  # known stock issues never stop a worker
        self.keep_going = bool(os.environ.get("HH_KEEP_GOING"))
        # model tier: generations judged and their symptoms, flushed to ARTIFACTS/../outputs/PID.json (the
        # campaign sums the files into its repeat rate; libFuzzer exits without running Python's atexit)
        self.outputs: dict | None = None
        self.first_exec: float | None = None  # time.monotonic() of the first input (end of start-up)
        self.startup_s: float | None = None

    def known(self) -> set[str]:
        return {p.name for p in self.dir.glob("finding-*")}

    def __call__(self, data: bytes) -> None:
        self.execs += 1
        if self.first_exec is None:
            self.first_exec = time.monotonic()
            self.startup_s = round(time.time() - psutil.Process().create_time(), 2)
        scenario = decode(data, self.budget)
        try:
            trace = replay(scenario, self.mutant, self.tier)
        except (HarnessError, BadInput) as exc:
            self._keep_error(data, scenario, exc)
            raise HarnessFailure(str(exc)) from exc
        except Exception as exc:  # a bug in the harness: kept, never reported as vLLM's
            self._keep_error(data, scenario, exc)
            raise HarnessFailure(repr(exc)) from exc
        if trace.outputs is not None:
            self._count_outputs(trace)
        findings = judge(trace)
        if not findings:
            return
        sig = finding_signature(findings)
        folder = self.dir / f"finding-{signature_id(sig)}"
        if folder.exists():
            return
        self._keep_finding(folder, data, scenario, findings, sig)
        self._flush_outputs()
        if self.keep_going or (self.ignore_known and known_issue(sig)):
            return
        if not self.stop_on or sig.startswith(self.stop_on):
            raise Finding(f"{sig}: {findings[0].headline()}")

    def _count_outputs(self, trace) -> None:
        self.outputs = merge_output_summaries(self.outputs, output_summary(trace))
        if self.execs % 50 == 0:
            self._flush_outputs()

    def _flush_outputs(self) -> None:
        if self.outputs:
            write_json_atomic(self.dir.parent / "outputs" / f"{os.getpid()}.json", self.outputs)

    def _keep_finding(self, folder: Path, data: bytes, scenario, findings, sig: str) -> None:
        """Raw input, decoded scenario and trace excerpt, each written atomically, the folder renamed in last."""
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "input.bin").write_bytes(data)
        artifact = finding_artifact(scenario, findings, self.version, self.mutant, self.tier)
        artifact["signature"] = sig
        artifact["detection"] = {"execs": self.execs, "startup_s": self.startup_s,
                                 "after_startup_s": round(time.monotonic() - self.first_exec, 3)}
        write_json_atomic(tmp / "finding.json", artifact)
        write_json_atomic(tmp / "scenario.json", scenario_to_json(scenario))
        try:
            os.rename(tmp, folder)
        except OSError:  # another worker kept the same signature first
            for p in tmp.iterdir():
                p.unlink()
            tmp.rmdir()

    def _keep_error(self, data: bytes, scenario, exc: BaseException) -> None:
        folder = self.dir / "harness-errors"
        folder.mkdir(exist_ok=True)
        digest = hashlib.sha1(data).hexdigest()[:12]
        (folder / f"{digest}.bin").write_bytes(data)
        write_json_atomic(folder / f"{digest}.json", {
            "kind": "hybrid-harness-error", "error": repr(exc),
            "traceback": "".join(traceback.format_exception(exc)), "scenario": scenario_to_json(scenario)})


def read_finding(path: str | os.PathLike) -> dict:
    """A kept finding (its folder or finding.json) or a `run` artifact; "signature" is always set."""
    path = Path(path)
    if path.is_dir():
        path = path / "finding.json"
    try:
        artifact = json.loads(path.read_text())
        artifact.setdefault("signature", artifact["findings"][0]["signature"])  # a `run` artifact
    except (OSError, json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise BadInput(f"cannot read finding {path}: {exc!r}") from None
    return artifact
