"""`python -m harness.sglang sweep`: the project's generated scenarios on the SGLang wing, judged; findings written
to disk before they are reported.

Each scenario is `harness.generate.random_scenario(seed)` projected onto what the wing expresses
(harness/sglang/geometry.py): speculation as NGRAM with 2 speculative tokens (any num_speculative_tokens > 0 becomes 2,
the acceptance patterns kept: a verify accepts min(entry, 2)); no EAGLE block drop, MTP, lookahead hashes or hidden
states, retention, scheduler knobs, preempt events, explicit chunks or hit limits;
Mamba cache modes "all" and "none" read as "align"; the token budget rounded down to a multiple of the page, as
SGLang's server arguments require (srt/arg_groups/validation_hook.py:244 in 0.5.23). The prompts, their shared
prefixes, arrivals, output lengths, external hits and abort events stay the generator's. The coverage-guided campaign
(harness/sglang/campaign.py) projects its inputs the same way (`project`)."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

from harness.artifacts import write_json_atomic
from harness.errors import BadInput
from harness.scenario import OPTIONAL_GEOMETRY, OPTIONAL_REQUEST, Scenario, parse_scenario, scenario_to_json
from harness.sglang.geometry import SPEC_K, SglangRun


def projected(seed: int) -> Scenario:
    """The generator's scenario `seed` as the SGLang wing can replay it (the module docstring)."""
    from harness.generate import random_scenario

    return project(random_scenario(seed, checkpoints=False))


def decoded(data: bytes) -> Scenario:
    """A campaign input's scenario on the wing: the genome's decoding, with external loads that fail (SGLang's
    linker reports them from any batch: harness/sglang/linker.py), projected."""
    from harness.genome import Budget, decode

    return project(decode(data, Budget(load_failures=True)))


def project(scenario: Scenario) -> Scenario:
    """`scenario` as the SGLang wing can replay it (the module docstring): num_speculative_tokens > 0 projected to
    2 (SPEC_K: D = 3 draft tokens, the one the wing runs) with the requests' acceptance patterns kept, clipped to 2
    (without speculation they are emptied); what it cannot express dropped."""
    doc = scenario_to_json(scenario)
    g = doc["geometry"]
    spec = SPEC_K if g.get("num_speculative_tokens") else 0
    g.update(num_speculative_tokens=spec, eagle_block_drop=False, mtp_modules=0, lookahead_hashes=False,
             hidden_state_layers=0, model=None)
    for name in OPTIONAL_GEOMETRY:
        g.pop(name, None)
    g["mamba_cache_mode"] = "align"  # the wing's one mode: prefix caching on (geometry.py)
    page = g["attn_block_size"]  # extra_buffer's page (no_buffer's, 1, divides it)
    g["token_budget"] = max(page, g["token_budget"] // page * page)
    doc["events"] = [e for e in doc.get("events", []) if e["kind"] == "abort"]  # SGLang has no forced preemption
    for r in doc["requests"]:
        r.update(chunks=None, acceptance=[min(a, spec) for a in r.get("acceptance") or []] if spec else [])
        for name in OPTIONAL_REQUEST:
            r.pop(name, None)
    return parse_scenario(doc)


FINDING_KIND = "hybrid-harness-sglang-finding"


def findings_json(findings) -> list[dict]:
    """The findings as the wing writes and prints them (no excerpt: the wing records no calls or rows)."""
    return [{k: v for k, v in f.to_json().items() if k != "excerpt"} for f in findings]


def finding_record(scenario: Scenario, run: SglangRun, findings, **where) -> dict:
    """A kept finding's file: what replays it (`python -m harness.sglang FILE`: the scenario and the run) and where
    it came from (`where`: the sweep's seed, the campaign's input bytes)."""
    return {"kind": FINDING_KIND, **where, "run": asdict(run), "scenario": scenario_to_json(scenario),
            "findings": findings_json(findings)}


def run_sweep(first_seed: int, count: int | None, minutes: float | None, run: SglangRun, artifacts: Path,
              alternate: bool = False) -> dict:
    """Replay and judge seeds from `first_seed` until `count` ran or `minutes` passed; each scenario with findings
    is written to `artifacts` (finding-SEED.json: the scenario, the run and its findings) before it is printed.
    `alternate`: odd seeds run SGLang's no_buffer strategy, even ones `run`'s."""
    from harness.oracles import judge
    from harness.sglang.driver import replay

    started = time.monotonic()
    deadline = started + 60 * minutes if minutes else None
    summary = {"ran": 0, "speculative": 0, "not_expressible": 0, "with_findings": 0, "signatures": {}}
    seed = first_seed
    while (count is None or seed < first_seed + count) and (deadline is None or time.monotonic() < deadline):
        try:
            scenario = projected(seed)
            seed_run = replace(run, strategy="no_buffer") if alternate and seed % 2 else run
            findings = judge(replay(scenario, seed_run))
        except BadInput:  # a geometry the wing refuses (a Mamba block off the page grid): not SGLang's
            summary["not_expressible"] += 1
            seed += 1
            continue
        summary["ran"] += 1
        summary["speculative"] += scenario.geometry.num_speculative_tokens > 0
        if findings:
            summary["with_findings"] += 1
            path = write_json_atomic(artifacts / f"finding-{seed}.json",
                                     finding_record(scenario, seed_run, findings, seed=seed))
            for sig in {f.signature for f in findings}:
                summary["signatures"][sig] = summary["signatures"].get(sig, 0) + 1
            print(f"seed {seed} (+{time.monotonic() - started:.1f} s): "
                  f"{', '.join(sorted({f.signature for f in findings}))} ({path})")
        seed += 1
    summary["seeds"] = [first_seed, seed - 1]
    return summary
