"""The only module that imports vLLM.

It builds the hybrid `KVCacheConfig` (a full-attention group and an align-mode `MambaSpec` group),
a real `KVCacheManager`, real `Request`s hashed by vLLM's own block hasher, and exposes vLLM's own
prefill chunk rule (`Scheduler._mamba_block_aligned_split`). The installed release is feature-detected:
keyword arguments are passed only when the installed signature has them, and an unsupported release or
a geometry the release cannot express is `BadInput` (exit 2).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from types import SimpleNamespace

from harness.errors import BadInput
from harness.release import check_version, vllm_release, vllm_source
from harness.scenario import Geometry
from harness.vllm_env import prepare

prepare()  # a no-op after the entry point's own call; a library user importing this door directly

os.environ.setdefault("VLLM_LOGGING_LEVEL", "CRITICAL")

ATTN_GROUP = 0
MAMBA_GROUP = 1


def installed_version() -> str:
    """The version of the vLLM this process imports (an installed release or the tree --vllm names)."""
    return vllm_source().version


def check_supported(version: str) -> None:
    """The version floor (harness/release.py); what a newer tree lacks is found by its feature probes."""
    check_version(version)


@functools.cache
def _vllm() -> SimpleNamespace:
    """Import vLLM's allocator pieces once (slow: torch); BadInput where the tree lacks an API the harness needs."""
    check_supported(installed_version())
    vllm_release()
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1 import kv_cache_interface as kci
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager
    from vllm.v1.request import Request, RequestStatus

    kcu.init_none_hash(sha256)
    return SimpleNamespace(
        torch=torch, SamplingParams=SamplingParams, sha256=sha256, kci=kci, kcu=kcu,
        KVCacheManager=KVCacheManager, Scheduler=Scheduler, MambaManager=MambaManager,
        Request=Request, RequestStatus=RequestStatus, version=installed_version(),
    )


def load_vllm() -> float:
    """Import vLLM's allocator now; returns the seconds it took (start-up, reported apart from replay)."""
    import time

    t0 = time.perf_counter()
    _vllm()
    return time.perf_counter() - t0


@functools.cache
def vllm_module_prefix() -> str:
    """Path prefix of the installed vLLM package (to tell vLLM frames from harness frames)."""
    spec = __import__("importlib.util").util.find_spec("vllm")
    return os.path.dirname(spec.origin) + os.sep if spec and spec.origin else "/nonexistent/"


@functools.cache
def _split_reads() -> frozenset[str]:
    """The `self.` attribute chains vLLM's chunk rule reads (feature detection, once per process), e.g.
    "block_size", "cache_config.block_size".

    Read from the bytecode, not the source: a PyInstaller bundle (ClusterFuzzLite's compile_python_fuzzer)
    ships vLLM as .pyc only, where `inspect.getsource` raises. A chain is a load of `self` (the first
    argument, a cell in nested code) followed by LOAD_ATTR / LOAD_METHOD names, ended by any other
    instruction or by STORE_ATTR / DELETE_ATTR; nested code objects (the genexpr) are walked too. Where the
    source is installed this equals what a regex over it finds (every `self.` followed by a dotted name),
    less any match inside a comment or string (tests/test_cflite.py compares the two)."""
    import dis

    code = inspect.unwrap(_vllm().Scheduler._mamba_block_aligned_split).__code__
    self_name = code.co_varnames[0]
    skip = {"EXTENDED_ARG", "CACHE", "NOP"}
    attr_ops = {"LOAD_ATTR", "LOAD_METHOD"}
    end_ops = {"STORE_ATTR", "DELETE_ATTR"}
    chains: set[str] = set()

    def walk(co) -> None:
        chain: list[str] | None = None
        for ins in dis.get_instructions(co):
            op = ins.opname
            if op in skip:
                continue
            if chain is not None and (op in attr_ops or op in end_ops):
                chain.append(ins.argval)
                if op in attr_ops:
                    continue
            if chain:
                chains.add(".".join(chain))
            chain = None
            # LOAD_FAST, LOAD_FAST_CHECK, LOAD_FAST_BORROW, LOAD_DEREF; the fused LOAD_FAST_LOAD_FAST
            # (3.13+) pushes its second name last
            pushed = ins.argval[-1] if isinstance(ins.argval, tuple) and ins.argval else ins.argval
            if (op.startswith("LOAD_FAST") or op == "LOAD_DEREF") and pushed == self_name:
                chain = []
        if chain:
            chains.add(".".join(chain))
        for const in co.co_consts:
            if hasattr(const, "co_code"):
                walk(const)

    walk(code)
    return frozenset(chains)


_ALLOCATE_KWARGS = frozenset({"num_new_computed_tokens", "new_computed_blocks", "num_lookahead_tokens",
                              "num_external_computed_tokens", "delay_cache_blocks", "has_scheduled_reqs"})


@functools.cache
def parameters(fn) -> frozenset[str]:
    """The parameter names of an installed release's function (feature detection, once per function)."""
    return frozenset(inspect.signature(fn).parameters)


def supported_kwargs(fn, **kwargs) -> dict:
    """Only the keyword arguments the installed release's signature has (feature detection)."""
    params = parameters(fn)
    return {k: v for k, v in kwargs.items() if k in params}


class Allocator:
    """vLLM's KVCacheManager for one geometry, with the calls the Scheduler makes."""

    def __init__(self, geometry: Geometry) -> None:
        v = _vllm()
        self.v = v
        self.geometry = g = geometry
        refuse_budget_below_block(g)
        K = g.num_speculative_tokens
        mamba_kwargs = dict(
            block_size=g.mamba_block_size, shapes=((1, 1),), dtypes=(v.torch.float32,),
            mamba_cache_mode="align", num_speculative_blocks=K,
        )
        if g.prefill_checkpoint:
            if not supports_prefill_checkpoints():
                raise BadInput(f"geometry.prefill_checkpoint: vLLM {v.version} has no Mamba prefill checkpoint blocks "
                               "whose worker export this harness mirrors (0.33.x)")
            mamba_kwargs.update(num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1)
        self.mamba_spec = v.kci.MambaSpec(**mamba_kwargs)
        attn_spec = v.kci.FullAttentionSpec(
            block_size=g.attn_block_size, num_kv_heads=1, head_size=1, dtype=v.torch.float32
        )
        config = v.kci.KVCacheConfig(
            num_blocks=g.num_blocks, kv_cache_tensors=[],
            kv_cache_groups=[v.kci.KVCacheGroupSpec(["attn"], attn_spec), v.kci.KVCacheGroupSpec(["mamba"], self.mamba_spec)],
            **retention_config(g),
        )
        try:
            self.manager = v.KVCacheManager(**supported_kwargs(
                v.KVCacheManager.__init__, kv_cache_config=config, max_model_len=g.max_model_len,
                scheduler_block_size=g.scheduler_block_size, hash_block_size=g.hash_block_size,
                enable_caching=True, use_eagle=g.eagle_block_drop,
            ))
        except (AssertionError, ValueError) as exc:
            raise BadInput(f"geometry rejected by vLLM {v.version}: {exc!r}") from None
        self.block_pool = self.manager.block_pool
        self.coordinator = self.manager.coordinator
        self.mamba_manager = self.coordinator.single_type_managers[MAMBA_GROUP]
        self.partial_hits = bool(getattr(self.coordinator, "enable_partial_hash_hits", False))
        # 0.27+: the scheduler shows the connector a block-aligned local hit and may truncate a sub-block tail
        self.connector_sees_aligned_local = hasattr(self.manager, "truncate_computed_blocks")
        self.hasher = v.kcu.get_request_block_hasher(g.hash_block_size, v.sha256)
        self._split_self = self._split_shim()
        # keys are hash bytes + the group id (kv_cache_utils.make_block_hash_with_group_id); check the layout once
        probe = v.kcu.make_block_hash_with_group_id(v.kcu.BlockHash(b"\x01" * 32), MAMBA_GROUP)
        self._mamba_key_suffixes = (bytes(probe[32:]),)
        if v.kcu.get_group_id(probe) != MAMBA_GROUP or bytes(v.kcu.get_block_hash(probe)) != b"\x01" * 32:
            raise BadInput(f"vLLM {v.version}: prefix-cache keys are not hash + group id; not supported")
        self._allocate_params = parameters(v.KVCacheManager.allocate_slots)
        missing = _ALLOCATE_KWARGS - self._allocate_params
        if missing:
            raise BadInput(f"vLLM {v.version}: allocate_slots lacks {sorted(missing)}; not supported")

    # -- the Scheduler's chunk rule ---------------------------------------------------------
    def _split_shim(self) -> SimpleNamespace:
        """The Scheduler attributes `_mamba_block_aligned_split` reads (scheduler.py:~560-680 in 0.33.0)."""
        g = self.geometry
        bs = g.scheduler_block_size
        shim = SimpleNamespace(
            block_size=bs, hash_block_size=g.hash_block_size,
            # mamba_block_size: the Mamba block, which the split aligns to (a patched split reads it)
            cache_config=SimpleNamespace(block_size=bs, mamba_block_size=g.mamba_block_size),
            scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
            max_num_scheduled_tokens=g.token_budget,
            use_eagle=g.eagle_block_drop, use_eagle_block_drop=g.eagle_block_drop,
            num_hash_lookahead_tokens=0,
            mamba_partial_cache_hit=g.hash_block_size < bs and self.partial_hits,
            mamba_has_prefill_checkpoint_blocks=g.prefill_checkpoint,
            mamba_prefill_checkpoint_alignment=1 if g.prefill_checkpoint else None,
        )
        # The junction-checkpoint switch, named mamba_fine_grained_prefix_cache up to 0.30 and
        # mamba_shared_prefix_checkpoint since; the scheduler ANDs the manager's bit with partial hits.
        for name in ("mamba_shared_prefix_checkpoint", "mamba_fine_grained_prefix_cache"):
            setattr(shim, name, shim.mamba_partial_cache_hit and bool(getattr(self.manager, name, False)))
        for dotted in _split_reads():
            obj = shim
            for part in dotted.split("."):
                if not hasattr(obj, part):
                    raise BadInput(f"vLLM {self.v.version}: Scheduler._mamba_block_aligned_split reads self.{dotted}, "
                                   "which this harness does not model")
                obj = getattr(obj, part)
        return shim

    def split(self, request, num_new_tokens: int, num_local: int = 0, num_external: int = 0) -> int:
        """vLLM's own align-mode chunk clipping, called unbound on the shim."""
        return self.v.Scheduler._mamba_block_aligned_split(
            self._split_self, request, num_new_tokens, num_local, num_external
        )

    # -- requests ---------------------------------------------------------------------------
    def make_request(self, request_id: str, prompt: list[int], max_tokens: int):
        params = self.v.SamplingParams(max_tokens=max_tokens)
        return self.v.Request(request_id=request_id, prompt_token_ids=list(prompt), sampling_params=params,
                              pooling_params=None, block_hasher=self.hasher)

    @property
    def status(self):
        return self.v.RequestStatus

    @staticmethod
    def append_output(request, tokens: list[int]) -> None:
        """Sampled tokens join the request; vLLM's block hasher extends its hashes (request.py)."""
        request.append_output_token_ids(tokens)

    def holds_blocks(self, request_id: str) -> bool:
        return request_id in self.mamba_manager.req_to_blocks

    # -- KVCacheManager calls (kv_cache_manager.py, protocol doc §7.1) -------------------------
    def lookup(self, request) -> tuple[object, int]:
        blocks, num_local, *rest = self.manager.get_computed_blocks(request)
        if rest and hasattr(request, "shared_prefix_boundary"):
            request.shared_prefix_boundary = rest[0]  # scheduler.py:1122-1127
        return blocks, num_local

    def truncate(self, blocks, num_tokens: int):
        return self.manager.truncate_computed_blocks(blocks, num_tokens)

    def allocate(self, request, num_new_tokens: int, *, num_local: int = 0, blocks=None, lookahead: int = 0,
                 num_external: int = 0, delay_cache: bool = False, has_scheduled_reqs: bool = True,
                 admission: dict | None = None):
        """`allocate_slots` as the Scheduler calls it (scheduler.py:914-918 running, :1435-1452 waiting);
        `admission`: the waiting path's admission gates (`full_sequence_must_fit`, `reserved_blocks`), passed
        where the release's allocate_slots has them."""
        extra = {k: v for k, v in admission.items() if k in self._allocate_params} if admission else {}
        new = self.manager.allocate_slots(
            request, num_new_tokens, num_new_computed_tokens=num_local, new_computed_blocks=blocks,
            num_lookahead_tokens=lookahead, num_external_computed_tokens=num_external,
            delay_cache_blocks=delay_cache, has_scheduled_reqs=has_scheduled_reqs, **extra)
        # None: it did not fit. Otherwise one (possibly empty) id list per group.
        return None if new is None else new.get_block_ids()

    def remaining_blocks(self, request, num_spec_tokens: int, lookahead: int) -> int:
        """Blocks a request still needs to hold its full sequence: the Scheduler's
        `_request_remaining_blocks` (scheduler.py:3404-3420 in 0.33.0), which sizes an async load's
        `reserved_blocks` (:1419-1430) from the in-flight prefills."""
        full = min(request.num_tokens, self.geometry.max_model_len)
        num_tokens = full + (1 + num_spec_tokens + lookahead if num_spec_tokens else 0)
        coord = self.coordinator
        return coord.get_num_blocks_to_allocate(**supported_kwargs(
            type(coord).get_num_blocks_to_allocate, request_id=request.request_id, num_tokens=num_tokens,
            new_computed_blocks=self.manager.empty_kv_cache_blocks.blocks, num_encoder_tokens=0,
            total_computed_tokens=request.num_computed_tokens, num_local_computed_tokens=request.num_computed_tokens,
            num_tokens_main_model=full, apply_admission_cap=True,
            prefill_end=max(request.num_prompt_tokens, request.num_tokens - 1)))

    def cache_blocks(self, request, num_tokens: int) -> None:
        self.manager.cache_blocks(request, num_tokens)

    def free(self, request) -> None:
        self.manager.free(request)

    def remove_skipped(self, request) -> dict:
        """What `_connector_finished` does before a finished or aborted request's blocks are freed, as every engine
        with a KV connector runs it (scheduler.py:3366-3375 in 0.33.0, :2496-2504 in 0.26.0): the blocks no longer
        needed on the processed-token basis go back to the pool first (their order in the free queue decides
        which block a later allocation takes). Returns the arguments it passed."""
        kwargs = supported_kwargs(self.manager.remove_skipped_blocks, request_id=request.request_id,
                                  processed_computed_tokens=max(0, request.num_computed_tokens
                                                                - getattr(request, "num_in_flight_tokens", 0)),
                                  num_prompt_tokens=request.num_prompt_tokens)
        self.manager.remove_skipped_blocks(**kwargs)
        return kwargs

    def new_step(self) -> None:
        self.manager.new_step_starts()

    def take_copies(self) -> tuple[list[tuple[int, int]], list]:
        copies, retained = self.manager.take_kv_cache_block_copies()
        return [(c.src_block_id, c.dst_block_id) for c in copies], retained

    def release_retained(self, retained) -> None:
        """scheduler.py:3095-3104 `_free_cow_retained_blocks`: CoW endpoints are freed after the step ran."""
        if retained:
            self.block_pool.free_blocks(retained)

    def take_zero_ids(self) -> list[int]:
        return self.manager.take_new_block_ids()

    def block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.manager.get_block_ids(request_id)

    # -- worker-side formulas vLLM exposes (kv_cache_interface.py:1169-1210 in 0.33.0) ---------
    def checkpoint_position(self, seq_len: int) -> int:
        kci = self.v.kci
        return kci.get_mamba_prefill_checkpoint_position(
            seq_len, self.mamba_manager.cache_hit_alignment_tokens, self.geometry.eagle_block_drop)

    def checkpoint_valid(self, query_start: int, query_end: int, position: int) -> bool:
        return self.v.kci.is_mamba_prefill_checkpoint_valid(
            query_start=query_start, query_end=query_end, checkpoint_position=position,
            hash_block_size=self.geometry.hash_block_size, mamba_block_size=self.geometry.mamba_block_size,
            checkpoint_alignment=1)

    # -- introspection for the oracles --------------------------------------------------------
    def cached_mamba_entries(self) -> list[tuple[bytes, int]]:
        """Every prefix-cache key of the Mamba groups and the block it resolves to (block_pool.py:56-130)."""
        suffixes = self._mamba_key_suffixes
        out = []
        for key, block_id in cache_map_entries(self.block_pool.cached_block_hash_to_block):
            suffix = next((x for x in suffixes if key.endswith(x)), None)
            if suffix is not None:
                out.append((bytes(key[:-len(suffix)]), block_id))
        return out

    def cache_key_breaks(self) -> list[tuple[bytes, int, str]]:
        """Every prefix-cache key of any group that breaks the pool's own rule: a key maps to a block that holds it
        as its primary hash (`block.block_hash`) or as one of its aliases (`cached_block_hashes_by_block`), and a
        block has aliases only alongside a primary (block_pool.py:605-623, 640-660 in 0.34.0: eviction, reset and
        promotion remove a block's keys through the primary, so a key outside that rule outlives its block's
        contents and a later hit reads whatever the block holds next). (key, block id, what is wrong)."""
        pool = self.block_pool
        aliases = pool.cached_block_hashes_by_block
        out = []
        for key, block_id in cache_map_entries(pool.cached_block_hash_to_block):
            primary = pool.blocks[block_id].block_hash
            if primary is None:
                out.append((bytes(key), block_id, "the block it maps to has no primary hash"))
            elif key != primary and key not in aliases.get(block_id, ()):
                out.append((bytes(key), block_id,
                            "the block it maps to holds neither it as its primary nor as an alias"))
        for block_id, keys in aliases.items():
            if keys and pool.blocks[block_id].block_hash is None:
                out.append((bytes(next(iter(keys))), block_id, "aliases on a block without a primary hash"))
        return out

    def pool_snapshot(self) -> dict:
        """Free-queue walk, ref counts and cached keys, for pool accounting."""
        pool = self.block_pool
        queue = pool.free_block_queue
        walked, node, seen_twice = [], queue.fake_free_list_head.next_free_block, []
        seen = set()
        while node is not None and node is not queue.fake_free_list_tail and len(walked) <= pool.num_gpu_blocks + 1:
            if node.block_id in seen:
                seen_twice.append(node.block_id)
                break
            seen.add(node.block_id)
            walked.append(node.block_id)
            node = node.next_free_block
        return {
            "num_blocks": pool.num_gpu_blocks,
            "num_free": pool.get_num_free_blocks(),
            "free_walk": walked,
            "free_cycle": seen_twice,
            "ref_cnt": {b.block_id: b.ref_cnt for b in pool.blocks if b.ref_cnt != 0 and not b.is_null},
            "null_block": pool.null_block.block_id,
            "live_requests": sorted(
                set().union(*(m.req_to_blocks.keys() for m in self.coordinator.single_type_managers))),
        }


def exception_site(exc: BaseException) -> tuple[bool, str]:
    """(raised inside vLLM?, 'file:line in function' of the innermost frame)."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False, "?"
    frame = last.tb_frame
    path = frame.f_code.co_filename
    prefix = vllm_module_prefix()
    inside = path.startswith(prefix)
    # a PyInstaller bundle (ClusterFuzzLite) names vLLM's frames by package-relative paths: vllm/v1/core/...
    frozen = not os.path.isabs(path) and path.startswith("vllm" + os.sep)
    short = path[len(os.path.dirname(prefix.rstrip(os.sep))) + 1:] if inside else path
    return inside or frozen, f"{short}:{last.tb_lineno} in {frame.f_code.co_name}"


def cache_map_entries(cache_map) -> list[tuple[bytes, int]]:
    """(key, block id) for every block a BlockHashToBlockMap caches, in either layout: 0.34+ maps a key to a
    block id, several under `_dup_ids` (block_pool.py:56-64 in 0.34.0); earlier a block, several as a dict."""
    out = []
    if vllm_release().block_map_ids:
        dups = cache_map._dup_ids
        for key, block_id in cache_map._cache.items():
            out.extend((key, b) for b in (dups[key] if key in dups else (block_id,)))
        return out
    for key, value in cache_map._cache.items():
        out.extend((key, b.block_id) for b in (value.values() if isinstance(value, dict) else (value,)))
    return out


def full_attention_manager_class():
    """vLLM's FullAttentionManager class (the attention group's block counts), for known issues' fixes."""
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

    return FullAttentionManager


def mamba_manager_class():
    """vLLM's MambaManager class, for mutants that patch it at run time."""
    return _vllm().MambaManager


def supports_prefix_match_unit() -> bool:
    """CacheConfig.prefix_match_unit: prefix hashes finer than the block (the partial-tail keys)."""
    from vllm.config import CacheConfig

    return "prefix_match_unit" in CacheConfig.__dataclass_fields__


def supports_budget_below_block() -> bool:
    """A token budget below the Mamba block in align mode (harness/release.py `_budget_below_block`)."""
    return vllm_release().budget_below_block


def refuse_budget_below_block(geometry: Geometry) -> None:
    """BadInput where the release refuses the geometry's token budget below its Mamba block at engine start."""
    block = geometry.scheduler_block_size
    if geometry.mamba_cache_mode == "align" and geometry.token_budget < block and not supports_budget_below_block():
        raise BadInput(f"geometry.token_budget {geometry.token_budget} < block {block}: vLLM {installed_version()} "
                       "refuses the config at engine start (align mode: block_size <= max_num_batched_tokens, "
                       "VllmConfig.validate_block_size; sub-block chunks arrive in 0.27.0)")


def supports_retention() -> bool:
    """KVCacheConfig.prefix_cache_retention_interval (0.29.0+; kv_cache_interface.py:1541 in 0.33.0): sparse Mamba
    prefix-cache retention, which the coordinator applies in `cache_blocks` (kv_cache_coordinator.py:360-380)."""
    return vllm_release().retention


def retention_config(geometry: Geometry) -> dict:
    """The KVCacheConfig field for the geometry's retention, as vLLM's planner sets it from
    `cache_config.prefix_cache_retention_interval` (kv_cache_planning.py:736-740 in 0.33.0); dense (None) is the
    field's own default, so it is left out and every release builds it. A release without sparse retention
    refuses the rest (exit 2)."""
    interval = geometry.prefix_cache_retention_interval
    if interval is None:
        return {}
    if not supports_retention():
        raise BadInput(f"geometry.prefix_cache_retention_interval: vLLM {installed_version()} has no sparse "
                       "prefix-cache retention (KVCacheConfig.prefix_cache_retention_interval, 0.29.0+)")
    return {"prefix_cache_retention_interval": interval}


def supports_failed_recving() -> bool:
    """KVConnectorOutput.failed_recving (0.30+): a connector reports a failed load by request, the only way
    vLLM accepts for a model with several KV cache groups."""
    from vllm.v1.outputs import KVConnectorOutput

    return "failed_recving" in KVConnectorOutput.__dataclass_fields__


def supports_prefill_checkpoints() -> bool:
    """Prefill checkpoint blocks, the worker-side helpers the shadow calls, and a runner whose checkpoint
    export the shadow mirrors: the shadow follows vLLM 0.33.0's (protocol doc §6.7), so 0.33 and later."""
    return vllm_release().prefill_checkpoints


# vLLM's worker-side code for Mamba states the engine tier runs (V1 and V2 runners), imported before
# instrumenting so that coverage sees it; a module a release lacks is skipped
WORKER_MODULES = ("vllm.v1.worker.mamba_utils", "vllm.v1.worker.gpu_input_batch", "vllm.v1.worker.block_table",
                  "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_states.mamba_hybrid",
                  "vllm.v1.worker.gpu.states", "vllm.v1.worker.gpu.block_table")


def instrument_allocator(instrument_func, worker: bool = False) -> int:
    """Apply a coverage instrumenter (atheris.instrument_func) to every function and method defined in
    vLLM's allocator and scheduler package, vllm.v1.core.* (with `worker`, also vllm.v1.worker.*, after
    importing WORKER_MODULES); returns how many were instrumented."""
    import importlib

    from harness.state_coverage import instrument_modules

    _vllm()
    prefixes = ("vllm.v1.core",)
    if worker:
        prefixes += ("vllm.v1.worker",)
        for mod in WORKER_MODULES:
            try:
                importlib.import_module(mod)
            except Exception:  # noqa: BLE001 - absent or not importable on this release / machine
                pass
    return instrument_modules(instrument_func, prefixes)


def torch_module():
    """torch, for benchmarks that copy real state tensors (imported with vLLM's allocator)."""
    return _vllm().torch


def coordinator_class():
    """vLLM's KVCacheCoordinator base class (its block count per allocation), for known issues' fixes."""
    from vllm.v1.core.kv_cache_coordinator import KVCacheCoordinator

    return KVCacheCoordinator


def hybrid_coordinator_class():
    """vLLM's HybridKVCacheCoordinator (several KV cache groups), for known issues' fixes of its lookups."""
    from vllm.v1.core.kv_cache_coordinator import HybridKVCacheCoordinator

    return HybridKVCacheCoordinator


def block_pool_class():
    """vLLM's BlockPool class, for mutants that patch it at run time."""
    from vllm.v1.core.block_pool import BlockPool

    _vllm()
    return BlockPool


def async_scheduler_class():
    """vLLM's AsyncScheduler class (its output handling under async scheduling), for known issues' fixes."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    return AsyncScheduler


def kv_cache_manager_class():
    """vLLM's KVCacheManager class, for known issues' fixes of its lookup views."""
    return _vllm().KVCacheManager


def request_class():
    """vLLM's Request class, for patches of its cache-hit bounds."""
    return _vllm().Request


def scheduler_class():
    """vLLM's Scheduler class, for patches of its chunk rule (`_mamba_block_aligned_split`)."""
    return _vllm().Scheduler


# -- for the engine tier (harness/engine/): the same vLLM imports, and an Allocator view of a manager that a
# real Scheduler owns, so the engine's oracle inputs (tables, cache keys, pool) are read exactly as here ----
def vllm_namespace() -> SimpleNamespace:
    """The vLLM pieces imported once above (Request, SamplingParams, kv_cache_interface, the block hasher's
    sha256 with `init_none_hash` already called): the engine tier builds its requests from the same ones."""
    return _vllm()


def adopt_manager(geometry: Geometry, manager, mamba_groups: tuple[int, ...] = (MAMBA_GROUP,)) -> Allocator:
    """An `Allocator` around a `KVCacheManager` someone else built (the engine tier's real Scheduler owns
    it): block tables, cache keys, pool snapshots and checkpoint formulas read as for the symbolic tier.
    `mamba_groups`: the Mamba groups' indices (a real model's groups: several, harness/engine/model_geometry.py);
    the cache keys of each are read, the first one's manager answers the checkpoint formulas."""
    v = _vllm()
    alloc = Allocator.__new__(Allocator)
    alloc.v, alloc.geometry, alloc.manager = v, geometry, manager
    alloc.block_pool = manager.block_pool
    alloc.coordinator = manager.coordinator
    alloc.mamba_manager = alloc.coordinator.single_type_managers[mamba_groups[0]]
    alloc.partial_hits = bool(getattr(alloc.coordinator, "enable_partial_hash_hits", False))
    alloc.connector_sees_aligned_local = hasattr(manager, "truncate_computed_blocks")
    alloc.hasher = v.kcu.get_request_block_hasher(geometry.hash_block_size, v.sha256)
    alloc._mamba_key_suffixes = tuple(
        bytes(v.kcu.make_block_hash_with_group_id(v.kcu.BlockHash(b"\x01" * 32), g)[32:]) for g in mamba_groups)
    return alloc
