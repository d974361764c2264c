"""The CLI's contract: exit 0 all oracles hold, 1 finding (artifact on disk first), 2 bad input."""

from __future__ import annotations

import json

import pytest

from harness.cli import main

from testlib import SCENARIOS, seed_bug_release, version_tuple

SEED = str(SCENARIOS / "seed-external-hit-same-block.json")


def test_run_ok_and_json(tmp_path, capsys):
    # a scenario every supported release holds (the seed scenario trips on 0.26.0-0.27.1)
    assert main(["run", str(SCENARIOS / "workload-chat.json"), "--json", "--artifacts", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["findings"] == [] and out["artifact"] is None
    assert list(tmp_path.iterdir()) == []


def test_finding_writes_artifact_that_replays(tmp_path, capsys):
    mutant = [] if seed_bug_release else ["--mutant", "seed-unmarked-early-return"]
    assert main(["run", SEED, "--json", "--artifacts", str(tmp_path), *mutant]) == 1
    out = json.loads(capsys.readouterr().out)
    (artifact,) = tmp_path.iterdir()
    assert out["artifact"] == str(artifact)
    saved = json.loads(artifact.read_text())
    assert saved["findings"][0]["oracle"] == out["findings"][0]["oracle"] == "live-column"
    assert saved["scenario"]["requests"][0]["id"] == "a"
    # the artifact alone reproduces the finding
    assert main(["run", str(artifact), "--artifacts", str(tmp_path / "again"), *mutant]) == 1
    assert "live-column" in capsys.readouterr().out


def test_bad_inputs_exit_2(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    assert main(["run", str(corrupt)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["run", SEED, "--mutant", "no-such-mutant"]) == 2
    assert "unknown mutant" in capsys.readouterr().err
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"version": 1, "geometry": {}, "requests": []}))
    assert main(["run", str(wrong)]) == 2
    assert "scenario field geometry" in capsys.readouterr().err


@pytest.mark.parametrize("chunk", [
    5,  # 10 -> 15 runs past the prompt's partial-tail boundary (14), where every release stops the chunk
    pytest.param(3, marks=pytest.mark.skipif(  # 10 -> 13 ends mid-block and short of the prompt
        version_tuple() < (0, 27), reason="vLLM 0.26.0 may end a prefill chunk mid-block (aligned since 0.27.0)")),
])
def test_infeasible_explicit_chunk_is_bad_input(tmp_path, capsys, chunk):
    doc = json.loads((SCENARIOS / "seed-external-hit-same-block.json").read_text())
    doc["requests"][0]["chunks"] = [chunk]
    path = tmp_path / "chunks.json"
    path.write_text(json.dumps(doc))
    assert main(["run", str(path), "--artifacts", str(tmp_path)]) == 2
    assert "cannot end a chunk there" in capsys.readouterr().err


def test_one_reader_takes_every_finding_layout_and_refuses_the_rest(tmp_path):
    """harness.artifacts.FindingArtifact (issue 46: one artifact type): a kept finding's folder, a `run` artifact
    without "signature", an older one without "config" or "verdict"; a scenario or a broken file is bad input."""
    import json

    from harness.artifacts import FindingArtifact
    from harness.errors import BadInput
    from harness.run_config import RunConfig

    scenario = json.loads((SCENARIOS / "seed-external-hit-same-block.json").read_text())
    old = {"scenario": scenario, "tier": "engine", "mutant": None, "engine": {"runner": "v1"},
           "findings": [{"signature": "live-column:RUNNING"}]}
    (tmp_path / "finding-x").mkdir()
    (tmp_path / "finding-x" / "finding.json").write_text(json.dumps(old))
    found = FindingArtifact.read(tmp_path / "finding-x")
    assert found.signature == "live-column:RUNNING" and found.as_json() == {**old, "signature": found.signature}
    assert found.config == {"tier": "engine", "engine": {"runner": "v1"}} and not found.has_config
    assert found.verdict is None and not found.is_new  # no verdict recorded; counted as new where one is asked
    assert found.verdict_or_new["new"] and found.verdict_or_new["unexplained"] == ["live-column:RUNNING"]
    assert found.run_config(RunConfig(tier="model")) == RunConfig(tier="model")  # no `config`: the caller's
    for bad in (scenario, [1, 2], "{"):
        path = tmp_path / "bad.json"
        path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(BadInput):
            FindingArtifact.read(path)
    (tmp_path / "bare.json").write_text(json.dumps({"findings": []}))
    with pytest.raises(BadInput):
        FindingArtifact.read(tmp_path / "bare.json")  # nothing to replay
    assert FindingArtifact.read(tmp_path / "bare.json", strict=False).as_json() == {"findings": []}
