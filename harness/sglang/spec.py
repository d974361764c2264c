"""NGRAM speculative decoding on the SGLang wing: a stand-in for SGLang's `NGRAMWorker` (srt/speculative/
ngram_worker.py, 0.5.23; it needs sgl_kernel, which the CPU venv lacks), following its `forward_batch_generation`
(:430-578) step by step. Import only after `runtime.patched` (harness/sglang/driver.py does).

SGLang's own, unmodified, around it: the scheduler's spec prepare (`ScheduleBatch.prepare_for_decode` ->
`spec_prepare_for_decode` -> `eagle_prepare_for_decode` -> `alloc_for_spec_decode`), `prepare_mamba_track_for_verify`
(spec_utils.py:913), `commit_mamba_states_after_verify` (spec_utils.py:1004, with `_verify_commit_step_indices`) and
`HybridLinearAttnBackend.update_mamba_state_after_mtp_verify` on a `__new__` backend, the future map and
`NgramVerifyInput`, and in the result processor `_resolve_spec_v2_tokens`, `_mamba_check_track_boundary` and
`_mamba_can_cache_finished_req`.

The stand-in's parts: the drafts come from the scenario (each request's `acceptance` entry for this verify, cycled
by SGLang's own `req.spec_verify_ct`: that many of the D - 1 drafts right, the rest wrong; no `acceptance`: all
right) where SGLang's n-gram corpus would propose them; the verify forward reads each request's working slot (a
`Read` of the trace, as harness/sglang/forward.py's decode) and writes the state after each tree node into
intermediate_ssm row i (`StateIO.write_step`), as the GDN verify kernel does; greedy chain verification by the
token rule stands in for `eagle_sample`; the KV move (`move_accept_tokens_to_target_kvcache`) and the corpus update
move no state the harness follows and are not run.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative import spec_utils
from sglang.srt.speculative.ngram_info import NgramVerifyInput

from harness.sglang.forward import fold, prefix_fps, read_initial, simulated_forward
from harness.sglang.geometry import scenario_id
from harness.states import chain
from harness.tokens import planned_drafts, true_token


def _target_worker(env) -> SimpleNamespace:
    """The target worker as commit_mamba_states_after_verify reads it (spec_utils.py:1024-1030 and the generic
    commit's `model_runner.attn_backend.update_mamba_state_after_mtp_verify`): SGLang's HybridLinearAttnBackend,
    made by `__new__`, over a linear-attention backend namespace holding the request pool and the verify's slots."""
    backend = HybridLinearAttnBackend.__new__(HybridLinearAttnBackend)
    backend.linear_attn_backend = SimpleNamespace(
        req_to_token_pool=env.rtp, accept_lens_pool=None, _translate_mamba_indices=env.rtp.translate_mamba_indices,
        forward_metadata=SimpleNamespace(mamba_cache_indices=None))
    runner = SimpleNamespace(model_config=env.mc, req_to_token_pool=env.rtp, attn_backend=backend, model=None)
    return SimpleNamespace(model_runner=runner)


class NgramWorkerStandIn:
    """`NGRAMWorker.forward_batch_generation` with the scenario's drafts and the harness's forward; `at` names the
    trace and step the next call records to (the real worker has neither)."""

    def __init__(self, env, acceptance: dict[str, list[int]]) -> None:
        self.env = env
        self.draft_token_num = env.geom.draft_tokens
        self.acceptance = acceptance  # scenario id -> pattern
        self.target = _target_worker(env)
        self.trace = self.step = None

    def at(self, trace, step: int) -> None:
        self.trace, self.step = trace, step

    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size) -> None:
        """BaseSpecWorker's no-op default (the adaptive controller is off)."""

    def forward_batch_generation(self, batch, pp_proxy_tensors=None, on_publish=None) -> GenerationBatchResult:
        """ngram_worker.py:430-578: a decode batch verifies (`_verify`), anything else is the target's plain
        forward (:520-537) with its token in column 0 of `accept_tokens`."""
        if batch.forward_mode.is_decode():
            return self._verify(batch)
        bs, d = len(batch.reqs), self.draft_token_num
        predict = simulated_forward(self.env, self.trace, self.step, batch)  # :521-528
        accept_tokens = torch.zeros(bs, d, dtype=torch.int32)  # :531-535
        accept_tokens[:, 0] = predict
        return self._result(batch.seq_lens.clone(), accept_tokens.flatten(), torch.ones(bs, dtype=torch.int32),
                            predict)

    def _result(self, new_seq_lens, accept_tokens, accept_lens, next_token_ids) -> GenerationBatchResult:
        """:545-578: the next draft input and the batch result."""
        draft = NgramVerifyInput(draft_token_num=self.draft_token_num, new_seq_lens=new_seq_lens,
                                 accept_tokens=accept_tokens, accept_lens=accept_lens)
        return GenerationBatchResult(next_token_ids=next_token_ids, accept_lens=accept_lens,
                                     new_seq_lens=new_seq_lens, next_draft_input=draft,
                                     speculative_num_draft_tokens=self.draft_token_num)

    def _verify(self, batch) -> GenerationBatchResult:
        """:433-518 for a decode batch, chain tree (topk 1)."""
        bs, d = len(batch.reqs), self.draft_token_num
        batch.forward_mode = ForwardMode.TARGET_VERIFY  # _prepare_for_speculative_decoding (:307-400)
        spec_utils.prepare_mamba_track_for_verify(batch)  # in the target forward's init (SGLang's own)
        lin = self.target.model_runner.attn_backend.linear_attn_backend
        lin.forward_metadata.mamba_cache_indices = self.env.rtp.get_mamba_indices(batch.req_pool_indices)
        predict = torch.zeros(bs * d, dtype=torch.int64)
        accept_lens = torch.ones(bs, dtype=torch.int32)
        accept_index = torch.full((bs, d), -1, dtype=torch.int64)
        for i, req in enumerate(batch.reqs):
            accepted = self._verify_req(i, req, predict)
            accept_lens[i] = accepted
            accept_index[i, :accepted] = torch.arange(i * d, i * d + accepted)
        new_seq_lens = batch.seq_lens + accept_lens  # :486
        spec_utils.commit_mamba_states_after_verify(self.target, batch, accept_lens, accept_index, d)  # :487-493
        accept_tokens = predict[accept_index.clamp(min=0)]  # :494 (rows past accept_lens are never read)
        batch.forward_mode = ForwardMode.DECODE  # :518
        return self._result(new_seq_lens, accept_tokens.flatten(), accept_lens, accept_tokens.flatten())

    def _verify_req(self, i: int, req, predict) -> int:
        """One request's verify: the kernel reads its working slot (the state of seq[:-1]), feeds the chain root
        (the last token) and the drafts, keeping the state after each node in intermediate_ssm row i; each node's
        target token is the token rule's after the node's path; greedy acceptance counts the drafts that match the
        target before them (eagle_sample, :473-485). Returns accept_lens (the drafts accepted + the bonus)."""
        d, trace, io = self.draft_token_num, self.trace, self.env.io
        seq = list(req.origin_input_ids) + list(req.output_ids)
        state = read_initial(self.env, trace, self.step, req, len(seq) - 1)
        fps = prefix_fps(trace, req)
        pattern = self.acceptance.get(scenario_id(req)) or [d - 1]
        good = min(pattern[req.spec_verify_ct % len(pattern)], d - 1)
        nodes = [seq[-1], *planned_drafts(fps[len(seq)], d - 1, good)]
        path = [fps[len(seq) - 1]]
        for j, token in enumerate(nodes):
            state = fold(state, [token])
            io.write_step(i, j, state)
            chain(path, [token])
            predict[i * d + j] = true_token(path[-1])
        accepted = 1
        while accepted < d and nodes[accepted] == int(predict[i * d + accepted - 1]):
            accepted += 1
        return accepted

