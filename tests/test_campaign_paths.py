"""A campaign started outside the repository with relative folders: its workers (which run in the repository)
read and write the campaign's folders, not folders of the same name under the repository."""

from __future__ import annotations

import io
from pathlib import Path

import harness.campaign as campaign_module
from harness.campaign import Campaign
from harness.run_config import RunConfig


class _Proc:
    pid = 0
    stderr = io.StringIO("")

    def poll(self):
        return 0


def test_workers_of_a_campaign_with_relative_folders_use_the_campaigns_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(campaign_module.subprocess, "Popen",
                        lambda cmd, **kw: started.append((cmd, kw)) or _Proc())
    camp = Campaign(config=RunConfig(), corpus=Path("out/corpus"), artifacts=Path("out"), jobs=1, seconds=None,
                    runs=40, seed=0, seed_corpus=False, progress=False)
    camp._spawn(camp.workers[0])
    ((cmd, kw),) = started
    cwd = Path(kw["cwd"])
    prefix = next(a for a in cmd if a.startswith("-artifact_prefix=")).split("=", 1)[1]
    assert (cwd / cmd[2]).resolve() == tmp_path / "out" / "corpus"  # the corpus libFuzzer reads and grows
    assert (cwd / prefix).resolve() == tmp_path / "out" / "crashes"
    assert (cwd / kw["env"]["HH_ARTIFACTS"]).resolve() == tmp_path / "out" / "findings"  # where findings are kept
    assert (tmp_path / "out" / "corpus").is_dir() and not (cwd / "out").exists()
