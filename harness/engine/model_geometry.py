"""KV cache groups and block sizes of a real hybrid model (`geometry.model`), built as vLLM builds them.

From the model's `config.json` (harness/model_configs, no weights), through vLLM's own code:
- the model's config hooks (`VllmConfig.try_verify_and_update_config`, config/vllm.py:2735 in 0.33.0: e.g.
  Nemotron-H's float32 SSM cache dtype, models/config.py:812-840; mode none's Mamba block = max_model_len);
- the block size: `Platform._align_hybrid_block_size` (platforms/interface.py:940-1135 in 0.33.0) with vLLM's
  FlashAttention backend, the CUDA default for these models: the attention block is raised until its page
  holds a Mamba state (the model class's `get_mamba_state_shape_from_config` / `_dtype_from_config`), the
  Mamba page padded to it, and in align mode the Mamba block set to it;
- each layer's spec as its layer builds it: `Attention.get_kv_cache_spec` (layers/attention/attention.py:611:
  a FullAttentionSpec at the block size) and `MambaBase.get_kv_cache_spec` (layers/mamba/abstract.py:72-91);
- the grouping: `get_global_kv_cache_groups` (v1/core/kv_cache_planning.py:1607 in 0.33.0, after the layout is
  resolved as the engine core resolves it, v1/engine/core.py:286) or `kv_cache_utils.get_kv_cache_groups`
  (0.26-0.32). Groups whose layers share a spec are one group per "slot" of layers, e.g. Nemotron-H 4B: six
  Mamba groups and one attention group.

What stands in for the GPU: no layer is instantiated (the layer list comes from the HF config's own layer-type
field, as `ModelConfig.get_num_layers_by_block_type` reads it, config/model.py:1727); tensor parallelism is 1.
The scheduler gets the groups as vLLM builds them; the worker keeps one layer per group (the layers of a group
share its block table and state indices, so one stands for all) with the harness's tagged state shapes.
Mamba2, Mamba1, ShortConv and GatedDeltaNet models run: the simulated forward reads the metadata vLLM's own Mamba2,
Mamba1, ShortConv or GDN builder built for the group (a Mamba1 model at K = 0 only: its decode kernels take no
accepted counts, mamba_mixer.py:355-391; a ShortConv model's layers keep the conv window only:
harness/engine/tagged.py; a GatedDeltaNet model without prefill checkpoints: harness/engine/mamba_meta.py)."""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass

from harness.errors import BadInput
from harness.model_configs import load
from harness.vllm_adapter import installed_version, supported_kwargs

ATTENTION_KINDS = {"attention", "full_attention", "*", "hybrid"}
MAMBA_KINDS = {"mamba", "mamba2", "linear_attention", "m", "conv", "short_conv"}  # "conv": LFM2's ShortConv


def group_kinds(groups) -> tuple[str, ...]:
    """Each KV cache group's kind in vLLM's order: "mamba" (a MambaSpec), "hidden" (extract_hidden_states's
    cache-only layer: nothing the model reads back) or "attention" (the engine tier's one source for it: its
    driver, workers and runner pools key on it)."""
    from vllm.v1.kv_cache_interface import HiddenStateCacheSpec, MambaSpec

    return tuple("mamba" if isinstance(g.kv_cache_spec, MambaSpec) else
                 "hidden" if isinstance(g.kv_cache_spec, HiddenStateCacheSpec) else "attention" for g in groups)


def group_mixers(groups) -> tuple[str, ...]:
    """Each KV cache group's layer family: "attention", or the Mamba type its layers declare (`MambaSpec.
    mamba_type`: "mamba2", or "mamba1" for Jamba's `MambaMixer`), which picks the group's metadata builder in the
    worker (`MambaBase.get_attn_backend`, layers/mamba/abstract.py:93-95 in 0.33.0)."""
    from vllm.v1.kv_cache_interface import MambaSpec

    def mixer(spec) -> str:
        kind = getattr(spec.mamba_type, "name", spec.mamba_type)
        return str(kind).lower()

    return tuple(mixer(g.kv_cache_spec) if isinstance(g.kv_cache_spec, MambaSpec) else "attention" for g in groups)


def mamba_type_value(mixer: str):
    """`MambaSpec.mamba_type` / `MambaBase.mamba_type` for a mixer name: vLLM's enum (0.30+ register the Mamba
    backends by it), the name itself where releases name Mamba types by string."""
    try:
        from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    except ImportError:
        return mixer
    return MambaAttentionBackendEnum[mixer.upper()]


def kind_indices(kinds: tuple[str, ...], kind: str) -> tuple[int, ...]:
    return tuple(i for i, k in enumerate(kinds) if k == kind)


@dataclass(frozen=True)
class ModelGroups:
    groups: tuple  # vLLM's KVCacheGroupSpec list, specs as vLLM builds them

    @property
    def kinds(self) -> tuple[str, ...]:
        return group_kinds(self.groups)

    @property
    def attn_groups(self) -> tuple[int, ...]:
        return kind_indices(self.kinds, "attention")

    @property
    def mamba_groups(self) -> tuple[int, ...]:
        return kind_indices(self.kinds, "mamba")


def _module_names(model_cls, fragment: str) -> bool:
    """Whether the module defining a vLLM model class names something containing `fragment` (the layer classes it
    builds its decoder layers with)."""
    import sys

    return any(fragment in name for name in vars(sys.modules.get(model_cls.__module__)))


def parallel_hybrid(model_cls) -> bool:
    """Whether every decoder layer of the vLLM model class runs attention and a Mamba mixer side by side (Falcon-H1:
    `FalconH1ParallelHybrid`, models/falcon_h1.py:313-365 in 0.33.0: a `self_attn` and a `mamba` per layer)."""
    return _module_names(model_cls, "ParallelHybrid")


def layer_kinds(hf, parallel: bool = False) -> list[str]:
    """Each decoder layer's kind ("attention", "mamba", "both" for a parallel hybrid's layer, or "" for MLP-only),
    from the HF config's own layer-type field: `layers_block_type` (Nemotron-H, Jamba, Zamba2), `layer_types`
    (granite-4.0-h, Qwen3-Next, LFM2) or `attn_layer_indices` (Bamba); the order config/model.py:1752-1784 reads them
    in. A parallel hybrid (Falcon-H1) has no such field: each of its layers is both."""
    if parallel:
        return ["both"] * hf.num_hidden_layers
    types = getattr(hf, "layers_block_type", None) or getattr(hf, "layer_types", None)
    if types is None and getattr(hf, "attn_layer_indices", None) is not None:
        attn = set(hf.attn_layer_indices)
        types = ["attention" if i in attn else "mamba" for i in range(hf.num_hidden_layers)]
    if types is None:
        raise BadInput(f"model config {type(hf).__name__}: no layer-type field (layers_block_type, layer_types or "
                       "attn_layer_indices) to find its attention and Mamba layers by")
    kinds = []
    for t in types:
        t = str(t).lower()
        kinds.append("attention" if t in ATTENTION_KINDS else "mamba" if t in MAMBA_KINDS else "")
    if "attention" not in kinds or "mamba" not in kinds:
        raise BadInput(f"model config {type(hf).__name__}: not a hybrid (attention and Mamba layers) model")
    return kinds


class _ModelShapedConfig:
    """The model config vLLM's block-size and grouping code reads (a ModelConfig needs the hub and the model's
    files): the HF config, its architecture and dtype; everything else is the scenario's stand-in's."""

    def __init__(self, base, hf, arch: str, dtype) -> None:
        self._base, self.hf_config, self.hf_text_config = base, hf, hf
        self.architecture, self.architectures, self.dtype = arch, [arch], dtype
        self.use_mla, self.model_impl, self.convert_type, self.config_updated = False, "auto", "none", False
        from vllm.model_executor.models import ModelRegistry

        self.registry = ModelRegistry

    @property
    def supports_kv_cache_grouping(self) -> bool:  # the model's interfaces (models/registry.py:934), in-process
        from vllm.model_executor.models.registry import _ModelInfo

        cls, _ = self.registry.resolve_model_cls(self.architectures, model_config=self)
        return bool(getattr(_ModelInfo.from_model_cls(cls), "supports_kv_cache_grouping", False))

    def get_num_kv_heads(self, parallel_config) -> int:
        heads = getattr(self.hf_config, "num_key_value_heads", None) or self.hf_config.num_attention_heads
        return max(1, heads // parallel_config.tensor_parallel_size)

    def get_head_size(self) -> int:
        hf = self.hf_config
        return getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads

    def __getattr__(self, name: str):
        if name == "_base":  # a copy (copy.deepcopy) asks before its fields are set
            raise AttributeError(name)
        return getattr(self._base, name)


def _hf_config(name: str, doc: dict):
    from transformers import CONFIG_MAPPING

    fields = {k: v for k, v in doc.items() if k not in ("model_type", "_name")}
    try:
        return CONFIG_MAPPING[doc["model_type"]](**fields)
    except KeyError:
        raise BadInput(f"model config {name!r}: model_type {doc['model_type']!r} is unknown to the installed "
                       "transformers") from None
    except (TypeError, ValueError) as exc:
        raise BadInput(f"model config {name!r}: transformers refuses it: {exc}") from None


_BUILT: dict = {}  # (config, VllmConfig, block, mode, K) -> ModelGroups: a campaign revisits its geometries


def model_groups(ref, vc, block_size: int, mode: str, K: int, hidden: int = 0) -> ModelGroups:
    """The model's groups for the scenario's VllmConfig (`vc`, kept unchanged), BadInput where vLLM refuses or
    sets another block size than the scenario's. `hidden`: extract_hidden_states's aux layers (`hidden_state_spec`)."""
    key = (json.dumps(ref, sort_keys=True), id(vc), block_size, mode, K, hidden)
    if key not in _BUILT:
        if len(_BUILT) > 64:
            _BUILT.clear()
        _BUILT[key] = (_model_groups(key[0], vc, block_size, mode, K, hidden), vc)  # vc kept: its id stays its own
    return _BUILT[key][0]


def _model_groups(key: str, vc, block_size: int, mode: str, K: int, hidden: int = 0) -> ModelGroups:
    vc, model_cls, specs = model_layer_specs(json.loads(key), vc, block_size, mode, K)
    if hidden:
        specs[HIDDEN_LAYER] = hidden_state_spec(vc, model_cls, hidden, block_size)
    mixer = model_mixer(model_cls)
    if K and not decodes_with_accepted_counts(mixer):
        # mamba_mixer.py:355-391 in 0.33.0: the Mamba1 decode kernels get no accepted counts and no query starts
        # (ShortConv's before 0.33: short_conv.py), so where they read with drafts is not vLLM's documented rule
        raise BadInput(f"geometry.model {load(json.loads(key))[0]!r}: a {MIXER_NAMES[mixer]} model with speculative "
                       f"decoding (K={K}); vLLM {installed_version()}'s {MIXER_NAMES[mixer]} decode kernels take no "
                       "accepted counts, so the engine tier follows them at K = 0 only")
    return ModelGroups(tuple(kv_cache_groups_of(vc, specs)))


def model_layer_specs(ref, vc, block_size: int, mode: str, K: int) -> tuple:
    """(the config after vLLM's hooks, the model class, each layer's spec as its layer builds it) for the model
    `ref` at a user block of `block_size`: what vLLM groups (`kv_cache_groups_of`)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    name, doc = load(ref)
    vc, mc, model_cls = model_config_for(name, doc, vc, block_size, mode)
    cc = vc.cache_config
    if cc.block_size != block_size:
        raise BadInput(f"geometry.model {name!r}: vLLM {installed_version()} sets the block size to {cc.block_size} for "
                       f"this model (its attention page must hold a Mamba state), not {block_size}: the scenario's "
                       f"mamba_block_size must be at least {cc.block_size} and one vLLM keeps")
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    if hasattr(FlashAttentionBackend, "supports_block_size") and not FlashAttentionBackend.supports_block_size(block_size):
        raise BadInput(f"geometry.model {name!r}: FlashAttention does not take block size {block_size}")
    mamba_block = cc.mamba_block_size or vc.model_config.max_model_len
    mixer = model_mixer(model_cls)
    kinds = layer_kinds(mc.hf_config, parallel=parallel_hybrid(model_cls))
    shapes = model_cls.get_mamba_state_shape_from_config(vc)
    dtypes = model_cls.get_mamba_state_dtype_from_config(vc)
    specs: dict = {}
    for i, kind in enumerate(kinds):
        if kind in ("attention", "both"):
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                block_size=block_size, num_kv_heads=mc.get_num_kv_heads(vc.parallel_config),
                head_size=mc.get_head_size(), dtype=mc.dtype)
        if kind in ("mamba", "both"):
            specs[f"model.layers.{i}.mixer"] = MambaSpec(**supported_kwargs(
                MambaSpec, shapes=tuple(tuple(s) for s in shapes), dtypes=tuple(dtypes), block_size=mamba_block,
                page_size_padded=cc.mamba_page_size_padded, mamba_type=mamba_type_value(mixer), mamba_cache_mode=mode,
                num_speculative_blocks=K))
    attention = next((sp for sp in specs.values() if isinstance(sp, FullAttentionSpec)), None)
    for j in range(_mtp_layers(model_cls, mc.hf_config, vc)):
        # the drafter's layers join the grouping as the engine core sees them (its static forward context holds the
        # target's and the drafter's layers): an MTP head's decoder layers are full attention at the target's spec
        # (qwen3_next_mtp.py:62-95 in 0.33.0, prefix mtp.layers.{j}); vLLM 0.33.0 puts Qwen3-Next's 13 into one group
        specs[f"mtp.layers.{j}.self_attn.attn"] = attention
    return vc, model_cls, specs


HIDDEN_LAYER = "hidden_states.cache_only_layers.0"


def hidden_state_spec(vc, model_cls, layers: int, block_size: int):
    """The cache-only layer of speculative method extract_hidden_states: `layers` aux hidden states of
    hidden_size each per token, in the model's dtype (`CacheOnlyAttentionLayer.get_kv_cache_spec`,
    models/extract_hidden_states.py:306-313 and 341-357 in 0.34.0, 326-333 in 0.26.0), built at the block size;
    vLLM's grouping gives it its own group and block (kv_cache_planning.py:1223-1242 in 0.34.0). vLLM runs it
    on models with aux hidden-state outputs only (`supports_eagle3`: gpu_model_runner.py:5428 in 0.26.0)."""
    from vllm.model_executor.models.interfaces import supports_eagle3
    from vllm.v1.kv_cache_interface import HiddenStateCacheSpec

    if not supports_eagle3(model_cls):
        raise BadInput(f"geometry.hidden_state_layers: vLLM {installed_version()}'s {model_cls.__name__} has no aux "
                       "hidden-state outputs (SupportsEagle3), which extract_hidden_states needs")
    mc = vc.model_config
    return HiddenStateCacheSpec(block_size=block_size, num_kv_heads=layers, head_size=mc.hf_config.hidden_size,
                                dtype=mc.dtype)


def engine_block_size(groups) -> int:
    """`cache_config.block_size` as the engine core sets it after KV init: the minimum block over the groups
    (v1/engine/core.py:311-314 in 0.26.0), over the prefix-cacheable ones where the release says so (0.30+,
    core.py:366-377 in 0.34.0)."""
    sizes = [g.kv_cache_spec.block_size for g in groups]
    if _core_skips_uncacheable_groups():
        sizes = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable] or sizes
    return min(sizes)


@functools.cache  # the release's source, read once per process (every scenario's scheduler build asks)
def _core_skips_uncacheable_groups() -> bool:
    import inspect

    from vllm.v1.engine.core import EngineCore

    return "prefix_cacheable" in inspect.getsource(EngineCore._initialize_kv_caches)


def _mtp_layers(model_cls, hf, vc) -> int:
    """The drafter layers an EAGLE-style drafter (the engine tier's async drafts) adds for a model that ships its
    own MTP head (Qwen3-Next: `num_nextn_predict_layers`, default 1, qwen3_next_mtp.py:63), else 0. The
    harness's EAGLE scenarios stand for that head (vLLM's method "mtp", or "eagle" with the MTP weights)."""
    spec = vc.speculative_config
    if spec is None or spec.method not in ("eagle", "mtp") or "Qwen3Next" not in model_cls.__name__:
        return 0
    return int(getattr(hf, "num_nextn_predict_layers", 1) or 0)


MIXER_NAMES = {"mamba2": "Mamba2", "mamba1": "Mamba1", "short_conv": "ShortConv", "gdn_attn": "GatedDeltaNet"}


def decodes_with_accepted_counts(mixer: str) -> bool:
    """Whether the installed release's layer of this Mamba type gives its decode kernels the accepted counts (the
    rule the simulated forward follows with drafts): Mamba2 always; Mamba1 never (mamba_mixer.py:355-391 in
    0.33.0); ShortConv where its forward passes them (short_conv.py:295-320 in 0.33.0; not in 0.26-0.27)."""
    if mixer == "mamba1":
        return False
    if mixer != "short_conv":
        return True
    import inspect

    from vllm.model_executor.layers.mamba.short_conv import ShortConv

    return "num_accepted_tokens" in inspect.getsource(ShortConv)


def model_mixer(model_cls) -> str | None:
    """The Mamba type of a vLLM model class's Mamba layers: "mamba2" (`MambaMixer2`: Nemotron-H, granite-4.0-h),
    "mamba1" (`MambaMixer`: Jamba), "short_conv" (`ShortConv`: LFM2), "gdn_attn" (GatedDeltaNet: Qwen3-Next), None
    for the other families, read from the state copy functions the class declares and the mixer class its module
    builds its layers with (Mamba1, Mamba2 and GatedDeltaNet models declare the same copy functions:
    mamba_utils.py:403-417)."""
    import sys

    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator

    copy_funcs = getattr(model_cls, "get_mamba_state_copy_func", None)
    calc = MambaStateCopyFuncCalculator
    if copy_funcs is not None and hasattr(calc, "short_conv_state_copy_func") \
            and copy_funcs() == calc.short_conv_state_copy_func():
        return "short_conv"
    if copy_funcs is None or copy_funcs() != calc.mamba2_state_copy_func():
        return None
    module = sys.modules.get(model_cls.__module__)
    # GatedDeltaNet declares Mamba2's copy functions too (gated_delta_net_state_copy_func, mamba_utils.py:415-417):
    # its layer class (QwenGatedDeltaNetAttention, layers/mamba/gdn/ in 0.33.0) names it
    if _module_names(model_cls, "GatedDeltaNet"):
        return "gdn_attn"
    if hasattr(module, "MambaMixer2"):
        return "mamba2"
    return "mamba1" if hasattr(module, "MambaMixer") else None


def default_user_block(name: str, doc: dict, vc) -> int:
    """The block a user who gives no --block-size starts from: the attention backend's preference for the release's
    default (platforms/interface.py:776-791 and CacheConfig.DEFAULT_BLOCK_SIZE 64 in 0.34.0; 16 before 0.31, whose
    platforms set it directly), before the hybrid alignment raises it."""
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    from harness.release import vllm_release

    default = vllm_release().default_block_size
    prefer = getattr(Platform, "_preferred_block_size_for_backends", None)
    if prefer is None:
        return default
    from vllm.config.vllm import set_current_vllm_config

    shaped = model_config_for(name, doc, vc, default, "align")[0]  # the backend reads the model's head size
    with set_current_vllm_config(shaped):
        return prefer([FlashAttentionBackend], default, shaped)


def model_config_for(name: str, doc: dict, vc, block_size: int, mode: str):
    """(a copy of `vc` carrying the model, its model config, the model class) after vLLM's config hooks and its
    block-size rule ran for a user block of `block_size`: `cache_config.block_size` is what vLLM set."""
    import torch
    from vllm.config import VllmConfig
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    hf = _hf_config(name, doc)
    arch = doc["architectures"][0]
    dtype = getattr(hf, "dtype", None) or torch.bfloat16
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    vc = copy.deepcopy(vc)  # the scenario's config is shared (cached): the hooks below change theirs
    mc = _ModelShapedConfig(vc.model_config, hf, arch, dtype)
    object.__setattr__(vc, "model_config", mc)
    try:
        model_cls, _ = mc.registry.resolve_model_cls(mc.architectures, model_config=mc)
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal, reported as bad input
        raise BadInput(f"model config {name!r}: vLLM {installed_version()} has no model class for {arch}: {exc}") \
            from None
    if model_mixer(model_cls) is None:
        raise BadInput(f"model config {name!r} ({arch}): neither a Mamba2, a Mamba1, a ShortConv nor a GatedDeltaNet "
                       "model; the engine tier simulates those kernels' state reads only")
    # the hybrid KV cache manager as a GPU deployment has it: vLLM turns it off only off-GPU or for a connector
    # without SupportsHMA (config/vllm.py:1571-1637 in 0.26.0; HarnessConnector supports it)
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False
    cc = vc.cache_config
    cc.block_size, cc.mamba_cache_mode = block_size, mode
    cc.mamba_block_size, cc.mamba_page_size_padded = (block_size if mode == "align" else None), None
    VllmConfig.try_verify_and_update_config(vc)
    try:
        Platform._align_hybrid_block_size(vc, FlashAttentionBackend)
    except (ValueError, AssertionError) as exc:
        raise BadInput(f"model config {name!r}: vLLM {installed_version()} refuses block {block_size}: {exc}") \
            from None
    return vc, mc, model_cls


def kv_cache_groups_of(vc, specs: dict) -> list:
    """vLLM's grouping of the model's layers, as the engine core calls it for this release: the KV cache layout
    resolved first where the release resolves one (0.30+, v1/engine/core.py:286 in 0.33.0), then
    `get_global_kv_cache_groups` (0.33) or `kv_cache_utils.get_kv_cache_groups` (0.26-0.32)."""
    from vllm.v1.attention.backends import utils as backend_utils

    if hasattr(backend_utils, "resolve_kv_cache_layout"):
        from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
        from vllm.v1.attention.backends.mamba2_attn import Mamba2AttentionBackend

        backends = [FlashAttentionBackend, Mamba2AttentionBackend]
        names = [layout.name for layout in backend_utils.get_supported_kv_cache_layouts(backends)]
        backend_utils.resolve_kv_cache_layout(vc, [names], list(specs.values()))
    try:
        from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups  # 0.33
    except ImportError:
        from vllm.v1.core.kv_cache_utils import get_kv_cache_groups

        return get_kv_cache_groups(vc, specs)
    return get_global_kv_cache_groups(vc, [specs])


def conv_window_only(mixers) -> bool:
    """Whether every Mamba-like group keeps a conv window and nothing else (ShortConv: LFM2), so the workers' tagged
    pages hold one state tensor per layer (harness/engine/tagged.py)."""
    return set(mixers) - {"attention"} == {"short_conv"}


def state_copy_funcs(mamba_type):
    """The state copy functions vLLM's models declare for a Mamba type (`MambaStateCopyFuncCalculator`,
    mamba_utils.py:395-420 in 0.33.0): the conv window only for ShortConv, conv window and SSM state otherwise."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator as calc

    if str(getattr(mamba_type, "name", mamba_type)).lower() == "short_conv":
        return calc.short_conv_state_copy_func()
    return calc.mamba2_state_copy_func()
