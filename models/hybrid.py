"""A tiny hybrid language model: Mamba2 (SSD) mixers interleaved with attention, randomly initialised.

Layout `MMAM` by default (Mamba, Mamba, Attention, Mamba), pre-RMSNorm residual blocks, no positional
encoding in attention (as in Jamba: the Mamba layers carry position). Every Mamba layer takes a state in
(conv window + SSM state) and gives states out at chosen token positions; every attention layer reads
and writes keys/values through a caller-supplied store (paged through the full-attention group's block
table in the cached run, a plain tensor in the reference). Float64 on CPU by default, so chunked and
unchunked runs agree to rounding. Tokens are reduced modulo the vocabulary (scenario ids are up to 32k).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from models import kernels


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 512
    d_model: int = 32
    layout: str = "MMAM"
    d_state: int = 16
    headdim: int = 8
    expand: int = 2
    d_conv: int = 4
    attn_heads: int = 4
    seed: int = 0
    dtype: str = "float64"
    device: str = "cpu"

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def nheads(self) -> int:
        return self.d_inner // self.headdim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.d_state

    @property
    def mamba_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.layout) if kind == "M"]

    @property
    def attn_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.layout) if kind == "A"]

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


@dataclass
class MambaState:
    """One Mamba layer's state: the last d_conv-1 conv inputs [d_conv-1, conv_dim] and the SSM state [H,P,N]."""

    conv: torch.Tensor
    ssm: torch.Tensor


@dataclass
class MambaOut:
    """States after the chosen tokens of a forward: conv windows [k, d_conv-1, conv_dim], SSM [k, H, P, N]."""

    conv: torch.Tensor
    ssm: torch.Tensor

    def last(self) -> MambaState:
        """The state after the last chosen token (what the next chunk starts from)."""
        return MambaState(self.conv[-1], self.ssm[-1])


# (attention layer index, new keys [T,nh,hd], new values) -> keys and values of positions 0..start+T-1
KVStore = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class HybridLM:
    """backend: the module of Mamba kernels (`models.kernels` by default; `models.gpu` on CUDA). Weights
    are drawn on the CPU in float64 from the seed and then cast, so every device/dtype gets the same model."""

    def __init__(self, cfg: ModelConfig = ModelConfig(), backend=kernels) -> None:
        self.cfg = cfg
        self.backend = backend
        self._zero: MambaState | None = None
        g = torch.Generator().manual_seed(cfg.seed)
        dt = cfg.torch_dtype

        def rand(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dt)

        d, di, n, h = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.nheads
        self.embed = rand(cfg.vocab_size, d)
        self.layers: list[dict] = []
        for kind in cfg.layout:
            p = {"norm": torch.ones(d, dtype=dt)}
            if kind == "M":
                p["in_proj"] = rand(d, 2 * di + 2 * n + h, scale=d ** -0.5)
                p["conv_w"] = rand(cfg.conv_dim, cfg.d_conv, scale=cfg.d_conv ** -0.5)
                p["conv_b"] = rand(cfg.conv_dim, scale=0.1)
                # dt in [1e-3, 1e-1] after softplus, A in [-16, -1]: Mamba2's initialisation ranges
                dt0 = torch.exp(torch.rand(h, generator=g, dtype=torch.float64) * (torch.log(torch.tensor(0.1))
                                - torch.log(torch.tensor(1e-3))) + torch.log(torch.tensor(1e-3)))
                p["dt_bias"] = (dt0 + torch.log(-torch.expm1(-dt0))).to(dt)
                p["A"] = -(1 + 15 * torch.rand(h, generator=g, dtype=torch.float64)).to(dt)
                p["D"] = torch.ones(h, dtype=dt)
                p["gate_norm"] = torch.ones(di, dtype=dt)
                p["out_proj"] = rand(di, d, scale=di ** -0.5)
            else:
                p["qkv"] = rand(d, 3 * d, scale=d ** -0.5)
                p["o"] = rand(d, d, scale=d ** -0.5)
            self.layers.append(p)
        self.final_norm = torch.ones(d, dtype=dt)
        self.lm_head = rand(d, cfg.vocab_size, scale=2 * d ** -0.5)
        if cfg.device != "cpu":
            self.embed, self.final_norm, self.lm_head = (t.to(cfg.device) for t in (self.embed, self.final_norm,
                                                                                   self.lm_head))
            self.layers = [{k: t.to(cfg.device) for k, t in p.items()} for p in self.layers]

    # -- states ------------------------------------------------------------------------------------
    def zero_state(self) -> MambaState:
        """The zero state (shared: forward never writes its inputs in place)."""
        if self._zero is None:
            self._zero = self._new_zero_state()
        return self._zero

    def zero_states(self) -> list[MambaState]:
        """The zero initial state of every Mamba layer."""
        return [self.zero_state() for _ in self.cfg.mamba_layers]

    def _new_zero_state(self) -> MambaState:
        c = self.cfg
        return MambaState(torch.zeros(c.d_conv - 1, c.conv_dim, dtype=c.torch_dtype, device=c.device),
                          torch.zeros(c.nheads, c.headdim, c.d_state, dtype=c.torch_dtype, device=c.device))

    # -- forward -----------------------------------------------------------------------------------
    def forward(self, tokens: list[int], start: int, states_in: list[MambaState], kv: KVStore,
                state_at: list[int], logits_from: int, recurrent: bool = False, num_layers: int | None = None):
        """Run tokens at absolute positions start.. through every layer.

        states_in: one MambaState per Mamba layer (the initial state). state_at: chunk-local token
        indices whose states are returned (per Mamba layer, a MambaOut). logits_from: first chunk-local
        row whose logits are computed. recurrent: use the decode kernel (token-by-token) instead of the
        chunk scan, as vLLM's decode rows do. num_layers: run only the first layers, then the head
        (the layer-skip drafter).
        """
        c = self.cfg
        ids = torch.as_tensor([t % c.vocab_size for t in tokens], dtype=torch.long, device=c.device)
        x = self.embed[ids]
        outs: list[MambaOut] = []
        m = 0
        for i, (kind, p) in enumerate(zip(c.layout[:num_layers], self.layers[:num_layers])):
            hnorm = kernels.rms_norm(x, p["norm"])
            if kind == "M":
                y, out = self._mamba(p, hnorm, states_in[m], state_at, recurrent)
                outs.append(out)
                m += 1
            else:
                y = self._attention(p, i, hnorm, start, kv)
            x = x + y
        logits = kernels.rms_norm(x[logits_from:], self.final_norm) @ self.lm_head
        return logits, outs

    def _mamba(self, p: dict, x: torch.Tensor, state: MambaState, state_at: list[int], recurrent: bool):
        c = self.cfg
        T, di, n, h = x.shape[0], c.d_inner, c.d_state, c.nheads
        z, xbc, dt = torch.split(x @ p["in_proj"], [di, di + 2 * n, h], -1)
        be = self.backend
        conv, ext = be.causal_conv1d(xbc, state.conv, p["conv_w"], p["conv_b"])
        xs, B, C = torch.split(kernels.silu(conv), [di, n, n], -1)
        dt = torch.nn.functional.softplus(dt + p["dt_bias"])
        xh = xs.reshape(T, h, c.headdim)
        if recurrent:
            y, every = be.ssd_recurrent(xh, dt, p["A"], B, C, state.ssm)
            ssm = every[kernels.index(tuple(state_at), str(every.device))]
        else:
            y, ssm = be.ssd_chunk_scan(xh, dt, p["A"], B, C, state.ssm, state_at)
        y = (y + p["D"][:, None] * xh).reshape(T, di)
        y = kernels.rms_norm(y * kernels.silu(z), p["gate_norm"]) @ p["out_proj"]
        # conv state after token t = ext[t+1 : t+d_conv]: one unfold row, transposed to [d_conv-1, D]
        windows = ext.unfold(0, c.d_conv - 1, 1)[kernels.index(tuple(t + 1 for t in state_at), str(ext.device))]
        windows = windows.transpose(1, 2)
        return y, MambaOut(windows, ssm)

    def _attention(self, p: dict, layer: int, x: torch.Tensor, start: int, kv: KVStore) -> torch.Tensor:
        c = self.cfg
        T, hd = x.shape[0], c.d_model // c.attn_heads
        q, k, v = (t.reshape(T, c.attn_heads, hd) for t in torch.split(x @ p["qkv"], c.d_model, -1))
        k_all, v_all = kv(layer, k, v)
        return self.backend.paged_attention(q, k_all, v_all, start).reshape(T, c.d_model) @ p["o"]


def contiguous_kv() -> tuple[KVStore, dict]:
    """A KV store for one uncached run from position 0: keys/values appended per layer, no paging."""
    store: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def kv(layer: int, k: torch.Tensor, v: torch.Tensor):
        if layer in store:
            k = torch.cat([store[layer][0], k])
            v = torch.cat([store[layer][1], v])
        store[layer] = (k, v)
        return k, v

    return kv, store
