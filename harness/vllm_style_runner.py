"""`regression --style vllm` for a model-runner issue: the batch vLLM's runner orders wrong, as vLLM keeps it.

vLLM tests a runner's batch order on a runner stub, no model and no device (`GPUModelRunner.__new__`,
tests/v1/worker/test_gpu_batch_ordering.py). SHAPES maps each runner test shape (the known-issue registry's `vllm_test`) to its test: the runner
whose order is recorded, the batch of the repro's steps the issue misorders (recorded from vLLM's own runner on the
engine tier, stock), and the template (harness/vllm_style_runner_templates.py):
- V2 (`gather_batch_req_state`): the gathered batch, split as the Mamba metadata builder splits it
  (`split_decodes_and_prefills`, treat_short_extends_as_decodes=False, mamba_attn.py:449-453 in 0.34.0); every
  decode row must land among the decodes.
- V1 (`_may_reorder_batch`, and with it the Mamba builder's rows): the persistent batch (vLLM's InputBatch) in the
  scheduler's order, reordered by the runner's `_may_reorder_batch`, then split by vLLM's own Mamba builder
  (`BaseMambaAttentionMetadataBuilder.build`, the way tests/v1/attention/utils.py's MockMambaBuilder builds one)
  from the metadata the runner gives it: the draft counts and accepted counts only where the runner's own
  `_prepare_inputs` made the step speculative (every step of a speculative config from 0.32.0, only steps with drafts
  before: a release's runner decides, not the test); a row verifying drafts must be a decode row (the prefill kernels keep the
  state after its unverified drafts), a row of several tokens without drafts a prefill row (the decode kernels
  keep one state per token and its accepted count is 1).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from harness.errors import BadInput
from harness.known_issues import KnownIssue
from harness.vllm_style_runner_templates import METADATA_HELPER, V1_TEMPLATE, V2_TEMPLATE

if TYPE_CHECKING:
    from harness.artifacts import FindingArtifact

FOLDER = "tests/v1/worker"


@dataclass(frozen=True)
class Batch:
    """One batch the runner ordered: request -> (scheduled, drafts, prompt tokens computed, prompt length) in the
    scheduler's order (V1: the persistent batch's rows before the reorder), the runner's order, and its decode
    query length (1 + K; V1: the reorder threshold)."""

    step: int
    rows: dict[str, tuple[int, int, int, int]]
    order: tuple[str, ...]
    decode_query_len: int

    def _after_prompt_chunk(self, later, chunk_tokens: int) -> bool:
        """In the runner's order, a row `later(row)` accepts behind a prompt chunk without drafts (computed <
        prompt, at least `chunk_tokens` tokens): the Mamba builder splits at its first prefilling row, so the
        later row goes to the prefill kernels."""
        chunk_seen = False
        for r in self.order:
            scheduled, drafts, computed, prompt = row = self.rows[r]
            if chunk_seen and later(row):
                return True
            chunk_seen |= computed < prompt and not drafts and scheduled >= chunk_tokens
        return False

    def decode_behind_prompt_chunk(self) -> bool:
        """V2: a decode row (prompt done) behind a prompt chunk of any length (V2 marks each one prefilling)."""
        return self._after_prompt_chunk(lambda row: row[2] >= row[3], 1)

    def padded_tail_behind_prompt_chunk(self) -> bool:
        """V1: a padded prompt tail (a stateful prompt row of one token plus drafts) behind a prompt chunk of two
        or more tokens (V1's Mamba builder makes a one-token chunk with prior state a decode row)."""
        return self._after_prompt_chunk(lambda row: 0 < row[2] < row[3] and row[1] and row[0] == row[1] + 1, 2)

    def draftless_recompute(self) -> bool:
        """V1: a row done prefilling that computes 2..1+K tokens without drafts (a resumed request's recompute)."""
        return any(computed >= prompt and 1 < scheduled <= self.decode_query_len and not drafts
                   for scheduled, drafts, computed, prompt in self.rows.values())


@dataclass(frozen=True)
class Shape:
    """How a fix target's runner code replays as a vLLM unit test."""

    runner: str  # whose batches are recorded: "v1" or "v2"
    wrong: Callable[[Batch], bool]  # the batch the issue misorders
    what: str  # that batch, for the message when the finding has none
    template: str


# by the known-issue registry's `vllm_test` name: V2's gather_batch_req_state, V1's _may_reorder_batch (and with it
# the Mamba builder's rows)
SHAPES = {
    "v2-decode-behind-prompt-chunk": Shape(
        "v2", Batch.decode_behind_prompt_chunk, "puts a decode behind a prompt chunk", V2_TEMPLATE),
    "v1-padded-tail-behind-prompt-chunk": Shape(
        "v1", Batch.padded_tail_behind_prompt_chunk, "puts a padded prompt tail behind a prompt chunk", V1_TEMPLATE),
    "v1-draftless-recompute": Shape(
        "v1", Batch.draftless_recompute, "recomputes tokens without drafts", V1_TEMPLATE),
}


@contextlib.contextmanager
def wrapped_on_instance(runner, **wrappers):
    """For the block, `runner.method` is `wrappers[method](vLLM's method)`, set on the instance; after it the
    instance's attribute is dropped: the engine tier pools runners, the next replay gets vLLM's methods."""
    for method, wrap in wrappers.items():
        setattr(runner, method, wrap(getattr(runner, method)))
    try:
        yield
    finally:
        for method in wrappers:
            vars(runner).pop(method, None)


def _recording(batches: list, batch_of):
    """A wrapper of a batch-ordering method that keeps the batch it ordered (`batch_of`)."""
    def wrap(original):
        def recording(scheduler_output, *args):
            before = batch_of(scheduler_output)
            out = original(scheduler_output, *args)
            if before is not None:
                batches.append(before(out))
            return out
        return recording
    return wrap


def record_batches(scenario, runner_name: str) -> list[Batch]:
    """Replay the scenario on vLLM's own runner (engine tier, stock) and keep every batch it ordered."""
    from harness.engine.scheduler import EngineDriver
    from harness.engine_options import EngineOptions

    driver = EngineDriver(scenario, None, EngineOptions(runner=runner_name))
    worker, batches = driver.worker, []
    runner = worker.runner
    method = "gather_batch_req_state" if runner_name == "v2" else "_may_reorder_batch"
    if not hasattr(runner, method):
        raise BadInput(f"--style vllm: this vLLM's {runner_name.upper()} runner has no {method}")

    def drafts_of(so, r):
        return len((so.scheduled_spec_decode_tokens or {}).get(r) or ())

    def v2_batch(so):  # read once gathered: a dummy run (no state) names no request the runner holds
        def gathered(out):
            if out[0] is None:
                return None
            rs = runner.req_states
            rows = {r: (n, drafts_of(so, r), int(rs.num_computed_prefill_tokens[rs.req_id_to_index[r]]),
                        int(rs.prefill_len.np[rs.req_id_to_index[r]])) for r, n in so.num_scheduled_tokens.items()}
            return Batch(worker.step, rows, tuple(out[0].req_ids), runner.decode_query_len)
        return gathered

    def v1_batch(so):
        ib = runner.input_batch
        rows = {r: (so.num_scheduled_tokens[r], drafts_of(so, r), int(ib.num_computed_tokens_cpu[i]),
                    int(ib.num_prompt_tokens[i])) for i, r in enumerate(ib.req_ids)}
        if not rows or runner.reorder_batch_threshold is None:
            return None
        return lambda out: Batch(worker._step, rows, tuple(ib.req_ids), runner.reorder_batch_threshold)

    with wrapped_on_instance(runner, **{method: _recording(batches, v2_batch if runner_name == "v2" else v1_batch)}):
        driver.run()
    return [b for b in batches if b is not None]


def render(shape: Shape, batch: Batch, name: str, docstring: str, geometry) -> str:
    """The test text for one recorded batch (`name`: the test's, after the issue)."""
    rows = ", ".join(f'{json.dumps(r)}: {v}' for r, v in batch.rows.items())
    return shape.template.format(docstring=docstring, step=batch.step, rows=rows, name=name,
                                 decode_query_len=batch.decode_query_len, num_spec=batch.decode_query_len - 1,
                                 block_size=geometry.mamba_block_size, max_model_len=geometry.max_model_len,
                                 metadata_helper=METADATA_HELPER)


def emit_runner_test(artifact: FindingArtifact, issue: KnownIssue, docstring: str) -> tuple[str, str]:
    """(test text, its place in vLLM's tree) for a finding of `issue` (whose `vllm_test` is one of SHAPES): the first
    batch of the repro the issue misorders."""
    from harness.scenario import parse_scenario

    shape = SHAPES[issue.vllm_test]
    scenario = parse_scenario(artifact.scenario)
    wrong = [b for b in record_batches(scenario, shape.runner) if shape.wrong(b)]
    if not wrong:
        raise BadInput(f"--style vllm: no batch of this finding {shape.what} ({issue.id})")
    name = issue.id.replace("-", "_")
    return render(shape, wrong[0], name, docstring, scenario.geometry), f"{FOLDER}/test_hh_{name}.py"


__all__ = ["Batch", "FOLDER", "SHAPES", "Shape", "emit_runner_test", "record_batches", "render"]
