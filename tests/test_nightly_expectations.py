"""The workflows' campaign expectations hold against real short campaigns.

Each job of .github/workflows/nightly-fuzz.yml (and ci.yml) fuzzes one release and checks the campaign with
.github/scripts/expect_campaign.py: `clean` (exit 0) or `known` (exit 0, and the campaign reports the job's known
issues, e.g. the seed bug on 0.26.0-0.27.1). The test renders a job's fuzz step as GitHub would (its matrix values
and env) and runs it with bash, verbatim, except that `make` is a stand-in running the Makefile's `fuzz` recipe
with a run budget instead of minutes (RUNS executions, one worker) on the venv of the job's release; the
expectation line itself is the workflow's. Jobs whose release has no venv here are skipped.

By default only the cheapest representative of each expectation runs (a symbolic-tier job: the `clean` one on the
default release, the `known` one on the first release with a venv here, e.g. 0.27.1 after
`make venv VLLM=0.27.1`); NIGHTLY_JOBS=all runs every job with a venv (minutes per engine-tier job).
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from testlib import ROOT

WORKFLOWS = {name: ROOT / ".github" / "workflows" / name for name in ("nightly-fuzz.yml", "ci.yml")}
RUNS = 100  # executions per campaign: the seed corpus, a 25-scenario opening sweep, then libFuzzer
DEFAULT_VLLM = re.search(r"^DEFAULT_VLLM := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
TIMEOUT_S = 300  # per job; a representative symbolic job takes well under a minute alone
RUN_NUMBER = "1"  # ${{ github.run_number }}: the campaign's seed


def venv(release: str) -> Path:
    """The venv `make venv VLLM=release` builds (the Makefile's VENV rule)."""
    return ROOT / (".venv" if release == DEFAULT_VLLM else f".venv-{release}")


def installed(release: str) -> bool:
    return (venv(release) / ".hybrid-harness-installed").is_file() and (venv(release) / "bin" / "python").is_file()


def evaluate(expr: str, matrix: dict) -> str:
    """A GitHub expression of the forms the workflows use: `matrix.K`, `github.run_number`, 'literal', joined
    by `||` (the first truthy operand)."""
    for operand in (o.strip() for o in expr.split("||")):
        if operand.startswith("matrix."):
            value = matrix.get(operand.removeprefix("matrix."))
        elif operand == "github.run_number":
            value = RUN_NUMBER
        elif re.fullmatch(r"'[^']*'", operand):
            value = operand[1:-1]
        else:
            raise AssertionError(f"expression the test cannot render: {expr!r}")
        if value:
            return str(value)
    return ""


def render(text: str, matrix: dict) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: evaluate(m.group(1), matrix), text)


def jobs() -> list[tuple[str, dict, dict, str]]:
    """(id, matrix entry, job env, the fuzz step's script) of every matrix entry whose job checks a campaign."""
    out = []
    for name, path in WORKFLOWS.items():
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            steps = [s["run"] for s in job["steps"] if "expect_campaign.py" in s.get("run", "")]
            if not steps:
                continue
            (script,) = steps
            for entry in job["strategy"]["matrix"]["include"]:
                env = {k: render(str(v), entry) for k, v in (job.get("env") or {}).items()}
                parts = [entry["vllm"], entry.get("tier") or "symbolic", entry.get("runner"), entry.get("mode"),
                         entry.get("model"), entry["expect"]]
                out.append((f"{name.removesuffix('.yml')}:{'-'.join(p for p in parts if p)}", entry, env,
                            render(script, entry)))
    return out


JOBS = jobs()


def representatives() -> set[str]:
    """The cheapest job per (workflow, expectation) with a venv here: the symbolic tier, the default release
    first, then the newest release."""
    chosen: dict[tuple[str, str], tuple] = {}
    for job_id, entry, _env, _script in JOBS:
        if not installed(entry["vllm"]) or (entry.get("tier") or "symbolic") != "symbolic":
            continue
        key = (job_id.split(":")[0], entry["expect"])
        rank = (entry["vllm"] != DEFAULT_VLLM, [-int(p) for p in entry["vllm"].split(".")])
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, job_id)
    # one campaign per (release, expectation): the ci.yml job repeats a nightly job's campaign
    seen, out = set(), set()
    for (_workflow, expect), (_rank, job_id) in sorted(chosen.items(), key=lambda kv: kv[0][0] != "nightly-fuzz"):
        release = next(e["vllm"] for j, e, *_ in JOBS if j == job_id)
        if (release, expect) not in seen:
            seen.add((release, expect))
            out.add(job_id)
    return out


# `make` for the fuzz step: the Makefile's fuzz recipe (FUZZ_DIR rule, `mkdir -p`, the campaign's code in
# FUZZ_DIR/exit-code, make's own exit 2 on a failed recipe) with a run budget instead of MINUTES and JOBS
MAKE_STAND_IN = textwrap.dedent("""\
    import os, subprocess, sys
    from pathlib import Path
    target, *assignments = sys.argv[1:]
    assert target == "fuzz", f"the fuzz step runs make {target}"
    args = dict(a.split("=", 1) for a in assignments)
    assert set(args) <= {"VLLM", "TIER", "MINUTES", "JOBS", "SEED"}, f"make variables the stand-in ignores: {args}"
    assert args["VLLM"] == os.environ["NIGHTLY_RELEASE"], f"the step fuzzes {args['VLLM']}, not the job's release"
    tier = args.get("TIER") or os.environ.get("TIER") or "symbolic"
    fuzz_dir = "artifacts/fuzz" if tier == "symbolic" else f"artifacts/fuzz-{tier}"
    Path(fuzz_dir).mkdir(parents=True, exist_ok=True)
    code = subprocess.run([os.environ["NIGHTLY_PYTHON"], "-m", "harness", "fuzz", "--runs", os.environ["NIGHTLY_RUNS"],
                           "--jobs", "1", "--seed", args.get("SEED", "0"), "--seed-corpus", "--no-progress",
                           "--artifacts", fuzz_dir, "--tier", tier]).returncode
    Path(fuzz_dir, "exit-code").write_text(f"{code}\\n")
    sys.exit(2 if code else 0)
    """)


def run_step(tmp_path: Path, entry: dict, env: dict, script: str) -> subprocess.CompletedProcess:
    """The job's rendered fuzz step, in a fresh checkout-like folder (`.github` linked), with `make` stood in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text(f"#!{sys.executable}\n{MAKE_STAND_IN}")
    make.chmod(make.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "checkout"
    work.mkdir()
    (work / ".github").symlink_to(ROOT / ".github")
    base = {k: v for k, v in os.environ.items() if not k.startswith("HH_") and k != "PYTHONPATH"}
    step_env = dict(base, **env, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", NIGHTLY_RUNS=str(RUNS),
                    NIGHTLY_RELEASE=entry["vllm"], NIGHTLY_PYTHON=str(venv(entry["vllm"]) / "bin" / "python"))
    (work / "step.sh").write_text(script)
    # GitHub's `run:` shell for bash, in a session of its own: on a timeout the step and its campaign (which stops
    # its workers on SIGTERM) are ended, not left running
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", "step.sh"], cwd=work, env=step_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the step ran past {TIMEOUT_S} s:\n{(out + err)[-4000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_every_job_names_an_expectation_the_check_knows():
    """Fast: every job's expectation is one the check script accepts, and `known` jobs name their issues (ids of
    harness/known_issues.toml)."""
    ids = set(re.findall(r'^id = "([^"]+)"$', (ROOT / "harness" / "known_issues.toml").read_text(), re.M))
    assert JOBS
    for job_id, entry, _env, script in JOBS:
        assert entry["expect"] in ("clean", "known"), f"{job_id}: a campaign fuzzes the fixed system and exits 0"
        known = (entry.get("known") or "").replace(",", " ").split()
        assert bool(known) == (entry["expect"] == "known"), f"{job_id}: known issues go with expect: known"
        assert set(known) <= ids, f"{job_id}: unknown issue ids {set(known) - ids}"
        assert f'--expect {entry["expect"]}' in script, job_id


@pytest.mark.slow
@pytest.mark.parametrize("job_id,entry,env,script", JOBS, ids=[j[0] for j in JOBS])
def test_job_expectation_holds_on_a_real_short_campaign(tmp_path, job_id, entry, env, script):
    if not installed(entry["vllm"]):
        pytest.skip(f"no venv for vLLM {entry['vllm']} here (make venv VLLM={entry['vllm']})")
    if os.environ.get("NIGHTLY_JOBS") != "all" and job_id not in representatives():
        pytest.skip(f"not a representative job (NIGHTLY_JOBS=all runs it; running: {sorted(representatives())})")
    done = run_step(tmp_path, entry, env, script)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and " as expected (" in done.stdout, f"{job_id}: the step failed:\n{out[-4000:]}"
    tier = entry.get("tier") or "symbolic"
    artifacts = tmp_path / "checkout" / ("artifacts/fuzz" if tier == "symbolic" else f"artifacts/fuzz-{tier}")
    assert (artifacts / "exit-code").read_text().strip() == "0" and (artifacts / "campaign.json").is_file(), out
    # the check is not vacuous on these artifacts: a known issue this campaign never reported fails it
    check = [sys.executable, str(ROOT / ".github" / "scripts" / "expect_campaign.py"), str(artifacts)]
    wrong = subprocess.run([*check, "--expect", "known", "--known-issues", "no-such-issue"], capture_output=True,
                           text=True)
    assert wrong.returncode == 1 and "not as expected" in wrong.stderr, wrong.stderr
