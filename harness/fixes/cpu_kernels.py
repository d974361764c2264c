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

from harness.fixes.targets import Fix
from harness.mutants.base import Mutant
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


FIXES = (Fix(Mutant(name="fix-cpu-mamba2-prefill-checkpoint",
                    bug_class="fix: the CPU chunk scan returns per-chunk states and the checkpoint store runs in torch",
                    releases="where the issue is known", origin="hybrid-harness", patch=_patch,
                    is_applied=_is_applied),
             "ops/cpu/mamba_ssm._mamba_chunk_scan_combined_fwd_cpu + ops/ssd_checkpoint.store_prefill_checkpoint",
             _applies),)
