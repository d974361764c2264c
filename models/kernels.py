"""Pure-torch reference kernels for the tiny hybrid model (CPU, float64 by default).

Each kernel has the shape of the vLLM / mamba-ssm kernel it stands for, so the GPU backend
(`models/gpu.py`) can swap in mamba-ssm's Triton kernels and be checked against these:

* `causal_conv1d`      — causal_conv1d_fn / causal_conv1d_update with an initial window
* `ssd_chunk_scan`     — mamba_chunk_scan_combined(initial_states=..., return_final_states=True), one chunk,
                         closed form (the SSD "minimal" algorithm), returning states at chosen positions
* `ssd_recurrent`      — selective_state_update: the token-by-token recurrence (decode kernels)
* `paged_attention`    — causal attention over K/V gathered through a block table

Shapes: T tokens, H heads, P head dim, N state size, D conv channels.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


@functools.lru_cache(maxsize=4096)
def index(positions: tuple[int, ...], device: str = "cpu") -> torch.Tensor:
    """A cached index tensor: the same few position lists recur every step, and building a tensor from a
    list costs more than the tiny model's arithmetic."""
    return torch.tensor(positions, dtype=torch.long, device=device)


def causal_conv1d(x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """x [T, D], window [d_conv-1, D] (the inputs before x, oldest first), weight [D, d_conv].
    Returns the pre-activation output [T, D] and the extended input [d_conv-1+T, D]; the conv state
    after token t is `ext[t+1 : t+d_conv]`."""
    ext = torch.cat([window, x], 0)
    out = (ext.unfold(0, weight.shape[1], 1) * weight).sum(-1) + bias
    return out, ext


@functools.lru_cache(maxsize=512)
def _above_diagonal(T: int, device: str) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).triu_(1)


def ssd_chunk_scan(x, dt, A, B, C, h0, state_at: list[int]):
    """One-chunk SSD scan. x [T,H,P], dt [T,H] (after softplus), A [H] (negative), B/C [T,N],
    h0 [H,P,N]. Returns y [T,H,P] (without the D skip) and the states after tokens `state_at` [k,H,P,N]."""
    T = x.shape[0]
    cum = torch.cumsum(dt * A, 0).T  # [H, T]
    # L[h, t, s]: decay from token s to token t (0 above the diagonal)
    L = torch.exp((cum[:, :, None] - cum[:, None, :]).masked_fill_(_above_diagonal(T, str(x.device)), float("-inf")))
    xdt = (x * dt[..., None]).transpose(0, 1)  # [H, s, P]
    decay = torch.exp(cum)[..., None]  # [H, T, 1]
    # y[t] = sum_s L[t,s] (C_t . B_s) xdt[s] + decay[t] C_t . h0   (bmm over heads)
    y = torch.bmm(L * (C @ B.T), xdt) + decay * (h0 @ C.T).transpose(1, 2)
    idx = index(tuple(state_at), str(x.device))
    # state after token k: sum_s L[k,s] xdt[s] B_s^T + decay[k] h0
    states = torch.matmul((L[:, idx, :, None] * xdt[:, None]).transpose(2, 3), B) + decay[:, idx, :, None] * h0[:, None]
    return y.transpose(0, 1), states.transpose(0, 1)


def ssd_recurrent(x, dt, A, B, C, h0):
    """Token-by-token recurrence h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t.
    Returns y [T,H,P] and the state after every token [T,H,P,N]."""
    h, ys, states = h0, [], []
    for t in range(x.shape[0]):
        h = torch.exp(dt[t] * A)[:, None, None] * h + (x[t] * dt[t][:, None])[:, :, None] * B[t]
        ys.append(h @ C[t])
        states.append(h)
    return torch.stack(ys), torch.stack(states)


def paged_attention(q, k_all, v_all, start: int):
    """q [T,nh,hd] at absolute positions start..start+T-1; k_all/v_all [start+T, nh, hd] for positions
    0..start+T-1. Causal softmax attention, float64."""
    T, S = q.shape[0], k_all.shape[0]
    scores = torch.einsum("thd,shd->hts", q, k_all) / q.shape[-1] ** 0.5
    pos_q = torch.arange(start, start + T, device=q.device)[:, None]
    scores = scores.masked_fill(torch.arange(S, device=q.device)[None, :] > pos_q, float("-inf"))
    return torch.einsum("hts,shd->thd", torch.softmax(scores, -1), v_all)


def rms_norm(x, weight, eps: float = 1e-6):
    return F.rms_norm(x, weight.shape, weight, eps)


def silu(x):
    return F.silu(x)
