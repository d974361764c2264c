"""vLLM 0.34's new scheduler paths on the engine tier (its own Scheduler): parked connector loads under
max_num_inflight_kv_loads, cache-aware admission, prefix-cache hit limits; their mutants; and what the mirrored
tier and older releases say about them (exit 2, naming what is missing)."""

from __future__ import annotations

import random

import pytest
from testlib import ROOT

from harness import genome
from harness.errors import BadInput
from harness.generate import random_scenario
from harness.run_config import RunConfig
from harness.scenario import SCHEDULER_KNOBS, load_scenario, scenario_to_json
from harness.verdict import replay_and_judge

HIT_LIMITS = ROOT / "tests" / "data" / "hit-limits.json"
PARKED = ROOT / "tests" / "data" / "parked-load-aborted.json"
CACHE_AWARE = ROOT / "tests" / "data" / "cache-aware-admission.json"
DECODE_PUBLISHES = ROOT / "tests" / "data" / "decode-publishes-block.json"
ENGINE = RunConfig(tier="engine")


def _judge(path, config=ENGINE):
    try:
        return replay_and_judge(load_scenario(path), config=config)
    except BadInput as exc:  # a release before 0.34 has neither the knobs nor the hit limit
        assert "0.34.0" in str(exc)
        pytest.skip(str(exc))


@pytest.mark.parametrize("path", [HIT_LIMITS, PARKED, CACHE_AWARE], ids=lambda p: p.stem)
def test_stock_runs_the_new_paths_clean(path):
    _, findings, verdict = _judge(path)
    assert findings == [] and verdict is None


def test_every_admission_of_a_limited_request_is_recorded_within_its_limit():
    trace, _, _ = _judge(HIT_LIMITS)
    assert {rid for _, rid, _, _ in trace.hit_limited} == {"b", "c", "d"}
    assert all(computed <= limit for _, _, limit, computed in trace.hit_limited)


def test_a_lookup_past_the_hit_limit_is_a_finding():
    trace, _, verdict = _judge(HIT_LIMITS, ENGINE.but(mutant="hit-limit-ignored-locally"))
    assert verdict is not None and verdict.is_new and "hit-limit" in verdict.unexplained, verdict
    assert any(computed > limit for _, _, limit, computed in trace.hit_limited)


def test_an_aborted_load_freed_while_in_flight_is_a_finding():
    _, _, verdict = _judge(PARKED, ENGINE.but(mutant="aborted-load-freed-early"))
    assert verdict is not None and verdict.is_new, verdict


def test_a_cache_aware_probe_that_keeps_references_leaks_the_pool():
    _, _, verdict = _judge(CACHE_AWARE, ENGINE.but(mutant="cache-aware-probe-takes-refs"))
    assert verdict is not None and verdict.is_new and "pool-accounting" in verdict.unexplained, verdict


@pytest.mark.parametrize("path", [HIT_LIMITS, PARKED, CACHE_AWARE], ids=lambda p: p.stem)
def test_the_mirrored_tier_refuses_them_naming_the_settings(path):
    with pytest.raises(BadInput, match="prefix_cache_hit_limit|max_num_inflight_kv_loads|cache_aware_admission"):
        replay_and_judge(load_scenario(path), config=RunConfig())


def test_documents_leave_the_settings_out_while_they_hold_vllms_defaults():
    doc = scenario_to_json(random_scenario(3))
    assert not set(SCHEDULER_KNOBS) & set(doc["geometry"])
    assert all("prefix_cache_hit_limit" not in r for r in doc["requests"])
    doc = scenario_to_json(load_scenario(PARKED))
    assert doc["geometry"]["max_num_inflight_kv_loads"] == 2 and "cache_aware_admission_window" not in doc["geometry"]


def test_generator_inputs_written_before_the_draws_decode_without_them():
    budget = genome.Budget(align=True, scheduler_knobs=True)
    seeds = range(60)
    drawn = [genome.decode(genome.generator_input(random.Random(s), seed=s, mask=0), budget) for s in seeds]
    assert any(sc.geometry.max_num_inflight_kv_loads for sc in drawn)
    assert any(r.prefix_cache_hit_limit is not None for sc in drawn for r in sc.requests)
    assert any(len(sc.requests) > 4 for sc in drawn)  # the late requests that evict the cache
    for s in seeds:  # the same seed without the second draws byte: as before the draws existed
        old = genome.decode(genome.generator_input(random.Random(s), seed=s, mask=0)[:-1], budget)
        assert old.geometry.max_num_inflight_kv_loads is None and old.geometry.cache_aware_admission_window is None
        assert all(r.prefix_cache_hit_limit is None for r in old.requests) and len(old.requests) <= 4
        without = genome.Budget(align=True, scheduler_knobs=False, late_pressure=False)
        assert old == genome.decode(genome.generator_input(random.Random(s), seed=s, mask=0), without)


def test_a_state_published_while_its_forward_is_in_flight_is_a_finding():
    """update_from_output publishes finalized states only (0.33+: num_computed_tokens - num_in_flight_tokens); the
    publication oracle sees a key published there whose page the in-flight forward wrote: stock is clean, the bank's
    publish-counts-in-flight is a finding, with the step of the forward that writes it."""
    from harness.release import vllm_release

    if not vllm_release().version.startswith(("0.33", "0.34")):
        pytest.skip("the mutant patches update_from_output's publication (0.33+)")
    trace, findings, _ = _judge(DECODE_PUBLISHES)
    assert trace.async_scheduling and trace.published_in_flight == [] and findings == []
    trace, _, verdict = _judge(DECODE_PUBLISHES, ENGINE.but(mutant="publish-counts-in-flight"))
    assert verdict is not None and verdict.is_new and "publication:in-flight" in verdict.unexplained, verdict
    step, _, prefix, writer = trace.published_in_flight[0]
    assert prefix == "a[:32]" and writer > step
