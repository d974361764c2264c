"""Model tier: the same replay, with a tiny hybrid LM running on real state tensors paged by vLLM's blocks.

The symbolic worker shadow still decides every read, write and copy (and the symbolic oracles still
judge them); `ModelKernels` performs the same page moves on a `TensorPool` and runs the model's forward
for each scheduled request on the state the runner would read. Tokens are the cached run's own greedy
choices; speculative drafts come from a real drafter (layer-skip self-speculation, models/drafter.py) and
are accepted by verification against the cached run's logits. After the replay every generated token is scored against the uncached reference
(`models/reference.py`); the output oracle (`harness/oracles.py: outputs`) judges those records.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import torch

from harness.driver import Driver, _Req
from harness.errors import BadInput
from harness.oracles import LOGIT_TOLERANCES, first_token_divergence
from harness.scenario import Scenario
from harness.vllm_adapter import ATTN_GROUP, MAMBA_GROUP
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


MODELS = ("random", "trained")


def default_model() -> HybridLM:
    """HH_MODEL=random (default: seeded random weights) or trained (models/train.py, cached on disk)."""
    return _model(os.environ.get("HH_MODEL") or "random")


@functools.cache
def _model(kind: str) -> HybridLM:
    if kind == "random":
        return HybridLM(ModelConfig())
    if kind == "trained":
        from models.train import trained_model

        return trained_model()
    raise BadInput(f"unknown model {kind!r}: choose one of {', '.join(MODELS)}")


class ModelKernels:
    """The tensor backend the worker shadow drives (`WorkerShadow.kernels`)."""

    def __init__(self, driver: ModelDriver) -> None:
        self.driver = driver
        self.model = driver.model
        g = driver.g
        self.pool = TensorPool(driver.model, g.num_blocks, g.num_speculative_tokens, g.attn_block_size)
        self.logits: dict[str, torch.Tensor] = {}
        self.pending_kv: dict[str, tuple[list[int], int, int, dict]] = {}

    def zero(self, blocks: list[int]) -> None:
        self.pool.zero_kv(blocks)

    def copy_page(self, src: int, dst: int) -> None:
        self.pool.copy_page(src, dst)

    def shift_copy(self, dst: int, conv_src: int, ssm_src: int, shift: int) -> None:
        self.pool.shift_copy(dst, conv_src, ssm_src, shift)

    def forward(self, f: Forward) -> None:
        pool, nc, ns = self.pool, f.num_computed, f.num_scheduled
        self._load_pending_kv(f.request)
        tokens = self.driver.step_tokens(f.request)[nc:nc + ns]
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


class ModelDriver(Driver):
    def __init__(self, scenario: Scenario, mutant: str | None = None, model: HybridLM | None = None,
                 drafter: str = "layer-skip") -> None:
        super().__init__(scenario, mutant)
        self.model = model or default_model()
        self.drafter = LayerSkipDrafter(self.model) if drafter == "layer-skip" else None
        self.kernels = ModelKernels(self)
        self.worker.kernels = self.kernels
        self.cached_logits: dict[str, dict[int, tuple[int, torch.Tensor]]] = {rid: {} for rid in self.reqs}

    def step_tokens(self, rid: str) -> list[int]:
        r = self.reqs[rid]
        return list(r.vreq.all_token_ids) + r.drafts

    def _verify(self, r: _Req, drafts: list[int]) -> list[int]:
        """Greedy verification against the cached run's own logits (rejection sampling at temperature 0)."""
        logits = self.kernels.logits.pop(r.id)
        targets = logits.argmax(-1).tolist()
        good = 0
        while good < len(drafts) and drafts[good] == targets[good]:
            good += 1
        first = r.vreq.num_tokens
        for i in range(good + 1):
            self.cached_logits[r.id][first + i] = (self.step_idx, logits[i])
        return targets[:good + 1]

    def _propose(self, r: _Req, nd: int) -> list[int]:
        tokens = list(r.vreq.all_token_ids)
        return self.drafter.propose(r.id, tokens, nd) if self.drafter else ngram_propose(tokens, nd)

    def _connector_deliver(self, r: _Req, start: int, total: int) -> None:
        super()._connector_deliver(r, start, total)
        states, store = prefix_state(self.model, list(r.vreq.all_token_ids)[:total])
        table = self.alloc.block_ids(r.id)
        col = (total - 1) // self.g.mamba_block_size
        if col < len(table[MAMBA_GROUP]):
            self.kernels.pool.deliver_state(table[MAMBA_GROUP][col], states)
        self.kernels.pending_kv[r.id] = (list(table[ATTN_GROUP]), start, total, store)

    def run(self):
        with torch.inference_mode():
            trace = super().run()
            if trace.exception is None:
                trace.outputs = [self._score(rid) for rid, got in self.cached_logits.items() if got]
        return trace

    def _score(self, rid: str) -> OutputRecord:
        """Teacher-forced reference along the cached run's tokens; its own greedy run past a divergence."""
        r = self.reqs[rid]
        tokens = list(r.vreq.all_token_ids)
        plen = r.vreq.num_prompt_tokens
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


def replay_model(scenario: Scenario, mutant: str | None = None, model: HybridLM | None = None):
    """Replay a scenario in the model tier. Mutants must already be applied by the caller."""
    return ModelDriver(scenario, mutant, model).run()
