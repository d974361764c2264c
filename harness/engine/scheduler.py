"""Engine tier: the scenario drives vLLM's real scheduler; the worker side is pluggable (harness/engine/workers.py).

Built from a real `VllmConfig` (`SchedulerConfig`, `CacheConfig(enable_prefix_caching=True,
mamba_cache_mode="align")`, `SpeculativeConfig(method="ngram")` when K > 0, `DeviceConfig("cpu")`,
`KVTransferConfig` loading `harness.engine.connector.HarnessConnector`) and a stand-in model config (the
dozen attributes the scheduler reads); the scheduler class is the one vLLM picks for it (`AsyncScheduler`
under async scheduling). Per step, as `EngineCore` does it: arrivals through `add_request`, aborts through
`finish_requests`, scenario preemptions through the scheduler's own `_preempt_request`; `schedule()`; the
worker (vLLM's V1 or V2 model runner with the forward simulated, or the mirror worker) executes the
SchedulerOutput; its sampled tokens and finished async loads go back through `update_from_output(so,
ModelRunnerOutput)`; drafts through `update_draft_token_ids` (synchronous scheduling). Under async
scheduling the loop is `EngineCore.step_with_batch_queue`: two batches in flight, the next `schedule()` before
the previous batch's output. Chunking, admission, preemption under pool pressure, CoW copies, spec rejection
and re-caching, frees and async-load completion are all vLLM's own code.

Geometry, derived as vLLM derives it for align mode: `cache_config.block_size` = Mamba block size =
attention block size (`platforms/interface.py:1114-1115` in 0.33.0: the attention block is raised until its
page holds a Mamba state, then the Mamba block is set to it), so a scenario's smaller `attn_block_size`
becomes `mamba_block_size`; `hash_block_size` is `prefix_match_unit`; `token_budget` is
`max_num_batched_tokens`. Async scheduling is vLLM's decision for the config on a GPU platform
(`_gpu_async_decision`) where the worker follows it (`follows_async`: V2; V1 without drafts), else
synchronous.

K > 0 is n-gram drafting (no lookahead slots); with `eagle_block_drop` an EAGLE drafter (`_as_eagle`: K
lookahead slots, trailing-block drop). Either way the drafts come from the scenario.

A scenario feature vLLM has no knob for is BadInput (exit 2), with the reason: an explicit prefill
`chunks` entry the real scheduler does not schedule on its own at that step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.tokens import RequestTruth, drafts_wanted, propose, verify  # the scenario's model of tokens
from harness.errors import BadInput, HarnessError
from harness.scenario import RequestSpec, Scenario
from harness.states import chain
from harness.release import vllm_source
from harness.trace import CacheRecorder, Retention, Trace, VllmException, VllmRaised, blocks_at_least, run_steps
from harness.vllm_adapter import (
    adopt_manager,
    exception_site,
    installed_version,
    parameters,
    supported_kwargs,
    vllm_namespace,
)
from harness.engine.config import build_scheduler, derive_geometry
from harness.engine.model_geometry import group_kinds, group_mixers, kind_indices
from harness.engine_options import EngineOptions
from harness.engine.workers import make_worker

MODEL_RUNNERS = ("mirror", "v1", "v2")  # the workers that run a forward backend (--forward model)


@dataclass
class _Req:
    spec: RequestSpec
    vreq: object
    truth: RequestTruth  # its tokens as the scenario defines them (harness.tokens), shared with the worker
    arrived: bool = False
    finished: bool = False
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = self.spec.id

    @property
    def fps(self) -> list[int]:
        return self.truth.fps


class EngineDriver:
    def __init__(self, scenario: Scenario, mutant: str | None = None, options: EngineOptions | None = None,
                 model: str = "random") -> None:
        self.sc = scenario
        self.model_name = model  # the model forward's weights (harness.model_tier.load_model)
        self.eg = eg = derive_geometry(scenario)
        self.K = eg.num_speculative_tokens
        self.options = options or EngineOptions()
        self.vc, self.sched = build_scheduler(scenario, eg, self.options.runner, self.options.async_scheduling,
                                              self.options.forward)
        # vLLM's engine loop: EngineCore.step, or step_with_batch_queue (two batches in flight) under async
        # scheduling (v1/engine/core.py:232-236, :708-822; max_concurrent_batches, config/vllm.py:588-598)
        self.asynchronous = bool(self.vc.scheduler_config.async_scheduling)
        self.batch_queue: list = []  # (pending output, SchedulerOutput, step), oldest last
        self.forward_marks: dict[int, tuple[int, int]] = {}  # step -> the state pool's write marks around its forward
        self.geometry = scenario.geometry.model_copy(update={"attn_block_size": eg.block_size})
        self._adopt_groups(scenario)
        self.v = vllm_namespace()
        from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput

        self.DraftTokenIds, self.KVConnectorOutput, self.ModelRunnerOutput = DraftTokenIds, KVConnectorOutput, ModelRunnerOutput
        self.trace = Trace(**vllm_source().as_json(), mutant=mutant, retention=_retention(scenario, self.sched))
        self.so = None  # this step's SchedulerOutput (what a forward backend's step_tokens reads)
        self.backend = self._forward_backend()  # --forward model: the model tier's ModelBackend; else None
        # the scenario's model of every request's tokens, which the worker reads too (it never asks the driver)
        self.prompts = scenario.prompt_tokens()
        self.truths = {spec.id: RequestTruth(self.prompts[spec.id], spec.acceptance, self.K) for spec in scenario.requests}
        self.worker = make_worker(self, self.options.runner)
        if self.backend is not None and getattr(self.worker, "runner_name", None) not in MODEL_RUNNERS:
            raise BadInput(f"--forward model runs on the mirror, v1 and v2 runners only (this config's runner: "
                           f"{getattr(self.worker, 'runner_name', self.options.runner)})")
        self.worker_drafts = getattr(self.worker, "proposes_drafts", False)
        self.trace.runner = getattr(self.worker, "runner_name", self.options.runner)
        self.trace.async_scheduling = self.asynchronous
        self.states = self.worker.states  # what the oracles read: the worker's state pages
        connector = self.sched.connector
        if connector is None or not hasattr(connector, "plan"):
            raise HarnessError("vLLM did not load the harness KV connector")
        connector.engine = self
        self.connector = connector
        self.reqs: dict[str, _Req] = {}
        for spec in scenario.requests:
            sp = self.v.SamplingParams(max_tokens=spec.max_tokens, temperature=spec.temperature,
                                       **hit_limit_params(spec.prefix_cache_hit_limit))
            vreq = self.v.Request(request_id=spec.id, prompt_token_ids=list(self.prompts[spec.id]), sampling_params=sp,
                                  pooling_params=None, block_hasher=self.alloc.hasher)
            r = _Req(spec, vreq, self.truths[spec.id])
            self.reqs[spec.id] = r
            self.trace.prefixes[spec.id] = r.fps
            self.trace.prompt_tokens[spec.id] = len(self.prompts[spec.id])
            if spec.external is not None:
                connector.plan[spec.id] = (spec.external.tokens, spec.external.async_load, spec.external.load_steps)
        self.events: dict[int, list] = {}
        for ev in scenario.events:
            self.events.setdefault(ev.step, []).append(ev)
        self.loads: dict[str, int] = {}  # request -> step whose output reports its async load finished
        self.landing: dict[str, tuple[int, list]] = {}  # request -> (its async load's tokens, the block ids it got)
        self.chunk_idx: dict[str, int] = {}
        self.cache = CacheRecorder(self.trace, self.states, eg.hash_block_size)
        self.step_idx = self.last_scheduled = 0
        self.reported_loads = False

    def _adopt_groups(self, scenario: Scenario) -> None:
        """The KV cache groups by kind, in vLLM's order (one each, or a real model's several:
        harness/engine/model_geometry.py), and the allocator view over the scheduler's manager. A request the pool
        can never hold, counting every group (the scenario's own check counts one of each), is one vLLM never
        admits: bad input, not a finding."""
        self.group_kinds = kinds = group_kinds(self.sched.kv_cache_config.kv_cache_groups)
        self.group_mixers = group_mixers(self.sched.kv_cache_config.kv_cache_groups)
        self.attn_groups, self.mamba_groups = kind_indices(kinds, "attention"), kind_indices(kinds, "mamba")
        # extract_hidden_states's group (geometry.hidden_state_layers): its block, by group; nothing reads it back
        self.hidden_blocks = {g: self.sched.kv_cache_config.kv_cache_groups[g].kv_cache_spec.block_size
                              for g in kind_indices(kinds, "hidden")}
        self.alloc = adopt_manager(self.geometry, self.sched.kv_cache_manager, self.mamba_groups)
        groups = (len(self.attn_groups), len(self.mamba_groups))
        if groups == (1, 1) and not self.hidden_blocks:
            return
        g = scenario.geometry
        for req in scenario.requests:
            tokens = req.prompt.num_tokens + req.max_tokens
            need = blocks_at_least(tokens, (self.eg.block_size, self.eg.block_size), groups) + sum(
                -(-tokens // b) for b in self.hidden_blocks.values())
            if need > g.num_blocks:
                raise BadInput(f"request {req.id}: needs at least {need} blocks in {groups[0]} attention and "
                               f"{groups[1]} Mamba groups{' and the hidden-state group' if self.hidden_blocks else ''}; "
                               f"the pool has {g.num_blocks} (vLLM never admits it)")

    def _forward_backend(self):
        """`--forward model`: the model tier's forward backend (harness.model_tier.ModelBackend) on the engine's
        geometry (attention block = Mamba block). It gets the worker's page moves and forwards (the mirror's
        WorkerShadow takes it as `kernels=`), and decides the tokens vLLM's scheduler sees (verify), the drafts
        it is given (propose) and what the connector loads (deliver), as with the mirrored scheduler loop."""
        if self.options.forward != "model":
            return None
        if self.sc.geometry.model is not None:
            raise BadInput("--forward model runs the model tier's two-group hybrid; geometry.model's groups are "
                           "judged on the symbolic forward")
        if self.sc.geometry.mamba_cache_mode == "all":
            raise BadInput("--forward model does not follow Mamba cache mode 'all' (its block-boundary states)")
        from harness.model_tier import ModelBackend, load_model  # torch model code only when asked for

        backend = ModelBackend(self.geometry, load_model(self.model_name))
        backend.step_tokens = self._step_tokens
        return backend

    def _step_tokens(self, rid: str) -> list[int]:
        """A request's tokens followed by this step's scheduled drafts (what the backend's forward consumes)."""
        v = self.reqs[rid].vreq
        return list(v.all_token_ids) + list(self.so.scheduled_spec_decode_tokens.get(rid, ()))

    # -- vLLM calls ----------------------------------------------------------------------------------
    def _call(self, request: str, name: str, fn, *args):
        try:
            return fn(*args)
        except (BadInput, HarnessError):
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            inside, site = exception_site(exc)
            if not inside:
                raise HarnessError(f"harness error in {name} at step {self.step_idx}: {exc!r} at {site}") from exc
            raise VllmRaised(VllmException(self.step_idx, request, name, repr(exc), site)) from exc

    # -- connector callbacks ---------------------------------------------------------------------------
    def connector_allocated(self, rid: str, total: int, is_async: bool, load_steps: int) -> None:
        """vLLM allocated blocks for `total - local` external tokens: the connector writes the boundary state
        into each Mamba group's block at column (total-1)//B, as the mirrored tier's simulated connector does (in
        mode all, every loaded block's state). A sync load lands now; an async one fills the blocks during the load,
        so they hold nothing valid until the step that reports it finished (`_land_loads`)."""
        if is_async:
            self.loads[rid] = self.step_idx + load_steps - 1
            # a real connector writes into the block ids it was handed now, whatever owns them when the load lands
            self.landing[rid] = (total, [list(t) for t in self.alloc.block_ids(rid)])
            self._deliver(rid, total, loading=True)
        else:
            self._deliver(rid, total)

    def _deliver(self, rid: str, total: int, loading: bool = False, tables=None) -> None:
        """Write what the connector loaded into `tables` (default: the request's blocks now); `loading`: mark those
        blocks as holding nothing valid yet."""
        r = self.reqs[rid]
        tables = tables if tables is not None else self.alloc.block_ids(rid)
        B = self.eg.block_size
        col = (total - 1) // B
        local = self.connector.offered.get(rid, (0,))[0]  # the local hit the connector was shown
        # the states loaded: the boundary state; in mode all every loaded block's (each block's state is cached)
        first = local // B if self.eg.mamba_cache_mode == "all" else col
        for g in self.mamba_groups:  # every Mamba group's layers load their states (one per group, same boundary)
            for c in range(first, col + 1):
                n = min((c + 1) * B, total)
                if c < len(tables[g]) and tables[g][c] and (loading or not self._load_fails(rid)):
                    # a failed load writes nothing
                    self.worker.deliver(tables[g][c], None if loading else (n, r.fps[n]))
        if self.backend is not None and not loading and not self._load_fails(rid):  # the model's state and keys/values
            table = tables[self.mamba_groups[0]]
            self.backend.deliver(rid, list(r.vreq.all_token_ids)[:total], table[col] if col < len(table) else None,
                                 tables[self.attn_groups[0]], local)

    def _land_loads(self, done: set[str]) -> None:
        """The async loads a step reports finished have landed: their states are in the blocks now."""
        for rid in sorted(done):
            landing = self.landing.pop(rid, None)
            if landing is not None:
                total, tables = landing
                self._deliver(rid, total, tables=tables)

    # -- the loop -----------------------------------------------------------------------------------------
    def run(self) -> Trace:
        if self.backend is None:
            return run_steps(self)
        with self.backend.session():
            trace = run_steps(self)
            if trace.exception is None:  # every generation scored against the uncached reference
                trace.outputs = self.backend.outputs(
                    (r.id, list(r.vreq.all_token_ids), r.vreq.num_prompt_tokens) for r in self.reqs.values())
        return trace

    def _all_done(self) -> bool:
        return all(r.finished for r in self.reqs.values())

    def _progress(self) -> tuple:
        """What a step can change that the next one schedules by: each request's status, computed and known tokens,
        outputs in flight, whether its blocks can be freed now (a request in the step still in flight is not
        preempted, scheduler.py:940-941, 3077-3082 in 0.33.0), the free blocks and the deferred frees."""
        freeable = getattr(self.sched, "_request_blocks_can_be_freed", None)  # 0.30+: a preemption waits for it
        # the steps whose output the scheduler has processed: with deferred frees (0.26+) a request of the step in
        # flight becomes freeable when it advances (0.26-0.29 have no `_request_blocks_can_be_freed`, but the fix
        # of deferred-free-preemption-livelock waits for the same thing)
        processed = getattr(self.sched, "processed_step_seq", None)
        return (tuple((r.vreq.status, r.vreq.num_computed_tokens, r.vreq.num_tokens,
                       getattr(r.vreq, "num_output_placeholders", 0), freeable and freeable(r.vreq))
                      for r in self.reqs.values()),
                self.alloc.block_pool.get_num_free_blocks(), len(getattr(self.sched, "deferred_frees", ())), processed)

    def _unfinished(self) -> dict[str, str]:
        # (a request vLLM finished itself, e.g. FINISHED_ERROR after a failed load, is finished)
        return {r.id: r.vreq.status.name.lower() for r in self.reqs.values()
                if r.arrived and not r.finished and not r.vreq.is_finished()}

    def _stuck(self, step: int) -> bool:
        in_flight = any(so.total_num_scheduled_tokens for _, so, _ in self.batch_queue)
        if step == 0 or self.last_scheduled or self.loads or self.reported_loads or in_flight:
            # (async scheduling: a batch still in flight reports, and what it frees is rescheduled; an empty
            # batch, which the engine loop queues every step, runs nothing and frees nothing)
            return False
        if any(not r.arrived and not r.finished for r in self.reqs.values()):
            return False
        return not any(s >= step for s in self.events)

    def _step(self, step: int) -> None:
        sched = self.sched
        for ev in self.events.get(step, ()):
            self._apply_event(ev)
        for r in self.reqs.values():
            if not r.arrived and not r.finished and r.spec.arrival_step <= step:
                r.arrived = True
                self._call(r.id, "add_request", sched.add_request, r.vreq)
        so = self.so = self._call("", "schedule", sched.schedule)
        self._record_admissions(so, step)
        self._record_reservations(step)
        self._check_output(so)
        self._check_chunks(so)
        core_tables = {rid: self.alloc.block_ids(rid) for rid in so.num_scheduled_tokens}
        seq_fps = {}
        for rid in so.num_scheduled_tokens:
            r = self.reqs[rid]
            drafts = list(so.scheduled_spec_decode_tokens.get(rid, ()))
            seq_fps[rid] = r.fps + chain([r.fps[-1]], drafts)[1:] if drafts else r.fps
        self.last_scheduled = len(so.num_scheduled_tokens)
        self.trace.copies.extend((step, c.src_block_id, c.dst_block_id)
                                 for c in (getattr(so, "kv_cache_block_copies", None) or ()))
        # the worker runs vLLM's runner code: an exception raised inside vLLM is its finding (_call)
        if self.asynchronous:  # the pages this forward writes: those numbered inside its marks (publication oracle)
            start = self.states.write_mark()
            self._call("", "execute_model", self.worker.execute, so, step, seq_fps, core_tables)
            self.forward_marks[step] = (start, self.states.write_mark())
            self._queue_batch(so, step)
            return
        self._call("", "execute_model", self.worker.execute, so, step, seq_fps, core_tables)
        # the driver's token rule (or the model's verification) for workers whose runner does not sample (V2's does)
        sampled, accepted = ({}, {}) if self.worker_drafts else self._sample(so)
        ids, sampled_ids = self._call("", "sample_tokens", self.worker.sample, so, step, sampled, accepted, seq_fps)
        self._update(so, step, ids, sampled_ids)

    def _update(self, so, step: int, ids: list[str], sampled_ids: list) -> None:
        """`update_from_output` with a step's sampled tokens and the async loads finished by now."""
        done = {rid for rid, s in self.loads.items() if s <= step}
        for rid in done:
            del self.loads[rid]
        self._land_loads(done)
        self.reported_loads = bool(done)  # vLLM takes them out of WAITING_FOR_REMOTE_KVS next step
        out = self._runner_output(ids, sampled_ids, self._loads_output(done) if done else None)
        in_flight = [s for _, _, s in self.batch_queue]
        before = set(self.alloc.cached_mamba_entries()) if in_flight else None
        self._call("", "update_from_output", self.sched.update_from_output, so, out)
        self._after_output(ids)
        after = self._check_cache(step)
        if in_flight:
            # in the cache's own order (a set's order of bytes keys changes with the process's hash seed)
            self._record_publication(step, [key for key in after if key not in before], in_flight)

    def _record_publication(self, step: int, published: list, in_flight: list[int]) -> None:
        """The Mamba keys `update_from_output` published (0.33+: the finalized states after a sampled step,
        scheduler.py:2449-2470 in 0.34.0) whose page a forward still in flight wrote: the publication oracle's
        input. (Keys published while scheduling are not judged: vLLM caches a chunk's blocks as it schedules them,
        kv_cache_manager.py:636-646, and keeps them from lookups until the next step, cached_blocks_this_step.)"""
        version = self.states.version
        for key in published:
            v = version.get(key[1], 0)
            writer = next((s for s in in_flight if self.forward_marks[s][0] < v <= self.forward_marks[s][1]), None)
            if writer is not None:
                rid, n = self.cache.hash_owner.get(key[0], ("?", 0))
                self.trace.published_in_flight.append((step, key[1], f"{rid}[:{n}]", writer))

    def _queue_batch(self, so, step: int) -> None:
        """EngineCore.step_with_batch_queue (v1/engine/core.py:734-795): this step's batch joins the queue; the
        oldest batch's output is taken (and the scheduler updated) only once the queue is full, or when
        nothing more can be scheduled. The next `schedule()` therefore runs before this step's tokens are
        known: the scheduler holds placeholders, the worker fills them from its own state."""
        executed = so.total_num_scheduled_tokens > 0
        pending = self._call("", "sample_tokens", self.worker.sample_later, so, step) if executed else None
        self.batch_queue.insert(0, (pending, so, step))
        if len(self.batch_queue) < self.vc.max_concurrent_batches and (executed or self.sched.has_requests()):
            return
        self._take_oldest_batch()

    def _take_oldest_batch(self) -> None:
        pending, so, step = self.batch_queue.pop()
        ids, sampled_ids = self._call("", "get_output", self.worker.collect, pending) if pending is not None else ([], [])
        self._update(so, step, ids, sampled_ids)

    def _record_admissions(self, so, step: int) -> None:
        """What a request with a prefix-cache hit limit starts from each time it is (re)admitted: the hit-limit
        oracle's input; and what each request's first admission started from (`trace.served`)."""
        for new in so.scheduled_new_reqs:
            self.trace.served.setdefault(new.req_id, new.num_computed_tokens)  # the first admission's start
            limit = self.reqs[new.req_id].spec.prefix_cache_hit_limit
            if limit is not None:
                self.trace.hit_limited.append((step, new.req_id, limit, new.num_computed_tokens))

    def _record_reservations(self, step: int) -> None:
        """The scheduler's parked-load bookkeeping (0.34.0: scheduler.py:3566-3585, 2842-2850) beside what the
        requests' own states say is parked or loading: the reservations oracle's input."""
        sched = self.sched
        if not hasattr(sched, "_parked_reserved_blocks"):
            return
        # a parked load keeps its reservation until it is scheduled (promoted, it waits in a queue): any request not
        # yet running may hold one, none once every request runs or is done
        statuses = [r.status.name for r in sched.requests.values()]
        waiting = sum(s.startswith("WAITING") or s == "PREEMPTED" for s in statuses)
        holding = statuses.count("WAITING_FOR_REMOTE_KVS") + len(getattr(sched, "_aborted_kv_loads", ()))
        cap = getattr(sched.scheduler_config, "max_num_inflight_kv_loads", None)
        self.trace.reservations.append((step, waiting, sched._parked_reserved_blocks, holding, cap))

    def _check_output(self, so) -> None:
        """A SchedulerOutput no runner can execute is vLLM's fault: a request with as many spec-decode rows as
        scheduled tokens has no row left for its sampled token (0.27.1 pads a new request to 1 + K rows,
        then the Mamba split clips the rows and keeps the K placeholder drafts; 0.33.0 drops the padding
        then, scheduler.py:1359-1370). Recorded like an exception vLLM raised, at the scheduler."""
        for rid, ns in so.num_scheduled_tokens.items():
            nd = len(so.scheduled_spec_decode_tokens.get(rid, ()))
            if nd and nd >= ns:
                raise VllmRaised(VllmException(
                    self.step_idx, rid, "schedule",
                    f"SchedulerOutput schedules {ns} token(s) with {nd} spec-decode token(s) for request {rid}: "
                    "no row for the sampled token", "vllm/v1/core/sched/scheduler.py in schedule (spec-decode rows)"))

    def _check_chunks(self, so) -> None:
        """A scenario's explicit prefill chunks must be what the real scheduler schedules on its own."""
        for rid, ns in so.num_scheduled_tokens.items():
            r = self.reqs[rid]
            chunks = r.spec.chunks
            v = r.vreq
            before = v.num_computed_tokens - ns
            if not chunks or before >= v.num_prompt_tokens:
                continue
            i = self.chunk_idx.get(rid, 0)
            if i >= len(chunks):
                continue
            if chunks[i] != ns:
                raise BadInput(f"requests[{rid}].chunks[{i}] = {chunks[i]}: vLLM {self.trace.vllm_version}'s scheduler "
                               f"schedules {ns} tokens from {before} at step {self.step_idx} under token budget "
                               f"{self.sc.geometry.token_budget}; the engine tier cannot force another chunk")
            self.chunk_idx[rid] = i + 1

    def _sample(self, so) -> tuple[dict[str, list[int]], dict[str, int]]:
        """The runner's sampled tokens: nothing for a non-final prefill chunk, else the verified drafts and
        one more token, by the deterministic rule over prefix fingerprints."""
        sampled: dict[str, list[int]] = {}
        accepted: dict[str, int] = {}
        for rid in so.num_scheduled_tokens:
            r = self.reqs[rid]
            v = r.vreq
            drafts = list(so.scheduled_spec_decode_tokens.get(rid, ()))
            if v.num_computed_tokens - len(drafts) < v.num_tokens:
                sampled[rid], accepted[rid] = [], 1
                continue
            sampled[rid] = verify(self.backend, r, self.step_idx, drafts)
            accepted[rid] = len(sampled[rid])
        return sampled, accepted

    def _after_output(self, ids: list[str]) -> None:
        """Follow vLLM's requests: fingerprints of their real tokens, finished ones, next drafts."""
        draft_ids, drafts = [], []
        for rid in ids:
            r = self.reqs[rid]
            v = r.vreq
            r.truth.record(v.all_token_ids)
            if v.is_finished():
                r.finished = True
                continue
            if self.K and not v.is_prefill_chunk and not self.worker_drafts:
                nd = drafts_wanted(self.K, r.spec.max_tokens, v.num_output_tokens)
                draft_ids.append(rid)
                drafts.append(propose(self.backend, r, nd) if nd > 0 else [])
        if self.asynchronous:  # the worker keeps its drafts; the scheduler holds placeholders (core.py:699-706)
            return
        if self.worker_drafts and self.K:  # V2: the runner's drafter proposed; the scheduler gets V2's answer
            taken = self._call("", "take_draft_token_ids", self.worker.take_drafts)
            if taken is not None:
                self._call("", "update_draft_token_ids", self.sched.update_draft_token_ids, taken)
        elif draft_ids:
            self._call("", "update_draft_token_ids", self.sched.update_draft_token_ids,
                       self.DraftTokenIds(draft_ids, drafts))

    # -- events and shutdown ------------------------------------------------------------------------------
    def _apply_event(self, ev) -> None:
        r = self.reqs[ev.request]
        sched, status = self.sched, self.v.RequestStatus
        if ev.kind == "preempt":
            if r.arrived and not r.finished and r.vreq.status == status.RUNNING and r.vreq in sched.running:
                sched.running.remove(r.vreq)
                self._call(r.id, "_preempt_request", self._force_preempt, r.vreq)
        elif ev.kind == "abort":
            if r.arrived and not r.finished:
                # an async load in flight still completes: vLLM frees the blocks of a request aborted in
                # WAITING_FOR_REMOTE_KVS only when finished_recving reports it (finish_requests)
                self._call(r.id, "finish_requests", sched.finish_requests, r.id, status.FINISHED_ABORTED)
            r.finished = True

    def _force_preempt(self, vreq) -> None:
        """vLLM's preemption outside `schedule()`: the forced one of reset_prefix_cache(reset_running_requests=
        True) (scheduler.py:3194-3210 in 0.33.0, :2336-2360 in 0.26.0), for one request. Its in-flight output
        is dropped (`drop_stale_output`; 0.26: `async_tokens_to_discard`), and it is taken out of the
        previous step's scheduled set, since it may resume in the very next schedule(): the V1 runner then
        flushes it from its persistent batch and takes its tokens from the scheduler (`all_token_ids`)."""
        sched = self.sched
        if "drop_stale_output" in parameters(type(sched)._preempt_request):
            sched._preempt_request(vreq, time.monotonic(), drop_stale_output=True)
        else:
            sched._preempt_request(vreq, time.monotonic())
            if hasattr(vreq, "async_tokens_to_discard"):
                vreq.async_tokens_to_discard = vreq.num_output_placeholders
                vreq.num_output_placeholders = 0
        # 0.34.0 has no such set: a resumed request is re-sent in full, like a new one (scheduler.py:1619-1626)
        getattr(sched, "prev_step_scheduled_req_ids", set()).discard(vreq.request_id)

    def _shutdown(self) -> None:
        while self.batch_queue:  # the batches still in flight report first
            self._take_oldest_batch()
        live = [r.id for r in self.reqs.values() if r.arrived and not r.finished]
        if live:
            self._call("", "finish_requests", self.sched.finish_requests, live, self.v.RequestStatus.FINISHED_ABORTED)
        for r in self.reqs.values():
            r.finished = True
        if self.loads:  # one more engine step reports the loads in flight, so vLLM frees their blocks
            so = self._call("", "schedule", self.sched.schedule)
            done, self.loads = set(self.loads), {}
            out = self._runner_output([], [], self._loads_output(done))
            self._call("", "update_from_output", self.sched.update_from_output, so, out)

    def _runner_output(self, ids: list[str], sampled_ids: list, kv_connector_output):
        """A ModelRunnerOutput as the runner reports it; `req_id_to_index` only where the release has it (gone in
        0.34.0, v1/outputs.py:267)."""
        return self.ModelRunnerOutput(**supported_kwargs(
            self.ModelRunnerOutput, req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled_ids, kv_connector_output=kv_connector_output))

    def _load_fails(self, rid: str) -> bool:
        ext = self.reqs[rid].spec.external
        return ext is not None and ext.load_fails

    def _loads_output(self, done: set[str]):
        """Finished async loads as a worker-side connector reports them; a failed one in `failed_recving` as
        well (by request: vLLM refuses block-level `invalid_block_ids` with several KV cache groups,
        scheduler.py:3703-3721 in 0.33.0), so the scheduler's own recovery runs (`_handle_failed_recving`,
        `_update_waiting_for_remote_kv`, under `kv_load_failure_policy`)."""
        failed = {rid for rid in done if self._load_fails(rid)}
        if failed:
            return self.KVConnectorOutput(finished_recving=done, failed_recving=failed)
        return self.KVConnectorOutput(finished_recving=done)

    def _check_cache(self, step: int) -> list[tuple[bytes, int]]:
        """Record the cache-integrity inputs after a step; returns the Mamba cache entries it read (the publication
        check compares them with those before `update_from_output`)."""
        entries = self.alloc.cached_mamba_entries()
        self.cache.record(step, {rid: (r.vreq.block_hashes, r.fps) for rid, r in self.reqs.items()}, entries)
        self.cache.record_key_breaks(step, self.alloc.cache_key_breaks())
        return entries


def _retention(scenario: Scenario, sched) -> Retention | None:
    """The retention oracle's geometry with EAGLE's block drop as the Scheduler resolved it (0.34.0 turns it off
    under lookahead block hashes, scheduler.py:342-345; releases without the attribute: the scenario's)."""
    return Retention.of(scenario.geometry, getattr(sched, "use_eagle_block_drop", None))


def hit_limit_params(limit: int | None) -> dict:
    """The SamplingParams a user gives for a prefix-cache hit limit (v1/request.py:364-378 in 0.34.0): prompt
    logprobs from token `limit` with cache reads allowed; 0: skip reading the prefix cache."""
    if limit is None:
        return {}
    if limit == 0:
        return {"skip_reading_prefix_cache": True}
    return {"prompt_logprobs": 1, "prompt_logprob_start": limit, "skip_reading_prefix_cache": False}


def replay(scenario: Scenario, mutant: str | None = None, options: EngineOptions | None = None,
           model: str = "random") -> Trace:
    return EngineDriver(scenario, mutant, options, model).run()
