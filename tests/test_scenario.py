"""Scenario validation: malformed input is a clear error naming the field (exit 2 at the CLI)."""

from __future__ import annotations

import json

import pytest

from harness.errors import BadInput
from harness.scenario import load_scenario, parse_scenario
from harness.vllm_adapter import check_supported

BASE = {
    "version": 1,
    "geometry": {"hash_block_size": 2, "attn_block_size": 2, "mamba_block_size": 8, "num_blocks": 32},
    "requests": [{"id": "a", "prompt": {"length": 15}}],
}


def _with(path, value):
    doc = json.loads(json.dumps(BASE))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("path,value,field", [
    (("version",), 2, "version"),
    (("geometry", "num_blocks"), 1, "geometry.num_blocks"),
    (("geometry", "hash_block_size"), 3, "geometry"),
    (("requests", 0, "prompt", "length"), 0, "requests[0].prompt.length"),
    (("requests", 0, "chunks"), [4, 0], "requests[0]"),
    (("requests", 0, "bogus"), 1, "requests[0].bogus"),
    (("requests",), [], "requests"),
])
def test_invalid_fields_are_named(path, value, field):
    with pytest.raises(BadInput) as err:
        parse_scenario(_with(path, value))
    assert f"scenario field {field}" in str(err.value)


def test_references_must_name_earlier_requests():
    doc = _with(("requests",), [
        {"id": "a", "prompt": {"length": 4, "share": {"request": "b", "tokens": 2}}},
        {"id": "b", "prompt": {"length": 4}},
    ])
    with pytest.raises(BadInput, match="must name an earlier request"):
        parse_scenario(doc)
    with pytest.raises(BadInput, match="names no request"):
        parse_scenario(_with(("events",), [{"step": 1, "kind": "abort", "request": "zz"}]))


def test_shared_prefixes_resolve_to_the_same_tokens():
    doc = _with(("requests",), [
        {"id": "a", "prompt": {"length": 15, "seed": 1}},
        {"id": "b", "prompt": {"length": 20, "seed": 2, "share": {"request": "a", "tokens": 14}}},
    ])
    tokens = parse_scenario(doc).prompt_tokens()
    assert tokens["a"][:14] == tokens["b"][:14] and tokens["a"][14] != tokens["b"][14]
    assert len(tokens["b"]) == 20


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "geometry": ')
    with pytest.raises(BadInput, match="not valid JSON"):
        load_scenario(bad)
    with pytest.raises(BadInput, match="cannot read"):
        load_scenario(tmp_path / "missing.json")


@pytest.mark.parametrize("version", ["0.25.1", "nonsense"])
def test_unsupported_vllm_releases_are_bad_input(version):
    with pytest.raises(BadInput):
        check_supported(version)


# no ceiling: a newer tree runs where the feature probes find what the harness needs (harness/release.py)
@pytest.mark.parametrize("version", ["0.26.0", "0.27.1", "0.33.0", "0.33.2", "0.34.0", "0.35.0.dev0", "1.0.0"])
def test_supported_vllm_releases(version):
    """At or above the floor a release is accepted (the feature probes judge the rest): no BadInput, where the
    test above expects one below it."""
    from harness.release import MIN_VERSION, parse_version

    assert parse_version(version) >= MIN_VERSION
    try:
        check_supported(version)
    except BadInput as exc:
        pytest.fail(f"vLLM {version} refused: {exc}")
