"""Worker shadow: mirrors vLLM 0.33.0's V1 GPU model runner for align-mode Mamba groups.

It keeps its own block-table rows, built only from what the scheduler sends (append for running
requests, replace for new and resumed ones), and reads and writes states by column exactly as the
runner does. It mirrors; it never "repairs" a row from the core's tables. All file:line citations are
for the vLLM 0.33.0 wheel (`vllm/`), as in `shared/docs/vllm-align-protocol.md`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.states import State, SymbolicStates, column_block, copy_source
from harness.trace import Read, RowView, Trace


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(slots=True)
class NewReq:
    request: str
    block_ids: tuple[list[int], ...]
    num_computed: int
    num_prompt: int


@dataclass(slots=True)
class CachedReq:
    request: str
    new_block_ids: tuple[list[int], ...] | None
    num_computed: int
    resumed: bool


@dataclass
class SchedulerOutput:
    """The fields of vLLM's SchedulerOutput the shadow reads (v1/core/sched/output.py:231-325)."""

    step: int
    new_reqs: list[NewReq] = field(default_factory=list)
    cached_reqs: list[CachedReq] = field(default_factory=list)
    num_scheduled: dict[str, int] = field(default_factory=dict)  # insertion order = batch order
    spec_tokens: dict[str, list[int]] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    preempted: set[str] = field(default_factory=set)
    copies: list[tuple[int, int]] = field(default_factory=list)
    zero_ids: list[int] = field(default_factory=list)  # new_block_ids_to_zero (scheduler.py:1743)


@dataclass(slots=True)
class Forward:
    """What one request's Mamba kernels do this step, as the runner decided it (for a tensor backend).

    init: (conv block, conv offset, SSM block) of the initial state, None for a zero state (nc == 0).
    decode: the decode kernels run (per-token states to `token_blocks`, conv windows to `block`);
    otherwise the prefill kernels write the final state to `block` and, if set, a checkpoint
    (block, position). attn_row: the worker's full-attention row (slot mapping)."""

    step: int
    request: str
    num_computed: int
    num_scheduled: int
    init: tuple[int, int, int] | None
    decode: bool
    block: int
    token_blocks: list[int]
    checkpoint: tuple[int, int] | None
    attn_row: list[int]


@dataclass(slots=True)
class _ReqState:
    block_ids: list[list[int]]
    num_computed: int
    num_prompt: int


class WorkerShadow:
    def __init__(self, *, block_size: int, num_spec: int, mamba_groups: tuple[int, ...], states: SymbolicStates,
                 trace: Trace, checkpoint: tuple[Callable[[int], int], Callable[[int, int, int], bool]] | None,
                 kernels=None, attn_group: int = 0):
        self.bs = block_size
        self.K = num_spec
        self.mamba_groups = mamba_groups
        self.states = states
        self.trace = trace
        self.checkpoint = checkpoint
        # A tensor backend (model tier): gets the same page moves and one `Forward` per request and step.
        self.kernels = kernels
        self.attn_group = attn_group
        self.requests: dict[str, _ReqState] = {}
        self.batch: list[str | None] = []  # the persistent batch, row by row (InputBatch._req_ids)
        self.num_accepted: dict[str, int] = {}  # input_batch.num_accepted_tokens_cpu per row
        self.mamba_state_idx: dict[str, int] = {}
        self.accepted_reset: dict[str, int] = {}  # this step: running rows re-added with num_accepted > 1

    # -- _update_states (gpu_model_runner.py:1176-1546) --------------------------------------------
    def update_states(self, so: SchedulerOutput) -> dict[str, str]:
        kinds: dict[str, str] = {}
        holes: list[int] = []  # batch rows freed this step (InputBatch.remove_request, gpu_input_batch.py:523-538)
        for r in so.finished:  # :1187-1201
            self.requests.pop(r, None)
            self._remove_row(r, holes)
        if self.kernels is not None:  # zero new attention pages (:1205-1206)
            self.kernels.zero(so.zero_ids)
        for src, dst in so.copies:  # CoW after zeroing, before the table updates (:1205-1212)
            self.states.copy_page(src, dst)
            if self.kernels is not None:
                self.kernels.copy_page(src, dst)
        resumed = {c.request for c in so.cached_reqs if c.resumed}
        # 0.34.0 re-sends a preempted request in full, as a new one (scheduler.py:1619-1626), possibly in the step
        # it was preempted in; like resumed ones, it leaves its old row first (the V2 runner's add_requests removes
        # a known id's state first, v1/worker/gpu/model_runner.py:1284-1291). Up to 0.33 a new id is never held.
        resent = {nr.request for nr in so.new_reqs}
        keep = set(so.num_scheduled) - resumed - resent  # unscheduled leave the persistent batch (:1224-1237)
        for r in [r for r in self.batch if r is not None and r not in keep]:
            self._remove_row(r, holes)
        to_add: list[str] = []  # new requests, then cached ones not in the batch, in that order (:1246-1445)
        for nr in so.new_reqs:  # NEW: full table, replace (:1250-1307)
            self.requests[nr.request] = _ReqState([list(g) for g in nr.block_ids], nr.num_computed, nr.num_prompt)
            kinds[nr.request] = "NEW"
            to_add.append(nr.request)
        for cr in so.cached_reqs:  # CACHED (:1335-1487)
            s = self.requests[cr.request]
            s.num_computed = cr.num_computed  # :1386
            if cr.resumed:  # replace (:1427-1432)
                s.block_ids = [list(g) for g in cr.new_block_ids]
                kinds[cr.request] = "RESUMED"
            else:
                if cr.new_block_ids is not None:  # append per group (:1422-1426)
                    for row, ids in zip(s.block_ids, cr.new_block_ids):
                        row.extend(ids)
                kinds[cr.request] = "RUNNING"
            if cr.request not in self.batch:
                to_add.append(cr.request)
        self.accepted_reset = {}
        for r in to_add:  # add_request (:1491-1493)
            self._add_row(r, holes)
            before = self.num_accepted.get(r, 1)
            self.num_accepted[r] = self.readded_num_accepted(r, kinds.get(r, "RUNNING"))
            if before > 1 and self.num_accepted[r] != before and kinds.get(r, "RUNNING") == "RUNNING":
                self.accepted_reset[r] = before  # a running row re-added after a skipped step lost its count
        self._condense(holes)  # :1496
        self._reorder(so)  # :1498 (_may_reorder_batch, :1105-1128)
        # preprocess_mamba cleanup (v1/worker/mamba_utils.py:1398-1415, 1468)
        for r in so.finished | so.preempted | resumed | resent:
            self.mamba_state_idx.pop(r, None)
        return kinds

    # -- the persistent batch's rows (InputBatch, gpu_input_batch.py in 0.33.0) ---------------------
    def _remove_row(self, r: str, holes: list[int]) -> None:
        """remove_request (:523-538): the row is emptied and its index recorded as free."""
        if r in self.batch:
            i = self.batch.index(r)
            self.batch[i] = None
            holes.append(i)

    def _add_row(self, r: str, holes: list[int]) -> None:
        """add_request (:320-357): the lowest free row of this step, else a new row at the end."""
        if holes:
            i = min(holes)
            holes.remove(i)
            self.batch[i] = r
        else:
            self.batch.append(r)

    def _condense(self, holes: list[int]) -> None:
        """condense (:698-760): while the lowest free row is below the last occupied one, the last occupied
        row moves into it; then the trailing free rows are dropped."""
        holes = sorted(holes)
        last = len(self.batch) - 1
        while holes:
            while last >= 0 and self.batch[last] is None:
                last -= 1
            if holes[0] >= last:
                break
            i = holes.pop(0)
            self.batch[i], self.batch[last] = self.batch[last], None
            last -= 1
        while self.batch and self.batch[-1] is None:
            self.batch.pop()

    def _reorder(self, so: SchedulerOutput) -> None:
        """reorder_batch_to_split_decodes_and_prefills (attention/backends/utils.py:939-1015) at the Mamba2
        builder's reorder_batch_threshold, 1 + K (mamba_attn.py:86/189; a FlashAttention attention group asks for
        no reorder, so the Mamba2 builder's threshold decides): rows grouped decode, short extend, long extend,
        prefill, by vLLM's own swaps (InputBatch.swap_states), so rows land where vLLM's land."""
        threshold = 1 + self.K
        regions = []
        for r in self.batch:
            s, ns = self.requests[r], so.num_scheduled[r]
            regions.append(3 if s.num_computed == 0 else 2 if ns > threshold else 1 if s.num_computed < s.num_prompt
                           else 0)
        target = sorted(regions)
        moving = [i for i, (got, want) in enumerate(zip(regions, target)) if got != want]
        src_to_dst = dict(zip(sorted(moving, key=lambda i: regions[i]), moving))  # a stable sort, as np's
        for src in src_to_dst:
            dst = src_to_dst[src]
            while src != dst:
                self.batch[src], self.batch[dst] = self.batch[dst], self.batch[src]
                src_to_dst[dst], dst = dst, src_to_dst.get(dst, dst)

    def readded_num_accepted(self, request: str, kind: str) -> int:
        """num_accepted of a row (re-)added to the persistent batch: V1's add_request resets it to 1 for every
        row (gpu_input_batch.py:479), a running row re-added after a skipped step too (known issue
        v1-readd-resets-num-accepted; its fix patches this method). A release without the V1 runner (0.34+), or a
        tree with the issue's source patch, has no such reset: it keeps the count (V2 per request slot,
        model_states/mamba_hybrid.py:112-115)."""
        if kind == "RUNNING" and not _v1_readd_resets_accepted():
            return self.num_accepted.get(request, 1)
        return 1

    # -- preprocess_mamba + forward (mamba_utils.py:1446-1549; §3.3) --------------------------------
    def execute(self, so: SchedulerOutput, kinds: dict[str, str], seq_fps: dict[str, list[int]],
                core_tables: dict[str, tuple[list[int], ...]]) -> None:
        """preprocess_mamba decides every row's columns and runs all pre-copies, then the forward runs
        (mamba_utils.py:1446-1549 collects the copies and launches them before the model)."""
        # in the persistent batch's row order, as preprocess_mamba and the kernels walk it
        # (mamba_utils.py:1446-1549 over input_batch.req_ids)
        plans = [self._preprocess(so, r, so.num_scheduled[r], seq_fps[r]) for r in self.batch]
        for plan in plans:
            self._forward(so, kinds, seq_fps, core_tables, *plan)

    def _preprocess(self, so: SchedulerOutput, r: str, ns: int, fps):
        bs, st = self.bs, self.states
        s = self.requests[r]
        nc = s.num_computed
        prev = self.mamba_state_idx.get(r)
        if prev is None:
            prev = (nc - 1) // bs  # Python floor: nc == 0 -> -1 (:1493-1495)
        curr = cdiv(nc + ns, bs) - 1  # (:1497-1512)
        self.mamba_state_idx[r] = curr
        na = self.num_accepted[r]
        nd = len(so.spec_tokens.get(r, ()))
        # Rows the decode kernels take: a spec step (ns == nd + 1) or a 1-token step with prior state
        # (mamba_attn.py:400-455; gpu_model_runner.py:2201-2235).
        decode_row = nc > 0 and ns == nd + 1 and (nd > 0 or ns == 1)
        precopy = prev != -1 and prev != curr
        if precopy:  # (:1517-1535)
            b = na - 1
            for g in self.mamba_groups:
                row = s.block_ids[g]
                src_conv, src_ssm, conv, ssm = copy_source(st, row, prev, b)
                what = "precopy-after-accepted-reset" if r in self.accepted_reset else "precopy"
                self.trace.reads.append(Read(so.step, r, what, g, prev, src_conv, conv, ssm, (nc, fps[nc])))
                self._shift_copy(column_block(row, curr), src_conv, src_ssm, b)
            self.num_accepted[r] = 1
        return r, ns, nc, prev, curr, na, decode_row, precopy

    def _forward(self, so, kinds, seq_fps, core_tables, r, ns, nc, prev, curr, na, decode_row, precopy) -> None:
        st, tr = self.states, self.trace
        s = self.requests[r]
        fps = seq_fps[r]
        fed: State = (nc, fps[nc])  # the prefix this step runs on
        for g in self.mamba_groups:
            row = s.block_ids[g]
            live = [prev] if precopy else []
            # after a pre-copy the runner reads the running state at offset 0 (na was reset to 1)
            offset = 0 if precopy else (na - 1 if decode_row else 0)
            cur_block = column_block(row, curr)
            ckpt = None
            if decode_row:  # SSM from row[curr + na - 1], conv at offset na-1 (ops/mamba_ssm.py:333-352)
                ssm_block = column_block(row, curr + offset)
                conv, _ = st.read(cur_block, offset, cur_block)
                _, ssm = st.read(ssm_block, 0, ssm_block)
                # name the V1 re-add reset of num_accepted (§6.6) when it decides what is read
                what = "initial-after-accepted-reset" if r in self.accepted_reset and not precopy else "initial"
                tr.reads.append(Read(so.step, r, what, g, curr, cur_block, conv, ssm, fed))
                blocks = [column_block(row, curr + i) for i in range(ns)]
                st.write_tokens(cur_block, blocks, [(nc + i + 1, fps[nc + i + 1]) for i in range(ns)])
                live.extend(range(curr, curr + ns))
                init = (cur_block, offset, ssm_block)
            else:  # prefill: read row[curr] if nc > 0, write the final state there (mamba_mixer2.py:826-907)
                blocks = []
                init = (cur_block, 0, cur_block) if nc > 0 else None
                if nc > 0:
                    conv, ssm = st.read(cur_block, 0, cur_block)
                    tr.reads.append(Read(so.step, r, "initial", g, curr, cur_block, conv, ssm, fed))
                st.write_final(cur_block, (nc + ns, fps[nc + ns]))
                live.append(curr)
                ckpt = self._checkpoint_column(nc, ns, row)
                if ckpt is not None:
                    col, pos = ckpt
                    ckpt = (column_block(row, col), pos)
                    st.write_final(ckpt[0], (pos, fps[pos]))
                    live.append(col)
            tr.rows.append(RowView(so.step, r, g, kinds.get(r, "RUNNING"), nc, ns, prev, curr,
                                   sorted(set(live)), list(row), list(core_tables[r][g])))
            if self.kernels is not None:
                self.kernels.forward(Forward(so.step, r, nc, ns, init, decode_row, cur_block, blocks, ckpt,
                                             s.block_ids[self.attn_group]))

    def _shift_copy(self, dst: int, conv_src: int, ssm_src: int, shift: int) -> None:
        self.states.shift_copy(dst, conv_src, ssm_src, shift)
        if self.kernels is not None:
            self.kernels.shift_copy(dst, conv_src, ssm_src, shift)

    def _checkpoint_column(self, nc: int, ns: int, row: list[int]) -> tuple[int, int] | None:
        """Internal prefill checkpoint export (§6.7; checkpoint.py:21-63, kv_cache_interface.py:1169-1210)."""
        if self.checkpoint is None:
            return None
        position, valid = self.checkpoint
        seq_len = nc + ns
        pos = position(seq_len)
        col = cdiv(seq_len, self.bs) - 2
        if col < 0 or not valid(nc, seq_len, pos):
            return None
        # the builder gathers the row's block there, whatever it is (`_gather_checkpoint_state_indices`,
        # checkpoint.py:65-69): a column the core holds null is written through the null block, as on vLLM's runners
        return col, pos

    # -- postprocess after sampling (spec decode + hybrid; mamba_utils.py:369-500, 1552-1605) -------
    def postprocess(self, so: SchedulerOutput, accepted: dict[str, int], seq_fps: dict[str, list[int]]) -> None:
        if self.K == 0:
            return
        bs, st = self.bs, self.states
        for r in self.batch:  # the batch rows, as the fused postprocess kernel takes them (mamba_utils.py:369-500)
            ns = so.num_scheduled[r]
            s = self.requests[r]
            a = accepted.get(r, 1)
            nd = len(so.spec_tokens.get(r, ()))
            running = s.num_computed + ns - nd
            new_nc = running + a - 1
            A = new_nc // bs * bs
            self.num_accepted[r] = a
            if A < running:
                continue
            bias, dest, src = A - running, A // bs - 1, self.mamba_state_idx[r]
            if src == dest:
                self.num_accepted[r] = 1
            if src == dest and bias == 0:
                continue
            fps = seq_fps[r]
            for g in self.mamba_groups:
                row = s.block_ids[g]
                conv_src, ssm_src, conv, ssm = copy_source(st, row, src, bias)
                self.trace.reads.append(Read(so.step, r, "postcopy", g, src, conv_src, conv, ssm, (A, fps[A])))
                self._shift_copy(column_block(row, dest), conv_src, ssm_src, bias)


def _v1_readd_resets_accepted() -> bool:
    from harness.release import vllm_release

    return vllm_release().v1_readd_resets_accepted
