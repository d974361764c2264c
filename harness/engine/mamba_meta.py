"""Where vLLM's Mamba2 kernels read and write a request's state, as vLLM's own Mamba2 metadata builder tells them
(`Mamba2AttentionMetadataBuilder`, v1/attention/backends/mamba2_attn.py and mamba_attn.py in 0.33.0): shared by the
engine tier's V1 and V2 workers, whose simulated forward reads states only from the built metadata.

Decode rows come first (the runner reorders its batch at the builder's `reorder_batch_threshold`): the decode
kernels (ops/mamba_ssm.py `selective_state_update`, `causal_conv1d_update`) start from the conv window of
`state_indices_tensor_d[i][0]` at offset `num_accepted_tokens[i] - 1` and the SSM state of column
`num_accepted_tokens[i] - 1`, and write one state per token to the row's columns. Prefill rows (mamba_mixer2.py:
the chunked scan) start from `state_indices_tensor_p[p]` where `has_initial_states_p[p]`, else from a zero state,
and write the final state there.

Mode "all" (0.26-0.32, `block_idx_*` in the metadata, mamba_attn.py:414-455 in 0.30.0): the state indices are
the whole block-table row; a prefill row reads its initial state (conv and SSM) at column
`block_idx_last_computed_token`, writes the state at every block boundary it crosses to the columns
`block_idx_first_scheduled_token_p .. block_idx_last_scheduled_token_p - 1` (column c: the state after (c+1)
blocks, mamba_mixer2.py:918-990: the chunk states aligned on block boundaries) and its final state to
`block_idx_last_scheduled_token_p`; a decode row (K = 0) reads column `block_idx_last_computed_token` and
writes `block_idx_last_scheduled_token` (mamba_mixer2.py:1031-1041).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.states import column_block


@dataclass(frozen=True, slots=True)
class KernelRow:
    decode: bool
    init: tuple[int, int, int] | None  # (conv block, conv window offset, SSM block); None: a zero initial state
    blocks: list[int]  # decode: one state block per token (the conv window's first); prefill: [final-state block]
    prefill: int  # the row's index among the prefills (-1: a decode row)
    init_column: int = 0  # the column of the row's state indices the initial SSM state is read from
    boundaries: tuple[tuple[int, int], ...] = ()  # mode all: (block, column) of each block-boundary state written
    write_column: int = 0  # mode all: the column the final state is written to


class Mamba2Rows:
    """The built metadata of one step, read once (tensors to lists)."""

    def __init__(self, m) -> None:
        self.num_decodes = int(m.num_decodes)
        self.si_d = m.state_indices_tensor_d.tolist() if m.state_indices_tensor_d is not None and self.num_decodes else []
        self.si_p = (m.state_indices_tensor_p.tolist() if m.state_indices_tensor_p is not None and m.num_prefills
                     else [])
        self.has_init = m.has_initial_states_p.tolist() if m.has_initial_states_p is not None else []
        self.accepted = m.num_accepted_tokens.tolist() if m.num_accepted_tokens is not None else []
        # the internal prefill checkpoint (0.33.0, model_executor/layers/mamba/checkpoint.py): the state after
        # `offset` query tokens of prefill row p goes to block `state_indices[p]`, the row's column `block_cols[p]`
        # (the builder ends a scan chunk there, mamba_attn.py:242-310)
        ckpt = getattr(m, "checkpoint_meta", None)
        self.checkpoints = {} if ckpt is None else {
            p: (int(b), off, int(c)) for p, (off, b, c) in enumerate(zip(
                ckpt.offsets, ckpt.state_indices.tolist(), ckpt.block_cols.tolist())) if off > 0}
        last = getattr(m, "block_idx_last_scheduled_token", None)
        self.all_mode = last is not None  # mode all: block indices into whole block-table rows
        if self.all_mode:
            self.last = last.tolist()
            # with drafts (K > 0): the column each decode row's previous step ended in (the runner's
            # `mamba_prev_last_scheduled_idx`, else (num_computed - 1) // block; mamba_attn.py:502-510 in 0.27.1)
            prev = getattr(m, "block_idx_last_scheduled_token_prev_step", None)
            self.prev_step = prev.tolist() if prev is not None and self.num_decodes else None
            self.last_computed = m.block_idx_last_computed_token.tolist()
            first = m.block_idx_first_scheduled_token_p
            self.first_p = first.tolist() if first is not None and m.num_prefills else []

    def row(self, i: int, num_tokens: int) -> KernelRow:
        """Row i of the batch (in the runner's order) with `num_tokens` scheduled tokens."""
        if self.all_mode:
            return self._all_mode_row(i, num_tokens)
        if i < self.num_decodes:
            idx = [int(b) for b in self.si_d[i]]
            na = int(self.accepted[i]) if self.accepted else 1
            return KernelRow(True, (idx[0], na - 1, idx[na - 1]), idx[:num_tokens], -1, na - 1)
        p = i - self.num_decodes
        b = self.si_p[p]
        b = int(b[0] if isinstance(b, list) else b)
        return KernelRow(False, (b, 0, b) if self.has_init and self.has_init[p] else None, [b], p)

    def checkpoint(self, prefill: int) -> tuple[int, int, int] | None:
        """Prefill row `prefill`'s checkpoint export: (block, query tokens before it, block-table column)."""
        return self.checkpoints.get(prefill)

    def _all_mode_row(self, i: int, num_tokens: int) -> KernelRow:
        read, last = int(self.last_computed[i]), int(self.last[i])
        if i < self.num_decodes:
            row = [int(b) for b in self.si_d[i]]
            if self.prev_step is not None and self.accepted:
                # drafts (mamba_mixer2.py:983-1000, ops/causal_conv1d.py:821-947 in 0.27.1): the SSM state is read
                # at column prev_step + accepted - 1 and written per token to columns last .. last + n - 1; the
                # conv window is read at column `read` (the last computed token's block) from offset accepted - 1
                # and written whole to column `last`
                na = int(self.accepted[i])
                src = int(self.prev_step[i]) + na - 1
                blocks = [column_block(row, last + j) for j in range(num_tokens)]
                init = (column_block(row, read), na - 1, column_block(row, src))
                return KernelRow(True, init, blocks, -1, src, (), last)
            return KernelRow(True, (row[read], 0, row[read]), [row[last]], -1, read, (), last)
        p = i - self.num_decodes
        row = [int(b) for b in self.si_p[p]]
        init = (row[read], 0, row[read]) if self.has_init and self.has_init[p] else None
        first = int(self.first_p[p])
        return KernelRow(False, init, [row[last]], p, read, tuple((row[c], c) for c in range(first, last)), last)


class GDNRows:
    """One step's GatedDeltaNet metadata (gdn_attn.py `GDNAttentionMetadata`), read once: each batch row's kernel
    path and state indices, in the `Mamba2Rows` interface."""

    all_mode = False  # 0.33.0's GatedDeltaNet runs in modes align and none

    def __init__(self, m) -> None:
        # the host copy of the speculative-row mask (0.33); before, the mask itself (a host tensor on this CPU)
        masks = getattr(m, "spec_sequence_masks_cpu", None)
        masks = m.spec_sequence_masks if masks is None else masks
        self.spec_mask = [] if masks is None else [bool(x) for x in masks.tolist()]
        self.num_decodes = int(m.num_decodes)
        spec = m.spec_state_indices_tensor
        self.spec_idx = spec.tolist() if spec is not None and m.num_spec_decodes else []
        self.accepted = m.num_accepted_tokens.tolist() if m.num_accepted_tokens is not None else []
        non_spec = m.non_spec_state_indices_tensor
        self.non_spec = non_spec.tolist() if non_spec is not None else []
        has_init = m.prefill_has_initial_state
        self.has_init = has_init.tolist() if has_init is not None else []
        self._spec_rank, self._other_rank = {}, {}
        for i, is_spec in enumerate(self.spec_mask):  # each row's index among its kind, in batch order
            ranks = self._spec_rank if is_spec else self._other_rank
            ranks[i] = len(ranks)

    def row(self, i: int, num_tokens: int) -> KernelRow:
        if i in self._spec_rank:
            j = self._spec_rank[i]
            idx = [int(b) for b in self.spec_idx[j]]
            na = int(self.accepted[j])
            return KernelRow(True, (idx[0], na - 1, idx[na - 1]), idx[:num_tokens], -1, na - 1)
        k = self._other_rank.get(i, i)  # without speculative rows: the batch row itself
        b = int(self.non_spec[k])
        if not self.spec_mask and k < self.num_decodes:  # the recurrent kernel, in place on column 0
            return KernelRow(True, (b, 0, b), [b], -1, 0)
        p = k - (0 if self.spec_mask else self.num_decodes)  # the prefill kernel's row (prefill_state_indices)
        return KernelRow(False, (b, 0, b) if self.has_init[p] else None, [b], p)

    def checkpoint(self, prefill: int) -> None:
        return None  # FlashInfer's prefill only (see the module's docstring)


def kernel_rows(meta) -> Mamba2Rows | GDNRows:
    """Where a group's kernels read and write, from the metadata its builder built: GatedDeltaNet's own split, else
    the Mamba2 builder's (Mamba1 and ShortConv builders give the same decode/prefill fields)."""
    return GDNRows(meta) if hasattr(meta, "spec_sequence_masks") else Mamba2Rows(meta)


def write_row(states, rows: Mamba2Rows | GDNRows, kr: KernelRow, nc: int, ns: int,
              fed) -> tuple[tuple[int, int] | None, int | None]:
    """The states vLLM's Mamba2 kernels write for kernel row `kr` (a request with `nc` computed and `ns` scheduled
    tokens; `fed[j]`: the fingerprint of the prefix of nc + j tokens as fed), into the worker's tagged `states`.
    Decode (ops/mamba_ssm.py selective_state_update, causal_conv1d_update): one state per token, to the row's
    columns. Prefill (mamba_mixer2.py: the chunked scan): the final state, and the internal prefill checkpoint
    where the builder exports one (`rows.checkpoint`). Returns the checkpoint written (block, tokens) and its
    block-table column, or (None, None): shared by the V1 and V2 workers."""
    if kr.decode:
        states.write_tokens(kr.blocks[0], kr.blocks, [(nc + k + 1, fed[k + 1]) for k in range(ns)])
        return None, None
    states.write_final(kr.blocks[0], (nc + ns, fed[ns]))
    export = rows.checkpoint(kr.prefill)
    if export is None:
        return None, None
    block, off, col = export
    states.write_final(block, (nc + off, fed[off]))
    return (block, nc + off), col
