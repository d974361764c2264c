"""Shrink a finding's scenario on its structure while the same signature still fires.

Greedy to a fixpoint: fewer requests and events, no external hit or drafts where they are not needed,
shorter prompts and decodes, earlier arrivals, fewer speculative tokens, a step limit just past the
finding. Every candidate is a valid scenario replayed through the real allocator.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

from harness.errors import BadInput
from harness.verdict import judge_scenario
from harness.witness import judged
from harness.replay import replay
from harness.run_config import RunConfig
from harness.scenario import Scenario, parse_scenario, scenario_to_json


def _signatures(doc: dict, config: RunConfig, new_only: bool = False) -> tuple[set[str], int]:
    """The signatures a candidate shows (with new_only: only those no known fix explains)."""
    try:
        scenario = parse_scenario(doc)
        trace = replay(scenario, config=config)
    except BadInput:
        return set(), 0
    findings = judged(scenario, config, trace)
    if new_only and findings:
        verdict = judge_scenario(scenario, findings, config=config)
        return set(verdict.unexplained) | set(verdict.revealed), trace.steps_run  # both are new
    return {f.signature for f in findings}, trace.steps_run


def _drop_request(doc: dict, rid: str) -> dict:
    out = copy.deepcopy(doc)
    out["requests"] = [r for r in out["requests"] if r["id"] != rid]
    for r in out["requests"]:
        share = r["prompt"].get("share")
        if share and share["request"] == rid:
            r["prompt"]["share"] = None
    out["events"] = [e for e in out.get("events", []) if e["request"] != rid]
    return out


def _candidates(doc: dict, steps: int) -> Iterator[dict]:
    for r in doc["requests"]:
        yield _drop_request(doc, r["id"])
    for i in range(len(doc.get("events", []))):
        out = copy.deepcopy(doc)
        del out["events"][i]
        yield out
    if doc["max_steps"] > steps + 1:
        yield dict(copy.deepcopy(doc), max_steps=steps + 1)
    g = doc["geometry"]
    if g["num_speculative_tokens"]:
        out = copy.deepcopy(doc)
        out["geometry"]["num_speculative_tokens"] -= 1
        out["geometry"]["eagle_block_drop"] = out["geometry"]["eagle_block_drop"] and out["geometry"]["num_speculative_tokens"] > 0
        for r in out["requests"]:
            r["acceptance"] = [min(a, out["geometry"]["num_speculative_tokens"]) for a in r.get("acceptance", [])]
        yield out
    for flag in ("eagle_block_drop", "prefill_checkpoint"):
        if g.get(flag):
            out = copy.deepcopy(doc)
            out["geometry"][flag] = False
            yield out
    for i, r in enumerate(doc["requests"]):
        def edit(fn, i=i):
            out = copy.deepcopy(doc)
            fn(out["requests"][i])
            return out
        if r.get("external"):
            yield edit(lambda q: q.update(external=None))
        if r.get("acceptance"):
            yield edit(lambda q: q.update(acceptance=[]))
        if r["max_tokens"] > 1:
            yield edit(lambda q: q.update(max_tokens=1))
            yield edit(lambda q: q.update(max_tokens=q["max_tokens"] // 2))
        if r["arrival_step"] > 0:
            yield edit(lambda q: q.update(arrival_step=0))
            yield edit(lambda q: q.update(arrival_step=q["arrival_step"] - 1))
        length = r["prompt"].get("length")
        if length and length > 2:
            floor = max(2, (r["prompt"].get("share") or {}).get("tokens", 0))
            for new in sorted({max(floor, length // 2), max(floor, length - 1)}):
                if new < length:
                    yield edit(lambda q, n=new: q["prompt"].update(length=n))


def minimize(scenario: Scenario, signature: str, *, seconds: float = 120.0, new_only: bool = False,
             config: RunConfig | None = None) -> Scenario:
    """Shrink while `signature` still fires under `config` (default: RunConfig's defaults). With new_only: while
    it stays new, so a new finding never shrinks into a known issue's repro."""
    config = config or RunConfig()
    doc = scenario_to_json(scenario)
    sigs, steps = _signatures(doc, config, new_only)
    if signature not in sigs:
        raise BadInput(f"the scenario does not reproduce signature {signature!r} (got {sorted(sigs)})")
    deadline = time.monotonic() + seconds
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for cand in _candidates(doc, steps):
            if time.monotonic() >= deadline:
                break
            try:
                parse_scenario(cand)
            except BadInput:
                continue
            cand_sigs, cand_steps = _signatures(cand, config, new_only)
            if signature in cand_sigs:
                doc, steps, improved = cand, cand_steps, True
                break
    return parse_scenario(doc)
