"""The SGLang wing (harness/sglang/): replays on SGLang's own code in its own venv (.venv-sglang, `make
venv-sglang`), run here as a subprocess (the import wall between the two engines: tests/test_package_layout.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.engines import SGLANG_PYTHON, sglang_wing

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SHARED = DATA / "sglang-shared-prefix.json"
CHUNKED = DATA / "sglang-shared-prefix-chunked.json"
SPEC = DATA / "sglang-spec.json"


def wing(*args: str) -> subprocess.CompletedProcess:
    if not SGLANG_PYTHON.exists():
        pytest.skip(f"no SGLang venv at {SGLANG_PYTHON} (make venv-sglang builds it)")
    return sglang_wing(*args, capture=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [SHARED, CHUNKED], ids=["whole", "chunked"])
def test_stock_sglang_is_clean(scenario):
    out = wing(str(scenario))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


@pytest.mark.slow
def test_planted_cow_bug_is_a_provenance_finding():
    out = wing(str(CHUNKED), "--mutant", "sglang-cow-source-dropped", "--json")
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    first = json.loads(out.stdout)[0]
    assert (first["oracle"], first["request"], first["expected"]) == ("provenance", "c", "state of a[:40]")


@pytest.mark.slow
def test_a_generator_sweep_is_clean_on_stock_and_writes_what_the_planted_bug_shows(tmp_path):
    stock = wing("sweep", "--count", "30", "--artifacts", str(tmp_path / "stock"))
    assert stock.returncode == 0 and not (tmp_path / "stock").exists(), stock.stdout + stock.stderr[-3000:]
    planted = wing("sweep", "--count", "30", "--mutant", "sglang-cow-source-dropped",
                   "--artifacts", str(tmp_path / "m"))
    assert planted.returncode == 1, planted.stdout + planted.stderr[-3000:]
    kept = [json.loads(p.read_text()) for p in (tmp_path / "m").glob("finding-*.json")]
    assert kept and all(k["findings"] and k["scenario"]["requests"] for k in kept)


@pytest.mark.slow
@pytest.mark.parametrize("mutant,count", [("sglang-cow-args-swapped", 40), ("sglang-track-seqlen-page-early", 40),
                                          ("sglang-decode-track-idx-stale", 40),
                                          ("sglang-force-track-h-no-plus-one", 40),
                                          ("sglang-spec-commit-step-one-short", 10),
                                          ("sglang-spec-track-step-one-early", 10),
                                          ("sglang-spec-track-boundary-seqlen-late", 20)])
def test_the_sglang_mutant_bank_is_killed_by_a_short_sweep(tmp_path, mutant, count):
    out = wing("sweep", "--count", str(count), "--mutant", mutant, "--artifacts", str(tmp_path))
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]


def _summary(*args: str) -> dict:
    out = wing(*args, "--summary")
    assert out.returncode in (0, 1), out.stdout + out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["extra_buffer", "no_buffer"])
def test_an_external_hit_is_loaded_through_sglangs_linker_and_a_load_that_skips_its_cow_is_found(strategy):
    """c's device hit (a's state at 40) queues a copy-on-write; the store's longer hit (48) must supersede it
    (mamba.py:784-790). harness/sglang/linker.py is the store SGLang's own factory loads."""
    path = str(DATA / "sglang-external.json")
    stock = _summary(path, "--strategy", strategy)
    assert stock["findings"] == [] and stock["served"]["c"] == 48 and stock["state_reads"]["c"][0] == 48
    slip = _summary(path, "--strategy", strategy, "--mutant", "sglang-linker-load-keeps-cow")
    assert slip["state_reads"]["c"][0] == 40 and any("[provenance]" in f for f in slip["findings"])


@pytest.mark.slow
def test_a_failed_external_load_aborts_its_request_and_a_failure_read_as_landed_is_found():
    """SGLang aborts a request whose load failed and drops what its kernel read (unified_cache_linker.py:570-600);
    a counter that takes a failed layer for a landed one lets it run on a slot the load never wrote."""
    path = str(DATA / "sglang-external-load-fails.json")
    stock = _summary(path)
    assert stock["findings"] == [] and "c" not in stock["state_reads"]
    slip = _summary(path, "--mutant", "sglang-linker-failure-read-as-landed")
    assert slip["state_reads"]["c"][0] is None and any("[provenance]" in f for f in slip["findings"])


@pytest.mark.parametrize("field,value", [("num_speculative_tokens", 3), ("mamba_block_size", 2)])
def test_speculation_the_wing_cannot_run_is_bad_input(tmp_path, field, value):
    """Only k = 2 (D = 3, the fixture pool's intermediate steps); extra_buffer needs a track interval >= D
    (SGLang's rule, mamba_hook.py:133)."""
    doc = json.loads(SPEC.read_text())
    doc["geometry"].update({field: value, "attn_block_size": 2, "hash_block_size": 2})
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    out = wing(str(tmp_path / "spec.json"))
    assert out.returncode == 2 and f"geometry.{field}" in out.stderr, out.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["extra_buffer", "no_buffer"])
def test_ngram_speculation_is_clean_on_stock_and_a_commit_one_step_short_is_a_provenance_finding(strategy):
    """SGLang's own spec prepare, verify-track rebuild and post-verify commit around the NGRAM worker stand-in
    (harness/sglang/spec.py): a's acceptance [2, 1, 0] commits 3, 2, 1 tokens per verify; d's 4 verifies of 3 run
    to 13 outputs for max_tokens 11, which SGLang caps (finished_len, owned_kv_len: harness/sglang/driver.py)."""
    stock = _summary(str(SPEC), "--strategy", strategy)
    assert stock["findings"] == [] and stock["state_reads"]["a"][2:6] == [21, 24, 26, 27], stock
    assert stock["state_reads"]["d"] == [0, 13, 16, 19, 22], stock
    slip = _summary(str(SPEC), "--strategy", strategy, "--mutant", "sglang-spec-commit-step-one-short")
    assert any("[provenance]" in f for f in slip["findings"]), slip


@pytest.mark.slow
def test_a_verify_tracking_the_state_before_the_boundary_is_a_cache_integrity_finding():
    out = wing(str(SPEC), "--mutant", "sglang-spec-track-step-one-early", "--json")
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    assert {f["oracle"] for f in json.loads(out.stdout)} == {"cache-integrity"}


@pytest.mark.slow
def test_the_rust_and_the_python_tree_core_give_the_same_findings():
    """Both cores read back through the production TreeCore interface (harness/sglang/env.py tree_values)."""
    found = {}
    for core in ("rust", "python"):
        out = wing(str(CHUNKED), "--mutant", "sglang-cow-source-dropped", "--tree-core", core, "--json")
        assert out.returncode == 1, out.stdout + out.stderr[-3000:]
        found[core] = json.loads(out.stdout)
    assert found["rust"] == found["python"]


@pytest.mark.slow
def test_no_buffer_is_clean_on_stock_and_its_stash_slip_is_a_provenance_finding():
    stock = wing(str(CHUNKED), "--strategy", "no_buffer")
    assert stock.returncode == 0, stock.stdout + stock.stderr[-3000:]
    slip = wing(str(CHUNKED), "--strategy", "no_buffer", "--mutant", "sglang-no-buffer-stash-args-swapped", "--json")
    assert slip.returncode == 1, slip.stdout + slip.stderr[-3000:]
    assert {f["oracle"] for f in json.loads(slip.stdout)} >= {"provenance"}


@pytest.mark.slow
def test_a_leaked_mamba_slot_is_a_pool_accounting_finding_and_its_finding_file_replays(tmp_path):
    out = wing("sweep", "--count", "6", "--strategy", "extra_buffer", "--mutant",
               "sglang-finished-keeps-unused-track-slot", "--artifacts", str(tmp_path))
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    path = min(tmp_path.glob("finding-*.json"))
    kept = json.loads(path.read_text())
    assert kept["run"]["mutant"] == "sglang-finished-keeps-unused-track-slot"
    assert any(f["signature"] == "pool-accounting" and "mamba slots" in f["actual"] for f in kept["findings"])
    again = wing(str(path), "--json")  # a fresh process, from the file alone: its run comes with it
    assert again.returncode == 1, again.stdout + again.stderr[-3000:]
    assert [f["actual"] for f in json.loads(again.stdout)] == [f["actual"] for f in kept["findings"]]


@pytest.mark.parametrize("args,named", [(["--tree-core", "java"], "tree core"),
                                        (["--strategy", "big_buffer"], "Mamba strategy")])
def test_an_unknown_run_option_is_bad_input(args, named):
    out = wing(str(SHARED), *args)
    assert out.returncode == 2 and named in out.stderr, out.stderr[-3000:]


def test_prefix_caching_off_and_a_corrupt_finding_are_bad_input(tmp_path):
    doc = json.loads(SHARED.read_text())
    doc["geometry"]["mamba_cache_mode"] = "none"
    (tmp_path / "none.json").write_text(json.dumps(doc))
    out = wing(str(tmp_path / "none.json"))
    assert out.returncode == 2 and "mamba_cache_mode" in out.stderr, out.stderr[-3000:]
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "hybrid-harness-sglang-finding", "run": {"x": 1}}))
    out = wing(str(tmp_path / "bad.json"))
    assert out.returncode == 2 and "malformed" in out.stderr, out.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["extra_buffer", "no_buffer"])
def test_decode_outgrowing_the_kv_pool_retracts_as_sglang_does_and_stays_clean(strategy):
    """SGLang's own update_running_batch retracts (the wing runs the real Scheduler: harness/sglang/scheduler.py);
    the retracted request is prefilled again and every oracle, liveness and pool accounting included, is clean."""
    out = wing(str(DATA / "sglang-decode-retraction.json"), "--strategy", strategy)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "Retract requests. #retracted_reqs: 1" in out.stderr


@pytest.mark.slow
def test_an_abort_event_is_sglangs_own_abort_and_the_pools_come_back():
    """b is aborted mid-decode (Scheduler.abort_request), d before it arrives (it never does): the run ends done
    and pool accounting, which judges only runs whose requests all finished or were aborted, is clean."""
    out = wing(str(DATA / "sglang-abort.json"), "--summary")
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    reads = json.loads(out.stdout)["state_reads"]
    assert "d" not in reads and 0 < len(reads["b"]) < 20 and len(reads["a"]) == len(reads["c"]) == 10


def test_a_preempt_event_is_bad_input(tmp_path):
    doc = json.loads(SHARED.read_text())
    doc["events"] = [{"step": 2, "kind": "preempt", "request": "a"}]
    (tmp_path / "p.json").write_text(json.dumps(doc))
    out = wing(str(tmp_path / "p.json"))
    assert out.returncode == 2 and "events[0].kind" in out.stderr, out.stderr[-3000:]


@pytest.mark.slow
def test_a_short_campaign_is_clean_on_stock_and_keeps_a_planted_bug_with_its_input(tmp_path):
    from harness.scenario import scenario_to_json
    from harness.sglang.sweep import decoded

    stock = wing("campaign", "--minutes", "0.3", "--opening", "16", "--artifacts", str(tmp_path / "stock"))
    assert stock.returncode == 0, stock.stdout[-3000:] + stock.stderr[-3000:]
    planted = wing("campaign", "--minutes", "0.3", "--opening", "16", "--mutant", "sglang-no-buffer-stash-args-swapped",
                   "--artifacts", str(tmp_path / "m"))
    assert planted.returncode == 1, planted.stdout[-3000:] + planted.stderr[-3000:]
    kept = json.loads(min((tmp_path / "m").glob("finding-*.json")).read_text())
    # the input bytes alone decode to the scenario kept (the genome and the projection are the wing's only decoders)
    assert scenario_to_json(decoded(bytes.fromhex(kept["input"]))) == kept["scenario"]
    again = wing(str(min((tmp_path / "m").glob("finding-*.json"))))
    assert again.returncode == 1, again.stdout + again.stderr[-3000:]
