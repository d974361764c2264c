"""The model runners' batch order and the Mamba metadata builder's decode/prefill rows (V1 _may_reorder_batch, mamba_attn.py; V2 sort_batch_req_ids)."""

from __future__ import annotations

from harness.fixes.targets import (
    MAMBA_BUILDER,
    V1_RUNNER,
    V2_RUNNER,
    Fix,
    method_fix,
    v1_reorders,
    v2_runner_module,
)
from harness.mutants.base import Mutant, method_wrapped, wrap_method
from harness.patches import patch_attr, undo_all


def _decode_rows_lead(original):
    """`gather_batch_req_state` with a batch order in which no prefilling row without drafts precedes a decode
    row: `sort_batch_req_ids` ranks a (1+K)-token prefill chunk as decode-like, but the Mamba builder
    (mamba_attn.py:451-455 in 0.33.0, :449-453 in 0.34.0; treat_short_extends_as_decodes=False) splits at the
    first prefilling row, so a decode row after it went to the prefill kernels (mamba_mixer2.py:838-855 in 0.33.0),
    which ignore its accepted count. The fix ranks by `is_prefilling` first (the runner's own counts,
    model_runner.py:1334-1338 in 0.33.0, :1404-1408 in 0.34.0), keeping vLLM's order otherwise (a stable sort):
    the order upstream/patches' v2-draftless-decode-after-prefill.patch gives with a stable partition over the
    gathered arrays."""
    def gather_batch_req_state(self, scheduler_output, dummy_run):
        module = v2_runner_module()
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


def _builder_rows_fix(name: str, what: str, rule, *runner_wraps) -> Mutant:
    """A fix in the Mamba builder's rows (`rule` over the runner's draft counts), with the V1 runner's wraps it needs
    besides the draft counts' (`runner_wraps`: (method, make) pairs)."""
    def patch():
        counts: list = []
        return undo_all([*(wrap_method(V1_RUNNER(), method, make) for method, make in runner_wraps),
                         wrap_method(V1_RUNNER(), "_build_attention_metadata", _runner_draft_counts(counts)),
                         wrap_method(MAMBA_BUILDER(), "_compute_common_metadata", _builder_rows(counts, rule))])

    return Mutant(name=name, bug_class=f"fix: {what}", releases="where the issue is known", origin="hybrid-harness",
                  patch=patch, is_applied=lambda: method_wrapped(MAMBA_BUILDER(), "_compute_common_metadata"))


def _recompute_as_prefill_fix() -> Mutant:
    """Both places: the reorder ranks the recompute among the extends, the builder sends it to the prefill
    kernels."""
    return _builder_rows_fix("fix-recompute-as-prefill", "a resumed request's draft-less recompute runs through the "
                             "prefill kernels", _draftless_extends_prefill,
                             ("_may_reorder_batch", _recomputes_behind_decodes))


def _padded_tail_decode_fix() -> Mutant:
    return _builder_rows_fix("fix-padded-tail-decode", "the Mamba builder runs a padded prompt tail through the decode "
                             "kernels (0.30.0's rule)", _padded_tails_decode)


def _runner_counts_drafts() -> bool:
    try:
        return v1_reorders() and hasattr(V1_RUNNER(), "_build_attention_metadata")
    except ImportError:
        return False


def _builder_prefills_padded_tails() -> bool:
    """V1's Mamba builder without 0.30's padded-tail rule (its `_compute_common_metadata` takes no draft counts),
    beside a runner that counts the drafts it pads."""
    from harness.vllm_adapter import parameters

    try:
        return _runner_counts_drafts() and "num_decode_draft_tokens_cpu" not in parameters(
            MAMBA_BUILDER()._compute_common_metadata)
    except ImportError:
        return False


def _padded_tails_reach_decodes() -> bool:
    """A padded prompt tail becomes a decode row: the builder's own rule (0.30+) or, before, the fix of
    v1-padded-prompt-tail-prefilled; either way V1's reorder ranks it."""
    return _builder_takes_draft_counts() or _builder_prefills_padded_tails()


def _builder_takes_draft_counts() -> bool:
    from harness.vllm_adapter import parameters

    try:
        return v1_reorders() and "num_decode_draft_tokens_cpu" in parameters(
            MAMBA_BUILDER()._compute_common_metadata)
    except ImportError:
        return False


def _v2_gather_exists() -> bool:
    try:
        return hasattr(v2_runner_module().GPUModelRunner, "gather_batch_req_state")
    except ImportError:
        return False


FIXES = (
    method_fix("fix-decode-rows-lead", V2_RUNNER, "gather_batch_req_state",
                     _decode_rows_lead, "V2 orders decode rows ahead of prefilling rows without drafts", applies=_v2_gather_exists),  # v2-draftless-decode-after-prefill
    Fix(_recompute_as_prefill_fix(), "GPUModelRunner._may_reorder_batch + BaseMambaAttentionMetadataBuilder._compute_common_metadata",
        _runner_counts_drafts),  # v1-resumed-recompute-as-decode
    Fix(_padded_tail_decode_fix(), "GPUModelRunner._build_attention_metadata + BaseMambaAttentionMetadataBuilder._compute_common_metadata",
        _builder_prefills_padded_tails),  # v1-padded-prompt-tail-prefilled
    method_fix("fix-prompt-tails-with-decodes", V1_RUNNER, "_may_reorder_batch", _prompt_tails_with_decodes,
                     "V1's batch reorder moves a padded prompt tail ahead of the prompt chunks it was ranked among", applies=_padded_tails_reach_decodes),  # v1-padded-prompt-tail-after-short-extend
)
