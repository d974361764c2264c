"""One run configuration: how a scenario is replayed and judged, as one immutable value.

Built once at an entry point (the CLI from its flags, a fuzz target from the environment its campaign wrote,
a test from its arguments) and passed explicitly to `replay`, the verdict (`harness.verdict`), minimization,
diff, the engine driver and its workers; recorded in every finding artifact (`as_json`), so a kept finding
replays the way it was found in a fresh process with an empty environment (`from_json`). Only the entry points
read `HH_*` (`from_env`); campaign workers get theirs from `to_env`.

- tier: `symbolic` (mirrored scheduler loop, V1 worker shadow), `model` (the same loop with the tiny hybrid
  LM on real state tensors) or `engine` (vLLM's own Scheduler, connector and model runner);
- mutant: the mutant the caller applied (harness.mutants), recorded in the trace and in artifacts;
- model: the model tier's weights, `random` (seeded) or `trained` (models/train.py, cached on disk), for the
  model tier and the engine tier's model forward;
- engine: the engine tier's options (harness.engine_options.EngineOptions: runner, async scheduling, kernels,
  forward, copy timing);
- known_fixes: fuzz the fixed system (every applicable known issue's fix applied; a finding is then confirmed
  on stock) or stock vLLM: the judge's policy (harness/verdict.py), which names the fixes of each replay it makes;
- fixes: the known issues (ids) whose fixes a replay runs with, on top of the mutant; `replay` applies both
  (harness/patching.py) and nothing else, so the configuration is the whole truth of a replay;
- checkpoints: whether generated inputs may carry prefill checkpoint geometries (the fuzz mutator clears the
  bit where the tier cannot run them);
- model_config: `--model-config NAME|PATH` (engine tier): every generated scenario, and a replayed one that
  names no model, on that real model's geometry (harness/engine/model_geometry.py); None: generated
  scenarios draw from the shipped configs now and then;
- cache_mode: `--mamba-cache-mode align|none|all` (vLLM's CacheConfig.mamba_cache_mode; sweep and fuzz): every
  generated scenario in that mode; None: the engine tier draws the modes its runner runs (harness.genome);
- hidden_states: `--extract-hidden-states N` (engine tier; sweep and fuzz): every generated scenario runs vLLM's
  speculative method extract_hidden_states with N aux hidden-state layers (`geometry.hidden_state_layers`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from harness.engine_options import CHOICES, EngineOptions, engine_options
from harness.errors import BadInput

TIERS = ("symbolic", "model", "engine", "e2e")
MODELS = ("random", "trained")
# the variables an entry point reads (`from_env`) and a campaign writes for its workers (`to_env`)
ENV = {"tier": "HH_TIER", "mutant": "HH_MUTANT", "model": "HH_MODEL", "known_fixes": "HH_KNOWN_FIXES",
       "checkpoints": "HH_NO_CHECKPOINTS", "runner": "HH_ENGINE_RUNNER", "async_scheduling": "HH_ENGINE_ASYNC",
       "kernels": "HH_ENGINE_KERNELS", "forward": "HH_ENGINE_FORWARD", "copy_timing": "HH_ENGINE_COPY_TIMING",
       "model_config": "HH_MODEL_CONFIG", "cache_mode": "HH_MAMBA_CACHE_MODE", "hidden_states": "HH_HIDDEN_STATES",
       "e2e_model": "HH_E2E_MODEL", "witness_vllm": "HH_WITNESS_VLLM"}
CACHE_MODES = ("align", "none", "all")


@dataclass(frozen=True)
class RunConfig:
    tier: str = "symbolic"
    mutant: str | None = None
    model: str = "random"
    engine: EngineOptions = field(default_factory=EngineOptions)
    known_fixes: bool = True
    checkpoints: bool = True
    model_config: str | None = None
    cache_mode: str | None = None
    fixes: tuple[str, ...] = ()
    hidden_states: int | None = None
    e2e_model: str = "nemotron-h"  # tier e2e: the tiny local model's family (harness/e2e/models.py FAMILIES)
    # the vLLM tree whose runs witness liveness (harness/witness.py): the stock tree a patched one is fuzzed
    # against (`--witness-vllm`); None: the same vLLM without fixes and mutant, in this process
    witness_vllm: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fixes", tuple(dict.fromkeys(self.fixes or ())))
        object.__setattr__(self, "mutant", self.mutant or None)  # "" (an unset variable) is no mutant
        object.__setattr__(self, "model_config", self.model_config or None)
        object.__setattr__(self, "cache_mode", self.cache_mode or None)
        object.__setattr__(self, "witness_vllm", self.witness_vllm or None)
        if self.model_config and self.tier != "engine":
            raise BadInput("--model-config: a real model's KV cache groups are built on the engine tier (--tier engine)")
        if self.tier not in TIERS:
            raise BadInput(f"unknown tier {self.tier!r}: choose one of {', '.join(TIERS)}")
        from harness.e2e.families import FAMILIES

        if self.e2e_model not in FAMILIES:
            raise BadInput(f"unknown e2e model family {self.e2e_model!r}: choose one of {', '.join(FAMILIES)}")
        if self.model not in MODELS:
            raise BadInput(f"unknown model {self.model!r}: choose one of {', '.join(MODELS)}")
        if not isinstance(self.engine, EngineOptions):
            raise BadInput(f"engine options must be EngineOptions, not {type(self.engine).__name__}")
        self._check_cache_mode()
        self._check_hidden_states()

    def _check_hidden_states(self) -> None:
        n = self.hidden_states
        if n in (None, "", 0, "0"):
            object.__setattr__(self, "hidden_states", None)
            return
        if not str(n).isdigit() or not 1 <= int(n) <= 8:
            raise BadInput(f"--extract-hidden-states {n!r}: the aux hidden-state layers, 1 to 8")
        object.__setattr__(self, "hidden_states", int(n))
        if self.tier != "engine" or self.cache_mode not in (None, "align"):
            raise BadInput("--extract-hidden-states: a real model's groups in align mode, on the engine tier "
                           "(--tier engine)")

    def _check_cache_mode(self) -> None:
        """Where a pinned Mamba cache mode runs (the release's own modes are checked by harness.genome): none
        and all on the engine tier with vLLM's runners (the symbolic tier and the mirror worker follow align only),
        all on its V1 runner (vLLM's pick there on the releases that have it) and the harness's two-group geometry."""
        mode = self.cache_mode
        if mode is not None and mode not in CACHE_MODES:
            raise BadInput(f"unknown Mamba cache mode {mode!r}: choose one of {', '.join(CACHE_MODES)}")
        if mode in (None, "align"):
            return
        if self.tier != "engine" or self.engine.runner == "mirror":
            raise BadInput(f"--mamba-cache-mode {mode}: runs on the engine tier with vLLM's runners (--tier engine "
                           "--runner v1|v2|auto); the symbolic tier and the mirror worker follow align only")
        if mode == "all" and self.engine.runner == "v2":
            raise BadInput("--mamba-cache-mode all: vLLM's V2 runner has no mode all; use --runner v1")
        if mode == "all" and self.model_config:
            raise BadInput("--mamba-cache-mode all with --model-config: a real model's geometry is not followed in "
                           "mode all yet")

    @property
    def runs_model(self) -> bool:
        """The tiny LM runs (the model tier, or the engine tier with the model forward): such replays get the
        model tier's smaller scenarios (sweeps, fuzz budgets) and record the model."""
        return self.tier == "model" or (self.tier == "engine" and self.engine.forward == "model")

    def but(self, **changes) -> RunConfig:
        """This configuration with some fields changed; `runner=`, `forward=` ... change the engine options."""
        engine = {k: changes.pop(k) for k in list(changes) if k in CHOICES}
        if engine:
            changes["engine"] = replace(changes.get("engine", self.engine), **engine)
        return replace(self, **changes)

    def with_resolved(self, trace) -> RunConfig:
        """The configuration as a replay ran it: the engine tier's `auto` async scheduling resolved to what
        vLLM decided for the config (`trace.async_scheduling`), so a replay of the artifact runs it the same
        way even where `auto` would decide otherwise (another release, another runner)."""
        if self.tier != "engine" or self.engine.async_scheduling != "auto" or trace is None:
            return self
        decided = getattr(trace, "async_scheduling", None)
        return self if decided is None else self.but(async_scheduling="on" if decided else "off")

    # -- artifacts ---------------------------------------------------------------------------------------
    def as_json(self) -> dict:
        return {"tier": self.tier, "mutant": self.mutant, "model": self.model, "engine": asdict(self.engine),
                "known_fixes": self.known_fixes, "checkpoints": self.checkpoints, "model_config": self.model_config,
                "cache_mode": self.cache_mode, **({"fixes": list(self.fixes)} if self.fixes else {}),
                **({"hidden_states": self.hidden_states} if self.hidden_states else {}),
                **({"e2e_model": self.e2e_model} if self.tier == "e2e" else {}),
                **({"witness_vllm": self.witness_vllm} if self.witness_vllm else {})}

    @classmethod
    def from_json(cls, doc: Mapping) -> RunConfig:
        """A recorded configuration (`as_json`, or a finding artifact: its `config`, else the `tier`, `model`,
        `mutant` and `engine` fields older artifacts carry). BadInput for a value not allowed."""
        if not isinstance(doc, Mapping):
            raise BadInput(f"a run configuration is a JSON object, not {type(doc).__name__}")
        if isinstance(doc.get("config"), Mapping):
            doc = doc["config"]
        engine = doc.get("engine") or {}
        if not isinstance(engine, Mapping):
            raise BadInput("config engine: a JSON object of engine options")
        return cls(tier=doc.get("tier") or "symbolic", mutant=doc.get("mutant") or None,
                   model=doc.get("model") or "random", engine=engine_options(**engine),
                   known_fixes=bool(doc.get("known_fixes", True)), checkpoints=bool(doc.get("checkpoints", True)),
                   model_config=doc.get("model_config") or None, cache_mode=doc.get("cache_mode") or None,
                   fixes=_fix_ids(doc.get("fixes")), hidden_states=doc.get("hidden_states") or None,
                   e2e_model=doc.get("e2e_model") or "nemotron-h", witness_vllm=doc.get("witness_vllm") or None)

    # -- entry points --------------------------------------------------------------------------------------
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> RunConfig:
        """The configuration a process's environment names (entry points only); `overrides` (not None) win."""
        env = os.environ if environ is None else environ
        given = {k: env.get(v) or None for k, v in ENV.items()}
        known_fixes = given["known_fixes"]
        if known_fixes not in (None, "on", "off"):
            raise BadInput(f"{ENV['known_fixes']}={known_fixes!r}: choose on or off")
        values = {"tier": given["tier"] or "symbolic", "mutant": given["mutant"], "model": given["model"] or "random",
                  "known_fixes": known_fixes != "off", "checkpoints": not given["checkpoints"],
                  "model_config": given["model_config"], "cache_mode": given["cache_mode"],
                  "hidden_states": given["hidden_states"], "e2e_model": given["e2e_model"] or "nemotron-h",
                  "witness_vllm": given["witness_vllm"]}
        engine = {k: given[k] for k in CHOICES}
        for k, v in overrides.items():
            if v is None:
                continue
            (engine if k in CHOICES else values)[k] = v
        return cls(engine=engine_options(**engine, source="environment"), **values)

    def to_env(self) -> dict[str, str]:
        """The variables a worker process's entry point reads back into this configuration (`from_env`)."""
        env = {ENV["tier"]: self.tier, ENV["mutant"]: self.mutant or "", ENV["model"]: self.model,
               ENV["known_fixes"]: "on" if self.known_fixes else "off", ENV["checkpoints"]: "" if self.checkpoints else "1",
               ENV["model_config"]: self.model_config or "", ENV["cache_mode"]: self.cache_mode or "",
               ENV["hidden_states"]: str(self.hidden_states or ""), ENV["e2e_model"]: self.e2e_model,
               ENV["witness_vllm"]: self.witness_vllm or ""}
        env.update({ENV[k]: v for k, v in asdict(self.engine).items()})
        return env


def _fix_ids(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInput("config fixes: a list of known-issue ids")
    return tuple(value)


__all__ = ["CACHE_MODES", "ENV", "MODELS", "RunConfig", "TIERS"]
