"""A vLLM tree named with `--vllm PATH` (harness/release.py): an unpacked wheel or a source checkout runs in place of
the installed release, every process imports it, its version and commit are recorded; a tree newer than the newest
tested release runs; one that lacks an API the harness needs is bad input naming the API and its vLLM file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import EXIT_BAD_INPUT
from harness.release import TREE_ENV, child_pythonpath, vllm_source
from testlib import ROOT, SCENARIOS

SEED = SCENARIOS / "seed-external-hit-same-block.json"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def _tree(dest: Path, version: str) -> Path:
    """The vLLM this suite runs, laid out as an unpacked wheel: its Python files (hard links: a test that edits one
    replaces it, never writes through the link) and a dist-info naming `version`. vLLM's compiled kernels stay
    behind: the allocator, the scheduler and the symbolic tier need none."""
    src = Path(vllm_source().path) / "vllm"
    shutil.copytree(src, dest / "vllm", copy_function=_link_or_copy,
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or n.endswith(".so")])
    dist = dest / f"vllm-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return dest


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.unlink()  # a hard link to the installed file: write a new file instead
    path.write_text(text.replace(old, new))


def _harness(*args: str, tree: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != TREE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and p != vllm_source().path)
    cmd = [sys.executable, "-m", "harness", *(["--vllm", str(tree)] if tree else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def _verdict(done: subprocess.CompletedProcess) -> tuple:
    doc = json.loads(done.stdout)
    return done.returncode, doc["ok"], sorted(f["signature"] for f in doc["findings"]), doc


@pytest.mark.slow
def test_an_unpacked_wheel_gives_the_installed_releases_verdict_and_is_recorded(tmp_path):
    version = vllm_source().version
    tree = _tree(tmp_path / "wheel", version)
    installed = _verdict(_harness("run", str(SEED), "--json", "--artifacts", str(tmp_path / "a")))
    named = _verdict(_harness("run", str(SEED), "--json", "--artifacts", str(tmp_path / "b"), tree=tree))
    assert named[:3] == installed[:3]
    doc = named[3]
    assert (doc["vllm_version"], doc["vllm_source"], doc["vllm_kind"]) == (version, str(tree), "wheel")


@pytest.mark.slow
def test_a_newer_checkout_runs_and_one_without_a_needed_api_is_bad_input_naming_it(tmp_path):
    tree = _tree(tmp_path / "main", "0.35.0.dev0")
    shutil.rmtree(tree / "vllm-0.35.0.dev0.dist-info")  # a source checkout: setuptools-scm's _version.py, git
    version_py = tree / "vllm" / "_version.py"
    version_py.unlink(missing_ok=True)
    version_py.write_text("__version__ = version = '0.35.0.dev0'\n")
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "main"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    done = _harness("vllm-version", tree=tree)
    assert done.returncode == 0 and done.stdout.startswith(f"vllm 0.35.0.dev0 (checkout {tree}, commit {commit[:12]}"), \
        done.stderr
    code, ok, _, doc = _verdict(_harness("run", str(SEED), "--json", "--artifacts", str(tmp_path / "a"), tree=tree))
    assert code == (0 if ok else 1)  # it runs: a verdict, no bad input for the version
    assert (doc["vllm_version"], doc["vllm_commit"], doc["vllm_kind"]) == ("0.35.0.dev0", commit, "checkout")

    _replace(tree / "vllm" / "v1" / "core" / "sched" / "scheduler.py", "def _mamba_block_aligned_split(",
             "def _mamba_block_aligned_split_renamed(")
    done = _harness("run", str(SEED), tree=tree)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "Scheduler._mamba_block_aligned_split (vllm/v1/core/sched/scheduler.py)" in done.stderr


def test_a_path_without_vllm_is_bad_input(tmp_path, capsys):
    assert main(["--vllm", str(tmp_path), "vllm-version"]) == EXIT_BAD_INPUT
    assert "no vLLM package there" in capsys.readouterr().err


def test_child_processes_keep_the_users_pythonpath_and_get_the_tree_first(monkeypatch):
    """Campaign workers (harness/campaign.py): the user's PYTHONPATH kept, the repository appended, the tree first."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/user/lib", "/tree"]))
    monkeypatch.setenv(TREE_ENV, "/tree")
    assert child_pythonpath("/repo").split(os.pathsep) == ["/tree", "/user/lib", "/repo"]
    monkeypatch.delenv(TREE_ENV)
    assert child_pythonpath("/repo").split(os.pathsep) == ["/user/lib", "/tree", "/repo"]
