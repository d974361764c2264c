"""How the engine tier configures vLLM for a scenario: the `VllmConfig` (validated by vLLM, cached per
geometry), the stand-in model config, the block sizes vLLM derives in align mode, the model runner and async
scheduling vLLM picks, the `Scheduler` itself, and the buffer extents the workers' model runners are built at.
Set-up only: the step loop is harness/engine/scheduler.py, the workers harness/engine/workers.py.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from dataclasses import dataclass

from harness.errors import BadInput
from harness.scenario import VOCAB_SIZE, Scenario
from harness.vllm_adapter import (
    installed_version,
    retention_config,
    supports_failed_recving,
    supports_prefill_checkpoints,
    supports_prefix_match_unit,
    supports_retention,
    vllm_namespace,
)

CONNECTOR_MODULE = "harness.engine.connector"


class ModelConfigStandIn:
    """The model-config attributes vLLM's Scheduler reads (0.27.1 - 0.33.0); anything else is a harness
    error naming the attribute, so a release that reads more fails loudly instead of guessing."""

    uses_mrope = False
    uses_xdrope = False  # read by 0.29.x (XD-RoPE positions); a hybrid test model has none
    is_encoder_decoder = False
    runner_type = "generate"
    is_diffusion = False
    supports_multimodal_inputs = False
    is_multimodal_model = False
    skip_tokenizer_init = True
    is_hybrid = True
    multimodal_config = None
    return_sampling_mask = False
    enable_return_routed_experts = False
    # read by the V1 model runner (--runner v1, harness/engine/runner_v1.py; gpu_model_runner.py __init__,
    # parallel_state.py:2327 in 0.33.0): a float32 model without MoE, M-RoPE, prompt embeds or sliding window
    is_moe = False
    logits_processors = None
    logprobs_mode = "raw_logprobs"
    enable_prompt_embeds = False
    is_multimodal_raw_input_only_model = False
    is_mm_prefix_lm = False
    is_attention_free = False
    use_fp64_gumbel = False
    mrope_num_dims = None
    model = "hybrid-harness/stand-in"
    hf_config = None
    hf_text_config = None
    uses_xdrope_dim = 0  # read by 0.27.x's V1 runner (XD-RoPE dims: none)
    disable_cascade_attn = True  # read by 0.27.x's V1 runner
    uses_alibi = False  # read by 0.27.x's V1 runner
    rswa_window = None  # read by the V1 runner's attention metadata (gpu_model_runner.py:2354 in 0.33.0): no R-SWA

    def get_vocab_size(self) -> int:  # the scenario's token ids (harness.scenario.VOCAB_SIZE)
        return VOCAB_SIZE

    def get_sliding_window(self):
        return None

    def get_mamba_chunk_size(self) -> int:  # read by the Mamba2 metadata builder (mamba2_attn.py:152 in 0.33.0)
        return 256

    def get_inputs_embeds_size(self) -> int:
        return 2

    def get_hidden_size(self) -> int:
        return 2

    def get_num_attention_heads(self, parallel_config=None) -> int:  # read by 0.27.x's runner
        return 1

    def __init__(self, max_model_len: int) -> None:
        import torch  # already imported with vLLM

        self.max_model_len = max_model_len
        self.dtype = torch.float32  # the V1 runner's buffer dtype (gpu_model_runner.py:501)

    def __getattr__(self, name: str):
        raise AttributeError(f"the engine tier's stand-in model config has no {name!r} (vLLM reads it)")


@dataclass(frozen=True)
class EngineGeometry:
    block_size: int
    hash_block_size: int
    num_speculative_tokens: int
    mamba_cache_mode: str = "align"
    mamba_block_size: int = 0  # the Mamba group's block: block_size in align mode, max_model_len in mode none


def derive_geometry(scenario: Scenario) -> EngineGeometry:
    """Block sizes as vLLM sets them in align mode; BadInput for what vLLM's engine cannot be given."""
    g = scenario.geometry
    if g.eagle_block_drop and not g.num_speculative_tokens:
        raise BadInput("geometry.eagle_block_drop needs num_speculative_tokens > 0 (vLLM drops the block for EAGLE "
                       "drafters only)")
    if any(r.external is not None and r.external.load_fails for r in scenario.requests) and not supports_failed_recving():
        raise BadInput(f"external.load_fails: vLLM {installed_version()} has no KVConnectorOutput.failed_recving, the "
                       "only failed-load report it accepts for a hybrid model (0.30+)")
    if g.prefill_checkpoint and not supports_prefill_checkpoints():
        raise BadInput(f"geometry.prefill_checkpoint: vLLM {installed_version()} has no Mamba prefill checkpoint "
                       "blocks whose worker export this harness mirrors (0.33.x)")
    if g.mamba_cache_mode != "align" and g.mamba_cache_mode not in _cache_modes():
        raise BadInput(f"geometry.mamba_cache_mode {g.mamba_cache_mode!r}: vLLM {installed_version()}'s CacheConfig "
                       f"has no such mode (it has {', '.join(_cache_modes())})")
    if g.mamba_cache_mode == "all":
        _check_all_mode(g)
    _check_scheduler_knobs(scenario)
    _check_drafter(g)
    # mode none: vLLM sets the Mamba block to max_model_len when prefix caching is off
    # (model_executor/models/config.py:781-787 in 0.33.0, MambaModelConfig.verify_and_update_config)
    mamba_block = g.max_model_len if g.mamba_cache_mode == "none" else g.mamba_block_size
    return EngineGeometry(g.mamba_block_size, g.hash_block_size, g.num_speculative_tokens, g.mamba_cache_mode,
                          mamba_block)


def _check_scheduler_knobs(scenario: Scenario) -> None:
    """BadInput for a 0.34 scheduler knob or a prefix-cache hit limit the release does not have."""
    from harness.release import vllm_release
    from harness.scenario import SCHEDULER_KNOBS

    release = vllm_release()
    for name in SCHEDULER_KNOBS:
        if getattr(scenario.geometry, name) is not None and name not in release.scheduler_knobs:
            raise BadInput(f"geometry.{name}: vLLM {installed_version()}'s SchedulerConfig has no {name} (0.34.0+)")
    if not release.hit_limit and any(r.prefix_cache_hit_limit is not None for r in scenario.requests):
        raise BadInput(f"prefix_cache_hit_limit: vLLM {installed_version()}'s Request has no prefix_cache_hit_limit "
                       "(v1/request.py, 0.34.0+)")


def _check_drafter(g) -> None:
    """BadInput for a drafter setting the release's scheduler has no code for."""
    from harness.release import vllm_release

    if g.multi_module_mtp and not vllm_release().mtp_reserve:
        raise BadInput(f"geometry.mtp_modules: vLLM {installed_version()}'s Scheduler has no multi-module MTP prefill "
                       "lookahead (0.28+)")
    if g.lookahead_hashes and not vllm_release().lookahead_hashes:
        raise BadInput(f"geometry.lookahead_hashes: vLLM {installed_version()}'s connectors cannot ask for lookahead "
                       "block hashes (0.34+)")


def set_scheduler_knobs(vc, g) -> None:
    """The geometry's 0.34 scheduler knobs on the (cached, shared) config the Scheduler reads, vLLM's defaults where
    it leaves one unset, as the pool size is set (build_scheduler)."""
    from harness.release import vllm_release
    from harness.scenario import SCHEDULER_KNOBS

    fields = type(vc.scheduler_config).__dataclass_fields__
    for name in vllm_release().scheduler_knobs & set(SCHEDULER_KNOBS):
        value = getattr(g, name)
        if value is None:  # a pydantic dataclass keeps its Field(default=...) as the field's default
            value = getattr(fields[name].default, "default", fields[name].default)
        object.__setattr__(vc.scheduler_config, name, value)


MAMBA_CHUNK_SIZE = 256  # the stand-in model's Mamba2 chunk (ModelConfigStandIn.get_mamba_chunk_size)


def _check_all_mode(g) -> None:
    """Mode "all" (0.26-0.32: every block's state cached, intermediate states written at block boundaries) as
    vLLM configures it: the Mamba block a multiple of the Mamba2 chunk (and of FlashAttention's 16), the
    attention block the same (platforms/interface.py:909-919 in 0.30.0, `_align_hybrid_block_size`), one hash
    unit per block. Speculative decoding runs (the decode kernels' per-draft offsets from the previous step's
    last block: harness/engine/mamba_meta.py)."""
    if g.mamba_block_size % MAMBA_CHUNK_SIZE:
        raise BadInput(f"geometry.mamba_cache_mode 'all': vLLM sets the Mamba block to a multiple of the Mamba2 chunk "
                       f"size ({MAMBA_CHUNK_SIZE}), not {g.mamba_block_size} (platforms/interface.py, "
                       "_align_hybrid_block_size)")
    if g.hash_block_size != g.mamba_block_size:
        raise BadInput("geometry.mamba_cache_mode 'all': one hash unit per block (hash_block_size = mamba_block_size)")
    if g.model is not None:
        raise BadInput("geometry.mamba_cache_mode 'all' with geometry.model: not followed yet")


def has_cache_mode_all() -> bool:
    """Whether this release has Mamba cache mode "all" (0.26-0.31) and the V1 runner runs it here."""
    return "all" in _cache_modes()


def _cache_modes() -> tuple[str, ...]:
    """The Mamba cache modes the installed release's CacheConfig accepts (`MambaCacheMode`)."""
    import typing

    from vllm.config import cache

    mode = getattr(cache, "MambaCacheMode", None)
    return typing.get_args(mode) if mode is not None else ("align",)


_V2_ENV = {"mirror": "0", "v1": "0", "v2": "1", "auto": None}  # VLLM_USE_V2_MODEL_RUNNER per --runner


def _pick_runner(runner: str) -> None:
    """`mirror` / `v1` force V1 and `v2` forces V2 through vLLM's own switch (config/vllm.py:748-750);
    `auto` leaves vLLM's pick (config/vllm.py:752-767). The scheduler reads it too (placeholder drafts
    under V2, scheduler.py:1642), so it is set before the config and the Scheduler are built. Where vLLM has
    no V1 runner (0.34+) the switch is gone (any value but 1 raises, platforms/interface.py:1476-1485 in 0.34.0):
    V2 is the only pick (the V1 worker refuses to be built, workers.make_worker) and the mirror follows V2's
    scheduler output."""
    from harness.release import vllm_release

    if not vllm_release().v1_runner:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        return
    value = _V2_ENV[runner]
    if value is None:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    else:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = value


def picks_v2(config_or_scheduler) -> bool:
    """vLLM's own runner pick for a config: V2 where it records `use_v2_model_runner` (the VllmConfig,
    config/vllm.py:748-767 in 0.33.0, and the Scheduler, scheduler.py:387), always where it has no V1 runner."""
    from harness.release import vllm_release

    return not vllm_release().v1_runner or bool(getattr(config_or_scheduler, "use_v2_model_runner", False))


ASYNC_WANTED = {"auto": None, "on": True, "off": False}  # --async-scheduling -> SchedulerConfig.async_scheduling


def follows_async(vc, runner: str, forward: str = "symbolic") -> bool:
    """Whether the worker for `runner` follows async scheduling. vLLM's V2 runner does (its own request state
    fills the scheduler's placeholders), and so does its V1 runner on the symbolic forward, without drafts
    (`prev_sampled_token_ids` fills them, gpu_model_runner.py:1740-1860) or with EAGLE drafts (the drafter's
    device-side next tokens, drafts and valid counts, :4328-4420: harness/engine/v1_eagle.py). Driven
    synchronously only: V1 with n-gram drafts (vLLM itself schedules those synchronously), V1 with the model
    forward, and the mirror worker."""
    if runner == "v2" or (runner == "auto" and picks_v2(vc)):
        return True
    spec = vc.speculative_config
    return runner in ("v1", "auto") and forward == "symbolic" and (spec is None or spec.method in ("eagle", "mtp"))


def _scheduler_vllm_config(scenario: Scenario, eg: EngineGeometry, runner: str, async_mode: str, forward: str):
    """The VllmConfig the Scheduler is built from: vLLM's async decision where the worker follows it (else
    synchronous; `on` refused where it cannot be followed), with the pool, 0.34's scheduler knobs and the
    retention set on the (cached) config."""
    g = scenario.geometry
    _pick_runner(runner)
    args = (max(1, min(len(scenario.requests), g.token_budget)), g.token_budget, g.max_model_len, eg.block_size,
            eg.hash_block_size, eg.num_speculative_tokens, g.eagle_block_drop, runner)
    modes = {"mamba_cache_mode": eg.mamba_cache_mode, "mamba_block": eg.mamba_block_size}
    wanted = ASYNC_WANTED[async_mode]
    if runner == "mirror" and wanted is None:  # a synchronous worker: vLLM's decision cannot be followed
        wanted = False
    modes.update(mtp_modules=g.mtp_modules, lookahead_hashes=g.lookahead_hashes)
    vc = vllm_config(*args, failure_policy=g.kv_load_failure_policy, async_scheduling=wanted, **modes)
    if vc.scheduler_config.async_scheduling and not follows_async(vc, runner, forward):
        if async_mode == "on":
            raise BadInput(f"--async-scheduling on: the {runner} worker is driven with synchronous scheduling only "
                           "here (async: vLLM's V2 runner, or its V1 runner without drafts on the symbolic "
                           "forward)")
        vc = vllm_config(*args, failure_policy=g.kv_load_failure_policy, async_scheduling=False, **modes)
    vc.cache_config.num_gpu_blocks = g.num_blocks  # the Scheduler reads it once, when built
    set_scheduler_knobs(vc, g)
    if supports_retention():  # the planner's source (kv_cache_planning.py:736-740); connectors read it there too
        vc.cache_config.prefix_cache_retention_interval = g.prefix_cache_retention_interval
    return vc


def build_scheduler(scenario: Scenario, eg: EngineGeometry, runner: str = "mirror", async_mode: str = "off",
                    forward: str = "symbolic"):
    """vLLM's scheduler (the class vLLM picks: `AsyncScheduler` under async scheduling) from a real VllmConfig
    for this scenario (BadInput if vLLM refuses the config). `async_mode` auto: vLLM's decision for this
    config, where the worker follows it (else synchronous); on: asked for."""
    v = vllm_namespace()
    from vllm.v1.structured_output import StructuredOutputManager

    g = scenario.geometry
    B, H, K = eg.block_size, eg.hash_block_size, eg.num_speculative_tokens
    vc = _scheduler_vllm_config(scenario, eg, runner, async_mode, forward)
    retention = retention_config(g)
    kci, torch = v.kci, v.torch
    mamba_kwargs = dict(block_size=eg.mamba_block_size, shapes=((1, 1),), dtypes=(torch.float32,),
                        mamba_cache_mode=eg.mamba_cache_mode, num_speculative_blocks=K)
    if g.prefill_checkpoint:
        mamba_kwargs.update(num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1)
    if g.model is None:  # one attention and one Mamba group (the shape vllm_adapter mirrors)
        groups = [kci.KVCacheGroupSpec(["attn"], kci.FullAttentionSpec(block_size=B, num_kv_heads=1, head_size=1,
                                                                       dtype=torch.float32)),
                  kci.KVCacheGroupSpec(["mamba"], kci.MambaSpec(**mamba_kwargs))]
    else:  # the model's groups as vLLM builds them (harness/engine/model_geometry.py)
        from harness.engine.model_geometry import group_mixers, model_groups

        mg = model_groups(g.model, vc, B, eg.mamba_cache_mode, K, g.hidden_state_layers)
        extra = {k: v for k, v in mamba_kwargs.items() if k.startswith("num_prefill") or k.startswith("prefill")}
        # prefill checkpoint blocks where the model's layers declare them: vLLM's Mamba2 layer does
        # (mamba_mixer2.py:1108-1118 in 0.33.0), its Mamba1 layer does not (layers/mamba/abstract.py:72-91), nor
        # its GatedDeltaNet layer off FlashInfer's prefill (qwen_gdn_linear_attn.py:739-761: the Triton path here)
        groups = [gr if mixer != "mamba2" or not extra else _replace_spec(gr, **extra)
                  for gr, mixer in zip(mg.groups, group_mixers(mg.groups))]
    kvc = kci.KVCacheConfig(num_blocks=g.num_blocks, kv_cache_tensors=[], kv_cache_groups=groups,
                            **retention)
    if eg.mamba_cache_mode != "align":  # groups of unequal blocks: the engine core's own rule (core.py:176-178)
        B, H = v.kcu.resolve_kv_cache_block_sizes(kvc, vc)
    if g.hidden_state_layers:
        vc, B, hidden_hash = engine_block_sizes(vc, kvc)
        if hidden_hash != H:
            raise BadInput(f"geometry.hash_block_size {H}: vLLM {installed_version()} hashes extract_hidden_states's "
                           f"groups ({[gr.kv_cache_spec.block_size for gr in groups]}) by {hidden_hash}")
    try:
        sched = vc.scheduler_config.get_scheduler_cls()(
            vllm_config=vc, kv_cache_config=kvc, structured_output_manager=StructuredOutputManager(vc),
            block_size=B, hash_block_size=H, log_stats=False)
    except (ValueError, AssertionError) as exc:
        raise BadInput(f"vLLM {installed_version()}'s Scheduler refuses this geometry: {exc!r}") from None
    return vc, sched


def engine_block_sizes(vc, kvc) -> tuple:
    """(a copy of the config as the engine core leaves it after KV init, the scheduler block, the hash block)
    for these groups (extract_hidden_states's among them): `cache_config.block_size` set to the minimum block
    (model_geometry.engine_block_size, core.py:366-377 in 0.34.0), the block sizes resolved with no
    --prefix-match-unit (core.py:388)."""
    import copy

    from harness.engine.model_geometry import engine_block_size

    vc = copy.deepcopy(vc)  # the cached config is shared by every scenario of this shape
    vc.cache_config.block_size = engine_block_size(kvc.kv_cache_groups)
    if hasattr(vc.cache_config, "prefix_match_unit"):
        vc.cache_config.prefix_match_unit = None
    try:
        return (vc, *vllm_namespace().kcu.resolve_kv_cache_block_sizes(kvc, vc))
    except ValueError as exc:
        raise BadInput(f"vLLM {installed_version()} refuses these block sizes: {exc}") from None


def _replace_spec(group, **fields):
    import dataclasses

    return dataclasses.replace(group, kv_cache_spec=dataclasses.replace(group.kv_cache_spec, **fields))


@contextlib.contextmanager
def _gpu_async_decision(decided: list):
    """vLLM decides async scheduling in VllmConfig.__post_init__ (config/vllm.py:1668-1719: on unless the
    executor, a pooling model or a V1-runner feature rules it out), then the CPU platform turns it off
    ("async scheduling is not required on CPU", platforms/cpu.py:346-348). The harness stands in for a GPU
    deployment: record the decision as the platform hook receives it, so it can be restored."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    hook = cls.__dict__.get("check_and_update_config")

    def check_and_update_config(klass, vllm_config):
        decided.append(vllm_config.scheduler_config.async_scheduling)
        return hook.__func__(klass, vllm_config)

    if not isinstance(hook, classmethod):
        yield
        return
    cls.check_and_update_config = classmethod(check_and_update_config)
    try:
        yield
    finally:
        cls.check_and_update_config = hook


@functools.lru_cache(maxsize=512)  # a few hundred KB each; a fuzz campaign revisits its geometries
def vllm_config(max_num_seqs: int, budget: int, max_model_len: int, B: int, H: int, K: int, eagle: bool,
                 runner: str = "mirror", failure_policy: str = "fail", async_scheduling: bool | None = False,
                 mamba_cache_mode: str = "align", mamba_block: int = 0, mtp_modules: int = 0,
                 lookahead_hashes: bool = False):
    """The VllmConfig for one geometry (validated by vLLM, then the stand-ins set); built once per geometry
    in a process: pydantic validation of the config tree costs more than a short replay. `async_scheduling`:
    None = vLLM's own decision for this config on a GPU platform (_gpu_async_decision); True = asked for
    (vLLM refuses it where its checks fail). Long: vLLM validates the config tree as one unit, and the EAGLE
    relabelling must see the same validation, so building and checking stay in one place."""
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, SchedulerConfig, VllmConfig

    _quiet_vllm()
    # vLLM validates the config for the runner it will pick (0.26: V2 refuses n-gram drafts): the runner asked for,
    # not whatever the process's environment last said (a model-catalog build once inherited vLLM's own V2 pick).
    # Only a build runs it (this function is cached): build_scheduler sets the switch itself for its Scheduler
    _pick_runner(runner)
    decided: list = []
    try:
        align = mamba_cache_mode == "align"
        cache_kwargs = dict(block_size=B, enable_prefix_caching=mamba_cache_mode != "none",
                            mamba_cache_mode=mamba_cache_mode)
        if align and supports_prefix_match_unit():  # (no prefix caching in mode none: no prefix-match unit)
            cache_kwargs["prefix_match_unit"] = H
        elif align and H != B:
            raise BadInput(f"geometry.hash_block_size {H} < block {B}: vLLM {installed_version()}'s CacheConfig has "
                           "no prefix_match_unit")
        kv_kwargs = dict(kv_connector="HarnessConnector", kv_connector_module_path=CONNECTOR_MODULE, kv_role="kv_both")
        if failure_policy != "fail":  # "fail" is vLLM's default (config/kv_transfer.py:88 in 0.33.0)
            if "kv_load_failure_policy" not in KVTransferConfig.__dataclass_fields__:
                raise BadInput(f"geometry.kv_load_failure_policy: vLLM {installed_version()}'s KVTransferConfig has no "
                               "kv_load_failure_policy")
            kv_kwargs["kv_load_failure_policy"] = failure_policy
        if lookahead_hashes:  # the connector's answer to supports_lookahead_block_hashes (harness/engine/connector.py)
            kv_kwargs["kv_connector_extra_config"] = {"lookahead_block_hashes": True}

        def build(asked: bool | None, method: str | None = None):
            """A VllmConfig for this geometry; vLLM's async decision is appended to `decided`. `method`: the
            drafting method to validate as (the config is built n-gram: see _as_eagle)."""
            extra = {}
            if K:
                from vllm.config import SpeculativeConfig

                extra["speculative_config"] = spec = _speculative_config(SpeculativeConfig, K)
                if method is not None:
                    object.__setattr__(spec, "method", method)
            recorded = len(decided)
            with _gpu_async_decision(decided):
                vc = VllmConfig(scheduler_config=SchedulerConfig(
                                      max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                                      max_model_len=max_model_len, enable_chunked_prefill=True,
                                      is_encoder_decoder=False, async_scheduling=asked),
                                  cache_config=CacheConfig(**cache_kwargs), device_config=DeviceConfig(device="cpu"),
                                  kv_transfer_config=KVTransferConfig(**kv_kwargs), **extra)
            if len(decided) == recorded:  # no platform hook ran (releases < 0.28 here): the config's own decision
                decided.append(vc.scheduler_config.async_scheduling)
            # the check EngineCore runs at start, once the block size is final (v1/engine/core.py:321 in 0.26.0): 0.26
            # refuses an align-mode budget below the block
            vc.validate_block_size()
            return vc

        # an EAGLE config asking for async scheduling is validated below as EAGLE (this one says n-gram)
        vc = build(None if eagle and async_scheduling else async_scheduling)
        if eagle and async_scheduling is not False:  # vLLM's decision for the EAGLE config (it depends on the method,
            # config/vllm.py: 0.32 turns async off for n-gram, not for EAGLE): a second config, labelled before
            # validation, decides; the scheduler's own config stays the one above (see _as_eagle)
            build(None, method="eagle")
            if async_scheduling and not decided[-1]:
                raise BadInput(f"vLLM {installed_version()} does not schedule this EAGLE config asynchronously")
    except BadInput:
        raise
    except (ValueError, AssertionError, TypeError) as exc:
        raise BadInput(f"vLLM {installed_version()} refuses the engine config for this geometry: {exc}") from None
    _quiet_vllm()  # VllmConfig may have re-applied vLLM's logging config
    if decided:  # the GPU platform leaves vLLM's decision in place
        vc.scheduler_config.async_scheduling = bool(decided[-1])
    if eagle:
        _as_eagle(vc.speculative_config)
        if mtp_modules:
            _as_mtp(vc.speculative_config, mtp_modules)
        if hasattr(vc, "_resolve_num_hash_lookahead_tokens"):  # 0.34: resolved at validation, from the method
            vc.num_hash_lookahead_tokens = vc._resolve_num_hash_lookahead_tokens()
    object.__setattr__(vc, "model_config", ModelConfigStandIn(max_model_len))
    # align: platforms/interface.py:1114-1115; none: max_model_len (MambaModelConfig, models/config.py:786-787), the
    # scheduler's, which the runner's config (built at larger buffer extents) keeps too
    vc.cache_config.mamba_block_size = B if mamba_cache_mode != "none" else (mamba_block or max_model_len)
    return vc


def _quiet_vllm() -> None:
    """vLLM's config and scheduler warn about CPU block sizes, draft-token budgets and the experimental
    connector API on every build: per-scenario noise on stderr. Errors still show."""
    logger = logging.getLogger("vllm")
    if logger.level != logging.ERROR:  # setLevel clears every logger's cache: ~2 ms
        logger.setLevel(logging.ERROR)


def _as_eagle(spec) -> None:
    """EAGLE drafting without a draft model: an EAGLE config cannot be built on CPU (it loads the draft
    model's HF config), so the n-gram config built above is relabelled `method="eagle"` after validation,
    as the model config is stood in for. What the scheduler derives from it is vLLM's own: EAGLE's
    lookahead slots (`VllmConfig.num_lookahead_tokens` = K), the trailing-block drop on prefix hits
    (`use_eagle_block_drop`), the prefill lookahead. The drafts still come from the scenario."""
    object.__setattr__(spec, "method", "eagle")
    drops = spec.use_eagle_block_drop() if hasattr(spec, "use_eagle_block_drop") else spec.use_eagle()
    if not drops:
        raise BadInput(f"geometry.eagle_block_drop: vLLM {installed_version()} does not drop the block for this "
                       "EAGLE config")


def _as_mtp(spec, modules: int) -> None:
    """MTP drafting (an EAGLE-family method, relabelled as _as_eagle does) from a draft checkpoint with `modules`
    MTP modules: what vLLM reads of that checkpoint to choose multi-module MTP (use_multi_module_mtp:
    hf_config.n_predict in 0.34.0, config/speculative.py:1809-1828; num_nextn_predict_layers before) stands in for
    it. The scheduler's prefill lookahead and the manager's finalized prefix follow from vLLM's own properties."""
    from types import SimpleNamespace

    object.__setattr__(spec, "method", "mtp")
    hf = SimpleNamespace(model_type="nemotron_h_mtp", n_predict=modules, num_nextn_predict_layers=modules,
                         index_share_for_mtp_iteration=False)
    object.__setattr__(spec, "draft_model_config", SimpleNamespace(hf_config=hf, architectures=[]))


def _speculative_config(cls, K: int):
    """n-gram drafting (no draft model: constructible on CPU); the drafts themselves come from the scenario."""
    try:
        return cls(method="ngram", num_speculative_tokens=K, prompt_lookup_min=1, prompt_lookup_max=1)
    except TypeError:
        return cls(method="ngram", num_speculative_tokens=K)


# A runner's buffers are sized by max_num_seqs, max_num_batched_tokens and max_model_len (request slots, input
# and token-id buffers, block-table width); nothing it does with a step depends on them beyond those extents. A
# deployment sizes them once: so does the harness, per block / hash-block / spec shape, at these floors (or the
# scenario's own values when larger), instead of building a runner for every geometry a sweep draws.
RUNNER_FLOORS = {"max_num_seqs": 32, "budget": 2048, "max_model_len": 4096, "num_blocks": 256}


def runner_config(driver):
    """(sizes, VllmConfig) a worker's model runner (V1 or V2) is built from: the scenario's engine config with
    the buffer extents at RUNNER_FLOORS; the scheduler keeps the scenario's own."""
    vc, g, eg = driver.vc, driver.sc.geometry, driver.eg
    f = RUNNER_FLOORS
    sizes = (max(vc.scheduler_config.max_num_seqs, f["max_num_seqs"]),
             max(vc.scheduler_config.max_num_batched_tokens, f["budget"]),
             max(g.max_model_len, f["max_model_len"]))
    return sizes, vllm_config(*sizes, eg.block_size, eg.hash_block_size, eg.num_speculative_tokens,
                               g.eagle_block_drop, driver.options.runner, failure_policy=g.kv_load_failure_policy,
                               async_scheduling=bool(vc.scheduler_config.async_scheduling),
                               mamba_cache_mode=eg.mamba_cache_mode, mamba_block=eg.mamba_block_size,
                               mtp_modules=g.mtp_modules, lookahead_hashes=g.lookahead_hashes)


def resumed_ids(cr) -> set[str]:
    """Requests resumed from preemption this step (0.33.0 lists them; older releases flag each row)."""
    ids = getattr(cr, "resumed_req_ids", None)
    if ids is not None:
        return set(ids)
    flags = getattr(cr, "resumed_from_preemption", None) or ()
    return {rid for rid, f in zip(cr.req_ids, flags) if f}


def serve_config(flags: list[str], model_config: str):
    """vLLM's own `VllmConfig` for `vllm serve MODEL FLAGS`: the flags parsed by its `EngineArgs` parser and built
    by `create_engine_config`, MODEL a local directory holding a real model's config.json (`model_config`: no
    weights, no hub). What a bug report's user configuration is checked with (harness/bug_report.py)."""
    import shlex
    import tempfile
    from pathlib import Path

    from vllm.engine.arg_utils import EngineArgs
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(Path(model_config).read_text())
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        args = parser.parse_args(["--model", tmp, "--skip-tokenizer-init", *shlex.split(" ".join(flags))])
        return EngineArgs.from_cli_args(args).create_engine_config()
