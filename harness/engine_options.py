"""The engine tier's run options: which worker runs vLLM's scheduler output, async scheduling, kernels, forward.

Values, not process state: a `RunConfig` (harness/run_config.py) carries them from an entry point (the CLI's
`--runner`, `--async-scheduling`, `--kernels`, `--forward`; a fuzz worker's environment) to the engine driver
and its workers, and a finding artifact records them (async scheduling as it resolved).

- runner: `auto` (the default) = the model runner vLLM itself picks for this config
  (`VllmConfig.use_v2_model_runner`, config/vllm.py:748-767 in 0.33.0), as the V2 or V1 worker (vLLM's own
  runner code, harness/engine/runner_v2.py / runner_v1.py); `v1` / `v2` force one; `mirror` = the harness's V1 worker shadow
  (harness/worker.py) on the real scheduler's output, the mirrored worker checked by `hybrid-harness diff`.
- async_scheduling: `auto` (the default) = vLLM's own decision for the config on a GPU platform
  (config/vllm.py:1668-1719: on for V2; off for the V1 runner with n-gram drafting), where the worker follows
  it (the engine loop is then `EngineCore.step_with_batch_queue`, two batches in flight): vLLM's V2 runner
  does, and its V1 runner without drafts on the symbolic forward; V1 with EAGLE drafts or the model forward
  and the mirror worker run synchronously (`auto` resolves to off there, `on` is bad input).
  `off` = `EngineCore.step`. Artifacts record what `auto` resolved to (`resolved`).
- kernels: `torch` = CPU replacements of vLLM's Triton kernels (registered through vLLM's own
  `vllm.triton_utils.dispatcher.register_kernels`), `triton` = the real kernels (interpreter on CPU).
- copy_timing: when the device-to-host copies vLLM's V1 runner leaves asynchronous under async scheduling with
  drafts land in host memory (harness/engine/copy_timing.py): `early` (the default) = at once, as a host copy
  does; `late` = at the latest point a CUDA stream could complete them, the host synchronizing the copy's
  event (or the next copy into the same buffer), so a host read that does not wait sees the buffer as it was.
- forward: `symbolic` = the harness's token rule over prefix fingerprints (tokens and drafts from the
  scenario's acceptance pattern); `model` = the model tier's forward backend (harness.model_tier.ModelBackend,
  the run configuration's model) on the worker's state pages: the tokens vLLM's scheduler sees are the model's
  greedy verification of the model's own drafts, connector loads carry the model's states, and every
  generation is scored against the uncached reference (output oracle). Runners `mirror`, `v1` and `v2` (the
  model's pages then follow vLLM's own runner: its state indices, accepted counts and copies; `mirror` is the
  default runner when the forward is `model` and no runner is set).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.errors import BadInput

RUNNERS = ("auto", "v1", "v2", "mirror")
ASYNC_MODES = ("auto", "on", "off")
KERNELS = ("torch", "triton")
FORWARDS = ("symbolic", "model")
COPY_TIMINGS = ("early", "late")
CHOICES = {"runner": RUNNERS, "async_scheduling": ASYNC_MODES, "kernels": KERNELS, "forward": FORWARDS,
           "copy_timing": COPY_TIMINGS}
FLAGS = {"runner": "--runner", "async_scheduling": "--async-scheduling", "kernels": "--kernels", "forward": "--forward",
         "copy_timing": "--copy-timing"}
VARIABLES = {"runner": "HH_ENGINE_RUNNER", "async_scheduling": "HH_ENGINE_ASYNC", "kernels": "HH_ENGINE_KERNELS",
             "forward": "HH_ENGINE_FORWARD", "copy_timing": "HH_ENGINE_COPY_TIMING"}


@dataclass(frozen=True)
class EngineOptions:
    # the runner vLLM picks (V2 on 0.32-0.33 with Triton importable, its Triton kernels replaced by
    # harness/engine/kernels_v2.py; V1 where vLLM picks V1); `mirror` is the harness's own V1 shadow (and the
    # default with --forward model when no runner is given: engine_options)
    runner: str = "auto"
    async_scheduling: str = "auto"
    kernels: str = "torch"
    forward: str = "symbolic"
    copy_timing: str = "early"

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value not in CHOICES[name]:
                raise BadInput(f"{FLAGS[name]}={value!r}: choose one of {', '.join(CHOICES[name])}")
        if self.async_scheduling == "on" and not self.may_run_async:
            raise BadInput(f"--async-scheduling on: the {self.runner} worker is driven with synchronous scheduling "
                           f"only{' on the model forward' if self.runner == 'v1' else ''} (async: --runner v2, or "
                           "--runner v1 on the symbolic forward)")

    @property
    def may_run_async(self) -> bool:
        """Whether this worker can follow async scheduling for some config (`config.follows_async` decides per
        config): never the mirror worker, nor vLLM's V1 runner on the model forward."""
        return self.runner in ("auto", "v2") or (self.runner == "v1" and self.forward == "symbolic")

    @property
    def eagle_drafts_only(self) -> bool:
        """Async scheduling asked of vLLM's V1 runner: vLLM refuses it with n-gram drafting (config/vllm.py,
        "not supported by the V1 model runner with ngram-based speculative decoding"), so every input drafts
        as EAGLE (harness.genome.Budget.eagle_drafts)."""
        return self.runner == "v1" and self.async_scheduling == "on"

    def as_json(self) -> dict:
        return asdict(self)


def engine_options(runner: str | None = None, async_scheduling: str | None = None, kernels: str | None = None,
                   forward: str | None = None, copy_timing: str | None = None, source: str = "option") -> EngineOptions:
    """Options from values given (None: the default); BadInput naming the flag (or, `source="environment"`,
    the variable) for a value not allowed. The model forward's default runner is the mirror worker (it runs on
    v1 and v2 when asked)."""
    values = {"runner": runner, "async_scheduling": async_scheduling, "kernels": kernels, "forward": forward,
              "copy_timing": copy_timing}
    if source == "environment":  # EngineOptions itself names the flag
        for name, value in values.items():
            if value is not None and value not in CHOICES[name]:
                raise BadInput(f"{VARIABLES[name]}={value!r}: choose one of {', '.join(CHOICES[name])}")
    if values["forward"] == "model" and values["runner"] is None:
        values["runner"] = "mirror"
    return EngineOptions(**{k: v for k, v in values.items() if v is not None})
