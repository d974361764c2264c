"""Tagged states: the symbolic states of harness/states.py held in real vLLM Mamba state tensors.

A state `(num_tokens, fingerprint)` is stored as two int64 elements `[num_tokens, fingerprint]`
(fingerprints are Python hashes: signed 64-bit). The tensors have the shapes vLLM's own
`MambaStateShapeCalculator.mamba2_state_shape` gives for tiny dimensions (harness.engine.runner_v1):
- conv state: `(num_blocks, K+1, 2)` in the SD layout (`(num_blocks, 2, K+1)` in DS): conv window offset j
  holds the tag of the state after query token j (conv kernel 2, so the window has 1 + K token slots);
- SSM (temporal) state: `(num_blocks, 1, 2, 1)`: one tag.
Bytes no forward ever wrote are `[-1, -1]` (read back as None, "garbage"); the null block 0 always reads
as the zero state, as in SymbolicStates. vLLM's own code moves these bytes (CoW copies, align pre-copies,
spec post-copies); the harness writes only what the simulated forward writes and what a connector loads.

Both engine-tier workers hold their tags here: the V1 worker (harness.engine.runner_v1) allocates the tensors
and registers them with the runner; the V2 worker (harness.engine.runner_v2) wraps the state tensors vLLM's
own `initialize_kv_cache` allocated (`tensors=`: conv `(num_blocks, K+1, 2)`, SSM `(num_blocks, 2)`, views
into the runner's KV allocation) and resets them between scenarios (`reset`).

`version` is computed lazily: pages are compared with the snapshot taken at the last look, and every block
whose bytes changed gets a new version number (what CacheRecorder needs to skip unchanged pages).

`conv_only`: a model whose Mamba-like layers keep a conv window and nothing else (ShortConv: LFM2,
layers/mamba/short_conv.py; its state copy function copies the conv window only, mamba_utils.py:411-412): one
tensor per layer; a read's SSM part is the conv state it read (the oracles then judge that one state twice), and
the SSM part of a write has nowhere to go.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.states import NULL_BLOCK, ZERO_STATE, State

GARBAGE = -1


class TaggedStates:
    def __init__(self, num_blocks: int, num_speculative_tokens: int, conv_dim_first: bool,
                 tensors: tuple[torch.Tensor, ...] | None = None, conv_only: bool = False) -> None:
        self.width = num_speculative_tokens + 1
        self.num_blocks = num_blocks
        self.dim_first = conv_dim_first
        if tensors is None:
            shape = (num_blocks, 2, self.width) if conv_dim_first else (num_blocks, self.width, 2)
            self.conv = torch.full(shape, GARBAGE, dtype=torch.int64)
            self.ssm = None if conv_only else torch.full((num_blocks, 1, 2, 1), GARBAGE, dtype=torch.int64)
        else:  # vLLM's own state tensors (views of the runner's KV allocation: no copy, no reshape)
            self.conv, self.ssm = (tensors[0], None) if conv_only else tensors
        self.conv_only = conv_only
        self._conv_tags = self.conv.transpose(1, 2) if conv_dim_first else self.conv  # (blocks, width, 2) view
        # the SSM tags: a (blocks, 2) view; a conv-only model's is a private scratch no read or copy sees
        ssm = torch.empty((num_blocks, 2), dtype=torch.int64) if conv_only else self.ssm
        self._ssm_tags = ssm if ssm.dim() == 2 else ssm.view(num_blocks, 2)
        assert self._conv_tags.shape[1:] == (self.width, 2) and self._ssm_tags.shape[1:] == (2,), (
            self.conv.shape, ssm.shape)
        # numpy views of the same bytes: the per-page reads and writes below cost a fraction of torch's
        self._conv_np, self._ssm_np = self._conv_tags.numpy(), self._ssm_tags.numpy()
        self._version: dict[int, int] = {}
        self._writes = 0
        self.reset()

    def reset(self) -> None:
        """Every block garbage but the null block (zero state), no versions: a fresh scenario's bytes."""
        self._conv_tags.fill_(GARBAGE)
        self._ssm_tags.fill_(GARBAGE)
        self._conv_tags[NULL_BLOCK] = 0
        self._ssm_tags[NULL_BLOCK] = 0
        self._snap = self._flat()
        self._version.clear()
        self._writes = 0

    def tensors(self) -> list[torch.Tensor]:
        return [self.conv] if self.conv_only else [self.conv, self.ssm]

    # -- reads ------------------------------------------------------------------------------------------
    @staticmethod
    def _state(pair) -> State | None:
        n, fp = pair
        return None if n == GARBAGE else (n, fp)

    def page(self, block: int) -> tuple[tuple, State | None]:
        if block == NULL_BLOCK:
            return (ZERO_STATE,) * self.width, ZERO_STATE
        conv = tuple(self._state(p) for p in self._conv_np[block].tolist())
        return conv, conv[0] if self.conv_only else self._state(self._ssm_np[block].tolist())

    def read(self, conv_block: int, conv_offset: int, ssm_block: int) -> tuple[State | None, State | None]:
        conv = self.page(conv_block)[0][conv_offset]
        return conv, conv if self.conv_only else self.page(ssm_block)[1]

    @property
    def version(self) -> dict[int, int]:
        cur = self._flat()
        changed = (cur != self._snap).any(axis=1).nonzero()[0].tolist()
        for block in changed:
            self._writes += 1
            self._version[block] = self._writes
        if changed:
            self._snap = cur
        return self._version

    def write_mark(self) -> int:
        """The write counter now (pages compared first): a block whose version exceeds a mark was written after it."""
        self.version  # noqa: B018 - the comparison with the snapshot numbers the writes made since the last look
        return self._writes

    def _flat(self):
        if self.conv_only:
            return self._conv_np.reshape(self.num_blocks, -1).copy()
        return np.concatenate([self._conv_np.reshape(self.num_blocks, -1), self._ssm_np], axis=1)

    # -- writes by the simulated forward and the connector -------------------------------------------
    def write_final(self, block: int, state: State) -> None:
        """Prefill kernels store the final state at window offset 0 and in the SSM state."""
        if block != NULL_BLOCK:
            self._conv_np[block, 0] = state
            self._ssm_np[block] = state

    def write_tokens(self, conv_block: int, ssm_blocks: list[int], states: list[State]) -> None:
        """Decode kernels: the state after query token i -> SSM of ssm_blocks[i], conv offset i of conv_block."""
        for block, state in zip(ssm_blocks, states):
            if block != NULL_BLOCK:
                self._ssm_np[block] = state
        if conv_block != NULL_BLOCK:
            n = min(len(states), self.width)
            self._conv_np[conv_block, :n] = states[:n]

    def deliver(self, block: int, state: State | None) -> None:
        """A connector load writes a boundary state into a block (None: a load in flight, nothing valid yet)."""
        if block != NULL_BLOCK:
            self._conv_np[block] = GARBAGE if state is None else state
            self._ssm_np[block] = GARBAGE if state is None else state
