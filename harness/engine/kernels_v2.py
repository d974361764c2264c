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
- sampling: `_gumbel_sample_kernel` (gpu/sample/gumbel.py:282, murmur3 noise bit for bit), the rejection
  sampler's `_gather_draft_sampled_kernel` (gpu/spec_decode/rejection_sampler.py:78),
  `_compute_local_logits_stats_kernel`, `_rejection_kernel`, `_resample_kernel`, `_insert_resampled_kernel`
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

_U32 = 0xFFFFFFFF  # Philox / murmur3 words
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


# -- sampling (gpu/sample/gumbel.py) -----------------------------------------------------------------------------

# Murmur3 in numpy uint32 (wrapping like the kernel's uint32 arithmetic) and the float math in numpy float32 /
# float64: Triton's interpreter evaluates the kernel with numpy, so the noise is the same bits.
_M1, _M2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x, r: int):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _key_mix(key):
    """The key-only half of `_murmur3_mix` (gumbel.py:85-91): key * c1, rotl 15, * c2."""
    key = key.astype(np.uint32) * _M1
    return _rotl(key, 15) * _M2


def _mix_h(h, kmix):
    h = h ^ kmix
    return _rotl(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h):
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


_KEYS: dict = {}


def _keys(n: int):
    k = _KEYS.get(n)
    if k is None:
        k = _KEYS[n] = _key_mix(np.arange(n, dtype=np.uint32))
    return k


def murmur3_hash32(seed, pos, offset, domain: int = 0):
    """gumbel.py:104-116: rows of (seed, pos) [r] against offsets [n] -> uint32 [r, n]."""
    seed = np.asarray(seed, dtype=np.int64).reshape(-1)
    pos = np.asarray(pos, dtype=np.int64).reshape(-1)
    with np.errstate(over="ignore"):
        h = np.full(seed.shape, domain, dtype=np.uint32)
        h = _mix_h(h, _key_mix(seed & 0xFFFFFFFF))
        h = _mix_h(h, _key_mix((seed >> 32) & 0xFFFFFFFF))
        h = _mix_h(h, _key_mix(pos & 0xFFFFFFFF))
        off = np.asarray(offset)
        kmix = _keys(off.size) if off.ndim == 1 and off.size and off[0] == 0 and off[-1] == off.size - 1 \
            else _key_mix(off)
        h = _mix_h(h[:, None], kmix[None, :])
        return _fmix(h ^ np.uint32(16))


def _uniform32(seed, pos, keys):
    r = murmur3_hash32(seed, pos, keys)
    hi = (r >> np.uint32(16)).astype(np.int32).astype(np.float32)
    lo = (r & np.uint32(0xFFFF)).astype(np.int32).astype(np.float32)
    return hi * np.float32(1.52587890625e-05) + (lo + np.float32(0.5)) * np.float32(2.3283064365386963e-10)


def _uniform64(seed, pos, keys):
    lo = murmur3_hash32(seed, pos, keys).astype(np.uint64)
    hi = murmur3_hash32(seed, pos, keys, domain=0x9E3779B9).astype(np.uint64)
    r53 = ((hi << np.uint64(32)) | lo) >> np.uint64(11)
    u = (r53.astype(np.float64) + 0.5) * 1.1102230246251565e-16
    return np.where(u == 1.0, u - 1.1102230246251565e-16, u)


def _log1p_neg_stable(v):
    """gumbel.py:151-168 in float32 (Horner in place: the same operations in the same order; both branches over
    the whole block, then the kernel's select: cheaper in numpy than gathering the series' quarter)."""
    f = np.float32
    poly = np.full_like(v, f(1.0 / 8.0))
    for c in (1.0 / 7.0, 1.0 / 6.0, 1.0 / 5.0, 1.0 / 4.0, 1.0 / 3.0, 1.0 / 2.0, 1.0):
        np.multiply(v, poly, out=poly)
        np.add(f(c), poly, out=poly)
    np.multiply(-v, poly, out=poly)  # the series
    direct = np.subtract(f(1.0), v)
    np.maximum(direct, f(5.960464477539063e-08), out=direct)
    np.log(direct, out=direct)
    return np.where(v < f(0.25), poly, direct)


def _noised_block_argmax(logits, temp, seed, pos, block_size, *, drafting, use_fp64, apply_temperature):
    """`gumbel_noised_argmax` per row and vocab block (gumbel.py:171-212): rows [n, V] float32, temp/seed/pos
    [n]. Returns (value, index within block) [n, num_blocks] as torch tensors."""
    logits = logits.numpy() if isinstance(logits, torch.Tensor) else logits
    temp = np.asarray(temp.numpy() if isinstance(temp, torch.Tensor) else temp, dtype=np.float32).reshape(-1)
    seed = np.asarray(seed.numpy() if isinstance(seed, torch.Tensor) else seed, dtype=np.int64).reshape(-1)
    pos = np.asarray(pos.numpy() if isinstance(pos, torch.Tensor) else pos, dtype=np.int64).reshape(-1)
    n, V = logits.shape
    nb = -(-V // block_size)
    x = np.full((n, nb * block_size), -np.inf, dtype=np.float32)
    x[:, :V] = logits
    hot = temp != 0.0
    if use_fp64:
        x = x.astype(np.float64)
    rows = np.nonzero(hot)[0]
    if rows.size:  # every sampled row at once: the same per-element operations as one row at a time
        base = x[rows, :V]
        if apply_temperature:
            base = (logits[rows].astype(np.float32) / temp[rows][:, None]).astype(x.dtype)
        p = pos[rows] + ((1 << 30) if drafting else 0)
        if use_fp64:
            noise = -np.log(-np.log(_uniform64(seed[rows], p, np.arange(V))))
        else:
            with np.errstate(divide="ignore"):
                noise = -np.log(-_log1p_neg_stable(_uniform32(seed[rows], p, np.arange(V))))
        x[rows, :V] = base + noise
    blocks = x.reshape(n, nb, block_size)
    idx = blocks.argmax(axis=-1)
    value = np.take_along_axis(blocks, idx[..., None], axis=-1)[..., 0]
    return torch.from_numpy(value), torch.from_numpy(idx)


def _gumbel_sample_kernel(local_argmax_ptr, local_argmax_stride, local_max_ptr, local_max_stride, logits_cache_ptr,
                          logits_cache_stride_0, logits_cache_stride_1, logits_cache_col_ptr, logits_cache_source_ptr,
                          logits_cache_source_stride, logits_ptr, logits_stride, expanded_idx_mapping_ptr, seeds_ptr,
                          pos_ptr, temp_ptr, vocab_size, BLOCK_SIZE=1024, IS_DRAFTING=False, APPLY_TEMPERATURE=True,
                          USE_FP64=False, PER_TOKEN_COL=False, **_):
    V = int(vocab_size)
    n = local_argmax_ptr.shape[0]
    if n == 0:
        return
    logits = logits_ptr[:n, :V].to(torch.float32).contiguous()
    rsi = expanded_idx_mapping_ptr[:n].long()
    valid = rsi >= 0
    safe = rsi.clamp(min=0)
    temp = torch.where(valid, temp_ptr[safe].to(torch.float32), 0.0)
    seed = torch.where(valid, seeds_ptr[safe].long(), 0)
    if logits_cache_ptr is not None:
        col = (logits_cache_col_ptr[:n].long() if PER_TOKEN_COL
               else logits_cache_col_ptr.reshape(-1)[:1].long().expand(n))
        src = logits_cache_source_ptr[:n, :V]
        for t in range(n):
            if valid[t]:
                logits_cache_ptr[int(rsi[t]), int(col[t]), :V] = src[t]
        seed = seed ^ (col << 32)
    value, idx = _noised_block_argmax(logits, temp, seed, pos_ptr[:n], int(BLOCK_SIZE), drafting=bool(IS_DRAFTING),
                                      use_fp64=bool(USE_FP64), apply_temperature=bool(APPLY_TEMPERATURE))
    nb = value.shape[1]
    local_argmax_ptr[:n, :nb] = idx + torch.arange(nb)[None, :] * int(BLOCK_SIZE)
    local_max_ptr[:n, :nb] = value.to(local_max_ptr.dtype)


# -- the rejection sampler (gpu/spec_decode/rejection_sampler*.py) -------------------------------------------------

def _gather_draft_sampled_kernel(draft_sampled_ptr, pos_ptr, input_ids_ptr, positions_ptr, logits_indices_ptr,
                                 expanded_idx_mapping_ptr, expanded_local_pos_ptr, prefill_len_ptr, num_logits,
                                 BLOCK_SIZE=1024, **_):
    n = int(num_logits)
    ti = logits_indices_ptr[:n].long()
    tok = input_ids_ptr[ti]
    pos = positions_ptr[ti]
    local = expanded_local_pos_ptr[:n].long()
    plen = prefill_len_ptr[expanded_idx_mapping_ptr[:n].long()].long()
    placeholder = (local > 0) & (pos.long() - local < plen)
    draft_sampled_ptr[:n] = torch.where(placeholder, -1, tok).to(draft_sampled_ptr.dtype)
    pos_ptr[:n] = pos


def _is_bonus(local_pos, n):
    nxt = torch.zeros(n, dtype=torch.long)
    nxt[:-1] = local_pos[1:n].long()
    return nxt == 0


def _compute_local_logits_stats_kernel(target_local_argmax_ptr, target_local_argmax_stride, target_local_max_ptr,
                                       target_local_max_stride, target_local_sumexp_ptr, target_local_sumexp_stride,
                                       draft_local_max_ptr, draft_local_max_stride, draft_local_sumexp_ptr,
                                       draft_local_sumexp_stride, target_logits_ptr, target_logits_stride,
                                       draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1,
                                       expanded_idx_mapping_ptr, expanded_local_pos_ptr, temp_ptr, vocab_size,
                                       num_logits=None, BLOCK_SIZE=8192, HAS_DRAFT_LOGITS=False,
                                       num_speculative_steps=None, **_):
    """0.33: `num_logits` rows, a bonus row is one whose next row starts a request; 0.32.x: the stats buffers'
    rows (allocated num_logits long), a bonus row one whose draft step reaches num_speculative_steps."""
    if HAS_DRAFT_LOGITS:
        raise NotImplementedError("rejection sampling with draft logits is not replaced (--kernels triton)")
    n = int(num_logits) if num_logits is not None else target_local_argmax_ptr.shape[0]
    V, bs = int(vocab_size), int(BLOCK_SIZE)
    if n == 0:
        return
    nb = -(-V // bs)
    x = torch.full((n, nb * bs), float("-inf"), dtype=torch.float32)
    x[:, :V] = target_logits_ptr[:n, :V].to(torch.float32)
    x = x.view(n, nb, bs)
    rows = (~_is_bonus(expanded_local_pos_ptr, n) if num_speculative_steps is None
            else expanded_local_pos_ptr[:n].long() < int(num_speculative_steps))
    temp = temp_ptr[expanded_idx_mapping_ptr[:n].long()].to(torch.float32)
    greedy, hot = rows & (temp == 0.0), rows & (temp != 0.0)
    mx, arg = x.max(dim=-1)
    if bool(greedy.any()):
        target_local_argmax_ptr[:n, :nb][greedy] = (arg + torch.arange(nb)[None, :] * bs)[greedy]
        target_local_max_ptr[:n, :nb][greedy] = mx[greedy]
    if bool(hot.any()):
        xh, mh = x[hot], mx[hot]
        sumexp = torch.where(mh > float("-inf"), torch.exp(xh - mh[..., None]).sum(-1), 0.0)
        target_local_max_ptr[:n, :nb][hot] = mh
        target_local_sumexp_ptr[:n, :nb][hot] = sumexp


def _philox_uniform(seed: int, offset: int) -> np.float32:
    """`tl.rand(seed, offset)` (triton/language/random.py: randint4x -> philox 10 rounds -> uniform float),
    with the caller's `max(u, _TL_RAND_MIN)` (gumbel.py tl_rand32, includes_zero=False)."""
    seed &= 2**64 - 1
    c0, c1, c2, c3 = offset & _U32, (offset >> 32) & _U32, 0, 0
    k0, k1 = seed & _U32, (seed >> 32) & _U32
    for _ in range(10):
        _c0, _c2 = c0, c2
        c0 = ((0xCD9E8D57 * _c2) >> 32) ^ c1 ^ k0
        c2 = ((0xD2511F53 * _c0) >> 32) ^ c3 ^ k1
        c1 = (0xCD9E8D57 * _c2) & _U32
        c3 = (0xD2511F53 * _c0) & _U32
        k0 = (k0 + 0x9E3779B9) & _U32
        k1 = (k1 + 0xBB67AE85) & _U32
    x = c0 - (1 << 32) if c0 >= 1 << 31 else c0
    if x < 0:
        x = -x - 1
    u = np.float32(x) * np.float32(4.6566127342e-10)
    return max(u, np.float32(4.6566127342e-10))


def _global_lse(local_max, local_sumexp, row, nb):
    m = local_max[row, :nb]
    s = local_sumexp[row, :nb]
    g = m.max()
    return g + torch.log((s * torch.exp(m - g)).sum())


def _rejection_kernel(sampled_ptr, sampled_stride, rejected_steps_ptr, target_rejected_logsumexp_ptr,
                      draft_rejected_logsumexp_ptr, target_logits_ptr, target_logits_stride, target_local_argmax_ptr,
                      target_local_argmax_stride, target_local_max_ptr, target_local_max_stride,
                      target_local_sumexp_ptr, target_local_sumexp_stride, draft_sampled_ptr, draft_logits_ptr,
                      draft_logits_stride_0, draft_logits_stride_1, draft_local_max_ptr, draft_local_max_stride,
                      draft_local_sumexp_ptr, draft_local_sumexp_stride, cu_num_logits_ptr, idx_mapping_ptr, temp_ptr,
                      seed_ptr, pos_ptr, synthetic_conditional_rates_ptr, cumulative_log_p_ptr,
                      local_residual_mass_ptr, local_residual_mass_stride, fly_entropy_ptr=None,
                      fly_entropy_threshold=0.0, vocab_num_blocks=1, PADDED_VOCAB_NUM_BLOCKS=1,
                      HAS_DRAFT_LOGITS=False, SYNTHETIC_MODE=False, USE_BLOCK_VERIFICATION=False, FLY_WINDOW_SIZE=0,
                      **_):
    """Accept drafts left to right while the target agrees (greedy: its argmax; sampled: target logprob >
    log u, u = tl.rand(seed, pos)); rejection_sampler_utils.py:503-766 without draft logits, block
    verification, FLy or synthetic rates."""
    if HAS_DRAFT_LOGITS or SYNTHETIC_MODE or USE_BLOCK_VERIFICATION or FLY_WINDOW_SIZE:
        raise NotImplementedError("this rejection-sampling mode is not replaced (--kernels triton)")
    nb = int(vocab_num_blocks)
    cu = cu_num_logits_ptr.tolist()
    drafts = draft_sampled_ptr.tolist()
    slots = idx_mapping_ptr.tolist()
    for r in range(len(cu) - 1):  # the grid: one program per request of the chunk
        slot, start, end = slots[r], cu[r], cu[r + 1]
        seed = int(seed_ptr[slot])
        temp = float(temp_ptr[slot])
        greedy = temp == 0.0
        accepted_length, verifying = 0, True
        target_lse = np.float32(0.0)
        for i in range(end - start - 1):
            li = start + i
            d = drafts[li + 1]
            valid = d >= 0
            d = max(0, d)
            if not greedy:
                verifying = verifying and valid
            if not verifying:
                continue
            target_argmax = 0
            u = _philox_uniform(seed, int(pos_ptr[li]))
            if greedy:
                m = target_local_max_ptr[li, :nb].clone()
                m[m != m] = float("-inf")
                target_argmax = int(target_local_argmax_ptr[li, int(m.argmax())])
                accepted = valid and target_argmax == d
            else:
                logit = target_logits_ptr[li, d].to(torch.float32) if valid else torch.tensor(float("-inf"))
                lse = _global_lse(target_local_max_ptr, target_local_sumexp_ptr, li, nb)
                target_lse = lse
                accepted = bool(logit - lse > torch.log(torch.tensor(u)) + 0.0)
            verifying = accepted
            accepted_length += int(accepted)
            sampled_ptr[r, i] = target_argmax if greedy and not accepted else d
        rejected_steps_ptr[r] = accepted_length
        target_rejected_logsumexp_ptr[r] = float(target_lse)
        draft_rejected_logsumexp_ptr[r] = 0.0


def _resample_kernel(resampled_local_argmax_ptr, resampled_local_argmax_stride, resampled_local_max_ptr,
                     resampled_local_max_stride, target_logits_ptr, target_logits_stride,
                     target_rejected_logsumexp_ptr, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1,
                     draft_rejected_logsumexp_ptr, rejected_step_ptr, cu_num_logits_ptr, expanded_idx_mapping_ptr,
                     draft_sampled_ptr, temp_ptr, seed_ptr, pos_ptr, cumulative_log_p_ptr, contexts_ptr,
                     contexts_stride, watermarking_ptr, watermarking_skip_mask_ptr, watermark_key_0, watermark_key_1,
                     vocab_size, BLOCK_SIZE=1024, HAS_DRAFT_LOGITS=False, USE_FP64=False,
                     USE_BLOCK_VERIFICATION=False, CONTEXT_WIDTH=1, WATERMARK=False, DEDUPLICATE_CONTEXTS=False, **_):
    """The rejected (or bonus) position's token: the target distribution without the rejected draft, Gumbel-max
    with the request's seed at that position (rejection_sampler_utils.py:804-1016, no draft logits, no
    watermark)."""
    if HAS_DRAFT_LOGITS or WATERMARK or USE_BLOCK_VERIFICATION:
        raise NotImplementedError("this resampling mode is not replaced (--kernels triton)")
    V = int(vocab_size)
    cu = cu_num_logits_ptr.tolist()
    for r in range(resampled_local_argmax_ptr.shape[0]):
        k = int(rejected_step_ptr[r])
        ti = cu[r] + k
        rsi = int(expanded_idx_mapping_ptr[ti])
        temp = float(temp_ptr[rsi])
        bonus = ti == cu[r + 1] - 1
        if temp == 0.0 and not bonus:
            continue
        rejected = 0 if bonus else int(draft_sampled_ptr[ti + 1])
        row = target_logits_ptr[ti, :V].to(torch.float32)
        if not bonus and rejected >= 0:
            row = row.clone()
            row[rejected] = float("-inf")
        value, idx = _noised_block_argmax(row[None, :], torch.tensor([temp], dtype=torch.float32),
                                          torch.tensor([int(seed_ptr[rsi])]), pos_ptr[ti:ti + 1], int(BLOCK_SIZE),
                                          drafting=False, use_fp64=bool(USE_FP64), apply_temperature=False)
        nb = value.shape[1]
        resampled_local_argmax_ptr[r, :nb] = idx[0] + torch.arange(nb) * int(BLOCK_SIZE)
        resampled_local_max_ptr[r, :nb] = value[0].to(resampled_local_max_ptr.dtype)


def _insert_resampled_kernel(sampled_ptr, sampled_stride, num_sampled_ptr, resampled_local_argmax_ptr,
                             resampled_local_argmax_stride, resampled_local_max_ptr, resampled_local_max_stride,
                             resample_num_blocks, cu_num_logits_ptr, expanded_idx_mapping_ptr, temp_ptr,
                             PADDED_RESAMPLE_NUM_BLOCKS=1, **_):
    nb = int(resample_num_blocks)
    cu = cu_num_logits_ptr.tolist()
    for r in range(num_sampled_ptr.shape[0]):
        ns = int(num_sampled_ptr[r])
        ti = cu[r] + ns
        rsi = int(expanded_idx_mapping_ptr[ti])
        num_sampled_ptr[r] = ns + 1
        if float(temp_ptr[rsi]) == 0.0 and ti != cu[r + 1] - 1:
            continue
        m = resampled_local_max_ptr[r, :nb].clone()
        m[m != m] = float("-inf")
        sampled_ptr[r, ns] = resampled_local_argmax_ptr[r, int(m.argmax())]


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
    _G + "sample.gumbel._gumbel_sample_kernel": _gumbel_sample_kernel,
    _G + "spec_decode.rejection_sampler._gather_draft_sampled_kernel": _gather_draft_sampled_kernel,
    _G + "spec_decode.rejection_sampler_utils._compute_local_logits_stats_kernel": _compute_local_logits_stats_kernel,
    _G + "spec_decode.rejection_sampler_utils._rejection_kernel": _rejection_kernel,
    _G + "spec_decode.rejection_sampler_utils._resample_kernel": _resample_kernel,
    _G + "spec_decode.rejection_sampler_utils._insert_resampled_kernel": _insert_resampled_kernel,
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
        if kernels_v1._exists(name):
            host, attr = dispatcher._resolve_kernel(name)
            present[name] = _by_name(fn, dispatcher._kernel_arg_names(getattr(host, attr)))
    kernels_v1.register_replacements(present)
    _registered = f"dispatcher ({len(present)} kernels)"
    return _registered


def mode(kind: str):
    """`with mode("torch" | "triton"):` the V2 runner's kernels for one execute / sample call (kernels_v1.mode:
    one switch for every replacement registered in this process, the V1 worker's too)."""
    return kernels_v1.mode(kind, register)
