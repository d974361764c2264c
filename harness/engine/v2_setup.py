"""Set-up of vLLM's V2 model runner for the engine tier (harness/engine/runner_v2.py): whether the release has
it, the runner's model (layers vLLM binds the state tensors to, and a forward that hands each step to the
worker), the once-per-process distributed init, the runner's KV cache tensors, and one runner per block/spec
shape in the process, reset between scenarios.
"""

from __future__ import annotations

import contextlib

import os
import tempfile

from harness.engine.model_geometry import conv_window_only, mamba_type_value, state_copy_funcs
from harness.vllm_adapter import installed_version

# each group's mixer (model_geometry.group_mixers): the harness's own geometry; a real model's: model_geometry.py
TWO_GROUPS = ("attention", "mamba2")


def layer_name(group: int, kind: str) -> str:
    """The one layer the runner holds for KV cache group `group` (a group's layers share its block table and
    state indices, so one stands for all). Names carry exactly one integer: the runner parses it."""
    return f"model.layers.{group}.attn" if kind == "attention" else f"model.layers.{group}.mixer"


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

def layer_classes():
    """The layer, backend and model classes (built on first use: they subclass vLLM's own bases). Long: the
    classes close over vLLM's base classes imported here, so they are defined together in one scope."""
    import torch
    from torch import nn
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.layers.mamba.abstract import MambaBase
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
        """A Mamba2 (or Mamba1, ShortConv: `mixer`) layer to vLLM (its backend and metadata builder are vLLM's real
        ones) whose states are tags: conv (K+1 window offsets, [n, fp]) and SSM ([n, fp]), int64; a ShortConv layer
        keeps the conv window only (layers/mamba/short_conv.py get_state_shape)."""

        def __init__(self, width: int, checkpoint: bool = False, mixer: str = "mamba2"):
            super().__init__()
            self.width, self.checkpoint, self.mixer = width, checkpoint, mixer

        def get_state_shape(self):
            return ((self.width, 2),) if self.mixer == "short_conv" else ((self.width, 2), (2,))

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
            return (torch.int64,) * len(self.get_state_shape())

        @property
        def mamba_type(self):  # picks vLLM's backend and builder for the group (Mamba1 or Mamba2)
            return mamba_type_value(self.mixer)

    class TagModel(nn.Module):
        def __init__(self, worker):
            super().__init__()
            self.worker = worker

        def get_mamba_state_copy_funcs(self, mamba_types):  # as vLLM's models of each Mamba type answer it
            return {t: state_copy_funcs(t) for t in mamba_types}

        def forward(self, input_ids=None, positions=None, **kwargs):
            return self.worker.forward(input_ids, positions)

        def compute_logits(self, hidden_states):
            return self.worker.logits(hidden_states)

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


def _kv_tensors(cls, regions: list[tuple[list[str], int]], num_blocks: int) -> list:
    """One backing allocation, a region per (layers, page size): the layers of a region alias its bytes, as
    vLLM overlays its groups' layers (0.33.0 `KVCacheTensor(size, layers, layer_stride, block_stride, offset)`,
    overlapping ranges alias, kv_cache_interface.py:1475-1487; earlier releases `KVCacheTensor(size,
    shared_by)`, one allocation per region)."""
    if "layers" not in getattr(cls, "__dataclass_fields__", {}):
        return [cls(size=page * num_blocks, shared_by=list(names)) for names, page in regions]
    total = sum(page for _, page in regions) * num_blocks
    out, offset = [], 0
    for names, page in regions:
        out.extend(cls(size=total, layers=[name], layer_stride=page * num_blocks, block_stride=page, offset=offset)
                   for name in names)
        offset += page * num_blocks
    return out


class _Runner:
    """vLLM's CPUModelRunner with the harness's model and real KV tensors for `num_blocks` blocks."""

    def __init__(self, vc, num_blocks: int, num_spec: int, checkpoint: tuple[int, int] | None = None,
                 mixers: tuple[str, ...] = TWO_GROUPS, hidden: tuple = ()) -> None:
        import torch
        import vllm.v1.worker.cpu.shm  # noqa: F401  (CUDA stand-ins; cpu_worker.py imports it first)
        from vllm.config import set_current_vllm_config
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
        from vllm.v1.worker.cpu.model_runner import CPUModelRunner

        AttnLayer, MambaLayer, TagModel = layer_classes()
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
            self.layers = [layer_name(g, mixer) for g, mixer in enumerate(mixers)]
            hidden = tuple((self.layers[g], block) for g, block in hidden)  # extract_hidden_states's group: its block
            for name, mixer in zip(self.layers, mixers):
                # vLLM's Mamba2 layer declares a prefill checkpoint block (mamba_mixer2.py:1108-1118), its Mamba1
                # layer none (layers/mamba/abstract.py:72-91)
                ctx[name] = AttnLayer(dict(hidden).get(name, B)) if mixer == "attention" else MambaLayer(
                    num_spec + 1, checkpoint is not None and mixer == "mamba2", mixer)
            if checkpoint is not None:
                # the prefix-cache granularity the engine core resolves and the worker adopts
                # (v1/engine/core.py:356-370, v1/worker/gpu_worker.py:877-880): the scheduler's own values
                vc.cache_config.hash_block_size, vc.cache_config.cache_hit_alignment_tokens = checkpoint
            with _ngram_while_built(vc.speculative_config):
                self.runner = r = CPUModelRunner(vc, torch.device("cpu"))
            self.model = TagModel(None)
            r.load_model(model=self.model)
            specs = r.get_kv_cache_spec()
            attn = [n for n, mixer in zip(self.layers, mixers) if mixer == "attention" and n not in dict(hidden)]
            self.mamba_layers = [n for n, mixer in zip(self.layers, mixers) if mixer != "attention"]
            # the groups' layers overlay one region per kind (vLLM's layout: a block id is one group's at a time)
            tensors = _kv_tensors(KVCacheTensor, [(attn, specs[attn[0]].page_size_bytes),
                                                  (self.mamba_layers, specs[self.mamba_layers[0]].page_size_bytes)]
                                  + [([n], specs[n].page_size_bytes) for n, _ in hidden], num_blocks)
            kvc = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors,
                                kv_cache_groups=[KVCacheGroupSpec([n], specs[n]) for n in self.layers])
            r.initialize_kv_cache(kvc)
            r._init_kv_zero_meta()
        from harness.engine.tagged import TaggedStates

        self.states = TaggedStates(num_blocks, num_spec, False, tensors=tuple(ctx[self.mamba_layers[0]].kv_cache),
                                   conv_only=conv_window_only(mixers))
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
        _zero_block_tables(r.block_tables)
        self.states.reset()


def _zero_block_tables(bt) -> None:
    """The block tables as BlockTables.__init__ leaves them (v1/worker/gpu/block_table.py:65-95 in 0.33.0: zeros).
    A row keeps the ids of the slot's earlier requests past its own blocks, and a kernel that reads past the row
    (a table one block short) reads them: within one engine that is vLLM's own behaviour, but a scenario is a
    fresh engine, so its replay must not depend on the scenario replayed before it in the process."""
    for table in bt.block_tables:
        table.gpu.zero_()
    for table in getattr(bt, "input_block_tables", ()):
        table.zero_()
    bt.slot_mappings.zero_()
    counts = bt.num_blocks
    for buf in (getattr(counts, "cpu", None), getattr(counts, "gpu", None)):
        if buf is not None:
            buf.zero_()
    if hasattr(counts, "copy_to_uva"):  # 0.33.0: the device view is a copy of the host one
        counts.copy_to_uva()


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
             bool(vc.scheduler_config.async_scheduling), eg.mamba_cache_mode, eg.mamba_block_size,
             g.mtp_modules, g.lookahead_hashes, tuple(driver.hidden_blocks.items()), driver.group_mixers)
    return shape, sizes, vc


@contextlib.contextmanager
def _ngram_while_built(spec):
    """No EAGLE or MTP draft model on CPU (harness/engine/config.py _as_eagle, _as_mtp): while the runner is built
    its config reads n-gram without a draft checkpoint, so it holds an n-gram speculator, whose proposal the harness
    replaces anyway (V2Worker._propose); the method and checkpoint stand-in are restored after."""
    method = getattr(spec, "method", None)
    if method not in ("eagle", "mtp"):
        yield
        return
    draft = spec.draft_model_config
    object.__setattr__(spec, "method", "ngram")
    object.__setattr__(spec, "draft_model_config", None)
    try:
        yield
    finally:
        object.__setattr__(spec, "method", method)
        object.__setattr__(spec, "draft_model_config", draft)


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
        run = _Runner(vc, max(num_blocks, RUNNER_FLOORS["num_blocks"]), driver.eg.num_speculative_tokens, shape[4],
                      shape[-1], hidden=shape[-2])
        run.sizes = sizes
        _RUNNERS[shape] = run
        gc.freeze()  # vLLM's load_model runs gc.collect() twice (utils/mem_utils.py:86): ~0.5 s each over an
        # untouched heap of import-time objects; frozen, they are not walked again
    else:
        run.reset()
    return run
