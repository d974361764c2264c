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
"""

from __future__ import annotations

import os
import tempfile

from harness.states import NULL_BLOCK, chain
from harness.tokens import true_token
from harness.trace import Read, RowView
from harness.vllm_adapter import ATTN_GROUP, MAMBA_GROUP, installed_version

ATTN_LAYER = "model.layers.0.attn"  # layer names carry exactly one integer (the runner parses it)
MAMBA_LAYER = "model.layers.1.mixer"


def v2_unavailable() -> str | None:
    """Why vLLM's V2 runner cannot run here (None when it can)."""
    try:
        import vllm.v1.worker.gpu.model_runner  # noqa: F401
        import vllm.v1.worker.cpu.model_runner  # noqa: F401
    except ImportError as exc:
        return f"vLLM {installed_version()} has no V2 model runner for CPU ({exc})"
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        return "Triton is not importable (vLLM's V2 model runner needs it)"
    return None


# -- the runner's model: layers vLLM binds state tensors to, a forward that moves state tags ---------------

def _classes():
    """The layer, backend and model classes (built on first use: they subclass vLLM's own bases). Long: the
    classes close over vLLM's base classes imported here, so they are defined together in one scope."""
    import torch
    from torch import nn
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator
    from vllm.v1.attention.backend import AttentionBackend, AttentionImplBase, AttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    class RowsBuilder(AttentionMetadataBuilder):
        """The attention group's metadata: the common metadata as the runner built it (block table rows,
        slot mapping). Nothing reads attention KV here: the forward is simulated."""

        def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
            super().__init__(kv_cache_spec, layer_names, vllm_config, device)

        def build(self, common_prefix_len, common_attn_metadata, fast_build=False, **kwargs):
            return common_attn_metadata

    class RowsBackend(AttentionBackend):
        supported_dtypes = [torch.float32]

        @staticmethod
        def get_name() -> str:
            return "HARNESS_ROWS"

        @staticmethod
        def get_impl_cls():
            return AttentionImplBase

        @staticmethod
        def get_builder_cls():
            return RowsBuilder

        @staticmethod
        def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
            return (2, num_blocks, block_size, num_kv_heads, head_size)

    class AttnLayer(nn.Module, AttentionLayerBase):
        def __init__(self, block_size: int):
            super().__init__()
            self.block_size = block_size

        def get_attn_backend(self):
            return RowsBackend

        def get_kv_cache_spec(self, vllm_config):
            return FullAttentionSpec(block_size=self.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)

    class MambaLayer(nn.Module, MambaBase):
        """A Mamba2 layer to vLLM (its backend and metadata builder are vLLM's real Mamba2 ones) whose
        states are tags: conv (K+1 window offsets, [n, fp]) and SSM ([n, fp]), int64."""

        def __init__(self, width: int, checkpoint: bool = False):
            super().__init__()
            self.width, self.checkpoint = width, checkpoint

        def get_state_shape(self):
            return ((self.width, 2), (2,))

        def get_prefill_checkpoint_alignment(self):
            return 1 if self.checkpoint else None

        def get_kv_cache_spec(self, vllm_config):
            spec = super().get_kv_cache_spec(vllm_config)
            if not self.checkpoint:
                return spec
            from dataclasses import replace

            # what vLLM's Mamba2 layer declares (mamba_mixer2.py:1108-1118): one internal prefill checkpoint
            # block, any token position; the scheduler's MambaSpec says the same (config.build_scheduler)
            return replace(spec, num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1)

        def get_state_dtype(self):
            return (torch.int64, torch.int64)

        @property
        def mamba_type(self):
            return _MAMBA2

    class TagModel(nn.Module):
        def __init__(self, worker):
            super().__init__()
            self.worker = worker

        def get_mamba_state_copy_funcs(self, mamba_types):  # as vLLM's Mamba2 models answer it
            return {t: MambaStateCopyFuncCalculator.mamba2_state_copy_func() for t in mamba_types}

        def forward(self, input_ids=None, positions=None, **kwargs):
            return self.worker.forward(input_ids, positions)

        def compute_logits(self, hidden_states):
            return self.worker.logits(hidden_states)

    try:
        from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum

        _MAMBA2 = MambaAttentionBackendEnum.MAMBA2
    except ImportError:  # releases that name Mamba types by string
        _MAMBA2 = "mamba2"
    return AttnLayer, MambaLayer, TagModel


# -- the runner, built once per engine config in a process and reset between scenarios --------------------

_RUNNERS: dict[tuple, "_Runner"] = {}
_DIST = False


def _init_distributed() -> None:
    """A one-process gloo group, as vLLM's CPU worker sets up (world size 1)."""
    global _DIST
    if _DIST:
        return
    from vllm.distributed import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        fd, path = tempfile.mkstemp(prefix="hh-dist-")
        os.close(fd)
        os.unlink(path)
        ps.init_distributed_environment(1, 0, f"file://{path}", 0, "gloo")
        ps.initialize_model_parallel(1, 1)
    _DIST = True


def _runner_model_config(vc):
    """The scheduler's stand-in model config plus what the V2 runner reads (a hybrid Mamba2 test model:
    float32, no MoE, no multimodal, no LoRA, the harness's vocabulary)."""
    from harness.engine.config import ModelConfigStandIn
    from harness.scenario import VOCAB_SIZE

    import torch

    class RunnerModelConfig(ModelConfigStandIn):
        is_moe = False
        dtype = torch.float32
        enable_prompt_embeds = False
        logits_processors = None
        logprobs_mode = "raw_logprobs"
        use_fp64_gumbel = False
        enable_trace_replay = False
        is_attention_free = False
        architectures = ["HarnessTagModel"]
        hf_config = type("HarnessHFConfig", (), {"model_type": "harness_tag_model", "architectures": ["HarnessTagModel"]})()
        enforce_eager = True
        enable_sleep_mode = False
        sleep_mode_offload_cudagraph = False
        uses_alibi = False
        quantization = None
        rswa_window = None

        def get_vocab_size(self):
            return VOCAB_SIZE

        def get_mamba_chunk_size(self):
            return 256

        def get_num_attention_heads(self, parallel_config=None):
            return 1

        def get_num_kv_heads(self, parallel_config=None):
            return 1

        def get_head_size(self):
            return 1

        def get_hidden_size(self):
            return 1

        def get_inputs_embeds_size(self):
            return 1

    mc = vc.model_config
    if not isinstance(mc, RunnerModelConfig):
        object.__setattr__(vc, "model_config", RunnerModelConfig(mc.max_model_len))


def _kv_tensors(cls, pages: dict[str, int], num_blocks: int) -> list:
    """One backing allocation, each layer's pages in its own region (0.33.0 `KVCacheTensor(size, layers,
    layer_stride, block_stride, offset)`, worker/utils.py allocate_kv_cache; earlier releases
    `KVCacheTensor(size, shared_by)`, one allocation per layer)."""
    if "layers" not in getattr(cls, "__dataclass_fields__", {}):
        return [cls(size=p * num_blocks, shared_by=[n]) for n, p in pages.items()]
    total = sum(pages.values()) * num_blocks
    out, offset = [], 0
    for name, page in pages.items():
        out.append(cls(size=total, layers=[name], layer_stride=page * num_blocks, block_stride=page, offset=offset))
        offset += page * num_blocks
    return out


class _Runner:
    """vLLM's CPUModelRunner with the harness's model and real KV tensors for `num_blocks` blocks."""

    def __init__(self, vc, num_blocks: int, num_spec: int, checkpoint: tuple[int, int] | None = None) -> None:
        import torch
        import vllm.v1.worker.cpu.shm  # noqa: F401  (CUDA stand-ins; cpu_worker.py imports it first)
        from vllm.config import set_current_vllm_config
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
        from vllm.v1.worker.cpu.model_runner import CPUModelRunner

        AttnLayer, MambaLayer, TagModel = _classes()
        torch.set_num_threads(1)  # tiny tensors: intra-op threads only spin (3-4x slower on a shared 2-core box)
        self.vc, self.num_blocks = vc, num_blocks
        B = vc.cache_config.block_size
        _runner_model_config(vc)
        if getattr(vc.cache_config, "kv_cache_layout", "LBNHC") is None:
            vc.cache_config.kv_cache_layout = "LBNHC"  # what the engine core resolves for layer-outermost caches
        with set_current_vllm_config(vc):
            _init_distributed()
            ctx = vc.compilation_config.static_forward_context
            ctx.clear()
            ctx[ATTN_LAYER] = AttnLayer(B)
            ctx[MAMBA_LAYER] = MambaLayer(num_spec + 1, checkpoint is not None)
            if checkpoint is not None:
                # the prefix-cache granularity the engine core resolves and the worker adopts
                # (v1/engine/core.py:356-370, v1/worker/gpu_worker.py:877-880): the scheduler's own values
                vc.cache_config.hash_block_size, vc.cache_config.cache_hit_alignment_tokens = checkpoint
            spec = vc.speculative_config
            method = getattr(spec, "method", None)
            if method == "eagle":  # no EAGLE draft model on CPU (harness/engine/config.py _as_eagle): the
                object.__setattr__(spec, "method", "ngram")  # runner holds an n-gram speculator instead, whose
            try:  # proposal the harness replaces anyway (V2Worker._propose)
                self.runner = r = CPUModelRunner(vc, torch.device("cpu"))
            finally:
                if method == "eagle":
                    object.__setattr__(spec, "method", method)
            self.model = TagModel(None)
            r.load_model(model=self.model)
            specs = r.get_kv_cache_spec()
            tensors = _kv_tensors(KVCacheTensor, {n: specs[n].page_size_bytes for n in (ATTN_LAYER, MAMBA_LAYER)},
                                  num_blocks)
            kvc = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=[
                KVCacheGroupSpec([ATTN_LAYER], specs[ATTN_LAYER]), KVCacheGroupSpec([MAMBA_LAYER], specs[MAMBA_LAYER])])
            r.initialize_kv_cache(kvc)
            r._init_kv_zero_meta()
        from harness.engine.tagged import TaggedStates

        conv, ssm = ctx[MAMBA_LAYER].kv_cache
        self.states = TaggedStates(num_blocks, num_spec, False, tensors=(conv, ssm))
        self.max_num_reqs = r.req_states.max_num_reqs
        self.worker = None
        self._hook()

    def _hook(self) -> None:
        """Observation points (each calls vLLM's own method): the step's InputBatch, the running state
        columns before `preprocess_state`, the pre-copy sources."""
        r = self.runner
        # vLLM's methods looked up on their classes at each call (not bound once): a mutant that wraps the class
        # method (harness/mutants/worker_v2.py) applies to a runner built before it and is gone after its undo
        def prepare_inputs(*args, **kwargs):
            return type(r).prepare_inputs(r, *args, **kwargs)

        def preprocess(*args, **kwargs):
            return type(r.model_state).preprocess_state(r.model_state, *args, **kwargs)

        def captured_prepare_inputs(*args, **kwargs):
            self.input_batch = ib = prepare_inputs(*args, **kwargs)
            return ib

        def observed_preprocess(input_batch, *args, **kwargs):
            ms = r.model_state
            self.before = None
            if not getattr(ms, "_align_mode", False):
                return preprocess(input_batch, *args, **kwargs)
            idx = input_batch.idx_mapping_np[: input_batch.num_reqs]
            self.before = (ms._mamba_state_idx_gpu[idx].tolist(), ms.num_accepted_tokens_gpu[idx].tolist())
            out = preprocess(input_batch, *args, **kwargs)
            if self.worker is not None:
                self.worker.record_precopies(input_batch, idx)
            return out

        r.prepare_inputs = captured_prepare_inputs
        r.model_state.preprocess_state = observed_preprocess
        ctx = getattr(r.model_state, "_mamba_ctx", None)
        if ctx is not None:
            self.mamba_block_size = ctx.block_size
            postprocess_align = ctx.run_fused_postprocess_align

            def observed_postprocess_align(num_reqs, num_accepted, state_idx, new_computed, idx_mapping):
                if self.worker is not None:
                    self.worker.postcopies_before_launch(num_reqs, num_accepted, state_idx, new_computed, idx_mapping)
                return postprocess_align(num_reqs, num_accepted, state_idx, new_computed, idx_mapping)

            ctx.run_fused_postprocess_align = observed_postprocess_align
        else:
            self.mamba_block_size = self.vc.cache_config.mamba_block_size

    def reset(self) -> None:
        """Back to a fresh runner's request slots and state bytes (no request is left after a replay)."""
        r = self.runner
        rs = r.req_states
        for rid in sorted(rs.req_id_to_index):  # finished at the end of the replay: vLLM's own removal
            r._remove_request(rid)
        r.execute_model_state = None
        rs.free_indices[:] = range(rs.max_num_reqs)
        # the per-slot Mamba tensors as MambaHybridModelState.__init__ leaves them (mamba_hybrid.py:86-106):
        # a slot's leftovers from an earlier scenario must not reach the next one (add_request resets only what
        # it resets, which is what a mutant of it changes)
        ms = r.model_state
        for name, value in (("num_accepted_tokens_gpu", 1), ("_mamba_state_idx_gpu", 0), ("_mamba_src_col_gpu", -1),
                            ("_mamba_src_off_gpu", 0)):
            t = getattr(ms, name, None)
            if t is not None:
                t.fill_(value)
        self.states.reset()


def _runner_vc(driver):
    """The VllmConfig the worker's runner is built from (harness.engine.workers.runner_config) and the shape
    it is kept under."""
    from harness.engine.config import runner_config

    g, eg = driver.sc.geometry, driver.eg
    sizes, vc = runner_config(driver)
    checkpoint = ((eg.hash_block_size, driver.alloc.mamba_manager.cache_hit_alignment_tokens)
                  if g.prefill_checkpoint else None)
    # what the runner's behaviour depends on: block, spec width and method, the connector's failure policy, the
    # checkpoint export (the hash block only through it: the builder reads cache_config.hash_block_size), async
    # scheduling (the runner's async output path and its own fill of the scheduler's placeholders)
    shape = (eg.block_size, eg.num_speculative_tokens, g.eagle_block_drop, g.kv_load_failure_policy, checkpoint,
             bool(vc.scheduler_config.async_scheduling))
    return shape, sizes, vc


def runner_for(driver) -> _Runner:
    """One runner per block/spec shape in a process, reset between scenarios (rebuilt larger when a scenario
    needs more slots, tokens or blocks than it has)."""
    import gc

    from harness.engine.config import RUNNER_FLOORS

    shape, sizes, vc = _runner_vc(driver)
    num_blocks = driver.sc.geometry.num_blocks
    run = _RUNNERS.get(shape)
    if run is None or run.num_blocks < num_blocks or any(a < b for a, b in zip(run.sizes, sizes)):
        _RUNNERS.pop(shape, None)
        gc.freeze()
        run = _Runner(vc, max(num_blocks, RUNNER_FLOORS["num_blocks"]), driver.eg.num_speculative_tokens, shape[4])
        run.sizes = sizes
        _RUNNERS[shape] = run
        gc.freeze()  # vLLM's load_model runs gc.collect() twice (utils/mem_utils.py:86): ~0.5 s each over an
        # untouched heap of import-time objects; frozen, they are not walked again
    else:
        run.reset()
    return run


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
        m = md[MAMBA_LAYER] if isinstance(md, dict) else None
        n = input_ids.shape[0]
        hidden = torch.zeros(n, 1, dtype=torch.float32)
        if ib is None or m is None:
            return hidden
        ids = input_ids.tolist()
        pos = positions.tolist()
        qsl = ib.query_start_loc_np
        slots = ib.idx_mapping_np
        st, tr = self.states, self.trace
        ms = self.runner.model_state
        bt = self.runner.block_tables
        prev_cols, _ = self.run.before if getattr(self.run, "before", None) else ([], [])
        nd_ = m.num_decodes
        si_d = m.state_indices_tensor_d.tolist() if m.state_indices_tensor_d is not None and nd_ else []
        si_p = m.state_indices_tensor_p.tolist() if m.state_indices_tensor_p is not None and m.num_prefills else []
        has_init = m.has_initial_states_p.tolist() if m.has_initial_states_p is not None else []
        acc = m.num_accepted_tokens.tolist() if m.num_accepted_tokens is not None else []
        ckpt = getattr(m, "checkpoint_meta", None)
        ckpt_cols: dict[int, int] = {}
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
            want = (nc, start)
            if i < nd_:  # decode kernels (ops/mamba_ssm.py selective_state_update, causal_conv1d_update)
                idx = si_d[i]
                na = acc[i] if acc else 1
                cur = idx[0]
                c_state, s_state = st.read(cur, na - 1, idx[na - 1])
                blocks = idx[:ns]
                st.write_tokens(cur, blocks, [(nc + j + 1, fps[j + 1]) for j in range(ns)])
                read = (cur, c_state, s_state)
                init, checkpoint = (cur, na - 1, idx[na - 1]), None
            else:  # prefill kernels (mamba_mixer2.py: chunked scan from the initial state, final state out)
                p = i - nd_
                b = si_p[p]
                read = None
                if has_init and has_init[p]:
                    read = (b, *st.read(b, 0, b))
                st.write_final(b, (nc + ns, fps[ns]))
                if ckpt is not None and ckpt.offsets[p] > 0:  # the internal prefill checkpoint export
                    # (model_executor/layers/mamba/checkpoint.py: the state after `offset` query tokens goes to
                    # the checkpoint block; the builder ends a chunk there, mamba_attn.py:242-310)
                    off = ckpt.offsets[p]
                    st.write_final(int(ckpt.state_indices[p]), (nc + off, fps[off]))
                    ckpt_cols[i] = int(ckpt.block_cols[p])
                init = (b, 0, b) if read is not None else None
                checkpoint = ((int(ckpt.state_indices[p]), nc + int(ckpt.offsets[p]))
                              if ckpt is not None and ckpt.offsets[p] > 0 else None)
                blocks = [b]
            curr = int(ms._mamba_state_idx_gpu[slot]) if getattr(ms, "_align_mode", False) else 0
            prev = prev_cols[i] if i < len(prev_cols) else -1
            live = list(range(curr, curr + len(blocks)))
            if prev >= 0 and prev != curr:
                live.append(prev)
            if i in ckpt_cols:
                live.append(ckpt_cols[i])
            if read is not None:
                tr.reads.append(Read(self.step, rid, "initial", MAMBA_GROUP, curr, read[0], read[1], read[2], want))
            nb = int(bt.num_blocks.np[MAMBA_GROUP, slot])
            row = bt.block_tables[MAMBA_GROUP].gpu[slot, :nb].tolist()
            core = self.core_tables.get(rid)
            tr.rows.append(RowView(self.step, rid, MAMBA_GROUP, self.kinds.get(rid, "RUNNING"), nc, ns, prev, curr,
                                   sorted(set(live)), row, list(core[MAMBA_GROUP]) if core else []))
            self.rows[rid] = (fps, targets, ns)
            self._fed_from[rid] = nc
            if self.backend is not None:
                self._model_forward(rid, slot, nc, ids[qs:qe], i < nd_, init, blocks, checkpoint, hidden, qs)
        return hidden

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
        bt = self.runner.block_tables
        attn = bt.block_tables[ATTN_GROUP].gpu[slot, :int(bt.num_blocks.np[ATTN_GROUP, slot])].tolist()
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
        bt = self.runner.block_tables
        src = ms._mamba_src_col_gpu[slots].tolist()
        off = ms._mamba_src_off_gpu[slots].tolist()
        dst = ms._mamba_state_idx_gpu[slots].tolist()
        nc_all = self.runner.req_states.num_computed_tokens.gpu[slots].tolist()
        for i, rid in enumerate(input_batch.req_ids):
            if src[i] < 0 or src[i] == dst[i]:
                continue
            slot = int(slots[i])
            nb = int(bt.num_blocks.np[MAMBA_GROUP, slot])
            row = bt.block_tables[MAMBA_GROUP].gpu[slot, :nb].tolist()
            col = lambda c: row[c] if 0 <= c < len(row) else NULL_BLOCK  # noqa: E731 (padding reads block 0)
            conv_b, ssm_b = col(src[i]), col(src[i] + off[i])
            conv, ssm = self.states.read(conv_b, off[i], ssm_b)
            nc = int(nc_all[i])
            self.trace.reads.append(Read(self.step, rid, "precopy", MAMBA_GROUP, src[i], conv_b, conv, ssm,
                                         (nc, self.fingerprint(rid, nc))))
            if self.backend is not None:  # the model's pages make the copy vLLM's kernel made
                self.backend.shift_copy(col(dst[i]), conv_b, ssm_b, off[i])

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
        bt = self.runner.block_tables
        nb = int(bt.num_blocks.np[MAMBA_GROUP, slot])
        row = bt.block_tables[MAMBA_GROUP].gpu[slot, :nb].tolist()
        col = lambda c: row[c] if 0 <= c < len(row) else NULL_BLOCK  # noqa: E731 (padding reads block 0)
        conv_b, ssm_b = col(src_col), col(src_col + bias)
        conv, _ = self.states.read(conv_b, bias, conv_b)
        _, ssm = self.states.read(ssm_b, 0, ssm_b)
        A = (dst_col + 1) * self.run.mamba_block_size
        # the prefix of A tokens as this step fed them (drafts included: V2's scheduler holds placeholders)
        fed = self.rows.get(rid)
        nc = self._fed_from.get(rid, 0)
        want = (A, fed[0][A - nc]) if fed is not None and 0 <= A - nc < len(fed[0]) else (A, self.fingerprint(rid, A))
        self.trace.reads.append(Read(self.step, rid, "postcopy", MAMBA_GROUP, src_col, conv_b, conv, ssm, want))
        if self.backend is not None:  # the model's pages make the copy vLLM's kernel is about to make
            self.backend.shift_copy(col(dst_col), conv_b, ssm_b, bias)

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
