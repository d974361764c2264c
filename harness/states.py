"""Symbolic state backend: a Mamba state is the fingerprint of the exact token prefix it summarizes.

A block page holds a conv window and an SSM state. With K speculative tokens the runner's conv window
keeps K+1 token offsets (offset j = the window after query token j, protocol doc §3.3), so a page is
`(conv: tuple of K+1 states, ssm: state)`. A state is `(num_tokens, fingerprint)`; `None` is bytes that
no forward ever wrote (garbage). Reads of the null block (id 0) return the zero state the kernels use.
Exact, model-free, and fast: fingerprints are chained integer hashes of token ids.
"""

from __future__ import annotations

State = tuple[int, int]  # (number of tokens, fingerprint of that prefix)
ZERO_STATE: State = (0, 0)
NULL_BLOCK = 0


def chain(fps: list[int], tokens) -> list[int]:
    """Extend a prefix-fingerprint list (fps[n] = fingerprint of the first n tokens) in place."""
    last = fps[-1]
    for tok in tokens:
        last = hash((last, tok))
        fps.append(last)
    return fps


class SymbolicStates:
    """Pool of symbolic pages indexed by vLLM block id (all groups share the pool, as on the GPU)."""

    def __init__(self, num_speculative_tokens: int) -> None:
        self.width = num_speculative_tokens + 1
        self.conv: dict[int, tuple] = {}
        self.ssm: dict[int, State | None] = {}
        self.version: dict[int, int] = {}  # block -> write counter, so checks can skip unchanged pages
        self._writes = 0

    def write_mark(self) -> int:
        """The write counter now: a block whose version exceeds a mark was written after it."""
        return self._writes

    def _touch(self, block: int) -> None:
        self._writes += 1
        self.version[block] = self._writes

    def page(self, block: int) -> tuple[tuple, State | None]:
        if block == NULL_BLOCK:
            return (ZERO_STATE,) * self.width, ZERO_STATE
        return self.conv.get(block, (None,) * self.width), self.ssm.get(block)

    def copy_page(self, src: int, dst: int) -> None:
        """`blocks[dst] = blocks[src]` on the whole page (worker/utils.py:909-955)."""
        if dst == NULL_BLOCK:
            return
        conv, ssm = self.page(src)
        self.conv[dst], self.ssm[dst] = conv, ssm
        self._touch(dst)

    def shift_copy(self, dst: int, conv_src: int, ssm_src: int, shift: int) -> None:
        """Align pre/post-copy: conv[dst][0:W-b] <- conv[conv_src][b:W]; ssm[dst] <- ssm[ssm_src]
        (mamba_utils.py:191-366 `_copy_mamba_state_block`). The tail of dst's window keeps old bytes."""
        src_conv, _ = self.page(conv_src)
        _, src_ssm = self.page(ssm_src)
        old_conv, _ = self.page(dst)
        if dst == NULL_BLOCK:
            return
        self.conv[dst] = src_conv[shift:] + old_conv[self.width - shift:]
        self.ssm[dst] = src_ssm
        self._touch(dst)

    def read(self, conv_block: int, conv_offset: int, ssm_block: int) -> tuple[State | None, State | None]:
        return self.page(conv_block)[0][conv_offset], self.page(ssm_block)[1]

    def write_final(self, block: int, state: State) -> None:
        """Prefill / non-spec kernels store the final state at offset 0 of the window."""
        if block == NULL_BLOCK:
            return
        conv, _ = self.page(block)
        self.conv[block] = (state,) + conv[1:]
        self.ssm[block] = state
        self._touch(block)

    def write_tokens(self, conv_block: int, ssm_blocks: list[int], states: list[State]) -> None:
        """Spec-decode kernels: state after query token i -> ssm of ssm_blocks[i]; conv offset i in conv_block."""
        for block, state in zip(ssm_blocks, states):
            if block != NULL_BLOCK:
                self.ssm[block] = state
                self._touch(block)
        if conv_block != NULL_BLOCK:
            conv, _ = self.page(conv_block)
            n = min(len(states), self.width)
            self.conv[conv_block] = tuple(states[:n]) + conv[n:]
            self._touch(conv_block)

    def deliver(self, block: int, state: State | None) -> None:
        """A connector writes a loaded boundary state into a block (None: a load in flight, nothing valid yet)."""
        if block != NULL_BLOCK:
            self.conv[block] = (state,) * self.width
            self.ssm[block] = state
            self._touch(block)


def column_block(row: list[int], column: int) -> int:
    """The block at a column of a block-table row; past the row, the null block (what the padding holds)."""
    return row[column] if 0 <= column < len(row) else NULL_BLOCK


def copy_source(states, row: list[int], src_col: int, bias: int):
    """What an align copy reads (mamba_utils.py collect_mamba_copy_meta and the fused copy kernels, as the V1/V2
    workers observe them and the mirror's worker makes them): the conv window of column `src_col` from offset
    `bias`, the SSM state of column `src_col + bias`, from `states` (SymbolicStates or TaggedStates). Returns
    (conv block, SSM block, conv state, SSM state)."""
    conv_block, ssm_block = column_block(row, src_col), column_block(row, src_col + bias)
    conv, ssm = states.read(conv_block, bias, ssm_block)
    return conv_block, ssm_block, conv, ssm
