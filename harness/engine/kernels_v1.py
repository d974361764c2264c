"""CPU replacements of the Triton kernels vLLM's V1 model runner launches on the engine tier's path.

The runner's own Python decides every copy; these kernels only move bytes (`batch_memcpy_kernel`) or, for
the fused align kernels, take the per-request decision the Triton code takes on device and then move bytes.
Each replacement is a plain function with the kernel's parameters in the kernel's order, registered
through vLLM's own `vllm.triton_utils.dispatcher.register_kernels` (0.31+), which rebinds every holder
of the kernel; byte moves are `ctypes.memmove` on the addresses vLLM computed (the CPU runner's "device"
tensors are host tensors), so a copy lands exactly where the GPU kernel would put it.

Kernels (vLLM 0.33.0, v1/worker/mamba_utils.py):
- `batch_memcpy_kernel` (:634-654): one memmove per (src, dst, size) entry; non-fused align pre-copy (K=0).
- `postprocess_mamba_fused_kernel` (:369-500): spec-decode postprocess (K>0): decision + state copy.
- `precopy_mamba_align_fused_kernel` (:549-631): fused align pre-copy (K>0).
- `eagle_prepare_next_token_padded_kernel` (v1/spec_decode/utils.py:259-320): EAGLE's next token and valid
  sampled count per request (the V1 worker under async scheduling with EAGLE drafts).
The shared copy body `_copy_mamba_state_block` (:191-366) is `_copy_state` below (SD and DS conv layouts,
temporal states). The temporal tile split (TEMPORAL_TILES) is a GPU occupancy device: tile 0 copies all.

`OBSERVER` (set by harness.engine.runner_v1) is told about each fused copy before its bytes move, so the
harness can record the state the copy consumes.
"""

from __future__ import annotations

import ctypes

import numpy as np

from harness.patches import patch_attr, undo_all

OBSERVER = None  # callable(kind, req_idx, src_col, dst_col, token_bias) or None

_KERNELS = {
    "vllm.v1.worker.mamba_utils.batch_memcpy_kernel": "batch_memcpy_kernel",
    "vllm.v1.worker.mamba_utils.postprocess_mamba_fused_kernel": "postprocess_mamba_fused_kernel",
    "vllm.v1.worker.mamba_utils.precopy_mamba_align_fused_kernel": "precopy_mamba_align_fused_kernel",
    "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": "slot_mapping_by_names",
    "vllm.v1.spec_decode.utils.eagle_prepare_next_token_padded_kernel": "eagle_prepare_next_token_padded_kernel",
}
_registered = ""


def _i(t, k: int) -> int:
    return int(t[k])


def batch_memcpy_kernel(src_ptrs, dst_ptrs, sizes, BLOCK_SIZE=1024):
    for k in range(src_ptrs.shape[0]):
        ctypes.memmove(_i(dst_ptrs, k) & (2**64 - 1), _i(src_ptrs, k) & (2**64 - 1), _i(sizes, k))


def eagle_prepare_next_token_padded_kernel(sampled_token_ids, discard_request_mask, backup_next_token_ids,
                                           next_token_ids, valid_sampled_tokens_count, vocab_size,
                                           num_sampled_tokens_per_req, num_reqs, stride_sampled_token_ids,
                                           BLOCK_SIZE_TOKENS=None):
    """EAGLE's padded-batch next token (spec_decode/utils.py:259-320 in 0.33.0), one request per program: the
    number of valid sampled tokens (not -1, inside the vocabulary) and the last valid one; a discarded request
    (a partial prefill) or one with none valid takes its backup token, a discarded one counts 0."""
    for i in range(int(num_reqs)):
        if bool(discard_request_mask[i]):
            next_token_ids[i], valid_sampled_tokens_count[i] = backup_next_token_ids[i], 0
            continue
        row = sampled_token_ids[i, :int(num_sampled_tokens_per_req)].tolist()
        valid = [t for t in row if t != -1 and t < int(vocab_size)]
        next_token_ids[i] = valid[-1] if valid else backup_next_token_ids[i]
        valid_sampled_tokens_count[i] = len(valid)


def _bt_entry(block_table_ptrs_ptr, group_idx: int, row: int, stride: int, col: int) -> int:
    base = _i(block_table_ptrs_ptr, group_idx) & (2**64 - 1)
    return ctypes.c_int32.from_address(base + 4 * (row * int(stride) + int(col))).value


def _copy_state(state_idx, req_idx, src_col, dst_col, token_bias, block_table_ptrs_ptr, block_table_stride_req,
                state_base_addrs_ptr, state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr,
                state_conv_widths_ptr, state_group_indices_ptr, state_dim_row_count_ptr, state_dim_row_stride_ptr,
                conv_dim_first: bool) -> None:
    """`_copy_mamba_state_block` (mamba_utils.py:191-366): conv states shift by token_bias, temporal states
    take column src_col + token_bias."""
    base = _i(state_base_addrs_ptr, state_idx) & (2**64 - 1)
    stride = _i(state_block_strides_ptr, state_idx)
    elem = _i(state_elem_sizes_ptr, state_idx)
    inner = _i(state_inner_sizes_ptr, state_idx)
    width = _i(state_conv_widths_ptr, state_idx)
    group = _i(state_group_indices_ptr, state_idx)
    dst_block = _bt_entry(block_table_ptrs_ptr, group, req_idx, block_table_stride_req, dst_col)
    dst = base + dst_block * stride
    if width > 0:
        src_block = _bt_entry(block_table_ptrs_ptr, group, req_idx, block_table_stride_req, src_col)
        src = base + src_block * stride
        n = width - token_bias
        if conv_dim_first:  # DS: per dim row, tokens low to high (memmove-safe left shift)
            rows, row_stride = _i(state_dim_row_count_ptr, state_idx), _i(state_dim_row_stride_ptr, state_idx)
            for r in range(rows):
                for t in range(n):
                    ctypes.memmove(dst + r * row_stride + t * elem, src + r * row_stride + (t + token_bias) * elem, elem)
            return
        token_bytes = inner * elem
        for t in range(n):  # low to high: same-block left shifts stay correct
            ctypes.memmove(dst + t * token_bytes, src + (t + token_bias) * token_bytes, token_bytes)
        return
    src_block = _bt_entry(block_table_ptrs_ptr, group, req_idx, block_table_stride_req, src_col + token_bias)
    ctypes.memmove(dst, base + src_block * stride, inner * elem)


def _copy_states(req_idx, src, dst, bias, *meta) -> None:
    """Every state of the request (the kernels' grid axis 1): meta is the kernels' state metadata, in order."""
    *ptrs, dim_first = meta
    for state_idx in range(ptrs[2].shape[0]):
        _copy_state(state_idx, req_idx, src, dst, bias, *ptrs, bool(dim_first))


def postprocess_mamba_fused_kernel(
        num_accepted_tokens_ptr, mamba_state_idx_ptr, num_scheduled_tokens_ptr, num_computed_tokens_ptr,
        num_draft_tokens_ptr, block_table_ptrs_ptr, block_table_stride_req, state_base_addrs_ptr,
        state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr, state_conv_widths_ptr,
        state_group_indices_ptr, state_dim_row_count_ptr, state_dim_row_stride_ptr, num_accepted_tokens_out_ptr,
        idx_mapping_ptr, num_reqs, block_size, COPY_BLOCK_SIZE=1024, CONV_STATE_DIM_FIRST=False,
        HAS_IDX_MAPPING=False, PRECOMPUTED_NEW_COMPUTED=False, TEMPORAL_TILES=1, SKIP_TEMPORAL_STATE_COPY=False):
    """Per request: the decision of mamba_utils.py:440-470, then every state's copy (grid axis 1).
    SKIP_TEMPORAL_STATE_COPY (0.34: FlashInfer's ReplaySSM owns the temporal state) is never set on CPU."""
    _no_replayssm(SKIP_TEMPORAL_STATE_COPY)
    for batch_idx in range(int(num_reqs)):
        req_idx = _i(idx_mapping_ptr, batch_idx) if HAS_IDX_MAPPING else batch_idx
        if req_idx < 0:
            continue
        num_accepted = _i(num_accepted_tokens_ptr, req_idx)
        src = _i(mamba_state_idx_ptr, req_idx)
        if PRECOMPUTED_NEW_COMPUTED:
            new_computed = _i(num_computed_tokens_ptr, req_idx)
            running = new_computed - num_accepted + 1
        else:
            running = (_i(num_computed_tokens_ptr, req_idx) + _i(num_scheduled_tokens_ptr, req_idx)
                       - _i(num_draft_tokens_ptr, req_idx))
            new_computed = running + num_accepted - 1
        aligned = new_computed // block_size * block_size
        if aligned < running:
            continue
        bias, dest = aligned - running, aligned // block_size - 1
        if src == dest:
            num_accepted_tokens_out_ptr[req_idx] = 1
            if bias == 0:
                continue
        if OBSERVER is not None:
            OBSERVER("postcopy", req_idx, src, dest, bias)
        _copy_states(req_idx, src, dest, bias, block_table_ptrs_ptr, block_table_stride_req, state_base_addrs_ptr,
                     state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr, state_conv_widths_ptr,
                     state_group_indices_ptr, state_dim_row_count_ptr, state_dim_row_stride_ptr, CONV_STATE_DIM_FIRST)


def _no_replayssm(flag) -> None:
    """vLLM 0.34's ReplaySSM switches (FlashInfer's ring materializer, GPU only) are not simulated."""
    if flag:
        raise NotImplementedError("FlashInfer ReplaySSM's align-mode copies are not simulated on CPU")


def precopy_mamba_align_fused_kernel(
        mamba_state_idx_ptr, src_col_ptr, token_bias_ptr, block_table_ptrs_ptr, block_table_stride_req,
        state_base_addrs_ptr, state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr,
        state_conv_widths_ptr, state_group_indices_ptr, state_dim_row_count_ptr, state_dim_row_stride_ptr,
        idx_mapping_ptr, num_reqs, COPY_BLOCK_SIZE=1024, CONV_STATE_DIM_FIRST=False, HAS_IDX_MAPPING=True,
        TEMPORAL_TILES=1, ZERO_TEMPORAL_TOKEN_BIAS=False):
    """Per request: copy from src_col (shifted by token_bias) to the new running column (:596-631).
    ZERO_TEMPORAL_TOKEN_BIAS (0.34: ReplaySSM, mamba_utils.py:1166) is never set on CPU."""
    _no_replayssm(ZERO_TEMPORAL_TOKEN_BIAS)
    for batch_idx in range(int(num_reqs)):
        req_idx = _i(idx_mapping_ptr, batch_idx) if HAS_IDX_MAPPING else batch_idx
        if req_idx < 0:
            continue
        src, dst = _i(src_col_ptr, req_idx), _i(mamba_state_idx_ptr, req_idx)
        if src < 0 or src == dst:
            continue
        bias = _i(token_bias_ptr, req_idx)
        if OBSERVER is not None:
            OBSERVER("precopy", req_idx, src, dst, bias)
        _copy_states(req_idx, src, dst, bias, block_table_ptrs_ptr, block_table_stride_req, state_base_addrs_ptr,
                     state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr, state_conv_widths_ptr,
                     state_group_indices_ptr, state_dim_row_count_ptr, state_dim_row_stride_ptr, CONV_STATE_DIM_FIRST)


def compute_slot_mapping_kernel(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                                block_table_stride, block_size, slot_mapping_ptr, KV_CACHE_BLOCK_SIZE=None,
                                BLOCKS_PER_KV_BLOCK=1, TOTAL_CP_WORLD_SIZE=1, TOTAL_CP_RANK=0,
                                CP_KV_CACHE_INTERLEAVE_SIZE=1, PAD_ID=-1, BLOCK_SIZE=1024):
    """`_compute_slot_mapping_kernel` (v1/worker/block_table.py:379-440 in 0.27.1; without context
    parallelism): slot = block_table[req, block index of pos] * block_size + offset, PAD_ID past num_tokens.
    The CPU runner of releases < 0.28 binds it to a C++ op of vLLM's CPU build (utils/cpu_triton_utils.py),
    absent from the CUDA wheel."""
    assert TOTAL_CP_WORLD_SIZE == 1, "context parallelism is not simulated"
    kv_block = KV_CACHE_BLOCK_SIZE or block_size
    qsl = query_start_loc_ptr.numpy().astype(np.int64)
    counts = np.maximum(qsl[1:] - qsl[:-1], 0)  # a request with no tokens (padding) maps nothing
    total = int(counts.sum())
    out = slot_mapping_ptr.numpy()  # the buffer itself (a CPU tensor's view)
    if total:
        req = np.repeat(np.arange(len(counts)), counts)
        tok = np.repeat(qsl[:-1], counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        pos = positions_ptr.numpy()[tok].astype(np.int64)
        vblock = pos // kv_block
        off = pos - vblock * kv_block
        flat = block_table_ptr.reshape(-1).numpy()
        blocks = flat[req * int(block_table_stride) + vblock * BLOCKS_PER_KV_BLOCK + off // block_size].astype(np.int64)
        out[tok] = blocks * block_size + off % block_size
    out[int(num_tokens):int(max_num_tokens)] = PAD_ID


def slot_mapping_by_names(arg_names):
    """`ComputeSlotMappingKernel.kernel` (v1/worker/block_table.py, 0.29+), whose parameters change across
    releases: the launch's arguments, in the kernel's own order (`arg_names`), mapped by name onto
    compute_slot_mapping_kernel."""
    def slot_mapping_kernel(*args, **kwargs):
        kw = dict(zip(arg_names, args), **kwargs)
        block = kw.get("block_size", kw.get("KV_CACHE_BLOCK_SIZE"))
        compute_slot_mapping_kernel(kw["num_tokens"], kw["max_num_tokens"], kw["query_start_loc_ptr"],
                                    kw["positions_ptr"], kw["block_table_ptr"], kw["block_table_stride"], block,
                                    kw["slot_mapping_ptr"], KV_CACHE_BLOCK_SIZE=kw.get("KV_CACHE_BLOCK_SIZE"),
                                    BLOCKS_PER_KV_BLOCK=kw.get("BLOCKS_PER_KV_BLOCK", 1),
                                    TOTAL_CP_WORLD_SIZE=kw.get("TOTAL_CP_WORLD_SIZE", 1),
                                    PAD_ID=kw.get("PAD_ID", -1))
    return slot_mapping_kernel


def _kernel_arg_names(kernel) -> tuple:
    import inspect

    names = getattr(kernel, "arg_names", None)
    return tuple(names) if names is not None else tuple(inspect.signature(getattr(kernel, "func", kernel)).parameters)


def bind_slot_mapping() -> bool:
    """Releases < 0.28 launch the slot-mapping kernel from block_table's module global, which their CPU
    runner rebinds to a C++ op (cpu_model_runner.py); bind the torch version there instead. False when the
    release has no such global (0.33.0 launches it only from execute_model's slot mappings)."""
    import vllm.v1.worker.block_table as bt

    if hasattr(bt, "_compute_slot_mapping_kernel"):
        bt._compute_slot_mapping_kernel = _Launch(compute_slot_mapping_kernel)
        return True
    owner = getattr(bt, "_COMPUTE_SLOT_MAPPING_KERNEL", None)
    if owner is not None and type(getattr(owner, "kernel", None)).__module__ == "vllm.utils.cpu_triton_utils":
        # 0.29-0.30: the CPU runner bound the JIT owner's kernel to the C++ op; bind ours by the class's names
        names = _kernel_arg_names(type(owner).kernel)
        owner.kernel = _Launch(slot_mapping_by_names(names), names)
        owner.__dict__.pop("_kernel_arg_names", None)
        return True
    return False


class _Launch:
    """`kernel[grid](*args)` for a release without vLLM's dispatcher: the replacement takes the launch."""

    def __init__(self, fn, arg_names=None) -> None:
        self.fn = fn
        if arg_names is not None:  # what vLLM's JIT launch helper binds the launch arguments by
            self.arg_names = tuple(arg_names)

    def __getitem__(self, grid):
        return self.fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def kernel_exists(name: str) -> bool:
    import importlib

    module, attr = name.rsplit(".", 1)
    parts = module.split(".")
    try:
        if parts[-1][:1].isupper():  # a JIT warmup class's kernel attribute
            return hasattr(getattr(importlib.import_module(".".join(parts[:-1])), parts[-1], None), attr)
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


def _impl(name: str, fn: str):
    if fn == "slot_mapping_by_names":
        from vllm.v1.worker.block_table import ComputeSlotMappingKernel

        return slot_mapping_by_names(_kernel_arg_names(ComputeSlotMappingKernel.kernel))
    return globals()[fn]


def register() -> str:
    """Install the replacements once per process: through vLLM's kernel dispatcher (0.31+, which rebinds every
    holder), else by rebinding the kernel in its defining module (vLLM < 0.31: mamba_utils launches them
    by module-global name, v1/worker/mamba_utils.py). Returns how. Either way `mode` can bind vLLM's own
    kernels back for a call."""
    global _registered, _active
    if _registered:
        return _registered
    try:
        import vllm.triton_utils.dispatcher  # noqa: F401
    except ImportError:
        import importlib

        for name, fn in _KERNELS.items():
            if kernel_exists(name) and name.rsplit(".", 2)[-2][:1].islower():
                module, attr = name.rsplit(".", 1)
                host = importlib.import_module(module)
                _JIT[name] = getattr(host, attr)
                patch_attr(host, attr, _Launch(globals()[fn]), by="engine:kernels")  # for the process's life
                _OVR[name] = getattr(host, attr)
        _forget_holders()
        _active = "torch"
        _registered = "module"
        return _registered
    register_replacements({name: _impl(name, fn) for name, fn in _KERNELS.items() if kernel_exists(name)})
    _registered = "dispatcher"
    return _registered


# -- one switch for every replacement registered in this process (the V1 worker's and the V2 worker's) ------

_JIT: dict = {}  # name -> vLLM's kernel object (a Triton JITFunction)
_OVR: dict = {}  # name -> what stands in for it (the dispatcher's KernelOverride around our replacement)
_HOLDERS: list = []  # (owner, attribute, name): every place vLLM's code looks a registered kernel up
_SCANNED = 0
_active = "triton"


def register_replacements(replacements: dict) -> None:
    """Register through vLLM's `dispatcher.register_kernels` (it rebinds every holder of each kernel), keeping
    vLLM's kernel and the override per name so `mode` can swap them. A name registered before (the fused
    Mamba kernels both workers replace) is registered again over vLLM's kernel, not over the earlier override."""
    global _active
    import warnings

    from vllm.triton_utils import dispatcher

    _set("torch")  # every holder on an override: registering rebinds them all to the new one
    for name in replacements:
        host, attr = dispatcher._resolve_kernel(name)
        kernel = getattr(host, attr)
        if isinstance(kernel, dispatcher.KernelOverride):  # registered before (by us: _JIT has it)
            kernel = _JIT.get(name) or dispatcher._registry[name][0]
        _JIT[name] = kernel
    with warnings.catch_warnings():  # its scan of sys.modules touches deprecated torch attributes
        warnings.simplefilter("ignore", FutureWarning)
        dispatcher.register_kernels(replacements)
    for name in replacements:
        host, attr = dispatcher._resolve_kernel(name)
        _OVR[name] = getattr(host, attr)
    _active = "torch"
    _forget_holders()


def _forget_holders() -> None:
    global _SCANNED
    _SCANNED = 0


def _holders() -> list:
    """Where the registered kernels are bound: module attributes (the defining modules and every `from ...
    import kernel` copy) and JIT warmup owners' `kernel` attribute, found by identity as the dispatcher's own
    scan finds them (triton_utils/dispatcher.py _rebind_kernels); rescanned when modules were imported."""
    global _SCANNED
    import sys
    import warnings

    if _SCANNED != len(sys.modules):
        known = {id(k): n for n, k in _JIT.items()}
        known.update({id(k): n for n, k in _OVR.items()})
        found = []
        with warnings.catch_warnings():  # the scan touches deprecated torch attributes
            warnings.simplefilter("ignore", FutureWarning)
            for module in list(sys.modules.values()):
                ns = getattr(module, "__dict__", None)
                if not ns:
                    continue
                for attr, value in list(ns.items()):
                    name = known.get(id(value))
                    if name is not None:
                        found.append((module, attr, name))
                    elif hasattr(value, "__dict__"):
                        try:
                            name = known.get(id(vars(value).get("kernel")))
                        except TypeError:
                            continue
                        if name is not None:
                            found.append((value, "kernel", name))
        _HOLDERS[:] = found
        _SCANNED = len(sys.modules)
    return _HOLDERS


_TRITON: list = []  # the undos of the patches that bind vLLM's own kernels back while "triton" is active


def _set(kind: str) -> None:
    """Bind every holder to `kind`'s kernels, through the one patch layer (harness/patches.py): "triton" patches
    vLLM's kernels over the overrides (`engine:kernels-triton`), "torch" undoes those patches; a holder first seen
    in a triton call (a module imported then took vLLM's kernel) is bound to the override for the process's life,
    as `register` binds the defining modules (`engine:kernels`)."""
    global _active
    if kind == _active or not _OVR:
        return
    if kind == "triton":
        _TRITON.extend(patch_attr(owner, attr, _JIT[name], by="engine:kernels-triton")
                       for owner, attr, name in _holders())
    else:
        undo_all(_TRITON)()
        _TRITON.clear()
        for owner, attr, name in _holders():
            if getattr(owner, attr) is not _OVR[name]:
                patch_attr(owner, attr, _OVR[name], by="engine:kernels")
    for owner, attr, _ in _holders():
        if attr == "kernel" and not isinstance(owner, type):
            owner.__dict__.pop("_kernel_arg_names", None)  # a warmup owner re-derives its launch binding
    _active = kind


class mode:
    """`with mode("torch" | "triton", register):` the kernels vLLM's code launches for one call: the
    replacements (`register` installs the worker's own, once per process; they stay bound) or vLLM's Triton
    kernels, every replacement any worker registered in this process unbound for the call only."""

    def __init__(self, kind: str, register=register) -> None:
        self.kind, self.register = kind, register

    def __enter__(self):
        self.prev = _active
        if self.kind == "torch":
            self.register()
        _set(self.kind)
        return self

    def __exit__(self, *exc) -> None:
        if self.kind == "triton":
            _set(self.prev)
