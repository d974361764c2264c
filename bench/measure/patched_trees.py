"""Each source patch in upstream/patches/ fuzzed by the harness itself (issue 45): the patch applied to its
release's tree (tools/upstream.py's patched copy), that tree fuzzed through `--vllm` on the symbolic and the engine
tier, the stock tree as the liveness witness (`--witness-vllm`: a request stock serves must finish on the patched
tree). The fixed system is fuzzed (every other known issue's run-time fix applied; the patched issue's own fix is
left out, the patch is its fix), so anything new blocks the patch. The stock tree is fuzzed the same way, same
seed, as the row to compare with.

    .venv/bin/python bench/measure/patched_trees.py --releases 0.33.0 0.34.0 --minutes 2 --out bench/results/patched_trees.md

Rows already measured for the same patch text, tier and budget are kept (the JSON beside --out); --force reruns.
`--as-was REF ISSUE`: also that patch as it stood at git REF (e.g. the first sync-external patch, which stalled a
request stock serves), in trees of its own: the row shows whether the harness blocks it.
vLLM's CPU build (tier e2e) has no 0.33.0 or 0.34.0, the releases the patches target: no e2e column.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

TIERS = ("symbolic", "engine")


def runner_for(patch: str, tier: str) -> str | None:
    """The engine tier's model runner for a patch of one runner's code (a V1 runner patch on a release whose
    hybrids default to V2 is fuzzed on V1), else None (vLLM's pick)."""
    from harness.known_issues import KNOWN_ISSUES

    issue = next((k for k in KNOWN_ISSUES if k.id == patch.split("@")[0]), None)
    runners = [r for r in (issue.runners or ()) if r in ("v1", "v2")] if issue is not None else []
    return runners[0] if tier == "engine" and len(runners) == 1 else None


def campaign(tree: Path, witness: Path | None, tier: str, minutes: float, seed: int, runner: str | None) -> dict:
    """One campaign on `tree`: exit, executions, new signatures kept."""
    with tempfile.TemporaryDirectory() as tmp:
        art = Path(tmp) / "fuzz"
        cmd = [sys.executable, "-m", "harness", "--vllm", str(tree), *(["--witness-vllm", str(witness)] if witness
                                                                       else []),
               "fuzz", "--tier", tier, "--minutes", f"{minutes:g}", "--seed", str(seed), "--seed-corpus",
               "--no-progress", "--no-minimize", "--jobs", "1", "--artifacts", str(art),
               *(["--runner", runner] if runner else [])]
        start = time.monotonic()
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        summary = json.loads((art / "campaign.json").read_text()) if (art / "campaign.json").exists() else {}
    return {"exit": out.returncode, "wall_s": round(time.monotonic() - start, 1), "execs": summary.get("execs"),
            "new": summary.get("findings_new_signatures", []),
            "error": out.stderr.strip().splitlines()[-1] if out.returncode > 1 and out.stderr.strip() else None}


def as_was(label: str, release: str) -> str:
    """The patch ISSUE@REF: upstream/patches' file for `release` as git REF had it."""
    import upstream

    issue, ref = label.split("@")
    path = upstream.patch_file(issue, release).relative_to(ROOT)
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def patched(label: str, release: str) -> Path:
    """The tree for a row: tools/upstream.py's patched copy; for ISSUE@REF, one built from that patch text in a
    cache of its own (the patch folder and the copies swapped for the call)."""
    import upstream

    if "@" not in label:
        return upstream.patched_tree(release, [label])
    issue, ref = label.split("@")
    folder = upstream.CACHE / "vllm-as-was" / ref
    saved = upstream.PATCHES, upstream.PATCHED
    (folder / "patches" / release).mkdir(parents=True, exist_ok=True)
    (folder / "patches" / release / f"{issue}.patch").write_text(as_was(label, release))
    try:
        upstream.PATCHES, upstream.PATCHED = folder / "patches", folder / "vllm-patched"
        return upstream.patched_tree(release, [issue])
    finally:
        upstream.PATCHES, upstream.PATCHED = saved


def main() -> int:
    import upstream
    from harness.stamp import stamp
    from harness.vllm_trees import fetch_tree

    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", nargs="+", default=["0.33.0", "0.34.0"])
    ap.add_argument("--issues", nargs="*", help="default: every patch of the release")
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--as-was", nargs=2, action="append", default=[], metavar=("REF", "ISSUE"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    kept = json.loads(args.out.with_suffix(".json").read_text()) if args.out.with_suffix(".json").exists() else []
    rows = {(r["release"], r["patch"], r["tier"]): r for r in kept}
    for release in args.releases:
        stock = fetch_tree(release)
        folder = upstream.PATCHES / release if (upstream.PATCHES / release).is_dir() else upstream.PATCHES
        issues = args.issues or sorted(p.stem for p in folder.glob("*.patch"))
        for issue in ["stock", *issues, *(f"{i}@{ref}" for ref, i in args.as_was)]:
            text = "" if issue == "stock" else (as_was(issue, release) if "@" in issue else
                                                upstream.patch_file(issue, release).read_text())
            # the diff decides the tree (a header's wording does not)
            digest = hashlib.sha256(text.split("\n\n", 1)[-1].encode()).hexdigest()[:12]
            tree = stock if issue == "stock" else patched(issue, release)
            for tier in TIERS:
                key, old = (release, issue, tier), rows.get((release, issue, tier))
                runner = runner_for(issue, tier)
                if (old and not args.force and old["patch_sha"] == digest and old["minutes"] == args.minutes
                        and old["exit"] in (0, 1) and old.get("runner") == runner):
                    continue
                r = campaign(tree, None if issue == "stock" else stock, tier, args.minutes, args.seed, runner)
                rows[key] = {"release": release, "patch": issue, "tier": tier, "patch_sha": digest,
                             "minutes": args.minutes, "seed": args.seed, "runner": runner, **r}
                print(json.dumps(rows[key]), flush=True)
                args.out.with_suffix(".json").write_text(json.dumps(list(rows.values()), indent=1) + "\n")
    ordered = sorted(rows.values(), key=lambda r: (r["release"], r["patch"] != "stock", r["patch"], r["tier"]))
    lines = [stamp("bench/measure/patched_trees.py " + " ".join(sys.argv[1:])), "",
             "Each source patch of `upstream/patches/` applied to its release's tree and fuzzed by the harness through "
             "`--vllm` (the fixed system: every other known issue's run-time fix applied, the patched issue's own left "
             "out), the stock tree as liveness witness (`--witness-vllm`: a request stock serves in a scenario and "
             "pool must finish on the patched tree). `stock`: the same campaign on the stock tree. Anything new on "
             "a patched tree that stock does not show blocks the patch. One worker, seeded corpus, "
             f"{args.minutes:g}-minute campaigns; this 2-core machine ran other work beside them, so the execution "
             "counts are lower bounds of an idle box's.", "",
             "| release | patch | tier | campaign exit | executions | new findings | blocks the patch |",
             "|---|---|---|---|---|---|---|"]
    for r in ordered:
        stock_new = set(rows.get((r["release"], "stock", r["tier"]), {}).get("new", []))
        extra = sorted(set(r["new"]) - stock_new) if r["patch"] != "stock" else []
        blocks = "-" if r["patch"] == "stock" else ("**yes**: " + ", ".join(f"`{s}`" for s in extra) if extra
                                                    else "**harness error**" if r["exit"] > 1 else "no")
        lines.append(f"| {r['release']} | {'stock' if r['patch'] == 'stock' else '`' + r['patch'] + '`'} | "
                     f"{r['tier']}{' (' + r['runner'] + ' runner)' if r.get('runner') else ''} | {r['exit']}{' (' + r['error'] + ')' if r.get('error') else ''} | "
                     f"{r['execs']} | {', '.join(f'`{s}`' for s in r['new']) or 'none'} | {blocks} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["exit"] in (0, 1) for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
