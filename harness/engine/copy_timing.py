"""When the device-to-host copies that vLLM's V1 runner leaves asynchronous land in host memory (`--copy-timing`).

Under async scheduling with drafts, vLLM's V1 runner (gpu_model_runner.py in 0.33.0) copies three things from
device to host with `non_blocking=True` (the accepted counts on the default stream, the others on side
streams), records an event, and reads the host buffer later, after waiting on that event:
- accepted counts: `_update_states_after_model_execute` (:1548-1593; align mode through
  mamba_utils.postprocess_mamba_align_gpu, mamba_utils.py:1603) into `input_batch.num_accepted_tokens_cpu_tensor`,
  event `num_accepted_tokens_event`, waited on in `_prepare_inputs` (:2071-2076);
- valid sampled counts: `_copy_valid_sampled_token_count` (:4651-4671) into `valid_sampled_token_count_cpu`,
  event `valid_sampled_token_count_event`, waited on in `_get_valid_sampled_token_count` (:4673-4683), which
  the deferred num_computed_tokens correction of `_update_states` reads (:1515-1545);
- drafts: `_copy_draft_token_ids_to_cpu` into `draft_token_ids_cpu`, event `draft_token_ids_event` (under
  async scheduling only for structured output, penalties or bad words).
On this CPU those copies are host copies and complete at once: timing `early`, as a stream that finishes
immediately would. Timing `late` holds each copy back to the latest point a CUDA stream could complete it:
the first host wait that covers it, in stream order:
- its own event's `synchronize`;
- the accepted counts are copied on the default stream, so any later host wait on that stream lands them: a
  synchronous step's bookkeeping (its blocking read of the sampled ids, :3480-3500), the async output's ready
  event (its copy stream waits for the default stream first, AsyncGPUModelRunnerOutput :298-316), a side
  copy's event (each side stream waits for the default stream before copying, :4659-4665);
- the next copy into the same buffer (one stream completes its copies in order).
A host read that does not wait then sees the buffer as it was, which is how an ordering race vLLM leaves
open shows on CPU.

Not held back: the sampled-token copy of `AsyncGPUModelRunnerOutput` (read only after `get_output` waits on
its event, and by nothing else on this path) and host writes (the drafts' `zeros_only` fill is a host write).
"""

from __future__ import annotations

import contextlib

# runner event attribute -> (the host buffer its copy fills, the stream it is issued on)
HELD_COPIES = {
    "num_accepted_tokens_event": (lambda r: r.input_batch.num_accepted_tokens_cpu_tensor, "default"),
    "valid_sampled_token_count_event": (lambda r: r.valid_sampled_token_count_cpu, "side"),
    "draft_token_ids_event": (lambda r: r.draft_token_ids_cpu, "side"),
}


class HeldEvent:
    """A runner event on host memory whose copies land when the host waits on it (`late`); with `early` it
    holds nothing. Installed fresh per scenario, so a pooled runner carries no copy from an earlier one."""

    def __init__(self, timing: "CopyTiming", stream: str) -> None:
        self.timing, self.stream = timing, stream
        self.pending: list = []  # (issue number, host buffer, what the copy writes into it)

    def record(self, *args) -> None:
        pass

    def wait(self, *args) -> None:  # a stream waiting on the event: device-side, the host does not wait
        pass

    def query(self) -> bool:
        return not self.pending

    def synchronize(self) -> None:
        if self.stream == "side" and self.pending:  # its stream waited for the default stream before copying
            self.timing.default_stream_waited(self.pending[-1][0])
        self.land()

    def land(self, upto: int | None = None) -> None:
        for entry in [e for e in self.pending if upto is None or e[0] <= upto]:
            entry[1].copy_(entry[2])
            self.pending.remove(entry)


class CopyTiming:
    """The runner's held copies for one scenario: `issue(event_name)` wraps a runner call that issues that copy;
    `default_stream_waited(n)`: the host waited for the default stream's work up to issue number n."""

    def __init__(self, runner, timing: str) -> None:
        self.runner, self.late = runner, timing == "late"
        self.issued = 0
        self.events = {}
        for name, (_buffer, stream) in HELD_COPIES.items():
            if getattr(runner, name, None) is not None:
                self.events[name] = HeldEvent(self, stream)
                setattr(runner, name, self.events[name])

    @contextlib.contextmanager
    def issue(self, event_name: str, hold: bool = True):
        event = self.events.get(event_name)
        if not self.late or event is None or not hold:
            yield
            return
        buffer = HELD_COPIES[event_name][0](self.runner)
        event.land()  # an earlier copy into this buffer completes before the stream runs the next one
        before = buffer.clone()
        yield
        self.issued += 1
        event.pending.append((self.issued, buffer, buffer.clone()))
        buffer.copy_(before)

    def default_stream_waited(self, upto: int | None = None) -> None:
        for event in self.events.values():
            if event.stream == "default":
                event.land(upto)


__all__ = ["CopyTiming", "HELD_COPIES", "HeldEvent"]
