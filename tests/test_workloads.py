"""Workloads from local files (HF datasets, offline): tokenizer, generator, loader, session expansion,
scenarios pointing at a workload, and bad input (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from harness.errors import BadInput
from harness.scenario import load_scenario, parse_scenario, scenario_to_json
from harness.workload_cli import main
from harness.workloads import load_workload, synthetic_sessions, workload_requests, write_workload
from models.tokenizer import BOS, SEP, ByteTokenizer

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"  # not testlib: it imports vLLM

GEOMETRY = {"hash_block_size": 4, "attn_block_size": 8, "mamba_block_size": 16, "num_blocks": 256,
            "max_model_len": 512, "token_budget": 64}


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.text())
def test_tokenizer_round_trip(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert ids[0] == BOS and tok.encode(text, bos=False) == ids[1:]
    assert all(0 <= i < 512 for i in ids)  # the tiny model's vocabulary
    assert tok.decode(ids) == text
    assert tok.decode([*ids, SEP, tok.eos_id]) == text  # specials carry no text


def test_tokenizer_decodes_broken_utf8_with_replacement():
    assert ByteTokenizer().decode([0xE2, 0x82]) == "\ufffd"


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_generated_workloads_load_in_every_format(tmp_path, suffix):
    path = write_workload(tmp_path / f"w{suffix}", sessions=5, turns=3, seed=7)
    rows = synthetic_sessions(sessions=5, turns=3, seed=7)
    assert [(s.id, s.turns) for s in load_workload(path)] == [(r["id"], r["turns"]) for r in rows]
    if suffix == ".json":
        assert isinstance(json.loads(path.read_text()), list)  # a JSON array, not JSON Lines


def test_generator_is_seeded_short_and_shares_system_prompts():
    rows = synthetic_sessions(sessions=8, turns=4, seed=3, system_prompts=2, max_prompt_tokens=90)
    assert rows == synthetic_sessions(sessions=8, turns=4, seed=3, system_prompts=2, max_prompt_tokens=90)
    assert rows != synthetic_sessions(sessions=8, turns=4, seed=4, system_prompts=2, max_prompt_tokens=90)
    assert len({r["turns"][0] for r in rows}) <= 2 < len(rows)  # prefixes shared across sessions
    for r in rows:
        assert 1 <= len(r["turns"]) <= 4
        assert 2 + sum(len(t.encode()) + 1 for t in r["turns"]) <= 90 or len(r["turns"]) == 1


def test_sessions_expand_to_turns_sharing_whole_prefixes(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"id": "a", "turns": ["hi", "there", "you"]}\n{"turns": ["hi", "x"]}\n{"turns": ["solo"]}\n')
    reqs = workload_requests(path, max_tokens=3, arrival_gap=5)
    assert [r["id"] for r in reqs] == ["a.0", "a.1", "a.2", "s1.0", "s1.1", "s2.0"]
    assert [r["arrival_step"] for r in reqs] == [0, 5, 10, 0, 5, 0]
    assert all(r["max_tokens"] == 3 for r in reqs)
    a0, a1, a2, b0, b1, c0 = (r["prompt"]["tokens"] for r in reqs)
    assert a0 == [BOS, *b"hi", SEP] == b0  # equal first turns: a prefix shared across sessions
    assert a1[: len(a0)] == a0 and a2[: len(a1)] == a1 and b1[: len(b0)] == b0
    assert a2 == [BOS, *b"hi", SEP, *b"there", SEP, *b"you", SEP]
    assert ByteTokenizer().decode(c0) == "solo"
    assert [r["id"] for r in workload_requests(path, limit=2)] == ["a.0", "a.1", "a.2", "s1.0", "s1.1"]


def _scenario_file(folder, workload_path, **spec):
    doc = {"version": 1, "geometry": GEOMETRY, "workload": {"path": workload_path, **spec}}
    path = folder / "scen.json"
    path.write_text(json.dumps(doc))
    return path


def test_scenario_pointing_at_a_workload_expands_and_replays_alone(tmp_path):
    (tmp_path / "data").mkdir()
    write_workload(tmp_path / "data" / "chat.parquet", sessions=3, turns=2, seed=1)
    scenario = load_scenario(_scenario_file(tmp_path, "data/chat.parquet", max_tokens=2, arrival_gap=3))
    assert len(scenario.requests) == 6 and scenario.workload.path == "data/chat.parquet"
    assert scenario.requests[1].arrival_step == 3
    doc = scenario_to_json(scenario)
    assert parse_scenario(doc) == scenario  # round trip, no file read
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "artifact.json").write_text(json.dumps({"kind": "hybrid-harness-finding", "scenario": doc}))
    assert load_scenario(elsewhere / "artifact.json") == scenario  # replays without the workload file
    assert "workload" not in scenario_to_json(parse_scenario({"version": 1, "geometry": GEOMETRY,
                                                              "requests": doc["requests"][:1]}))


def test_checked_in_workload_scenario_validates():
    scenario = load_scenario(SCENARIOS / "workload-chat.json")
    assert len(scenario.requests) == 12
    firsts = {tuple(r.prompt.tokens) for r in scenario.requests if r.id.endswith(".0")}
    assert len(firsts) < 4  # system prompts shared across the 4 sessions


def test_minimizer_emptied_requests_are_not_refilled(tmp_path):
    write_workload(tmp_path / "w.jsonl")
    doc = {"version": 1, "geometry": GEOMETRY, "workload": {"path": str(tmp_path / "w.jsonl")}, "requests": []}
    with pytest.raises(BadInput, match="scenario field requests"):
        parse_scenario(doc)


def _write(path, content):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize("name,content,match", [
    ("corrupt.jsonl", '{"turns": ["a"]}\n{"turns": [', "not readable as json"),
    ("corrupt.json", '{"turns": ', "not readable as json"),
    ("empty.jsonl", "", "empty file"),
    ("empty.json", "[]", "not readable as json"),
    ("corrupt.parquet", b"PAR1garbage", "not readable as parquet"),
    ("columns.jsonl", '{"text": "hello"}\n', "expected 'turns'"),
    ("extra.jsonl", '{"turns": ["a"], "bogus": 1}\n', "expected 'turns'"),
    ("type.jsonl", '{"turns": "hello"}\n', "row 0: 'turns' must be"),
    ("blank.jsonl", '{"turns": ["a"]}\n{"turns": ["b", ""]}\n', "row 1: 'turns' must be"),
    ("dup.jsonl", '{"id": "x", "turns": ["a"]}\n{"id": "x", "turns": ["b"]}\n', "'x' is not unique"),
    ("long.jsonl", json.dumps({"id": "x" * 57, "turns": ["a"]}), "row 0: 'id' must be"),
    ("w.csv", "turns\na\n", "unknown format"),
])
def test_bad_workloads_raise_bad_input_naming_the_file(tmp_path, name, content, match):
    path = _write(tmp_path / name, content)
    with pytest.raises(BadInput, match=match) as err:
        load_workload(path)
    assert str(path) in str(err.value)


def test_missing_workload_and_bad_workload_fields(tmp_path):
    with pytest.raises(BadInput, match="cannot read workload .*missing.jsonl"):
        load_workload(tmp_path / "missing.jsonl")
    with pytest.raises(BadInput, match="cannot read workload .*missing.jsonl"):
        load_scenario(_scenario_file(tmp_path, "missing.jsonl"))
    with pytest.raises(BadInput, match="scenario field workload.limit"):
        load_scenario(_scenario_file(tmp_path, "missing.jsonl", limit=0))
    _write(tmp_path / "big.jsonl", json.dumps({"turns": ["x" * 600]}))
    with pytest.raises(BadInput, match="exceeds max_model_len.*big.jsonl"):
        load_scenario(_scenario_file(tmp_path, "big.jsonl"))


def test_main_makes_workloads_and_scenarios_and_exits_2_on_bad_input(tmp_path, capsys):
    out = tmp_path / "w" / "chat.jsonl"
    assert main(["make", str(out), "--sessions", "3", "--turns", "2", "--seed", "5"]) == 0
    scen = tmp_path / "s" / "scen.json"
    scen.parent.mkdir()
    assert main(["scenario", str(out), "-o", str(scen), "--geometry-preset", "small"]) == 0
    doc = json.loads(scen.read_text())
    assert doc["workload"]["path"] == "../w/chat.jsonl" and "requests" not in doc
    assert len(load_scenario(scen).requests) == 6
    capsys.readouterr()
    assert main(["scenario", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "x.json")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    _write(tmp_path / "bad.parquet", b"not parquet")
    assert main(["scenario", str(tmp_path / "bad.parquet"), "-o", str(tmp_path / "x.json")]) == 2
    assert main(["make", str(tmp_path / "w.txt")]) == 2
    assert main(["make", str(tmp_path / "w.jsonl"), "--sessions", "0"]) == 2
