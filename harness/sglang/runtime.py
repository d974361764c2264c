"""Every run-time patch the SGLang wing makes, in one function (`patched`), through harness/patches.py, and the
wing's planted bugs (`MUTANTS`): `sglang-cow-source-dropped` (a wrapper) and the `SLIPS`, each one slip in one of
SGLang's own methods, made by recompiling that method's source with one line (or one call's arguments) changed.

The import stubs must be in place before SGLang is first imported, so `patched` installs them and only then
imports SGLang. Once SGLang has imported the stub modules they stay in `sys.modules` (undo removes the finder
and every attribute patch; it cannot un-import a module).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
import textwrap
import types
from collections.abc import Callable
from typing import NamedTuple

from harness.errors import BadInput
from harness.patches import patch_attr, undo_all

COW_DROPPED = "sglang-cow-source-dropped"


class Slip(NamedTuple):
    """A one-place slip in SGLang's source: in `module`.`owner`.`method` (`owner` "": a module-level function), the
    text `old` (once, in the dedented source) becomes `new`; `where` is the SGLang file:line it changes, `bug` its
    class."""
    module: str
    owner: str
    method: str
    old: str
    new: str
    where: str
    bug: str


SLIPS = {
    "sglang-cow-args-swapped": Slip(
        "sglang.srt.model_executor.model_runner", "ModelRunner", "_maybe_execute_deferred_mamba_cow_and_clear",
        "pool.translate_mamba_indices(forward_batch.mamba_cow_src_indices),\n"
        "                pool.translate_mamba_indices(forward_batch.mamba_cow_dst_indices),",
        "pool.translate_mamba_indices(forward_batch.mamba_cow_dst_indices),\n"
        "                pool.translate_mamba_indices(forward_batch.mamba_cow_src_indices),",
        "srt/model_executor/model_runner.py:1956-1957",
        "the deferred copy-on-write copies the request's new slot over the cached state, not the cached state "
        "into the slot"),
    "sglang-track-seqlen-page-early": Slip(
        "sglang.srt.managers.schedule_batch", "ScheduleBatch", "_mamba_radix_cache_v2_req_prepare_for_extend",
        "req.kv.mamba_last_track_seqlen = mamba_track_seqlen_aligned",
        "req.kv.mamba_last_track_seqlen = mamba_track_seqlen_aligned - checkpoint_grid",
        "srt/managers/schedule_batch.py:3232",
        "a prefill's tracked (extra_buffer) state is recorded one checkpoint page early: the tree names it "
        "for a prefix one page shorter than the one it holds"),
    "sglang-decode-track-idx-stale": Slip(
        "sglang.srt.managers.scheduler_components.batch_result_processor", "SchedulerBatchResultProcessor",
        "_handle_finish_state_updated_req",
        "req.kv.mamba_last_track_idx = batch.mamba_track_buffer_indices[i]",
        "pass  # slip: the tracking slot this decode wrote is not recorded",
        "srt/managers/scheduler_components/batch_result_processor.py:1402",
        "a decode's tracking-slot swap is lost: the new seqlen is recorded with the ping-pong slot that holds "
        "the previous checkpoint"),
    "sglang-force-track-h-no-plus-one": Slip(
        "sglang.srt.managers.schedule_batch", "ScheduleBatch", "_mamba_radix_cache_v2_req_prepare_for_extend",
        "return i + 1",
        "return i",
        "srt/managers/schedule_batch.py:3163",
        "an interior tracked state's seqlen loses its +1, so the track plan takes another h row than the "
        "checkpoint it records"),
    "sglang-finished-keeps-unused-track-slot": Slip(
        "sglang.srt.mem_cache.unified_cache.components.mamba", "MambaComponent", "cleanup_after_caching_req",
        "keep_idx = prepared_keep_idx if mamba_value_inserted else None",
        "keep_idx = prepared_keep_idx",
        "srt/mem_cache/unified_cache/components/mamba.py:712",
        "a finished request whose tracked state the tree already held keeps that tracking slot back from the "
        "free list: the slot is neither free nor cached (a Mamba slot leak)"),
    "sglang-no-buffer-stash-args-swapped": Slip(
        "sglang.srt.mem_cache.unified_cache.components.mamba", "MambaComponent", "prepare_for_caching_req",
        "translate(req.kv.mamba_pool_idx.unsqueeze(0)),\n                translate(mamba_value_donated),",
        "translate(mamba_value_donated),\n                translate(req.kv.mamba_pool_idx.unsqueeze(0)),",
        "srt/mem_cache/unified_cache/components/mamba.py:677-678",
        "no_buffer's stash of an unfinished request copies the freshly allocated slot over the request's working "
        "slot, not the working state into the slot the tree keeps"),
    "sglang-linker-load-keeps-cow": Slip(
        "sglang.srt.mem_cache.unified_cache.components.mamba", "MambaComponent", "_adopt_loaded_state",
        "req.kv.mamba_cow_src_index = None",
        "pass  # slip: the deferred copy-on-write is kept",
        "srt/mem_cache/unified_cache/components/mamba.py:789",
        "an external load does not cancel the device hit's deferred copy-on-write, which then overwrites the "
        "loaded (longer) state with the device prefix's"),
    "sglang-linker-mamba-key-first-page": Slip(
        "sglang.srt.mem_cache.unified_cache.components.mamba", "MambaComponent", "build_external_linker_transfer",
        "keys=[keys[-1]],",
        "keys=[keys[0]],",
        "srt/mem_cache/unified_cache/components/mamba.py:754",
        "an external hit's Mamba state is looked up and loaded under the tail's first page, not its last: the "
        "request continues from a state the store holds for a shorter prefix"),
    "sglang-linker-failure-read-as-landed": Slip(
        "sglang.srt.mem_cache.unified_cache.unified_cache_linker", "LayerWiseLoadCounter", "finish",
        "landed = all(future.exception() is None for future in futures)",
        "landed = all(future.done() for future in futures)",
        "srt/mem_cache/unified_cache/unified_cache_linker.py:123",
        "a failed layer counts as landed (it is done, with an error): the request whose external load failed is "
        "not aborted and continues from a slot the load never wrote"),
    "sglang-spec-commit-step-one-short": Slip(
        "sglang.srt.speculative.spec_utils", "", "_verify_commit_step_indices",
        "accept_index[req_idx, (accept_lens - 1).to(torch.int64)] - accept_indices_offset",
        "accept_index[req_idx, (accept_lens - 2).clamp(min=0).to(torch.int64)] - accept_indices_offset",
        "srt/speculative/spec_utils.py:981",
        "a verify commits the state of the next-to-last accepted tree node into the working slot: after accepting "
        "drafts the request continues from a state one token short"),
    "sglang-spec-track-step-one-early": Slip(
        "sglang.srt.speculative.spec_utils", "", "_verify_commit_step_indices",
        "torch.clamp(tracking_point - seq_lens_pre_verify - 1, min=0)",
        "torch.clamp(tracking_point - seq_lens_pre_verify - 2, min=0)",
        "srt/speculative/spec_utils.py:993",
        "a verify that crosses a track interval scatters the state one tree node before the boundary into the "
        "tracking slot, which the tree then caches for the boundary"),
    "sglang-spec-track-boundary-seqlen-late": Slip(
        "sglang.srt.managers.scheduler_components.batch_result_processor", "SchedulerBatchResultProcessor",
        "_mamba_check_track_boundary",
        "cur = req.seqlen - 1",
        "cur = req.seqlen",
        "srt/managers/scheduler_components/batch_result_processor.py:1671",
        "the verify's committed length is read one token late: the tracked state is recorded under a boundary the "
        "commit did not cross"),
}
MUTANTS = {COW_DROPPED: "a prefix hit's Mamba state is not copied into the new working slot: "
                        "MambaComponent.finalize_match_result_in_cache drops mamba_cow_src_index and clears instead",
           **{name: f"{slip.bug} ({slip.where})" for name, slip in SLIPS.items()}}


def _stub_module(name: str) -> types.ModuleType:
    """A module that answers every attribute with a deeper stub: SGLang's multimodal imports only name torchvision's
    attributes, and PyPI's torchvision is a CUDA build that does not import beside the CPU torch."""
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__path__ = []
    mod.__version__ = "0.0"

    def getattr_(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return sys.modules.get(f"{name}.{attr}") or _stub_module(f"{name}.{attr}")
    mod.__getattr__ = getattr_
    sys.modules[name] = mod
    return mod


class _TorchvisionStubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _stub_module(spec.name)

    def exec_module(self, module) -> None:
        return None


def patched(page: int, mutant: str | None = None, spec: bool = False) -> Callable[[], None]:
    """Apply the wing's patches for a run with SGLang page size `page` (and the planted bug `mutant`; `spec`: the
    CPU stand-ins speculative decoding needs, `_spec_kernels`); return the undo. BadInput for an unknown mutant
    (checked before anything is patched)."""
    if mutant is not None and mutant not in MUTANTS:
        raise BadInput(f"unknown SGLang mutant {mutant!r} (known: {', '.join(sorted(MUTANTS))})")
    undos = [patch_attr(sys, "meta_path", [_TorchvisionStubs(), *sys.meta_path], by="sglang:torchvision-stubs")]
    import torch

    # SGLang pins host tensors; the CPU torch has no pinned allocator, and pinning changes no value
    undos.append(patch_attr(torch.Tensor, "pin_memory", lambda self, *a, **k: self, by="sglang:pin-memory"))
    from sglang.srt.mem_cache.rust_tree_core import extension

    # the fixture's Rust core is SGLang's test inspector, built on an inspection variant of the binding that the
    # wheel does not ship (it would be compiled from the repository's Rust workspace): the inspector runs on the
    # production binding instead; the wing reads the tree through the production interface only (env.tree_values)
    load = extension.load_tree_core_extension
    undos.append(patch_attr(extension, "load_tree_core_extension", lambda *, inspection=False: load(),
                            by="sglang:rust-core-production-binding"))
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.unified_cache.components.mamba import MambaComponent
    from sglang.test.kits.unified_radix_cache import fixtures

    # srt/utils get_device() raises on a CPU-only host; the fixture (fixtures.py:145) only needs the device name
    undos.append(patch_attr(fixtures, "get_device", lambda: "cpu", by="sglang:cpu-device"))
    # the fixture always builds the non-paged allocator; the scheduler's alloc_for_extend needs the paged one
    allocator = TokenToKVPoolAllocator if page == 1 else (
        lambda **kw: PagedTokenToKVPoolAllocator(page_size=page, **kw))
    undos.append(patch_attr(fixtures, "TokenToKVPoolAllocator", allocator, by="sglang:paged-allocator"))
    if spec:
        undos.extend(_spec_kernels())
    if mutant == COW_DROPPED:
        undos.append(patch_attr(MambaComponent, "finalize_match_result_in_cache",
                                _drop_cow(MambaComponent.finalize_match_result_in_cache), by=f"patch:{mutant}"))
    elif mutant in SLIPS:
        slip = SLIPS[mutant]
        module = importlib.import_module(slip.module)
        owner = getattr(module, slip.owner) if slip.owner else module
        undos.append(patch_attr(owner, slip.method, _slipped(getattr(owner, slip.method), slip),
                                by=f"patch:{mutant}"))
    return undo_all(undos)


def _assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size):
    """The contract of srt/mem_cache/allocation.py:737 `assign_req_to_token_pool_func` (its CPU branch calls an
    sgl_kernel op this venv lacks): row i's columns [start, end) take the next out_cache_loc entries."""
    pos = 0
    for i in range(batch_size):
        a, b = int(start_offset[i]), int(end_offset[i])
        req_to_token[int(req_pool_indices[i]), a:b] = out_cache_loc[pos:pos + b - a].to(req_to_token.dtype)
        pos += b - a


def _scatter_after_verify(caches, state_idx, last_steps, track_idx, track_steps, src_indices_raw=None):
    """The fused Triton scatter (kernels/ops/mamba/mamba_state_scatter_triton.py, CUDA/XPU only) on CPU, by SGLang's
    own CPU semantics: HybridLinearAttnBackend._scatter_speculative_state_with_mask (hybrid_linear_attn_backend.py:
    1619-1658), for the working slots and then the tracking slots."""
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend

    scatter = HybridLinearAttnBackend._scatter_speculative_state_with_mask
    scatter(caches.temporal, caches.intermediate_ssm, state_idx, last_steps, src_indices_raw)
    if track_idx is not None:
        scatter(caches.temporal, caches.intermediate_ssm, track_idx, track_steps, src_indices_raw)


def _spec_kernels() -> list:
    """Speculative decoding's device kernels as CPU stand-ins of the same contract, and `mambaish_config` true for
    the wing's model-config namespace (spec_utils.py:1025 returns early otherwise)."""
    from sglang.srt.layers.attention import hybrid_linear_attn_backend as hlab
    from sglang.srt.mem_cache import allocation
    from sglang.srt.speculative import spec_utils

    return [patch_attr(allocation, "assign_req_to_token_pool_func", _assign_req_to_token_pool,
                       by="sglang:spec-assign-rtt"),
            patch_attr(hlab, "scatter_mamba_states_after_mtp_verify", _scatter_after_verify,
                       by="sglang:spec-scatter"),
            patch_attr(spec_utils, "mambaish_config", lambda model_config: True, by="sglang:spec-mambaish")]


def _slipped(original, slip: Slip):
    """`original` recompiled from its own source with `slip` applied, in its module's globals, keeping SGLang's
    file name and line numbers (so a traceback names the real line)."""
    src = textwrap.dedent(inspect.getsource(original))
    if src.count(slip.old) != 1:
        raise RuntimeError(f"SGLang mutant source drifted: {slip.old!r} is not once in {slip.method}")
    lines = "\n" * (inspect.getsourcelines(original)[1] - 1)
    code = compile(lines + src.replace(slip.old, slip.new), inspect.getsourcefile(original), "exec")
    scope: dict = {}
    exec(code, original.__globals__, scope)  # noqa: S102 - SGLang's own source, one slip changed
    mutated = scope[slip.method]
    mutated.__wrapped__ = original
    return mutated


def _drop_cow(original):
    """The planted bug: after SGLang's own finalize (mamba.py:196), forget the CoW source and clear the slot."""
    def finalize_match_result_in_cache(self, params, result):
        result = original(self, params, result)
        req = params.req
        if req is not None and req.kv.mamba_cow_src_index is not None:
            req.kv.mamba_cow_src_index = None
            req.kv.mamba_needs_clear = True
        return result
    finalize_match_result_in_cache.__wrapped__ = original
    return finalize_match_result_in_cache
