"""The mirrored scheduler's connector: a hit that was not admitted is offered again (as a real connector's
get_num_new_matched_tokens does), not dropped; the engine tier's diff found the mirror dropping it."""

from __future__ import annotations

from harness.oracles import judge
from harness.replay import replay
from harness.scenario import parse_scenario


def test_external_hit_offered_again_after_a_refused_admission():
    # b arrives while a holds most of the pool: refused, admitted once a finishes, with its 24 external tokens
    sc = parse_scenario({
        "version": 1,
        "geometry": {"hash_block_size": 4, "attn_block_size": 8, "mamba_block_size": 8, "num_blocks": 10,
                     "max_model_len": 128},
        "requests": [{"id": "a", "prompt": {"length": 40, "seed": 1}, "max_tokens": 3},
                     {"id": "b", "prompt": {"length": 40, "seed": 2}, "arrival_step": 1, "max_tokens": 1,
                      "external": {"tokens": 24, "async": False}}]})
    trace = replay(sc)
    b_new = [rv for rv in trace.rows if rv.request == "b" and rv.kind == "NEW"]
    assert b_new and b_new[0].step > 1, "b should be refused while a runs"
    assert b_new[0].num_computed == 24  # the external hit, offered again
    assert judge(trace) == []
