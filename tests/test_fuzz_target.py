"""The atheris target replays a crash file like any libFuzzer target, and a short campaign keeps findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.cli import main

from testlib import ROOT, seed_bug_release

SEED_INPUT = ROOT / "fuzz" / "corpus" / "symbolic" / "seed-external-hit-same-block"
MUTANT = "seed-unmarked-early-return"
# 0.26.0-0.27.1 ship the seed bug, a known issue there: the campaigns fuzz the fixed release (its fix applied),
# where the mutant, which the fix overrides, is not a new bug (test_seed.py judges the published one)
needs_seed_mutant = pytest.mark.skipif(seed_bug_release, reason="0.26.0-0.27.1: the seed bug is known issue "
                                       "seed-external-hit-unmarked there, the mutant brings back nothing new")


def _replay(tmp_path, mutant: str) -> subprocess.CompletedProcess:
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HH_ARTIFACTS=str(tmp_path / "art"), HH_MUTANT=mutant, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "fuzz" / "symbolic_target.py"), str(SEED_INPUT)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_crash_file_replays_and_keeps_the_finding(tmp_path):
    """A new finding crashes the target (libFuzzer keeps the input); on a release that ships the seed bug the
    same input's finding is kept too, judged known by its fix, and is no crash."""
    bad = _replay(tmp_path, "" if seed_bug_release else MUTANT)
    assert (bad.returncode == 0) == seed_bug_release
    (folder,) = (tmp_path / "art").glob("finding-*")
    doc = json.loads((folder / "finding.json").read_text())
    assert doc["signature"].startswith("live-column") and (folder / "input.bin").read_bytes() == SEED_INPUT.read_bytes()
    if seed_bug_release:
        assert not doc["verdict"]["new"] and set(doc["verdict"]["known"].values()) == {"seed-external-hit-unmarked"}
    else:
        assert "live-column" in bad.stdout + bad.stderr and doc["verdict"]["new"]
        assert _replay(tmp_path / "clean", "").returncode == 0


@needs_seed_mutant
def test_short_campaign_keeps_minimizes_and_exits_1(tmp_path, capsys):
    args = ["fuzz", "--runs", "20", "--seed-corpus", "--artifacts", str(tmp_path), "--no-progress",
            "--checkpoints", "off", "--mutant", MUTANT]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "live-column" in out
    folders = [p for p in (tmp_path / "findings").glob("finding-*")]
    assert any((p / "minimized.json").exists() and (p / "test_regression.py").exists() for p in folders)
    assert (tmp_path / "campaign.json").exists() and (tmp_path / "stats.jsonl").read_text()


@needs_seed_mutant
def test_model_target_replays_in_the_model_tier(tmp_path):
    env = dict(os.environ, HH_ARTIFACTS=str(tmp_path / "art"), HH_MUTANT=MUTANT, PYTHONPATH=str(ROOT))
    bad = subprocess.run([sys.executable, str(ROOT / "fuzz" / "model_target.py"), str(SEED_INPUT)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode != 0, bad.stderr[-2000:]
    (folder,) = (tmp_path / "art").glob("finding-*")
    doc = json.loads((folder / "finding.json").read_text())
    assert doc["tier"] == "model" and doc["signature"].startswith("live-column")
    assert "output" in {f["oracle"] for f in doc["findings"]}  # the wrong state reaches the tokens' logits
    outputs = json.loads(next((tmp_path / "outputs").glob("*.json")).read_text())
    assert outputs["generations"] >= 2 and outputs["diverged"] >= 1


@needs_seed_mutant
def test_engine_target_replays_on_vllms_scheduler_and_records_the_worker(tmp_path):
    """The engine target decodes the seed input to its align-mode form and replays it on vLLM's Scheduler:
    the mutant's finding is kept with the engine options it was found with."""
    env = dict(os.environ, HH_ARTIFACTS=str(tmp_path / "art"), HH_MUTANT=MUTANT, PYTHONPATH=str(ROOT),
               HH_ENGINE_RUNNER="mirror")
    bad = subprocess.run([sys.executable, str(ROOT / "fuzz" / "engine_target.py"), str(SEED_INPUT)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode != 0, bad.stderr[-2000:]
    (folder,) = (tmp_path / "art").glob("finding-*")
    doc = json.loads((folder / "finding.json").read_text())
    assert doc["tier"] == "engine" and doc["engine"]["runner"] == "mirror"
    g = doc["scenario"]["geometry"]
    assert g["attn_block_size"] == g["mamba_block_size"]  # only geometries vLLM builds in align mode
    assert {f["oracle"] for f in doc["findings"]} & {"live-column", "provenance"}


def test_campaign_without_checkpoints_passes_over_checkpoint_inputs(tmp_path):
    """`fuzz --checkpoints off`: an input that has the checkpoint bit, e.g. from the seed corpus, is
    passed over unrun, not turned into bad input (a harness error) nor decoded otherwise; without the bit it
    runs."""
    from harness.cli import _checkpoints
    from harness.fuzzing import Target
    from harness.run_config import RunConfig
    from harness.genome import FLAGS_BYTE, without_checkpoints

    target = Target(RunConfig(checkpoints=False), artifacts=tmp_path / "art")
    data = bytearray(SEED_INPUT.read_bytes())
    data[FLAGS_BYTE] |= 1
    target(bytes(data))
    assert target.execs == 0 and not (tmp_path / "art" / "harness-errors").exists()
    target(without_checkpoints(bytes(data)))  # stock: nothing new (0.26.0-0.27.1: the seed bug, a known issue)
    assert target.execs == 1
    assert _checkpoints("auto") and _checkpoints("on") and not _checkpoints("off")


def test_opening_sweep_replays_the_sweeps_scenarios_and_keeps_findings(tmp_path):
    """A campaign worker's opening sweep: the sweep's own scenarios (generator inputs, every feature on), judged
    and kept like libFuzzer's inputs; only every 16th clean one is replayed on stock as well."""
    from harness import fuzzing, genome
    from harness.run_config import RunConfig

    target = fuzzing.Target(RunConfig(mutant="mamba-free-leaks-block"), artifacts=tmp_path / "bad", keep_going=True)
    try:
        assert fuzzing.opening_sweep(target, seed=7, count=12, seconds=120) == 12 == target.execs
    finally:
        target.close()
    kept = list((tmp_path / "bad").glob("finding-*"))
    assert kept, "the mutant frees no block and shows in almost every sweep scenario"
    data = (kept[0] / "input.bin").read_bytes()
    assert genome.is_generator_input(data) and genome.generator_fields(data)[1] == 0 and genome.generator_draws(data)
    assert json.loads((kept[0] / "finding.json").read_text())["verdict"]["new"]
    stock = fuzzing.Target(RunConfig(), artifacts=tmp_path / "stock", keep_going=True)
    assert fuzzing.opening_sweep(stock, seed=7, count=5, seconds=0.0) == 0  # the time cap holds
    fuzzing.opening_sweep(stock, seed=7, count=12, seconds=120)
    assert not [p for p in (tmp_path / "stock").glob("finding-*")
                if json.loads((p / "finding.json").read_text())["verdict"]["new"]]
    # the seed corpus's inputs run first, before any sweep scenario: the seed bug's input is kept where it fires
    seeded = fuzzing.Target(RunConfig(), artifacts=tmp_path / "seeded", keep_going=True)
    assert fuzzing.opening_sweep(seeded, seed=7, count=0, seconds=120, first=[SEED_INPUT]) == 0 == seeded.execs - 1
    assert bool(list((tmp_path / "seeded").glob("finding-*"))) == seed_bug_release


def test_a_campaign_worker_judges_each_signature_set_once_and_still_judges_a_second_bug(tmp_path, monkeypatch):
    """ClusterFuzz-style deduplication: an input whose findings show a signature set judged before is not judged
    again (no replays with fixes or on stock); an input with one more signature is. Two mutants planted together
    ("A+B") both show."""
    from harness import fuzzing, genome, verdict
    from harness.run_config import RunConfig

    calls = []
    confirm = verdict.confirm_on_stock
    monkeypatch.setattr(verdict, "confirm_on_stock", lambda *a, **k: calls.append(1) or confirm(*a, **k))
    target = fuzzing.Target(RunConfig(mutant="mamba-free-leaks-block+cow-copies-dropped"), artifacts=tmp_path,
                            keep_going=True)
    calls.clear()  # the target's warm-up judged one scenario outside any campaign
    try:
        import random

        rng = random.Random(3)
        for _ in range(30):
            target(genome.generator_input(rng, mask=0))
    finally:
        target.close()
    # each judged set once: on the fixed system's stock replay and, being new, on the engine tier's
    assert target.deduplicated + len(target.judged) >= 27 and len(calls) <= 2 * len(target.judged) < 30
    signatures = set().union(*(sigs for _, sigs in target.judged))
    assert "pool-accounting" in signatures and "cache-integrity" in signatures  # both bugs, each kept
    kept = {s for p in tmp_path.glob("finding-*") for s in json.loads((p / "finding.json").read_text())["verdict"]["unexplained"]}
    assert {"pool-accounting", "cache-integrity"} <= kept
    crash_replay = fuzzing.Target(RunConfig(), artifacts=tmp_path / "alone")
    assert crash_replay.judged is None  # a crash file replayed alone is judged in full every time
    crash_replay.close()


def test_mutants_planted_together_apply_and_undo_in_order():
    from harness.errors import BadInput
    from harness.mutants import get_mutant

    both = get_mutant("cow-copies-dropped+mamba-free-leaks-block")
    assert both.tier == "symbolic" and not both.is_applied()
    undo = both.apply()
    try:
        assert both.is_applied() and get_mutant("cow-copies-dropped").is_applied()
    finally:
        undo()
    assert not get_mutant("cow-copies-dropped").is_applied() and not get_mutant("mamba-free-leaks-block").is_applied()
    with pytest.raises(BadInput):
        get_mutant("cow-copies-dropped+no-such-mutant")


@pytest.mark.slow
def test_main_job_runs_the_symbolic_and_the_engine_tier_side_by_side(tmp_path, capsys):
    """`make fuzz`'s default (--tier main): the symbolic campaign under ARTIFACTS and one engine-tier worker (vLLM's
    own Scheduler) under ARTIFACTS/engine; its exit is the more serious of the two."""
    code = main(["fuzz", "--tier", "main", "--runs", "6", "--seed-corpus", "--artifacts", str(tmp_path),
                 "--no-progress", "--no-minimize", "--checkpoints", "off"])
    out = capsys.readouterr().out
    symbolic = json.loads((tmp_path / "campaign.json").read_text())
    engine = json.loads((tmp_path / "engine" / "campaign.json").read_text())
    assert (symbolic["target"], engine["target"]) == ("symbolic", "engine")
    assert symbolic["execs"] >= 6 and engine["execs"] >= 6
    assert "main job, engine tier" in out
    assert code == (1 if any(v["new"] for c in (symbolic, engine) for v in c["verdicts"].values()) else 0)
