"""Tensor state pool indexed by the allocator's block ids, as the GPU worker holds it.

Per Mamba layer a page is a conv window for each of the K+1 speculative offsets plus an SSM state (the
same page shape the symbolic backend, `harness/states.py`, models: offset j = the window after query
token j); per attention layer a page is `attn_block_size` key/value slots. All layers share block ids
(one BlockPool). Pages start zeroed, as vLLM allocates its KV cache tensors with torch.zeros; block 0 is
the null block: it reads as the zero state and swallows writes.
"""

from __future__ import annotations

import torch

from harness.errors import BadInput
from models.hybrid import HybridLM, MambaOut, MambaState

NULL_BLOCK = 0
MAX_POOL_BYTES = 2 << 30


class TensorPool:
    def __init__(self, model: HybridLM, num_blocks: int, num_speculative_tokens: int, attn_block_size: int) -> None:
        c = model.cfg
        self.model, self.width, self.attn_bs = model, num_speculative_tokens + 1, attn_block_size
        nm, na, dt = len(c.mamba_layers), len(c.attn_layers), c.torch_dtype
        hd = c.d_model // c.attn_heads
        page = (nm * (self.width * (c.d_conv - 1) * c.conv_dim + c.nheads * c.headdim * c.d_state)
                + 2 * na * attn_block_size * c.d_model) * torch.finfo(dt).bits // 8
        if page * num_blocks > MAX_POOL_BYTES:
            raise BadInput(f"geometry: {num_blocks} blocks x {page} bytes exceeds the model tier's "
                           f"{MAX_POOL_BYTES >> 30} GiB state pool; use fewer or smaller blocks")
        self.conv = torch.zeros(nm, num_blocks, self.width, c.d_conv - 1, c.conv_dim, dtype=dt, device=c.device)
        self.ssm = torch.zeros(nm, num_blocks, c.nheads, c.headdim, c.d_state, dtype=dt, device=c.device)
        self.k = torch.zeros(na, num_blocks, attn_block_size, c.attn_heads, hd, dtype=dt, device=c.device)
        self.v = torch.zeros_like(self.k)
        self.attn_index = {layer: i for i, layer in enumerate(c.attn_layers)}

    # -- page moves the worker shadow prescribes ----------------------------------------------------
    def copy_page(self, src: int, dst: int) -> None:
        """CoW: the whole page, every layer (worker/utils.py:909-955)."""
        if dst == NULL_BLOCK:
            return
        for t in (self.conv, self.ssm, self.k, self.v):
            t[:, dst] = 0 if src == NULL_BLOCK else t[:, src]

    def shift_copy(self, dst: int, conv_src: int, ssm_src: int, shift: int) -> None:
        """Align pre/post-copy: conv[dst][0:W-b] <- conv[conv_src][b:W]; ssm[dst] <- ssm[ssm_src]."""
        if dst == NULL_BLOCK:
            return
        n = self.width - shift
        conv = self.conv[:, conv_src, shift:].clone() if conv_src != NULL_BLOCK else 0
        ssm = self.ssm[:, ssm_src].clone() if ssm_src != NULL_BLOCK else 0
        self.conv[:, dst, :n] = conv
        self.ssm[:, dst] = ssm

    def zero_kv(self, blocks: list[int]) -> None:
        """`new_block_ids_to_zero`: attention pages only (gpu_model_runner.py:1205-1206)."""
        ids = [b for b in blocks if b != NULL_BLOCK]
        if ids:
            self.k[:, ids] = 0
            self.v[:, ids] = 0

    # -- Mamba states ------------------------------------------------------------------------------
    def read(self, conv_block: int, conv_offset: int, ssm_block: int) -> list[MambaState]:
        out = []
        for m in range(self.conv.shape[0]):
            conv = self.conv[m, conv_block, conv_offset] if conv_block != NULL_BLOCK else torch.zeros_like(
                self.conv[m, 0, 0])
            ssm = self.ssm[m, ssm_block] if ssm_block != NULL_BLOCK else torch.zeros_like(self.ssm[m, 0])
            out.append(MambaState(conv.clone(), ssm.clone()))
        return out

    def write_final(self, block: int, outs: list[MambaOut], k: int = -1) -> None:
        """Prefill kernels store the state after the chunk's last token (index k of the outs) at offset 0."""
        if block == NULL_BLOCK:
            return
        for m, o in enumerate(outs):
            self.conv[m, block, 0] = o.conv[k]
            self.ssm[m, block] = o.ssm[k]

    def write_tokens(self, conv_block: int, ssm_blocks: list[int], outs: list[MambaOut]) -> None:
        """Decode kernels: the state after query token i -> SSM of ssm_blocks[i] and conv offset i."""
        n = min(len(ssm_blocks), self.width)
        for m, o in enumerate(outs):
            for i, block in enumerate(ssm_blocks):
                if block != NULL_BLOCK:
                    self.ssm[m, block] = o.ssm[i]
            if conv_block != NULL_BLOCK:
                self.conv[m, conv_block, :n] = o.conv[:n]

    def deliver_state(self, block: int, states: list[MambaState]) -> None:
        """A connector writes a loaded boundary state into a block (every conv offset)."""
        if block == NULL_BLOCK:
            return
        for m, s in enumerate(states):
            self.conv[m, block, :] = s.conv
            self.ssm[m, block] = s.ssm

    # -- attention pages -----------------------------------------------------------------------------
    def _slots(self, row: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block and offset of positions 0..length-1 (columns past the row read the null block)."""
        bs = self.attn_bs
        cols = -(-length // bs)
        padded = (row + [NULL_BLOCK] * cols)[:cols]
        blocks = torch.tensor(padded, dtype=torch.long, device=self.k.device).repeat_interleave(bs)[:length]
        return blocks, torch.arange(length, device=self.k.device) % bs

    def write_kv(self, layer: int, row: list[int], start: int, k: torch.Tensor, v: torch.Tensor,
                 slots: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """Slot mapping of the full-attention group: position p -> row[p // bs], offset p % bs. Writes to
        the null block are dropped."""
        a = self.attn_index[layer]
        blocks, offs = slots or self._slots(row, start + k.shape[0])
        blocks, offs = blocks[start:], offs[start:]
        keep = blocks != NULL_BLOCK
        self.k[a, blocks[keep], offs[keep]] = k[keep]
        self.v[a, blocks[keep], offs[keep]] = v[keep]

    def paged_kv(self, row: list[int], start: int):
        """The KV store the model's attention layers use for one request's forward (slots computed once)."""
        slots: list = []

        def kv(layer: int, k: torch.Tensor, v: torch.Tensor):
            if not slots:
                slots.extend(self._slots(row, start + k.shape[0]))
            self.write_kv(layer, row, start, k, v, tuple(slots))
            a, (blocks, offs) = self.attn_index[layer], slots
            return self.k[a, blocks, offs], self.v[a, blocks, offs]

        return kv
