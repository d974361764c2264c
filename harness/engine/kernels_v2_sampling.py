"""CPU (numpy/torch) replacements of the sampling kernels vLLM's V2 model runner launches (`--kernels torch`):
the Gumbel sampler (murmur3 noise bit for bit) and the rejection sampler (Philox `tl.rand` bit for bit), for the
paths without draft logits, watermarking, block verification, FLy or synthetic acceptance; any other path raises
NotImplementedError. Registered with the other V2 replacements (harness/engine/kernels_v2.py `KERNELS`).
"""

from __future__ import annotations

import numpy as np
import torch

_U32 = 0xFFFFFFFF  # Philox / murmur3 words


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


def gumbel_sample_kernel(local_argmax_ptr, local_argmax_stride, local_max_ptr, local_max_stride, logits_cache_ptr,
                          logits_cache_stride_0, logits_cache_stride_1, logits_cache_col_ptr, logits_cache_source_ptr,
                          logits_cache_source_stride, logits_ptr, logits_stride, expanded_idx_mapping_ptr, seeds_ptr,
                          pos_ptr, temp_ptr, vocab_size, BLOCK_SIZE=1024, IS_DRAFTING=False, APPLY_TEMPERATURE=True,
                          USE_FP64=False, PER_TOKEN_COL=False, logits_cache_row_mapping_ptr=None, bias_ptr=None,
                          bias_stride=0, HAS_BIAS=False, **_):
    """0.34.0 adds a bias added in the logits' dtype (HAS_BIAS, gumbel.py:329-332), a draft-logits row mapping
    (`draft_logits_row`, spec_decode/draft_logits.py:19-30) and a cache source that may be None (the logits)."""
    V = int(vocab_size)
    n = local_argmax_ptr.shape[0]
    if n == 0:
        return
    logits = logits_ptr[:n, :V]
    if HAS_BIAS:
        logits = (logits.to(torch.float32) + bias_ptr[:n, :V].to(torch.float32)).to(logits.dtype)
    logits = logits.to(torch.float32).contiguous()
    rsi = expanded_idx_mapping_ptr[:n].long()
    valid = rsi >= 0
    safe = rsi.clamp(min=0)
    temp = torch.where(valid, temp_ptr[safe].to(torch.float32), 0.0)
    seed = torch.where(valid, seeds_ptr[safe].long(), 0)
    if logits_cache_ptr is not None:
        col = (logits_cache_col_ptr[:n].long() if PER_TOKEN_COL
               else logits_cache_col_ptr.reshape(-1)[:1].long().expand(n))
        src = logits_cache_source_ptr[:n, :V] if logits_cache_source_ptr is not None else logits
        for t in range(n):
            row = int(rsi[t])
            if valid[t] and logits_cache_row_mapping_ptr is not None:
                row = int(logits_cache_row_mapping_ptr[row])
            if valid[t] and row >= 0:
                logits_cache_ptr[row, int(col[t]), :V] = src[t]
        seed = seed ^ (col << 32)
    value, idx = _noised_block_argmax(logits, temp, seed, pos_ptr[:n], int(BLOCK_SIZE), drafting=bool(IS_DRAFTING),
                                      use_fp64=bool(USE_FP64), apply_temperature=bool(APPLY_TEMPERATURE))
    nb = value.shape[1]
    local_argmax_ptr[:n, :nb] = idx + torch.arange(nb)[None, :] * int(BLOCK_SIZE)
    local_max_ptr[:n, :nb] = value.to(local_max_ptr.dtype)


def gumbel_combine_kernel(local_argmax_ptr, local_argmax_stride, local_max_ptr, local_max_stride, sampled_ptr,
                           num_blocks, PADDED_NUM_BLOCKS=None, **_):
    """0.34.0's combine of the per-block maxima (gumbel.py:362-386): per row the first NaN block wins, else the
    first block holding the maximum (torch.argmax's rule); the row samples that block's argmax."""
    nb = int(num_blocks)
    values = local_max_ptr[:sampled_ptr.shape[0], :nb].to(torch.float64)
    for row in range(values.shape[0]):
        v = values[row]
        nan = torch.nonzero(v != v)
        winner = int(nan[0]) if len(nan) else int(torch.nonzero(v == v.max())[0])
        sampled_ptr[row] = local_argmax_ptr[row, winner]


# -- logprobs (gpu/sample/logprob.py, prompt_logprob.py): a request asking for prompt logprobs (a prefix-cache hit
# limit, harness/engine/scheduler.py `hit_limit_params`) runs them over the whole vocabulary, which Triton's
# interpreter takes seconds a row for. The same math; the sums run in torch's order, not the kernel's blocks ---------

def topk_log_softmax_kernel(output_ptr, logits_ptr, logits_stride, topk_ids_ptr, topk_ids_stride, topk, vocab_size,
                             BLOCK_SIZE=1024, TOPK_BLOCK_SIZE=None, **_):
    """logprob.py:17-57: per row, the fp32 log-softmax (shifted by the row's maximum) at the given token ids."""
    rows, k, v = output_ptr.shape[0], int(topk), int(vocab_size)
    logits = logits_ptr[:rows, :v].to(torch.float32)
    ids = topk_ids_ptr[:rows, :k].long()
    # torch's fused log-softmax shifts by the row's maximum as the kernel does; a third of the cost of spelling it
    # out over a 32,000-token vocabulary (the engine tier's largest cost where prompt logprobs are asked for)
    output_ptr.view(rows, -1)[:, :k] = torch.log_softmax(logits, dim=1).gather(1, ids)


def ranks_kernel(output_ptr, logits_ptr, logits_stride, token_ids_ptr, vocab_size, BLOCK_SIZE=8192, **_):
    """logprob.py:60-78: per row, how many logits are at least the token's."""
    rows, v = output_ptr.shape[0], int(vocab_size)
    logits = logits_ptr[:rows, :v]
    x = logits.gather(1, token_ids_ptr[:rows].long().view(rows, 1))
    output_ptr[:rows] = (logits >= x).sum(dim=1).to(output_ptr.dtype)


def prompt_logprobs_token_ids_kernel(prompt_logprobs_token_ids_ptr, query_start_loc_ptr, idx_mapping_ptr,
                                      num_computed_tokens_ptr, all_token_ids_ptr, all_token_ids_stride,
                                      BLOCK_SIZE=1024, **_):
    """prompt_logprob.py:236-266: each query token's next token, read from its request's token row."""
    for b in range(idx_mapping_ptr.shape[0]):
        state = int(idx_mapping_ptr[b])
        start, end = int(query_start_loc_ptr[b]), int(query_start_loc_ptr[b + 1])
        first = int(num_computed_tokens_ptr[state]) + 1
        prompt_logprobs_token_ids_ptr[start:end] = all_token_ids_ptr[state, first:first + end - start]


# -- the rejection sampler (gpu/spec_decode/rejection_sampler*.py) -------------------------------------------------

def gather_draft_sampled_kernel(draft_sampled_ptr, pos_ptr, input_ids_ptr, positions_ptr, logits_indices_ptr,
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


def compute_local_logits_stats_kernel(target_local_argmax_ptr, target_local_argmax_stride, target_local_max_ptr,
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


def rejection_kernel(sampled_ptr, sampled_stride, rejected_steps_ptr, target_rejected_logsumexp_ptr,
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


def resample_kernel(resampled_local_argmax_ptr, resampled_local_argmax_stride, resampled_local_max_ptr,
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


def insert_resampled_kernel(sampled_ptr, sampled_stride, num_sampled_ptr, resampled_local_argmax_ptr,
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
