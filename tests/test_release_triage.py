"""tools/release_triage.py: which releases a finding reproduces on, and the first release without it."""

from __future__ import annotations

import json
import subprocess
import sys

from testlib import ROOT, needs_v1_runner

sys.path.insert(0, str(ROOT / "tools"))
from release_triage import first_clean  # noqa: E402


def test_first_clean_is_where_every_later_release_that_expresses_it_is_clean():
    assert first_clean(["NEW provenance", "clean", "clean"]) == 1
    assert first_clean(["clean", "NEW provenance", "clean"]) == 2  # a regression: only the last clean run counts
    assert first_clean(["NEW provenance", "NEW provenance"]) is None
    # a later release that cannot express the scenario (a removed cache mode) neither fixes nor keeps it
    assert first_clean(["NEW cache-integrity", "clean", "bad input"]) == 1
    assert first_clean(["NEW cache-integrity", "bad input"]) is None


@needs_v1_runner  # release_triage.py replays on the V1 runner by default (--runner v1), bad input from 0.34.0
def test_a_known_issue_repro_is_judged_on_the_installed_release(tmp_path):
    """The worker mode replays on stock and classifies by the registered fixes: the padded-tail repro is that
    issue on the releases before 0.30 and clean from 0.30 on; a scenario the release cannot express is bad
    input, not a finding."""
    from harness.vllm_adapter import installed_version

    bad = tmp_path / "bad.json"
    doc = json.loads((ROOT / "scenarios/v1-padded-prompt-tail-prefilled.json").read_text())
    doc["geometry"].update(num_speculative_tokens=0, eagle_block_drop=True)  # EAGLE's block drop with no drafter
    bad.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "release_triage.py"), "x", "--replay",
                          str(ROOT / "scenarios/v1-padded-prompt-tail-prefilled.json"), str(bad)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2, out.stderr[-2000:]
    before_030 = installed_version().startswith(("0.26.", "0.27.", "0.28.", "0.29."))
    assert rows[0]["verdict"] == ("KNOWN(v1-padded-prompt-tail-prefilled)" if before_030 else "clean")
    assert rows[1]["verdict"] == "bad input" and "num_speculative_tokens" in rows[1]["why"]
