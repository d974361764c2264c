"""Known issues of stock vLLM, judged by their fix: a finding is KNOWN only when replaying its scenario with
the issue's fix applied makes it vanish (ClusterFuzz's "fixed" test: a replay, never a pattern match).

Each known issue is a (repro scenario, fix patch) pair. The fix is a run-time patch like a mutant, but it
removes a bug: the change vLLM would ship. Every finding of an input is classified (Jepsen: a history is
never summarised by its first anomaly):

- S       the signatures the input shows (mutant applied, if any);
- S_fixed the signatures it shows with every applicable fix applied on top;
- known       = S - S_fixed, each attributed to the fix that alone removes it;
- unexplained = S & S_fixed: the fixes do not remove it, so it is new;
- revealed    = S_fixed - S: hidden behind a known issue on stock (e.g. the replay stopped at a known
                exception), shown once the fix lets it run on. Also new.

An input is new when unexplained or revealed is non-empty; campaigns dedup by that set, so a known finding
can never shadow a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from harness.mutants.base import Mutant, bound_arguments, method_wrapped, recompiled_with, wrap_method
from harness.patches import patch_attr, undo_all
from harness.run_config import RunConfig


ROOT = Path(__file__).resolve().parent.parent  # repro paths are relative to the checkout


@dataclass(frozen=True)
class KnownIssue:
    id: str
    summary: str
    releases: str
    repro: str  # scenario file, relative to the repository root
    reached_by: str  # the configuration a user runs to reach it
    fix: Mutant  # the run-time patch that removes the bug
    applies: object = None  # callable() -> bool: the fix's target exists in the installed release
    repro_from: tuple = (0, 26, 0)  # first release whose scheduler lets the repro reach the bug
    # the model runners whose code carries the bug (engine tier); None: scheduler/allocator code, every runner
    runners: tuple | None = None
    # scheduler code only vLLM's own Scheduler runs (the engine tier, any runner): the mirrored tiers' scheduler
    # loop does not follow it
    engine_only: bool = False

    def applicable(self) -> bool:
        return self.applies is None or bool(self.applies())

    @property
    def code(self) -> str:
        """Whose code carries the bug, for messages."""
        if self.runners is None:
            return "vLLM's own Scheduler" if self.engine_only else "scheduler or allocator"
        return "/".join(self.runners)

    def runs_on(self, tier: str, runner: str = "auto") -> bool:
        """Whether the code carrying the bug runs on this tier: the mirrored tiers run the harness's V1 worker
        shadow ("mirror"); the engine tier runs `runner` ("auto" may pick either of vLLM's runners)."""
        if self.engine_only and tier != "engine":
            return False
        if self.runners is None:
            return True
        if tier != "engine":
            return "mirror" in self.runners
        return runner in self.runners or (runner == "auto" and bool({"v1", "v2"} & set(self.runners)))

    def repro_expected(self) -> bool:
        """Should the repro show this issue on the installed release?"""
        from harness.vllm_adapter import _parse_version, installed_version

        return self.applicable() and _parse_version(installed_version()) >= self.repro_from


# -- fix: count the external block at admission (single_type_kv_cache_manager.py:1692-1795 in 0.33.0) ------
def _count_external_block(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        n = original(self, *args, **kwargs)
        b = bound_arguments(original, self, *args, **kwargs).arguments
        external = b["total_computed_tokens"] - b["num_local_computed_tokens"]
        # the physical-block cap (:1785-1790) leaves out the block allocate_external_computed_blocks takes when
        # the same call allocates the continuation's block: a sync hit's. An async load comes with no new tokens
        # (scheduler.py's load_kv_async branch sets num_new_tokens = 0), and its count is right.
        continues = b["num_tokens_main_model"] > b["total_computed_tokens"]
        if (self.mamba_cache_mode == "align" and external > 0 and continues and n <= self.block_pool.num_gpu_blocks
                and b["request_id"] not in self._allocated_block_reqs):
            return n + 1
        return n
    return get_num_blocks_to_allocate


# -- fix: a chunk starting mid-block stops at the next block boundary, where the release drops that stop ---------
def _stop_at_next_block_boundary(dropped=None):
    """make(original) for `_mamba_block_aligned_split`: `dropped(self, request, start, num_new_tokens)` says where
    the release's split drops the mid-block stop (the bug); only there is its schedule changed, so the fix never
    hides a finding by moving it. None: wherever the chunk runs past the boundary (a stop vLLM kept leaves none)."""
    def make(original):
        def _mamba_block_aligned_split(self, request, num_new_tokens, num_new_local_computed_tokens=0,
                                       num_external_computed_tokens=0):
            n = original(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
            start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
            if dropped is not None and not dropped(self, request, start, num_new_tokens):
                return n
            block_size = self.cache_config.block_size
            boundary = (start // block_size + 1) * block_size
            if start % block_size and start < boundary < start + n:
                return boundary - start  # the chunk stops at the boundary, whose state is then written
            return n
        return _mamba_block_aligned_split
    return make


def _checkpoint_prompt_final_chunk(self, request, start, num_new_tokens) -> bool:
    """0.33.0 drops the stop under use_internal_checkpoint (scheduler.py:644-648): checkpoint blocks and a chunk
    *asked for* up to the prompt's end (`end >= prefill_end` with end = start + num_new_tokens before any stop
    clips it, scheduler.py:586-605). (Judged on the returned n, the fix missed chunks that another stop clipped
    short of the prompt's end.)"""
    prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
    return getattr(self, "mamba_has_prefill_checkpoint_blocks", False) and start + num_new_tokens >= prefill_end


def _split_drops_stop_past_cacheable_range() -> bool:
    """0.26.0 keeps the mid-block stop only while the boundary is <= last_cache_position (scheduler.py:400-406),
    which an EAGLE drafter backs off one block (:383-385); 0.27.1 stops every chunk starting mid-block
    (scheduler.py:418-420 in 0.27.1)."""
    import inspect

    return "next_block_boundary <= last_cache_position" in inspect.getsource(_scheduler()._mamba_block_aligned_split)


# -- fix: V1 re-add keeps num_accepted for running rows (as V2 does, model_states/mamba_hybrid.py:112-115) --
def _keep_accepted_on_readd(original):
    def readded_num_accepted(self, request, kind):
        if kind == "RUNNING":
            return self.num_accepted.get(request, 1)
        return original(self, request, kind)
    return readded_num_accepted


def _keep_accepted_on_readd_v1():
    """The same fix in vLLM's own V1 runner (engine tier, --runner v1): InputBatch.remove_request keeps the
    leaving row's num_accepted_tokens, add_request restores it for a running row re-added; the kept count
    is dropped for preempted, finished and resumed requests (those start over, as in V2,
    model_states/mamba_hybrid.py:112-115). Wraps InputBatch.add_request/remove_request
    (gpu_input_batch.py:345, :479, :523 in 0.33.0) and GPUModelRunner._update_states (:1176)."""
    from vllm.v1.worker.gpu_input_batch import InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from harness.engine.config import resumed_ids

    kept: dict[str, int] = {}
    fresh: set[str] = set()  # this step's new, resumed and preempted requests: their re-added rows start over

    def remove(original):
        def remove_request(self, req_id):
            idx = self.req_id_to_index.get(req_id)
            if idx is not None:
                kept[req_id] = int(self.num_accepted_tokens_cpu[idx])
            return original(self, req_id)
        return remove_request

    def add(original):
        def add_request(self, request):
            out = original(self, request)
            n = kept.pop(request.req_id, None)
            if n is not None and request.req_id not in fresh:
                self.num_accepted_tokens_cpu[self.req_id_to_index[request.req_id]] = n
            return out
        return add_request

    def update(original):
        def _update_states(self, so):
            # a request preempted and resumed within one schedule() (a forced preemption) leaves and re-enters
            # the batch inside this call: its row starts over too
            fresh.update(resumed_ids(so.scheduled_cached_reqs), getattr(so, "preempted_req_ids", None) or (),
                         (nr.req_id for nr in so.scheduled_new_reqs))
            for rid in fresh:
                kept.pop(rid, None)
            try:
                out = original(self, so)
            finally:
                fresh.clear()
            for rid in set(so.finished_req_ids) | set(getattr(so, "preempted_req_ids", None) or ()):
                kept.pop(rid, None)
            return out
        return _update_states

    undos = [wrap_method(InputBatch, "remove_request", remove), wrap_method(InputBatch, "add_request", add),
             wrap_method(GPUModelRunner, "_update_states", update)]

    def undo():
        for u in reversed(undos):
            u()
        kept.clear()
        fresh.clear()
    return undo


def _keep_accepted_fix() -> Mutant:
    """Both places the V1 reset lives: the worker shadow (mirror) and vLLM's V1 runner (engine tier)."""
    def patch():
        undo_shadow = wrap_method(_worker_shadow(), "readded_num_accepted", _keep_accepted_on_readd)
        try:
            undo_v1 = _keep_accepted_on_readd_v1()
        except ImportError:  # a release or machine without the V1 GPU runner module: the shadow only
            undo_v1 = None

        def undo():
            if undo_v1 is not None:
                undo_v1()
            undo_shadow()
        return undo

    return Mutant(name="fix-keep-accepted-on-readd", bug_class="fix: a running row re-added to the batch keeps its "
                  "accepted count", releases="where the issue is known", origin="hybrid-harness", patch=patch,
                  is_applied=lambda: method_wrapped(_worker_shadow(), "readded_num_accepted"))


# -- fix: V2 keeps draft-less decode rows ahead of prefill rows (model_runner.py:2507-2519 in 0.33.0) ----------
def _v2_runner_module():
    import vllm.v1.worker.gpu.model_runner as module

    return module


def _decode_rows_lead(original):
    """`gather_batch_req_state` with a batch order in which no prefilling row without drafts precedes a decode
    row: `sort_batch_req_ids` ranks a (1+K)-token prefill chunk as decode-like, but the Mamba builder
    (mamba_attn.py:451-455, treat_short_extends_as_decodes=False) splits at the first prefilling row, so a
    decode row after it went to the prefill kernels (mamba_mixer2.py:838-855), which ignore its accepted count.
    The fix ranks by `is_prefilling` first (the runner's own counts, model_runner.py:1334-1338), keeping
    vLLM's order otherwise (a stable sort)."""
    def gather_batch_req_state(self, scheduler_output, dummy_run):
        module = _v2_runner_module()
        vllm_sort = module.sort_batch_req_ids
        rs = self.req_states

        def prefill_without_drafts(req_id, drafts):
            i = rs.req_id_to_index[req_id]
            return bool(rs.num_computed_prefill_tokens[i] < rs.prefill_len.np[i]) and not drafts.get(req_id)

        def sort_batch_req_ids(num_tokens_per_req, draft_tokens, decode_query_len):
            order = vllm_sort(num_tokens_per_req, draft_tokens, decode_query_len)
            return sorted(order, key=lambda r: prefill_without_drafts(r, draft_tokens))

        undo = patch_attr(module, "sort_batch_req_ids", sort_batch_req_ids, by="fix:v2-draftless-decode-after-prefill")
        try:
            return original(self, scheduler_output, dummy_run)
        finally:
            undo()
    return gather_batch_req_state


# -- fixes of V1's decode rows (attention/backends/utils.py:939-1015, mamba_attn.py:390-455 in 0.33.0) -------------
def _v1_runner_class():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner


def _mamba_builder_class():
    from vllm.v1.attention.backends.mamba_attn import BaseMambaAttentionMetadataBuilder

    return BaseMambaAttentionMetadataBuilder


class _Rows:
    """The persistent batch's rows as V1's reorder sees them (num_computed, prompt, scheduled tokens, drafts)."""

    def __init__(self, runner, so) -> None:
        self.ib, self.so, self.threshold = runner.input_batch, so, runner.reorder_batch_threshold

    def _at(self, i: int):
        rid = self.ib.req_ids[i]
        drafts = self.so.scheduled_spec_decode_tokens.get(rid) or ()
        return int(self.ib.num_computed_tokens_cpu[i]), int(self.ib.num_prompt_tokens[i]), \
            self.so.num_scheduled_tokens[rid], len(drafts)

    def decode(self, i: int) -> bool:
        """A row the decode kernels run right: prior state, one token, or one token plus its drafts."""
        nc, _, ns, nd = self._at(i)
        return nc > 0 and ns <= self.threshold and (ns == 1 or (nd > 0 and ns == nd + 1))

    def prefilling_short_extend(self, i: int) -> bool:
        nc, prompt, ns, _ = self._at(i)
        return 0 < nc < prompt and ns <= self.threshold and not self.decode(i)

    def padded_prompt_tail(self, i: int) -> bool:
        nc, prompt, ns, nd = self._at(i)
        return 0 < nc < prompt and nd > 0 and ns == nd + 1

    def draftless_recompute(self, i: int) -> bool:
        nc, prompt, ns, nd = self._at(i)
        return nc >= prompt and 1 < ns <= self.threshold and nd == 0

    def bubble(self, i: int, step: int, past) -> None:
        """Move row i by adjacent swaps (vLLM's InputBatch.swap_states) past the neighbours `past` accepts."""
        n = len(self.ib.req_ids)
        while 0 <= i + step < n and past(i + step):
            self.ib.swap_states(i, i + step)
            i += step


def _prompt_tails_with_decodes(original):
    """`_may_reorder_batch` then one correction: a padded prompt tail (a stateful prompt row scheduled as its last
    token plus the scheduler's placeholder drafts) moves ahead of the prompt chunks (short extends) it was ranked
    among, so the Mamba2 builder, which makes it a decode row (mamba_attn.py:426-445), finds it before the first
    prefilling row (the split, :451-455). Nothing else moves."""
    def _may_reorder_batch(self, scheduler_output):
        out = original(self, scheduler_output)
        if self.reorder_batch_threshold is None:
            return out
        rows = _Rows(self, scheduler_output)
        for i in range(len(self.input_batch.req_ids)):
            if rows.padded_prompt_tail(i):
                rows.bubble(i, -1, rows.prefilling_short_extend)
        return out
    return _may_reorder_batch


def _recomputes_behind_decodes(original):
    """`_may_reorder_batch` then one correction: a resumed request's draft-less recompute (done prefilling, 2..1+K
    tokens, ranked a decode by vLLM) moves behind the decode rows, where the builder's split, with the row counted
    as prefilling (`_draftless_extends_prefill`), leaves every decode before it. Nothing else moves."""
    def _may_reorder_batch(self, scheduler_output):
        out = original(self, scheduler_output)
        if self.reorder_batch_threshold is None:
            return out
        rows = _Rows(self, scheduler_output)
        for i in reversed(range(len(self.input_batch.req_ids))):
            if rows.draftless_recompute(i):
                rows.bubble(i, 1, rows.decode)
        return out
    return _may_reorder_batch


def _builder_rows(draft_counts: list, rule):
    """The Mamba builder's `_compute_common_metadata` with its rows' prefilling flags first changed by
    `rule(query_lens, drafts, prefilling, metadata)` (the new flags, or None: unchanged). The draft counts are the
    runner's (`num_decode_draft_tokens`, gpu_model_runner.py:2205-2235 in 0.33.0), which older releases do not
    always hand the Mamba builder: `draft_counts` holds them while the runner builds its metadata
    (`_runner_draft_counts`)."""
    def make(original):
        def _compute_common_metadata(self, common_attn_metadata, *args, **kwargs):
            drafts = kwargs.get("num_decode_draft_tokens_cpu")
            drafts = draft_counts[-1] if drafts is None and draft_counts else drafts
            prefilling = common_attn_metadata.is_prefilling
            if drafts is not None and prefilling is not None:
                import torch

                query_lens = torch.diff(common_attn_metadata.query_start_loc_cpu)
                n = len(query_lens)
                changed = rule(query_lens, drafts[:n], prefilling[:n], common_attn_metadata)
                if changed is not None:
                    prefilling = prefilling.clone()
                    prefilling[:n] = changed
                    common_attn_metadata = common_attn_metadata.replace(is_prefilling=prefilling)
            return original(self, common_attn_metadata, *args, **kwargs)
        return _compute_common_metadata
    return make


def _draftless_extends_prefill(query_lens, drafts, prefilling, metadata):
    """A draft-less multi-token row counted as prefilling: a request resumed after its prompt recomputes its last
    tokens, which only the prefill kernels advance from its running state to its last (the decode kernels write one
    state per token and the next step starts from column num_accepted - 1 = 0: the state after the first
    recomputed token)."""
    rows = (query_lens > 1) & (drafts < 0) & ~prefilling
    return prefilling | rows if bool(rows.any()) else None


def _padded_tails_decode(query_lens, drafts, prefilling, metadata):
    """0.30.0's rule (mamba_attn.py:489-510 in 0.30.0): a stateful prompt row scheduled as its last token plus the
    scheduler's placeholder drafts (query = drafts + 1) is a speculative decode: the decode kernels keep the prompt's
    state in the running column and each draft's in its own, where the prefill kernels return only the state
    after the placeholders."""
    seq_lens = getattr(metadata, "seq_lens_cpu_upper_bound", None)
    seq_lens = metadata.seq_lens_cpu if seq_lens is None else seq_lens
    n = len(query_lens)
    rows = prefilling & (seq_lens[:n] > query_lens) & (drafts >= 0) & (query_lens == drafts + 1)
    return prefilling & ~rows if bool(rows.any()) else None


def _runner_draft_counts(draft_counts: list):
    def make(original):
        def _build_attention_metadata(self, *args, **kwargs):
            draft_counts.append(self.num_decode_draft_tokens.cpu)
            try:
                return original(self, *args, **kwargs)
            finally:
                draft_counts.pop()
        return _build_attention_metadata
    return make


def _recompute_as_prefill_fix() -> Mutant:
    """Both places: the reorder ranks the recompute among the extends, the builder sends it to the prefill
    kernels."""
    def patch():
        draft_counts: list = []
        return undo_all([wrap_method(_v1_runner_class(), "_may_reorder_batch", _recomputes_behind_decodes),
                         wrap_method(_v1_runner_class(), "_build_attention_metadata", _runner_draft_counts(draft_counts)),
                         wrap_method(_mamba_builder_class(), "_compute_common_metadata",
                                     _builder_rows(draft_counts, _draftless_extends_prefill))])

    return Mutant(name="fix-recompute-as-prefill", bug_class="fix: a resumed request's draft-less recompute runs "
                  "through the prefill kernels", releases="where the issue is known", origin="hybrid-harness",
                  patch=patch, is_applied=lambda: method_wrapped(_mamba_builder_class(), "_compute_common_metadata"))


def _padded_tail_decode_fix() -> Mutant:
    def patch():
        counts: list = []
        return undo_all([wrap_method(_v1_runner_class(), "_build_attention_metadata", _runner_draft_counts(counts)),
                         wrap_method(_mamba_builder_class(), "_compute_common_metadata",
                                     _builder_rows(counts, _padded_tails_decode))])

    return Mutant(name="fix-padded-tail-decode", bug_class="fix: the Mamba builder runs a padded prompt tail through "
                  "the decode kernels (0.30.0's rule)", releases="where the issue is known", origin="hybrid-harness",
                  patch=patch, is_applied=lambda: method_wrapped(_mamba_builder_class(), "_compute_common_metadata"))


# -- fix: the accepted counts are read in the layout the copy wrote them (gpu_model_runner.py:2071-2096 in 0.33.0) --
def _copy_races_rows(runner) -> bool:
    """Async scheduling with drafts in align mode: the only path that reads the host accepted counts the previous
    step's device-to-host copy fills (non-align async skips them, :2068-2070)."""
    return (bool(getattr(runner, "use_async_scheduling", False)) and runner.num_accepted_tokens_event is not None
            and runner.cache_config.mamba_cache_mode == "align")


def _accepted_before_row_moves(original):
    def _update_states(self, scheduler_output):
        # wait for the previous step's copy before add_request / swap_states / condense move or reset rows, and keep
        # the counts in the layout it wrote (the previous batch's rows)
        if _copy_races_rows(self):
            self.num_accepted_tokens_event.synchronize()
            self._hh_prev_accepted = self.input_batch.num_accepted_tokens_cpu.copy()
        return original(self, scheduler_output)
    return _update_states


def _gather_from_copied_layout(original):
    def _prepare_inputs(self, scheduler_output, *args, **kwargs):
        saved = self.__dict__.pop("_hh_prev_accepted", None)
        if saved is not None and self.input_batch.prev_req_id_to_index:
            # the gather by prev_positions (:2078-2088) reads the previous batch's rows: give it those
            self.input_batch.num_accepted_tokens_cpu[:] = saved
        return original(self, scheduler_output, *args, **kwargs)
    return _prepare_inputs


def _copy_layout_fix() -> Mutant:
    def patch():
        return undo_all([wrap_method(_v1_runner_class(), "_update_states", _accepted_before_row_moves),
                         wrap_method(_v1_runner_class(), "_prepare_inputs", _gather_from_copied_layout)])

    return Mutant(name="fix-accepted-copy-before-row-moves", bug_class="fix: V1 waits for the accepted-count copy "
                  "before moving rows and gathers it in the layout it was written in", releases="where the issue is "
                  "known", origin="hybrid-harness", patch=patch,
                  is_applied=lambda: method_wrapped(_v1_runner_class(), "_prepare_inputs"))


def _v1_gathers_accepted_by_prev_rows() -> bool:
    try:
        return _v1_reorders() and hasattr(_v1_runner_class(), "_compute_prev_positions")
    except ImportError:
        return False


def _runner_counts_drafts() -> bool:
    try:
        return _v1_reorders() and hasattr(_v1_runner_class(), "_build_attention_metadata")
    except ImportError:
        return False


def _builder_prefills_padded_tails() -> bool:
    """V1's Mamba builder without 0.30's padded-tail rule (its `_compute_common_metadata` takes no draft counts),
    beside a runner that counts the drafts it pads."""
    from harness.vllm_adapter import parameters

    try:
        return _runner_counts_drafts() and "num_decode_draft_tokens_cpu" not in parameters(
            _mamba_builder_class()._compute_common_metadata)
    except ImportError:
        return False


def _padded_tails_reach_decodes() -> bool:
    """A padded prompt tail becomes a decode row: the builder's own rule (0.30+) or, before, the fix of
    v1-padded-prompt-tail-prefilled; either way V1's reorder ranks it."""
    return _builder_takes_draft_counts() or _builder_prefills_padded_tails()


def _builder_takes_draft_counts() -> bool:
    from harness.vllm_adapter import parameters

    try:
        return _v1_reorders() and "num_decode_draft_tokens_cpu" in parameters(
            _mamba_builder_class()._compute_common_metadata)
    except ImportError:
        return False


def _v1_reorders() -> bool:
    try:
        return hasattr(_v1_runner_class(), "_may_reorder_batch")
    except ImportError:
        return False


def _v2_gather_exists() -> bool:
    try:
        return hasattr(_v2_runner_module().GPUModelRunner, "gather_batch_req_state")
    except ImportError:
        return False


# -- fix: the align-mode early return marks the request allocated (single_type_kv_cache_manager.py:1526-1529 in
# 0.26.0 returns without it; 0.28.0 adds `self._allocated_block_reqs.add(request_id)` there, :1572-1574) -------
def _marked_on_early_return(original):
    from harness.worker import cdiv

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        # the early return's own condition (0.26.0 :1521-1528): nothing to allocate and no partial hit to copy
        early = (self.mamba_cache_mode == "align" and request_id not in self._partial_hit_reqs
                 and cdiv(num_tokens_main_model, self.block_size) + self.num_speculative_blocks
                 <= len(self.req_to_blocks[request_id]))
        returned = original(self, request_id, num_tokens, num_tokens_main_model)
        if early:
            self._allocated_block_reqs.add(request_id)
        return returned
    return allocate_new_blocks


def _early_return_unmarked() -> bool:
    """The release's align-mode early return leaves the request unmarked (0.26.0-0.27.1)."""
    import inspect

    body = inspect.getsource(_mamba_manager().allocate_new_blocks)
    early = body.split("and not has_partial_hit:", 1)
    return len(early) == 2 and early[1].lstrip().startswith("return []")


# -- fix: full-sequence admission counts a partial hit's shared tail block once (single_type_kv_cache_manager.py:
# 253-265 in 0.33.0: the touched tail block, if evictable, and the copy-on-write block that replaces it are both
# counted; the request holds only the copy, so admission asks one block more than the request ever holds) ---------
def _cow_tail_counted_once(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        n = original(self, *args, **kwargs)
        b = bound_arguments(original, self, *args, **kwargs).arguments
        hit = b["new_computed_blocks"]
        # only the admission forecast (kv_cache_manager.py:531-545, apply_admission_cap): a chunk's own allocation
        # needs the source and its copy at once, as vLLM counts them
        if (b.get("apply_admission_cap") and self._has_partial_local_hit(hit, b["num_local_computed_tokens"])
                and hit[-1].ref_cnt == 0 and not hit[-1].is_null and n <= self.block_pool.num_gpu_blocks):
            return n - 1
        return n
    return get_num_blocks_to_allocate


def _full_attention_manager():
    from harness.vllm_adapter import full_attention_manager_class

    return full_attention_manager_class()


def _admission_cap_exists() -> bool:
    """The full-sequence admission forecast (`apply_admission_cap`, with `_has_partial_local_hit`)."""
    import inspect

    cls = _full_attention_manager()
    return (hasattr(cls, "_has_partial_local_hit")
            and "apply_admission_cap" in inspect.signature(cls.get_num_blocks_to_allocate).parameters)


def _mamba_manager():
    from harness.vllm_adapter import mamba_manager_class

    return mamba_manager_class()


def _scheduler():
    from harness.vllm_adapter import scheduler_class

    return scheduler_class()


def _worker_shadow():
    from harness.worker import WorkerShadow

    return WorkerShadow


def _fix(name: str, owner, method: str, make, what: str) -> Mutant:
    return Mutant(name=name, bug_class=f"fix: {what}", releases="where the issue is known", origin="hybrid-harness",
                  patch=lambda: wrap_method(owner(), method, make), is_applied=lambda: method_wrapped(owner(), method))


def _has_checkpoints() -> bool:
    from harness.vllm_adapter import supports_prefill_checkpoints

    return supports_prefill_checkpoints()


# -- fix: a padded prompt tail that the Mamba split clips loses its padding (scheduler.py:1093-1104 in 0.30.0) -----
def _padding_dropped_when_clipped(original):
    """`_mamba_block_aligned_split` where the scheduler had padded a one-token prompt tail to 1 + K (scheduler.py:
    934-950 in 0.28.0) and the split would clip it: one token, and the request is marked so its K placeholder drafts
    are dropped before the SchedulerOutput is made (`_placeholders_dropped`), as 0.30.0 drops the padding."""
    def _mamba_block_aligned_split(self, request, num_new_tokens, *args, **kwargs):
        out = original(self, request, num_new_tokens, *args, **kwargs)
        b = bound_arguments(original, self, request, num_new_tokens, *args, **kwargs).arguments
        computed = (request.num_computed_tokens + b.get("num_new_local_computed_tokens", 0)
                    + b.get("num_external_computed_tokens", 0))
        k = getattr(self, "num_spec_tokens", 0)  # the mirror's split shim has none: its driver never pads
        padded = (k > 0 and num_new_tokens == 1 + k and request.num_tokens - computed == 1
                  and request.status.name != "RUNNING")  # the waiting queue's branch: the only one that pads
        if padded and 0 < out != 1 + k:
            self.__dict__.setdefault("_hh_unpadded", set()).add(request.request_id)
            return 1
        return out
    return _mamba_block_aligned_split


def _placeholders_dropped(original):
    def _make_cached_request_data(self, *args, **kwargs):
        # the step's spec-token dict, before the SchedulerOutput and _update_after_schedule read it
        drafts = bound_arguments(original, self, *args, **kwargs).arguments["spec_decode_tokens"]
        for rid in self.__dict__.pop("_hh_unpadded", ()):
            drafts.pop(rid, None)
        return original(self, *args, **kwargs)
    return _make_cached_request_data


def _padding_dropped_fix() -> Mutant:
    def patch():
        return undo_all([wrap_method(_scheduler(), "_mamba_block_aligned_split", _padding_dropped_when_clipped),
                         wrap_method(_scheduler(), "_make_cached_request_data", _placeholders_dropped)])

    return Mutant(name="fix-clipped-padding-dropped", bug_class="fix: a padded prompt tail the Mamba split clips is "
                  "scheduled as one token without placeholder drafts (0.30.0's rule)", releases="where the issue is "
                  "known", origin="hybrid-harness", patch=patch,
                  is_applied=lambda: method_wrapped(_scheduler(), "_make_cached_request_data"))


def _scheduler_keeps_clipped_padding() -> bool:
    """The scheduler pads prompt tails and lets the Mamba split clip them (0.30.0 resets `pad_spec_decode` after
    the split, a second assignment to False)."""
    import inspect

    try:
        source = inspect.getsource(_scheduler().schedule)
    except (ImportError, OSError, TypeError):
        return False
    return ("pad_spec_decode = True" in source and source.count("pad_spec_decode = False") == 1
            and hasattr(_scheduler(), "_make_cached_request_data"))


# -- fix: key the prompt-end tail only while it is being computed (single_type_kv_cache_manager.py:2039-2117 in
# 0.30.0; 0.32 moved the tail to P-1, which no call after the prompt reaches) ------------------------------------
def _tail_keyed_while_computing(original):
    def _cache_partial_tail_block(self, request, num_tokens, *args, **kwargs):
        # the tail's block is the running state block, which the next forward mutates in place: it may be keyed
        # at num_tokens only while no token past num_tokens is scheduled. Under async scheduling the optimistic
        # num_computed_tokens counts the steps in flight: past the tail, or at it with output in flight (the next
        # step already advancing it). Synchronous schedules never meet either condition, so they stay as they
        # are; checkpoint re-keying targets a reserved block and is left alone.
        computed = request.num_computed_tokens
        in_flight = getattr(request, "num_output_placeholders", 0) > 0
        if (request.request_id not in getattr(self, "_checkpoints", {})
                and (computed > num_tokens or (in_flight and computed >= num_tokens))):
            return None
        return original(self, request, num_tokens, *args, **kwargs)
    return _cache_partial_tail_block


def _prompt_end_tail() -> bool:
    """The prompt-end tail sits at the prompt's end P (before 0.32.0, which moved it to P - 1)."""
    from harness.vllm_adapter import _parse_version, installed_version

    return hasattr(_mamba_manager(), "_cache_partial_tail_block") and _parse_version(installed_version()) < (0, 32, 0)


# -- fix: under sparse retention 0, reserve a prefill checkpoint on every chunk, as the worker writes one on every
# chunk (kv_cache_coordinator.py:236-237 ignores prefill_end for every other retention; checkpoint.py:21-62 has no
# prefill_end) -------------------------------------------------------------------------------------------------
def _checkpoint_every_chunk(original):
    def get_num_blocks_to_allocate(self, *args, **kwargs):
        if "prefill_end" in kwargs:
            kwargs["prefill_end"] = 0
        return original(self, *args, **kwargs)
    return get_num_blocks_to_allocate


# -- fix: a preemption that frees nothing now is not made (scheduler.py:755-757 in 0.30.0, :940-942 in 0.33.0) ---
def _victim_freeable(scheduler) -> bool:
    """Whether preempting the request the running loop picks next (scheduler.py:576-601 in 0.27.1: the lowest
    priority, or the last running) gives its blocks back now. With deferred frees (a KV consumer connector under
    async scheduling or PP, :150-156) a request scheduled in the step still in flight keeps them out of the pool
    until that step's output (:2341-2354): 0.30.0's `_request_blocks_can_be_freed`."""
    running = scheduler.running
    victim = (max(running, key=lambda r: (r.priority, r.arrival_time)) if scheduler.policy.name == "PRIORITY"
              else running[-1])
    return not scheduler.defer_block_free or victim.last_sched_seq <= scheduler.processed_step_seq


def _allocated(node) -> bool:
    """The running loop's `if new_blocks is not None: break` (scheduler.py:584-586 in 0.27.1)."""
    import ast

    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "new_blocks" and isinstance(test.ops[0], ast.IsNot))


def _unfreeable_preemption_skipped_fix() -> Mutant:
    """0.30.0's rule inside the release's own allocation loop: where the next victim's free would be deferred, the
    running request waits for this step (break) instead of preempting every request down to itself."""
    def make(original):
        return recompiled_with(original, _allocated, "if not _victim_freeable(self):\n    break",
                               {"_victim_freeable": _victim_freeable})

    return Mutant(name="fix-unfreeable-preemption-skipped", bug_class="fix: the scheduler preempts no request whose "
                  "blocks a step in flight keeps (0.30.0's rule)", releases="where the issue is known",
                  origin="hybrid-harness (vLLM 0.30.0's rule)", patch=lambda: wrap_method(_scheduler(), "schedule", make),
                  is_applied=lambda: method_wrapped(_scheduler(), "schedule"))


def _preempts_unfreeable() -> bool:
    """Deferred frees (0.26.0+) without 0.30.0's check before a preemption."""
    import inspect

    try:
        source = inspect.getsource(_scheduler().schedule)
        defers = "defer_block_free" in inspect.getsource(_scheduler()._free_request_blocks)
    except (AttributeError, ImportError, OSError, TypeError):
        return False
    return defers and "_request_blocks_can_be_freed" not in source


def _coordinator():
    from harness.vllm_adapter import coordinator_class

    return coordinator_class()


# -- fix: a KV connector's local lookup reports the full-attention hit and reconciles a diverged one (0.27.1:
# kv_cache_manager.py:297-342 get_computed_blocks_for_connector, scheduler.py:743-821) ---------------------------
_SCHEDULING: list = []  # the Scheduler whose schedule() runs: the coordinator's lookup alone cannot see it


def _scheduling(original):
    def schedule(self, *args, **kwargs):
        _SCHEDULING.append(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            _SCHEDULING.pop()
    return schedule


def _looked_up(scheduler, block_hashes):
    """The request whose block hashes the scheduler's lookup was given (scheduler.py:726-727 in 0.26.0)."""
    return next(r for r in scheduler.requests.values() if r.block_hashes is block_hashes)


def _wrapped_by(cls, method: str, make) -> bool:
    """`make`'s wrapper is somewhere in cls.<method>'s stack of patches (two fixes wrap the same lookup)."""
    fn = getattr(cls, method)
    while fn is not None:
        if fn.__qualname__.startswith(make.__name__ + "."):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _lookup_reconciled(original):
    """0.26.0's connector path resumes a request at max(per_group_hits) (scheduler.py:725-742), a boundary where a
    group that hit less has no state. 0.27.1 resumes at the full-attention hit, and at the boundary every group
    agrees on (`get_computed_blocks`) where a group hit deeper, or where the hit diverged and the connector loads
    nothing past it. Departure: the 0.26 path zeroes shared_prefix_boundary after the lookup, so a reconciled hit
    pins no junction here (0.27.1 keeps get_computed_blocks' junction)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    def find_longest_cache_hit_per_group(self, block_hashes, max_length):
        computed, hits = original(self, block_hashes, max_length)
        first = self.attention_groups[0]  # full attention sorts first (kv_cache_coordinator.py:631-635)
        if not _SCHEDULING or not isinstance(first.spec, FullAttentionSpec):
            return computed, hits
        scheduler = _SCHEDULING[-1]
        full = hits[first.group_ids[0]]
        request = _looked_up(scheduler, block_hashes)
        # the harness's connector answers from its plan alone: asking it first changes nothing the scheduler's own
        # call (with the same count) does not redo
        unbacked = min(hits) < full and scheduler.connector.get_num_new_matched_tokens(request, full)[0] == 0
        if any(hit > full for hit in hits) or unbacked:
            blocks, num_computed, _ = scheduler.kv_cache_manager.get_computed_blocks(request)
            return blocks.blocks, [num_computed] * len(hits)
        return computed, hits
    return find_longest_cache_hit_per_group


def _hybrid_coordinator():
    from harness.vllm_adapter import hybrid_coordinator_class

    return hybrid_coordinator_class()


def _connector_lookup_fix(name: str, make, what: str) -> Mutant:
    """A fix of the scheduler's connector-path lookup: `make` wraps the coordinator's per-group lookup, which
    learns the running scheduler from a wrap of schedule()."""
    def patch():
        undo_schedule = wrap_method(_scheduler(), "schedule", _scheduling)
        undo_lookup = wrap_method(_hybrid_coordinator(), "find_longest_cache_hit_per_group", make)

        def undo():
            undo_lookup()
            undo_schedule()
        return undo

    return Mutant(name=name, bug_class=f"fix: {what}", releases="where the issue is known",
                  origin="hybrid-harness (vLLM 0.27.1's rule)", patch=patch,
                  is_applied=lambda: _wrapped_by(_hybrid_coordinator(), "find_longest_cache_hit_per_group", make))


# -- fix: a remote hit longer than a local sub-block tail supersedes it (0.27.1: scheduler.py:771-810,
# kv_cache_manager.py:777-794 truncate_computed_blocks) ------------------------------------------------------------
def _tail_superseded(original):
    """0.26.0 asks the connector for what lies past the whole local hit, a sub-block tail included (scheduler.py:
    766-780): the tail's copy-on-write (a private copy of the cached partial state) and the load that continues
    past it fill the same Mamba block, and the request resumes from the copy. 0.27.1 asks from the block-aligned
    hit and, where the remote hit exceeds the tail, drops the tail from the lookup so no copy is made and the load
    covers it. Applied after the lookup reconcile (KNOWN_ISSUES order), as 0.27.1 does."""
    def find_longest_cache_hit_per_group(self, block_hashes, max_length):
        computed, hits = original(self, block_hashes, max_length)
        if not _SCHEDULING:
            return computed, hits
        scheduler = _SCHEDULING[-1]
        local = max(hits)
        aligned = local - local % scheduler.block_size
        if aligned == local:
            return computed, hits
        # the harness's connector answers from its plan alone (see _lookup_reconciled)
        remote = scheduler.connector.get_num_new_matched_tokens(_looked_up(scheduler, block_hashes), aligned)[0]
        if remote is None or remote <= local - aligned:
            return computed, hits  # the tail stands, and the scheduler's own call finds nothing past it
        truncated = tuple(list(blocks[:aligned // manager.block_size])
                          for blocks, manager in zip(computed, self.single_type_managers))
        return truncated, [min(hit, aligned) for hit in hits]
    return find_longest_cache_hit_per_group


# -- fix: a truncated lookup keeps a Mamba group that ends before the endpoint (0.28.0: kv_cache_manager.py:785-803) --
def _kv_cache_manager():
    from harness.vllm_adapter import kv_cache_manager_class

    return kv_cache_manager_class()


def _short_mamba_group_kept(original):
    """0.27.1's truncate_computed_blocks asserts that every group covers the block-aligned endpoint (kv_cache_manager.
    py:790-792 in 0.27.1), but a local Mamba hit may end below it where the remote hit that supersedes the tail
    supplies the final state; 0.28.0 keeps such a Mamba group's blocks as they are. vLLM's own slicing runs
    wherever no Mamba group is short."""
    from vllm.v1.kv_cache_interface import MambaSpec

    def truncate_computed_blocks(self, blocks, num_computed_tokens):
        managers = self.coordinator.single_type_managers
        specs = [group.kv_cache_spec for group in self.kv_cache_config.kv_cache_groups]
        short = [len(group_blocks) < num_computed_tokens // manager.block_size
                 for group_blocks, manager in zip(blocks.blocks, managers)]
        if not any(is_short and isinstance(spec, MambaSpec) for is_short, spec in zip(short, specs)):
            return original(self, blocks, num_computed_tokens)
        assert not any(is_short and not isinstance(spec, MambaSpec) for is_short, spec in zip(short, specs))
        return self.create_kv_cache_blocks(tuple(list(group_blocks[:num_computed_tokens // manager.block_size])
                                                 for group_blocks, manager in zip(blocks.blocks, managers)))
    return truncate_computed_blocks


def _truncate_asserts_every_group() -> bool:
    import inspect

    truncate = getattr(_kv_cache_manager(), "truncate_computed_blocks", None)
    return truncate is not None and "MambaSpec" not in inspect.getsource(truncate)


def _connector_lookup_takes_max() -> bool:
    """The scheduler's connector path does its own per-group lookup (0.26.0); 0.27.1 moved it into
    KVCacheManager.get_computed_blocks_for_connector."""
    return "find_longest_cache_hit_per_group" in _scheduler().schedule.__code__.co_names


def _sparse_retention_checkpoints() -> bool:
    from harness.vllm_adapter import supports_retention

    return _has_checkpoints() and supports_retention()


# -- fix: with EAGLE, sparse retention also keeps the block below a shared-prefix junction (single_type_kv_cache_
# manager.py:513-520 in 0.33.0: a sibling diverging right after the junction hits one block lower) -------------------
def _eagle_junction_block_retained(original):
    def cache_blocks(self, request, num_tokens, *args, **kwargs):
        junction = getattr(request, "shared_prefix_boundary", None)
        if self.use_eagle and junction and "replay_boundaries" in kwargs:
            kwargs["replay_boundaries"] = [*kwargs["replay_boundaries"], junction - self.block_size]
        return original(self, request, num_tokens, *args, **kwargs)
    return cache_blocks


def _eagle_junction_block_unretained() -> bool:
    """Sparse retention whose `cache_blocks` keeps only the junction itself (0.30-0.32), not 0.33.0's block below
    it with EAGLE."""
    import inspect

    from harness.vllm_adapter import parameters, supports_retention

    try:
        base = inspect.getsource(_mamba_manager().__mro__[1].cache_blocks)
        return (supports_retention() and "replay_boundaries" in parameters(_mamba_manager().cache_blocks)
                and "shared_prefix_boundary - self.block_size" not in base)
    except (ImportError, OSError, TypeError):
        return False


# -- fix: 0.26.0's async discard counts frames: one frame in flight per step without pipeline parallelism, so the
# first stale frame drains the counter (async_scheduler.py:53-59 drops one frame per call; scheduler.py:2353 set it
# to num_output_placeholders, 1 + K tokens per step) -------------------------------------------------------------
def _discard_one_frame(original):
    def _update_request_with_output(self, request, new_token_ids):
        if getattr(request, "async_tokens_to_discard", 0) > 0:
            request.async_tokens_to_discard = 0
            return [], False
        return original(self, request, new_token_ids)
    return _update_request_with_output


def _async_scheduler():
    from harness.vllm_adapter import async_scheduler_class

    return async_scheduler_class()


def _discards_by_count() -> bool:
    """0.26.0: a force-preempted request's stale async output is dropped by a counter on the Request (later
    releases drop it by step, `drop_stale_output`)."""
    from harness.vllm_adapter import parameters

    return ("drop_stale_output" not in parameters(_scheduler()._preempt_request)
            and "async_tokens_to_discard" in _async_scheduler()._update_request_with_output.__code__.co_names)


# -- fixes: a step without drafts builds the spec-decode arguments as 0.32+ do (every step where drafting is
# configured, gpu_model_runner.py:2188 and :4093 in 0.33.0; draftless decodes past the prompt count 0 drafts,
# :2215-2227); for GatedDeltaNet also a batch whose speculative rows all drafted nothing keeps the speculative path
# (gdn_attn.py:340-352) --------------------------------------------------------------------------------------------
def _draftless_steps_speculative(gdn: bool):
    """make(original) for `_build_attention_metadata`, on GatedDeltaNet models only (`gdn`) or on every other
    model, so the two issues' fixes never overlap."""
    import numpy as np

    def make(original):
        def _build_attention_metadata(self, *args, **kwargs):
            call = bound_arguments(original, self, *args, **kwargs)
            if self.speculative_config is not None and _gdn_only(self) == gdn:
                n, drafts = call.arguments["num_reqs"], self.num_decode_draft_tokens.np
                if not call.arguments["use_spec_decode"]:
                    drafts[:n] = -1  # _prepare_inputs writes them only in a step with drafts scheduled
                query = np.diff(self.query_start_loc.np[:n + 1])
                past_prompt = self.input_batch.num_computed_tokens_cpu[:n] >= self.input_batch.num_prompt_tokens[:n]
                rows = drafts[:n]
                rows[(rows < 0) & past_prompt & (query == 1)] = 0
                self.num_decode_draft_tokens.copy_to_gpu()
                call.arguments["use_spec_decode"] = True
            return original(*call.args, **call.kwargs)
        return _build_attention_metadata
    return make


def _spec_arguments_every_step_fix() -> Mutant:
    def owner():
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        return GPUModelRunner

    return _fix("fix-spec-arguments-every-step", owner, "_build_attention_metadata",
                _draftless_steps_speculative(gdn=False), "the metadata builders get the spec-decode arguments in "
                "every step where drafting is configured (0.32's rule)")


def _spec_arguments_per_step() -> bool:
    from harness.engine.runner_v1 import _spec_metadata_per_step

    try:
        return _spec_metadata_per_step()
    except ImportError:  # no V1 GPU runner module here
        return False


def _gdn_only(runner) -> bool:
    """Every Mamba-like group of the runner is GatedDeltaNet's: the fix changes no other model's metadata."""
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import MambaSpec

    builders = [b for groups in runner.attn_groups for group in groups for b in group.metadata_builders
                if isinstance(b.kv_cache_spec, MambaSpec)]
    return bool(builders) and all(isinstance(b, GDNAttentionMetadataBuilder) for b in builders)


def _gdn_draftless_fix() -> Mutant:
    from harness.mutants.gdn import build_argument_changed, gdn_builder_class, zero_drafts_as

    def patch():
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        undo_runner = wrap_method(GPUModelRunner, "_build_attention_metadata", _draftless_steps_speculative(gdn=True))
        # only the >= 0 mask and the all-zero test read the builder's draft counts: a zero read as 1 keeps a batch of
        # draftless speculative rows on the speculative path
        undo_builder = wrap_method(gdn_builder_class(), "build",
                                   build_argument_changed("num_decode_draft_tokens_cpu", zero_drafts_as(1)))

        def undo():
            undo_builder()
            undo_runner()
        return undo

    return Mutant(name="fix-gdn-draftless-decode-speculative", bug_class="fix: a GatedDeltaNet decode without drafts "
                  "runs the speculative path at its accepted offset", releases="where the issue is known",
                  origin="hybrid-harness (vLLM 0.33.0's rule)", patch=patch,
                  is_applied=lambda: method_wrapped(gdn_builder_class(), "build"))


def _gdn_without_zero_draft_rows() -> bool:
    """The release has vLLM's GatedDeltaNet builder but not 0.33.0's zero-draft decode rows."""
    import inspect

    try:
        from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder  # noqa: F401
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:
        return False
    return "zero_draft_decode_mask" not in inspect.getsource(GPUModelRunner._prepare_inputs)


KNOWN_ISSUES = (
    KnownIssue(
        id="seed-external-hit-unmarked",
        summary="after an external (connector) hit whose first continuation stays inside one Mamba block, "
                "MambaManager.allocate_new_blocks takes its align-mode early return (nothing to allocate) without "
                "adding the request to _allocated_block_reqs; the next partial-tail copy-on-write then takes the "
                "first-allocation branch and replaces the block in the core's table while the worker appends the "
                "returned id: core and worker disagree on the live state column and the request continues from "
                "another state (the README's seed bug; users see repeated text)",
        releases="0.26.0-0.27.1; 0.28.0 marks the request on the early return (single_type_kv_cache_manager.py:"
                 "1572-1574 in 0.28.0, vLLM PR #51766)",
        repro="scenarios/seed-external-hit-same-block.json",
        reached_by="prefix caching in Mamba align mode with a KV connector whose hit leaves the request's first "
                   "continuation inside one Mamba block, then a partial-tail hit of another request on that prefix "
                   "(the repro: a 15-token prompt with a 10-token async external hit, chunks of 4 and 1, 8-token "
                   "Mamba blocks; b shares 14 tokens); any model runner",
        fix=_fix("fix-marked-on-early-return", _mamba_manager, "allocate_new_blocks", _marked_on_early_return,
                 "the align-mode early return marks the request allocated (0.28.0's line)"),
        applies=_early_return_unmarked,
    ),
    KnownIssue(
        id="sync-external-admission-undercount",
        summary="MambaManager.get_num_blocks_to_allocate caps new blocks at 1 and does not count the external "
                "block of a sync connector hit whose continuation crosses a Mamba block; allocate_slots admits the "
                "request and get_new_blocks raises ValueError instead of returning None",
        releases="seen on 0.26.0-0.33.0",
        repro="scenarios/sync-external-admission-undercount.json",
        reached_by="a KV connector returning a sync hit (load_async=False) that ends on a Mamba block boundary, the "
                   "continuation crossing into the next block, under pool pressure; with vLLM's default full-sequence "
                   "admission (scheduler_reserve_full_isl) only in its prompt-final-chunk form (repro: a 65-token "
                   "prompt, a 64-token hit, 1 new token, 6 free blocks; the mirrored and the engine tier agree)",
        fix=_fix("fix-count-external-block", _mamba_manager, "get_num_blocks_to_allocate", _count_external_block,
                 "admission counts the block an external hit takes"),
    ),
    KnownIssue(
        id="admission-partial-hit-cow-counted-twice",
        summary="full-sequence admission (scheduler_reserve_full_isl, on by default) counts a partial local prefix "
                "hit's shared attention tail block, when evictable, and the copy-on-write block that replaces it "
                "(single_type_kv_cache_manager.py:253-265): one block more than the request ever holds. On a pool "
                "vLLM's own startup check accepts for max_model_len, a request that fits is never admitted and the "
                "engine hangs (liveness:stuck)",
        releases="seen on 0.33.0 (the count is in 0.26.0-0.33.0; with a prefill checkpoint block the request "
                 "reaches the pool's edge)",
        repro="scenarios/admission-partial-hit-cow-counted-twice.json",
        reached_by="prefix caching in align mode with partial-tail hashes (hash block below the attention block), a "
                   "pool sized to max_model_len (vLLM's check_enough_kv_cache_memory accepts 32 blocks of 8 for "
                   "max_model_len 224: the repro; an auto-fitted max_model_len does the same) and a long prompt "
                   "sharing a partial block with a finished request (the repro: 209 tokens sharing 12, max_tokens 8; "
                   "the mirrored and the engine tier agree; without the admission forecast it runs in 31 blocks)",
        fix=_fix("fix-cow-tail-counted-once", _full_attention_manager, "get_num_blocks_to_allocate",
                 _cow_tail_counted_once, "the admission forecast counts a partial hit's tail block and its copy once"),
        applies=_admission_cap_exists,
        repro_from=(0, 33, 0),
    ),
    KnownIssue(
        id="checkpoint-midblock-start",
        summary="with Mamba prefill checkpoint blocks, _mamba_block_aligned_split drops the stop at the next block "
                "boundary when use_internal_checkpoint holds: a prompt-final chunk starting mid-block runs past the "
                "boundary and cache_blocks keys its start block under the boundary's hash though no forward wrote "
                "that state",
        releases="seen on 0.33.0 (prefill checkpoint blocks exist since 0.33.0)",
        repro="scenarios/checkpoint-midblock-start.json",
        reached_by="Mamba2 defaults (num_prefill_checkpoint_blocks=1), prefix caching in align mode, a sub-block "
                   "partial hit or an external hit followed by a prompt-final chunk",
        fix=_fix("fix-midblock-stop", _scheduler, "_mamba_block_aligned_split",
                 _stop_at_next_block_boundary(_checkpoint_prompt_final_chunk),
                 "a prompt-final chunk starting mid-block stops at the next block boundary (checkpoint geometries)"),
        applies=_has_checkpoints,
    ),
    KnownIssue(
        id="sparse-retention-checkpoint-unreserved",
        summary="under sparse prefix-cache retention 0 (CacheConfig.prefix_cache_retention_interval, 0.33.0's "
                "default) MambaManager reserves a prefill checkpoint block only on the chunk that reaches the "
                "prefill end (kv_cache_coordinator.py:236-237 passes prefill_end only for interval 0), but the Mamba "
                "metadata builder computes a checkpoint for every prefill chunk (checkpoint.py:21-62, called by "
                "mamba2_attn.py:198 with every prefill row), so the worker writes a checkpoint state into block-table "
                "column cdiv(seq_len, block) - 2 where the core reserved none: the null block, or after a speculative "
                "block's relocation a stale id, the request's relocated scratch block",
        releases="seen on 0.33.0 (sparse retention and prefill checkpoint blocks both arrive in 0.33.0)",
        repro="scenarios/sparse-retention-checkpoint-unreserved.json",
        reached_by="vLLM 0.33.0's defaults for a Mamba2 model with prefix caching in align mode "
                   "(prefix_cache_retention_interval 0, num_prefill_checkpoint_blocks 1) and speculative decoding "
                   "(K >= 1): a prompt prefilled in several chunks (a token budget below the prompt, or chunked "
                   "prefill's long_prefill_token_threshold) whose spec blocks are relocated between chunks",
        fix=_fix("fix-checkpoint-every-chunk", _coordinator, "get_num_blocks_to_allocate", _checkpoint_every_chunk,
                 "under sparse retention 0 MambaManager reserves a prefill checkpoint on every chunk, where the "
                 "worker writes one"),
        applies=_sparse_retention_checkpoints,
    ),
    KnownIssue(
        id="v026-discard-counts-tokens-as-frames",
        summary="reset_prefix_cache(reset_running_requests=True) sets a preempted request's async_tokens_to_discard "
                "to num_output_placeholders, which counts tokens (1 + K per step in flight, "
                "async_scheduler.py:36-41), but AsyncScheduler._update_request_with_output drops one output frame "
                "per call (:53-59): with K >= 1 it drops the stale frame and then the resumed request's own outputs, "
                "whose tokens never arrive, so the request is never scheduled again (vLLM hangs)",
        releases="seen on 0.26.0 (0.27.0 on drop stale output by step: `drop_stale_output`)",
        repro="scenarios/v026-discard-counts-tokens-as-frames.json",
        reached_by="async scheduling with speculative decoding (K >= 1; V1 with EAGLE drafts, where vLLM runs async) "
                   "and reset_prefix_cache(reset_running_requests=True) while a request has a step in flight (the "
                   "harness's forced-preemption event)",
        fix=_fix("fix-discard-one-frame", _async_scheduler, "_update_request_with_output", _discard_one_frame,
                 "the first stale frame drains the discard counter (one frame in flight per step)"),
        applies=_discards_by_count,
        runners=("v1", "v2"),  # scheduler code reached only under async scheduling (the engine tier's workers)
    ),
    KnownIssue(  # before the connector-lookup fixes, whose wrap of schedule() must sit above the recompiled one
        id="deferred-free-preemption-livelock",
        summary="with deferred block frees (a KV consumer connector under async scheduling, scheduler.py:150-156 in "
                "0.27.1) a running request that needs a block preempts the last running request, whose blocks the "
                "step in flight keeps out of the pool (:2341-2354), so nothing is freed and the loop goes on down to "
                "the request itself (:584-626): every running request is preempted, all are readmitted in the next "
                "step from their prefix hits, fill the pool again, and the cycle repeats without progress "
                "(liveness:livelock: vLLM hangs)",
        releases="seen on 0.27.1 and 0.28.0 (the loop is in 0.26.0-0.29.x; 0.30.0 breaks before a preemption that "
                 "frees nothing: scheduler.py:755-757 in 0.30.0)",
        repro="scenarios/deferred-free-preemption-livelock.json",
        reached_by="a KV connector in a consumer role (kv_both or kv_consumer) with async scheduling (V1 with EAGLE "
                   "drafts, where vLLM runs async) and prefix caching: two requests readmitted together from prefix "
                   "hits that fill the pool; the repro: a 49-token prompt beside two 3-token prompts with the same "
                   "first tokens, one with a 2-token async external hit, 24 blocks of 4, K = 2",
        fix=_unfreeable_preemption_skipped_fix(),
        applies=_preempts_unfreeable,
        runners=("v1", "v2"),  # scheduler code reached only under async scheduling (the engine tier's workers)
        repro_from=(0, 27, 0),  # 0.26.0 schedules the repro otherwise
    ),
    KnownIssue(
        id="connector-lookup-deepest-group-hit",
        summary="with a KV connector configured on a hybrid model, the scheduler's local prefix lookup resumes a "
                "request at the deepest group's hit, max(per_group_hits) (scheduler.py:725-745 in 0.26.0): where a "
                "group hit less (a Mamba state that was never cached at the full-attention boundary, or a Mamba hit "
                "deeper than full attention's), that group has no state at the resume boundary, and the request "
                "continues from the zero state, from a block nobody wrote, or trips _apply_cow's assertions",
        releases="seen on 0.26.0 (engine tier, every runner: vLLM's Scheduler); 0.27.1 reports the full-attention "
                 "hit and reconciles a diverged one (kv_cache_manager.py:297-342 and scheduler.py:743-821 in 0.27.1, "
                 "vLLM #46453); release groups g06, g07, g09 and g13 (mode all)",
        repro="scenarios/connector-lookup-deepest-group-hit.json",
        reached_by="any KV connector (kv_transfer_config, e.g. kv_role kv_both) with prefix caching in Mamba align "
                   "mode, no external hit needed: a request whose local prefix hit differs between groups (the repro: "
                   "b's 21-token prompt is a's prefix, a ran its 32 tokens in one chunk, so full attention hits 16 "
                   "tokens and Mamba none)",
        fix=_connector_lookup_fix("fix-connector-lookup-reconciled", _lookup_reconciled, "a KV connector's local "
                                  "prefix lookup resumes at the full-attention hit, reconciled where the groups' "
                                  "hits diverge"),
        applies=_connector_lookup_takes_max,
        engine_only=True,
    ),
    KnownIssue(
        id="connector-load-over-partial-tail",
        summary="with a KV connector configured, the scheduler asks the connector for what lies past the whole local "
                "prefix hit, a sub-block partial tail included (scheduler.py:764-780 in 0.26.0): a remote hit longer "
                "than the tail is loaded into the same Mamba block that the tail's copy-on-write fills with the "
                "cached partial state, and the request resumes at the remote hit's end from the shorter local state",
        releases="seen on 0.26.0 (engine tier, every runner: vLLM's Scheduler); 0.27.1 asks from the block-aligned "
                 "local hit and drops the tail where the remote hit exceeds it (scheduler.py:771-810 and "
                 "kv_cache_manager.py:777-794 truncate_computed_blocks in 0.27.1)",
        repro="scenarios/connector-load-over-partial-tail.json",
        reached_by="a KV connector with a remote hit, prefix caching in Mamba align mode with partial-tail hashes "
                   "(a prefix-match unit below the block), and a local hit ending mid-block below the remote one (the "
                   "repro: a finished 24-token prompt, b sharing it with a 32-token sync hit, 16-token blocks, "
                   "8-token hash units; an async hit shows it too; found on Falcon-H1's geometry)",
        fix=_connector_lookup_fix("fix-remote-hit-supersedes-tail", _tail_superseded, "a remote hit longer than a "
                                  "local sub-block tail supersedes it (the connector is asked from the block-aligned "
                                  "local hit)"),
        applies=_connector_lookup_takes_max,
        engine_only=True,
    ),
    KnownIssue(
        id="truncated-lookup-asserts-short-mamba-hit",
        summary="where a remote hit supersedes a local sub-block tail, the scheduler truncates the lookup at the "
                "block-aligned hit (scheduler.py:796-803 in 0.27.1), and truncate_computed_blocks asserts that every "
                "group covers it (kv_cache_manager.py:790-792); a local Mamba hit that ends below that boundary (the "
                "remote hit supplies the final state) raises AssertionError out of schedule(): the engine core dies",
        releases="seen on 0.27.1 (its truncation arrived in 0.27.1, with the fix of connector-load-over-partial-tail); "
                 "0.28.0 keeps a short Mamba group's blocks (kv_cache_manager.py:785-803 in 0.28.0); release group g10",
        repro="scenarios/truncated-lookup-asserts-short-mamba-hit.json",
        reached_by="a KV connector with a remote hit longer than a local sub-block tail, prefix caching in Mamba "
                   "align mode with partial-tail hashes, and a local Mamba hit below the full-attention one (the "
                   "repro: d shares 41 tokens with b, whose 31-token async hit was loaded; 16-token blocks, 8-token "
                   "hash units, K = 1 with EAGLE's block drop)",
        fix=_fix("fix-short-mamba-group-kept", _kv_cache_manager, "truncate_computed_blocks", _short_mamba_group_kept,
                 "a truncated lookup keeps a Mamba group that ends before the endpoint"),
        applies=_truncate_asserts_every_group,
        engine_only=True,
    ),
    KnownIssue(
        id="eagle-midblock-stop-dropped",
        summary="the Mamba block-aligned split keeps a mid-block chunk's stop at the next block boundary only while "
                "that boundary is <= last_cache_position (scheduler.py:400-406 in 0.26.0), which an EAGLE drafter "
                "backs off one block (:383-385): a chunk resumed mid-block in the prompt's last block runs past the "
                "boundary, and cache_blocks keys the boundary's block for a state no forward wrote there (the state "
                "at the chunk's start)",
        releases="seen on 0.26.0; 0.27.1 stops every chunk starting mid-block at the next boundary (scheduler.py:"
                 "418-420 in 0.27.1); release group g08",
        repro="scenarios/eagle-midblock-stop-dropped.json",
        reached_by="an EAGLE/MTP drafter (use_eagle) with prefix caching in Mamba align mode and a KV connector or a "
                   "sub-block prefix hit that leaves the prompt resuming mid-block in its last block (the repro: a "
                   "49-token prompt, an async external hit of 47 tokens, 16-token blocks, K = 1)",
        fix=_fix("fix-midblock-stop-every-chunk", _scheduler, "_mamba_block_aligned_split",
                 _stop_at_next_block_boundary(), "a chunk starting mid-block stops at the next block boundary"),
        applies=_split_drops_stop_past_cacheable_range,
    ),
    KnownIssue(
        id="v1-draftless-step-drops-accepted-offset",
        summary="with speculative decoding, a step in which no request got drafts builds the attention metadata "
                "without the spec-decode arguments (use_spec_decode = len(scheduled_spec_decode_tokens) > 0, "
                "gpu_model_runner.py:4384 in 0.30.0), so the Mamba2 builder gets no accepted counts and the decode "
                "kernels read the state at the row's first speculative column, while the previous step's accepted "
                "state sits at column accepted - 1: the request continues from the state after the first token of "
                "its previous step",
        releases="seen on 0.26.0-0.28.0, 0.30.0 and 0.31.0 with vLLM's own V1 runner; 0.32.0 passes the arguments "
                 "whenever drafting is configured (gpu_model_runner.py:4093 in 0.33.0)",
        repro="scenarios/v1-draftless-step-drops-accepted-offset.json",
        reached_by="a Mamba2 hybrid (or Mamba1/ShortConv where drafts run) with n-gram speculative decoding (K >= 1) "
                   "on the V1 model runner (vLLM's default for hybrid models before 0.29; VLLM_USE_V2_MODEL_RUNNER=0 "
                   "after): a step accepts a draft, the next step drafts nothing for any request in the batch (the "
                   "n-gram drafter finds no match); the repro: one 2-token prompt, K = 1",
        fix=_spec_arguments_every_step_fix(),
        applies=_spec_arguments_per_step,
        runners=("v1",),
    ),
    KnownIssue(
        id="gdn-draftless-decode-first-column",
        summary="with speculative decoding, a GatedDeltaNet decode step that got no drafts runs GDN's plain decode "
                "path, which reads the state at the first speculative column (num_decode_draft_tokens -1, "
                "gpu_model_runner.py:2261-2275 in 0.30.0; in a step with no drafts at all the builders get no "
                "spec-decode arguments, :4384, and a batch whose speculative rows all drafted nothing drops the "
                "speculative path, gdn_attn.py:234-243), while the last step's accepted state sits at column "
                "accepted - 1: the request continues from the state after the first token of its previous step",
        releases="seen on 0.26.0-0.28.0, 0.30.0 and 0.31.0 with vLLM's own V1 runner; 0.32.0 and 0.33.0 count such "
                 "rows as speculative rows with zero drafts (gpu_model_runner.py:2215-2227 in 0.33.0) and keep their "
                 "path (gdn_attn.py:340-352)",
        repro="scenarios/gdn-draftless-decode-first-column.json",
        reached_by="a GatedDeltaNet model (Qwen3-Next) with n-gram speculative decoding (K >= 1) on the V1 model "
                   "runner, any Mamba cache mode: a step accepts a draft, the next drafts nothing (the n-gram "
                   "drafter finds no match); the repro: one 2-token prompt, K = 1",
        fix=_gdn_draftless_fix(),
        applies=_gdn_without_zero_draft_rows,
        runners=("v1",),
    ),
    KnownIssue(
        id="v1-readd-resets-num-accepted",
        summary="with spec decode, a running request left unscheduled for a step is re-added to the V1 persistent "
                "batch with num_accepted_tokens reset to 1 (gpu_input_batch.py:479) while its running SSM state "
                "sits at column curr + accepted - 1: the next step starts from the state after the first token "
                "of the previous step",
        releases="seen on 0.33.0 (V1 GPUModelRunner, confirmed on vLLM's own V1 runner by the engine tier with "
                 "--runner v1; V2 resets only new/resumed rows)",
        repro="scenarios/spec-unscheduled-accepted-reset.json",
        reached_by="the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0) with speculative decoding and a token budget "
                   "that leaves a running request unscheduled for a step",
        fix=_keep_accepted_fix(),
        runners=("v1", "mirror"),  # V2 keeps the count per request slot (model_states/mamba_hybrid.py:112-115)
        # 0.26's chunk rule schedules nothing under the repro's 3-token budget; 0.27-0.31: the repro's draftless step
        # shows v1-draftless-step-drops-accepted-offset first
        repro_from=(0, 32, 0),
    ),
    KnownIssue(
        id="v2-draftless-decode-after-prefill",
        summary="V2's sort_batch_req_ids ranks a prefill chunk of exactly 1+K tokens ahead of a decode row without "
                "drafts; the Mamba metadata builder splits decodes from prefills at the first prefilling row, so the "
                "decode row runs through the prefill kernels, which start from its running column and ignore its "
                "accepted count: after an accepted draft the request continues from a state missing the accepted "
                "tokens",
        releases="seen on 0.32.0 and 0.33.0 with vLLM's own V2 runner (the same sort and split in 0.29.0-0.31.x, by "
                 "reading: the harness's V2 worker follows 0.32 on); "
                 "V1 reorders decodes first (utils.py reorder_batch_to_split_decodes_and_prefills) and is clean",
        repro="scenarios/v2-draftless-decode-after-prefill.json",
        reached_by="the V2 model runner (vLLM's default for hybrid models with speculative decoding) in align mode, "
                   "K >= 1: a request whose previous step accepted a draft is scheduled without drafts (trimmed by "
                   "max_model_len, or by the token budget under load) in the same step as a prefill chunk of exactly "
                   "1+K tokens (e.g. a new (1+K)-token prompt)",
        fix=_fix("fix-decode-rows-lead", lambda: _v2_runner_module().GPUModelRunner, "gather_batch_req_state",
                 _decode_rows_lead, "V2 orders decode rows ahead of prefilling rows without drafts"),
        applies=_v2_gather_exists,
        runners=("v2",),
        repro_from=(0, 32, 0),  # the V2 worker follows vLLM's V2 runner from 0.32.0 (harness/engine/workers.py)
    ),
    KnownIssue(
        id="async-prompt-tail-rekeyed",
        summary="MambaManager._cache_partial_tail_block keys a prompt's tail (a hash unit finer than the block) on "
                "the running Mamba block whenever cache_blocks reaches the prompt's end, with no bound on the "
                "request having computed it; under async scheduling cache_blocks reaches it again after the tail "
                "was CoW-copied (allocate_slots' min(num_computed + new, num_tokens) before the sampled token is "
                "appended; AsyncScheduler's num_computed_tokens - num_output_placeholders), so the running block is "
                "re-keyed after the next forward advanced it, and copied a second time into a block keyed with a "
                "state one token too far: a later request sharing the prompt starts from it",
        releases="seen on 0.26.0-0.31.x (provenance on 0.26 and 0.29-0.31; cache integrity on 0.26-0.28); 0.32.0 "
                 "keys the tail at P - 1 (get_mamba_prefill_checkpoint_position), which no later call reaches",
        repro="scenarios/async-prompt-tail-rekeyed.json",
        reached_by="async scheduling (vLLM's default decision) with prefix caching in Mamba align mode and a "
                   "prefix_match_unit smaller than the block; any model runner (the scheduler's code): V1 is the "
                   "default for hybrid models on 0.28, VLLM_USE_V2_MODEL_RUNNER=0 on 0.29-0.31",
        fix=_fix("fix-tail-keyed-while-computing", _mamba_manager, "_cache_partial_tail_block",
                 _tail_keyed_while_computing, "the prompt-end tail is keyed only while no token past it is "
                 "scheduled"),
        applies=_prompt_end_tail,
        # scheduler code, but reached only under async scheduling: the engine tier's V1/V2 workers follow it,
        # the mirrored tiers are synchronous
        runners=("v1", "v2"),
    ),
    KnownIssue(
        id="v1-resumed-recompute-as-decode",
        summary="with spec decode, a request resumed after its prompt that recomputes 2..1+K tokens is a decode row "
                "to V1's batch reorder and the Mamba2 metadata builder (done prefilling, query <= 1+K): the decode "
                "kernels write one state per token, but the runner's accepted count is the sampled count (1, no "
                "drafts), so the next step starts from the state after the first recomputed token",
        releases="seen on 0.33.0 with vLLM's own V1 runner and its Mamba2 metadata builder (engine tier, --runner v1); "
                 "on 0.26.0-0.27.1 the repro stops first at those releases' own spec padding (the resumed request is "
                 "scheduled with a stale draft)",
        repro="scenarios/v1-resumed-recompute-as-decode.json",
        reached_by="the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0) with speculative decoding (K >= 1), prefix "
                   "caching in align mode, and a preemption (pool pressure) of a request that has generated output, "
                   "resumed with 2..1+K tokens left to recompute",
        fix=_recompute_as_prefill_fix(),
        applies=_runner_counts_drafts,
        runners=("v1",),
        repro_from=(0, 32, 0),  # before, its draftless step builds no accepted counts (v1-draftless-step-...)
    ),
    KnownIssue(
        id="v1-async-accepted-copy-race",
        summary="under async scheduling with spec decode in align mode, V1's host accepted counts "
                "(input_batch.num_accepted_tokens_cpu) are written both by the previous step's in-flight "
                "device-to-host copy, in the previous batch's row layout, and by the next step's _update_states, in "
                "the new layout (add_request resets a re-added row to 1, swap_states and condense move rows); "
                "_prepare_inputs waits on the copy only after those moves and gathers by the previous layout (or, "
                "with no previous-row map, reads the buffer as it is). If the copy lands before the moves, a request "
                "whose row was swapped takes another row's count; if it lands after a re-added row was reset, that "
                "row takes the previous step's count. Either way the Mamba kernels or the align pre-copy start from "
                "a state one or more tokens off",
        releases="seen on 0.26.0, 0.28.0, 0.30.0 and 0.33.0 with vLLM's own V1 runner (engine tier, --runner v1; "
                 "copy timing early and late): known check reproduces it and its fix removes it on each",
        repro="scenarios/v1-async-accepted-copy-race.json",
        reached_by="the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0) with EAGLE/MTP drafts (K >= 1) under async "
                   "scheduling (vLLM's default for it) in align mode, and request churn: a request finishes, a new "
                   "one takes its row and the decode-first reorder swaps a decoding request ahead of it (the repro: "
                   "three requests, no preemption, no connector); also a forced preemption "
                   "(reset_prefix_cache(reset_running_requests=True)) next to a decoding request, and with "
                   "--copy-timing late the force-resumed row itself "
                   "(scenarios/findings/v1-async-resume-accepted-count-clobbered.json)",
        fix=_copy_layout_fix(),
        applies=_v1_gathers_accepted_by_prev_rows,
        runners=("v1",),
    ),
    KnownIssue(
        id="eagle-junction-block-not-retained",
        summary="under sparse prefix-cache retention with an EAGLE drafter, cache_blocks retains the Mamba state at a "
                "shared-prefix junction (request.shared_prefix_boundary, single_type_kv_cache_manager.py:498-503 in "
                "0.30.0) but not the block below it, where a sibling diverging right after the junction hits (EAGLE's "
                "block drop matches one block past the candidate and drops it): the state is written and never keyed, "
                "so the sibling, or the request itself resumed after a preemption, recomputes the prefix",
        releases="seen on 0.30.0 and 0.32.0 (allocator code: every tier and runner); 0.33.0 retains "
                 "the junction minus one block with EAGLE (single_type_kv_cache_manager.py:513-520 in 0.33.0)",
        repro="scenarios/eagle-junction-block-not-retained.json",
        reached_by="sparse prefix-cache retention (CacheConfig.prefix_cache_retention_interval, default 0) with an "
                   "EAGLE/MTP drafter in Mamba align mode, prefix caching on, and a request whose lookup finds a "
                   "shared-prefix junction (the repro: one 65-token prompt, 16-token blocks and budget, K = 1 with "
                   "EAGLE's block drop, preempted after three chunks and resumed; found on Falcon-H1's geometry)",
        fix=_fix("fix-eagle-junction-block-retained", _mamba_manager, "cache_blocks", _eagle_junction_block_retained,
                 "with EAGLE, sparse retention keeps the block below a shared-prefix junction"),
        applies=_eagle_junction_block_unretained,
    ),
    KnownIssue(
        id="spec-padding-clipped-by-mamba-split",
        summary="with speculative decoding the scheduler pads a one-token prompt tail to 1 + K tokens with K "
                "placeholder drafts (scheduler.py:934-950 in 0.28.0), then the Mamba block-aligned split clips the "
                "chunk (:970-978) and keeps the placeholders (:1137-1140): the SchedulerOutput schedules as many "
                "spec-decode tokens as tokens, leaving no row for the sampled token, which no model runner can "
                "execute",
        releases="seen on 0.26.0-0.28.0 (release groups g02 on 0.27.1-0.28.0 and g03 on 0.26.0); 0.30.0 drops "
                 "the padding when the split clips it (scheduler.py:1093-1104 in 0.30.0)",
        repro="scenarios/spec-padding-clipped-by-mamba-split.json",
        reached_by="speculative decoding (K >= 1) with prefix caching in Mamba align mode and a KV connector: an "
                   "external hit leaves a one-token prompt tail, admitted beside running decodes where the split stops "
                   "the chunk early (a shared-prefix junction or tail-hash boundary); any model runner (the "
                   "scheduler's output)",
        fix=_padding_dropped_fix(),
        applies=_scheduler_keeps_clipped_padding,
        # 0.26's split does not clip the repro's tail (group g03's sync-hit form shows it there, the fix removes it)
        repro_from=(0, 27, 0),
        engine_only=True,  # the padding is the Scheduler's (scheduler.py:934-950); the mirrored driver never pads
    ),
    KnownIssue(
        id="v1-padded-prompt-tail-prefilled",
        summary="with speculative decoding the scheduler pads a stateful request's one-token prompt tail with K "
                "placeholder drafts when it is admitted beside running decodes (scheduler.py:934-950 in 0.28.0: the "
                "uniform 1+K decode graph), but V1's Mamba metadata builder turns only one-token prefills into decode "
                "rows (mamba_attn.py:462-472 in 0.28.0), so the padded tail runs through the prefill kernels, whose "
                "final state includes the unverified placeholder draft; that state lands in the running block, which "
                "the prefix cache keys for the prompt: a later request hitting the prompt starts from a state with a "
                "token no request has",
        releases="seen on 0.26.0-0.28.0 with vLLM's own V1 runner (engine tier, --runner v1; release groups g01 "
                 "and g16); 0.30.0's builder makes such rows speculative decodes (mamba_attn.py:489-510 in 0.30.0)",
        repro="scenarios/v1-padded-prompt-tail-prefilled.json",
        reached_by="the V1 model runner (vLLM's default for hybrid models before 0.29) with n-gram speculative "
                   "decoding (K >= 1), prefix caching in align mode and a KV connector: an external hit leaves a "
                   "one-token prompt tail, admitted in a step with a running decode; the repro: a 2-token prompt "
                   "beside a 2-token prompt with a 1-token async external hit, K = 1",
        fix=_padded_tail_decode_fix(),
        applies=_builder_prefills_padded_tails,
        runners=("v1",),
    ),
    KnownIssue(
        id="v1-padded-prompt-tail-after-short-extend",
        summary="V1's decode-first batch reorder ranks a padded prompt tail (the last prompt token of a stateful "
                "request plus the scheduler's placeholder drafts) among the short extends; the Mamba2 builder then "
                "makes it a decode row, and when a real short extend (a prompt chunk of <= 1+K tokens) precedes it "
                "the split at the first prefilling row sends it to the prefill kernels, whose final state includes "
                "the unverified placeholder draft",
        releases="seen on 0.33.0 with vLLM's own V1 runner and its Mamba2 metadata builder (engine tier, --runner v1)",
        repro="scenarios/v1-padded-prompt-tail-after-short-extend.json",
        reached_by="the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0) with speculative decoding (K >= 1) and a KV "
                   "connector: an external hit leaves a one-token prompt tail (padded to 1+K), batched behind another "
                   "request's prompt chunk of <= 1+K tokens",
        fix=_fix("fix-prompt-tails-with-decodes", _v1_runner_class, "_may_reorder_batch", _prompt_tails_with_decodes,
                 "V1's batch reorder moves a padded prompt tail ahead of the prompt chunks it was ranked among"),
        # the builder's padded-tail conversion (0.33.0: mamba_attn.py:426-445), or before 0.30 the fix of
        # v1-padded-prompt-tail-prefilled (the two together then remove it)
        applies=_padded_tails_reach_decodes,
        runners=("v1",),
        repro_from=(0, 32, 0),  # before, its draftless step builds no accepted counts (v1-draftless-step-...)
    ),
)


def known_issue_by_id(issue_id: str) -> KnownIssue:
    return next(k for k in KNOWN_ISSUES if k.id == issue_id)


def fixes_for(verdict: dict | None) -> list[KnownIssue]:
    """The known issues a finding's verdict (Verdict.to_json) attributes findings to: their fixes give the
    bug-free recording its emitted regression test compares against."""
    ids = {i for k in ((verdict or {}).get("known") or {}).values() for i in k.split("+")}
    return [k for k in KNOWN_ISSUES if k.id in ids and k.applicable()]


@contextlib.contextmanager
def fixes_applied(issues):
    """Apply the fixes of these known issues (on top of whatever mutant is applied), undo them LIFO."""
    undo = []
    try:
        for issue in issues:
            undo.append(issue.fix.apply())
        yield
    finally:
        for u in reversed(undo):
            u()


@dataclass
class Verdict:
    signatures: list[str]
    known: dict[str, str] = field(default_factory=dict)  # signature -> known issue id
    unexplained: list[str] = field(default_factory=list)
    revealed: list[str] = field(default_factory=list)
    # the symbolic tier's new findings, replayed on the engine tier (`confirm_on_engine`): "confirmed",
    # "departure: ..." (vLLM's own Scheduler and runner show nothing new: the mirror departs, not vLLM),
    # "unconfirmable: ..." (the engine tier cannot express the scenario; the mirror's verdict stands); "" not asked
    engine: str = ""

    @property
    def new(self) -> list[str]:
        """What makes the input new: unexplained and revealed signatures."""
        return new_signatures(self.to_json())

    @property
    def is_new(self) -> bool:
        return bool(self.unexplained or self.revealed) and not self.departure

    @property
    def departure(self) -> bool:
        return is_departure({"engine": self.engine})

    @property
    def key(self) -> str:
        """Dedup key: the set of new signatures, or for an all-known input the set of known ones."""
        text = ("|".join(sorted(self.new)) if self.is_new else
                "departure|" + "|".join(sorted(self.new)) if self.departure else
                "known|" + "|".join(sorted(self.signatures)))
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    @property
    def headline_signature(self) -> str:
        return (self.unexplained or self.revealed or self.signatures)[0]

    def to_json(self) -> dict:
        out = {"signatures": self.signatures, "known": self.known, "unexplained": self.unexplained,
               "revealed": self.revealed, "new": self.is_new}
        if self.engine:
            out["engine"] = self.engine
        return out

    def label(self, signature: str) -> str:
        if signature in self.known:
            return f"KNOWN {self.known[signature]}"
        return "NEW"


def is_departure(verdict: dict) -> bool:
    """A verdict's (Verdict.to_json) new findings are the mirror's alone: the engine tier showed nothing new."""
    return verdict.get("engine", "").startswith("departure")


def new_signatures(verdict: dict) -> list[str]:
    """A verdict's (Verdict.to_json) new signatures: the unexplained ones, then the revealed ones so marked."""
    return list(verdict.get("unexplained", [])) + [f"revealed:{s}" for s in verdict.get("revealed", [])]


def issues_for(tier: str, runner: str = "auto") -> list[KnownIssue]:
    """The known issues whose fixes can change a replay on this tier: the fix's target exists in the installed
    release and the code carrying the bug runs there (a V2-runner issue is not judged on the mirrored tiers)."""
    return [k for k in KNOWN_ISSUES if k.runs_on(tier, runner) and k.applicable()]


def classify(signatures, replay_signatures, issues=None) -> Verdict:
    """Judge an input's signatures by the known fixes. `replay_signatures(issues)` replays the input with
    those issues' fixes applied (and the input's mutant, if any) and returns the signatures it shows.
    `issues`: the candidates (default: every applicable one)."""
    ordered = list(dict.fromkeys(signatures))  # oracle order: the first new one heads the report
    shown = set(ordered)
    verdict = Verdict(ordered)
    if not shown:
        return verdict
    if issues is None:
        issues = [k for k in KNOWN_ISSUES if k.applicable()]
    if not issues:
        verdict.unexplained = ordered
        return verdict
    fixed = set(replay_signatures(issues))
    verdict.unexplained = [s for s in ordered if s in fixed]
    verdict.revealed = sorted(fixed - shown)
    gone = shown - fixed
    if len(issues) == 1:
        verdict.known = {sig: issues[0].id for sig in gone}
        return verdict
    for issue in issues:
        if not gone:
            break
        removed = gone - set(replay_signatures([issue]))
        for sig in removed:
            verdict.known[sig] = issue.id
        gone -= removed
    for sig in sorted(gone):  # removed only by fixes together: the smallest set found by dropping one at a time
        needed = list(issues)
        for issue in list(issues):
            trial = [k for k in needed if k is not issue]
            if trial and sig not in set(replay_signatures(trial)):
                needed = trial
        verdict.known[sig] = "+".join(k.id for k in needed)
    return verdict


def _signature_replays(scenario, config: RunConfig, done: dict | None = None):
    """`replay_signatures(issues)` for `classify`: the signatures of a replay (under `config`) with those issues'
    fixes applied, each set of fixes replayed once (`done`: replays already made, keyed by the frozenset of
    issue ids)."""
    from harness.oracles import judge
    from harness.replay import replay

    replays = dict(done or {})

    def replay_signatures(issues):
        key = frozenset(k.id for k in issues)
        if key not in replays:
            with fixes_applied(issues):
                replays[key] = {f.signature for f in judge(replay(scenario, config=config))}
        return replays[key]
    return replay_signatures


def judge_scenario(scenario, findings, mutant: str | None = None, tier: str | None = None, *,
                   config: RunConfig | None = None) -> Verdict:
    """Classify a replayed scenario's findings (the caller has the mutant applied already). `mutant` / `tier`
    change `config` (harness.run_config.RunConfig.of)."""
    cfg = RunConfig.of(config, mutant=mutant, tier=tier)
    return classify([f.signature for f in findings], _signature_replays(scenario, cfg),
                    issues_for(cfg.tier, cfg.engine.runner))


def replay_and_judge(scenario, mutant: str | None = None, tier: str | None = None, known_fixes: bool | None = None,
                     *, config: RunConfig | None = None):
    """Replay and judge one input; returns (trace, findings, verdict or None when nothing fired).

    known_fixes=True (campaigns' and sweeps' default: fuzz the fixed system): the replay runs with every
    applicable known issue's fix applied, so known bugs neither fire nor mask new ones; only a finding of the
    fixed system is confirmed on the system as shipped (`confirm_on_stock`). known_fixes=False: the replay runs
    on stock and its findings are classified by the fixes (`judge_scenario`)."""
    from harness.oracles import judge
    from harness.replay import replay

    cfg = RunConfig.of(config, mutant=mutant, tier=tier, known_fixes=known_fixes)
    issues = issues_for(cfg.tier, cfg.engine.runner) if cfg.known_fixes else []
    with fixes_applied(issues):
        trace = replay(scenario, config=cfg)
    findings = judge(trace)
    if not findings:
        return trace, findings, None
    if not issues:
        verdict = judge_scenario(scenario, findings, config=cfg)
    else:
        verdict = confirm_on_stock(scenario, findings, issues, config=cfg)
    if cfg.tier == "symbolic" and verdict.is_new:
        confirm_on_engine(scenario, verdict, config=cfg)
    return trace, findings, verdict


def confirm_on_engine(scenario, verdict: Verdict, mutant: str | None = None, *,
                      config: RunConfig | None = None) -> Verdict:
    """The symbolic tier mirrors vLLM's scheduler loop and V1 runner by hand; before its new finding is called
    a vLLM bug, the same scenario runs on the engine tier: vLLM's own Scheduler and connector with the model
    runner vLLM picks (the engine options'; the mutant, an allocator patch, applies there too), scheduled
    synchronously as the mirror schedules it unless the options ask otherwise. New there too:
    confirmed. Nothing new there: a departure of the mirror, kept and reported as such, never as vLLM's. A
    scenario the engine tier cannot express keeps the mirror's verdict, and says so."""
    from harness.errors import BadInput

    cfg = RunConfig.of(config, mutant=mutant, tier="engine", known_fixes=True)
    if cfg.engine.async_scheduling == "auto":
        # the mirrored loop schedules synchronously: the same input on vLLM's own Scheduler runs as the mirror
        # runs it (as `diff` compares). vLLM's async decision makes another schedule, which may not reach the
        # state at all: that is not the mirror departing (measured: two blind-bank allocator bugs shown by
        # vLLM's own V1 and V2 runners synchronously were filed as departures under `auto`)
        cfg = cfg.but(async_scheduling="off")
    try:
        _, _, engine = replay_and_judge(scenario, config=cfg)
    except BadInput as exc:
        verdict.engine = f"unconfirmable: {exc}"
        return verdict
    if engine is not None and engine.is_new:
        verdict.engine = "confirmed"
    else:
        verdict.engine = (f"departure: vLLM's own Scheduler and runner (engine tier, --runner {cfg.engine.runner}) show "
                          f"nothing new: {', '.join(engine.signatures) if engine else 'no finding'}")
    return verdict


def confirm_on_stock(scenario, fixed_findings, issues, *, config: RunConfig) -> Verdict:
    """A finding of the fixed system, replayed on the system as shipped (no fixes): shown there too ->
    unexplained (NEW); absent there while stock shows a finding the fixes remove (a known bug fires first) ->
    NEW, revealed (latent until vLLM fixes the known one); absent there, but the mutant under test makes it
    (the fixed system without the mutant does not show it: the fixes changed the schedule) -> NEW, revealed.
    Absent for no such reason means the fixes changed a run where no known bug fired and made the finding
    themselves: they misbehave, a harness error (never reported as vLLM's)."""
    from harness.errors import HarnessError
    from harness.oracles import judge
    from harness.replay import replay

    fixed = list(dict.fromkeys(f.signature for f in fixed_findings))
    stock = list(dict.fromkeys(f.signature for f in judge(replay(scenario, config=config))))  # oracle order
    # the fixed and the stock replays are done already
    replay_signatures = _signature_replays(scenario, config, {frozenset(k.id for k in issues): set(fixed),
                                                              frozenset(): set(stock)})
    verdict = classify(stock, replay_signatures, issues) if stock else Verdict([], revealed=fixed)
    if verdict.revealed and not verdict.unexplained and not verdict.known and not _mutant_shows(
            scenario, verdict.revealed, issues, config):
        raise HarnessError(f"known fixes misbehave: with {', '.join(k.id for k in issues)} applied the replay shows "
                           f"{', '.join(verdict.revealed)}, which stock vLLM does not show, and stock shows no finding "
                           "the fixes remove")
    return verdict


def _mutant_shows(scenario, signatures, issues, config: RunConfig) -> bool:
    """Whether the mutant applied in this process, not the fixes, makes these signatures of the fixed system:
    the fixed system replayed with the mutant taken out shows none of them. (The fixes can change the schedule,
    chunking or admission, so that a mutant's symptom shows only on the fixed system: a finding revealed by the
    fixes, not a misbehaving fix.) Without a mutant the fixed system is the system under test: False."""
    from harness.mutants import mutant_suspended
    from harness.oracles import judge
    from harness.replay import replay

    if not config.mutant:
        return False
    with mutant_suspended(config.mutant), fixes_applied(issues):
        without = {f.signature for f in judge(replay(scenario, config=config))}
    return not without & set(signatures)


BLOCKED = "REPRO STOPS AT ANOTHER FINDING (the fix changes nothing)"


def _left_to_other_issues(issue: KnownIssue, left: set, replay_findings, runner: str | None) -> list[str] | None:
    """A repro that reaches a second known bug (0.26.0's seed repro under async scheduling also re-keys the prompt
    tail): the known issues whose fixes, on top of this one's, remove what this fix leaves, judged as any finding
    is (`classify`), provided their fixes alone do not remove this issue's part. None: something is left that no
    known fix explains, or this issue's fix is not needed. `left`: the repro's signatures with this issue's fix."""
    others = [k for k in issues_for("engine" if runner else "symbolic", runner or "auto") if k is not issue]

    def signatures(issues):
        return {f.signature for f in replay_findings(issue.repro, list(issues))}

    verdict = classify(sorted(left), lambda extra: signatures([issue, *extra]), others)
    if verdict.unexplained or verdict.revealed or not verdict.known:
        return None
    needed = sorted({i for ids in verdict.known.values() for i in ids.split("+")})
    if not signatures([k for k in others if k.id in needed]):
        return None
    return needed


def check_known(replay_findings, runner: str | None = None, picked=None) -> list[dict]:
    """For every known issue the installed release should show: does its repro still show it, and does its
    fix remove it? `replay_findings(path, issues)` replays a repro with those fixes applied. `runner`: the
    engine tier's model runner (None: the mirrored tiers; "auto": `picked()` names the runner vLLM chose for the
    last replay); an issue in another runner's code is not expected, a repro the tier cannot express
    (BadInput) says why."""
    from harness.errors import BadInput

    rows = []
    for issue in KNOWN_ISSUES:
        if not issue.repro_expected():
            rows.append({"id": issue.id, "status": "not expected on this release"})
            continue
        if not issue.runs_on("engine" if runner else "symbolic", runner):
            where = f"with runner {runner}" if runner else "on the mirrored tiers (the V1 worker shadow)"
            rows.append({"id": issue.id, "status": f"not expected {where} (in {issue.code} code)"})
            continue
        try:
            shown = [f.signature for f in replay_findings(issue.repro, [])]
        except BadInput as exc:
            rows.append({"id": issue.id, "status": f"not expressible here: {exc}"})
            continue
        pick = picked() if (runner == "auto" and picked is not None) else None
        if pick and issue.runners is not None and pick not in issue.runners:  # `picked`: the runner vLLM chose
            rows.append({"id": issue.id, "status": f"not expected: vLLM picked runner {pick} for the repro (the issue is "
                                                   f"in {'/'.join(issue.runners)} code)"})
            continue
        fixed = [f.signature for f in replay_findings(issue.repro, [issue])]
        rest = (_left_to_other_issues(issue, set(fixed), replay_findings, runner)
                if shown and fixed and set(shown) != set(fixed) else None)
        status = ("reproduces, fix removes it" if shown and not fixed else
                  f"reproduces, fix removes it (what remains is {', '.join(rest)}, which the repro also reaches)"
                  if rest else
                  "NO LONGER REPRODUCES" if not shown else
                  # the fix changes nothing: the repro stops at another finding before reaching the issue (e.g.
                  # an earlier release's own bug), which says nothing about the fix
                  BLOCKED if set(shown) == set(fixed) else "FIX DOES NOT REMOVE IT")
        rows.append({"id": issue.id, "status": status, "shown": shown, "with_fix": fixed})
    return rows
