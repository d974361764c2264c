"""`hybrid-harness fuzz`: a resumable atheris campaign over several libFuzzer worker processes.

Layout under --artifacts DIR: `findings/finding-<sig>/` (input.bin, finding.json, scenario.json, then
minimized.json and test_regression.py), `findings/harness-errors/`, `crashes/` (libFuzzer's own files),
`stats.jsonl` (a sample per second: execs, coverage, corpus, findings) and `campaign.json` (summary).
The corpus directory persists between campaigns. Workers keep fuzzing after they keep a finding
(HH_KEEP_GOING: a restart would cost a ~10 s vLLM import each time); a worker that stops anyway (a harness
error, libFuzzer's own crash) is restarted with a new seed until the time or run budget is spent. Findings
and corpus entries are on disk before they are reported, so Ctrl-C or a kill loses neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.artifacts import FindingArtifact, write_json_atomic
from harness.errors import BadInput
from harness.verdict import new_signatures
from harness.release import TREE_ENV, child_pythonpath, vllm_source
from harness.run_config import TIERS, RunConfig

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {t: ROOT / "fuzz" / f"{t}_target.py" for t in TIERS}  # every tier has an atheris target
# each target's own seed corpus and dictionary (the model tier decodes the same bytes into smaller scenarios)
SEED_CORPORA = {t: ROOT / "fuzz" / "corpus" / t for t in TARGETS}
DICTIONARIES = {t: ROOT / "fuzz" / f"{t}.dict" for t in TARGETS}
# libFuzzer flags every worker gets. -len_control=0: no slowly growing length cap, so the full-layout inputs
# the custom mutator builds (7 geometry bytes + 12 per request) are not cut short early in a campaign
# (time-to-detect of the shallow seed bug is the same either way: bench/results/time_to_detect.md).
LIBFUZZER_FLAGS = ["-max_len=128", "-len_control=0"]
# a worker's opening sweep (fuzz/symbolic_target.py): the sweep's own scenarios, uninstrumented, before libFuzzer
# starts, for OPENING_SHARE of a timed campaign's budget; a campaign of N runs (deterministic) sweeps a quarter of
# its runs, at most this many
OPENING_SHARE = 0.05
OPENING_RUNS = {"symbolic": 512, "engine": 64, "model": 64, "e2e": 32}
OPENING_LINE = re.compile(r"HH opening sweep: (\d+) scenarios")
STAT_LINE = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+.*?exec/s: (\d+)")


@dataclass
class WorkerState:
    index: int
    proc: subprocess.Popen | None = None
    execs_done: int = 0  # from finished runs of this worker slot
    execs: int = 0  # current run
    swept: int = 0  # the opening sweep's scenarios (first run only)
    cov: int = 0
    corpus: int = 0
    exec_rate: int = 0
    restarts: int = 0
    log: list[str] = field(default_factory=list)


@dataclass
class Campaign:
    config: RunConfig  # tier (the target), mutant, model, engine options, known fixes, checkpoints: workers get it
    corpus: Path
    artifacts: Path
    jobs: int
    seconds: float | None
    runs: int | None
    seed: int
    seed_corpus: bool
    progress: bool = True
    # search settings only (HH_GENERATOR_SHARE, HH_STATE_COVERAGE, HH_SWEEP_FIRST; HH_OPENING_SWEEP="0,0": none)
    extra_env: dict = field(default_factory=dict)
    # end the campaign once it keeps a new finding (what `hybrid-harness fuzz` exits 1 on): `mutants check`
    # measures time to the first kill, and the rest of a killed trial's budget would measure nothing
    stop_on_new: bool = False

    @property
    def target(self) -> str:
        return self.config.tier

    @property
    def mutant(self) -> str | None:
        return self.config.mutant

    def __post_init__(self) -> None:
        # the workers run in the repository (cwd=ROOT): a relative folder is the user's, resolved here against the
        # campaign's own working directory, so the workers' corpus, crash and findings folders are the campaign's
        # (relative, a worker started from elsewhere read a corpus folder that did not exist and was restarted
        # for ever, each start failing at once)
        self.corpus, self.artifacts = Path(self.corpus).resolve(), Path(self.artifacts).resolve()
        self.findings_dir = self.artifacts / "findings"
        self.crash_dir = self.artifacts / "crashes"
        for d in (self.corpus, self.findings_dir, self.crash_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.workers = [WorkerState(i) for i in range(self.jobs)]
        self.started = time.monotonic()
        self.stop = False
        self._owners: dict[str, bool] = {}  # finding folder -> kept by this configuration (_ours)
        self._new: dict[str, bool] = {}  # finding folder kept this run -> its verdict is new (new_kept)
        self.known_before = self.kept_findings()

    def kept_findings(self) -> list[Path]:
        """The findings kept in this artifacts folder by campaigns of this configuration (vLLM release, mutant,
        tier): a verdict holds for the configuration that judged it, so a finding kept by a campaign on another
        release or with another mutant neither counts here nor is lost (`foreign_findings`)."""
        return [p for p in self._all_findings() if self._ours(p)]

    def foreign_findings(self) -> list[Path]:
        return [p for p in self._all_findings() if not self._ours(p)]

    def _all_findings(self) -> list[Path]:
        return sorted(p for p in self.findings_dir.glob("finding-*") if p.is_dir() and "." not in p.name)

    def _ours(self, folder: Path) -> bool:
        """Read once per folder (the progress bar asks every second): the configuration a finding was kept
        under does not change (minimization rewrites the files, not who found it)."""
        if folder.name not in self._owners:
            self._owners[folder.name] = self._judged_here(folder)
        return self._owners[folder.name]

    def _judged_here(self, folder: Path) -> bool:
        source = vllm_source()
        try:
            found = FindingArtifact.read(folder, strict=False)
        except BadInput:
            return True  # unreadable: judged (and reported) as this campaign's, never silently dropped
        return ((found.vllm_version or source.version) == source.version
                and found.vllm_commit == source.commit
                and (found.mutant or None) == (self.mutant or None)
                and (found.tier or self.target) == self.target)

    # -- workers ----------------------------------------------------------------------------------
    def _spawn(self, w: WorkerState) -> None:
        cmd = [sys.executable, str(TARGETS[self.target]), str(self.corpus)]
        if self.seed_corpus:
            cmd.append(str(SEED_CORPORA[self.target]))
        cmd += [f"-seed={self.seed + 1000 * w.index + w.restarts + 1}", *LIBFUZZER_FLAGS,
                f"-artifact_prefix={self.crash_dir}/", "-print_final_stats=1", "-reload=1"]
        if DICTIONARIES[self.target].exists():
            cmd.append(f"-dict={DICTIONARIES[self.target]}")
        if self.seconds is not None:
            cmd.append(f"-max_total_time={max(1, int(self.remaining()))}")
        if self.runs is not None:
            cmd.append(f"-runs={max(1, self.runs // self.jobs - w.execs_done)}")
        # the worker's entry point reads its run configuration back from these (RunConfig.from_env)
        # the user's PYTHONPATH kept (the repository appended), and the vLLM tree this campaign runs passed on
        # explicitly, so every worker imports the vLLM the campaign judged with (harness/release.py)
        env = dict(os.environ, HH_ARTIFACTS=str(self.findings_dir), PYTHONPATH=child_pythonpath(str(ROOT)),
                   HH_KEEP_GOING="1")
        source = vllm_source()
        if source.kind != "installed":
            env[TREE_ENV] = source.path
        env.update(self.config.to_env())
        if w.restarts == 0:  # a restarted worker goes straight back to libFuzzer
            count, seconds = ((10**9, OPENING_SHARE * self.seconds) if self.seconds is not None
                              else (min(OPENING_RUNS[self.target], (self.runs or 0) // self.jobs // 4), 10**9))
            first = SEED_CORPORA[self.target] if self.seed_corpus else ""  # hand-made inputs run first
            env["HH_OPENING_SWEEP"] = f"{count},{seconds:.1f},{first}"
        env.update(self.extra_env)
        w.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                  cwd=ROOT, start_new_session=True)
        threading.Thread(target=self._read, args=(w, w.proc), daemon=True).start()

    def _read(self, w: WorkerState, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            m = STAT_LINE.search(line)
            if m:
                w.execs, w.cov, _, w.corpus, w.exec_rate = map(int, m.groups())
            elif opening := OPENING_LINE.search(line):
                w.swept = int(opening.group(1))
            w.log.append(line.rstrip())
            del w.log[:-200]

    def remaining(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - (time.monotonic() - self.started)

    def execs(self) -> int:
        return sum(w.execs_done + w.execs + w.swept for w in self.workers)

    def _budget_left(self, w: WorkerState) -> bool:
        if self.stop or self.remaining() <= 1:
            return False
        return self.runs is None or w.execs_done < self.runs // self.jobs

    # -- main loop ----------------------------------------------------------------------------------
    def run(self) -> dict:
        stats_path = self.artifacts / "stats.jsonl"
        for w in self.workers:
            self._spawn(w)
        previous = signal.signal(signal.SIGTERM, lambda *_: self._request_stop())
        progress = _Progress(self) if self.progress else None
        try:
            with open(stats_path, "a") as stats:
                while True:
                    alive = 0
                    for w in self.workers:
                        if w.proc is None:
                            continue
                        if w.proc.poll() is None:
                            alive += 1
                            continue
                        w.execs_done += w.execs
                        w.execs = 0
                        w.proc = None
                        if self._budget_left(w):
                            w.restarts += 1
                            self._spawn(w)
                            alive += 1
                    sample = self.sample()
                    stats.write(json.dumps(sample) + "\n")
                    stats.flush()
                    if progress:
                        progress.update(sample)
                    if not alive or (self.stop_on_new and self.new_kept()):
                        break
                    if self.remaining() < -30:  # workers ignore -max_total_time while a slow input runs
                        self._request_stop()
                    time.sleep(1.0)
        except KeyboardInterrupt:
            self._request_stop()
        finally:
            self._terminate()
            if progress:
                progress.close()
            signal.signal(signal.SIGTERM, previous)
        return self.summary()

    def new_kept(self) -> bool:
        """A finding this campaign kept is new (departures and known-only inputs are not). Each folder's verdict
        is read once (asked every second; a kept verdict does not change)."""
        for p in self.kept_findings():
            if p not in self.known_before and p.name not in self._new:
                self._new[p.name] = finding_verdict(p)["new"]
        return any(self._new.values())

    def _request_stop(self) -> None:
        self.stop = True
        self._terminate()

    def _terminate(self) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                try:
                    os.killpg(w.proc.pid, signal.SIGINT)
                    w.proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(w.proc.pid, signal.SIGKILL)

    def sample(self) -> dict:
        elapsed = time.monotonic() - self.started
        return {"t": round(elapsed, 2), "execs": self.execs(), "cov": max((w.cov for w in self.workers), default=0),
                "corpus": len(list(self.corpus.iterdir())), "findings": len(self.kept_findings()),
                "harness_errors": len(list((self.findings_dir / "harness-errors").glob("*.json")))
                if (self.findings_dir / "harness-errors").exists() else 0}

    def outputs(self) -> dict | None:
        """Model tier: generations judged by every worker and their symptoms (None for the symbolic tier)."""
        from harness.oracles import merge_output_summaries

        total = None
        for path in (self.artifacts / "outputs").glob("*.json"):
            with contextlib.suppress(OSError, json.JSONDecodeError):
                total = merge_output_summaries(total, json.loads(path.read_text()))
        return total

    def summary(self) -> dict:
        elapsed = time.monotonic() - self.started
        found = self.kept_findings()
        new = [p for p in found if p not in self.known_before]
        out = dict(self.sample(), elapsed=round(elapsed, 1), execs_per_s=round(self.execs() / max(elapsed, 1e-9), 1),
                   jobs=self.jobs, mutant=self.mutant, target=self.target, corpus_dir=str(self.corpus),
                   findings_total=len(found), findings_new=[p.name for p in new],
                   findings_other_configurations=[p.name for p in self.foreign_findings()],
                   verdicts={p.name: finding_verdict(p) for p in found}, outputs=self.outputs())
        out["config"] = self.config.as_json()
        out.update(vllm_source().as_json())
        if self.target == "engine":  # the options the workers ran with
            out["engine"] = self.config.engine.as_json()
        out["findings_new_signatures"] = sorted({s for v in out["verdicts"].values() if v["new"]
                                                 for s in new_signatures(v)})
        write_json_atomic(self.artifacts / "campaign.json", out)
        from harness.report import render

        render(self.artifacts)
        return out




def finding_verdict(folder: Path) -> dict:
    """A kept finding's verdict (harness.verdict.Verdict.to_json): which signatures are known, which new."""
    return FindingArtifact.read(folder, strict=False).verdict_or_new


class _Progress:
    """A live bar: elapsed/remaining, execs and execs/s, coverage, corpus, findings."""

    def __init__(self, campaign: Campaign) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.c = campaign
        total = campaign.seconds if campaign.seconds is not None else float(campaign.runs or 1)
        self.p = Progress(TextColumn("[bold]fuzz[/]"), BarColumn(), TimeElapsedColumn(), TextColumn("/"),
                          TimeRemainingColumn(), TextColumn("{task.fields[line]}"), transient=False,
                          disable=not sys.stderr.isatty())
        self.task = self.p.add_task("fuzz", total=total, line="")
        self.p.start()
        self.last_print = 0.0

    def update(self, s: dict) -> None:
        rate = s["execs"] / max(s["t"], 1e-9)
        line = (f"execs {s['execs']} ({rate:.0f}/s)  cov {s['cov']}  corpus {s['corpus']}  "
                f"findings {s['findings']}  harness-errors {s['harness_errors']}")
        done = s["t"] if self.c.seconds is not None else s["execs"]
        self.p.update(self.task, completed=min(done, self.p.tasks[0].total), line=line)
        if self.p.disable and s["t"] - self.last_print >= 10:  # plain log lines when not on a terminal
            self.last_print = s["t"]
            print(f"[{s['t']:7.1f}s] {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.p.stop()
