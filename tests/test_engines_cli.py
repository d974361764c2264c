"""`hybrid-harness engines` (one scenario on vLLM's engine tier and on the SGLang wing) and `run --engine sglang`:
the SGLang side runs in its own venv and process (harness/engines.py)."""

from __future__ import annotations

import json

import pytest
from testlib import SCENARIOS

from harness.cli import main
from harness.engines import SGLANG_PYTHON

DATA = SCENARIOS.parent / "tests" / "data"
SHARED = DATA / "sglang-shared-prefix.json"


@pytest.fixture(autouse=True)
def _sglang_venv():
    if not SGLANG_PYTHON.exists():
        pytest.skip(f"no SGLang venv at {SGLANG_PYTHON} (make venv-sglang builds it)")
    try:
        from harness.engine.scheduler import EngineDriver  # noqa: F401 - the vLLM side needs the engine tier
    except ImportError as exc:
        pytest.skip(f"this release has no engine tier: {exc}")


# capfd, not capsys: vLLM's V1 runner (the default on 0.26-0.31) initialises its process group under
# suppress_stdout, which asks sys.stdout for a file descriptor (vllm/utils/system_utils.py)
@pytest.mark.slow
def test_both_engines_clean_serve_the_same_whole_prompt_hit(capfd):
    assert main(["engines", str(SHARED), "--json"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert result["vllm"]["findings"] == [] and result["sglang"]["findings"] == []
    # c shares a's whole 40-token prompt, a block (8) and page multiple: both caches serve all of it
    assert result["served"] == {"a": {"vllm": 0, "sglang": 0}, "c": {"vllm": 40, "sglang": 40}}


@pytest.mark.slow
def test_a_planted_sglang_bug_is_red_on_the_sglang_side_only(capfd):
    assert main(["engines", str(SHARED), "--sglang-mutant", "sglang-cow-source-dropped", "--json"]) == 1
    result = json.loads(capfd.readouterr().out)
    assert result["vllm"]["findings"] == []
    assert any(h.startswith("[provenance]") for h in result["sglang"]["findings"])


def test_a_field_sglang_cannot_express_is_bad_input_naming_it(capfd, tmp_path):
    doc = json.loads(SHARED.read_text())
    doc["requests"][1]["chunks"] = [8, 8, 8, 8, 8, 8]
    (tmp_path / "chunks.json").write_text(json.dumps(doc))
    assert main(["engines", str(tmp_path / "chunks.json")]) == 2
    assert "requests[1].chunks" in capfd.readouterr().err


@pytest.mark.slow
def test_an_external_hit_is_served_alike_by_vllms_connector_and_sglangs_linker(capfd):
    """c's hit: a's whole prompt from each cache (40), then the connector's / linker's store to 48."""
    assert main(["engines", str(DATA / "sglang-external.json"), "--json"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert result["served"]["c"] == {"vllm": 48, "sglang": 48}


@pytest.mark.slow
def test_run_engine_sglang_is_the_wings_exit_code():
    assert main(["run", str(SHARED), "--engine", "sglang"]) == 0
    assert main(["run", str(SHARED), "--engine", "sglang", "--mutant", "sglang-cow-source-dropped"]) == 1


def test_run_refuses_vllms_options_for_the_sglang_wing(capfd):
    assert main(["run", str(SHARED), "--engine", "sglang", "--tier", "engine"]) == 2
    assert "--tier" in capfd.readouterr().err


@pytest.mark.slow
def test_run_replays_a_finding_the_sglang_wing_wrote_on_the_sglang_wing(tmp_path):
    """The file names its engine (its kind): `run FILE` needs no --engine; --engine vllm replays its scenario on vLLM."""
    from harness.sglang.sweep import FINDING_KIND

    doc = {"kind": FINDING_KIND, "run": {"mutant": "sglang-cow-source-dropped", "tree_core": "rust",
                                         "strategy": "extra_buffer"},
           "scenario": json.loads(SHARED.read_text()), "findings": []}
    (tmp_path / "f.json").write_text(json.dumps(doc))
    assert main(["run", str(tmp_path / "f.json")]) == 1  # the recorded run's mutant, on SGLang
    assert main(["run", str(tmp_path / "f.json"), "--engine", "vllm"]) == 0
