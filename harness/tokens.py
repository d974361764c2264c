"""The scenario's model of a request's tokens, shared by every tier and every worker (imports neither a tier
nor vLLM).

The symbolic "model": the next token is a function of the exact prefix (its fingerprint,
`harness.states.chain`). Drafts are planned right or wrong from the scenario's acceptance pattern; verification
counts the right prefix. `RequestTruth` holds one request's fingerprints and draft plan: the mirrored driver,
the engine driver and the engine's workers all read it, so a worker never calls back into a driver.
"""

from __future__ import annotations

from harness.scenario import VOCAB_SIZE
from harness.states import chain


def true_token(fp: int) -> int:
    """The deterministic 'model': the next token is a function of the exact prefix."""
    return (fp >> 7) % (VOCAB_SIZE - 1) + 1


def true_next(last: int, k: int) -> int:
    """The true token k positions after the prefix whose fingerprint is `last` (a scratch chain)."""
    for _ in range(k):
        last = hash((last, true_token(last)))
    return true_token(last)


def wrong_token(t: int) -> int:
    """A token that is not `t` (a draft planned to be rejected)."""
    return t % (VOCAB_SIZE - 1) + 1


def planned_drafts(last: int, nd: int, good: int) -> list[int]:
    """nd drafts after the prefix `last`: the first `good` right, the rest wrong."""
    out = []
    for k in range(nd):
        t = true_next(last, k)
        out.append(t if k < good else wrong_token(t))
    return out


class RequestTruth:
    """One request's tokens as the scenario defines them: `fps[n]` is the fingerprint of its first n real tokens
    (the prompt, then the outputs as vLLM records them: `record`), and its drafts are planned from the
    acceptance pattern (`propose`) and verified by the token rule (`verify`)."""

    __slots__ = ("fps", "pattern", "accept_idx")

    def __init__(self, prompt: list[int], acceptance: list[int] | None, num_speculative: int) -> None:
        self.fps = chain([0], prompt)
        self.pattern = list(acceptance or [num_speculative])
        self.accept_idx = 0

    def record(self, tokens: list[int]) -> None:
        """vLLM's record of the request's tokens (prompt + outputs): fingerprint the ones not yet seen."""
        if len(tokens) + 1 > len(self.fps):
            chain(self.fps, tokens[len(self.fps) - 1:])

    def extend(self, new_tokens: list[int]) -> None:
        chain(self.fps, new_tokens)

    def fingerprint(self, n: int, known: list[int] | None = None) -> int:
        """The first n tokens' fingerprint: the record and, past it, `known` tokens (a model forward's own), else
        the true continuation by the token rule (under async scheduling a worker runs a step ahead of the
        scheduler's record; a wrong token fed there shows as a state read that does not hold this prefix)."""
        fps = self.fps
        if n < len(fps):
            return fps[n]
        if known is not None and len(known) >= n:
            return chain([fps[-1]], known[len(fps) - 1:n])[-1]
        last = fps[-1]
        for _ in range(n - len(fps) + 1):
            last = hash((last, true_token(last)))
        return last

    def propose(self, nd: int, width: int | None = None, last: int | None = None) -> list[int]:
        """nd drafts after the recorded prefix, the acceptance pattern's next entry right and the rest wrong; a
        runner's drafter (V2) asks `width` drafts after the prefix fingerprint `last`."""
        good = min(self.pattern[self.accept_idx % len(self.pattern)], nd)
        self.accept_idx += 1
        return planned_drafts(self.fps[-1] if last is None else last, nd if width is None else width, good)

    def verify(self, drafts: list[int]) -> list[int]:
        """Rejection sampling by the token rule: the drafts that match the true continuation, plus one token."""
        last = self.fps[-1]
        good = 0
        for d in drafts:
            if d != true_next(last, good):
                break
            good += 1
        return [true_next(last, k) for k in range(good + 1)]


def drafts_wanted(num_speculative: int, max_tokens: int, num_output: int) -> int:
    """How many drafts a request gets after a step: K, fewer when its remaining outputs are fewer (a draft past
    max_tokens could never be kept: the sampled token comes on top)."""
    return min(num_speculative, max_tokens - num_output - 1)


def propose(backend, r, nd: int) -> list[int]:
    """A request's next nd drafts: the forward backend's drafter (the model tier's), or the scenario's acceptance
    pattern (`RequestTruth.propose`). `r`: a driver's request record (id, vLLM's Request, its RequestTruth)."""
    if backend is not None:
        return backend.propose(r.id, list(r.vreq.all_token_ids), nd)
    return r.truth.propose(nd)


def verify(backend, r, step: int, drafts: list[int]) -> list[int]:
    """The accepted drafts plus one token: the backend model's greedy verification, or the token rule's."""
    if backend is not None:
        return backend.verify(r.id, step, r.vreq.num_tokens, drafts)
    return r.truth.verify(drafts)


__all__ = ["RequestTruth", "drafts_wanted", "propose", "verify", "planned_drafts", "true_next", "true_token", "wrong_token"]
