"""Engine tier on vLLM's own V2 model runner (`--runner v2`, harness/engine/runner_v2.py): vLLM's request
slots, block tables, MambaHybridModelState, sampler and rejection sampler run for real; the forward and the
drafter's proposal are the harness's. Skipped where V2 cannot run (no Triton, or a release whose V2 runner
cannot be built on CPU: exit 2)."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pytest

from harness.engine.options import EngineOptions
from harness.errors import BadInput
from harness.oracles import judge
from harness.scenario import load_scenario
from harness.vllm_adapter import installed_version

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SEED = SCENARIOS / "seed-external-hit-same-block.json"
SPEC = SCENARIOS / "spec-unscheduled-accepted-reset.json"
V2 = EngineOptions(runner="v2", kernels="triton")


def _replay(path: Path, options: EngineOptions):
    from harness.engine.scheduler import EngineDriver

    return EngineDriver(load_scenario(path), None, options).run()


def _v2_unavailable() -> str | None:
    try:
        _replay(SEED, V2)
    except (BadInput, ImportError) as exc:
        return f"vLLM {installed_version()}: no V2 model runner here: {exc}"
    return None


_WHY = _v2_unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def test_v2_seed_rows_and_reads_equal_the_mirror():
    """On the seed scenario (external hit inside one Mamba block) V2 keeps the same rows, reads the same
    states at the same columns (a pre-copy at step 4 included) and every oracle holds on 0.33.0."""
    v2 = _replay(SEED, V2)
    mirror = _replay(SEED, EngineOptions(runner="mirror"))
    assert v2.runner == "v2" and mirror.runner == "mirror"
    assert [astuple(r) for r in v2.rows] == [astuple(r) for r in mirror.rows]
    assert [astuple(r) for r in v2.reads] == [astuple(r) for r in mirror.reads]
    assert any(r.what == "precopy" for r in v2.reads)
    assert v2.exception is None
    if installed_version() == "0.33.0":
        assert judge(v2) == []


def test_v2_keeps_accepted_count_across_a_skipped_step():
    """A running request skipped for a step: V1 re-adds its row with num_accepted reset to 1 (known issue
    v1-readd-resets-num-accepted, the mirror shows it); V2 keeps num_accepted per request slot, so the
    state it reads is right. vLLM's own rejection sampler decided acceptance here."""
    v2 = _replay(SPEC, V2)
    mirror = _replay(SPEC, EngineOptions(runner="mirror"))
    assert {f.oracle for f in judge(mirror)} == {"provenance"}
    assert judge(v2) == []
    decode_reads = [r for r in v2.reads if r.what == "initial"]
    assert decode_reads and all(r.conv == r.want and r.ssm == r.want for r in decode_reads)


def test_auto_is_the_runner_vllm_picks():
    """`--runner auto` resolves from vLLM's own pick (`VllmConfig.use_v2_model_runner`): V2 for this
    hybrid align-mode config with Triton importable."""
    trace = _replay(SEED, EngineOptions(runner="auto", kernels="triton"))
    assert trace.runner == "v2"
