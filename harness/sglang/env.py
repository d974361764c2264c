"""SGLang's own cache, pools and result processor built for one replay, and the Mamba slots' states as ids.

Imports SGLang: import it only after `runtime.patched` (harness/sglang/driver.py does).
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import torch
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.kits.unified_radix_cache import fixtures
from sglang.test.kits.unified_radix_cache.config import CacheConfig

from harness.scenario import VOCAB_SIZE
from harness.sglang.geometry import MAX_RUNNING
from harness.sglang.linker import LINKER_CONFIG
from harness.states import ZERO_STATE, State

WORD_BITS, WORDS = 14, 4  # 14-bit int16 patterns are finite bf16 values: copy_from/clear_slots move them exactly
GARBAGE_ID = (1 << (WORD_BITS * WORDS)) - 1  # what the harness puts in every slot first: never written


class StateIO:
    """Each Mamba slot holds a small id into the driver's table of States, in the first 4 bf16 words of layer 0's
    temporal state, so SGLang's own copy_from / clear_slots move or zero it like real state. Id 0 is the zero
    state (a cleared slot); an id not in the table decodes to None (garbage)."""

    def __init__(self, mamba_pool) -> None:
        self.temporal = mamba_pool.mamba_cache.temporal
        self.steps = mamba_pool.mamba_cache.intermediate_ssm  # a verify's per-step states: [layer, row, step, ...]
        self.states: list[State] = [ZERO_STATE]
        self.ids: dict[State, int] = {ZERO_STATE: 0}
        for slot in range(self.temporal.shape[1]):
            self._write_id(slot, GARBAGE_ID)

    def _words(self, slot: int, step: int | None = None):
        row = self.temporal[0, int(slot)] if step is None else self.steps[0, int(slot), int(step)]
        return row.reshape(-1).view(torch.int16)[:WORDS]

    def _write_id(self, slot: int, sid: int, step: int | None = None) -> None:
        mask = (1 << WORD_BITS) - 1
        words = [(sid >> (WORD_BITS * k)) & mask for k in range(WORDS)]
        self._words(slot, step).copy_(torch.tensor(words, dtype=torch.int16))

    def _id(self, state: State | None) -> int:
        if state is None:
            return GARBAGE_ID
        if state not in self.ids:
            self.ids[state] = len(self.states)
            self.states.append(state)
        return self.ids[state]

    def write(self, slot: int, state: State | None) -> None:
        self._write_id(slot, self._id(state))

    def write_step(self, row: int, step: int, state: State | None) -> None:
        """A verify's state after draft-tree node `step` of batch row `row`, where the GDN verify kernel keeps it
        (intermediate_ssm[layer, row, step]); SGLang's own commit scatters it into the slots."""
        self._write_id(row, self._id(state), step)

    def read(self, slot: int) -> State | None:
        sid = sum((w & ((1 << WORD_BITS) - 1)) << (WORD_BITS * k) for k, w in enumerate(self._words(slot).tolist()))
        return self.states[sid] if sid < len(self.states) else None


class NoOp:
    """A stand-in (metrics, streamers, IPC) whose listed fields are real values and every other attribute is a
    do-nothing method."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


def _publish_server_args(geom) -> ServerArgs:
    """The scheduler's view, published after the fixture's own; extra_buffer is refused by real argument
    resolution on CPU, so the fields are set directly."""
    sa = ServerArgs(model_path="dummy", page_size=geom.page)
    sa.mamba_radix_cache_strategy = geom.strategy
    sa.mamba_track_interval = geom.cache_chunk
    sa._mamba_cache_chunk_size = geom.cache_chunk
    sa.disable_overlap_schedule = True
    sa.device = "cpu"
    sa.chunked_prefill_size = geom.budget
    # what Scheduler.__init__ publishes when it is unset (scheduler.py:1237-1243, pp size 1): the micro-batch bound
    # get_num_allocatable_reqs reads (:4034) on the wing's __new__ Scheduler (harness/sglang/scheduler.py)
    sa.pp_max_micro_batch_size = MAX_RUNNING
    if geom.draft_tokens:  # NGRAM speculative decoding (harness/sglang/spec.py); torch_native: get_last_loc's torch
        # path (a Triton kernel otherwise)
        sa.speculative_algorithm = "NGRAM"
        sa.speculative_num_draft_tokens = geom.draft_tokens
        sa.speculative_eagle_topk = 1
        sa.speculative_num_steps = geom.draft_tokens - 1
        sa.attention_backend = "torch_native"
    if geom.external:  # the wing's store as an out-of-tree linker (harness/sglang/linker.py)
        sa.enable_unified_cache_external_linker = True
        sa.unified_cache_external_linker_backend = "dynamic"
        sa.unified_cache_external_linker_config = dict(LINKER_CONFIG)
    set_global_server_args_for_scheduler(sa)
    return sa


def _attach_linker(sa, cache, alloc, io) -> None:
    """The external linker as SGLang's cache registry attaches it (srt/mem_cache/registry.py:200-215): SGLang's own
    factory and startup config, the layer counter registered with the KV pool."""
    from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker, get_startup_linker_config
    from sglang.srt.runtime_context import get_memory

    cache.init_cache_linker(create_unified_cache_linker(
        sa, None, backend=get_memory().unified_cache_external_linker_backend, config=get_startup_linker_config(),
        components=set(cache.components)))
    alloc.get_kvcache().register_layer_transfer_counter(cache.linker.layer_done_counter)
    cache.linker.cache_linker.io = io


def build(geom) -> SimpleNamespace:
    """The fixture's cache and pools for `geom` (harness.sglang.geometry.SglangGeometry), a ModelRunner shell for
    the deferred CoW and SGLang's own batch-result processor (a frozen slotted dataclass: fields by keyword)."""
    cfg = CacheConfig(page_size=geom.page, components=(ComponentType.FULL, ComponentType.MAMBA),
                      enable_mamba_extra_buffer=geom.extra, mamba_cache_size=geom.mamba_slots,
                      kv_size=geom.kv_size, max_num_reqs=geom.max_reqs, max_context_len=geom.max_context)
    cache, alloc, rtp = fixtures.build_fixture(cfg, mamba_cache_chunk_size=geom.cache_chunk,
                                               tree_core_backend=geom.tree_core)
    sa = _publish_server_args(geom)
    model_config = SimpleNamespace(vocab_size=VOCAB_SIZE, is_encoder_decoder=False, is_multimodal=False,
                                   hf_text_config=SimpleNamespace(mamba_chunk_size=geom.cache_chunk),
                                   self_opened_think_start_ids=None, think_end_ids=None)
    runner = ModelRunner.__new__(ModelRunner)  # only _maybe_execute_deferred_mamba_cow_and_clear is used
    runner.req_to_token_pool = rtp
    runner.is_draft_worker = False
    brp = SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=DisaggregationMode.NULL, enable_overlap=False,
        enable_overlap_mlx=False, model_config=model_config, token_to_kv_pool_allocator=alloc, tree_cache=cache,
        hisparse_coordinator=None, req_to_token_pool=rtp, decode_offload_manager=None, metrics_collector=NoOp(),
        metrics_reporter=NoOp(num_generated_tokens=0, forward_ct_decode=0), draft_worker=None, model_worker=None,
        logprob_result_processor=NoOp(), output_streamer=NoOp(),
        beam_coordinator=NoOp(commit_decode=lambda b: set()), abort_request=lambda *a, **k: None)
    io = StateIO(rtp.mamba_pool)
    if geom.external:
        _attach_linker(sa, cache, alloc, io)
    return SimpleNamespace(geom=geom, cache=cache, alloc=alloc, rtp=rtp, mc=model_config, mr=runner, brp=brp, io=io)


def tree_values(env, sequences):
    """(node id, path tokens, Mamba slot) of every node on the path of one of `sequences` (every request's tokens:
    the tree holds nothing else) that holds a device Mamba value. Read through the production TreeCore interface
    (srt/mem_cache/unified_cache/unified_tree_core_interface.py: the read-only `match_full_device_prefix`, then
    `collect_path_info` and `get_component_device_value`), the same on the Python and the Rust core: the wheel
    ships no Rust inspection binding to list nodes with."""
    core = env.cache.tree_core
    ends = {}
    for seq in sequences:
        matched, nid, _ = core.match_full_device_prefix(RadixKey(array("q", seq)))
        if matched > ends.get(nid, (None, -1))[1]:  # of the sequences ending in one node, the one matching most
            ends[nid] = (list(seq), matched)
    seen = set()
    for (seq, matched), path in zip(ends.values(), core.collect_path_info(list(ends)), strict=True):
        for node in path:
            # a match may end inside its last node (the rest of that node is another sequence's tokens): that node is
            # read with the sequence it matches whole
            if node.node_id in seen or node.path_end > matched:
                continue
            seen.add(node.node_id)
            val = core.get_component_device_value(node.node_id, ComponentType.MAMBA)
            if val is not None:
                yield node.node_id, seq[:node.path_end], int(val.reshape(-1)[0])


def pool_snapshot(env) -> dict:
    """SGLang's pools at the end, for `harness.oracles.pool_accounting`: the KV allocator's free pages against the
    pages the tree's FULL values hold, the Mamba allocator's free slots against the tree's Mamba values (ids from 1:
    slot 0 and page 0 are SGLang's padding targets), the request rows; and what the tree still has locked."""
    page, cache, rtp = env.geom.page, env.cache, env.rtp
    mamba = rtp.mamba_allocator
    return {"slot_pools": {
        "kv pages": {"size": env.alloc.size // page, "free": env.alloc.get_all_free_pages().tolist(),
                     "cached": sorted({i // page for i in cache.all_values_flatten().tolist()}),
                     "locked": cache.full_protected_size()},
        "mamba slots": {"size": mamba.size, "free": mamba.free_slots.tolist(),
                        "cached": cache.all_mamba_values_flatten().tolist(), "locked": cache.mamba_protected_size()},
        "request rows": {"size": rtp.size, "free": list(rtp.free_slots), "cached": [], "locked": 0}}}
