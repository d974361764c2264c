"""models/gpu.py and tools/gpu_check.py without a GPU: clean unavailability, the SKIPPED exit, the mamba_ssm
import shell, and the backend's layouts through torch stand-ins with mamba-ssm's signatures. The last test
compares the real Triton kernels and runs only where CUDA and mamba-ssm are present."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from models import gpu
from models.hybrid import HybridLM, MambaState, ModelConfig, contiguous_kv
from models.reference import teacher_forced_logits

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)

ON_GPU = gpu.available()[0]


# -- torch stand-ins with the signatures and layouts of mamba-ssm's Triton ops --------------------------------
def fake_scan(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
              dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False):
    b, seqlen, h, p = x.shape
    n = B.shape[-1]
    assert dt.shape == (b, seqlen, h) and A.shape == (h,) and B.shape == C.shape == (b, seqlen, 1, n)
    assert initial_states.shape == (b, h, p, n) and chunk_size >= 16 and chunk_size & (chunk_size - 1) == 0
    assert D is None and z is None and dt_bias is None and not dt_softplus
    assert all(t.dtype == torch.float32 for t in (x, dt, A, B, C, initial_states))
    state, ys = initial_states[0].clone(), []
    for t in range(seqlen):
        state = torch.exp(dt[0, t] * A)[:, None, None] * state + (dt[0, t, :, None] * x[0, t])[..., None] * B[0, t, 0]
        ys.append(state @ C[0, t, 0])
    out = torch.stack(ys)[None]
    return (out, state[None]) if return_final_states else out


def fake_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None):
    batch, h, p = x.shape
    assert state.dim() == 4 and state.shape[1:3] == (h, p) and dt.shape == x.shape
    assert A.shape == (h, p, state.shape[3]) and A.stride(-1) != 0, "A must be materialised (tie_hdim path)"
    assert B.shape == C.shape == (batch, 1, state.shape[3]) and state_batch_indices.dtype == torch.int32
    out = torch.empty_like(x)
    for i, slot in enumerate(state_batch_indices.tolist()):
        s = torch.exp(A * dt[i][..., None]) * state[slot] + (dt[i] * x[i])[..., None] * B[i, 0]
        state[slot] = s
        out[i] = s @ C[i, 0]
    return out


FAKE = gpu.TritonBackend(fake_scan, fake_update)


# -- unavailability -----------------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_available_says_why_and_backend_raises_it():
    ok, why = gpu.available()
    assert not ok and why.startswith("no CUDA")
    with pytest.raises(RuntimeError, match="no CUDA"):
        gpu.backend()


def test_available_names_missing_mamba_ssm(monkeypatch):
    monkeypatch.setattr(gpu.torch.cuda, "is_available", lambda: True)
    real = importlib.util.find_spec
    monkeypatch.setattr(gpu.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mamba_ssm" else real(name, *a))
    assert gpu.available() == (False, "mamba_ssm not installed (tools/gpu_setup.sh, docs/gpu.md)")


def _fake_package(root: Path, triton_ok: bool) -> None:
    """A mamba_ssm whose __init__ fails like a MAMBA_SKIP_CUDA_BUILD install (selective_scan_cuda missing)."""
    pkg = root / "mamba_ssm"
    (pkg / "ops" / "triton").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import selective_scan_cuda_not_built\n")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "triton" / "__init__.py").write_text("")
    body = "def mamba_chunk_scan_combined(*a, **k):\n    return 'scan'\n" if triton_ok else "import no_triton_here\n"
    (pkg / "ops" / "triton" / "ssd_combined.py").write_text(body)
    (pkg / "ops" / "triton" / "selective_state_update.py").write_text(
        "def selective_state_update(*a, **k):\n    return 'update'\n")


@pytest.mark.parametrize("triton_ok", [True, False])
def test_ops_import_skips_the_cuda_extension_init(tmp_path, monkeypatch, triton_ok):
    if "mamba_ssm" in sys.modules:
        pytest.skip("a real mamba_ssm is already imported")
    _fake_package(tmp_path, triton_ok)
    monkeypatch.syspath_prepend(str(tmp_path))
    gpu._ops.cache_clear()
    try:
        if triton_ok:
            scan, update = gpu._ops()
            assert (scan(), update()) == ("scan", "update")
            assert not hasattr(sys.modules["mamba_ssm"], "selective_scan_cuda_not_built")
        else:
            with pytest.raises(ImportError, match="no_triton_here"):
                gpu._ops()
            assert not any(n.startswith("mamba_ssm") for n in sys.modules)  # left as it was
    finally:
        for n in [n for n in sys.modules if n == "mamba_ssm" or n.startswith("mamba_ssm.")]:
            del sys.modules[n]
        gpu._ops.cache_clear()


def test_check_script_skips_cleanly(tmp_path):
    if ON_GPU:
        pytest.skip("a GPU backend is available here: the script would run for real")
    env = {"OUT": str(tmp_path), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py")], capture_output=True, text=True,
                       timeout=60, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "SKIPPED: " in p.stdout and "versions: " in p.stdout
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["status"] == "skipped" and summary["reason"] and summary["versions"]["torch"]


@pytest.mark.parametrize("tight", [False, True])
def test_check_script_main_flow(tmp_path, monkeypatch, capsys, tight):
    """main() as on a GPU, with the stand-ins on the CPU: rows printed, JSON written, exit 1 on a tolerance miss."""
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(gpu_check, "DEVICE", "cpu")
    monkeypatch.setattr(gpu_check.gpu, "available", lambda: (True, "ok"))
    monkeypatch.setattr(gpu_check.gpu, "backend", lambda: FAKE)
    monkeypatch.setattr(gpu_check, "check_model", lambda be, dev: {"scenario": "s", "runs": [], "ok": True})
    if tight:
        monkeypatch.setitem(gpu_check.TOLERANCES, "ssd_chunk_scan", (0.0, 0.0))
    assert gpu_check.main() == (1 if tight else 0)
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["status"] == ("failed" if tight else "passed")
    assert len(summary["kernels"]) == 4 * len(gpu_check.SIZES + gpu_check.WIDE_SIZES) + 1
    assert ("FAIL ssd_chunk_scan" in capsys.readouterr().out) == tight


# -- the backend's layouts, through the stand-ins ---------------------------------------------------------------
def test_backend_layouts_match_reference_kernels():
    rows = gpu_check.check_kernels(FAKE, "cpu")
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    assert {r["kernel"] for r in rows} == set(gpu_check.TOLERANCES)


def test_chunk_scan_segments_and_state_order():
    g = torch.Generator().manual_seed(3)
    i = gpu_check._inputs(9, 2, 3, 4, g)
    args = [i[k] for k in ("x", "dt", "A", "B", "C", "h0")]
    y, states = FAKE.ssd_chunk_scan(*args, [8, 2, 2, 0])
    y_all, every = FAKE.ssd_recurrent(*args)
    assert torch.allclose(y, y_all, atol=1e-6) and torch.allclose(states, every[[8, 2, 2, 0]], atol=1e-6)
    with pytest.raises(ValueError):
        FAKE.ssd_chunk_scan(*args, [9])


def test_hybrid_model_runs_on_the_backend():
    """Chunked prefill then recurrent decode on HybridLM(float32, backend=stand-ins) vs the float64 reference."""
    tokens = list(range(3, 40, 3))
    ref = teacher_forced_logits(HybridLM(ModelConfig()), tokens)
    m = HybridLM(ModelConfig(dtype="float32"), backend=FAKE)
    kv, _ = contiguous_kv()
    states = [m.zero_state() for _ in m.cfg.mamba_layers]
    logits, outs = m.forward(tokens[:8], 0, states, kv, [7], logits_from=0)
    states = [MambaState(o.conv[0], o.ssm[0]) for o in outs]
    tail, _ = m.forward(tokens[8:], 8, states, kv, list(range(len(tokens) - 8)), logits_from=0, recurrent=True)
    got = torch.cat([logits, tail]).double()
    assert got.shape == ref.shape
    err = float((got - ref).abs().max())
    assert err < 1e-4 * max(1.0, float(ref.abs().max())), err
    assert math.isfinite(err)


# -- the real kernels -------------------------------------------------------------------------------------------
@pytest.mark.skipif(not ON_GPU, reason=f"GPU backend unavailable: {gpu.available()[1]}")
def test_triton_kernels_match_reference():
    rows = gpu_check.check_kernels(gpu.backend(), "cuda")
    bad = [r for r in rows if not r["ok"]]
    assert not bad, textwrap.shorten(str(bad), 2000)
