"""GPU kernel backend: mamba-ssm's Triton SSD kernels on the pooled states, for `HybridLM(..., backend=backend())`.

Same four functions as `models/kernels.py` (the torch reference it is checked against, tools/gpu_check.py):

* `ssd_chunk_scan`  -> `mamba_chunk_scan_combined(initial_states=..., return_final_states=True)`, run once per
                       segment between the requested state positions (each segment's final state seeds the next)
* `ssd_recurrent`   -> `selective_state_update(..., state_batch_indices=...)`, one token at a time, updating
                       states in place inside a pooled buffer [slots, H, P, N] (`decode_step`, as vLLM's decode does)
* `causal_conv1d`, `paged_attention` stay torch (they run on whatever device their inputs are on)

Import: `import mamba_ssm` runs mamba_ssm/__init__.py, which imports ops/selective_scan_interface.py (line 3),
whose `import selective_scan_cuda` (line 20; the CUDA extension) fails when mamba-ssm was built with
MAMBA_SKIP_CUDA_BUILD=TRUE. Importing a submodule runs the package's __init__ first, so `_ops` registers an
empty `mamba_ssm` package object (module_from_spec: __path__ set, __init__ not run) and imports the two Triton
submodules under it; the Triton kernels need no CUDA extension. See docs/gpu.md.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from models import kernels

CHUNK_SIZE = 64  # mamba_chunk_scan_combined chunk length (Mamba2's default is 256; any power of two >= 16)
F32 = torch.float32


@functools.cache
def _ops() -> tuple[Callable, Callable]:
    """(mamba_chunk_scan_combined, selective_state_update). Raises ImportError (or Triton's own errors)."""
    shell = None
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None:
            raise ModuleNotFoundError("mamba_ssm is not installed")
        if importlib.util.find_spec("selective_scan_cuda") is not None:
            try:
                importlib.import_module("mamba_ssm")  # full build: the ordinary import works
            except ImportError:
                pass
        if "mamba_ssm" not in sys.modules:
            shell = sys.modules["mamba_ssm"] = importlib.util.module_from_spec(spec)
    try:
        ssd = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
        ssu = importlib.import_module("mamba_ssm.ops.triton.selective_state_update")
    except BaseException:
        if shell is not None:  # leave sys.modules as it was
            for name in [n for n in sys.modules if n == "mamba_ssm" or n.startswith("mamba_ssm.")]:
                del sys.modules[name]
        raise
    return ssd.mamba_chunk_scan_combined, ssu.selective_state_update


def available() -> tuple[bool, str]:
    """(True, "ok") when the Triton backend can run here, else (False, why). Never raises."""
    try:
        if not torch.cuda.is_available():
            return False, f"no CUDA: torch {torch.__version__} (CUDA build: {torch.version.cuda}) sees no GPU"
        if importlib.util.find_spec("mamba_ssm") is None:
            return False, "mamba_ssm not installed (tools/gpu_setup.sh, docs/gpu.md)"
        if importlib.util.find_spec("triton") is None:
            return False, "triton not installed (tools/gpu_setup.sh)"
        _ops()
    except Exception as exc:  # noqa: BLE001 - the reason is the result
        return False, f"Triton import failed: {type(exc).__name__}: {exc}"
    return True, "ok"


@dataclass(frozen=True)
class TritonBackend:
    """The kernel backend. `scan` / `update` have mamba-ssm's signatures (injectable: the CPU tests pass torch
    stand-ins). Inputs of any float dtype are computed in float32 and returned in the input's dtype."""

    scan: Callable  # mamba_chunk_scan_combined (mamba_ssm/ops/triton/ssd_combined.py)
    update: Callable  # selective_state_update (mamba_ssm/ops/triton/selective_state_update.py)
    chunk_size: int = CHUNK_SIZE

    causal_conv1d = staticmethod(kernels.causal_conv1d)
    paged_attention = staticmethod(kernels.paged_attention)

    def ssd_chunk_scan(self, x, dt, A, B, C, h0, state_at: list[int]):
        """As kernels.ssd_chunk_scan: x [T,H,P], dt [T,H] (after softplus), A [H], B/C [T,N], h0 [H,P,N];
        returns y [T,H,P] and the states after tokens `state_at` [k,H,P,N]."""
        T = x.shape[0]
        if not all(0 <= t < T for t in state_at):
            raise ValueError(f"state_at {state_at} outside 0..{T - 1}")
        ys, after, h, a = [], {}, h0, 0
        for b in sorted({t + 1 for t in state_at} | {T}):
            y, h = self._segment(x[a:b], dt[a:b], A, B[a:b], C[a:b], h)
            ys.append(y)
            after[b - 1] = h
            a = b
        return torch.cat(ys), torch.stack([after[t] for t in state_at])

    def _segment(self, x, dt, A, B, C, h0):
        # mamba_chunk_scan_combined (ssd_combined.py:624-642 in mamba-ssm 2.3.2.post1): x (batch, seqlen, nheads,
        # headdim), dt (batch, seqlen, nheads), A (nheads,), B/C (batch, seqlen, ngroups, dstate), initial_states
        # (batch, nheads, headdim, dstate); returns (out, final_states) (line 610). D, z, dt_bias stay None and
        # dt_softplus False: the model applies them itself.
        y, final = self.scan(_f(x)[None], _f(dt)[None], _f(A), _f(B)[None, :, None], _f(C)[None, :, None],
                             self.chunk_size, initial_states=_f(h0)[None], return_final_states=True)
        return y[0].to(x.dtype), final[0].to(h0.dtype)

    def decode_step(self, pool: torch.Tensor, slots: torch.Tensor, x, dt, A, B, C):
        """One decode token for each of `batch` requests whose SSM states live in `pool` [blocks, H, P, N]
        (float32, e.g. TensorPool.ssm[m]) at block ids `slots` [batch] (int32): updated in place through
        `state_batch_indices`. x [batch,H,P], dt [batch,H], A [H], B/C [batch,N]; returns y [batch,H,P] (no D)."""
        H, P, N = pool.shape[1:]
        # selective_state_update with heads (selective_state_update.py:135-150 in mamba-ssm 2.3.2.post1): state
        # (batch, nheads, dim, dstate), x/dt (batch, nheads, dim), A (nheads, dim, dstate), B/C (batch, ngroups,
        # dstate), D/dt_bias (nheads, dim). D and dt_bias are passed as zeros (exact no-ops) because None breaks
        # the launch there: `*(D.stride(0), D.stride(1)) if D is not None else 0` unpacks an int (lines 207, 211).
        # A and dt are materialised: stride-0 views would take the "tie_hdim" path (line 199).
        zeros = torch.zeros(H, P, dtype=F32, device=pool.device)
        return self.update(pool, _f(x), _f(dt)[..., None].expand(-1, -1, P).contiguous(),
                           _f(A)[:, None, None].expand(H, P, N).contiguous(), _f(B)[:, None], _f(C)[:, None],
                           D=zeros, dt_bias=zeros, state_batch_indices=slots)

    def ssd_recurrent(self, x, dt, A, B, C, h0):
        """As kernels.ssd_recurrent: y [T,H,P] and the state after every token [T,H,P,N]. A pooled buffer holds
        h0 in slot 0; token t copies slot t to slot t+1 and steps it in place (state_batch_indices=[t+1])."""
        T = x.shape[0]
        pool = torch.empty(T + 1, *h0.shape, dtype=F32, device=x.device)
        pool[0] = h0
        slots = torch.arange(1, T + 1, dtype=torch.int32, device=x.device)
        ys = []
        for t in range(T):
            pool[t + 1] = pool[t]
            ys.append(self.decode_step(pool, slots[t:t + 1], x[t:t + 1], dt[t:t + 1], A, B[t:t + 1], C[t:t + 1]))
        return torch.cat(ys).to(x.dtype), pool[1:].to(h0.dtype)


def _f(t: torch.Tensor) -> torch.Tensor:
    return t.to(F32).contiguous()


def backend(chunk_size: int = CHUNK_SIZE) -> TritonBackend:
    """The Triton backend; RuntimeError with the reason where it cannot run."""
    ok, why = available()
    if not ok:
        raise RuntimeError(f"GPU kernel backend unavailable: {why}")
    return TritonBackend(*_ops(), chunk_size)
