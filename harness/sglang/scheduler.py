"""`MiniScheduler`: the parts of SGLang's Scheduler a single-GPU, non-overlap, FCFS, no-spec, no-LoRA run takes,
copied from srt/managers/scheduler.py (0.5.23; each method cites its lines), around SGLang's own PrefillAdder,
ScheduleBatch, deferred CoW and batch-result processor. The forward is harness/sglang/forward.py's.
"""

from __future__ import annotations

import time
from array import array

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.mem_cache.common import checkpoint_kv_cache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from harness.scenario import VOCAB_SIZE
from harness.sglang.forward import simulated_forward
from harness.sglang.geometry import MAX_RUNNING


def make_req(rid: str, tokens: list[int], max_new: int) -> Req:
    sp = SamplingParams(temperature=0, max_new_tokens=max_new, ignore_eos=True)
    sp.normalize(None)
    return Req(rid=rid, origin_input_text="", origin_input_ids=array("q", tokens), sampling_params=sp,
               vocab_size=VOCAB_SIZE)


class MiniScheduler:
    def __init__(self, env) -> None:
        self.env = env
        self.chunked_prefill_size = env.geom.budget
        self.max_prefill_tokens = max(16384, env.geom.budget)
        self.waiting_queue: list[Req] = []
        self.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
        self.last_batch = None
        self.chunked_req = None
        self.forward_ct = 0

    def get_next_batch_to_run(self):  # scheduler.py:3894-4019
        running_batch, reqs_to_exclude = self.running_batch, set()
        if self.chunked_req is not None:  # :3911-3919
            reqs_to_exclude.add(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                checkpoint_kv_cache(self.chunked_req, self.env.cache)  # stash_chunked_request :3772
        last_batch = self.last_batch
        if last_batch and last_batch.forward_mode.is_extend():  # :3935-3961
            if last_batch.chunked_req is not None:
                reqs_to_exclude.add(last_batch.chunked_req)
            last_bs = last_batch.batch_size()
            last_batch.filter_batch(reqs_to_exclude=list(reqs_to_exclude))
            if last_batch.batch_size() < last_bs:
                running_batch.batch_is_full = False
            if not last_batch.is_empty() and last_batch is not running_batch:
                if running_batch.is_empty():
                    running_batch = last_batch
                else:
                    running_batch.merge_batch(last_batch)
        running_bs = running_batch.batch_size()  # :3965-3968
        running_batch.filter_batch()
        if running_batch.batch_size() < running_bs:
            running_batch.batch_is_full = False
        new_batch = self._get_new_batch_prefill_raw(running_batch)  # :3975 (no prefill delayer)
        ret = new_batch  # :3992-4003
        if new_batch is None and not running_batch.is_empty():
            ret = self.update_running_batch(running_batch)
            ret = ret if ret is not None and not ret.is_empty() else None
        self.running_batch = running_batch
        return ret

    def _adder(self, running_batch) -> PrefillAdder:  # scheduler.py:4157-4174
        env = self.env
        return PrefillAdder(env.geom.page, env.cache, env.alloc, running_batch, 0.7, self.max_prefill_tokens,
                            self.chunked_prefill_size, 0, 0, max_prefill_bs=0, max_running_requests=MAX_RUNNING,
                            prefill_max_requests=None, waiting_queue_len=len(self.waiting_queue))

    def _admit_waiting(self, adder, running_batch) -> None:  # scheduler.py:4199-4303 (no LoRA/hicache/preemption)
        env = self.env
        mamba_allocator = getattr(env.rtp, "mamba_allocator", None)
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_begin(len(self.waiting_queue))
        for req in self.waiting_queue:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            req.init_next_round_input(env.cache)
            res = adder.add_one_req(req, has_chunked_req=(self.chunked_req is not None), truncation_align_size=None)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    running_batch.batch_is_full = len(adder.can_run_list) > 0 or not running_batch.is_empty()
                if not (adder.can_run_list and req is adder.can_run_list[-1]):  # not added: give its slot back
                    req.kv.mamba_cow_src_index = None
                    req.kv.mamba_needs_clear = False
                    if req.kv.holds_mamba:
                        env.rtp.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
                        req.kv.mamba_pool_idx = None
                break
        if mamba_allocator is not None:  # :4302-4303
            mamba_allocator.alloc_group_end()

    def _get_new_batch_prefill_raw(self, running_batch):  # scheduler.py:4079-4414
        env = self.env
        if running_batch.is_empty():  # :4093-4096
            running_batch.batch_is_full = False
        if (running_batch.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None  # :4098-4101
        adder = self._adder(running_batch)
        if self.chunked_req is not None:  # :4176-4184 (FCFS: no chunk limit)
            self.chunked_req.init_next_round_input()
            adder.chunked_req_limit = None
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        self._admit_waiting(adder, running_batch)
        can_run_list = adder.can_run_list  # :4306-4333
        if not can_run_list:
            return None
        self.waiting_queue = [x for x in self.waiting_queue if x not in set(can_run_list)]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        new_batch = ScheduleBatch.init_new(  # :4335-4344
            can_run_list, env.rtp, env.alloc, env.cache, env.mc, False, SpeculativeAlgorithm.NONE,
            chunked_req=self.chunked_req)
        new_batch.contains_last_prefill_chunk = self.chunked_req is None or len(can_run_list) != 1
        new_batch.prepare_for_extend()  # :4357
        new_batch.decoding_reqs = None  # :4412 (no mixed chunk)
        return new_batch

    def update_running_batch(self, batch):  # scheduler.py:4459-4552 (no retraction)
        initial_bs = batch.batch_size()
        batch.filter_batch()
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        if not batch.check_decode_mem():
            raise RuntimeError("decode needs retraction, which the SGLang wing does not model")
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        batch.prepare_for_decode()
        return batch

    def run_batch(self, batch, trace, step: int):  # scheduler.py:4614-4623 counters; the forward simulated
        self.forward_ct += 1
        batch.forward_iter = self.forward_ct
        batch.launch_ts = time.monotonic()
        # ModelRunner._forward_raw -> _maybe_execute_deferred_mamba_cow_and_clear (model_runner.py:1915-1960);
        # ScheduleBatch carries the fields ForwardBatch does
        self.env.mr._maybe_execute_deferred_mamba_cow_and_clear(batch)
        return GenerationBatchResult(next_token_ids=simulated_forward(self.env, trace, step, batch))

    def process_batch_result(self, batch, result) -> None:  # scheduler.py:5088-5106
        if batch.forward_mode.is_decode():
            self.env.brp.process_batch_result_decode(batch, result)
        elif batch.forward_mode.is_extend():
            self.env.brp.process_batch_result_prefill(batch, result)
        self.env.cache.flush_pending_backups()
