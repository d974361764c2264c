"""Campaign reports render from a campaign directory (known issues are judged by fix replay: test_verdicts.py)."""

from __future__ import annotations

import json

import pytest

from harness.errors import BadInput
from harness.report import render


def test_report_renders_markdown_html_and_plots(tmp_path):
    (tmp_path / "stats.jsonl").write_text("\n".join(json.dumps(
        {"t": t, "execs": 10 * t, "cov": 100 + t, "corpus": t, "findings": int(t > 3), "harness_errors": 0})
        for t in range(6)) + "\n")
    folder = tmp_path / "findings" / "finding-abc"
    folder.mkdir(parents=True)
    (folder / "finding.json").write_text(json.dumps({
        "signature": "live-column:RUNNING", "detection": {"after_startup_s": 1.5},
        "findings": [{"oracle": "live-column", "step": 2, "expected": "core row [0, 10]",
                      "actual": "worker row [0, 6, 10]"}]}))
    md, page = render(tmp_path)
    assert "live-column:RUNNING" in md.read_text() and "worker row [0, 6, 10]" in page.read_text()
    assert all((tmp_path / p).stat().st_size > 1000 for p in ("coverage.png", "execs.png", "findings.png"))


def test_report_rejects_a_non_campaign_directory(tmp_path):
    with pytest.raises(BadInput):
        render(tmp_path)
