#!/usr/bin/env python3
"""Check a `hybrid-harness fuzz` campaign against what the release is expected to show.

    expect_campaign.py ARTIFACTS [EXIT_CODE] --expect clean
    expect_campaign.py ARTIFACTS [EXIT_CODE] --expect known --known-issues "seed-external-hit-unmarked ..."
    expect_campaign.py ARTIFACTS [EXIT_CODE] --expect findings [--signature-prefix live-column ...]

EXIT_CODE is the campaign's own exit status; without it, ARTIFACTS/exit-code (`make fuzz` writes it there,
since make itself exits 2 whatever the recipe's status).

--expect clean     the campaign must exit 0: nothing new (a campaign fuzzes the fixed system, every known issue's
                   fix applied, so a release's known bugs do not make it red). Exit 1 is a new finding.
--expect known     (a release that carries registered known issues, e.g. the seed bug
                   `seed-external-hit-unmarked` on 0.26.0-0.27.1): exit 0 as for clean, AND the campaign's
                   summary (ARTIFACTS/campaign.json, its kept verdicts, which report.md lists) reports each issue
                   of --known-issues (ids of harness/known_issues.toml, space- or comma-separated) as known:
                   a kept input's verdict attributes a signature to it. A release that stops showing its bug,
                   or a campaign that stops reporting known issues, fails the job.
--expect findings  (a campaign with a bug put in that no known issue covers, e.g. a mutant): the campaign must
                   exit 1 AND keep at least one finding folder (ARTIFACTS/findings/finding-*/finding.json);
                   with --signature-prefix, at least one kept new signature must start with one of the prefixes.
Every way, exit 2 (bad input) or 3 (harness error) fails. The signatures checked are the new ones: the
strings under "unexplained"/"revealed" (a finding's verdict) anywhere in each kept finding.json and in
campaign.json, so a known issue's signature does not stand in for the bug; a format without verdicts
falls back to every "signature"/"signatures" string.
Exit status: 0 as expected, 1 not as expected (the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _signatures(doc, keys: tuple[str, ...], key: str = "") -> set[str]:
    """Every string under one of `keys`, alone or in a list or map there, at any depth of a JSON document."""
    found: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():  # a map under a key ({folder: signature}) counts its values
            found |= _signatures(v, keys, key if key in keys else k)
    elif isinstance(doc, list):
        for v in doc:
            found |= _signatures(v, keys, key)
    elif isinstance(doc, str) and key in keys:
        found.add(doc)
    return found


def _has_key(doc, key: str) -> bool:
    if isinstance(doc, dict):
        return key in doc or any(_has_key(v, key) for v in doc.values())
    return isinstance(doc, list) and any(_has_key(v, key) for v in doc)


def kept_signatures(artifacts: Path) -> tuple[list[Path], set[str]]:
    """The kept finding folders and the signatures that make them new: a verdict's "unexplained" and
    "revealed" lists where the format has them (a known issue's signatures do not count), else every
    "signature"/"signatures" string."""
    halves = [artifacts, artifacts / "engine"]  # the main job keeps its engine-tier half under ARTIFACTS/engine
    folders = sorted(p for half in halves for p in (half / "findings").glob("finding-*")
                     if p.is_dir() and (p / "finding.json").is_file())
    docs = [json.loads(d.read_text()) for d in [*(f / "finding.json" for f in folders),
                                                  *(half / "campaign.json" for half in halves)] if d.is_file()]
    has_verdicts = any(_has_key(d, "unexplained") for d in docs)
    keys = ("unexplained", "revealed") if has_verdicts else ("signature", "signatures")
    return folders, set().union(*(_signatures(d, keys) for d in docs))


def reported_known(artifacts: Path) -> set[str] | None:
    """The known issue ids the campaign's summary reports: the values of every kept verdict's "known" map
    ({signature: issue id}) in campaign.json; None without a readable campaign.json."""
    try:
        summary = json.loads((artifacts / "campaign.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    verdicts = summary.get("verdicts") or {}
    return {issue for v in verdicts.values() if isinstance(v, dict) and isinstance(v.get("known"), dict)
            for issue in v["known"].values() if isinstance(issue, str)}


def check(artifacts: Path, code: int, expect: str, prefixes: list[str], known: list[str] = ()) -> str | None:
    """None when the campaign behaved as expected, else the reason it did not."""
    if code == 3:
        return f"exit 3: harness error(s), kept in {artifacts / 'findings' / 'harness-errors'}"
    if code == 2:
        return "exit 2: bad input (the campaign did not run as configured)"
    folders, sigs = kept_signatures(artifacts)
    if expect in ("clean", "known"):
        if code != 0:
            return f"exit {code} where 0 was expected: new finding(s) {sorted(sigs) or '(none kept)'}"
        if expect == "clean":
            return None
        reported = reported_known(artifacts)
        if reported is None:
            return f"no readable {artifacts / 'campaign.json'}: the campaign reported nothing"
        missing = [k for k in known if k not in reported]
        if missing:
            return (f"known issue(s) {', '.join(missing)} not reported by the campaign (its summary's kept verdicts "
                    f"name {', '.join(sorted(reported)) or 'no known issue'})")
        return None
    if code != 1:
        return f"exit {code} where 1 was expected: the release's known bug was not found"
    if not (artifacts / "campaign.json").is_file():
        return f"exit 1 but no {artifacts / 'campaign.json'}"
    if not folders:
        return f"exit 1 but no kept finding under {artifacts / 'findings'}"
    if prefixes and not any(s.startswith(p) for s in sigs for p in prefixes):
        return f"no kept signature starts with {' or '.join(prefixes)}; kept: {sorted(sigs)}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifacts", type=Path)
    ap.add_argument("exit_code", type=int, nargs="?")
    ap.add_argument("--expect", choices=("clean", "known", "findings"), required=True)
    ap.add_argument("--signature-prefix", action="append", default=[])
    ap.add_argument("--known-issues", action="append", default=[],
                    help="--expect known: the known issue ids the campaign must report (space- or comma-separated; "
                         "repeatable; an empty value names none)")
    args = ap.parse_args(argv)
    known = [k for value in args.known_issues for k in value.replace(",", " ").split()]
    if (args.expect == "known") != bool(known):
        ap.error("--known-issues names the known issues of --expect known, and only of it"
                 if known else "--expect known needs --known-issues (the issues the campaign must report)")
    if args.exit_code is None:
        recorded = args.artifacts / "exit-code"
        if not recorded.is_file():
            print(f"no exit code given and no {recorded}: the campaign did not run", file=sys.stderr)
            return 1
        args.exit_code = int(recorded.read_text().strip())
    problem = check(args.artifacts, args.exit_code, args.expect, args.signature_prefix, known)
    if problem:
        print(f"campaign in {args.artifacts} not as expected ({args.expect}): {problem}", file=sys.stderr)
        return 1
    reported = f"; known issues reported: {', '.join(known)}" if known else ""
    print(f"campaign in {args.artifacts} as expected ({args.expect}, exit {args.exit_code}{reported})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
