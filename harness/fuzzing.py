"""What a fuzz target does with one input: decode, replay, judge, classify, keep findings on disk.

Every finding of an input is classified by the known issues' fixes (harness/verdict.py): an input is *new*
when any of its findings is unexplained (or revealed once a known fix lets the replay run on). The target
raises `Finding` for a new input every time it runs it (a crash file replays non-zero every time, whatever
is on disk), unless `keep_going` (campaign workers keep the finding on disk and go on instead of
paying a ~10 s restart); inputs whose findings are all known return normally. `HarnessFailure` is a harness
error, kept apart and never reported as a vLLM finding. Kept findings are deduplicated by their set of new
signatures (all-known inputs by their set of known ones), so a known finding never shadows a new one.

How bytes decode depends on the bytes, the installed release and the tier's budget (libFuzzer: a crash file
alone reproduces with its target). The run configuration (harness/run_config.py: tier, mutant, model, engine
options, known fixes, checkpoints) comes from the fuzz target's entry point (fuzz/*_target.py read it from
the environment a campaign wrote) and is recorded in every kept finding, so `hybrid-harness run
finding.json` replays it in an empty environment. known_fixes (the default): replay with the known fixes
applied and confirm a finding on stock; off: replay on stock. checkpoints off: the mutator clears the
prefill-checkpoint bit; an input that still has it (e.g. from the seed corpus) is passed over unrun.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import time
import traceback
from pathlib import Path

import psutil

import harness.engine  # noqa: F401 - vLLM's environment for its runners, set before vLLM loads (engine confirmation)
from harness.artifacts import write_json_atomic
from harness.errors import BadInput, HarnessError
from harness.genome import decode, generator_input, run_budget, without_checkpoints
from harness.verdict import Verdict, confirm_on_e2e, finding_artifact, judge_input, replay_and_judge
from harness.oracles import merge_output_summaries, output_summary
from harness.release import vllm_source
from harness.run_config import RunConfig
from harness.scenario import scenario_to_json


# fixed-system campaigns replay libFuzzer's first 64 inputs (the seed corpus, a replayed crash file) and every
# 16th clean input on stock to count known issues
KNOWN_FIRST, KNOWN_SAMPLE = 64, 16


class Finding(Exception):
    """An input with a new (unexplained) finding."""


class HarnessFailure(Exception):
    """The harness itself failed on this input; not a vLLM finding."""


class Target:
    def __init__(self, config: RunConfig | None = None, artifacts: str | os.PathLike = "artifacts/fuzz",
                 keep_going: bool = False) -> None:
        """`keep_going`: a campaign worker keeps a new finding on disk and goes on instead of raising."""
        from harness.patching import patched
        from harness.vllm_adapter import installed_version, load_vllm

        load_vllm()
        self.config = config or RunConfig()
        self.version = installed_version()
        self.mutant, self.tier = self.config.mutant, self.config.tier
        # the mutant goes on once for the process (every replay's configuration names it, so none applies it again)
        self._patches = contextlib.ExitStack()
        self._patches.enter_context(patched(RunConfig(mutant=self.mutant)))
        # engine --forward model too; mode none only with vLLM's own runners
        self.budget = run_budget(self.config)
        # the mutator clears the checkpoint bit; inputs that have it are passed over, never decoded otherwise
        self.no_checkpoints = not self.config.checkpoints
        self.dir = Path(artifacts)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.execs = 0
        self.on_trace = None  # callable(trace), called after every replay
        self.keep_going = keep_going
        # model tier: generations judged and their symptoms, flushed to ARTIFACTS/../outputs/PID.json (the
        # campaign sums the files into its repeat rate; libFuzzer exits without running Python's atexit)
        self.outputs: dict | None = None
        self.first_exec: float | None = None  # time.monotonic() of the first input (end of start-up)
        self.startup_s: float | None = None
        self.swept = 0  # inputs of the opening sweep (`opening_sweep`), before libFuzzer's first
        # a campaign worker judges each set of signatures once (harness.verdict.replay_and_judge `judged`); a
        # crash file replayed alone (not keep_going) is judged in full every time
        self.judged: dict | None = {} if keep_going else None
        self.deduplicated = 0  # inputs whose signatures were judged before (skipped judging)
        self._warm_up()

    def _warm_up(self) -> None:
        """The first replays pay one-off costs (lazy imports; vLLM's config, Scheduler and runner built for
        the engine tier that confirms a symbolic finding): ~1.5 s, paid here as part of start-up, so a time to
        detect counts the search, not the warm-up. The result is discarded."""
        from harness.generate import random_scenario

        scenario = random_scenario(0, checkpoints=False, small=self.config.runs_model)
        configs = [self.config] + ([self.config.but(tier="engine")] if self.tier == "symbolic" else [])
        for config in configs:
            with contextlib.suppress(HarnessError, BadInput):
                replay_and_judge(scenario, config=config)

    def __call__(self, data: bytes, swept: bool = False) -> None:
        """Judge one input; `swept`: an input of the opening sweep (`opening_sweep`), not libFuzzer's."""
        if self.no_checkpoints and without_checkpoints(data) != data:
            return  # a checkpoint geometry this campaign's tier cannot run (the V1 worker): not its input
        self.execs += 1
        self.swept += swept
        if self.first_exec is None:
            self.first_exec = time.monotonic()
            self.startup_s = round(time.time() - psutil.Process().create_time(), 2)
        scenario = decode(data, self.budget)
        try:
            # where the fixed system is clean, libFuzzer's first inputs (the seed corpus, a replayed crash file) and
            # every KNOWN_SAMPLE-th one are replayed on stock too, so a campaign still reports the known issues it reached
            first = not swept and self.execs - self.swept <= KNOWN_FIRST
            before = len(self.judged) if self.judged is not None else 0
            trace, findings, verdict = judge_input(scenario, self.config, judged=self.judged,
                                                   report_known=first or self.execs % KNOWN_SAMPLE == 0)
            if verdict is not None and self.judged is not None and len(self.judged) == before:
                self.deduplicated += 1
        except (HarnessError, BadInput) as exc:
            self._keep_error(data, scenario, exc)
            raise HarnessFailure(str(exc)) from exc
        except Exception as exc:  # a bug in the harness: kept, never reported as vLLM's
            self._keep_error(data, scenario, exc)
            raise HarnessFailure(repr(exc)) from exc
        if self.on_trace is not None:  # the fuzz target's state coverage (harness/state_coverage.py)
            self.on_trace(trace)
        if trace.outputs is not None:
            self._count_outputs(trace)
        if verdict is None:
            return
        folder = self.dir / f"finding-{verdict.key}"
        if not folder.exists():
            self._keep_finding(folder, data, scenario, findings, verdict, trace)
            self._flush_outputs()
        if verdict.is_new and not self.keep_going:
            head = next((f for f in findings if f.signature in verdict.unexplained), findings[0])
            raise Finding(f"new: {', '.join(verdict.new)}; known: {verdict.known or 'none'}; {head.headline()} "
                          f"(kept in {folder})")

    def close(self) -> None:
        """Undo the mutant (a worker process never needs to; an in-process user does)."""
        self._patches.close()

    def _count_outputs(self, trace) -> None:
        self.outputs = merge_output_summaries(self.outputs, output_summary(trace))
        if self.execs % 50 == 0:
            self._flush_outputs()

    def _flush_outputs(self) -> None:
        if self.outputs:
            write_json_atomic(self.dir.parent / "outputs" / f"{os.getpid()}.json", self.outputs)

    def _keep_finding(self, folder: Path, data: bytes, scenario, findings, verdict: Verdict, trace) -> None:
        """Raw input, decoded scenario and trace excerpt, each written atomically, the folder renamed in last."""
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "input.bin").write_bytes(data)
        artifact = finding_artifact(scenario, findings, self.version, self.config, verdict, trace)
        artifact = artifact.but(detection={"execs": self.execs, "startup_s": self.startup_s,
                                           "after_startup_s": round(time.monotonic() - self.first_exec, 3)})
        if artifact.e2e is None:  # a kept finding (never every input) replayed on vLLM's whole engine
            artifact = artifact.but(e2e=confirm_on_e2e(scenario, self.config, verdict))
        write_json_atomic(tmp / "finding.json", artifact.as_json())
        write_json_atomic(tmp / "scenario.json", scenario_to_json(scenario))
        try:
            os.rename(tmp, folder)
        except OSError:  # another worker kept the same signature first
            for p in tmp.iterdir():
                p.unlink()
            tmp.rmdir()

    def _keep_error(self, data: bytes, scenario, exc: BaseException) -> None:
        folder = self.dir / "harness-errors"
        folder.mkdir(exist_ok=True)
        digest = hashlib.sha1(data).hexdigest()[:12]
        (folder / f"{digest}.bin").write_bytes(data)
        write_json_atomic(folder / f"{digest}.json", {
            "kind": "hybrid-harness-error", "error": repr(exc),
            "traceback": "".join(traceback.format_exception(exc)), "scenario": scenario_to_json(scenario),
            **vllm_source().as_json(), "config": self.config.as_json()})  # `run FILE` replays it as it ran


def opening_sweep(target: Target, seed: int, count: int, seconds: float, first: list[Path] = ()) -> int:
    """A campaign worker's opening: the inputs `first` (the seed corpus: hand-made, each aimed at a bug class),
    then up to `count` of the sweep's own scenarios (generator inputs with every feature on, from a stream fixed by
    the worker's libFuzzer seed), for at most `seconds` in all; judged and kept like any input. The fuzz target
    runs it before it instruments anything for coverage, at the sweep's speed (~2x that of an instrumented
    replay): most bank bugs show within the sweep's first seeds, so the campaign reaches them as soon as the sweep
    would. Returns how many sweep scenarios ran. Harness errors are kept on disk by the target and passed."""
    rng, start = random.Random(f"opening-sweep:{seed}"), time.monotonic()
    inputs = [path.read_bytes() for path in first]
    while time.monotonic() - start < seconds and (inputs or target.swept < count):
        if inputs:
            data, swept = inputs.pop(0), False
        else:
            data, swept = generator_input(rng, mask=0), True
        with contextlib.suppress(HarnessFailure):
            target(without_checkpoints(data) if target.no_checkpoints and swept else data, swept=swept)
    return target.swept

