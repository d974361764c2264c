"""The V2 worker's torch kernels (harness/engine/kernels_v2.py) against vLLM's Triton kernels run by Triton's
interpreter (TRITON_INTERPRET=1, set when harness.engine is imported).

- every tensor-argument kernel launched while the spec and seed scenarios replay under `--kernels triton` is
  recorded with its inputs and Triton's outputs; the replacement, given the same inputs, writes the same
  outputs (the launches of real runs are the representative inputs);
- the raw-address kernels (staged block-table writes across groups, gather, slot mappings) through vLLM's own
  BlockTables with both kernel sets;
- sampling on random logits (not the harness's one-hot ones): the Gumbel kernel's per-block argmax and maxima,
  the rejection sampler's sampled tokens and counts, greedy and temperature 1 mixed;
- whole scenarios: identical rows and reads with torch and Triton kernels.
"""

from __future__ import annotations

import os
from dataclasses import astuple
from pathlib import Path

import pytest

import harness.engine  # noqa: F401  (TRITON_INTERPRET=1 before Triton is imported)

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from harness.engine_options import EngineOptions  # noqa: E402
from harness.errors import BadInput  # noqa: E402
from harness.scenario import load_scenario  # noqa: E402

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SEED = SCENARIOS / "seed-external-hit-same-block.json"
SPEC = SCENARIOS / "spec-unscheduled-accepted-reset.json"

# kernels whose arguments carry raw addresses (checked below through vLLM's own callers or whole scenarios)
ADDRESSED = {"_gather_block_tables_kernel", "_compute_slot_mappings_kernel", "_apply_write_kernel",
             "_zero_kv_blocks_kernel", "precopy_mamba_align_fused_kernel", "postprocess_mamba_fused_kernel",
             "get_aligned_state_indices_multi_group_kernel"}


def _replay(path: Path, kernels: str):
    from harness.engine.scheduler import EngineDriver

    return EngineDriver(load_scenario(path), None, EngineOptions(runner="v2", kernels=kernels)).run()


def _unavailable() -> str | None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "TRITON_INTERPRET is not 1 in this process"
    try:
        from harness.engine.v2_setup import v2_unavailable

        why = v2_unavailable()
        if why is None:
            _replay(SEED, "torch")
        return why
    except (BadInput, ImportError) as exc:
        return str(exc)


_WHY = _unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def _impl(name: str, arg_names: tuple | None = None):
    """The torch replacement; with the installed kernel's parameter names, bound by them as vLLM's dispatcher
    launches it (kernels_v2._by_name: a release's own parameter order)."""
    from harness.engine.kernels_v2 import KERNELS, _by_name

    fn = next(fn for full, fn in KERNELS.items() if full.rsplit(".", 1)[1] == name)
    return fn if arg_names is None else _by_name(fn, arg_names)


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _record(paths) -> list:
    """(kernel name, args, kwargs, Triton's outputs) of every launch while the scenarios replay with Triton's
    kernels."""
    from triton.runtime.interpreter import InterpretedFunction

    launches = []
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        name = self.fn.__name__
        if name in ADDRESSED:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        before = [_clone(a) for a in args]
        kw = {k: _clone(v) for k, v in kwargs.items()}
        out = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        launches.append((name, before, kw, [_clone(a) for a in args], tuple(self.arg_names)))
        return out

    InterpretedFunction.run = run
    try:
        for p in paths:
            _replay(p, "triton")
    finally:
        InterpretedFunction.run = original
    return launches


def test_every_tensor_kernel_launch_of_real_runs_matches_triton():
    launches = _record([SPEC, SEED])
    names = {n for n, *_ in launches}
    assert {"_prepare_pos_seq_lens_kernel", "_combine_sampled_and_draft_tokens_kernel", "_post_update_kernel",
            "preprocess_mamba_align_fused_kernel", "_scatter_num_accepted_kernel", "_gumbel_sample_kernel",
            "_rejection_kernel", "_resample_kernel", "_insert_resampled_kernel", "_gather_draft_sampled_kernel",
            "_compute_local_logits_stats_kernel", "_expand_idx_mapping_kernel",
            "_get_num_sampled_and_rejected_kernel", "_prepare_prefill_inputs_kernel"} <= names
    for name, before, kw, expected, arg_names in launches:
        args = [_clone(a) for a in before]
        kwargs = {k: _clone(v) for k, v in kw.items() if k not in ("num_warps", "num_stages")}
        _impl(name, arg_names)(*args, **kwargs)
        for i, (got, want) in enumerate(zip(args, expected)):
            if not isinstance(want, torch.Tensor):
                continue
            if name in ("_compute_local_logits_stats_kernel", "_rejection_kernel", "_resample_kernel",
                        "_gumbel_sample_kernel"):  # outputs allocated with new_empty: compare what was written
                written = want == want if want.dtype.is_floating_point else None
                if written is not None:
                    assert torch.allclose(got[written], want[written]), (name, i)
                    continue
            if name in ("_compute_local_logits_stats_kernel", "_rejection_kernel", "_resample_kernel"):
                continue  # uninitialized int buffers the kernel leaves alone for some rows
            assert torch.equal(got, want), (name, i, got, want)


def _block_tables(kind: str):
    from harness.engine import kernels_v2
    from vllm.v1.worker.gpu.block_table import BlockTables

    with kernels_v2.mode(kind):
        bt = BlockTables(block_sizes=[4, 8], max_num_reqs=6, max_num_batched_tokens=40,
                         max_num_blocks_per_group=[10, 5], device=torch.device("cpu"))
        bt.append_block_ids(2, ([3, 4, 5], [7, 8]), overwrite=False)
        bt.append_block_ids(0, ([9], [1]), overwrite=False)
        bt.append_block_ids(5, ([11, 12, 13, 14], [2, 6]), overwrite=False)
        bt.apply_staged_writes()  # two groups: the fused multi-group write (pointer table)
        bt.append_block_ids(2, ([20], []), overwrite=False)
        bt.append_block_ids(0, ([21, 22], [23]), overwrite=True)
        bt.apply_staged_writes()
        idx = torch.tensor([5, 2, 0], dtype=torch.int32)
        tables = [t.clone() for t in bt.gather_block_tables(idx, num_reqs_padded=4)]
        qsl = torch.tensor([0, 5, 7, 9], dtype=torch.int32)
        pos = torch.tensor([3, 4, 5, 6, 7, 12, 13, 1, 2], dtype=torch.int64)
        slots = bt.compute_slot_mappings(idx, qsl, pos, num_tokens_padded=12).clone()
        small = [t.clone() for t in bt.gather_block_tables(idx[:1], num_reqs_padded=1)]
    return [b.gpu.clone() for b in bt.block_tables], tables, slots, small, [t.clone() for t in bt.input_block_tables]


def test_block_tables_through_vllms_own_class_match_triton():
    """Staged writes (single and multi-group), the gather (rows past the batch zeroed, then a smaller batch)
    and slot mappings (padding past the batch's tokens) write the same bytes with either kernel set."""
    triton_out, torch_out = _block_tables("triton"), _block_tables("torch")
    for want, got in zip(triton_out, torch_out):
        want, got = (want, got) if isinstance(want, list) else ([want], [got])
        for w, g in zip(want, got):
            assert torch.equal(w, g), (w, g)


def _logits(n: int, V: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, V, generator=g) * 3


@pytest.mark.parametrize("use_fp64", [False, True])
def test_gumbel_kernel_on_random_logits(use_fp64):
    """Per-block argmax and maxima of logits + murmur3 Gumbel noise (temperature 1 and 0.7), greedy rows,
    a request slot of -1 (greedy by the kernel's rule), the drafting salt."""
    from harness.engine import kernels_v2
    from vllm.v1.worker.gpu.sample import gumbel

    V = 3000
    logits = _logits(5, V, 0)
    idx = torch.tensor([0, 2, 1, -1, 2], dtype=torch.int32)
    temp = torch.tensor([1.0, 0.0, 0.7], dtype=torch.float32)
    seeds = torch.tensor([123456789012, -5, 77], dtype=torch.int64)
    pos = torch.tensor([3, 9, 4, 0, 2**33 + 5], dtype=torch.int64)
    names = set(gumbel._gumbel_sample_kernel.arg_names)
    for drafting in (False, True):
        outs = []
        for impl in ("triton", _impl("_gumbel_sample_kernel")):
            nb = -(-V // 1024)
            am = torch.empty(5, nb, dtype=torch.int64)
            mx = torch.empty(5, nb, dtype=torch.float64 if use_fp64 else torch.float32)
            kw = dict(local_argmax_ptr=am, local_argmax_stride=am.stride(0), local_max_ptr=mx,
                      local_max_stride=mx.stride(0), logits_cache_ptr=None, logits_cache_stride_0=0,
                      logits_cache_stride_1=0, logits_cache_col_ptr=None, logits_cache_source_ptr=None,
                      logits_cache_source_stride=0, logits_ptr=logits, logits_stride=logits.stride(0),
                      expanded_idx_mapping_ptr=idx, seeds_ptr=seeds, pos_ptr=pos, temp_ptr=temp, vocab_size=V,
                      BLOCK_SIZE=1024, IS_DRAFTING=drafting, APPLY_TEMPERATURE=True, USE_FP64=use_fp64,
                      PER_TOKEN_COL=False,
                      # 0.34.0's parameters (gumbel.py:290-319): no row mapping, no bias
                      logits_cache_row_mapping_ptr=None, bias_ptr=None, bias_stride=0, HAS_BIAS=False)
            kw = {k: v for k, v in kw.items() if k in names}  # by the installed kernel's own parameter names
            if impl == "triton":
                with kernels_v2.mode("triton"):  # the module attribute is vLLM's JIT kernel for the call
                    gumbel._gumbel_sample_kernel[(5, nb)](**kw)
            else:
                impl(**kw)
            outs.append((am, mx))
        (am_t, mx_t), (am_h, mx_h) = outs
        assert torch.equal(am_t, am_h)
        assert torch.allclose(mx_t, mx_h, rtol=1e-6, atol=1e-5)


def test_rejection_sampler_on_random_logits():
    """vLLM's rejection_sample (every kernel of it) with random target logits, drafts that agree with the
    target argmax for a while, an invalid (-1) draft, greedy and temperature-1 requests: same tokens, same
    counts."""
    from harness.engine import kernels_v2
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    V = 2500
    logits = _logits(9, V, 1)
    cu = torch.tensor([0, 3, 4, 9], dtype=torch.int32)  # 2 drafts + bonus, bonus only, 4 drafts + bonus
    idx = torch.tensor([1, 0, 2], dtype=torch.int32)
    expanded = torch.tensor([1, 1, 1, 0, 2, 2, 2, 2, 2], dtype=torch.int32)
    local = torch.tensor([0, 1, 2, 0, 0, 1, 2, 3, 4], dtype=torch.int32)
    arg = logits.argmax(-1)
    draft = torch.tensor([0, int(arg[0]), 7, 0, 0, int(arg[4]), int(arg[5]), -1, 3], dtype=torch.int64)
    pos = torch.arange(9, dtype=torch.int64) + 40
    temp = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float32)
    seed = torch.tensor([11, 22, 33], dtype=torch.int64)
    outs = []
    for kind in ("triton", "torch"):
        with kernels_v2.mode(kind):
            for t in (temp, torch.tensor([1.0, 1.0, 0.0])):
                sampled, n = rejection_sample(logits.clone(), None, draft, cu, pos, idx, expanded, local, t, seed, 4)
                outs.append([sampled[r, :int(n[r])].tolist() for r in range(3)] + [n.tolist()])
    assert outs[:2] == outs[2:], outs


@pytest.mark.parametrize("path", [SEED, SPEC], ids=["seed", "spec"])
def test_scenario_traces_identical_with_torch_and_triton_kernels(path):
    a, b = _replay(path, "torch"), _replay(path, "triton")
    assert [astuple(r) for r in a.rows] == [astuple(r) for r in b.rows]
    assert [astuple(r) for r in a.reads] == [astuple(r) for r in b.reads]
    assert a.exception is None and b.exception is None
    if path == SPEC:
        assert any(r.what == "postcopy" for r in a.reads)  # recorded with either kernel set


def test_triton_kernels_run_after_the_v1_workers_replacements_were_registered():
    """The V1 worker registers its fused Mamba replacements (shared with V2) in this process first; a V2 replay
    under `--kernels triton` still runs vLLM's kernels for them: each post-copy is recorded once, as in a
    process where nothing was registered (kernels_v1.mode unbinds every worker's replacements)."""
    from harness.engine.scheduler import EngineDriver

    try:
        EngineDriver(load_scenario(SPEC), None, EngineOptions(runner="v1", kernels="torch")).run()
    except BadInput as exc:
        pytest.skip(f"the V1 worker cannot run here: {exc}")
    a, b = _replay(SPEC, "triton"), _replay(SPEC, "torch")
    assert [astuple(r) for r in a.reads] == [astuple(r) for r in b.reads]


def test_logprob_kernels_on_random_logits():
    """The prompt-logprob path's kernels (a request with a prefix-cache hit limit asks for prompt logprobs)."""
    from harness.engine import kernels_v2

    logprob = pytest.importorskip("vllm.v1.worker.gpu.sample.logprob")
    prompt_logprob = pytest.importorskip("vllm.v1.worker.gpu.sample.prompt_logprob")
    g = torch.Generator().manual_seed(0)
    logits, sampled = torch.randn(5, 300, generator=g), torch.randint(0, 300, (5,), generator=g)
    rows = torch.randint(1, 300, (3, 20), generator=g)
    qsl, idx, computed = torch.tensor([0, 4, 6, 9]), torch.tensor([2, 0, 1]), torch.tensor([3, 7, 0])
    out = {}
    for kind in ("triton", "torch"):
        with kernels_v2.mode(kind):
            t = logprob.compute_topk_scores(logits.clone(), 3, sampled.clone())
            ids = prompt_logprob.get_prompt_logprobs_token_ids(9, qsl, idx, computed, rows)
        out[kind] = t, ids
    (want, want_ids), (got, got_ids) = out["triton"], out["torch"]
    assert torch.equal(got.logprob_token_ids, want.logprob_token_ids)
    assert torch.equal(got.selected_token_ranks, want.selected_token_ranks) and torch.equal(got_ids, want_ids)
    assert torch.allclose(got.logprobs, want.logprobs, atol=1e-5)
