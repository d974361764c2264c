"""One scenario on both engines: `hybrid-harness run --engine sglang` hands a scenario to the SGLang wing, and
`hybrid-harness engines SCENARIO` replays it on vLLM's engine tier here and on the SGLang wing, then sets side by
side what both define: the findings of each (the same oracles), and per request the tokens its first admission
started from (what the prefix cache served it: `Trace.served`) and the prefix each initial Mamba state read held.

The SGLang wing runs in its own venv and process (`.venv-sglang`, `make venv-sglang`): this module imports no
engine; the vLLM side goes through `harness.replay` like every other command. The served prefixes are reported,
not judged: vLLM caches a prompt's Mamba state at block boundaries, SGLang at its track interval (extra_buffer) or
at a request's end (no_buffer), so they differ by design; a state that is not the request's own prefix is a
provenance finding on either engine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_OK, BadInput, HarnessError

ROOT = Path(__file__).resolve().parent.parent
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
# the vLLM process set-up (harness/vllm_env.py) this process made; SGLang's venv is its own
_NOT_FOR_SGLANG = ("CUDA_VISIBLE_DEVICES", "VLLM_TARGET_DEVICE", "TRITON_INTERPRET", "HH_VLLM")


def sglang_wing(*args: str, capture: bool = False, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`python -m harness.sglang ARGS` in the SGLang venv, without this process's vLLM set-up (the one way the
    CLI, the tests and the bench start the wing); BadInput when that venv is missing."""
    if not SGLANG_PYTHON.exists():
        raise BadInput(f"--engine sglang needs the SGLang wing's venv at {SGLANG_PYTHON}: make venv ENGINE=sglang")
    env = {k: v for k, v in os.environ.items() if k not in _NOT_FOR_SGLANG}
    return subprocess.run([str(SGLANG_PYTHON), "-m", "harness.sglang", *args], cwd=ROOT, env=env, text=True,
                          check=False, capture_output=capture, timeout=timeout)


def state_reads(trace) -> dict[str, list[int | None]]:
    """Per request, the length of the prefix each initial Mamba state read held, in order (None: garbage)."""
    reads: dict[str, list[int | None]] = {}
    for r in trace.reads:
        if r.what == "initial":
            reads.setdefault(r.request, []).append(None if r.ssm is None else r.ssm[0])
    return reads


def summary(trace, findings) -> dict:
    """What the cross-engine comparison reads of one engine's run (also the SGLang wing's `--summary`)."""
    return {"engine": trace.vllm_version, "findings": [f.headline() for f in findings], "served": trace.served,
            "state_reads": state_reads(trace)}


def _vllm_side(scenario, config) -> dict:
    from harness.oracles import judge
    from harness.replay import replay

    trace = replay(scenario, config=config)
    return summary(trace, judge(trace))


def _sglang_side(path: str, mutant: str | None) -> dict:
    out = sglang_wing(path, "--summary", *(["--mutant", mutant] if mutant else []), capture=True)
    if out.returncode == EXIT_BAD_INPUT:
        raise BadInput(f"SGLang wing: {out.stderr.strip().splitlines()[-1]}")
    if out.returncode not in (EXIT_OK, EXIT_FINDING):
        raise HarnessError(f"the SGLang wing exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def compare(path: str, scenario, config, sglang_mutant: str | None = None) -> tuple[dict, int]:
    """Both engines' summaries and, per request, the prefix served from cache on each; exit 1 where either engine
    has findings. BadInput (exit 2) where either engine cannot express the scenario."""
    sides = {"sglang": _sglang_side(path, sglang_mutant), "vllm": _vllm_side(scenario, config)}
    served = {rid: {name: side["served"].get(rid) for name, side in sides.items()}
              for rid in [r.id for r in scenario.requests]}
    result = {**sides, "served": served}
    return result, EXIT_FINDING if any(side["findings"] for side in sides.values()) else EXIT_OK


def print_comparison(result: dict) -> None:
    for name in ("vllm", "sglang"):
        side = result[name]
        print(f"{name} ({side['engine']}): {len(side['findings'])} finding(s)")
        for headline in side["findings"]:
            print(f"  {headline}")
    print("request: prompt tokens its first admission was served from cache, vllm / sglang")
    for rid, by in result["served"].items():
        print(f"  {rid}: {by['vllm']} / {by['sglang']}")
