"""The V1 worker's sampling step under async scheduling with EAGLE drafts (`--runner v1`, K >= 1).

vLLM's V1 runner then keeps its drafts on the device: `sample_tokens` (gpu_model_runner.py:4270-4520 in
0.33.0) takes the EAGLE padded-batch path (`use_gpu_toks`): the drafter's `prepare_next_token_ids_padded`
(spec_decode/llm_base_proposer.py:1048-1096) computes each row's next token and valid sampled count on the
device, `_copy_valid_sampled_token_count` (:4651-4671) stashes both for the next step (`prev_sampled_token_ids`,
`valid_sampled_token_count_gpu`) and starts the count's copy to the host, and the drafter's `propose` leaves
`_draft_token_ids` on the device. The scheduler holds placeholders; the next step's `_update_states`
(:1340-1545) assumes every draft accepted and queues a correction that reads the copied counts,
`_prepare_inputs` corrects the device's computed counts (`update_num_computed_tokens_for_batch_change`) and
`_prepare_input_ids` (:1740-1880) scatters the previous step's next tokens and drafts into the input ids.

All of that is vLLM's own code here; what stands in:
- the sampler: the token rule (harness.tokens) verifies the drafts the runner actually fed (its input ids) and
  gives the row `[t0 .. tm, -1 ...]` as the rejection sampler would;
- the drafter's model: `propose` is the scenario's acceptance pattern after the row's new prefix (as the V2
  worker's drafter), K drafts per row; `prepare_next_token_ids_padded` is vLLM's, on a proposer holding only
  the buffer it uses (its Triton kernel replaced by harness.engine.kernels_v1);
- the host copies: early or late (harness.engine.copy_timing).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from harness.tokens import true_token


def verified_row(fed: list[int], toks: list[int], nd: int) -> list[int]:
    """A row's sampled tokens by the token rule: after the last real token, each target in turn while the draft
    the runner fed there matches it (fed[k]: the prefix fingerprint after the row's first k tokens)."""
    base = len(toks) - nd
    picks = []
    for j in range(nd + 1):
        t = true_token(fed[base + j])
        picks.append(t)
        if j == nd or toks[base + j] != t:
            break
    return picks


class EagleStep:
    """`sample_tokens`' EAGLE padded-batch part for one worker (its runner, truths and copy timing)."""

    def __init__(self, worker) -> None:
        import torch
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
        from vllm.v1.utils import CpuGpuBuffer

        self.torch, self.w = torch, worker
        r = worker.runner
        self.prepare_next = SpecDecodeBaseProposer.prepare_next_token_ids_padded
        self.proposer = SimpleNamespace(backup_next_token_ids=CpuGpuBuffer(
            r.max_num_reqs, dtype=torch.int32, device=torch.device("cpu"), pin_memory=False, with_numpy=True))
        self.max_model_len = worker.driver.sc.geometry.max_model_len  # the deployment's (the runner is floor-sized)

    def sampled(self, so, rows: dict):
        """(num_reqs, 1 + K) int32: each row's verification of the drafts fed, -1 past it."""
        r, K = self.w.runner, self.w.K
        out = np.full((r.input_batch.num_reqs, 1 + K), -1, dtype=np.int32)
        for i, rid in enumerate(r.input_batch.req_ids):
            fed, toks, _nc = rows[rid]
            picks = verified_row(fed, toks, len(so.scheduled_spec_decode_tokens.get(rid, ())))
            out[i, :len(picks)] = picks
        return self.torch.from_numpy(out)

    def propose_after(self, so, out, rows: dict) -> None:
        """The EAGLE branch of sample_tokens from the accepted counts on: next tokens and valid counts (copied to
        the host), then the drafts, or zeros where the batch does not fit the drafter (:4362-4432). `rows`:
        request -> (fed prefix fingerprints, tokens fed, computed tokens) from the step's forward."""
        torch, w = self.torch, self.w
        r = w.runner
        n = r.input_batch.num_reqs
        fits = int(r.optimistic_seq_lens_cpu[:n].max()) + w.K <= self.max_model_len  # _input_fits_in_drafter
        next_ids, valid = self.prepare_next(self.proposer, out, r.requests, r.input_batch,
                                            r.discard_request_mask.gpu[:n])
        with w.timing.issue("valid_sampled_token_count_event"):
            r._copy_valid_sampled_token_count(next_ids, valid)
        if not fits:
            r._draft_token_ids = torch.zeros(1, dtype=torch.int32).expand(n, w.K)
            r._copy_draft_token_ids_to_cpu(so, zeros_only=True)
            return
        r._draft_token_ids = self._drafts(so, out, rows, valid.tolist())
        with w.timing.issue("draft_token_ids_event"):
            r._copy_draft_token_ids_to_cpu(so)

    def _drafts(self, so, out, rows: dict, valid: list[int]):
        """K drafts per row after its new prefix (the accepted tokens and the bonus token), planned by the
        scenario's acceptance pattern; zeros where the request has no output left to draft for."""
        torch, w = self.torch, self.w
        r, K = w.runner, w.K
        drafts = torch.zeros(r.input_batch.num_reqs, K, dtype=torch.int64)
        for i, rid in enumerate(r.input_batch.req_ids):
            if valid[i] <= 0:
                continue
            fed, toks, nc = rows[rid]
            nd = len(so.scheduled_spec_decode_tokens.get(rid, ()))
            m = valid[i] - 1  # drafts accepted
            new_fp = hash((fed[len(toks) - nd + m], int(out[i, m])))
            state = r.requests[rid]
            known = nc + len(toks) - nd + m + 1  # tokens once this step's are in
            left = state.sampling_params.max_tokens - (known - state.num_prompt_tokens)
            if left > 1:
                drafts[i] = torch.tensor(w.truths[rid].propose(min(K, left - 1), K, new_fp), dtype=torch.int64)
        return drafts


__all__ = ["EagleStep", "verified_row"]
