"""The engine tier's run options: which worker runs vLLM's scheduler output, async scheduling, kernels, forward.

Process-wide, from the environment (as the model tier's HH_MODEL), so that fuzz workers, verdict replays
with fixes applied and minimization all replay an input the way it was found; the CLI's `--runner`,
`--async-scheduling`, `--kernels` and `--forward` set them, and a finding artifact records them.

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
- forward: `symbolic` = the harness's token rule over prefix fingerprints (tokens and drafts from the
  scenario's acceptance pattern); `model` = the model tier's forward backend (harness.model_tier.ModelBackend,
  the model HH_MODEL names) on the worker's state pages: the tokens vLLM's scheduler sees are the model's
  greedy verification of the model's own drafts, connector loads carry the model's states, and every
  generation is scored against the uncached reference (output oracle). Runners `mirror`, `v1` and `v2` (the
  model's pages then follow vLLM's own runner: its state indices, accepted counts and copies; `mirror` is the
  default runner when the forward is `model` and no runner is set).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from harness.errors import BadInput

RUNNERS = ("auto", "v1", "v2", "mirror")
ASYNC_MODES = ("auto", "on", "off")
KERNELS = ("torch", "triton")
FORWARDS = ("symbolic", "model")
_ENV = {"runner": "HH_ENGINE_RUNNER", "async_scheduling": "HH_ENGINE_ASYNC", "kernels": "HH_ENGINE_KERNELS",
        "forward": "HH_ENGINE_FORWARD"}
_CHOICES = {"runner": RUNNERS, "async_scheduling": ASYNC_MODES, "kernels": KERNELS, "forward": FORWARDS}


@dataclass(frozen=True)
class EngineOptions:
    # the runner vLLM picks (V2 on 0.32-0.33 with Triton importable, its Triton kernels replaced by
    # harness/engine/kernels_v2.py; V1 where vLLM picks V1); `mirror` is the harness's own V1 shadow (and the
    # default with --forward model when no runner is set: current())
    runner: str = "auto"
    async_scheduling: str = "auto"
    kernels: str = "torch"
    forward: str = "symbolic"

    def as_json(self) -> dict:
        return asdict(self)


def current() -> EngineOptions:
    """The options in force in this process (BadInput naming the variable for a value not allowed)."""
    values = {}
    for name, var in _ENV.items():
        value = os.environ.get(var, getattr(EngineOptions, name))
        if value not in _CHOICES[name]:
            raise BadInput(f"{var}={value!r}: choose one of {', '.join(_CHOICES[name])}")
        values[name] = value
    if values["forward"] == "model" and _ENV["runner"] not in os.environ:
        values["runner"] = "mirror"  # the model forward's default worker (it runs on v1 and v2 when asked)
    return EngineOptions(**values)


_RESOLVED: dict = {}  # what `auto` meant in this process's last engine replay (record_resolved)


def record_resolved(async_scheduling: str) -> None:
    """What the engine replay now running resolved `auto` to (EngineDriver: on|off, vLLM's decision)."""
    _RESOLVED["async_scheduling"] = async_scheduling


def resolved() -> EngineOptions:
    """The options as the last engine replay ran them (`async_scheduling` auto -> on|off, vLLM's decision for
    the config): what a finding artifact records, so a replay runs it the same way even where `auto` would
    decide otherwise (another release, another runner)."""
    opts = current()
    if opts.async_scheduling == "auto" and "async_scheduling" in _RESOLVED:
        opts = EngineOptions(**{**opts.as_json(), "async_scheduling": _RESOLVED["async_scheduling"]})
    return opts


def use(runner: str | None = None, async_scheduling: str | None = None, kernels: str | None = None,
        forward: str | None = None) -> None:
    """Set options for this process and the processes it starts (None leaves one as it is)."""
    for name, value in (("runner", runner), ("async_scheduling", async_scheduling), ("kernels", kernels),
                        ("forward", forward)):
        if value is None:
            continue
        if value not in _CHOICES[name]:
            raise BadInput(f"engine option {name}={value!r}: choose one of {', '.join(_CHOICES[name])}")
        os.environ[_ENV[name]] = value


def use_recorded(recorded: dict | None) -> None:
    """Replay with the options a finding artifact recorded (its `engine` field)."""
    if recorded:
        use(**{k: recorded.get(k) for k in _CHOICES})
