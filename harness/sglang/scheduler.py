"""SGLang's real `Scheduler` (srt/managers/scheduler.py, 0.5.23; lines cited are that file's), made by
`Scheduler.__new__` plus the attributes that a single-GPU (tp 1, no DP attention), non-overlap, FCFS, no-spec or NGRAM,
no-LoRA, no-hicache, no-grammar, no-disaggregation, no-priority, no-mixed-chunk generation run reads, on the wing's
env (harness/sglang/env.py `build`). Import only after `runtime.patched` (harness/sglang/driver.py does).

SGLang's own, unmodified, called on that instance: `get_next_batch_to_run` (3894, with
`process_pending_chunked_abort`, `stash_chunked_request`, `_should_defer_prefill`, `_arm_prefill_decode_interval`),
`get_new_batch_prefill` (4052), `_get_new_batch_prefill_raw` (4079, with `get_num_allocatable_reqs` and
`get_prefill_adder_class`), `update_running_batch` (4459) with its retraction (`ScheduleBatch.retract_decode`, then
`_add_request_to_queue(req, is_retracted=True)`), `process_batch_result` (5074, with `publish_load_snapshot`,
`_record_step_counters`, `maybe_send_health_check_signal`) and `_add_request_to_queue` (3480), the driver's way in.
SGLang's own helper objects, built as Scheduler.__init__ builds them: `SchedulePolicy` ("fcfs"), `PrefillAdder`,
`NewTokenRatioTracker.from_config()`, `SchedulerDPAttnAdapter`, `NgramEmbeddingManager` (disabled), `BeamCoordinator`,
`SchedulerLoadInquirer`, `SchedulerLoadPublisher` (no endpoint: no socket), `GrammarManager` (by `__new__` with an
empty grammar queue: its constructor wants a tokenizer and process groups) and the env's
`SchedulerBatchResultProcessor`.

Stand-ins (harness/sglang/env.py `NoOp`, every method a no-op): `metrics_reporter` (SchedulerMetricsReporter needs
the metrics-collector context; metrics off), `ipc_channels` (send_abort_output's tokenizer socket: only a request
retract_decode aborts reaches it), and `tp_worker`, a namespace whose `model_runner` has an attention backend
without `extend_attention_block_m` (PrefillAdder's tile fallback 64) and `prefill_aware_swa` False. Not SGLang's:
`run_batch` (the wing's forward: run_batch's counters 4621-4633, the deferred CoW, `forward.simulated_forward`; with
speculation the non-overlap spec branch, `_run_spec`, around harness/sglang/spec.py's worker stand-in) and
`RealScheduler`, the driver's view of it, stepping the Scheduler as `event_loop_normal` (2026-2056)
does."""

from __future__ import annotations

import dataclasses
import time
from array import array
from collections import deque
from types import SimpleNamespace

from sglang.srt.beam_search.coordinator import BeamCoordinator
from sglang.srt.constrained.grammar_manager import GrammarManager
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.io_struct import AbortReq
from sglang.srt.managers.overlap_utils import resolve_forward_inputs
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import SchedulePolicy
from sglang.srt.managers.scheduler import PAUSE_WINDOWS_MAX, Scheduler
from sglang.srt.managers.scheduler_components.dp_attn import SchedulerDPAttnAdapter
from sglang.srt.managers.scheduler_components.load_inquirer import SchedulerLoadInquirer
from sglang.srt.managers.scheduler_components.load_publisher import SchedulerLoadPublisher
from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import NgramEmbeddingManager
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from harness.scenario import VOCAB_SIZE
from harness.sglang.env import NoOp
from harness.sglang.forward import simulated_forward
from harness.sglang.geometry import MAX_RUNNING, scenario_id, sglang_rid


def make_req(rid: str, tokens: list[int], max_new: int) -> Req:
    """A greedy request for `max_new` tokens. Not `ignore_eos`: SGLang then admits on its decaying new-token ratio
    (PrefillAdder reserves max_new_tokens x ratio, not all of it), so decode can outgrow the pool and retract, as
    users' requests do; the model config names no EOS token, so every request still runs to `max_new`."""
    sp = SamplingParams(temperature=0, max_new_tokens=max_new)
    sp.normalize(None)
    return Req(rid=sglang_rid(rid), origin_input_text="", origin_input_ids=array("q", tokens), sampling_params=sp,
               vocab_size=VOCAB_SIZE)


def _flags(s: Scheduler) -> None:
    """The configuration switches, all off; each with the scheduler.py lines that read it."""
    s.scheduler_stage_metrics = None  # the stage decorator (observability/scheduler_stage_metrics.py:176)
    s._pending_chunked_abort_req = None  # process_pending_chunked_abort :3792
    s.enable_hierarchical_cache = s.enable_lmcache = False  # :3884, :3887, :4240, :4351
    s.enable_hicache_storage = False  # :3890, :4240
    s.dllm_config = None  # :3900, :3906, :3944, :3970, :4171
    s.disaggregation_mode = DisaggregationMode.NULL  # :3488, stash_chunked_request :3773, :5096
    s.enable_hisparse = False  # :3922, :3935
    s.hisparse_coordinator = None  # :4349
    s._prefill_decode_interval_remaining = s.prefill_decode_interval = 0  # :1401, :1414
    s.require_mlp_sync = False  # :1422, :3979 (no DP attention)
    s.spec_algorithm = SpeculativeAlgorithm.NONE  # :3982, :4342 (NGRAM with speculation: `_spec`)
    s.prefill_delayer = None  # get_new_batch_prefill :4054, :4068
    s.enable_priority_preemption = s.is_hybrid_swa = False  # :4090, :4123, :4235
    s.min_free_slots_delayer = s.dynamic_chunk_sizer = None  # :4106, :4143
    s.is_mixed_chunk = False  # :4165, :4377
    s.priority_scheduling_preemption_threshold = 10  # :4166 (the server-args default; unused without priority)
    s.max_prefill_bs = 0  # :4167 (no prefill delayer)
    s.enable_lora = False  # :4186, :4209, :4276
    s.truncation_align_size = None  # :4273 (no deterministic inference)
    s.enable_priority_scheduling = False  # _set_or_validate_priority :3522, :4367
    s.abort_on_priority_when_disabled = s.schedule_low_priority_values_first = False  # :3523, :3530
    s.max_queued_requests = None  # _abort_on_queued_limit :3555
    s.enable_overlap = False  # :4341
    s.enable_skip_finishing_decode = False  # _reqs_finishing_inflight :4446 (set only by the overlap loop)
    s.decode_offload_manager = None  # update_running_batch :4480
    s.load_snapshot_writer = None  # publish_load_snapshot :875
    s.enable_fpm = False  # process_batch_result :5113
    s.mm_receiver = None  # abort_request :5682 (no multimodal receiver)
    s.enable_continuous_input_polling = False  # _collect_inflight_batches :5670 (abort_request's running reqs)
    s.return_health_check_ipcs = deque()  # maybe_send_health_check_signal :5183 (no probe pending)


def _sizes(s: Scheduler, env) -> None:
    """Pools, sizes, queues and counters."""
    s.page_size = env.geom.page  # :4158, :4182
    s.enable_unified_cache_external_linker = env.geom.external  # :517; :3886, :4351, :4926
    s.tree_cache = env.cache  # :3776, :4159, :4202
    s.token_to_kv_pool_allocator = env.alloc  # :4160, :4338, :4483
    s.req_to_token_pool = env.rtp  # get_num_allocatable_reqs :4040, :4199, :4337
    s.model_config = env.mc  # :4340
    s.chunked_prefill_size = env.geom.budget  # :4142
    s.max_prefill_tokens = max(16384, env.geom.budget)  # :4163 (server-args default 16384)
    s.max_running_requests = MAX_RUNNING  # :4168
    s.waiting_queue = []  # :3493, :4099, :4180
    s.chunked_req = None  # :3911, :4100
    s.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)  # :4038; event_loop_normal :2040
    s.last_batch = None  # event_loop_normal :2040, :2056
    s.processed_tokens_counter = 0  # :3495, :4132; run_batch :4633
    s.forward_ct = 0  # update_running_batch :4478; run_batch :4621
    s._sched_idled = False  # run_batch :4626
    s.total_prefill_uncached_tokens = s.total_prefill_busy_us = 0  # _record_step_counters :5171-5172
    s.decode_moment_totals = [0.0] * 6  # :5176
    s._prev_step = s._prev_prefill_end_ts = s._pause_started_at = None  # :5133, :5148, :5154
    s._pause_intervals = deque(maxlen=PAUSE_WINDOWS_MAX)  # :5153 (init_load_inquirer :2587)


def _helpers(s: Scheduler, env) -> None:
    """SGLang's own helper objects, as Scheduler.__init__ builds them, and the stand-ins the module docstring lists."""
    s.policy = SchedulePolicy("fcfs", env.cache, False, False, False)  # init_schedule_policy :1438; :4129, :4178
    s.new_token_ratio_tracker = NewTokenRatioTracker.from_config()  # :1474; :4162, :4484, :4513, :4542
    s.grammar_manager = GrammarManager.__new__(GrammarManager)  # :2416; :4085 (has_waiting_grammars: none)
    s.grammar_manager.grammar_queue = []
    s.tp_worker = SimpleNamespace(model_runner=SimpleNamespace(  # stand-in; :4151, :4359
        attn_backend=SimpleNamespace(), prefill_aware_swa=False))
    s.dp_attn_adapter = SchedulerDPAttnAdapter(  # :2495; :3989, :4008, :4014
        model_runner=env.mr, req_to_token_pool=env.rtp, token_to_kv_pool_allocator=env.alloc, tree_cache=env.cache,
        offload_tags=set(), model_config=env.mc, enable_overlap=False, spec_algorithm=s.spec_algorithm,
        get_require_mlp_sync=lambda: s.require_mlp_sync)
    s.ngram_embedding_manager = NgramEmbeddingManager(enabled=False, table=None, n=0)  # :1740; :4018
    s.beam_coordinator = BeamCoordinator(  # init_beam_coordinator :2651; :4042, :4523
        model_config=env.mc, spec_algorithm=s.spec_algorithm, dllm_enabled=False, max_req_len=env.geom.max_context,
        req_to_token_pool=env.rtp, token_to_kv_pool_allocator=env.alloc, tree_cache=env.cache, future_map=None)
    s.load_inquirer = _load_inquirer(s, env)  # init_load_inquirer :2591; :4368, :5086
    s.load_publisher = SchedulerLoadPublisher(kv_events_config=None, load_publish_endpoint=None,
                                              publish_interval=1)  # :2573; :5085 (no socket: publishes nothing)
    s.batch_result_processor = env.brp  # init_batch_result_processor :2664; :5092, :5101
    s.metrics_reporter = NoOp(enable_metrics=False, num_retracted_reqs=0)  # stand-in; :4502-4504, :5110, :5118
    s.rust_server = None  # send_abort_output :2275 (a request retract_decode aborts)
    s.ipc_channels = NoOp(send_to_tokenizer=NoOp())  # stand-in; send_abort_output :2279


def _load_inquirer(s: Scheduler, env) -> SchedulerLoadInquirer:
    none = lambda: None  # the disaggregation queues and statistics this run has not
    return SchedulerLoadInquirer(
        disaggregation_mode=s.disaggregation_mode, server_args=None, max_total_num_tokens=env.geom.kv_size,
        max_running_requests=MAX_RUNNING, pool_stats_observer=None, tp_worker=s.tp_worker,
        token_to_kv_pool_allocator=env.alloc, spec_algorithm=s.spec_algorithm,
        get_running_batch=lambda: s.running_batch, get_waiting_queue=lambda: s.waiting_queue,
        waiting_queue_prefix_matched=lambda: s.policy.waiting_queue_prefix_matched(s.waiting_queue),
        get_recent_cache_hit_rate=lambda: 0.0, get_stats=none, get_chunked_req=lambda: s.chunked_req,
        get_disagg_prefill_bootstrap_queue=none, get_disagg_prefill_inflight_queue=none,
        get_disagg_decode_prealloc_queue=none, get_disagg_decode_transfer_queue=none,
        get_spec_total_num_accept_tokens=lambda: 0, get_spec_total_num_forward_ct=lambda: 0,
        get_total_prefill_uncached_tokens=lambda: s.total_prefill_uncached_tokens,
        get_total_prefill_busy_us=lambda: s.total_prefill_busy_us,
        get_decode_moment_totals=lambda: s.decode_moment_totals, get_waiting_storage_span=None)


def _spec(s: Scheduler, env, worker) -> None:
    """NGRAM speculation (harness/sglang/spec.py): the algorithm (read by the helpers `_helpers` builds), the future
    map as Scheduler.__init__ makes it (init_future_map: `create_future_map`), the worker stand-in as model worker
    and as the result processor's model and draft worker (a frozen dataclass: rebuilt with them)."""
    s.spec_algorithm = SpeculativeAlgorithm.NGRAM
    s.future_map = s.spec_algorithm.create_future_map("cpu", env.rtp)
    s.model_worker = s.draft_worker = worker
    env.brp = dataclasses.replace(env.brp, model_worker=worker, draft_worker=worker)


def build_scheduler(env, worker=None) -> Scheduler:
    """SGLang's Scheduler, uninitialised (`__new__`), with the attributes its scheduling and result paths read;
    with `worker` (harness/sglang/spec.py), NGRAM speculation."""
    s = Scheduler.__new__(Scheduler)
    _flags(s)
    if worker is not None:
        _spec(s, env, worker)
    _sizes(s, env)
    _helpers(s, env)
    return s


def run_batch(s: Scheduler, env, batch, trace, step: int) -> GenerationBatchResult:
    """The wing's forward in place of Scheduler.run_batch: its counters (scheduler.py:4621-4633), the deferred CoW
    (model_runner.py:1915-1960, as ModelRunner._forward_raw runs it) and the simulated forward."""
    s.forward_ct += 1  # :4621-4623
    batch.forward_iter = s.forward_ct
    batch.launch_ts = time.monotonic()
    batch.after_idle_gap = s._sched_idled  # :4626-4629 (read by _record_step_counters)
    s._sched_idled = False
    if batch.extend_num_tokens:  # :4632-4633
        s.processed_tokens_counter += batch.extend_num_tokens
    env.mr._maybe_execute_deferred_mamba_cow_and_clear(batch)
    if s.spec_algorithm.is_none():
        result = GenerationBatchResult(next_token_ids=simulated_forward(env, trace, step, batch))
    else:
        result = _run_spec(s, batch, trace, step)
    if s.enable_unified_cache_external_linker:  # :4926-4931
        failed = s.tree_cache.finish_external_linker_loads(batch.reqs)
        if s.chunked_req in failed:
            s._pending_chunked_abort_req = s.chunked_req
        # SGLang drops these requests' output and never inserts their KV (unified_radix_cache.py:3631-3649): what
        # their kernels read is not served, so it is not a read of the trace
        dropped = {scenario_id(r) for r in failed}
        trace.reads[:] = [r for r in trace.reads if r.step != step or r.request not in dropped]
    return result


def _run_spec(s: Scheduler, batch, trace, step: int) -> GenerationBatchResult:
    """The non-overlap branch of Scheduler.run_batch for speculative decoding (scheduler.py:4763-4770, 4823-4856;
    pp size 1: no verify relay round), SGLang's own forward isolation included."""
    s.model_worker.at(trace, step)
    resolve_forward_inputs(batch, s.future_map)  # :4826
    with s._forward_isolation(batch, overlap=False):  # :4827-4830
        result = s.model_worker.forward_batch_generation(batch)
    batch.spec_info = result.next_draft_input  # :4836-4840 (is_verify_round is False at pp size 1)
    new_seq_lens = result.new_seq_lens  # :4841-4847
    if new_seq_lens is not None and new_seq_lens is not batch.seq_lens:
        batch.seq_lens = new_seq_lens
        if batch.seq_lens_cpu is not None:
            batch.seq_lens_cpu = new_seq_lens.to("cpu")
            batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
    batch.input_ids = None  # :4848
    s.update_cache_from_scheduler(batch, result)  # :4849 (a no-op hook)
    return result  # :4850-4856: the copy to the host (the wing's tensors are on it)


class _Queue:
    """The waiting queue as the driver sees it: `append` is SGLang's `_add_request_to_queue` (scheduler.py:3480),
    reads go to the Scheduler's own list (which `_get_new_batch_prefill_raw` replaces, :4330)."""

    def __init__(self, s: Scheduler) -> None:
        self.s = s

    def append(self, req) -> None:
        self.s._add_request_to_queue(req)

    def __len__(self) -> int:
        return len(self.s.waiting_queue)

    def __iter__(self):
        return iter(self.s.waiting_queue)


class RealScheduler:
    """The driver's view (harness/sglang/driver.py `_run`) of the real Scheduler `self.s`,
    stepping it as event_loop_normal (scheduler.py:2026-2056) does; `last_batch` is None after an idle step."""

    def __init__(self, env, worker=None) -> None:
        self.env = env
        self.s = build_scheduler(env, worker)
        self.waiting_queue = _Queue(self.s)

    @property
    def chunked_req(self):
        return self.s.chunked_req

    @property
    def running_batch(self):
        return self.s.running_batch

    def get_next_batch_to_run(self):
        plan = self.s.get_next_batch_to_run(running_batch=self.s.running_batch, last_batch=self.s.last_batch)
        self.s.running_batch = plan.running_batch  # :2042
        if plan.batch_to_run is None:
            self.s._sched_idled = True  # :2052 (on_idle only self-checks)
            self.s.last_batch = None  # :2056
        return plan.batch_to_run

    def abort(self, request_id: str) -> None:
        """SGLang's own abort of one request, as the tokenizer's AbortReq reaches it (scheduler.py:5675)."""
        self.s.abort_request(AbortReq(rid=sglang_rid(request_id)))

    def run_batch(self, batch, trace, step: int):
        return run_batch(self.s, self.env, batch, trace, step)

    def process_batch_result(self, batch, result) -> None:
        self.s.process_batch_result(batch, result)

    @property
    def last_batch(self):
        return self.s.last_batch

    @last_batch.setter
    def last_batch(self, batch) -> None:
        self.s.last_batch = batch  # :2056
