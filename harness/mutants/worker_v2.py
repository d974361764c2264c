"""Worker-side mutants of vLLM's V2 model runner (`runner="v2"`: only the engine tier with `--runner v2`, or
`auto` where vLLM picks V2, runs that code, harness/engine/runner_v2.py). Each wraps vLLM's own
`MambaHybridModelState` method (v1/worker/gpu/model_states/mamba_hybrid.py in 0.33.0) and undoes one thing it
does, whichever kernel set (`--kernels torch|triton`) moves the bytes.

- v2-postcopy-skipped: `postprocess_state` runs without the post-step computed counts, so its align
  post-copy (`run_fused_postprocess_align`, mamba_hybrid.py:391-402) is skipped: after a spec-decode step
  whose accepted tokens reach a block boundary, the boundary block never gets the state at the boundary (and
  the accepted count is not reset when the running column is the destination). The call shape is vLLM's own:
  `num_computed_tokens` defaults to None and the dummy-run call site omits it (model_runner.py:2184); a real
  step's call passes it (:1750). Bug class of the V1 align post-copy fixes (vllm-project/vllm#53912 / PR
  #47861: hybrid prefix caching + MTP caching states that were never written).
- v2-stale-accepted-on-add: `add_request` leaves the request slot's previous accepted count in place (it resets
  it, mamba_hybrid.py:114-115: "Must reset the speculative acceptance count in this idx which could be
  stale"): a request admitted into a slot a spec-decode request used reads, and pre-copies with, that
  request's offset. The V2 counterpart of the V1 runner's re-add reset (known issue
  v1-readd-resets-num-accepted), in the other direction.
- v2-accepted-scattered-by-batch-row: `postprocess_state` writes the step's accepted counts to the batch rows
  0..n-1 instead of the request slots `idx_mapping` names (mamba_hybrid.py:363-367; the kernel scatters
  through idx_mapping, which differs from batch order once slots are reused or the batch is reordered):
  requests read each other's counts. Synthetic (no public report).

- v2-async-trusts-scheduler-computed: `update_requests` writes the scheduler's `num_computed_tokens` into the
  runner's own GPU count. Synchronously the two agree, so only async scheduling (the engine tier's default
  with V2) can show it: the scheduler counts the previous step's drafts as computed before they are
  verified. The class of the V1 async races (a CPU mirror that is right only when the step is synchronous).

Tried and dropped: keeping the accepted count across a block crossing in `preprocess_state` (the kernel's
reset, mamba_utils.py:541-545): the post-copy already resets the count wherever a spec step reaches a
boundary, so the reset matters only after a prompt-final chunk that starts mid-block, the territory of known
issue checkpoint-midblock-start, whose fix replay then explains the findings; it survived a 2-minute
`mutants check`.

The attention-block seeding of `add_request` (vLLM issue #53142 / PR #55601: the running column seeded with
`cache_config.block_size` instead of the Mamba block size) is not among them: in align mode the harness's
attention block is the Mamba block, so that mutant computes the same column and no oracle could tell.
"""

from __future__ import annotations

from harness.mutants.base import Mutant, method_wrapped, wrap_method


def _state_class():
    from vllm.v1.worker.gpu.model_states.mamba_hybrid import MambaHybridModelState

    return MambaHybridModelState


def _skip_postcopy(original):
    def postprocess_state(self, idx_mapping, num_sampled, num_computed_tokens=None):
        return original(self, idx_mapping, num_sampled)  # the post-step counts dropped: no align post-copy
    return postprocess_state


def _stale_on_add(original):
    def add_request(self, req_index, new_req_data):
        stale = self.num_accepted_tokens_gpu[req_index].clone()
        original(self, req_index, new_req_data)
        self.num_accepted_tokens_gpu[req_index] = stale  # the slot's previous request's count stays
    return add_request


def _scatter_by_batch_row(original):
    def postprocess_state(self, idx_mapping, num_sampled, num_computed_tokens=None):
        import torch

        n = idx_mapping.shape[0]
        keep = self.num_accepted_tokens_gpu.clone()
        original(self, idx_mapping, num_sampled, num_computed_tokens)
        if not n or isinstance(num_sampled, int):
            return
        slots = idx_mapping.long()
        ok = slots >= 0
        after = self.num_accepted_tokens_gpu.clone()
        self.num_accepted_tokens_gpu[slots[ok]] = keep[slots[ok]]  # the slots keep their old counts ...
        rows = torch.arange(n)[ok]
        self.num_accepted_tokens_gpu[rows] = after[slots[ok]]  # ... and batch rows 0..n-1 get the new ones
    return postprocess_state


def _runner_class():
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    return GPUModelRunner


def _trust_scheduler_computed(original):
    def update_requests(self, scheduler_output):
        original(self, scheduler_output)
        rs = self.req_states
        for req_id in scheduler_output.scheduled_cached_reqs.req_ids:
            i = rs.req_id_to_index[req_id]
            rs.num_computed_tokens.gpu[i] = int(rs.num_computed_tokens_np[i])  # the scheduler's count, as sent
    return update_requests


def _mutant(name: str, bug_class: str, method: str, make, origin: str, owner=_state_class) -> Mutant:
    return Mutant(name=name, bug_class=bug_class, releases="0.31.0-0.33.x", origin=origin,
                  patch=lambda: wrap_method(owner(), method, make),
                  is_applied=lambda: method_wrapped(owner(), method), runner="v2")


V2_MUTANTS = (
    _mutant("v2-postcopy-skipped", "missed copy: V2's postprocess_state skips the align post-copy; the boundary "
            "block an accepted spec-decode step reaches never gets its state", "postprocess_state", _skip_postcopy,
            "vLLM V2 MambaHybridModelState.postprocess_state (num_computed_tokens=None skips the align post-copy, "
            "mamba_hybrid.py:391-402); bug class of vllm-project/vllm#53912 / PR #47861"),
    _mutant("v2-stale-accepted-on-add", "stale slot state: V2's add_request keeps the slot's previous accepted count; "
            "the new request's pre-copy and first decode use it", "add_request", _stale_on_add,
            "vLLM V2 MambaHybridModelState.add_request reset (mamba_hybrid.py:114, 'could be stale'); V2 counterpart "
            "of known issue v1-readd-resets-num-accepted"),
    _mutant("v2-accepted-scattered-by-batch-row", "wrong index: V2's postprocess_state writes accepted counts to batch "
            "rows instead of request slots", "postprocess_state", _scatter_by_batch_row, ""),
    _mutant("v2-async-trusts-scheduler-computed", "stale mirror under async scheduling: V2's update_requests copies the "
            "scheduler's num_computed_tokens into the runner's own count; under async scheduling that count is "
            "optimistic (the previous step's drafts not yet verified), so after a rejected draft positions, state "
            "columns and copies run ahead; synchronously the two counts agree", "update_requests",
            _trust_scheduler_computed,
            "vLLM V2 GPUModelRunner.update_requests keeps the scheduler's count on the CPU mirror only "
            "(model_runner.py:1270-1290; mamba_hybrid.py:203-208: 'num_computed_tokens_np is an optimistic mirror "
            "under async scheduling'); bug class of the V1 async-scheduling races (accepted counts copied back "
            "racing condense())", owner=_runner_class),
)
