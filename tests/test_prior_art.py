"""Prior art as data (issue 45): each known issue's upstream issues and pull requests (harness/prior_art.toml)."""

from __future__ import annotations

import pytest

from harness.errors import BadInput
from harness.known_issues import KNOWN_ISSUES, RELATIONS, known_issue_by_id, load_prior_art, upstream_fix_note


def test_every_known_issue_was_searched_and_its_refs_are_well_formed():
    for issue in KNOWN_ISSUES:
        assert issue.searched, f"{issue.id}: no record of what was searched upstream"
        for art in issue.prior_art:
            assert art.relation in RELATIONS and art.url.startswith("https://github.com/")
        order = [RELATIONS.index(a.relation) for a in issue.prior_art]
        assert order == sorted(order), "a report lists fixes first"


def test_an_open_upstream_fix_turns_a_report_into_a_comment():
    assert known_issue_by_id("sync-external-admission-undercount").open_fix.ref == "vllm-project/vllm#46892"
    assert known_issue_by_id("hidden-state-group-splits-off-mamba-grid").open_fix.ref == "vllm-project/vllm#54076"
    assert known_issue_by_id("checkpoint-midblock-start").open_fix is None
    note = upstream_fix_note(known_issue_by_id("sync-external-admission-undercount"), gone=False)
    assert "#46892" in note and "comment there" in note
    # once the repro is gone, `known check` names the fixes to look for in the release
    assert "#51766" in upstream_fix_note(known_issue_by_id("seed-external-hit-unmarked"), gone=True)


@pytest.mark.parametrize("text, error", [
    ('[[art]]\nissue = "nope"\nref = "a/b#1"\nkind = "pr"\nstate = "open"\nrelation = "fixes"\ntitle = "t"\nnote = "n"\n',
     "no known issue"),
    ('[[art]]\nissue = "seed-external-hit-unmarked"\nref = "a/b#1"\nkind = "pr"\nstate = "open"\nrelation = "x"\n'
     'title = "t"\nnote = "n"\n', "relation one of"),
    ('[[art]]\nissue = "seed-external-hit-unmarked"\n', "missing"),
    ("[[art]\n", "prior-art data"),
])
def test_malformed_prior_art_is_bad_input(tmp_path, text, error):
    path = tmp_path / "prior_art.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=error):
        load_prior_art(path, {k.id for k in KNOWN_ISSUES})
