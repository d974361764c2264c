"""Model tier: kernels agree with their references, cached runs match the uncached reference on stock vLLM,
wrong states show up as diverging outputs, and the output oracle classifies symptoms."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.driver import Driver
from harness.generate import random_scenario
from harness.model_tier import ModelBackend, OutputRecord
from harness.oracles import LOGIT_TOLERANCE, judge, output_summary, output_symptom
from harness.replay import replay
from harness.scenario import load_scenario, parse_scenario
from harness.run_config import RunConfig
from models import kernels
from models.drafter import ngram_propose
from models.hybrid import HybridLM, ModelConfig, contiguous_kv
from models.reference import full_forward, greedy
from testlib import SCENARIOS, by_oracle, mutant, needs_checkpoints, seed_bug_release

MODEL = HybridLM(ModelConfig())


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_chunk_scan_matches_recurrence():
    T, H, P, N = 9, 4, 3, 5
    x, B, C, h0 = _rand(T, H, P, seed=1), _rand(T, N, seed=2), _rand(T, N, seed=3), _rand(H, P, N, seed=4)
    dt = torch.rand(T, H, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 0.2
    A = -torch.rand(H, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 8
    y1, s1 = kernels.ssd_chunk_scan(x, dt, A, B, C, h0, list(range(T)))
    y2, s2 = kernels.ssd_recurrent(x, dt, A, B, C, h0)
    assert (y1 - y2).abs().max() < 1e-12 and (s1 - s2).abs().max() < 1e-12


@settings(derandomize=True, max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_chunked_forward_matches_one_chunk(chunks):
    """Any chunking, carrying Mamba states and keys/values, reproduces the one-chunk reference logits."""
    tokens = [(7 * i + 3) % 500 for i in range(sum(chunks))]
    ref = full_forward(MODEL, tokens)[0]
    kv, _ = contiguous_kv()
    states = MODEL.zero_states()
    rows, start = [], 0
    for n in chunks:
        logits, outs = MODEL.forward(tokens[start:start + n], start, states, kv, [n - 1], 0, recurrent=n == 1)
        states = [o.last() for o in outs]
        rows.append(logits)
        start += n
    assert (torch.cat(rows) - ref).abs().max() < 1e-12


def test_model_is_seeded():
    assert torch.equal(HybridLM(ModelConfig(seed=3)).lm_head, HybridLM(ModelConfig(seed=3)).lm_head)
    assert not torch.equal(HybridLM(ModelConfig(seed=3)).lm_head, MODEL.lm_head)


def test_ngram_drafter_proposes_what_followed():
    assert ngram_propose([1, 2, 3, 9, 1, 2], 2) == [3, 9]
    assert ngram_propose([5, 6, 7], 2) == []
    assert ngram_propose([4, 4], 3) == [4]


def test_layer_skip_drafter_proposes_again_on_the_same_tokens():
    """A preempted request recomputed to the same tokens is proposed for again (V2 under async scheduling with
    the model forward): the drafter has no new token to feed, so it starts over and proposes what it did."""
    from models.drafter import LayerSkipDrafter

    drafter, tokens = LayerSkipDrafter(MODEL), [3, 1, 4, 1, 5, 9]
    first = drafter.propose("a", tokens, 2)
    assert drafter.propose("a", tokens, 2) == first == LayerSkipDrafter(MODEL).propose("a", tokens, 2)
    assert len(drafter.propose("a", tokens + [first[0]], 2)) == 2


@pytest.mark.skipif(seed_bug_release, reason="vLLM 0.26.0-0.27.1 carry the seed bug: b resumes from a wrong "
                    "state (test_seed_bug_diverges_the_second_request)")
def test_seed_scenario_matches_reference_on_stock():
    trace = replay(load_scenario(SCENARIOS / "seed-external-hit-same-block.json"), config=RunConfig(tier="model"))
    assert judge(trace) == []
    s = output_summary(trace)
    assert s["generations"] == 2 and s["diverged"] == 0 and s["max_logit_diff"] < LOGIT_TOLERANCE


def test_seed_bug_diverges_the_second_request():
    """The seed bug (stock 0.26.0-0.27.1, a mutant of later releases): b resumes from a[:15] for a[:14]."""
    name = None if seed_bug_release else "seed-unmarked-early-return"
    with mutant(name):
        trace = replay(load_scenario(SCENARIOS / "seed-external-hit-same-block.json"),
                       config=RunConfig(tier="model", mutant=name))
    out = by_oracle(judge(trace), "output")
    assert [f.request for f in out] == ["b"]
    rec = {r.request: r for r in trace.outputs}
    assert output_symptom(rec["a"]) is None
    assert output_symptom(rec["b"]) in ("repeat", "garbage", "drift") and max(rec["b"].max_diff) > 0.1


@needs_checkpoints
def test_checkpoint_midblock_start_changes_tokens():
    """The stock 0.33.0 prefill-checkpoint issue is visible to users: request c's token differs."""
    trace = replay(load_scenario(SCENARIOS / "checkpoint-midblock-start.json"), config=RunConfig(tier="model"))
    out = by_oracle(judge(trace), "output")
    assert [f.request for f in out] == ["c"] and "cached tokens" in out[0].actual


def test_corrupted_pool_is_caught():
    """The oracle can fail: zero one Mamba page the second request will resume from."""
    sc = load_scenario(SCENARIOS / "seed-external-hit-same-block.json")
    backend = ModelBackend(sc.geometry)
    real = backend.forward

    def forward(f):
        if f.request == "b" and f.init is not None:
            backend.pool.ssm[:, f.init[2]] = 0
        real(f)

    backend.forward = forward
    trace = Driver(sc, backend=backend).run()
    assert by_oracle(judge(trace), "output")


def test_speculative_decoding_accepts_by_verification():
    """The layer-skip drafter's drafts are verified against the cached run: some kept, some rejected."""
    doc = {"version": 1, "geometry": {"hash_block_size": 2, "attn_block_size": 4, "mamba_block_size": 8,
                                      "num_blocks": 64, "max_model_len": 128, "num_speculative_tokens": 2},
           "requests": [{"id": "a", "prompt": {"length": 16, "seed": 4}, "max_tokens": 24}]}
    sc = parse_scenario(doc)
    backend = ModelBackend(sc.geometry)
    verified = []
    real = backend.verify

    def verify(request, step, first, drafts):
        tokens = real(request, step, first, drafts)
        verified.append((len(drafts), len(tokens) - 1))
        return tokens

    backend.verify = verify
    trace = Driver(sc, backend=backend).run()
    assert judge(trace) == []
    assert any(n for n, _ in verified), "no drafts proposed"
    accepted = [a for n, a in verified if n]
    assert max(accepted) > 0 and min(accepted) == 0


@pytest.mark.skipif(seed_bug_release, reason="generated scenarios find the seed bug on vLLM 0.26.0-0.27.1 "
                    "(test_sweep.py::test_seed_bug_is_visible_to_the_generator)")
def test_sweep_of_geometries_has_no_false_alarm():
    worst = 0.0
    for seed in range(12):
        trace = replay(random_scenario(seed, checkpoints=False, small=True), config=RunConfig(tier="model"))
        assert judge(trace) == [], seed
        worst = max(worst, output_summary(trace)["max_logit_diff"])
    assert worst < LOGIT_TOLERANCE


def _record(tokens, plen, ref_top, diffs, ref_cont=(), finite=True):
    n = len(tokens) - plen
    margins = [0.0 if ref_top[i] == tokens[plen + i] else 1.0 for i in range(n)]
    return OutputRecord("r", plen, tokens, [0] * n, diffs, ref_top, margins, [10.0] * n, finite,
                        ref_continuation=list(ref_cont))


def test_symptoms():
    prompt = [1, 2, 3, 4, 5, 6]
    assert output_symptom(_record(prompt + [7, 8], 6, [7, 8], [0.0, 0.0])) is None
    # repeats "3 4 5" from the prompt where the reference goes on with 7 8 9
    assert output_symptom(_record(prompt + [3, 4, 5], 6, [7, 4, 5], [1.0] * 3, ref_cont=[7, 8, 9])) == "repeat"
    assert output_symptom(_record(prompt + [9, 9], 6, [9, 9], [0.5, 0.5])) == "drift"  # logits moved only
    assert output_symptom(_record(prompt + [11, 12], 6, [7, 8], [0.5, 0.5], ref_cont=[7, 8])) == "drift"
    assert output_symptom(_record(prompt + [11, 12], 6, [7, 8], [50.0, 1], ref_cont=[7, 8])) == "garbage"
    assert output_symptom(_record(prompt + [7], 6, [7], [float("nan")], finite=False)) == "garbage"


def test_greedy_reference_is_teacher_forced_argmax():
    tokens = [3, 1, 4, 1, 5]
    out = greedy(MODEL, tokens, 3)
    assert out[0] == int(full_forward(MODEL, tokens)[0][-1].argmax())
    assert len(out) == 3


def test_cli_model_tier_records_the_tier(tmp_path, capsys):
    name = None if seed_bug_release else "seed-unmarked-early-return"  # 0.26.0-0.27.1: the bug is stock
    with mutant(name):
        code = main(["run", str(SCENARIOS / "seed-external-hit-same-block.json"), "--tier", "model",
                     *(["--mutant", name] if name else []), "--artifacts", str(tmp_path), "--json"])
    assert code == 1
    result = json.loads(capsys.readouterr().out)
    assert result["tier"] == "model" and any(o["symptom"] for o in result["outputs"])
    artifact = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert artifact["tier"] == "model"
    # the artifact replays in its own tier: on a fixed stock release the outputs match again
    again = main(["run", str(next(tmp_path.glob("*.json"))), "--json", "--artifacts", str(tmp_path / "again")])
    assert again == (1 if seed_bug_release else 0)
    assert json.loads(capsys.readouterr().out)["tier"] == "model"


def test_pool_geometry_too_large_is_bad_input():
    from harness.errors import BadInput
    from models.pool import TensorPool

    with pytest.raises(BadInput, match="state pool"):
        TensorPool(MODEL, 1_000_000, 8, 4096)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["final", "tokens", "copy", "shift", "deliver"]),
                          st.integers(0, 5), st.integers(0, 5), st.integers(0, 2), st.integers(1, 3)),
                max_size=25))
def test_tensor_pool_moves_pages_as_the_symbolic_backend(ops):
    """Every page move the worker shadow prescribes does to tensors what it does to symbolic states: tag
    each written state with a number, apply the same ops to both, and read every page back."""
    from harness.states import SymbolicStates
    from models.hybrid import MambaOut
    from models.pool import TensorPool

    K = 2
    sym, pool = SymbolicStates(K), TensorPool(MODEL, 6, K, 4)
    c = MODEL.cfg

    def outs(tags):
        conv = torch.stack([torch.full((c.d_conv - 1, c.conv_dim), float(t), dtype=torch.float64) for t in tags])
        ssm = torch.stack([torch.full((c.nheads, c.headdim, c.d_state), float(t), dtype=torch.float64)
                           for t in tags])
        return [MambaOut(conv, ssm) for _ in c.mamba_layers]

    tag = 0
    for kind, a, b, shift, n in ops:
        tag += 1
        if kind == "final":
            sym.write_final(a, (tag, tag))
            pool.write_final(a, outs([tag]), 0)
        elif kind == "tokens":
            tags = [tag * 10 + i for i in range(n)]
            blocks = [(a + i) % 6 for i in range(n)]
            sym.write_tokens(b, blocks, [(t, t) for t in tags])
            pool.write_tokens(b, blocks, outs(tags))
        elif kind == "copy":
            sym.copy_page(a, b)
            pool.copy_page(a, b)
        elif kind == "shift":
            sym.shift_copy(b, a, (a + 1) % 6, shift)
            pool.shift_copy(b, a, (a + 1) % 6, shift)
        else:
            from models.hybrid import MambaState

            sym.deliver(a, (tag, tag))
            pool.deliver_state(a, [MambaState(o.conv[0], o.ssm[0]) for o in outs([tag])])

    def tag_of(state):  # symbolic: None = never written, the null block reads the zero state
        return 0 if state is None else state[1]

    for block in range(6):
        conv, ssm = sym.page(block)
        for offset in range(K + 1):
            got = pool.read(block, offset, block)[0]
            assert float(got.conv[0, 0]) == tag_of(conv[offset]), (block, offset)
        assert float(pool.read(block, 0, block)[0].ssm[0, 0, 0]) == tag_of(ssm), block


def test_local_training_lowers_the_loss_and_caches(tmp_path, monkeypatch):
    from models import train

    monkeypatch.setattr(train, "CACHE", tmp_path)
    _, losses = train.train(steps=12, batch=1, seq_len=32)
    assert sum(losses[-3:]) < sum(losses[:3])
    first = train.trained_model(steps=3)
    assert list(tmp_path.glob("trained-*.pt"))
    again = train.trained_model(steps=3)  # loaded, not retrained
    assert torch.equal(first.lm_head, again.lm_head) and not torch.equal(first.lm_head, MODEL.lm_head)
    # a trained model on stock vLLM still matches its uncached reference
    trace = replay(load_scenario(SCENARIOS / "workload-chat.json"), config=RunConfig(tier="model"), model=again)
    assert judge(trace) == [] and output_summary(trace)["generations"] == 12
