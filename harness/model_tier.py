"""Model tier: the same replay, with a tiny hybrid LM running on real state tensors paged by vLLM's blocks.

A forward backend, not a tier of its own: `harness.replay.replay` under a model-tier `RunConfig` plugs `ModelBackend`
into the symbolic driver, and the engine tier with `--forward model` into its mirror worker and its hooks
(harness/engine/scheduler.py; it imports no tier). The worker shadow still decides every read, write and copy
(and the symbolic oracles still judge them); `ModelBackend` performs the same page moves on a `TensorPool`
and runs the model's forward for each scheduled request on the state the runner would read. Tokens are the cached run's own greedy
choices; speculative drafts come from a real drafter (layer-skip self-speculation, models/drafter.py) and
are accepted by verification against the cached run's logits. After the replay every generated token is scored against the uncached reference
(`models/reference.py`); the output oracle (`harness/oracles.py: outputs`) judges those records.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from harness.run_config import MODELS  # the model names a run configuration allows
from harness.errors import BadInput
from harness.oracles import LOGIT_TOLERANCES, first_token_divergence
from harness.worker import Forward
from models.drafter import LayerSkipDrafter, ngram_propose
from models.hybrid import HybridLM, ModelConfig
from models.pool import TensorPool
from models.reference import greedy, prefix_state, teacher_forced_logits

# The tiny model's tensors are a few hundred numbers: intra-op threads only add synchronisation
# (measured on 1 core: 15.2 -> 17.3 model-tier scenarios/s).
torch.set_num_threads(1)


@dataclass(slots=True)
class OutputRecord:
    """One request's generation, scored against the uncached reference (pure data for the oracle).

    For generated token index j (prompt_len <= j < len(tokens)): max_diff[i] = max |cached - reference|
    logits predicting token j = prompt_len + i; ref_top[i] the reference's greedy token there; margin[i]
    how far the reference prefers ref_top over the cached token. ref_continuation: the reference's own
    greedy tokens from the first divergent token on (empty when none diverged)."""

    request: str
    prompt_len: int
    tokens: list[int]
    steps: list[int]  # the step that sampled each output token
    max_diff: list[float]
    ref_top: list[int]
    margin: list[float]
    ref_range: list[float]
    finite: bool
    tolerance: float = 1e-7  # oracles.LOGIT_TOLERANCES for the model's dtype
    ref_continuation: list[int] = field(default_factory=list)




@functools.cache
def load_model(kind: str = "random") -> HybridLM:
    """`random` (seeded random weights, the default) or `trained` (models/train.py, cached on disk): a run
    configuration's `model` (harness/run_config.py)."""
    if kind == "random":
        return HybridLM(ModelConfig())
    if kind == "trained":
        from models.train import trained_model

        return trained_model()
    raise BadInput(f"unknown model {kind!r}: choose one of {', '.join(MODELS)}")


class ModelBackend:
    """The model tier as a forward backend: a tiny hybrid LM on real state tensors, paged by vLLM's blocks.

    Plugged into a tier that owns the scheduling (the symbolic `harness.driver.Driver`, through
    `backend=`; any worker built on `harness.worker.WorkerShadow`, through `kernels=`): it imports neither.

    Kernels (what `WorkerShadow.kernels` calls): `zero`, `copy_page`, `shift_copy`, `forward(Forward)`.
    Driver hooks: `verify` (greedy verification of the step's drafts against the cached run's logits),
    `propose` (the drafter), `deliver` (a connector's load of the exact prefix state and keys/values),
    `session` (the context the replay runs in) and `outputs` (every generation scored against the
    uncached reference). `step_tokens(request)` must be set by the tier: the request's tokens followed
    by this step's drafts (what the forward consumes)."""

    def __init__(self, geometry, model: HybridLM | None = None, drafter: str = "layer-skip") -> None:
        self.model = model or load_model()
        self.drafter = LayerSkipDrafter(self.model) if drafter == "layer-skip" else None
        self.pool = TensorPool(self.model, geometry.num_blocks, geometry.num_speculative_tokens,
                               geometry.attn_block_size)
        self.logits: dict[str, torch.Tensor] = {}
        self.pending_kv: dict[str, tuple[list[int], int, int, dict]] = {}
        self.cached_logits: dict[str, dict[int, tuple[int, torch.Tensor]]] = {}
        self.step_tokens = None  # set by the tier: request -> tokens + this step's drafts

    # -- kernels ----------------------------------------------------------------------------------------
    def zero(self, blocks: list[int]) -> None:
        self.pool.zero_kv(blocks)

    def copy_page(self, src: int, dst: int) -> None:
        self.pool.copy_page(src, dst)

    def shift_copy(self, dst: int, conv_src: int, ssm_src: int, shift: int) -> None:
        self.pool.shift_copy(dst, conv_src, ssm_src, shift)

    def forward(self, f: Forward) -> None:
        pool, nc, ns = self.pool, f.num_computed, f.num_scheduled
        self._load_pending_kv(f.request)
        # a padded request's placeholder drafts (-1, rejected whatever they are) read as token 0
        tokens = [max(t, 0) for t in self.step_tokens(f.request)[nc:nc + ns]]
        states = pool.read(*f.init) if f.init else self.model.zero_states()
        if f.decode:
            state_at = list(range(ns))
        else:
            state_at = [ns - 1] + ([f.checkpoint[1] - nc - 1] if f.checkpoint else [])
        logits, outs = self.model.forward(tokens, nc, states, pool.paged_kv(f.attn_row, nc), state_at,
                                          logits_from=0 if f.decode else ns - 1, recurrent=f.decode)
        if f.decode:
            pool.write_tokens(f.block, f.token_blocks, outs)
        else:
            pool.write_final(f.block, outs, 0)
            if f.checkpoint:
                pool.write_final(f.checkpoint[0], outs, 1)
        self.logits[f.request] = logits

    def _load_pending_kv(self, request: str) -> None:
        """A connector's attention pages land before the request's first forward: after that step's zeroing,
        as a sync load does (and an async one, which vLLM keeps out of zeroing: scheduler.py:1443-1447)."""
        pending = self.pending_kv.pop(request, None)
        if pending is None:
            return
        row, start, total, store = pending
        for layer, (k, v) in store.items():
            self.pool.write_kv(layer, row, start, k[start:total], v[start:total])

    # -- driver hooks -------------------------------------------------------------------------------------
    def verify(self, request: str, step: int, first: int, drafts: list[int]) -> list[int]:
        """Greedy verification against the cached run's own logits (rejection sampling at temperature 0):
        the accepted drafts and one more token; `first` is the index of the first token sampled."""
        logits = self.logits.pop(request)
        targets = logits.argmax(-1).tolist()
        good = 0
        while good < len(drafts) and drafts[good] == targets[good]:
            good += 1
        got = self.cached_logits.setdefault(request, {})
        for i in range(good + 1):
            got[first + i] = (step, logits[i])
        return targets[:good + 1]

    def propose(self, request: str, tokens: list[int], nd: int) -> list[int]:
        return self.drafter.propose(request, tokens, nd) if self.drafter else ngram_propose(tokens, nd)

    def deliver(self, request: str, tokens: list[int], mamba_block: int | None, attn_row: list[int],
                start: int) -> None:
        """A connector load of `tokens` (tokens start.. are the external ones): the exact Mamba state after
        them into `mamba_block` (None: no block holds it), their keys/values into `attn_row` before the
        request's first forward."""
        states, store = prefix_state(self.model, tokens)
        if mamba_block is not None:
            self.pool.deliver_state(mamba_block, states)
        self.pending_kv[request] = (list(attn_row), start, len(tokens), store)

    def session(self):
        return torch.inference_mode()

    def outputs(self, requests) -> list[OutputRecord]:
        """`requests`: (request, all token ids, prompt length) of each request; one record per generation."""
        # a request whose verified tokens vLLM never recorded (aborted with a step in flight under async
        # scheduling) has no generation to score
        return [self._score(rid, tokens, plen) for rid, tokens, plen in requests
                if self.cached_logits.get(rid) and len(tokens) > plen]

    def _score(self, rid: str, tokens: list[int], plen: int) -> OutputRecord:
        """Teacher-forced reference along the cached run's tokens; its own greedy run past a divergence."""
        ref = teacher_forced_logits(self.model, tokens[:-1])
        got = self.cached_logits[rid]
        steps = [got[j][0] for j in range(plen, len(tokens))]
        cached = torch.stack([got[j][1] for j in range(plen, len(tokens))])
        rows = ref[plen - 1:len(tokens) - 1]  # row j-1 predicts token j
        top = rows.argmax(-1)
        chosen = rows.gather(1, torch.tensor(tokens[plen:], device=rows.device)[:, None])[:, 0]
        rec = OutputRecord(rid, plen, tokens, steps, (cached - rows).abs().amax(-1).tolist(), top.tolist(),
                           (rows.amax(-1) - chosen).tolist(), (rows.amax(-1) - rows.amin(-1)).tolist(),
                           bool(torch.isfinite(cached).all()), LOGIT_TOLERANCES[self.model.cfg.dtype])
        first = first_token_divergence(rec)  # where the oracle says the tokens part (tolerance included)
        if first is not None:
            rec.ref_continuation = greedy(self.model, tokens[:plen + first], len(tokens) - plen - first)
        return rec


__all__ = ["MODELS", "ModelBackend", "OutputRecord", "load_model"]
