"""Which releases a campaign's findings reproduce on, and the first release without them.

Replays every kept finding (its `minimized.json`, else its `finding.json`) on stock vLLM in each release's venv
(`make venv VLLM=X` builds `.venv-X`; `.venv` is the default release), the way it was found (the run
configuration its artifact records, known fixes off: stock, findings classified by the registered fixes), one
process per release, and writes a Markdown table: per finding its verdict on each release and the first release
from which every tested release is clean.

    python tools/release_triage.py /tmp/hh/camp/findings --out bench/results/triage.md
    python tools/release_triage.py F1 F2 --venvs .venv-0.26.0 .venv-0.28.0 .venv

Verdicts: `clean`; `NEW kinds` (exit-1 signatures no registered fix removes); `KNOWN(ids)`; `bad input` (the
release cannot express the scenario: another release's feature); `harness error`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _scenario_file(folder: Path) -> Path:
    return folder / "minimized.json" if (folder / "minimized.json").exists() else folder / "finding.json"


def _inputs(paths: list[str]) -> list[Path]:
    """Scenario or artifact files given directly, finding folders (their minimized scenario), every `finding-*`
    folder under a campaign's findings directory, or else every JSON file of a directory."""
    found = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif (p / "finding.json").exists():
            found.append(_scenario_file(p))
        else:
            folders = [f for f in sorted(p.glob("finding-*")) if (f / "finding.json").exists()]
            found.extend(map(_scenario_file, folders) if folders else sorted(p.glob("*.json")))
    return found


def replay_here(files: list[str], runner: str) -> None:
    """Worker (run by a release's venv python): one JSON line per file, its stock verdict on this release."""
    sys.path.insert(0, str(ROOT))
    from harness.errors import BadInput, HarnessError
    from harness.verdict import replay_and_judge
    from harness.run_config import RunConfig
    from harness.scenario import parse_scenario
    from harness.vllm_adapter import installed_version, load_vllm

    load_vllm()
    for name in files:
        doc = json.loads(Path(name).read_text())
        row = {"file": name, "vllm": installed_version()}
        try:
            # an artifact replays as it was found; a plain scenario on the engine tier with `runner`
            config = (RunConfig.from_json(doc) if "scenario" in doc else RunConfig(tier="engine").but(runner=runner))
            config = config.but(known_fixes=False, mutant=None)
            _, findings, verdict = replay_and_judge(parse_scenario(doc.get("scenario", doc)), config=config)
            row["verdict"] = "clean" if not findings else (
                "NEW " + "+".join(sorted({s.split(":")[0] for s in verdict.new})) if verdict.is_new
                else "KNOWN(" + ",".join(sorted(set(verdict.known.values()))) + ")")
            row["signatures"] = sorted(f.signature for f in findings)
        except BadInput as exc:
            row["verdict"], row["why"] = "bad input", str(exc)[:200]
        except HarnessError as exc:
            row["verdict"], row["why"] = "harness error", str(exc)[:200]
        print(json.dumps(row), flush=True)


def _release(venv: Path) -> str | None:
    """The vLLM release a venv holds (None, said on stderr: no vLLM there yet)."""
    out = subprocess.run([str(venv / "bin/python"), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                         capture_output=True, text=True)
    if out.returncode:
        print(f"skipped {venv}: no vLLM installed there", file=sys.stderr)
        return None
    return out.stdout.strip()


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:3])


def first_clean(verdicts: list[str]) -> int | None:
    """Index of the first release from which every later tested release that can express the scenario is clean
    (a later release's bad input, e.g. a Mamba cache mode it removed, neither fixes nor keeps it); None: the last
    release that expresses it is not clean."""
    expressed = [i for i, v in enumerate(verdicts) if v != "bad input"]
    if not expressed or verdicts[expressed[-1]] != "clean":
        return None
    first = expressed[-1]
    for i in reversed(expressed):
        if verdicts[i] != "clean":
            break
        first = i
    return first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("findings", nargs="+", help="finding folders, campaigns' findings directories, artifact or "
                    "scenario files")
    ap.add_argument("--runner", default="v1", help="engine runner for plain scenario files (default v1)")
    ap.add_argument("--venvs", nargs="*", help="release venvs (default: every .venv* of the checkout)")
    ap.add_argument("--out", help="Markdown table to write (default: stdout only)")
    ap.add_argument("--replay", nargs="*", help=argparse.SUPPRESS)  # worker mode
    args = ap.parse_args(argv)
    if args.replay is not None:
        replay_here(args.replay, args.runner)
        return 0
    files = [str(f) for f in _inputs(args.findings)]
    if not files:
        print("no findings or scenarios found", file=sys.stderr)
        return 2
    venvs = ([Path(v) for v in args.venvs] if args.venvs else
             sorted(p for p in ROOT.glob(".venv*") if (p / "bin/python").exists()))
    releases = sorted(((r, v) for v in venvs if (r := _release(v))), key=lambda rv: _key(rv[0]))
    verdicts: dict[str, dict[str, str]] = {f: {} for f in files}
    for version, venv in releases:
        done = subprocess.run([str(venv / "bin/python"), __file__, "x", "--runner", args.runner, "--replay", *files],
                              capture_output=True,
                              text=True, cwd=ROOT)
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                verdicts[row["file"]][version] = row["verdict"]
        for f in files:
            verdicts[f].setdefault(version, "harness error (worker: " + done.stderr.strip()[-120:] + ")")
    names = [v for v, _ in releases]
    lines = ["| finding | " + " | ".join(names) + " | first release clean |", "|---" * (len(names) + 2) + "|"]
    for f in files:
        row = [verdicts[f][v] for v in names]
        i = first_clean(row)
        lines.append(f"| `{f}` | " + " | ".join(row) + f" | {'none' if i is None else names[i]} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
