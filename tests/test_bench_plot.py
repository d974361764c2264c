"""bench/measure/plot.py: Markdown table, scaling PNGs, CoW ratio, and the regression comparison's exit code."""

from __future__ import annotations

import json
import subprocess
import sys

from testlib import ROOT


def _bench(name, mean, **extra):
    return {"name": name, "fullname": f"bench/x.py::{name}", "extra_info": extra,
            "stats": {"mean": mean, "median": mean, "stddev": 0.0, "rounds": 5}}


def _write(path, benches):
    path.write_text(json.dumps({"benchmarks": benches}))
    return str(path)


def _plot(*args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "measure" / "plot.py"), *args], capture_output=True, text=True)


def test_table_plots_and_cow_ratio(tmp_path):
    benches = [_bench(f"test_scaling_prompt_length[{n}]", 1e-5 * n ** 0.5) for n in (1024, 4096, 16384)]
    benches += [_bench("test_cow_apply_pagewise[4]", 2e-4, bytes=4 << 20), _bench("test_plain_torch_copy_same_bytes[4]", 1e-4)]
    res = _plot(_write(tmp_path / "b.json", benches), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "out" / "b.md").read_text()
    assert "test_scaling_prompt_length[4096]" in md and "| 4 | 200.0 | 100.0 | 2.00 |" in md
    assert (tmp_path / "out" / "test_scaling_prompt_length.png").stat().st_size > 1000


def test_compare_flags_regressions(tmp_path):
    old = _write(tmp_path / "old.json", [_bench("test_free", 1e-4), _bench("test_decode", 1e-4)])
    same = _write(tmp_path / "same.json", [_bench("test_free", 1.1e-4), _bench("test_decode", 0.9e-4)])
    slow = _write(tmp_path / "slow.json", [_bench("test_free", 2e-4), _bench("test_decode", 1e-4)])
    assert _plot(old, same, "--compare").returncode == 0
    res = _plot(old, slow, "--compare", "--threshold", "0.5")
    assert res.returncode == 1 and "regression" in res.stdout
    assert _plot(str(tmp_path / "missing.json"), "--out", str(tmp_path)).returncode == 2
