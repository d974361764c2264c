"""Which engine-tier workers run on the installed vLLM release: the support matrix in docs/releases.md, checked on every
release the nightly job installs (make test VLLM=X). A worker the harness cannot follow on a release must be
bad input (exit 2) with the reason, never a harness error; the seed scenario's verdict is the release's."""

from __future__ import annotations

import pytest

from harness.errors import BadInput
from harness.oracles import judge
from harness.scenario import load_scenario

from testlib import ROOT, version_tuple

SEED = ROOT / "scenarios" / "seed-external-hit-same-block.json"
RUNS, BAD = "runs", "bad input"
# runner -> outcome with the default (torch) kernels, per release line; "auto" is the runner vLLM picks
# (V1 before 0.29 for this config, V2 from 0.29), which the harness follows where it has that worker (V2: 0.32 on)
SUPPORT = {
    (0, 26): {"mirror": RUNS, "v1": RUNS, "v2": BAD, "auto": RUNS},
    (0, 27): {"mirror": RUNS, "v1": RUNS, "v2": BAD, "auto": RUNS},
    (0, 28): {"mirror": RUNS, "v1": RUNS, "v2": BAD, "auto": RUNS},
    (0, 29): {"mirror": RUNS, "v1": RUNS, "v2": BAD, "auto": BAD},
    (0, 30): {"mirror": RUNS, "v1": RUNS, "v2": BAD, "auto": BAD},
    (0, 31): {"mirror": RUNS, "v1": RUNS, "v2": BAD, "auto": BAD},
    (0, 32): {"mirror": RUNS, "v1": RUNS, "v2": RUNS, "auto": RUNS},
    (0, 33): {"mirror": RUNS, "v1": RUNS, "v2": RUNS, "auto": RUNS},
    (0, 34): {"mirror": RUNS, "v1": BAD, "v2": RUNS, "auto": RUNS},  # no V1 runner (harness/release.py)
}
RELEASE = version_tuple()[:2]
SEED_BUG = RELEASE in ((0, 26), (0, 27))


@pytest.mark.skipif(RELEASE not in SUPPORT, reason=f"vLLM {RELEASE} is not a release docs/releases.md claims")
@pytest.mark.parametrize("runner", ["mirror", "v1", "v2", "auto"])
def test_engine_worker_support_matches_the_readme(runner):
    from harness.verdict import judge_scenario
    from harness.replay import replay

    from harness.run_config import RunConfig

    config = RunConfig(tier="engine").but(runner=runner)  # the known issues' replays use it too
    scenario = load_scenario(SEED)
    try:
        trace = replay(scenario, config=config)
    except BadInput as exc:
        assert SUPPORT[RELEASE][runner] == BAD, f"--runner {runner} refused: {exc}"
        assert str(exc), "bad input says why"
        return
    assert SUPPORT[RELEASE][runner] == RUNS, f"--runner {runner} ran; docs/releases.md says it is bad input here"
    findings = judge(trace)
    signatures = {f.signature.split(":")[0] for f in findings}
    if SEED_BUG:  # the seed bug, seen by vLLM's own runner as by the mirror: the live-column disagreement
        assert "live-column" in signatures and signatures & {"provenance", "cache-integrity"}
        if not trace.async_scheduling:
            assert {"live-column", "provenance", "cache-integrity"} <= signatures
    else:  # nothing new: 0.28-0.31's V1 runner under async scheduling shows known async-prompt-tail-rekeyed
        assert not findings or not judge_scenario(scenario, findings, config=config).is_new


@pytest.mark.skipif(RELEASE != (0, 32), reason="0.32.x: the V2 worker with vLLM's own (interpreted) kernels")
def test_v2_runs_with_triton_kernels_on_0_32():
    pytest.importorskip("triton")
    from harness.engine_options import EngineOptions
    from harness.engine.scheduler import replay

    assert not judge(replay(load_scenario(SEED), None, EngineOptions(runner="v2", kernels="triton")))
