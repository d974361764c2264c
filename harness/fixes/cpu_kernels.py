"""Fixes of vLLM's CPU Mamba kernels (tier e2e only: the other tiers run no forward).

`cpu-mamba2-prefill-checkpoint`: in align mode Mamba2 asks for prefill checkpoints (the block-boundary state
exported from inside one forward: `MambaMixer2.get_kv_cache_spec`, mamba_mixer2.py:1098-1107 in 0.32.0) and
passes `return_intermediate_states=True` to the chunk scan, then indexes its result by chunk
(`varlen_states[last_chunk_indices_p]`, :880). vLLM's CPU chunk scan (`_mamba_chunk_scan_combined_fwd_cpu`,
ops/cpu/mamba_ssm.py) ignores the flag and returns one state per sequence, so any prefill with more than one
chunk dies with `IndexError`; past that, `store_prefill_checkpoint` (ops/ssd_checkpoint.py) launches a Triton
kernel, which has no CPU driver.

The fix (what vLLM would ship in ops/cpu/): the CPU scan run chunk by chunk over `cu_chunk_seqlens` (each chunk
from its sequence's running state, so the outputs are the whole-sequence scan's), returning the state at every
chunk end when asked; the checkpoint store as torch indexing on CPU (the Triton kernel's writes: the conv
window ending at the checkpoint and the chunk-end SSM state, into the row's destination block)."""

from __future__ import annotations

from harness.fixes.targets import Fix, patch_fix
from harness.patches import patch_attr, undo_all

_MIXER = "vllm.model_executor.layers.mamba.mamba_mixer2"
_COMBINED = "vllm.model_executor.layers.mamba.ops.ssd_combined"
_MARK = "_hybrid_harness_cpu_fix"


def _scan_by_chunk(original):
    """The CPU chunk scan returning per-chunk states when `return_intermediate_states` is asked."""

    def scan(x, dt, A, B, C, chunk_size, out, D=None, z=None, dt_bias=None, initial_states=None,
             return_intermediate_states=False, seq_idx=None, cu_seqlens=None, cu_chunk_seqlens=None,
             last_chunk_indices=None, state_dtype=None, **kwargs):
        import torch

        if not return_intermediate_states or cu_chunk_seqlens is None:
            return original(x, dt, A, B, C, chunk_size, out, D=D, z=z, dt_bias=dt_bias,
                            initial_states=initial_states, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                            cu_chunk_seqlens=cu_chunk_seqlens, last_chunk_indices=last_chunk_indices,
                            state_dtype=state_dtype, **kwargs)
        common = dict(D=D, dt_bias=dt_bias, state_dtype=torch.float32, **kwargs)
        bounds = cu_chunk_seqlens.tolist()
        seqs = seq_idx.tolist() if seq_idx is not None else [0] * (len(bounds) - 1)
        batch = cu_seqlens.numel() - 1
        nheads, headdim, dstate = x.shape[1], x.shape[2], B.shape[2]
        running = torch.zeros(batch, nheads, headdim, dstate, dtype=torch.float32, device=x.device)
        if initial_states is not None:
            running.copy_(initial_states.float())
        states = []
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            s = seqs[k]
            one = torch.tensor([0, hi - lo], dtype=cu_seqlens.dtype, device=x.device)
            state = original(x[lo:hi], dt[lo:hi], A, B[lo:hi], C[lo:hi], chunk_size, out[lo:hi],
                             z=None if z is None else z[lo:hi], initial_states=running[s:s + 1],
                             return_intermediate_states=False, seq_idx=None, cu_seqlens=one,
                             cu_chunk_seqlens=None, last_chunk_indices=None, **common)
            running[s] = state[0].float()
            states.append(state[0])
        out_dtype = state_dtype if state_dtype is not None else x.dtype
        return torch.stack(states).to(out_dtype)

    setattr(scan, _MARK, True)
    scan.__wrapped__ = original
    return scan


def _store_checkpoint_cpu(checkpoint, chunk_idx, x, conv_state, chunk_states, ssm_state, query_start_loc, *,
                          state_len: int) -> None:
    """`store_prefill_checkpoint`'s writes in torch: each row with a checkpoint (offset > 0) gets the conv window
    of the `state_len` inputs ending at the checkpoint and the SSM state at its chunk end."""
    offsets = checkpoint.checkpoint_offsets.tolist()
    dsts = checkpoint.state_indices.tolist()
    starts = query_start_loc.tolist()
    chunks = chunk_idx.tolist()
    for row, offset in enumerate(offsets):
        if offset <= 0:
            continue
        dst, first = dsts[row], starts[row] + offset - state_len
        conv_state[dst, :, :state_len] = x[:, first:first + state_len].to(conv_state.dtype)
        flat = chunk_states[chunks[row]].reshape(-1)
        ssm_state[dst].view(-1)[:flat.numel()] = flat.to(ssm_state.dtype)


setattr(_store_checkpoint_cpu, _MARK, True)


def _patch():
    import importlib

    mixer, combined = importlib.import_module(_MIXER), importlib.import_module(_COMBINED)
    if not hasattr(mixer, "store_prefill_checkpoint"):
        raise AttributeError(f"{_MIXER}.store_prefill_checkpoint")
    return undo_all([patch_attr(combined, "_mamba_chunk_scan_combined_fwd",
                                _scan_by_chunk(combined._mamba_chunk_scan_combined_fwd)),
                     patch_attr(mixer, "store_prefill_checkpoint", _store_checkpoint_cpu)])


def _is_applied() -> bool:
    import importlib

    combined = importlib.import_module(_COMBINED)
    mixer = importlib.import_module(_MIXER)
    return (getattr(combined._mamba_chunk_scan_combined_fwd, _MARK, False)
            and getattr(mixer.store_prefill_checkpoint, _MARK, False))


def _applies() -> bool:
    """The release's Mamba2 layer stores prefill checkpoints and its platform runs the CPU chunk scan."""
    import importlib

    try:
        mixer = importlib.import_module(_MIXER)
        combined = importlib.import_module(_COMBINED)
    except ImportError:
        return False
    import inspect

    scan = getattr(combined, "_mamba_chunk_scan_combined_fwd", None)
    return (hasattr(mixer, "store_prefill_checkpoint") and scan is not None
            and inspect.unwrap(scan).__name__.endswith("_cpu"))


def _cpu_platform() -> bool:
    """vLLM resolved its CPU platform here (the speculative-decoding fixes replace code only the CPU build runs)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return current_platform.is_cpu()


# -- cpu-mamba-align-spec-decode-triton ----------------------------------------------------------------------------
_UTILS = "vllm.v1.worker.mamba_utils"


class _Row:
    """What `collect_mamba_copy_meta` reads of a request (`req_state.block_ids[group]`): one batch row's blocks."""

    __slots__ = ("block_ids",)

    def __init__(self, block_ids: dict[int, list[int]]) -> None:
        self.block_ids = block_ids


def _scalar_precopy(align_ctx):
    """`_resolve_fused_precopy` on CPU: None, so `preprocess_mamba` takes its scalar path (vLLM's own
    `collect_mamba_copy_meta` and `do_mamba_copy_block`, whose memcpy the CPU runner points at its CPU kernel)."""
    return None


setattr(_scalar_precopy, _MARK, True)


def _postprocess_scalar(*, bufs, num_reqs, num_accepted_tokens_gpu, num_accepted_tokens_cpu_tensor, input_batch,
                        kv_cache_config, forward_context, mamba_state_copy_funcs) -> None:
    """`postprocess_mamba_align_gpu` on CPU: the fused Triton kernel's per-request decision
    (`postprocess_mamba_fused_kernel`, mamba_utils.py:154-281 in 0.27.1, 369-500 in 0.32.0), its copies queued
    through vLLM's own `collect_mamba_copy_meta` / `do_mamba_copy_block`, and the accepted-token counts the next
    step's pre-copy reads (1 where the state stayed in its block)."""
    import importlib

    utils = importlib.import_module(_UTILS)
    ctx, copy_bufs = bufs.postprocess_align, bufs.preprocess
    block_size = copy_bufs.mamba_spec.block_size
    accepted = num_accepted_tokens_gpu[:num_reqs].tolist()
    src_cols = ctx.mamba_state_idx_buf.np[:num_reqs].tolist()
    scheduled = ctx.num_scheduled_tokens_buf.np[:num_reqs].tolist()
    computed = ctx.num_computed_tokens_buf.np[:num_reqs].tolist()
    drafts = ctx.num_draft_tokens_buf.np[:num_reqs].tolist()
    out = list(accepted)
    copy_bufs.offset = 0
    for i in range(num_reqs):
        running = computed[i] + scheduled[i] - drafts[i]  # tokens the running state holds before acceptance
        new_computed = running + accepted[i] - 1
        aligned = new_computed // block_size * block_size
        if aligned < running:  # no block boundary crossed by the accepted drafts
            continue
        bias, dest = aligned - running, aligned // block_size - 1
        if src_cols[i] == dest:
            out[i] = 1
        row = _Row({gid: input_batch.block_table[gid].block_table.np[i].tolist()
                    for gid in copy_bufs.mamba_group_ids})
        utils.collect_mamba_copy_meta(copy_bufs, kv_cache_config, mamba_state_copy_funcs, copy_bufs.mamba_group_ids,
                                      src_cols[i], dest, bias, row, forward_context)
    utils.do_mamba_copy_block(copy_bufs)
    copy_bufs.offset = 0
    num_accepted_tokens_cpu_tensor[:num_reqs].copy_(num_accepted_tokens_cpu_tensor.new_tensor(out))


setattr(_postprocess_scalar, _MARK, True)


def _patch_spec():
    import importlib

    utils = importlib.import_module(_UTILS)
    return undo_all([patch_attr(utils, "_resolve_fused_precopy", _scalar_precopy),
                     patch_attr(utils, "postprocess_mamba_align_gpu", _postprocess_scalar)])


def _spec_is_applied() -> bool:
    import importlib

    utils = importlib.import_module(_UTILS)
    return (getattr(utils._resolve_fused_precopy, _MARK, False)
            and getattr(utils.postprocess_mamba_align_gpu, _MARK, False))


def _spec_applies() -> bool:
    """The release's V1 runner pre- and post-copies Mamba states with the fused Triton kernels under speculative
    decoding in align mode, and the platform is vLLM's CPU one (no Triton driver)."""
    import importlib

    try:
        utils = importlib.import_module(_UTILS)
    except ImportError:
        return False
    return _cpu_platform() and all(
        hasattr(utils, n) for n in ("postprocess_mamba_align_gpu", "_resolve_fused_precopy", "collect_mamba_copy_meta",
                                    "do_mamba_copy_block"))


# -- cpu-mamba2-spec-conv-drops-accepted ---------------------------------------------------------------------------
_CONV_CPU = "vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d"


def _conv_update_accepting(original):
    """The CPU conv update honouring `num_accepted_tokens` (speculative decoding) as vLLM's Triton kernel does
    (`_causal_conv1d_update_kernel`, ops/causal_conv1d.py:763-1000 in 0.32.0): each sequence's window of prior
    inputs starts `num_accepted - 1` columns into its conv state, the state keeps what follows that window's first
    column and then the query's inputs, and the output is the causal convolution of window + query. Without
    `num_accepted_tokens` (no drafts) vLLM's own CPU kernel runs."""

    def conv_update(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None,
                    num_accepted_tokens=None, query_start_loc=None, max_query_len=-1, pad_slot_id=None, **kwargs):
        if num_accepted_tokens is None or query_start_loc is None:
            return original(x, conv_state, weight, bias, activation, conv_state_indices=conv_state_indices,
                            query_start_loc=query_start_loc, pad_slot_id=pad_slot_id, **kwargs)
        import torch
        import torch.nn.functional as F

        if isinstance(activation, bool):
            activation = "silu" if activation else None
        null = pad_slot_id if pad_slot_id is not None else kwargs.get("null_block_id", 0)
        width = weight.shape[1]
        cols = (conv_state_indices if conv_state_indices.dim() == 1 else conv_state_indices[:, 0]).tolist()
        longest = max_query_len if max_query_len > 0 else conv_state_indices.shape[-1]
        state_len = width - 1 + (longest - 1)  # the wrapper's effective state length (causal_conv1d.py:1214-1217)
        starts, accepted = query_start_loc.tolist(), num_accepted_tokens.tolist()
        out = torch.empty_like(x)
        for b, (lo, hi) in enumerate(zip(starts, starts[1:])):
            n = hi - lo
            if n == 0 or cols[b] == null:
                continue
            state, first = conv_state[cols[b]], accepted[b] - 1  # [dim, state_len] (a view: SD layout transposed)
            kept = state_len - (longest - n)  # the kernel's varlen state length
            xs = x[lo:hi].t().to(state.dtype)
            window = state[:, first:first + width - 1].clone()
            state[:, :kept] = torch.cat([state[:, first + 1:first + 1 + kept - n].clone(), xs], dim=1)
            y = F.conv1d(torch.cat([window, xs], dim=1).to(weight.dtype)[None], weight[:, None, :], bias,
                         groups=weight.shape[0])[0]
            out[lo:hi] = (F.silu(y) if activation in ("silu", "swish") else y).t().to(out.dtype)
        return out

    setattr(conv_update, _MARK, True)
    conv_update.__wrapped__ = original
    return conv_update


def _patch_conv():
    import importlib

    mixer = importlib.import_module(_MIXER)
    return patch_attr(mixer, "causal_conv1d_update", _conv_update_accepting(mixer.causal_conv1d_update))


def _conv_is_applied() -> bool:
    import importlib

    return getattr(importlib.import_module(_MIXER).causal_conv1d_update, _MARK, False)


def _conv_applies() -> bool:
    """Mamba2's decode conv update is vLLM's CPU one, which takes no `num_accepted_tokens` (its **kwargs drop it:
    ops/cpu/causal_conv1d.py:87-116 in 0.32.0)."""
    import importlib
    import inspect

    try:
        mixer = importlib.import_module(_MIXER)
    except ImportError:
        return False
    if not _cpu_platform():
        return False
    update = inspect.unwrap(getattr(mixer, "causal_conv1d_update", None) or (lambda: None))
    return (update.__module__ == _CONV_CPU
            and "num_accepted_tokens" not in inspect.signature(update).parameters)


# -- cpu-mamba2-spec-ssm-ignores-accepted ---------------------------------------------------------------------------
_SSU = "vllm.model_executor.layers.mamba.ops.ssu_dispatch"


def _ssm_update_by_token(state, x, dt, A, B, C, D, dt_bias, z, dt_softplus, src_rows, dst_rows, null_block_id, out,
                         num_accepted_tokens, cu_seqlens) -> None:
    """The selective state update of a speculative decode, token by token, as vLLM's Triton kernel does it
    (`_selective_scan_update_kernel`, ops/mamba_ssm.py:233-445 in 0.32.0): each sequence starts from the state in
    column `num_accepted - 1` of its row and stores the state after each of its tokens in that token's column."""
    import torch
    import torch.nn.functional as F

    heads_per_group = x.shape[1] // B.shape[1]
    starts, accepted = cu_seqlens.tolist(), num_accepted_tokens.tolist()
    srcs, dsts = src_rows.tolist(), dst_rows.tolist()
    A32 = A.float()
    for b, (lo, hi) in enumerate(zip(starts, starts[1:])):
        src = srcs[b][max(accepted[b] - 1, 0)]
        if src == null_block_id or lo == hi:
            continue
        h = state[src].float()
        for t in range(lo, hi):
            step = dt[t].float() + (dt_bias.float() if dt_bias is not None else 0.0)
            if dt_softplus:
                step = F.softplus(step)
            b_t = B[t].float().repeat_interleave(heads_per_group, 0)[:, None, :]
            c_t = C[t].float().repeat_interleave(heads_per_group, 0)[:, None, :]
            h = h * torch.exp(A32 * step[..., None]) + b_t * step[..., None] * x[t].float()[..., None]
            y = (h * c_t).sum(-1)
            if D is not None:
                y = y + D.float() * x[t].float()
            if z is not None:
                y = y * F.silu(z[t].float())
            out[t] = y.to(out.dtype)
            dst = dsts[b][t - lo]
            if dst != null_block_id:
                state[dst] = h.to(state.dtype)


def _ssm_backend_by_token(original):
    """`CPUSSUBackend.__call__` with speculative decodes (`num_accepted_tokens`) through `_ssm_update_by_token`;
    vLLM's C++ kernel for everything else."""

    def call(self, state, x, dt, A, B, C, D, dt_bias, z=None, dt_softplus=False, state_batch_indices=None,
             dst_state_batch_indices=None, null_block_id=0, out=None, num_accepted_tokens=None, cu_seqlens=None,
             is_blackwell=False):
        if num_accepted_tokens is None or cu_seqlens is None or state_batch_indices is None:
            return original(self, state, x, dt, A, B, C, D, dt_bias, z, dt_softplus, state_batch_indices,
                            dst_state_batch_indices, null_block_id, out, num_accepted_tokens, cu_seqlens, is_blackwell)
        dst = state_batch_indices if dst_state_batch_indices is None else dst_state_batch_indices
        _ssm_update_by_token(state, x, dt, A, B, C, D, dt_bias, z, dt_softplus, state_batch_indices, dst,
                             null_block_id, out, num_accepted_tokens, cu_seqlens)
        return None

    setattr(call, _MARK, True)
    call.__wrapped__ = original
    return call


def _patch_ssm():
    import importlib

    backend = importlib.import_module(_SSU).CPUSSUBackend
    return patch_attr(backend, "__call__", _ssm_backend_by_token(backend.__call__))


def _ssm_is_applied() -> bool:
    import importlib

    return getattr(importlib.import_module(_SSU).CPUSSUBackend.__call__, _MARK, False)


def _ssm_applies() -> bool:
    """The release selects the SSU backend by platform and has the C++ CPU one (0.32.0: ssu_dispatch.py:408-470)."""
    import importlib

    try:
        module = importlib.import_module(_SSU)
    except ImportError:
        return False
    return hasattr(module, "CPUSSUBackend")


def _kernel_fix(name: str, what: str, patch, is_applied, target: str, applies) -> Fix:
    return patch_fix(name, target, what, patch, is_applied, applies=applies)


FIXES = (_kernel_fix("fix-cpu-mamba2-prefill-checkpoint",
                     "the CPU chunk scan returns per-chunk states and the checkpoint store runs in torch",
                     _patch, _is_applied,
                     "ops/cpu/mamba_ssm._mamba_chunk_scan_combined_fwd_cpu + ops/ssd_checkpoint.store_prefill_checkpoint",
                     _applies),
         _kernel_fix("fix-cpu-mamba-align-spec-decode",
                     "on CPU the align-mode Mamba pre- and post-copy of speculative decoding take the scalar copy "
                     "path (vLLM's collect_mamba_copy_meta / do_mamba_copy_block)", _patch_spec, _spec_is_applied,
                     "v1/worker/mamba_utils._resolve_fused_precopy + postprocess_mamba_align_gpu", _spec_applies),
         _kernel_fix("fix-cpu-mamba2-spec-conv-accepted",
                     "the CPU conv update of Mamba2's decode honours num_accepted_tokens (the window of prior inputs "
                     "starts where the accepted drafts end)", _patch_conv, _conv_is_applied,
                     "ops/cpu/causal_conv1d.causal_conv1d_update_cpu (as mamba_mixer2.causal_conv1d_update)",
                     _conv_applies),
         _kernel_fix("fix-cpu-mamba2-spec-ssm-accepted",
                     "the CPU selective state update of a speculative decode starts from the accepted column and "
                     "stores every token's state, as the Triton kernel does", _patch_ssm, _ssm_is_applied,
                     "ops/ssu_dispatch.CPUSSUBackend.__call__ (ops.selective_state_update_cpu)", _ssm_applies))
