"""Which engine-tier workers run on the installed vLLM release: the README's support matrix, checked on every
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
}
RELEASE = version_tuple()[:2]
SEED_BUG = RELEASE in ((0, 26), (0, 27))


@pytest.mark.skipif(RELEASE not in SUPPORT, reason=f"vLLM {RELEASE} is not a release the README claims")
@pytest.mark.parametrize("runner", ["mirror", "v1", "v2", "auto"])
def test_engine_worker_support_matches_the_readme(runner):
    from harness.engine.options import EngineOptions
    from harness.engine.scheduler import replay

    try:
        trace = replay(load_scenario(SEED), None, EngineOptions(runner=runner))
    except BadInput as exc:
        assert SUPPORT[RELEASE][runner] == BAD, f"--runner {runner} refused: {exc}"
        assert str(exc), "bad input says why"
        return
    assert SUPPORT[RELEASE][runner] == RUNS, f"--runner {runner} ran; the README says it is bad input here"
    signatures = {f.signature.split(":")[0] for f in judge(trace)}
    if SEED_BUG:  # the seed bug, seen by vLLM's own runner as by the mirror
        assert {"live-column", "provenance", "cache-integrity"} <= signatures
    else:
        assert not signatures


@pytest.mark.skipif(RELEASE != (0, 32), reason="0.32.x: the V2 worker with vLLM's own (interpreted) kernels")
def test_v2_runs_with_triton_kernels_on_0_32():
    pytest.importorskip("triton")
    from harness.engine.options import EngineOptions
    from harness.engine.scheduler import replay

    assert not judge(replay(load_scenario(SEED), None, EngineOptions(runner="v2", kernels="triton")))
