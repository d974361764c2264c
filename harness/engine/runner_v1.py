"""The engine tier's worker side as vLLM's own V1 model runner (`--runner v1`), only the forward simulated.

`V1Worker` builds vLLM's `CPUModelRunner` (v1/worker/cpu_model_runner.py: a GPUModelRunner whose device
buffers are host buffers) for the scenario's VllmConfig and runs, per step, the runner's own code:
- `_update_states(so)` (gpu_model_runner.py:1176 in 0.33.0): finished/unscheduled rows, attention-page
  zeroing, CoW copies (`copy_kv_cache_blocks_inplace` on the real state tensors), new/resumed/running rows,
  the persistent batch (add_request resets num_accepted_tokens, gpu_input_batch.py:479);
- `_prepare_inputs(so, num_scheduled)` (:1924): block-table commit, seq lens, accepted-count sync;
- `mamba_utils.preprocess_mamba(...)` with the arguments execute_model gives it (:4050-4091): running
  column per request and the align pre-copies (non-fused `collect_mamba_copy_meta` + `batch_memcpy` when
  K = 0; the fused pre-copy kernel when K > 0), then the accepted counts re-synced as execute_model does;
- the runner's own attention metadata (`_build_attention_metadata`, :2253): the runner is built with
  attention backends (initialize_kv_cache's backend part: a stand-in attention backend for the attention
  group, vLLM's real Mamba2 backend and metadata builder for the Mamba group), so its batch is reordered at
  the builder's `reorder_batch_threshold` (`_may_reorder_batch`, decode rows first) and the Mamba2 builder
  splits decode and prefill rows and gives the kernels their state indices (`state_indices_tensor_d/_p`,
  `has_initial_states_p`, `num_accepted_tokens`);
- the SIMULATED forward: each request's initial state is read where the Mamba2 kernels read it, from that
  metadata only (harness/engine/mamba_meta.py), and state tags (harness.engine.tagged) are written where the
  kernels write;
- the sampler's result into `_update_states_after_model_execute` (:1548: accepted counts and the fused
  spec post-copy, K > 0) and `_bookkeeping_sync` (:3434), whose valid sampled ids and request order are
  what the worker reports to the scheduler.

Kernels: vLLM launches Triton kernels here (mamba_utils.batch_memcpy_kernel and the fused align
kernels); on this CPU-only machine they run as harness.engine.kernels_v1's replacements, registered with
vLLM's kernel dispatcher. State reads consumed by copies are recorded just before the bytes move: from
`collect_mamba_copy_meta` (non-fused; every copy it lists runs after the loop) and from the fused kernels.

Recorded, as the mirror worker records it (harness/worker.py), so the oracles keep their meaning: one
RowView per request and Mamba group per step (the worker row is the runner's `input_batch.block_table`
row; prev/curr from the runner's `mamba_state_idx`), a Read per state consumed ("initial", "precopy",
"postcopy").

Process set-up and host stand-ins: harness/engine/v1_process.py; the runner pool: harness/engine/v1_pool.py.
"""

from __future__ import annotations

import functools

import numpy as np

from harness.errors import BadInput
from harness.states import chain, column_block, copy_source
from harness.tokens import true_token
from harness.trace import Read, RowView
from harness.vllm_adapter import installed_version, parameters, supported_kwargs
from harness.worker import Forward
from harness.engine.copy_timing import CopyTiming
from harness.engine.mamba_meta import kernel_rows, write_row
from harness.engine.model_geometry import conv_window_only, state_copy_funcs
from harness.engine.v1_eagle import EagleStep
from harness.engine.v1_pool import POOL, POOL_SIZE, Pooled, reinitialize_input_batch, replace_spec, runner_key
from harness.engine.v1_process import (
    PROCESS,
    entry_points_scanned_once,
    host_streams,
    init_process,
    supported,
)


class ScenarioDrafter:
    """The drafter the runner builds for K > 0: the drafts come from the scenario (the engine driver sends
    them through update_draft_token_ids), so nothing is proposed here. vLLM's n-gram proposer imports
    numba, which this environment lacks; the runner loads this class through vLLM's own custom-proposer
    hook (spec_decode/custom_class_proposer.py)."""

    def __init__(self, vllm_config) -> None:
        self.vllm_config = vllm_config

    def propose(self, *args, **kwargs):
        raise NotImplementedError("the engine tier's drafts come from the scenario")

    def load_model(self, *args, **kwargs) -> None:
        return None


class _scenario_drafter:
    """While the runner is built, the n-gram (or relabelled EAGLE, config._as_eagle) config reads as
    `custom_class` naming ScenarioDrafter; restored after (the Scheduler and the runner's later steps see the
    method as built)."""

    def __init__(self, spec) -> None:
        self.spec = spec

    def __enter__(self):
        if self.spec is not None and self.spec.method in ("ngram", "eagle", "mtp"):  # eagle, mtp: relabelled n-gram
            self.saved = (self.spec.method, self.spec.model, self.spec.draft_model_config)
            object.__setattr__(self.spec, "method", "custom_class")
            object.__setattr__(self.spec, "model", f"{__name__}.ScenarioDrafter")
            object.__setattr__(self.spec, "draft_model_config", None)  # mtp: config._as_mtp's stand-in checkpoint
        return self

    def __exit__(self, *exc) -> None:
        if getattr(self, "saved", None):
            for name, value in zip(("method", "model", "draft_model_config"), self.saved):
                object.__setattr__(self.spec, name, value)


def _checkpoint_builders_as_configured(runner) -> None:
    """The Mamba2 builders' prefill checkpoint part, built again once the drafter's stand-in is gone: it reads
    EAGLE's block drop from the speculative config when built (checkpoint.py:104-110 in 0.33.0), and the runner
    was built with the config relabelled `custom_class` (`_scenario_drafter`)."""
    for groups in runner.attn_groups:
        for group in groups:
            for builder in group.metadata_builders:
                ckpt = getattr(builder, "checkpoint_builder", None)
                if ckpt is not None:
                    builder.checkpoint_builder = type(ckpt)(ckpt.vllm_config, ckpt.kv_cache_spec)


class _SimModel:
    """The model object the runner asks for its Mamba state copy functions (vLLM's own for each Mamba type)."""

    def __init__(self, mixer: str = "mamba2") -> None:
        self.mixer = mixer  # the model's Mamba type (releases < 0.33 ask for one)

    def get_mamba_state_copy_funcs(self, mamba_types):
        return {t: state_copy_funcs(t) for t in mamba_types}

    def get_mamba_state_copy_func(self):  # releases < 0.33: one Mamba type per model
        return state_copy_funcs(self.mixer)


class V1Worker:
    runner_name = "v1"

    def __init__(self, driver) -> None:
        """vLLM's V1 runner built for the driver's config, its KV cache bound to the harness's state pages.
        Long: the build order is vLLM's own (kernels, streams, runner, cache config, attention groups) and
        each step depends on the one before."""
        why = supported()
        if why:
            raise BadInput(f"--runner v1: vLLM {installed_version()} is not supported by the V1 worker: {why}")
        opts = driver.options
        # async scheduling as vLLM decides it, where this worker follows it (config.follows_async)
        self.asynchronous = bool(driver.vc.scheduler_config.async_scheduling)
        if opts.kernels == "triton":
            try:
                import triton  # noqa: F401
            except ImportError:
                raise BadInput("--kernels triton: Triton is not installed (use --kernels torch)") from None
        import torch
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.layers.mamba.mamba_utils import (
            MambaStateShapeCalculator,
            is_conv_state_dim_first,
        )
        from vllm.v1.outputs import ModelRunnerOutput, SamplerOutput
        from vllm.v1.worker import mamba_utils
        from vllm.v1.worker.gpu_model_runner import AsyncGPUModelRunnerOutput

        from harness.engine import kernels_v1
        from harness.engine.tagged import TaggedStates

        self.torch, self.mamba_utils, self.SamplerOutput = torch, mamba_utils, SamplerOutput
        self.ModelRunnerOutput, self.AsyncOutput = ModelRunnerOutput, AsyncGPUModelRunnerOutput
        self.set_config = set_current_vllm_config
        self.kernels_v1 = kernels_v1
        self.kernels = opts.kernels
        self.driver, self.trace = driver, driver.trace
        self.truths = driver.truths  # the scenario's model of every request's tokens (harness.tokens)
        # --forward model: the model tier's backend (harness.model_tier) runs at the indices vLLM's runner computes
        self.backend = getattr(driver, "backend", None)
        from harness.engine.config import runner_config

        _sizes, vc = runner_config(driver)  # the runner's buffers at the shared floors: one runner per shape
        self.vc = vc
        self.K = K = driver.eg.num_speculative_tokens
        self.bs = driver.eg.block_size
        self.align = driver.eg.mamba_cache_mode == "align"  # mode none: no running column, no align copies
        init_process(vc)
        sched_kvc = driver.sched.kv_cache_config
        num_blocks = sched_kvc.num_blocks
        self.mixers = driver.group_mixers  # each group's Mamba type: vLLM's Mamba1, Mamba2 or ShortConv backend
        conv_only = conv_window_only(self.mixers)  # LFM2: a conv window, no SSM state
        self.states = TaggedStates(num_blocks, K, is_conv_state_dim_first(), conv_only=conv_only)
        # Tiny Mamba2 dimensions through vLLM's own shape rule: conv kernel 2, so the conv window holds 1 + K
        # token offsets; conv dim 2 and SSM (1 head, head dim 2, state 1): one (num_tokens, fingerprint) tag.
        conv_shape, ssm_shape = MambaStateShapeCalculator.mamba2_state_shape(
            tp_world_size=1, intermediate_size=0, n_groups=1, num_heads=1, head_dim=2, state_size=1,
            conv_kernel=2, num_spec=K)
        assert tuple(self.states.conv.shape[1:]) == tuple(conv_shape), (conv_shape, self.states.conv.shape)
        assert conv_only or tuple(self.states.ssm.shape[1:]) == tuple(ssm_shape), (ssm_shape, self.states.ssm.shape)
        shapes = (tuple(conv_shape),) if conv_only else (tuple(conv_shape), tuple(ssm_shape))
        self.attn = torch.zeros((num_blocks, 1), dtype=torch.float32)
        # the KV cache groups by kind (one each, or a real model's several: harness/engine/model_geometry.py)
        self.attn_groups, self.mamba_groups = driver.attn_groups, driver.mamba_groups
        # the worker's copy of the scheduler's groups: one layer per group (a group's layers share its block
        # table and state indices), the Mamba groups with the tagged state shapes and dtypes (the scheduler's
        # config keeps its own specs: page sizes play no part in its block counts, num_blocks is given)
        groups = [replace_spec(gr, layer_names=list(gr.layer_names[:1])) for gr in sched_kvc.kv_cache_groups]
        for g in self.mamba_groups:
            spec = replace_spec(groups[g].kv_cache_spec, shapes=shapes, dtypes=(torch.int64,) * len(shapes),
                            **_unpadded(groups[g].kv_cache_spec))
            groups[g] = replace_spec(groups[g], kv_cache_spec=spec)
        kvc = replace_spec(sched_kvc, kv_cache_groups=groups)  # tensors: registered below, not allocated by vLLM
        # prefill checkpoint blocks: the Mamba builders are built with the specs that declare them
        key = (*runner_key(vc, driver.group_mixers), driver.geometry.prefill_checkpoint,
               tuple(driver.hidden_blocks.items()))
        pooled = POOL.pop(key, None)
        if pooled is not None and not pooled.reset(kvc):
            pooled = None  # it could not be put back to its built state: build another
        if pooled is None:
            pooled = Pooled(self._build_runner(vc, kvc, groups), vc)
        POOL[key] = pooled  # most recently used last
        while len(POOL) > POOL_SIZE:
            POOL.pop(next(iter(POOL)))
        runner = pooled.runner
        if driver.geometry.prefill_checkpoint:  # the prefix-cache granularity the engine core resolves and the
            # worker adopts (v1/engine/core.py:356-370, gpu_worker.py:877-880): the Mamba builder's checkpoint
            # reads it every step (checkpoint.py:121-127); this scenario's, on a pooled runner
            cc = runner.vllm_config.cache_config
            cc.hash_block_size = driver.eg.hash_block_size
            cc.cache_hit_alignment_tokens = driver.alloc.mamba_manager.cache_hit_alignment_tokens
        # this scenario's part of initialize_kv_cache (gpu_model_runner.py:6990-7060): its KV cache config and
        # state tensors, registered where the runner's own forward context holds them (postprocess reads it,
        # :1582); the Mamba buffers, None as built (and as reset), are made from them on first use (:1018)
        runner.kv_cache_config = kvc
        runner.kv_caches = [self.attn, *self.states.tensors()]
        ctx = runner.compilation_config.static_forward_context
        for g in (*self.attn_groups, *driver.hidden_blocks):
            ctx[groups[g].layer_names[0]].kv_cache = self.attn
        for g in self.mamba_groups:  # every Mamba group's layer on the same tensors, as vLLM shares a page slot
            ctx[groups[g].layer_names[0]].kv_cache = self.states.tensors()  # between groups (block ids differ)
        self.fwd_ctx = ctx
        self.vc = runner.vllm_config  # the config the runner was built from (same runner key as the driver's)
        self.runner = runner
        self.mamba_layers = {g: groups[g].layer_names[0] for g in self.mamba_groups}
        self._step = 0
        self._seq_fps: dict[str, list[int]] = {}
        self._precopied: dict[str, int] = {}
        # the device-to-host copies vLLM leaves asynchronous land early or late (harness/engine/copy_timing.py)
        self.timing = CopyTiming(runner, opts.copy_timing)
        # async scheduling with EAGLE drafts: the runner's drafter proposes and its sampler verifies what it fed
        # (harness/engine/v1_eagle.py); the scheduler holds placeholders
        self.proposes_drafts = self.asynchronous and K > 0
        self.eagle = EagleStep(self) if self.proposes_drafts else None
        self._fed: dict[str, tuple] = {}
        self._issued_before: dict[int, int] = {}  # async output -> copies issued before it (copy timing)

    def _build_runner(self, vc, kvc, groups):
        """vLLM's CPUModelRunner for this config, with the part of initialize_kv_cache (gpu_model_runner.py:
        6990-7060) this worker needs: the config and the persistent batch for its groups (no attention backends:
        no real forward). Its state tensors are set per scenario (__init__)."""
        torch, kernels_v1 = self.torch, self.kernels_v1
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        from vllm.v1.worker.utils import prepare_kernel_block_sizes

        from harness.engine.v2_setup import layer_classes

        attn_layer, mamba_layer, _ = layer_classes()
        with self.set_config(vc), _scenario_drafter(vc.speculative_config), entry_points_scanned_once(), \
                host_streams():
            runner = CPUModelRunner(vc, torch.device("cpu"))
            kernels_v1.bind_slot_mapping()  # after the CPU runner bound its own (releases < 0.28)
            runner.kv_cache_config = kvc
            runner.model = _SimModel(next((m for m in self.mixers if m != "attention"), "mamba2"))
            # the layers vLLM finds in the forward context (a stand-in attention backend, vLLM's own Mamba2 backend
            # and metadata builder), then initialize_kv_cache's backend part (gpu_model_runner.py:7012-7031 in
            # 0.33.0): attention groups, kernel block sizes, metadata builders and with them the batch reorder
            # threshold (the Mamba2 builder's: decode rows of up to 1 + K tokens first)
            ctx = runner.compilation_config.static_forward_context
            for g in self.attn_groups:
                ctx[groups[g].layer_names[0]] = attn_layer(self.bs)
            for g, block in self.driver.hidden_blocks.items():  # extract_hidden_states's cache-only layer
                ctx[groups[g].layer_names[0]] = attn_layer(block)
            for g in self.mamba_groups:
                ctx[groups[g].layer_names[0]] = mamba_layer(self.K + 1, mixer=self.mixers[g])
            runner.initialize_attn_backend(kvc)
            runner.initialize_metadata_builders(kvc, prepare_kernel_block_sizes(kvc, runner.attn_groups))
            reinitialize_input_batch(runner, kvc)
        _checkpoint_builders_as_configured(runner)
        return runner

    # -- observers: a state consumed by a copy vLLM is about to make ------------------------------------------
    def _observe(self, kind: str, who, src_col: int, dst_col: int, bias: int) -> None:
        r = self.runner
        row_idx = who if isinstance(who, int) else r.input_batch.req_id_to_index[who]
        rid = r.input_batch.req_ids[row_idx]
        if kind == "precopy":
            nc = r.requests[rid].num_computed_tokens
            at = (nc, self._fingerprint(rid, nc))
            self._precopied[rid] = src_col
        else:
            A = (dst_col + 1) * self.bs
            at = (A, self._fingerprint(rid, A))
        for g in self.mamba_groups:  # vLLM copies the columns of every Mamba group (mamba_utils.py:1364)
            conv_src, ssm_src, conv, ssm = copy_source(self.states, self._row(row_idx, g), src_col, bias)
            self.trace.reads.append(Read(self._step, rid, kind, g, src_col, conv_src, conv, ssm, at))
        if self.backend is not None:  # the model's pages make the copy vLLM's kernel is about to make
            row = self._row(row_idx)
            self.backend.shift_copy(column_block(row, dst_col), column_block(row, src_col),
                                    column_block(row, src_col + bias), bias)

    def _fingerprint(self, rid: str, n: int) -> int:
        """The true prefix of n tokens: the driver's sequence (its record and this step's drafts), or, where the
        runner drafts itself and the scheduler holds placeholders, the scenario's token model."""
        if self.proposes_drafts:
            return self.truths[rid].fingerprint(n)
        return self._seq_fps[rid][n]

    def _row(self, i: int, group: int | None = None) -> list[int]:
        """Row i of a group's block table in the runner's persistent batch (default: the first Mamba group)."""
        bt = self.runner.input_batch.block_table[self.mamba_groups[0] if group is None else group]
        return bt.block_table.np[i, :bt.num_blocks_per_row[i]].tolist()

    # -- one step ---------------------------------------------------------------------------------------------
    def execute(self, so, step: int, seq_fps: dict[str, list[int]], core_tables) -> None:
        with self.kernels_v1.mode(self.kernels), host_streams():  # replacements, or vLLM's kernels
            self._execute(so, step, seq_fps, core_tables)

    def sample(self, so, step: int, sampled: dict[str, list[int]], accepted: dict[str, int], seq_fps):
        with self.kernels_v1.mode(self.kernels):
            return self._sample(so, step, sampled, accepted, seq_fps)

    def sample_later(self, so, step: int, seq_fps=None):
        """Async scheduling: `sample_tokens` (gpu_model_runner.py:4270-4520 in 0.33.0) as the V1 runner runs it
        then: the sampled tokens stay in the runner (`prev_sampled_token_ids`, which fills the next step's
        placeholders in `_prepare_input_ids`), the output is an AsyncGPUModelRunnerOutput read when the engine
        takes the batch off its queue (`collect`). The tokens are the token rule's after the prefix the runner
        fed (its own input_ids), not the scheduler's record; with EAGLE drafts (K > 0) the runner's drafter
        path runs too (harness/engine/v1_eagle.py)."""
        with self.kernels_v1.mode(self.kernels), host_streams():
            return self._sample_async(so, step)

    def collect(self, out):
        """A batch's sampled tokens as the scheduler gets them (`future.result()`, core.py:783)."""
        if out is None:
            return [], []
        with host_streams():
            # its ready event: the output's copy stream waited for the default stream when the step sampled
            self.timing.default_stream_waited(self._issued_before.pop(id(out), None))
            out = out.get_output()
        return list(out.req_ids), [list(t) for t in out.sampled_token_ids]

    def _sample_async(self, so, step: int):
        torch, r = self.torch, self.runner
        n = r.input_batch.num_reqs
        if not so.total_num_scheduled_tokens or n == 0:
            return None
        self._step = step
        if self.eagle is not None:
            out = self.eagle.sampled(so, self._fed)
        else:
            # what the sampler picks after the prefix as fed (its last fingerprint)
            out = torch.tensor([[true_token(self._fed[rid][0][-1])] for rid in r.input_batch.req_ids],
                               dtype=torch.int32)
        with self.set_config(self.vc):
            with self.timing.issue("num_accepted_tokens_event"):
                r._update_states_after_model_execute(out, so)
            for name in ("_draft_token_ids", "_draft_probs", "valid_sampled_token_count_gpu"):
                if hasattr(r, name):  # sample_tokens clears the previous step's (:4321-4326)
                    setattr(r, name, None)
            r.input_batch.prev_sampled_token_ids = None  # this step's: set by the drafter's copy, else bookkeeping
            if self.eagle is not None:
                self.eagle.propose_after(so, out, self._fed)
            result = r._bookkeeping_sync(so, self.SamplerOutput(sampled_token_ids=out, logprobs_tensors=None), None,
                                         torch.empty((so.total_num_scheduled_tokens, 1)),
                                         so.total_num_scheduled_tokens)
            req_ids, req_id_to_index, invalid = result[-3], result[-2], result[-1]
            output = self.ModelRunnerOutput(req_ids=req_ids, req_id_to_index=req_id_to_index, sampled_token_ids=[])
            pending = self.AsyncOutput(model_runner_output=output, sampled_token_ids=out, logprobs_tensors=None,
                                       invalid_req_indices=invalid,
                                       async_output_copy_stream=r._get_or_create_async_output_copy_stream(),
                                       vocab_size=r.input_batch.vocab_size)
            if hasattr(r.input_batch, "set_async_sampled_token_ids"):
                r.input_batch.set_async_sampled_token_ids(pending.sampled_token_ids_cpu,
                                                          pending.async_copy_ready_event)
        self._issued_before[id(pending)] = self.timing.issued
        return pending

    def _execute(self, so, step: int, seq_fps: dict[str, list[int]], core_tables) -> None:
        r = self.runner
        self._step, self._seq_fps, self._precopied, self._fed = step, seq_fps, {}, {}
        PROCESS["observer"] = self._observe
        self.kernels_v1.OBSERVER = self._observe
        if self.backend is not None:  # the model's pages: zeroing, then the CoW copies (_update_states :1205-1212)
            self.backend.zero(list(so.new_block_ids_to_zero or ()))
            for c in getattr(so, "kv_cache_block_copies", None) or ():
                self.backend.copy_page(c.src_block_id, c.dst_block_id)
        with self.set_config(self.vc):
            # async scheduling with drafts: the correction of the optimistic computed counts (_update_states
            # :1515-1545), applied where execute_model applies it: before preprocess_mamba in align mode
            # (:4053-4055), else once the forward is launched (:4249-4250)
            deferred = r._update_states(so)
            n = r.input_batch.num_reqs
            if not so.total_num_scheduled_tokens or n == 0:  # execute_model returns before any correction (:3955)
                return
            req_ids = list(r.input_batch.req_ids)
            ns_np = np.array([so.num_scheduled_tokens[rid] for rid in req_ids], dtype=np.int32)
            r._prepare_inputs(so, ns_np)
            kinds = self._kinds(so)
            if deferred and self.align:
                deferred()
                deferred = None
            prev_idx = self._preprocess(so, n) if self.align else {}
            self._forward(so, req_ids, ns_np, kinds, prev_idx, core_tables, deferred)

    def _preprocess(self, so, n: int) -> dict[str, int]:
        """Align mode's preprocess_mamba as execute_model runs it (gpu_model_runner.py:4049-4091 in 0.33.0): the
        running columns and pre-copies, the accepted counts re-synced, the fused postprocess inputs staged.
        Returns the previous running columns (after its cleanup of finished/preempted/resumed rows,
        mamba_utils.py:1398-1415; new/resumed rows fall back, :1493-1495)."""
        r, mu = self.runner, self.mamba_utils
        prev_idx = dict(r.mamba_state_idx)
        mu.cleanup_mamba_state_idx(so, prev_idx)
        bufs = r._get_mamba_bufs()
        funcs = (r._get_mamba_state_copy_funcs() if hasattr(r, "_get_mamba_state_copy_funcs")
                 else r.model.get_mamba_state_copy_func())  # < 0.29: the model's one tuple
        extra = {"align_ctx": bufs.postprocess_align} if "align_ctx" in parameters(mu.preprocess_mamba) else {}
        mu.preprocess_mamba(so, r.kv_cache_config, r.cache_config, r.mamba_state_idx, r.input_batch, r.requests,
                            self.fwd_ctx, funcs, bufs.preprocess, **extra)
        # execute_model re-syncs the accepted counts preprocess_mamba reset (gpu_model_runner.py:4069-4076)
        r.num_accepted_tokens.np[:n] = r.input_batch.num_accepted_tokens_cpu[:n]
        r.num_accepted_tokens.copy_to_gpu(n)
        if getattr(bufs, "postprocess_align", None) is not None:
            mu.stage_postprocess_inputs_to_gpu(bufs.postprocess_align, so, r.input_batch.req_ids, n, r.requests,
                                               r.mamba_state_idx)
        return prev_idx

    def _kinds(self, so) -> dict[str, str]:
        from harness.engine.config import resumed_ids

        kinds = {nr.req_id: "NEW" for nr in so.scheduled_new_reqs}
        for rid in resumed_ids(so.scheduled_cached_reqs):
            kinds[rid] = "RESUMED"
        return kinds

    def _forward(self, so, req_ids, ns_np, kinds, prev_idx, core_tables, deferred=None) -> None:
        """The simulated forward: each request's states read and written where vLLM's Mamba2 kernels read and
        write them, as the runner's own attention metadata says (`_build_attention_metadata`, the Mamba2 builder;
        harness/engine/mamba_meta.py), rows in the runner's order (its batch reorder). `deferred`: the runner's
        computed-count correction, applied once the metadata is built (the kernels' launch)."""
        r, st, tr = self.runner, self.states, self.trace
        n = len(req_ids)
        meta = self._metadata(so, ns_np)
        rows = {g: kernel_rows(meta[layer]) for g, layer in self.mamba_layers.items()}  # one builder per group
        if deferred:
            deferred()
        nc_np = r.input_batch.num_computed_tokens_cpu[:n].astype(np.int64)
        # the token ids the runner feeds the model, per request in batch order (its own input buffer): the states
        # written are tagged with the prefix as fed, so a wrong token fed shows at the next read
        starts = np.concatenate([[0], np.cumsum(ns_np)]).tolist()
        fed_all = r.input_ids.gpu[: starts[-1]].tolist()
        for i, rid in enumerate(req_ids):
            nc, ns = int(nc_np[i]), int(ns_np[i])
            at = (nc, self.truths[rid].fingerprint(nc))
            fed = chain([at[1]], fed_all[starts[i]:starts[i + 1]])  # fed[j]: the prefix of nc + j tokens as fed
            for g in self.mamba_groups:
                kr = rows[g].row(i, ns)
                if self.align:
                    curr = r.mamba_state_idx[rid]
                    prev = prev_idx.get(rid, (nc - 1) // self.bs)
                    live = [prev] if rid in self._precopied else []
                elif rows[g].all_mode:  # mode all: read at the last computed block, write every boundary crossed
                    curr, prev = kr.write_column, kr.init_column
                    live = [kr.init_column] if kr.init is not None else []
                else:  # mode none: the row's first block holds the state, the next K its speculative states
                    curr, prev = 0, -1
                    live = [kr.init_column] if kr.init is not None else []
                if kr.init is not None:
                    conv, ssm = st.read(*kr.init)
                    tr.reads.append(Read(self._step, rid, "initial", g, kr.init_column if rows[g].all_mode else curr,
                                         kr.init[0], conv, ssm, at))
                for block, col in kr.boundaries:  # mode all: the states at the block boundaries the chunk crossed
                    st.write_final(block, ((col + 1) * self.bs, fed[(col + 1) * self.bs - nc]))
                    live.append(col)
                checkpoint, ckpt_col = write_row(st, rows[g], kr, nc, ns, fed)  # with any prefill checkpoint
                live.extend(range(curr, curr + ns) if kr.decode else [curr])
                if ckpt_col is not None:
                    live.append(ckpt_col)
                tr.rows.append(RowView(self._step, rid, g, kinds.get(rid, "RUNNING"), nc, ns, prev, curr,
                                       sorted(set(live)), self._row(i, g), list(core_tables[rid][g])))
                if self.backend is not None:  # the model's forward from and to the same indices (models/pool.py)
                    self.backend.forward(Forward(self._step, rid, nc, ns, kr.init, kr.decode, kr.blocks[0],
                                                 kr.blocks if kr.decode else [], checkpoint,
                                                 self._row(i, self.attn_groups[0])))
            # what the async sampler reads: the prefixes as fed, the tokens fed, the computed count
            self._fed[rid] = (fed, fed_all[starts[i]:starts[i + 1]], nc)

    def _metadata(self, so, ns_np) -> dict:
        """The runner's own attention metadata for this step, built as execute_model builds it
        (gpu_model_runner.py:4093-4122 in 0.33.0: slot mappings, then `_build_attention_metadata`)."""
        r = self.runner
        n, total = len(ns_np), int(ns_np.sum())
        # the builders get the spec-decode arguments (accepted counts, draft counts) as the release's execute_model
        # decides: whenever drafting is configured (0.33), or in steps with drafts scheduled only (before)
        spec = bool(so.scheduled_spec_decode_tokens) if spec_metadata_per_step() else self.K > 0
        kwargs = dict(num_tokens=total, num_reqs=n, max_query_len=int(ns_np.max()), use_spec_decode=spec,
                      num_scheduled_tokens=so.num_scheduled_tokens)
        if hasattr(r, "_get_slot_mappings"):
            kwargs["slot_mappings"], _ = r._get_slot_mappings(num_tokens_padded=total, num_reqs_padded=n,
                                                             num_tokens_unpadded=total)
        meta, _ = r._build_attention_metadata(**supported_kwargs(r._build_attention_metadata, **kwargs))
        return meta

    def _sample(self, so, step: int, sampled: dict[str, list[int]], accepted: dict[str, int], seq_fps):
        """The sampler's output (the harness's token rule; a non-final prefill chunk samples a token vLLM then
        discards) through the runner's accepted-count update / spec post-copy and its bookkeeping."""
        torch, r = self.torch, self.runner
        n = r.input_batch.num_reqs
        if not so.total_num_scheduled_tokens or n == 0:
            return [], []
        self._step, self._seq_fps = step, seq_fps
        rows = np.full((n, 1 + self.K), -1, dtype=np.int32)
        for i, rid in enumerate(r.input_batch.req_ids):
            toks = sampled[rid] or [0]  # the discarded token of a partial prefill (discard_request_mask)
            rows[i, :len(toks)] = toks
        out = torch.from_numpy(rows)
        if self.K == 0:
            out = out[:, :1]
        with self.set_config(self.vc):
            with self.timing.issue("num_accepted_tokens_event"):
                r._update_states_after_model_execute(out, so)
            result = r._bookkeeping_sync(so, self.SamplerOutput(sampled_token_ids=out, logprobs_tensors=None), None,
                                         torch.empty((so.total_num_scheduled_tokens, 1)),
                                         so.total_num_scheduled_tokens)
        # its blocking read of the sampled ids waits for the default stream (gpu_model_runner.py:3480-3500)
        self.timing.default_stream_waited()
        # (..., valid_sampled_token_ids, prompt_logprobs_dict, req_ids, req_id_to_index, invalid_req_indices): the
        # tail is the same in every release (0.33 adds num_nans at the front), so it is read from the end
        valid, ids = result[-5], result[-3]
        return list(ids), [list(v) for v in valid]

    def deliver(self, block: int, state) -> None:
        self.states.deliver(block, state)


@functools.cache
def spec_metadata_per_step() -> bool:
    """Whether the release's execute_model passes the metadata builders the spec-decode arguments only in a step
    with drafts scheduled (`use_spec_decode = len(scheduler_output.scheduled_spec_decode_tokens) > 0`,
    gpu_model_runner.py:4384 in 0.30.0), not whenever a speculative config is set (:4093 in 0.33.0). A builder
    then splits a draftless step at one token and, for GatedDeltaNet, finds no speculative rows."""
    import inspect

    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return "use_spec_decode = len(scheduler_output.scheduled_spec_decode_tokens) > 0" in \
        inspect.getsource(GPUModelRunner.execute_model)


def _unpadded(spec) -> dict:
    """A real model's Mamba page is padded to the attention page (platforms/interface.py:1121-1135); the tagged
    states are not, so the worker's spec drops the padding."""
    return {"page_size_padded": None} if getattr(spec, "page_size_padded", None) is not None else {}
