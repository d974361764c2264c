"""CPU (torch) replacements of the Triton kernels vLLM's V2 model runner launches on the engine tier's path
(`--runner v2 --kernels torch`).

The V2 runner (vllm/v1/worker/gpu/*) keeps its per-request state in "device" tensors and moves it with Triton
kernels; on this CPU-only machine the CPU runner's device is host memory, so each kernel here is the same
computation in torch (or, for kernels that take raw addresses, numpy views / `ctypes.memmove` on the addresses
vLLM computed). Each function has the kernel's parameters in the kernel's order and is registered through
vLLM's own `vllm.triton_utils.dispatcher.register_kernels` (0.33.0), which rebinds every holder of the kernel;
the dispatcher drops the launch grid, so a replacement derives its extent from its arguments (noted where it
matters). `--kernels triton` leaves vLLM's kernels in place (Triton's interpreter on CPU).

Kernels (vLLM 0.33.0 file:line of the Triton source each one follows):
- block tables: `_gather_block_tables_kernel` (gpu/block_table.py:281), `_compute_slot_mappings_kernel`
  (:339), `_apply_write_kernel` (gpu/buffer_utils.py:344, staged block-table writes);
- input prep: `_prepare_prefill_inputs_kernel`, `_prepare_pos_seq_lens_kernel`,
  `_combine_sampled_and_draft_tokens_kernel`, `_get_num_sampled_and_rejected_kernel`, `_post_update_kernel`,
  `_post_update_num_computed_tokens_kernel`, `_expand_idx_mapping_kernel` (gpu/input_batch.py:279-740);
- sampling: `gumbel_sample_kernel` (gpu/sample/gumbel.py:282, murmur3 noise bit for bit), the rejection
  sampler's `gather_draft_sampled_kernel` (gpu/spec_decode/rejection_sampler.py:78),
  `compute_local_logits_stats_kernel`, `rejection_kernel`, `resample_kernel`, `insert_resampled_kernel`
  (gpu/spec_decode/rejection_sampler_utils.py:209-1060; Philox `tl.rand` bit for bit) — the paths without
  draft logits, watermarking, block verification, FLy or synthetic acceptance (an n-gram/EAGLE-as-n-gram
  drafter, which is what the engine tier builds); any other path raises NotImplementedError;
- Mamba align: `_scatter_num_accepted_kernel`, `_fill_num_accepted_kernel` (gpu/model_states/
  mamba_hybrid.py:405-429), `preprocess_mamba_align_fused_kernel` (v1/worker/mamba_utils.py:503),
  `get_aligned_state_indices_multi_group_kernel` (:39) and the fused pre/post-copy kernels, shared with
  the V1 worker (harness/engine/kernels_v1.py: their OBSERVER sees each copy's source before bytes move);
- `_zero_kv_blocks_kernel` (v1/worker/utils.py:60).
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from harness.engine import kernels_v1
from harness.engine.kernels_v2_sampling import (
    compute_local_logits_stats_kernel,
    gather_draft_sampled_kernel,
    gumbel_combine_kernel,
    gumbel_sample_kernel,
    insert_resampled_kernel,
    prompt_logprobs_token_ids_kernel,
    ranks_kernel,
    rejection_kernel,
    resample_kernel,
    topk_log_softmax_kernel,
)

_registered = ""


# -- raw addresses ------------------------------------------------------------------------------------------

_VIEWS: dict = {}


def _view(addr: int, shape: tuple) -> np.ndarray:
    """A numpy view of the int32 host memory at `addr` (the CPU runner's "device" tensors are host tensors)."""
    key = (addr, shape)
    v = _VIEWS.get(key)
    if v is None:
        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        n = int(np.prod(shape))
        v = _VIEWS[key] = np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(addr)).reshape(shape)
    return v


def _addr(t: torch.Tensor, i: int) -> int:
    return int(t[i]) & (2**64 - 1)


def _np(t):
    """The numpy view of a CPU tensor (no copy): the kernels below index and store through it."""
    return t.numpy() if t is not None else None


# -- block tables (gpu/block_table.py, gpu/buffer_utils.py) ----------------------------------------------------

def _gather_block_tables_kernel(batch_idx_to_req_idx, src_block_table_ptrs, dst_block_table_ptrs,
                                block_table_strides, num_blocks_ptr, num_blocks_stride, num_reqs,
                                num_computed_tokens_ptr=None, sliding_window_reach_ptr=None, block_sizes_ptr=None,
                                MASK_SLIDING_WINDOW=False, BLOCK_SIZE=1024, **_):  # 0.32.x: no sliding window
    """Row b of each group's input table = the request slot's row (first num_blocks entries, leading entries
    below a sliding window nulled), rows past num_reqs zeroed. The grid's row count (max of the padded batch
    and the rows the previous gather dirtied) is not passed; zeroing every row past num_reqs writes the same
    bytes, rows past that count being zero already (BlockTables._num_dirty_rows, block_table.py:197-203)."""
    num_reqs = int(num_reqs)
    idx = _np(batch_idx_to_req_idx)[:num_reqs]
    nb_all = _np(num_blocks_ptr)
    max_reqs = nb_all.shape[1]
    strides = block_table_strides.tolist()
    for g in range(len(strides)):
        stride = strides[g]
        src = _view(_addr(src_block_table_ptrs, g), (max_reqs, stride))
        dst = _view(_addr(dst_block_table_ptrs, g), (max_reqs, stride))
        nb = nb_all[g]
        nulls = None
        if MASK_SLIDING_WINDOW:
            reach = int(sliding_window_reach_ptr[g])
            if reach > 0:
                first = _np(num_computed_tokens_ptr)[idx].astype(np.int64)
                nulls = np.maximum(first - reach, 0) // int(block_sizes_ptr[g])
        for b, slot in enumerate(idx.tolist()):
            n = int(nb[slot])
            dst[b, :n] = src[slot, :n]
            if nulls is not None:
                dst[b, :min(int(nulls[b]), n)] = 0
        if num_computed_tokens_ptr is not None:
            dst[num_reqs:] = 0
        # 0.32.x (no sliding-window arguments): the grid is the padded batch (block_table.py:162), which is the
        # batch itself on CPU (eager, no graph padding); rows past it keep what they held


def _compute_slot_mappings_kernel(max_num_tokens, idx_mapping, query_start_loc, pos, block_table_ptrs,
                                  block_table_strides, block_sizes, slot_mapping_enabled, dcp_sharded,
                                  slot_mappings_ptr, slot_mappings_stride, cp_rank, CP_SIZE=1, CP_INTERLEAVE=1,
                                  PAD_ID=-1, TRITON_BLOCK_SIZE=1024, **_):
    """slot = block_table[req, pos // block] * block + pos % block per token; PAD_ID for dummy requests, a
    group without slot mapping and every slot from the batch's token count on (the last program)."""
    if CP_SIZE != 1:
        raise NotImplementedError("context parallelism is not simulated")
    idx = _np(idx_mapping)
    num_reqs = idx.shape[0]  # the grid's second axis is num_reqs + 1
    qsl = _np(query_start_loc)[: num_reqs + 1].astype(np.int64)
    ntok = int(qsl[-1])
    req = np.repeat(idx.astype(np.int64), qsl[1:] - qsl[:-1])
    p = _np(pos)[:ntok].astype(np.int64)
    real = req >= 0
    safe = np.where(real, req, 0)
    out_all = _np(slot_mappings_ptr)
    enabled, strides, sizes = slot_mapping_enabled.tolist(), block_table_strides.tolist(), block_sizes.tolist()
    for g in range(len(strides)):
        out = out_all[g]
        out[ntok:int(max_num_tokens)] = PAD_ID
        if not enabled[g]:
            out[:ntok] = PAD_ID
            continue
        if ntok == 0:
            continue
        stride, bs = strides[g], sizes[g]
        rows = _view(_addr(block_table_ptrs, g), (int(safe.max()) + 1, stride))
        blocks = np.where(real, rows[safe, p // bs], 0).astype(np.int64)
        out[:ntok] = np.where(real, blocks * bs + p % bs, PAD_ID)


def _apply_write_kernel(output_ptr, output_stride, write_indices_ptr, write_starts_ptr, write_contents_ptr,
                        write_cu_lens_ptr, write_group_ids_ptr, BLOCK_SIZE=1024, MULTI_GROUP=False, **_):
    """Staged writes: row[index][start:start+len] = contents[cu_start:cu_end], one write per entry (the grid's
    first axis = len(write_cu_lens) entries given)."""
    n = write_cu_lens_ptr.shape[0]
    cu = write_cu_lens_ptr.tolist()
    idx, starts = write_indices_ptr.tolist(), write_starts_ptr.tolist()
    groups = write_group_ids_ptr.tolist() if MULTI_GROUP else None
    prev = 0
    for w in range(n):
        a, b = prev, cu[w]
        prev = b
        if b <= a:
            continue
        if MULTI_GROUP:
            g = groups[w]
            stride = int(output_stride[g])
            base = _addr(output_ptr, g)
            row = _view(base + 4 * (idx[w] * stride + starts[w]), (b - a,))
            row[:] = _np(write_contents_ptr)[a:b]
        else:
            flat = output_ptr.view(-1)
            off = idx[w] * int(output_stride) + starts[w]
            flat[off:off + b - a] = write_contents_ptr[a:b].to(output_ptr.dtype)


# -- input preparation (gpu/input_batch.py) --------------------------------------------------------------------

def _prepare_prefill_inputs_kernel(input_ids_ptr, next_prefill_tokens_ptr, next_prefill_tokens_stride,
                                   num_lookahead, idx_mapping_ptr, query_start_loc_ptr, all_token_ids_ptr,
                                   all_token_ids_stride, prefill_lens_ptr, num_computed_tokens_ptr,
                                   BLOCK_SIZE=1024, LOOKAHEAD_BLOCK=1, **_):
    num_la = int(num_lookahead)
    qsl = query_start_loc_ptr.tolist()
    for b, slot in enumerate(idx_mapping_ptr.tolist()):
        plen, nc = int(prefill_lens_ptr[slot]), int(num_computed_tokens_ptr[slot])
        if nc >= plen:
            continue
        qs, qe = qsl[b], qsl[b + 1]
        row = all_token_ids_ptr[slot]
        input_ids_ptr[qs:qe] = row[nc:nc + qe - qs].to(input_ids_ptr.dtype)
        for k in range(num_la):
            p = nc + qe - qs + k
            next_prefill_tokens_ptr.view(-1)[k * int(next_prefill_tokens_stride) + slot] = (
                int(row[p]) if p < plen else 0)


def _prepare_pos_seq_lens_kernel(pos_ptr, seq_lens_ptr, idx_mapping_ptr, query_start_loc_ptr,
                                 num_computed_tokens_ptr, max_num_reqs, BLOCK_SIZE=1024, **_):
    idx = _np(idx_mapping_ptr)
    num_reqs = idx.shape[0]  # the grid is num_reqs + 1 programs
    qsl = _np(query_start_loc_ptr)[: num_reqs + 1]
    nc = _np(num_computed_tokens_ptr)[idx]
    lens = qsl[1:] - qsl[:-1]
    seq = _np(seq_lens_ptr)
    seq[:num_reqs] = nc + lens
    seq[num_reqs:int(max_num_reqs)] = 0
    out = _np(pos_ptr)
    for r in range(num_reqs):
        out[qsl[r]:qsl[r + 1]] = np.arange(nc[r], nc[r] + lens[r])


def _combine_sampled_and_draft_tokens_kernel(input_ids_ptr, idx_mapping_ptr, last_sampled_tokens_ptr,
                                             query_start_loc_ptr, seq_lens_ptr, prefill_len_ptr, draft_tokens_ptr,
                                             draft_tokens_stride, cu_num_logits_ptr, logits_indices_ptr,
                                             BLOCK_SIZE=1, NUM_NEW_SAMPLED_TOKENS=1, **_):
    cu = cu_num_logits_ptr.tolist()
    qsl = query_start_loc_ptr.tolist()
    drafts = draft_tokens_ptr.view(-1)
    for b, slot in enumerate(idx_mapping_ptr.tolist()):
        n_logits = cu[b + 1] - cu[b]
        nd = n_logits - NUM_NEW_SAMPLED_TOKENS
        qe = qsl[b + 1]
        start = qe - n_logits
        if n_logits > 0:
            logits_indices_ptr[cu[b]:cu[b + 1]] = torch.arange(start, start + n_logits)
        seq_len, plen = int(seq_lens_ptr[b]), int(prefill_len_ptr[slot])
        if seq_len <= plen:
            continue
        if NUM_NEW_SAMPLED_TOKENS > 0 and seq_len - n_logits >= plen:
            input_ids_ptr[start] = last_sampled_tokens_ptr[slot]
        if nd > 0:
            base = slot * int(draft_tokens_stride)
            input_ids_ptr[qe - nd:qe] = drafts[base:base + nd].to(input_ids_ptr.dtype)


def _get_num_sampled_and_rejected_kernel(num_sampled_ptr, num_rejected_ptr, seq_lens_ptr, cu_num_logits_ptr,
                                         idx_mapping_ptr, prefill_len_ptr, **_):
    idx = _np(idx_mapping_ptr)
    n = idx.shape[0]
    chunked = _np(seq_lens_ptr)[:n] < _np(prefill_len_ptr)[idx]
    ns_all = _np(num_sampled_ptr)
    ns = np.where(chunked, 0, ns_all[:n])
    ns_all[:n] = ns
    cu = _np(cu_num_logits_ptr)
    _np(num_rejected_ptr)[:n] = np.where(chunked, 0, (cu[1:n + 1] - cu[:n]) - ns)


def _post_update_kernel(idx_mapping_ptr, num_computed_tokens_ptr, last_sampled_tokens_ptr, output_bin_counts_ptr,
                        output_bin_counts_stride, sampled_tokens_ptr, sampled_tokens_stride, num_sampled_ptr,
                        num_rejected_ptr, query_start_loc_ptr, all_token_ids_ptr, all_token_ids_stride,
                        total_len_ptr, draft_tokens_ptr=None, draft_tokens_out_ptr=None, num_draft_tokens=0,
                        **_):  # 0.32.x: the drafts are not scattered here
    nd = int(num_draft_tokens)
    sampled = sampled_tokens_ptr
    qsl = query_start_loc_ptr.tolist() if query_start_loc_ptr is not None else None
    ns_all, nr_all = num_sampled_ptr.tolist(), num_rejected_ptr.tolist()
    for r, slot in enumerate(idx_mapping_ptr.tolist()):
        if slot < 0:
            continue
        if draft_tokens_ptr is not None and nd:
            draft_tokens_out_ptr.view(-1)[slot * nd:(slot + 1) * nd] = draft_tokens_ptr.view(-1)[r * nd:(r + 1) * nd]
        total = int(total_len_ptr[slot])
        ns = ns_all[r]
        if ns > 0:
            toks = sampled[r, :ns]
            last_sampled_tokens_ptr[slot] = toks[ns - 1]
            total_len_ptr[slot] = total + ns
            all_token_ids_ptr[slot, total:total + ns] = toks.to(all_token_ids_ptr.dtype)
            if output_bin_counts_ptr is not None:
                for t in toks.tolist():
                    output_bin_counts_ptr[slot, t] += 1
        qlen = 0 if qsl is None else qsl[r + 1] - qsl[r]
        delta = qlen - nr_all[r]
        if delta:
            num_computed_tokens_ptr[slot] += delta


def _post_update_num_computed_tokens_kernel(idx_mapping_ptr, num_computed_tokens_ptr, query_start_loc_ptr, **_):
    n = idx_mapping_ptr.shape[0]
    lens = query_start_loc_ptr[1:n + 1] - query_start_loc_ptr[:n]
    num_computed_tokens_ptr.index_add_(0, idx_mapping_ptr.long(), lens.to(num_computed_tokens_ptr.dtype))


def _expand_idx_mapping_kernel(idx_mapping_ptr, expanded_idx_mapping_ptr, expanded_local_pos_ptr,
                               cu_num_logits_ptr, BLOCK_SIZE=1, **_):
    n = idx_mapping_ptr.shape[0]
    cu = cu_num_logits_ptr[: n + 1].long()
    lens = cu[1:] - cu[:-1]
    total = int(cu[-1]) - int(cu[0])
    if total <= 0:
        return
    start = int(cu[0])
    expanded_idx_mapping_ptr[start:start + total] = idx_mapping_ptr.repeat_interleave(lens)
    expanded_local_pos_ptr[start:start + total] = (torch.arange(start, start + total)
                                                   - cu[:-1].repeat_interleave(lens)).to(expanded_local_pos_ptr.dtype)


# -- Mamba align (gpu/model_states/mamba_hybrid.py, v1/worker/mamba_utils.py) -----------------------------------

def _scatter_num_accepted_kernel(idx_mapping_ptr, num_sampled_ptr, num_accepted_ptr, **_):
    idx = _np(idx_mapping_ptr)
    ok = idx >= 0
    _np(num_accepted_ptr)[idx[ok]] = np.maximum(_np(num_sampled_ptr)[:idx.shape[0]][ok], 1)


def _fill_num_accepted_kernel(idx_mapping_ptr, num_accepted_ptr, num_sampled, **_):
    idx = idx_mapping_ptr.long()
    num_accepted_ptr[idx[idx >= 0]] = int(num_sampled)


def preprocess_mamba_align_fused_kernel(idx_mapping_ptr, state_idx_ptr, num_computed_tokens_ptr,
                                        query_start_loc_ptr, num_accepted_tokens_ptr, src_col_ptr, src_off_ptr,
                                        num_reqs, BLOCK_SIZE=256, MAMBA_BLOCK_SIZE=1, **_):
    """src column = the running column, src offset = accepted - 1, the running column advanced to the block of
    the last computed token after this step, accepted reset to 1 on a crossing (mamba_utils.py:503-545)."""
    n = int(num_reqs)
    if n == 0:
        return
    idx = _np(idx_mapping_ptr)[:n]
    state_all, acc_all = _np(state_idx_ptr), _np(num_accepted_tokens_ptr)
    state = state_all[idx]  # a copy: the pre-advance columns
    _np(src_col_ptr)[idx] = state
    _np(src_off_ptr)[idx] = np.maximum(acc_all[idx] - 1, 0)
    qsl = _np(query_start_loc_ptr)
    after = _np(num_computed_tokens_ptr)[idx].astype(np.int64) + (qsl[1:n + 1] - qsl[:n])
    new = (after + MAMBA_BLOCK_SIZE - 1) // MAMBA_BLOCK_SIZE - 1
    state_all[idx] = new
    reset = (state >= 0) & (state != new)
    acc_all[idx[reset]] = 1


def get_aligned_state_indices_multi_group_kernel(block_table_ptrs_ptr, seq_lens_ptr, state_indices_ptr,
                                                 block_table_stride_req, seq_lens_stride, state_indices_stride_0,
                                                 state_indices_stride_1, state_indices_stride_2, num_requests,
                                                 CACHE_BLOCK_SIZE=1, NUM_GROUPS=1, BLOCK_GROUPS=1,
                                                 NUM_STATE_SLOTS=1, BLOCK_STATE_SLOTS=1, BLOCK_ROWS=32, **_):
    """Per group and request: the block-table entries from column max((seq_len - 1) // block, 0) on, one per
    state slot (mamba_utils.py:39-99)."""
    n = int(num_requests)
    if n == 0:
        return
    seq = seq_lens_ptr.view(-1)[: (n - 1) * int(seq_lens_stride) + 1:int(seq_lens_stride)].long()
    first = ((seq - 1) // CACHE_BLOCK_SIZE).clamp(min=0)
    stride = int(block_table_stride_req)
    for g in range(NUM_GROUPS):
        rows = _view(_addr(block_table_ptrs_ptr, g), (n, stride))
        cols = first[:, None] + torch.arange(NUM_STATE_SLOTS)[None, :]
        state_indices_ptr[g, :n, :NUM_STATE_SLOTS] = rows.gather(1, cols).to(state_indices_ptr.dtype)


def _zero_kv_blocks_kernel(seg_addrs_ptr, seg_block_strides_ptr, seg_page_sizes_ptr, block_ids_ptr,
                           BLOCK_SIZE=1024, **_):
    """Zero each block's page in every segment (int32 elements, v1/worker/utils.py:60-102)."""
    blocks = block_ids_ptr.tolist()
    for s in range(seg_addrs_ptr.shape[0]):
        base = _addr(seg_addrs_ptr, s)
        stride, page = int(seg_block_strides_ptr[s]), int(seg_page_sizes_ptr[s])
        for b in blocks:
            ctypes.memset(base + 4 * b * stride, 0, 4 * page)


# -- registration ------------------------------------------------------------------------------------------------

_G = "vllm.v1.worker.gpu."
KERNELS = {
    _G + "block_table._gather_block_tables_kernel": _gather_block_tables_kernel,
    _G + "block_table._compute_slot_mappings_kernel": _compute_slot_mappings_kernel,
    _G + "buffer_utils._apply_write_kernel": _apply_write_kernel,
    _G + "input_batch._prepare_prefill_inputs_kernel": _prepare_prefill_inputs_kernel,
    _G + "input_batch._prepare_pos_seq_lens_kernel": _prepare_pos_seq_lens_kernel,
    _G + "input_batch._combine_sampled_and_draft_tokens_kernel": _combine_sampled_and_draft_tokens_kernel,
    _G + "input_batch._get_num_sampled_and_rejected_kernel": _get_num_sampled_and_rejected_kernel,
    _G + "input_batch._post_update_kernel": _post_update_kernel,
    _G + "input_batch._post_update_num_computed_tokens_kernel": _post_update_num_computed_tokens_kernel,
    _G + "input_batch._expand_idx_mapping_kernel": _expand_idx_mapping_kernel,
    _G + "model_states.mamba_hybrid._scatter_num_accepted_kernel": _scatter_num_accepted_kernel,
    _G + "model_states.mamba_hybrid._fill_num_accepted_kernel": _fill_num_accepted_kernel,
    _G + "sample.gumbel._gumbel_sample_kernel": gumbel_sample_kernel,
    _G + "sample.gumbel._gumbel_combine_kernel": gumbel_combine_kernel,  # 0.34.0
    _G + "sample.logprob._topk_log_softmax_kernel": topk_log_softmax_kernel,
    _G + "sample.logprob._ranks_kernel": ranks_kernel,
    _G + "sample.prompt_logprob._prompt_logprobs_token_ids_kernel": prompt_logprobs_token_ids_kernel,
    _G + "spec_decode.rejection_sampler._gather_draft_sampled_kernel": gather_draft_sampled_kernel,
    _G + "spec_decode.rejection_sampler_utils._compute_local_logits_stats_kernel": compute_local_logits_stats_kernel,
    _G + "spec_decode.rejection_sampler_utils._rejection_kernel": rejection_kernel,
    _G + "spec_decode.rejection_sampler_utils._resample_kernel": resample_kernel,
    _G + "spec_decode.rejection_sampler_utils._insert_resampled_kernel": insert_resampled_kernel,
    "vllm.v1.worker.mamba_utils.preprocess_mamba_align_fused_kernel": preprocess_mamba_align_fused_kernel,
    "vllm.v1.worker.mamba_utils.get_aligned_state_indices_multi_group_kernel":
        get_aligned_state_indices_multi_group_kernel,
    "vllm.v1.worker.mamba_utils.precopy_mamba_align_fused_kernel": kernels_v1.precopy_mamba_align_fused_kernel,
    "vllm.v1.worker.mamba_utils.postprocess_mamba_fused_kernel": kernels_v1.postprocess_mamba_fused_kernel,
    "vllm.v1.worker.utils._zero_kv_blocks_kernel": _zero_kv_blocks_kernel,
}


def _by_name(fn, arg_names: tuple):
    """The replacement called with the launch's arguments by the installed kernel's own parameter names: a
    release whose kernel takes other parameters (0.32.x: no sliding-window, draft-scatter or FLy arguments,
    `num_speculative_steps` for `num_logits`) binds right; a parameter the release does not pass takes the
    replacement's default (the feature off)."""
    def launch(*args, **kwargs):
        kwargs.update(zip(arg_names, args))
        return fn(**kwargs)

    launch.__name__ = fn.__name__
    launch.__wrapped__ = fn
    return launch


def register() -> str:
    """Install the replacements through vLLM's kernel dispatcher (the V2 runner exists from 0.31 on, as does the
    dispatcher), each bound by the installed kernel's parameter names; once per process. Returns how many."""
    global _registered
    if _registered:
        return _registered
    from vllm.triton_utils import dispatcher

    present = {}
    for name, fn in KERNELS.items():
        if kernels_v1.kernel_exists(name):
            host, attr = dispatcher._resolve_kernel(name)
            present[name] = _by_name(fn, dispatcher._kernel_arg_names(getattr(host, attr)))
    kernels_v1.register_replacements(present)
    _registered = f"dispatcher ({len(present)} kernels)"
    return _registered


def mode(kind: str):
    """`with mode("torch" | "triton"):` the V2 runner's kernels for one execute / sample call (kernels_v1.mode:
    one switch for every replacement registered in this process, the V1 worker's too)."""
    return kernels_v1.mode(kind, register)
