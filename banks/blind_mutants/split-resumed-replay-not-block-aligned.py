"""Blind mutant: the Mamba block-aligned chunk split forgets that a resumed request's prefill includes its
already generated output tokens.

The scheduler must keep clipping prefill chunks to Mamba block boundaries while a preempted/resumed request
replays its output tokens (``prefill_end = max(num_prompt_tokens, num_tokens - 1)``). The slip uses the prompt
length only, so once the replay has passed the prompt the chunks are no longer clipped: a chunk can end mid
block, the next chunk continues from that state, and the block left behind is later cached under its full-block
hash while holding a state from the middle of the block. Fresh requests are unaffected.
"""

from harness.mutants.base import Mutant, bound_arguments, method_wrapped, wrap_method


def _scheduler():
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler


def _make(original):
    def _mamba_block_aligned_split(self, *args, **kwargs):
        bound = bound_arguments(original, self, *args, **kwargs)
        request = bound.arguments["request"]
        start = (request.num_computed_tokens
                 + bound.arguments.get("num_new_local_computed_tokens", 0)
                 + bound.arguments.get("num_external_computed_tokens", 0))
        if request.num_tokens - 1 > request.num_prompt_tokens and start >= request.num_prompt_tokens:
            return bound.arguments["num_new_tokens"]
        return original(*bound.args, **bound.kwargs)

    return _mamba_block_aligned_split


MUTANT = Mutant(
    name="split-resumed-replay-not-block-aligned",
    bug_class="Mamba block-aligned chunk split uses the prompt length as the prefill end, so a resumed request "
    "replaying its output tokens gets unaligned mid-prefill chunks (states cached under the wrong boundary)",
    releases="0.33.0",
    origin="blind bank (synthetic)",
    patch=lambda: wrap_method(_scheduler(), "_mamba_block_aligned_split", _make),
    is_applied=lambda: method_wrapped(_scheduler(), "_mamba_block_aligned_split"),
)
