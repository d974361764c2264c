"""`hybrid-harness report DIR`: Markdown + HTML report of a campaign directory, with plots.

Reads DIR/stats.jsonl (one sample a second: execs, coverage, corpus, findings), DIR/campaign.json and the
kept findings; writes DIR/report.md, DIR/report.html and PNG plots (coverage and execs over time,
findings over time).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from harness.artifacts import FindingArtifact
from harness.errors import BadInput
from harness.e2e_verdict import describe
from harness.verdict import new_signatures
from harness.oracles import describe_outputs


def _samples(directory: Path) -> list[dict]:
    path = directory / "stats.jsonl"
    if not path.exists():
        raise BadInput(f"{directory} holds no stats.jsonl: not a campaign directory")
    samples = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            samples.append(json.loads(line))
        except json.JSONDecodeError:
            raise BadInput(f"{path}:{n}: corrupt stats line") from None
    # a resumed campaign appends a new run whose clock restarts: lay the runs end to end
    offset, last, out = 0.0, 0.0, []
    for s in samples:
        if s["t"] < last:
            offset += last
        last = s["t"]
        out.append(dict(s, t=s["t"] + offset))
    return out


def _plot(samples: list[dict], directory: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    names = []
    for key, title, fname in (("cov", "coverage (libFuzzer edges)", "coverage.png"),
                              ("execs", "executions", "execs.png"),
                              ("findings", "kept findings", "findings.png")):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(t, [s.get(key, 0) for s in samples], drawstyle="steps-post")
        ax.set_xlabel("seconds")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(directory / fname, dpi=100)
        plt.close(fig)
        names.append(fname)
    return names


def _vllm_label(summary: dict) -> str:
    """'0.34.0', or a tree's '0.35.0.dev0 (checkout /src/vllm, commit 1a2b3c4d5e6f)' (harness/release.py)."""
    from harness.release import VllmSource

    return VllmSource.from_json(summary).describe()


def render(directory: str | Path) -> tuple[Path, Path]:
    directory = Path(directory)
    samples = _samples(directory)
    summary = json.loads((directory / "campaign.json").read_text()) if (directory / "campaign.json").exists() else {}
    try:
        pngs = _plot(samples, directory) if samples else []
    except ImportError:  # matplotlib is in requirements/dev.txt; without it the report has no plots
        pngs = []
    findings = []
    other = set(summary.get("findings_other_configurations") or ())  # kept by another release, mutant or tier
    for folder in sorted((directory / "findings").glob("finding-*")):
        if not (folder / "finding.json").exists() or folder.name in other:
            continue
        found = FindingArtifact.read(folder, strict=False)
        verdict = found.verdict_or_new
        sig = ", ".join(new_signatures(verdict)) if verdict["new"] else ""
        known = ", ".join(f"{s} = {k}" for s, k in verdict["known"].items())
        first = found.findings[0]
        findings.append({"name": folder.name, "signature": sig or found.signature or "", "known": known,
                         "new": verdict["new"],
                         "headline": f"[{first['oracle']}] step {first['step']}: expected {first['expected']}; actual {first['actual']}",
                         "minimized": (folder / "minimized.json").exists(),
                         "regression": (folder / "test_regression.py").exists(),
                         "after_s": found.detection.get("after_startup_s"),
                         # what users see: the finding on vLLM's whole engine (harness/e2e_verdict.py)
                         "e2e": describe(found.e2e).removeprefix("e2e: ") if found.e2e else "-"})
    last = samples[-1] if samples else {}
    head = (f"{last.get('execs', 0)} execs over {last.get('t', 0):.0f} s; coverage {last.get('cov', 0)}; corpus "
            f"{last.get('corpus', 0)}; {len(findings)} finding(s); harness errors {last.get('harness_errors', 0)}; "
            f"vLLM mutant: {summary.get('mutant') or 'none'}")
    if summary.get("vllm_version"):  # the vLLM the campaign ran (a tree: its path and commit)
        head = f"vLLM {_vllm_label(summary)}; " + head
    if other:
        head += f"; {len(other)} more kept by campaigns of another configuration (not judged here)"
    if summary.get("engine"):
        head += "; engine tier: " + ", ".join(f"{k} {v}" for k, v in summary["engine"].items())
    if summary.get("outputs"):
        head += f"; model tier: {describe_outputs(summary['outputs'])}"
    md = ["# hybrid-harness fuzz report", "", head, ""] + [f"![{p}]({p})" for p in pngs] + [
        "", "| finding | verdict | new signatures | known (by fix replay) | minimized | regression test | found after (s) "
        "| e2e (real output) |", "|---|---|---|---|---|---|---|---|"]
    md += [f"| `{f['name']}` | {'NEW' if f['new'] else 'known'} | `{f['signature'] if f['new'] else '-'}` | {f['known'] or '-'} | {'yes' if f['minimized'] else 'no'} | "
           f"{'yes' if f['regression'] else 'no'} | {f['after_s'] if f['after_s'] is not None else '-'} | {f['e2e']} |"
           for f in findings]
    md_path = directory / "report.md"
    md_path.write_text("\n".join(md) + "\n")
    rows = "".join(
        f"<tr><td><code>{html.escape(f['name'])}</code></td><td><code>{html.escape(f['signature'])}</code></td>"
        f"<td>{html.escape(f['known'] or '-')}</td><td>{html.escape(f['headline'])}</td>"
        f"<td>{'yes' if f['minimized'] else 'no'}</td><td>{html.escape(f['e2e'])}</td></tr>" for f in findings)
    imgs = "".join(f'<img src="{p}" alt="{p}">' for p in pngs)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>hybrid-harness fuzz report</title>"
            f"<style>body{{font-family:sans-serif;margin:2em}}td,th{{border:1px solid #ccc;padding:4px}}"
            f"table{{border-collapse:collapse}}img{{margin:4px}}</style></head><body>"
            f"<h1>hybrid-harness fuzz report</h1><p>{html.escape(head)}</p>{imgs}"
            f"<table><tr><th>finding</th><th>signature</th><th>known issue</th><th>first finding</th>"
            f"<th>minimized</th><th>e2e (real output)</th></tr>{rows}</table></body></html>")
    html_path = directory / "report.html"
    html_path.write_text(page)
    return md_path, html_path
