"""The SGLang wing (harness/sglang/): replays on SGLang's own code in its own venv (.venv-sglang, `make
venv-sglang`), run here as a subprocess (the import wall between the two engines: tests/test_package_layout.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
DATA = ROOT / "tests" / "data"
SHARED = DATA / "sglang-shared-prefix.json"
CHUNKED = DATA / "sglang-shared-prefix-chunked.json"


def wing(*args: str) -> subprocess.CompletedProcess:
    if not SGLANG_PYTHON.exists():
        pytest.skip(f"no SGLang venv at {SGLANG_PYTHON} (make venv-sglang builds it)")
    # not the vLLM process set-up this session's conftest made (harness/vllm_env.py): SGLang's venv is its own
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "VLLM_TARGET_DEVICE", "TRITON_INTERPRET", "HH_VLLM")}
    return subprocess.run([str(SGLANG_PYTHON), "-m", "harness.sglang", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=env)


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
                                          ("sglang-force-track-h-no-plus-one", 40)])
def test_the_sglang_mutant_bank_is_killed_by_a_short_sweep(tmp_path, mutant, count):
    out = wing("sweep", "--count", str(count), "--mutant", mutant, "--artifacts", str(tmp_path))
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]


def test_speculation_is_bad_input(tmp_path):
    doc = json.loads(SHARED.read_text())
    doc["geometry"]["num_speculative_tokens"] = 2
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    out = wing(str(tmp_path / "spec.json"))
    assert out.returncode == 2 and "num_speculative_tokens" in out.stderr, out.stderr[-3000:]
