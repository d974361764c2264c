"""The model runners' accepted-token counts: rows re-added, draft-less steps, the async copy of the counts (V1 gpu_model_runner.py, gpu_input_batch.py; the harness's worker shadow)."""

from __future__ import annotations

from harness.fixes.targets import V1_RUNNER, Fix, method_fix, v1_reorders, worker_shadow
from harness.mutants.base import Mutant, bound_arguments, method_wrapped, wrap_method
from harness.patches import undo_all


def _v1_readd_resets_accepted() -> bool:
    """The reset is V1's InputBatch.add_request (gpu_input_batch.py:479 in 0.33.0): gone with the V1 runner in
    0.34.0 (and from a 0.33.0 tree with upstream/patches/v1-readd-resets-num-accepted.patch), where the worker
    shadow keeps the count as V2 does (harness/worker.py)."""
    from harness.release import vllm_release

    return vllm_release().v1_readd_resets_accepted


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
        undo_shadow = wrap_method(worker_shadow(), "readded_num_accepted", _keep_accepted_on_readd)
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
                  is_applied=lambda: method_wrapped(worker_shadow(), "readded_num_accepted"))


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
        return undo_all([wrap_method(V1_RUNNER(), "_update_states", _accepted_before_row_moves),
                         wrap_method(V1_RUNNER(), "_prepare_inputs", _gather_from_copied_layout)])

    return Mutant(name="fix-accepted-copy-before-row-moves", bug_class="fix: V1 waits for the accepted-count copy "
                  "before moving rows and gathers it in the layout it was written in", releases="where the issue is "
                  "known", origin="hybrid-harness", patch=patch,
                  is_applied=lambda: method_wrapped(V1_RUNNER(), "_prepare_inputs"))


def _v1_gathers_accepted_by_prev_rows() -> bool:
    """V1's _prepare_inputs gathers the host accepted counts by the previous rows (gpu_model_runner.py:2078-2088 in
    0.33.0); a tree with upstream/patches/v1-async-accepted-copy-race.patch reads them in place instead."""
    import inspect

    try:
        return (v1_reorders() and hasattr(V1_RUNNER(), "_compute_prev_positions")
                and "np.where(new_mask, 0, prev_idx)" in inspect.getsource(V1_RUNNER()._prepare_inputs))
    except ImportError:
        return False


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


def _spec_arguments_every_step_fix() -> Fix:
    return method_fix("fix-spec-arguments-every-step", V1_RUNNER, "_build_attention_metadata",
                      _draftless_steps_speculative(gdn=False), "the metadata builders get the spec-decode arguments in "
                      "every step where drafting is configured (0.32's rule)", applies=_spec_arguments_per_step)


def _spec_arguments_per_step() -> bool:
    from harness.engine.runner_v1 import spec_metadata_per_step

    try:
        return spec_metadata_per_step()
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


FIXES = (
    _spec_arguments_every_step_fix(),  # v1-draftless-step-drops-accepted-offset
    Fix(_gdn_draftless_fix(), "GPUModelRunner._build_attention_metadata + GDNAttentionMetadataBuilder.build",
        _gdn_without_zero_draft_rows),  # gdn-draftless-decode-first-column
    Fix(_keep_accepted_fix(), "InputBatch (V1 re-add) + WorkerShadow.readded_num_accepted",
        _v1_readd_resets_accepted),  # v1-readd-resets-num-accepted
    Fix(_copy_layout_fix(), "GPUModelRunner._update_states + GPUModelRunner._prepare_inputs",
        _v1_gathers_accepted_by_prev_rows),  # v1-async-accepted-copy-race
)
