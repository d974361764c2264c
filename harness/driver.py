"""Driver: replays a scenario through vLLM's real KVCacheManager in the order vLLM's Scheduler calls it.

Per step (protocol doc §7.2, scheduler.py in vLLM 0.33.0): `new_step_starts`; scenario events (preempt,
abort); running requests in order (`_mamba_block_aligned_split`, `allocate_slots`, preempt-the-tail on
failure); then, if nothing was preempted, the waiting queue (finished async loads are cached first,
`_update_waiting_for_remote_kv`; fresh ones do a prefix lookup and ask the simulated connector for an
external hit); then CoW copies are taken, the worker shadow applies the step, tokens are sampled and
speculative drafts verified, rejected drafts are rolled back and re-cached, finished requests freed.
After every step the Mamba group's prefix cache is snapshotted for the integrity oracle.

It follows vLLM 0.33.0's defaults (diff against the engine tier: `hybrid-harness diff --count N`): spec-decode
padding of decode-ready admissions, EAGLE-only lookahead slots, KV-holding requests first, full-sequence
admission, an async load's reserved blocks. Departures, on purpose (docs/engine-tier.md, "Mirror departures"): no
async scheduling; the connector writes the loaded boundary state at allocation time, an async load's when the load
completes (it "delivers the correct state", so ordering against the pre-copy is not under test); a request gets at
most `max_tokens - outputs - 1` drafts, so acceptance never overshoots `max_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.errors import BadInput, HarnessError
from harness.scenario import RequestSpec, Scenario
from harness.states import SymbolicStates, chain
from harness.tokens import RequestTruth, drafts_wanted, propose, verify
from harness.trace import CacheRecorder, Call, Retention, Trace, VllmException, VllmRaised, run_steps
from harness.release import vllm_release, vllm_source
from harness.vllm_adapter import ATTN_GROUP, MAMBA_GROUP, Allocator, exception_site, installed_version
from harness.worker import CachedReq, NewReq, SchedulerOutput, WorkerShadow


@dataclass
class _Req:
    spec: RequestSpec
    vreq: object  # vllm.v1.request.Request
    truth: RequestTruth  # its tokens as the scenario defines them (harness.tokens)
    phase: str = "pending"  # pending | waiting | loading | running | finished
    chunk_idx: int = 0
    drafts: list[int] = field(default_factory=list)
    external_used: bool = False
    load_done_step: int = -1
    pending_load: tuple[int, int] | None = None  # an async load's tokens (start, total), written when it completes
    prefill_chunk: bool = False  # Request.is_prefill_chunk as _update_after_schedule last set it (:1862-1864)
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.spec.id

    @property
    def fps(self) -> list[int]:
        """fps[n] = fingerprint of the first n real tokens."""
        return self.truth.fps


PLACEHOLDER = -1  # a padded request's placeholder draft token (scheduler.py:1578-1582)


class _WithDrafts:
    """Prefix fingerprints of the real tokens followed by this step's drafts, without copying the prefix."""

    __slots__ = ("base", "extra", "cut")

    def __init__(self, base: list[int], extra: list[int]) -> None:
        self.base, self.extra, self.cut = base, extra, len(base) - 1  # extra[0] == base[-1]

    def __getitem__(self, n: int) -> int:
        return self.base[n] if n <= self.cut else self.extra[n - self.cut]


class Driver:
    """The mirrored scheduler loop. `backend`: a forward backend (harness.model_tier.ModelBackend) that runs a
    model on the worker's page moves and decides tokens, drafts and connector loads; None = the symbolic
    token rule (harness.tokens) alone."""

    def __init__(self, scenario: Scenario, mutant: str | None = None, backend=None) -> None:
        self.sc = scenario
        self.g = g = scenario.geometry
        if g.mamba_cache_mode != "align":
            raise BadInput(f"geometry.mamba_cache_mode {g.mamba_cache_mode!r}: the mirrored tiers follow align mode only; "
                           "run it on the engine tier with vLLM's own runner (--tier engine --runner v1|v2|auto)")
        if g.model is not None:
            raise BadInput("geometry.model: the mirrored tiers model one attention and one Mamba group; a real "
                           "model's KV cache groups are built by vLLM on the engine tier (--tier engine)")
        self.alloc = Allocator(g)
        self.K = g.num_speculative_tokens
        # KV slots past the scheduled tokens: EAGLE keeps K for its drafts, n-gram none (VllmConfig.
        # num_lookahead_tokens, config/vllm.py:626-652); the drafter is EAGLE exactly when eagle_block_drop
        self.lookahead = self.K if g.eagle_block_drop else 0
        # an async load's reservation of the blocks one spec-decode step needs in the non-Mamba groups
        # (Scheduler._spec_decode_step_blocks, scheduler.py:371-380)
        self.spec_step_blocks = -(-(1 + self.K + self.lookahead) // g.attn_block_size) if self.K else 0
        self.trace = Trace(**vllm_source().as_json(), mutant=mutant, retention=Retention.of(scenario.geometry))
        self.states = SymbolicStates(self.K)
        ckpt = (self.alloc.checkpoint_position, self.alloc.checkpoint_valid) if g.prefill_checkpoint else None
        self.backend = backend
        if backend is not None:
            backend.step_tokens = self._step_tokens
        # one attention and one Mamba group (the shape vllm_adapter builds; the engine tier has a model's several)
        self.attn_groups, self.mamba_groups = (ATTN_GROUP,), (MAMBA_GROUP,)
        self.worker = WorkerShadow(block_size=g.mamba_block_size, num_spec=self.K, mamba_groups=self.mamba_groups,
                                   states=self.states, trace=self.trace, checkpoint=ckpt, kernels=backend)
        prompts = scenario.prompt_tokens()
        self.reqs: dict[str, _Req] = {}
        for spec in scenario.requests:
            vreq = self.alloc.make_request(spec.id, prompts[spec.id], spec.max_tokens)
            r = _Req(spec, vreq, RequestTruth(prompts[spec.id], spec.acceptance, self.K))
            self.reqs[spec.id] = r
            self.trace.prefixes[spec.id] = r.fps  # names states lazily, only when a finding is printed
            self.trace.prompt_tokens[spec.id] = len(prompts[spec.id])
        self.cache = CacheRecorder(self.trace, self.states, g.hash_block_size)
        self.waiting: list[_Req] = []
        self.holding: list[_Req] = []  # waiting requests that hold KV blocks: async loads (kv_holding_waiting)
        self.running: list[_Req] = []
        self.inflight: dict[str, _Req] = {}  # Scheduler._inflight_prefills, in admission order
        self.prefill_scheduled = False  # this step: a running request scheduled mid-prefill
        self.running_scheduled = False  # this step: any running request scheduled
        self.finished_since_last: set[str] = set()
        self.events: dict[int, list] = {}
        for ev in scenario.events:
            self.events.setdefault(ev.step, []).append(ev)
        self.step_idx = 0
        self.last_scheduled = 0

    # -- bookkeeping -----------------------------------------------------------------------------
    def _call(self, r: _Req, name: str, fn, *args, **kwargs):
        """Run one vLLM call; a vLLM exception ends the replay as a finding, a harness one as an error."""
        recorded = kwargs.pop("_args", {})
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - classified below
            inside, site = exception_site(exc)
            if not inside:
                raise HarnessError(f"harness error in {name} for {r.id}: {exc!r} at {site}") from exc
            raise VllmRaised(VllmException(self.step_idx, r.id, name, repr(exc), site)) from exc
        if name in ("allocate_slots", "get_computed_blocks", "cache_blocks"):
            core = self.alloc.block_ids(r.id) if self.alloc.holds_blocks(r.id) else None
            shown = out if name != "get_computed_blocks" else out[1]
            self.trace.calls.append(Call(self.step_idx, r.id, name, recorded, shown, core))
        return out

    # -- public ------------------------------------------------------------------------------------
    def run(self) -> Trace:
        if self.backend is None:
            return run_steps(self)
        with self.backend.session():
            trace = run_steps(self)
            if trace.exception is None:
                trace.outputs = self.backend.outputs(
                    (r.id, list(r.vreq.all_token_ids), r.vreq.num_prompt_tokens) for r in self.reqs.values())
        return trace

    def _step_tokens(self, rid: str) -> list[int]:
        """A request's tokens followed by this step's drafts (what a backend's forward consumes)."""
        r = self.reqs[rid]
        return list(r.vreq.all_token_ids) + r.drafts

    def _stuck(self, step: int) -> bool:
        """Nothing ran last step and nothing can change: no load in flight, no arrival or event to come.
        vLLM would spin here forever; the replay stops and shuts down (pool accounting still judged)."""
        if step == 0 or self.last_scheduled or any(r.phase in ("loading", "pending") for r in self.reqs.values()):
            return False
        return not any(s >= step for s in self.events)

    def _all_done(self) -> bool:
        return all(r.phase == "finished" for r in self.reqs.values())

    def _progress(self) -> tuple:
        return (tuple((r.phase, r.vreq.num_computed_tokens, r.vreq.num_tokens) for r in self.reqs.values()),
                self.alloc.block_pool.get_num_free_blocks())

    def _unfinished(self) -> dict[str, str]:
        return {r.id: r.phase for r in self.reqs.values() if r.phase not in ("pending", "finished")}

    # -- one step ------------------------------------------------------------------------------------
    def _step(self, step: int) -> None:
        """One scheduler step as Scheduler.schedule runs it (running requests, then waiting ones, then the
        worker and the output). Long: it follows vLLM's schedule() in order, line for line, so the two can be
        read side by side."""
        alloc = self.alloc
        so = SchedulerOutput(step=step, finished=self.finished_since_last)
        self.finished_since_last = set()
        alloc.new_step()  # scheduler.py:746
        for ev in self.events.get(step, ()):
            self._apply_event(ev, so)
        for r in self.reqs.values():
            if r.phase == "pending" and r.spec.arrival_step <= step:
                r.phase = "waiting"
                self.waiting.append(r)

        budget = self.g.token_budget
        preempted = False
        self.prefill_scheduled = self.running_scheduled = False
        i = 0
        while i < len(self.running) and budget > 0:  # scheduler.py:795-1036
            r = self.running[i]
            v = r.vreq
            nd = len(r.drafts)
            n = v.num_tokens + nd - v.num_computed_tokens
            n = self._chunk(r, min(n, budget, self.g.max_model_len - v.num_computed_tokens - 1))
            if n <= 0:
                i += 1
                continue
            while True:
                new = self._call(r, "allocate_slots", alloc.allocate, v, n, lookahead=self.lookahead,
                                 _args={"num_new_tokens": n, "num_lookahead_tokens": self.lookahead})
                if new is not None:
                    break
                victim = self.running.pop()  # lowest priority under FCFS (scheduler.py:919-980)
                self._preempt(victim, so)
                preempted = True
                if victim is r:
                    break
            if new is None:
                continue
            # get_block_ids(allow_none=True): None when every group got nothing (scheduler.py:1963-1965)
            sent = new if any(new) else None
            so.cached_reqs.append(CachedReq(r.id, sent, v.num_computed_tokens, resumed=False))
            self._schedule(r, n, so)
            self.running_scheduled = True
            self.prefill_scheduled |= r.prefill_chunk  # scheduler.py:989
            budget -= n
            i += 1

        if not preempted:  # the waiting queues are only scanned when nothing was preempted (:1049)
            self._scan_waiting(step, budget, so)

        copies, retained = alloc.take_copies()  # scheduler.py:1698-1707
        so.copies = copies
        self.trace.copies.extend((step, s, d) for s, d in copies)
        so.zero_ids = alloc.take_zero_ids()  # attention pages only (§6.5): nothing symbolic to zero
        core_tables = {r: alloc.block_ids(r) for r in so.num_scheduled}
        seq_fps = {}
        for rid in so.num_scheduled:
            r = self.reqs[rid]
            drafts = so.spec_tokens.get(rid, [])
            seq_fps[rid] = _WithDrafts(r.fps, chain([r.fps[-1]], drafts)) if drafts else r.fps
            v = r.vreq
            v.num_computed_tokens += so.num_scheduled[rid]  # _update_after_schedule (:1845-1877)
            r.prefill_chunk = v.num_computed_tokens < v.num_tokens
            if not r.prefill_chunk:
                self.inflight.pop(rid, None)
        self.last_scheduled = len(so.num_scheduled)
        kinds = self.worker.update_states(so)
        self.worker.execute(so, kinds, seq_fps, core_tables)
        accepted = self._sample(so)
        self.worker.postprocess(so, accepted, seq_fps)
        alloc.release_retained(retained)
        self._check_cache(step)

    def _chunk(self, r: _Req, limit: int, num_local: int = 0, num_external: int = 0) -> int:
        """Tokens to schedule: vLLM's own align-mode rule under the budget `limit`, or the scenario's explicit
        prefill chunk when it is one vLLM's scheduler can produce here (else the scenario is bad input)."""
        if limit <= 0:
            return 0
        v = r.vreq
        natural = self.alloc.split(v, limit, num_local, num_external)
        chunks = r.spec.chunks
        prefill = v.num_computed_tokens + num_local + num_external < v.num_prompt_tokens
        if not (chunks and prefill and r.chunk_idx < len(chunks)):
            return natural
        want = chunks[r.chunk_idx]
        if want > limit:
            return natural  # the budget ran out first: vLLM's rule decides, the explicit chunk waits
        if want != natural and self.alloc.split(v, want, num_local, num_external) != want:
            start = v.num_computed_tokens + num_local + num_external
            raise BadInput(f"requests[{r.id}].chunks[{r.chunk_idx}] = {want}: vLLM {self.trace.vllm_version}'s "
                           f"scheduler cannot end a chunk there (from {start} tokens it schedules {natural})")
        r.chunk_idx += 1
        return want

    def _schedule(self, r: _Req, n: int, so: SchedulerOutput) -> None:
        so.num_scheduled[r.id] = n
        if r.drafts:
            kept = r.drafts[: max(n - 1, 0)]  # budget-trimmed drafts are dropped (scheduler.py spec trim)
            if kept:
                so.spec_tokens[r.id] = kept
            r.drafts = kept

    # -- waiting requests ------------------------------------------------------------------------------
    def _scan_waiting(self, step: int, budget: int, so: SchedulerOutput) -> None:
        """The waiting loop (scheduler.py:1062-1611): requests holding KV blocks (async loads) are drained
        first, then the waiting queue; a request skipped this pass (a load still in flight, or one just
        admitted to load) goes back to the front of its queue afterwards, in order (:1606-1610)."""
        skipped: list[_Req] = []
        while budget > 0:
            queue = self.holding or self.waiting
            if not queue:
                break
            r = queue[0]
            if r.phase == "loading":
                if step < r.load_done_step:
                    skipped.append(queue.pop(0))  # still receiving (_handle_blocked_waiting_request)
                    continue
                self._finish_load(r)
            n = self._admit(r, budget, so)
            if n is None:
                break  # did not fit: stop the scan (scheduler.py:1454-1461)
            queue.pop(0)
            if r.phase == "loading":
                skipped.append(r)
                continue
            budget -= n
        if skipped:
            self.holding[:0] = skipped

    def _admit(self, r: _Req, budget: int, so: SchedulerOutput) -> int | None:
        """Schedule one waiting request (scheduler.py:1062-1606). None: it did not fit. Long: it mirrors vLLM's
        waiting-queue branch in its order (local hit, external hit, allocation, async load)."""
        alloc, v, status, K = self.alloc, r.vreq, self.alloc.status, self.K
        local, ext, blocks, load_async = 0, 0, None, False
        if v.num_computed_tokens == 0:
            blocks, local = self._call(r, "get_computed_blocks", alloc.lookup, v)
            ext, load_async, blocks, local = self._external(r, blocks, local)
        total = v.num_computed_tokens + local + ext
        pad = False
        if load_async:
            n = 0
        else:
            n = v.num_tokens - total
            # a decode-ready request is padded to the uniform spec-decode size with K placeholder drafts
            # (pad_spec_decode, scheduler.py:1305-1330), unpadded if the Mamba split clips it (:1359-1370)
            if (K and n == 1 and not self.prefill_scheduled and (self.running_scheduled or total > 0)
                    and total + 2 + K <= self.g.max_model_len):
                if 1 + K > budget:
                    return self._not_admitted(r)  # rather not scheduled than unpadded: the scan stops (:1326-1328)
                n, pad = 1 + K, True
            n = self._chunk(r, min(n, budget), local, ext)
            if n <= 0:
                return self._not_admitted(r)
            if pad and n != 1 + K:
                n, pad = 1, False
        lookahead = 0 if load_async else self.lookahead
        # admission gates: the full sequence must fit (scheduler_reserve_full_isl, on by default:
        # config/scheduler.py:190, scheduler.py:1449); an async load leaves the in-flight prefills' blocks and
        # one spec-decode step's free (:1419-1430)
        reserved = self._reserved_blocks() if load_async else 0
        new = self._call(r, "allocate_slots", alloc.allocate, v, n, num_local=local, blocks=blocks,
                         lookahead=lookahead, num_external=ext, delay_cache=load_async,
                         has_scheduled_reqs=bool(self.running),
                         admission={"full_sequence_must_fit": True, "reserved_blocks": reserved},
                         _args={"num_new_tokens": n, "num_new_computed_tokens": local,
                                "num_external_computed_tokens": ext, "delay_cache_blocks": load_async,
                                "num_lookahead_tokens": lookahead, "full_sequence_must_fit": True,
                                "reserved_blocks": reserved})
        if new is None:
            return self._not_admitted(r)
        if ext and load_async:  # the connector fills the blocks during the load: nothing valid in them until then
            self._connector_loading(r, total - ext, total)
        elif ext:
            self._connector_deliver(r, total - ext, total)
        if load_async:  # WAITING_FOR_REMOTE_KVS, skipped back into the queue (:1514-1545)
            v.status = status.WAITING_FOR_REMOTE_KVS
            v.num_computed_tokens = total
            r.phase = "loading"
            r.load_done_step = self.step_idx + r.spec.external.load_steps
            self.inflight[r.id] = r  # scheduler.py:1542
            return 0
        resumed = v.status == status.PREEMPTED
        v.num_computed_tokens = total  # scheduler.py:1573
        v.status = status.RUNNING
        r.phase = "running"
        self.running.append(r)
        table = alloc.block_ids(r.id)  # full table (scheduler.py:1566-1568)
        if resumed and not vllm_release().resumes_as_new:  # 0.34+ re-sends it in full (scheduler.py:1619-1626)
            so.cached_reqs.append(CachedReq(r.id, table, total, resumed=True))
        else:
            so.new_reqs.append(NewReq(r.id, table, total, v.num_prompt_tokens))
        if total + n < v.num_tokens:
            self.inflight[r.id] = r  # still prefilling after this chunk (scheduler.py:1592-1593)
        if pad:
            r.drafts = [PLACEHOLDER] * K  # scheduler.py:1578-1582
        self._schedule(r, n, so)
        return n

    @staticmethod
    def _not_admitted(r: _Req) -> None:
        """Not admitted this step: the connector offers its hit again at the next attempt, as a real
        connector's get_num_new_matched_tokens does (the hit is consumed only once blocks are allocated for it)."""
        r.external_used = False
        return None

    def _reserved_blocks(self) -> int:
        """`_inflight_prefill_reserved_blocks` + `_spec_decode_step_blocks` (scheduler.py:1424-1430, 3432-3436)."""
        alloc, K, la = self.alloc, self.K, self.lookahead
        return sum(alloc.remaining_blocks(q.vreq, K, la) for q in self.inflight.values()) + self.spec_step_blocks

    def _external(self, r: _Req, blocks, local: int):
        """The simulated connector's `get_num_new_matched_tokens` and the scheduler's use of it (:1129-1197)."""
        spec = r.spec.external
        if spec is None or r.external_used:
            return 0, False, blocks, local
        r.external_used = True
        bs = self.g.scheduler_block_size
        hit = min(spec.tokens, r.vreq.num_tokens - 1)
        if not self.alloc.connector_sees_aligned_local:  # 0.26.x: the connector sees the whole local hit
            ext = max(0, hit - local)
            return ext, spec.async_load and ext > 0, blocks, local
        partial_tail = local % bs
        aligned_local = local - partial_tail
        ext_tokens = max(0, hit - aligned_local)
        if partial_tail and ext_tokens > partial_tail:
            blocks = self.alloc.truncate(blocks, aligned_local)
            local, ext = aligned_local, ext_tokens
        elif partial_tail:
            ext = 0
        else:
            ext = ext_tokens
        return ext, spec.async_load and ext > 0, blocks, local

    def _connector_deliver(self, r: _Req, start: int, total: int) -> None:
        """The connector loads the Mamba boundary state into the block the manager allocated for it
        (`allocate_external_computed_blocks`, single_type_kv_cache_manager.py:327-368); tokens start..total
        are the external ones."""
        table = self.alloc.block_ids(r.id)[MAMBA_GROUP]
        col = (total - 1) // self.g.mamba_block_size
        if col < len(table):
            self.states.deliver(table[col], (total, r.fps[total]))
        if self.backend is not None:
            self.backend.deliver(r.id, list(r.vreq.all_token_ids)[:total], table[col] if col < len(table) else None,
                                 self.alloc.block_ids(r.id)[ATTN_GROUP], start)

    def _connector_loading(self, r: _Req, start: int, total: int) -> None:
        """An async load in flight: its Mamba block holds nothing valid until the load completes (`_finish_load`),
        so a read or a cache hit inside the window is a finding, as on a real connector."""
        table = self.alloc.block_ids(r.id)[MAMBA_GROUP]
        col = (total - 1) // self.g.mamba_block_size
        if col < len(table):
            self.states.deliver(table[col], None)
        r.pending_load = (start, total)

    def _finish_load(self, r: _Req) -> None:
        """`_update_waiting_for_remote_kv` (scheduler.py:3467-3517), once the connector's load has landed."""
        if r.pending_load is not None:
            self._connector_deliver(r, *r.pending_load)
            r.pending_load = None
        v, status = r.vreq, self.alloc.status
        self._call(r, "cache_blocks", self.alloc.cache_blocks, v, v.num_computed_tokens,
                   _args={"num_computed_tokens": v.num_computed_tokens})
        if v.num_computed_tokens == v.num_tokens:
            v.num_computed_tokens = v.num_tokens - 1
        v.status = status.PREEMPTED if v.num_preemptions > 0 else status.WAITING
        r.phase = "waiting"

    # -- sampling and update_from_output ---------------------------------------------------------------
    def _sample(self, so: SchedulerOutput) -> dict[str, int]:
        accepted: dict[str, int] = {}
        for rid, ns in so.num_scheduled.items():
            r = self.reqs[rid]
            v = r.vreq
            drafts = so.spec_tokens.get(rid, [])
            nd = len(drafts)
            before = v.num_computed_tokens - ns
            if before + ns - nd < v.num_tokens:  # a non-final prefill chunk samples nothing
                accepted[rid] = 1
                r.drafts = []
                continue
            new_tokens = verify(self.backend, r, self.step_idx, drafts)
            good = len(new_tokens) - 1
            v.num_computed_tokens -= nd - good  # reject (scheduler.py:2346-2364)
            r.truth.extend(new_tokens)
            self.alloc.append_output(v, new_tokens)
            if nd:
                self._call(r, "cache_blocks", self.alloc.cache_blocks, v, v.num_computed_tokens,
                           _args={"num_computed_tokens": v.num_computed_tokens})  # :2406-2415
            accepted[rid] = good + 1
            if v.num_output_tokens >= r.spec.max_tokens:
                self._finish(r)
            else:
                self._plan_drafts(r)
        return accepted

    def _plan_drafts(self, r: _Req) -> None:
        nd = drafts_wanted(self.K, r.spec.max_tokens, r.vreq.num_output_tokens)
        r.drafts = propose(self.backend, r, nd) if nd > 0 else []
        if hasattr(r.vreq, "spec_token_ids"):
            r.vreq.spec_token_ids = list(r.drafts)

    # -- lifetimes -----------------------------------------------------------------------------------------
    def _finish(self, r: _Req) -> None:
        self.inflight.pop(r.id, None)  # _free_request (scheduler.py:3038)
        self._release(r)
        r.vreq.status = self.alloc.status.FINISHED_LENGTH_CAPPED
        r.phase = "finished"
        r.drafts = []
        if r in self.running:
            self.running.remove(r)
        self.finished_since_last.add(r.id)

    def _release(self, r: _Req) -> None:
        """`_free_request` with the KV connector every scenario's engine has (scheduler.py:3040, :3366-3375):
        `_connector_finished` first frees the blocks no longer needed, then the request's blocks are freed."""
        self._call(r, "remove_skipped_blocks", self.alloc.remove_skipped, r.vreq, _args={})
        self._call(r, "free", self.alloc.free, r.vreq, _args={})

    def _preempt(self, r: _Req, so: SchedulerOutput) -> None:
        """`_preempt_request` (scheduler.py:1799-1843)."""
        v = r.vreq
        self.inflight.pop(r.id, None)  # scheduler.py:1820
        self._call(r, "free", self.alloc.free, v, _args={})
        v.status = self.alloc.status.PREEMPTED
        v.num_computed_tokens = 0
        v.num_preemptions += 1
        r.drafts = []
        if hasattr(v, "spec_token_ids"):
            v.spec_token_ids = []
        if r in self.running:
            self.running.remove(r)
        r.phase = "waiting"
        self.waiting.insert(0, r)
        so.preempted.add(r.id)

    def _apply_event(self, ev, so: SchedulerOutput) -> None:
        r = self.reqs[ev.request]
        if ev.kind == "preempt":
            if r.phase == "running":
                self._preempt(r, so)
        elif ev.kind == "abort":
            if r.phase in ("waiting", "loading", "running"):
                self.inflight.pop(r.id, None)
                for queue in (self.waiting, self.holding):
                    if r in queue:
                        queue.remove(r)
                if self.alloc.holds_blocks(r.id):
                    self._release(r)
                if r in self.running:
                    self.running.remove(r)
                r.vreq.status = self.alloc.status.FINISHED_ABORTED
                so.finished.add(r.id)
            r.phase = "finished"

    def _shutdown(self) -> None:
        """Abort whatever is still live when the step limit is reached, so pool accounting can be judged."""
        for r in self.reqs.values():
            if r.phase != "finished" and self.alloc.holds_blocks(r.id):
                self._release(r)  # an abort (the engine tier: Scheduler.finish_requests)
            r.phase = "finished"

    # -- cache integrity snapshot ----------------------------------------------------------------------------
    def _check_cache(self, step: int) -> None:
        """Record the cache-integrity inputs after a step (trace.CacheRecorder, shared with the engine tier)."""
        self.cache.record(step, {r.id: (r.vreq.block_hashes, r.fps) for r in self.reqs.values()},
                          self.alloc.cached_mamba_entries())
        self.cache.record_key_breaks(step, self.alloc.cache_key_breaks())


__all__ = ["Driver"]
