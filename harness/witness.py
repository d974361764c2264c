"""Liveness by witness (issue 45): a request that stock vLLM finishes in a scenario and pool must finish on the
system under test (a mutant, the fixed system's run-time fixes, a patched tree). The liveness oracle judges a stall
only where the pool could hold every stalled request at its largest; below that it cannot tell a hang from a pool
too small. The witness can: it served the request in that pool (`oracles.witness_liveness`).

The witness is the same vLLM without fixes and mutant, replayed in this process; or, for a patched tree fuzzed
through `--vllm`, the stock tree `--witness-vllm` names (RunConfig.witness_vllm), replayed by a long-lived
`hybrid-harness --vllm STOCK witness-serve` process with the same fixes (those of the other known issues). Only a
run that stalls in that band asks for one, once per scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import OrderedDict
from dataclasses import asdict

from harness.errors import HarnessError
from harness.oracles import Finding, how_it_ended, judge, witness_liveness
from harness.run_config import RunConfig
from harness.trace import RunEnd, Trace, VllmException

WITNESS_TIERS = ("symbolic", "model", "engine")  # the tiers whose traces record how the step loop ended
REPLY = "HH-WITNESS "  # the server's reply lines (vLLM may log on stdout too)
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 64
_SERVERS: dict[str, subprocess.Popen] = {}


def stalls(trace: Trace, findings: list[Finding]) -> bool:
    """The run waits forever with requests unfinished and `liveness` could not judge it: the witness decides."""
    end = trace.end
    return (end is not None and end.reason != "done" and bool(end.unfinished) and how_it_ended(end) is not None
            and not any(f.oracle == "liveness" for f in findings))


def witness_config(config: RunConfig) -> RunConfig | None:
    """What the witness runs: stock (no fixes, no mutant) here, or the stock tree with the same fixes; None when
    `config` is the witness itself."""
    if config.tier not in WITNESS_TIERS:
        return None
    if config.witness_vllm:
        return config.but(mutant=None)
    if not config.fixes and not config.mutant:
        return None
    return config.but(fixes=(), mutant=None)


def witness_trace(scenario, config: RunConfig) -> Trace | None:
    """The witness's replay of `scenario` (cached per scenario and configuration), or None where there is none."""
    from harness.scenario import scenario_to_json

    wcfg = witness_config(config)
    if wcfg is None:
        return None
    key = (json.dumps(scenario_to_json(scenario), sort_keys=True), json.dumps(wcfg.as_json(), sort_keys=True))
    if key not in _CACHE:
        _CACHE[key] = _remote(scenario, wcfg) if wcfg.witness_vllm else _local(scenario, wcfg)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return _CACHE[key]


def _local(scenario, config: RunConfig) -> Trace:
    from harness.replay import replay

    trace = replay(scenario, config=config)
    trace.fixes = config.fixes
    return trace


def judged(scenario, config: RunConfig, trace: Trace) -> list[Finding]:
    """The oracles' findings on a replay of `scenario` under `config`, and the witness's where the run stalls
    where `liveness` cannot judge."""
    findings = judge(trace)
    if stalls(trace, findings):
        findings += witness_liveness(trace, witness_trace(scenario, config))
    return findings


def judge_replay(scenario, config: RunConfig) -> tuple[Trace, list[Finding]]:
    """Replay and judge (with the witness): the pipeline's one replay-and-judge step."""
    from harness.replay import replay

    trace = replay(scenario, config=config)
    return trace, judged(scenario, config, trace)


def signatures(scenario, config: RunConfig) -> set[str]:
    return {f.signature for f in judge_replay(scenario, config)[1]}


# -- the stock tree's witness, in its own process -------------------------------------------------------------
def _server(tree: str) -> subprocess.Popen:
    proc = _SERVERS.get(tree)
    if proc is None or proc.poll() is not None:
        from harness.release import TREE_ENV

        own = os.environ.get(TREE_ENV)
        path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != own]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        env.pop(TREE_ENV, None)
        proc = subprocess.Popen([sys.executable, "-m", "harness", "--vllm", tree, "witness-serve"], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _SERVERS[tree] = proc
    return proc


def _remote(scenario, config: RunConfig) -> Trace:
    from harness.scenario import scenario_to_json

    proc = _server(config.witness_vllm)
    proc.stdin.write(json.dumps({"scenario": scenario_to_json(scenario),
                                 "config": config.but(witness_vllm=None).as_json()}) + "\n")
    proc.stdin.flush()
    for line in proc.stdout:
        if line.startswith(REPLY):
            doc = json.loads(line[len(REPLY):])
            if "error" in doc:
                raise HarnessError(f"the liveness witness ({config.witness_vllm}) failed: {doc['error']}")
            trace = Trace(doc["vllm_version"], None, vllm_source=doc["vllm_source"], vllm_kind=doc["vllm_kind"],
                          fixes=tuple(config.fixes))
            trace.end = RunEnd.from_json(doc["end"]) if doc["end"] else None
            if doc["raised"]:
                trace.exception = VllmException(**doc["raised"])
            return trace
    raise HarnessError(f"the liveness witness ({config.witness_vllm}) exited ({proc.wait()})")


def serve() -> int:
    """`hybrid-harness --vllm STOCK witness-serve`: one JSON request per stdin line ({scenario, config}), one reply
    line each (REPLY + {vllm_version, end, raised}), until stdin closes."""
    from harness.release import vllm_source
    from harness.replay import replay
    from harness.scenario import parse_scenario

    source = vllm_source()
    for line in sys.stdin:
        try:
            doc = json.loads(line)
            trace = replay(parse_scenario(doc["scenario"]), config=RunConfig.from_json(doc["config"]))
            reply = {**source.as_json(), "end": trace.end.as_json() if trace.end else None,
                     "raised": asdict(trace.exception) if trace.exception else None}
        except Exception as exc:  # noqa: BLE001 - reported to the caller as the witness's error, never a finding
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(REPLY + json.dumps(reply), flush=True)
    return 0
