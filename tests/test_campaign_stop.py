"""`mutants check` trials end at their first new finding (Campaign.stop_on_new): the time to the first kill
is what they measure, and the rest of a killed trial's budget would measure nothing."""

from __future__ import annotations

from harness.campaign import Campaign
from harness.run_config import RunConfig


def test_a_campaign_that_keeps_a_new_finding_stops_early(tmp_path):
    camp = Campaign(config=RunConfig(mutant="cow-copies-dropped"), corpus=tmp_path / "corpus", artifacts=tmp_path, jobs=1,
                    seconds=300, runs=None, seed=0, seed_corpus=True, progress=False, stop_on_new=True)
    summary = camp.run()
    assert summary["findings_new_signatures"], summary
    assert summary["elapsed"] < 120, summary["elapsed"]  # far inside the 300 s budget
    assert camp.new_kept()


def test_a_clean_campaign_is_not_stopped(tmp_path):
    """On every release, 0.26.0-0.27.1 included: the seed bug they ship is a known issue, and a campaign fuzzes the
    fixed system, so nothing new is kept and the campaign runs its whole budget."""
    camp = Campaign(config=RunConfig(), corpus=tmp_path / "corpus", artifacts=tmp_path, jobs=1, seconds=None, runs=40,
                    seed=0, seed_corpus=False, progress=False, stop_on_new=True)
    summary = camp.run()
    assert not camp.new_kept()
    assert summary["execs"] >= 40
