"""`--runner v2`: vLLM's own V2 model runner (`vllm/v1/worker/cpu/model_runner.py`, the CPU subclass of
`vllm/v1/worker/gpu/model_runner.py`) on the real scheduler's output.

Everything between the SchedulerOutput and the model's forward is vLLM's: request slots (`states.py`),
staged block tables and their gather (`block_table.py`), `MambaHybridModelState` (add_request seeds the
running state column, `preprocess_state` advances it and pre-copies across a block boundary, `prepare_attn`
hands the accepted counts to vLLM's real `Mamba2AttentionMetadataBuilder`, `postprocess_state` scatters
accepted counts and post-copies), the sampler and rejection sampler, the draft bookkeeping. Two things are
simulated:

- the forward (`_TagModel`): per request it reads the initial Mamba state exactly where the Mamba2 kernels
  read it (the metadata's `state_indices_tensor_d/_p`, `num_accepted_tokens`, `has_initial_states_p`) and
  writes state tags (`(num_tokens, fingerprint)`, harness/states.py) into the real state tensors at the real
  indices; its hidden states name the harness's next token (`harness.tokens.true_token` of the prefix it
  read) so the logits make vLLM's own sampler pick it;
- the drafter's proposal: the speculator's `propose` returns the scenario's planned drafts.

The state tensors (conv window `(K+1, 2)` int64 and SSM `(2,)` int64 per block and Mamba layer) hold the
tags; harness.engine.tagged.TaggedStates (shared with the V1 worker) wraps them and reads them back as
`page(block)` for the oracles. Triton must be importable (V2 needs it); the Triton kernels V2 launches run as
vLLM wrote them (`--kernels triton`, interpreter on CPU) or as the harness's torch replacements
(`--kernels torch`, harness/engine/kernels_v2.py, registered through vLLM's kernel dispatcher).

Reads recorded: "initial" (the forward's), "precopy" (the fused align pre-copy's sources, from the columns
preprocess_state leaves), "postcopy" (the fused postprocess copy's source: the torch kernel tells the worker
before it moves the bytes; under `--kernels triton` the same decision is taken from the kernel's inputs just
before the launch).

Set-up (the runner, its model, its KV tensors, the per-shape pool): harness/engine/v2_setup.py.
"""

from __future__ import annotations

from harness.states import chain, column_block, copy_source
from harness.tokens import true_token
from harness.trace import Read, RowView
from harness.engine.mamba_meta import kernel_rows, write_row
from harness.engine.v2_setup import runner_for


class V2Worker:
    """The engine tier's worker side on vLLM's V2 runner (seam: harness/engine/workers.py)."""

    runner_name = "v2"
    proposes_drafts = True  # the runner's drafter proposes; the scheduler gets V2's placeholders back

    def __init__(self, driver) -> None:
        import torch

        self.torch = torch
        self.driver, self.trace = driver, driver.trace
        # the scenario's model of every request's tokens (harness.tokens), its prompts and output lengths
        self.truths, self.prompts = driver.truths, driver.prompts
        self.max_tokens = {spec.id: spec.max_tokens for spec in driver.sc.requests}
        eg = driver.eg
        self.B, self.K = eg.block_size, eg.num_speculative_tokens
        from harness.engine import kernels_v1, kernels_v2

        self.kernels = driver.options.kernels
        self._kernels_v1, self._kernels_v2 = kernels_v1, kernels_v2
        with kernels_v2.mode(self.kernels):
            self.run = runner_for(driver)
        self.run.model.worker = self
        self.run.worker = self
        self.runner = self.run.runner
        self.states = self.run.states
        self.attn_groups, self.mamba_groups = driver.attn_groups, driver.mamba_groups
        self.step = 0
        self.kinds: dict[str, str] = {}
        # --forward model: the model tier's backend (harness.model_tier) at V2's own indices and copies; the tokens
        # it is fed and samples are this worker's own record (under async scheduling vLLM's lags a step)
        self.backend = getattr(driver, "backend", None)
        self.tokens: dict[str, list[int]] = {}  # request -> its tokens as fed and sampled (the model's record)
        self._feed: dict[str, list[int]] = {}  # request -> its tokens up to this step's end as fed (forward input)
        if self.backend is not None:
            self.backend.step_tokens = self._fed_tokens
        if self.runner.speculator is not None:
            self.runner.speculator.propose = self._propose

    # -- seam ------------------------------------------------------------------------------------------
    def execute(self, so, step: int, seq_fps, core_tables) -> None:
        self.step, self.core_tables = step, core_tables
        self.so = so
        self.kinds = {nr.req_id: "RESUMED" if nr.req_id in self._seen else "NEW" for nr in so.scheduled_new_reqs}
        self._seen.update(self.kinds)
        self.run.input_batch = None
        self._kernels_v1.OBSERVER = self._observe_copy
        if self.backend is not None:  # the model's pages: zeroing, then the CoW copies (model_runner.py:1290-1304)
            self.backend.zero(list(so.new_block_ids_to_zero or ()))
            for c in getattr(so, "kv_cache_block_copies", None) or ():
                self.backend.copy_page(c.src_block_id, c.dst_block_id)
        with self._kernels_v2.mode(self.kernels):
            out = self.runner.execute_model(so)
        if out is not None:  # no forward this step (nothing scheduled)
            self._empty = out
        else:
            self._empty = None

    def sample(self, so, step: int, sampled, accepted, seq_fps):
        return self.collect(self.sample_later(so, step, seq_fps))

    def sample_later(self, so, step: int, seq_fps=None):
        """`sample_tokens` (v1/engine/core.py:753): under async scheduling an AsyncOutput whose tokens are
        read (`collect`) only when the engine takes this batch off its queue."""
        if self._empty is not None:
            return self._empty
        self.step, self._seq_fps = step, seq_fps or {}
        self._kernels_v1.OBSERVER = self._observe_copy
        with self._kernels_v2.mode(self.kernels):
            return self.runner.sample_tokens(None)

    def collect(self, out):
        """A batch's sampled tokens as the scheduler gets them (`future.result()`, core.py:783)."""
        with self._kernels_v2.mode(self.kernels):
            out = out.get_output() if hasattr(out, "get_output") else out
        return list(out.req_ids or ()), [list(t) for t in (out.sampled_token_ids or ())]

    def take_drafts(self):
        """What V2 gives the scheduler after a step (EngineCore.post_step, v1/engine/core.py:699-706)."""
        return self.runner.take_draft_token_ids()

    def deliver(self, block: int, state) -> None:
        self.states.deliver(block, state)

    # -- the simulated forward ----------------------------------------------------------------------------
    def forward(self, input_ids, positions):
        """Read each request's initial state where the Mamba2 kernels read it, write the state tags where they
        write (decode rows: per-token SSM states to `state_indices_tensor_d[i, j]`, conv window offsets in
        column 0; prefill rows: the final state to `state_indices_tensor_p[i]`), and return hidden states
        naming each position's next token. Long: decode and prefill rows are read from one metadata object
        in the kernels' order; splitting them would split that order."""
        from vllm.forward_context import get_forward_context

        torch = self.torch
        ib = self.run.input_batch
        md = get_forward_context().attn_metadata
        n = input_ids.shape[0]
        hidden = torch.zeros(n, 1, dtype=torch.float32)
        metas = {g: md.get(self.run.layers[g]) for g in self.mamba_groups} if isinstance(md, dict) else {}
        if ib is None or not metas or any(m is None for m in metas.values()):
            return hidden
        ids = input_ids.tolist()
        pos = positions.tolist()
        qsl = ib.query_start_loc_np
        slots = ib.idx_mapping_np
        ms = self.runner.model_state
        prev_cols, _ = self.run.before if getattr(self.run, "before", None) else ([], [])
        rows = {g: kernel_rows(m) for g, m in metas.items()}  # where the kernels read and write (mamba_meta.py)
        self.rows, self._fed_from = {}, {}
        for i, rid in enumerate(ib.req_ids):
            qs, qe = int(qsl[i]), int(qsl[i + 1])
            ns = qe - qs
            if ns == 0:
                continue
            nc = pos[qs]
            start = self.fingerprint(rid, nc)
            fps = chain([start], ids[qs:qe])  # fps[j]: the prefix of nc + j tokens as fed
            targets = [true_token(fps[j + 1]) for j in range(ns)]
            hidden[qs:qe, 0] = torch.tensor(targets, dtype=torch.float32)
            slot = int(slots[i])
            curr = int(ms._mamba_state_idx_gpu[slot]) if getattr(ms, "_align_mode", False) else 0
            prev = prev_cols[i] if i < len(prev_cols) else -1
            for g in self.mamba_groups:  # every Mamba group's layers run the kernels at their own indices
                kr, checkpoint = self._group_forward(g, metas[g], rows[g], i, rid, slot, nc, ns, fps, curr, prev)
                if self.backend is not None and g == self.mamba_groups[0]:
                    self._model_forward(rid, slot, nc, ids[qs:qe], kr.decode, kr.init, kr.blocks, checkpoint,
                                        hidden, qs)
            self.rows[rid] = (fps, targets, ns)
            self._fed_from[rid] = nc
        return hidden

    def _group_forward(self, g, m, rows, i, rid, slot, nc, ns, fps, curr, prev):
        """One Mamba group's part of a request's forward: the initial state read, the states written, the row
        recorded. Returns the kernels' row and the prefill checkpoint written (block, tokens) or None."""
        st, tr = self.states, self.trace
        kr = rows.row(i, ns)
        init, blocks = kr.init, kr.blocks
        read = None if init is None else (init[0], *st.read(*init))
        checkpoint, ckpt_col = write_row(st, rows, kr, nc, ns, fps)  # with any prefill checkpoint (mamba_meta.py)
        live = list(range(curr, curr + len(blocks)))
        if prev >= 0 and prev != curr:
            live.append(prev)
        if ckpt_col is not None:
            live.append(ckpt_col)
        if read is not None:
            tr.reads.append(Read(self.step, rid, "initial", g, curr, read[0], read[1], read[2], (nc, fps[0])))
        core = self.core_tables.get(rid)
        tr.rows.append(RowView(self.step, rid, g, self.kinds.get(rid, "RUNNING"), nc, ns, prev, curr,
                               sorted(set(live)), self._row(slot, g), list(core[g]) if core else []))
        return kr, checkpoint

    def _row(self, slot: int, group: int) -> list[int]:
        """A request slot's row of a group's block table, as the runner holds it."""
        bt = self.runner.block_tables
        return bt.block_tables[group].gpu[slot, :int(bt.num_blocks.np[group, slot])].tolist()

    # -- the model forward (--forward model) --------------------------------------------------------------------
    def fingerprint(self, rid: str, n: int) -> int:
        """Request `rid`'s first n tokens' fingerprint: vLLM's record, then the model forward's own tokens (this
        worker's record, a step ahead of the scheduler's under async scheduling), else the token rule."""
        return self.truths[rid].fingerprint(n, self.known_tokens(rid) if self.backend is not None else None)

    def known_tokens(self, rid: str) -> list[int] | None:
        """The request's tokens as this worker fed and sampled them (the model's, with --forward model)."""
        return self.tokens.get(rid)

    def _fed_tokens(self, rid: str) -> list[int]:
        return self._feed[rid]

    def _model_forward(self, rid, slot, nc, fed, decode, init, blocks, checkpoint, hidden, qs) -> None:
        """The model tier's forward from and to the blocks the Mamba2 kernels use (the metadata's indices and
        accepted count), its greedy choices as the hidden states vLLM's sampler and rejection sampler act on,
        its verification of the drafts recorded for scoring (the same decision V2's rejection sampler takes
        on one-hot logits)."""
        from harness.worker import Forward

        ns = len(fed)
        prompt = list(self.prompts[rid])
        base = self.tokens.get(rid, prompt)
        base = base[:nc] if len(base) >= nc else prompt[:nc]
        self._feed[rid] = base + fed
        attn = self._row(slot, self.attn_groups[0])
        self.backend.forward(Forward(self.step, rid, nc, ns, init, decode, blocks[0], list(blocks) if decode else [],
                                     checkpoint, attn))
        targets = self.backend.logits[rid].argmax(-1).tolist()
        if decode:
            hidden[qs:qs + ns, 0] = self.torch.tensor(targets, dtype=self.torch.float32)
        else:
            hidden[qs + ns - 1, 0] = float(targets[0])
        nd = len(self.so.scheduled_spec_decode_tokens.get(rid, ()))
        first = nc + ns - nd
        if first >= int(self.runner.req_states.prefill_len.np[slot]):  # the step samples: verify the drafts
            got = self.backend.verify(rid, self.step, first, fed[ns - nd:])
            self.tokens[rid] = base + fed[:ns - nd] + got
        else:  # a prefill chunk before the prompt's end samples nothing
            self.backend.logits.pop(rid, None)
            self.tokens[rid] = base + fed

    def record_precopies(self, input_batch, slots) -> None:
        """The align pre-copy's sources, from the tensors vLLM's fused kernels read: source column
        `_mamba_src_col_gpu` (-1 = fresh), conv offset `_mamba_src_off_gpu`, destination column the advanced
        `_mamba_state_idx_gpu` (mamba_hybrid.py preprocess_state; mamba_utils.py precopy kernel); the SSM
        source is column src + offset. Read after the copy: a source block is never its destination."""
        ms = self.runner.model_state
        src = ms._mamba_src_col_gpu[slots].tolist()
        off = ms._mamba_src_off_gpu[slots].tolist()
        dst = ms._mamba_state_idx_gpu[slots].tolist()
        nc_all = self.runner.req_states.num_computed_tokens.gpu[slots].tolist()
        for i, rid in enumerate(input_batch.req_ids):
            if src[i] < 0 or src[i] == dst[i]:
                continue
            slot = int(slots[i])
            nc = int(nc_all[i])
            for g in self.mamba_groups:  # the kernel copies every Mamba group's columns
                row = self._row(slot, g)
                conv_b, ssm_b, conv, ssm = copy_source(self.states, row, src[i], off[i])
                self.trace.reads.append(Read(self.step, rid, "precopy", g, src[i], conv_b, conv, ssm,
                                             (nc, self.fingerprint(rid, nc))))
                if self.backend is not None:  # the model's pages make the copy vLLM's kernel made
                    self.backend.shift_copy(column_block(row, dst[i]), conv_b, ssm_b, off[i])

    def _observe_copy(self, kind: str, slot: int, src_col: int, dst_col: int, bias: int) -> None:
        """A fused copy's source, told by the torch kernel before it moves the bytes (kernels_v1's OBSERVER:
        `postprocess_mamba_fused_kernel` takes its decision per request, mamba_utils.py:440-470) or, under
        `--kernels triton`, by `postcopies_before_launch`. Pre-copies are recorded by record_precopies."""
        if kind != "postcopy":
            return
        rs = self.runner.req_states
        rid = next((r for r, i in rs.req_id_to_index.items() if i == slot), None)
        if rid is None:
            return
        A = (dst_col + 1) * self.run.mamba_block_size
        # the prefix of A tokens as this step fed them (drafts included: V2's scheduler holds placeholders)
        fed = self.rows.get(rid)
        nc = self._fed_from.get(rid, 0)
        at = (A, fed[0][A - nc]) if fed is not None and 0 <= A - nc < len(fed[0]) else (A, self.fingerprint(rid, A))
        for g in self.mamba_groups:  # the kernel copies every Mamba group's columns
            row = self._row(slot, g)
            conv_b, ssm_b, conv, ssm = copy_source(self.states, row, src_col, bias)
            self.trace.reads.append(Read(self.step, rid, "postcopy", g, src_col, conv_b, conv, ssm, at))
            if self.backend is not None:  # the model's pages make the copy vLLM's kernel is about to make
                self.backend.shift_copy(column_block(row, dst_col), conv_b, ssm_b, bias)

    def postcopies_before_launch(self, num_reqs, num_accepted, state_idx, new_computed, idx_mapping) -> None:
        """`--kernels triton`: the fused postprocess kernel's per-request decision (mamba_utils.py:440-470, the
        PRECOMPUTED_NEW_COMPUTED form V2 launches) read from its inputs just before the launch."""
        if self.kernels != "triton":
            return
        B = self.run.mamba_block_size
        acc, cols, computed = num_accepted.tolist(), state_idx.tolist(), new_computed.tolist()
        for slot in idx_mapping[:num_reqs].tolist():
            if slot < 0:
                continue
            running = computed[slot] - acc[slot] + 1
            aligned = computed[slot] // B * B
            if aligned < running:
                continue
            bias, dest = aligned - running, aligned // B - 1
            if cols[slot] == dest and bias == 0:
                continue
            self._observe_copy("postcopy", slot, cols[slot], dest, bias)

    def logits(self, hidden_states):
        """One-hot logits on the hidden state's token: vLLM's sampler and rejection sampler pick it."""
        torch = self.torch
        V = self.runner.vocab_size
        out = torch.full((hidden_states.shape[0], V), -1.0e4, dtype=torch.float32)
        tok = hidden_states[:, 0].long().clamp_(0, V - 1)
        out.scatter_(1, tok.unsqueeze(1), 1.0e4)
        return out

    def _propose(self, input_batch, *args, num_sampled=None, dummy_run=False, **kwargs):
        """The drafter's proposal (n-gram / EAGLE in vLLM): the scenario's planned drafts after each request's
        new prefix, K per row, as `[num_reqs, K]` int64 (v1/worker/gpu/spec_decode/ngram/speculator.py)."""
        torch = self.torch
        num_reqs = input_batch.num_reqs
        drafts = torch.zeros(num_reqs, self.K, dtype=torch.int64)
        if dummy_run:
            return drafts
        if num_sampled is None:
            num_sampled = args[4]
        sampled = num_sampled.tolist()
        spec = self.so.scheduled_spec_decode_tokens
        for i, rid in enumerate(input_batch.req_ids):
            k = int(sampled[i]) if i < len(sampled) else 0
            row = self.rows.get(rid)
            if k <= 0 or row is None:
                continue
            fps, targets, ns = row
            nd = len(spec.get(rid, ()))
            last = ns - nd - 1 + k - 1  # the last sampled token's row position
            new_fp = hash((fps[last + 1], targets[last]))
            # output tokens once this step's are in (not the scheduler's count: under async scheduling it lags)
            outputs = self._fed_from[rid] + ns - nd + k - len(self.prompts[rid])
            if outputs >= self.max_tokens[rid]:
                continue
            plan = min(self.K, self.max_tokens[rid] - outputs - 1)
            if plan > 0 and self.backend is not None:  # the model tier's drafter, on this worker's tokens
                proposal = self.backend.propose(rid, list(self.tokens[rid]), plan)
                drafts[i, :len(proposal)] = torch.tensor(proposal, dtype=torch.int64)
            elif plan > 0:
                drafts[i] = torch.tensor(self.truths[rid].propose(plan, self.K, new_fp), dtype=torch.int64)
        return drafts

    _seen: set

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._seen = set()
        return self
