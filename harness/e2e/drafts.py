"""The scenario's drafts on vLLM's whole engine: a drafter vLLM loads the way it loads any custom one.

A scenario says how many of each step's K drafts are accepted (`acceptance`, cycled; empty: all K), not what the
drafts are. On tier e2e the engine runs speculative method "custom_class" (`speculative_config.model` names a
proposer class: v1/spec_decode/custom_class_proposer.py, the runner calls its `propose` where it calls the n-gram
drafter's, gpu_model_runner.py:603, 4778 in 0.32.0) with `ScriptedDrafts`: for each request, the uncached
reference's next greedy tokens for the accepted count, then tokens that differ from the reference's. Everything
after the proposal is vLLM's: the scheduler's draft slots and Mamba speculative blocks, the CPU runner's
verification forward, the rejection sampler on the real logits (a draft is accepted because it is the target's own
greedy token), the runner's Mamba state copies by the accepted count. A request whose state is right accepts
exactly the planned drafts; one whose state is wrong shows it in its tokens either way.

Pure Python over what the runner hands `propose`; the engine gives the drafter its runner (for the batch's request
ids) and the plans (harness/e2e/engine.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.e2e.geometry import FIRST_TOKEN, VOCAB


def _other(token: int) -> int:
    """A token that is not `token` (a draft the target rejects when `token` is its greedy pick)."""
    return FIRST_TOKEN + (token - FIRST_TOKEN + 1) % (VOCAB - FIRST_TOKEN)


@dataclass
class DraftPlan:
    """One request's drafts: `reference` is the uncached run's greedy output, `pattern` the accepted counts."""

    prompt_len: int
    reference: list[int]
    pattern: list[int]
    steps: int = 0
    proposed: list[tuple[int, int]] = field(default_factory=list)  # (output position, planned accepted) per step

    def next(self, num_tokens: int, width: int) -> list[int]:
        """`width` drafts after the request's first `num_tokens` tokens (prompt and outputs so far)."""
        at = num_tokens - self.prompt_len  # the output position the first draft predicts
        good = min(self.pattern[self.steps % len(self.pattern)], width)
        self.steps += 1
        self.proposed.append((at, good))
        ref = self.reference
        drafts = ref[at:at + good]
        if len(drafts) < good:  # the reference ends (max_tokens) within the accepted drafts
            return drafts
        wrong = _other(ref[at + good]) if at + good < len(ref) else FIRST_TOKEN
        return drafts + [wrong] * (width - good)


class ScriptedDrafts:
    """A custom proposer (`speculative_config={"method": "custom_class", "model": PROPOSER, ...}`): one draft list
    per batch row, empty where the row sampled nothing or has no plan (donors and other requests draft nothing)."""

    def __init__(self, vllm_config) -> None:
        self.width = vllm_config.speculative_config.num_speculative_tokens
        self.runner = None  # set by the engine once built (its input batch names the rows)
        self.plans: dict[str, DraftPlan] = {}  # by vLLM's request id (the engine's internal one)

    def load_model(self, *args, **kwargs) -> None:  # the CPU runner loads every drafter (cpu_model_runner.py:74)
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        req_ids = self.runner.input_batch.req_ids
        out = []
        for i, sampled in enumerate(sampled_token_ids):
            plan = self.plans.get(req_ids[i]) if len(sampled) else None
            out.append(plan.next(int(num_tokens_no_spec[i]), self.width) if plan else [])
        return out


PROPOSER = f"{__name__}.ScriptedDrafts"


__all__ = ["PROPOSER", "DraftPlan", "ScriptedDrafts"]
