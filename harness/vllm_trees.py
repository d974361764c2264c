"""Which vLLM releases a cross-release command (`bisect`, the upstream checks) can run, and how to start each.

A release runs in its own process, by its own venv where one exists (`.venv-X`, `make venv VLLM=X`; `.venv` holds
the default release) or else by the default venv importing the release's unpacked wheel (`--vllm TREE`,
harness/release.py). Trees are unpacked on demand from the wheel on PyPI (`pip download --no-deps`, pip checks
the index's hash) into artifacts/cache/vllm-trees/X/: only the `vllm` package and its dist-info, about 1 GB each,
instead of a 3 GB venv. Commands fill the cache; tests only read it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput, HarnessError
from harness.known_issues import ROOT

# vLLM's releases from the harness's floor (0.26.0) to the newest it has run (PyPI's list, 2026): bisect's default
RELEASES = ("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
DEFAULT_RELEASE = "0.34.0"  # the Makefile's DEFAULT_VLLM: `.venv` holds it
CACHE = ROOT / "artifacts" / "cache"
TREES = CACHE / "vllm-trees"
WHEELS = CACHE / "wheels"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def parse_releases(text: str | None, known: tuple[str, ...] = RELEASES) -> list[str]:
    """`A..B` (every known release from A to B, either end optional), `A,B,C`, or None (all of them)."""
    if not text:
        return list(known)
    for v in re.split(r"\.\.|,", text):
        if v and not re.fullmatch(r"\d+\.\d+\.\d+", v):
            raise BadInput(f"--releases {text!r}: {v!r} is not a release like 0.33.0 (give A..B or A,B,C)")
    if ".." in text:
        lo, _, hi = text.partition("..")
        picked = [v for v in known if (not lo or _key(v) >= _key(lo)) and (not hi or _key(v) <= _key(hi))]
    else:
        picked = sorted(dict.fromkeys(v for v in text.split(",") if v), key=_key)
    if not picked:
        raise BadInput(f"--releases {text!r}: no release in {known[0]}..{known[-1]}")
    return picked


@dataclass(frozen=True)
class ReleaseRunner:
    """How to start a process on one release: its python, and the vLLM tree it imports (None: the venv's own)."""

    version: str
    python: str
    tree: str | None

    @property
    def how(self) -> str:
        return f"--vllm {os.path.relpath(self.tree, ROOT)}" if self.tree else os.path.relpath(
            Path(self.python).parent.parent, ROOT)

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "HH_VLLM"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.tree, str(ROOT)]))
        if self.tree:
            env["HH_VLLM"] = self.tree
        return {**env, **extra}


def venv_python(version: str) -> Path | None:
    venv = ROOT / (".venv" if version == DEFAULT_RELEASE else f".venv-{version}")
    python = venv / "bin" / "python"
    return python if python.exists() else None


def tree_path(version: str) -> Path:
    return TREES / version


def has_tree(version: str) -> bool:
    return (tree_path(version) / ".complete").exists()


def fetch_tree(version: str) -> Path:
    """The release's unpacked wheel, downloaded and unpacked once (network: commands only)."""
    dest = tree_path(version)
    if has_tree(version):
        return dest
    base = venv_python(DEFAULT_RELEASE)
    if base is None:
        raise BadInput(f"vLLM {version}: no venv to run it from; run `make venv` first")
    WHEELS.mkdir(parents=True, exist_ok=True)
    wheel = next(WHEELS.glob(f"vllm-{version}-*.whl"), None)
    if wheel is None:
        print(f"downloading vLLM {version}'s wheel from PyPI", file=sys.stderr, flush=True)
        out = subprocess.run([str(base), "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                              "--platform", "manylinux2014_x86_64", f"vllm=={version}", "-d", str(WHEELS)],
                             capture_output=True, text=True)
        wheel = next(WHEELS.glob(f"vllm-{version}-*.whl"), None)
        if out.returncode or wheel is None:
            raise BadInput(f"vLLM {version}: no wheel from PyPI ({out.stderr.strip().splitlines()[-1:]})")
    staged = dest.with_name(dest.name + ".part")
    shutil.rmtree(staged, ignore_errors=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                # the package and its metadata (release.vllm_source reads the version from the dist-info)
                if (name.startswith("vllm/") or name.startswith(f"vllm-{version}.dist-info/")) and ".." not in name:
                    zf.extract(name, staged)
    except (zipfile.BadZipFile, OSError) as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise BadInput(f"{wheel} does not unpack ({exc}); delete it and rerun") from None
    (staged / ".complete").write_text(wheel.name + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staged.rename(dest)
    return dest


def runner_for(version: str, *, fetch: bool = True, prefer_tree: bool = False) -> ReleaseRunner:
    """The release's own venv, else the default venv with the release's unpacked wheel (fetched if `fetch`)."""
    own = venv_python(version)
    if own is not None and not (prefer_tree and has_tree(version)):
        return ReleaseRunner(version, str(own), None)
    base = venv_python(DEFAULT_RELEASE)
    if base is None:
        raise BadInput("no .venv: run `make venv` first")
    if not has_tree(version):
        if not fetch:
            raise BadInput(f"vLLM {version}: neither .venv-{version} nor an unpacked tree in {tree_path(version)}")
        fetch_tree(version)
    return ReleaseRunner(version, str(base), str(tree_path(version)))


def run_json_lines(runner: ReleaseRunner, args: list[str], timeout: float = 3600) -> list[dict]:
    """Run `python ARGS` on a release; its stdout's JSON lines. A crash of the worker is a harness error."""
    import json

    out = subprocess.run([runner.python, *args], cwd=ROOT, env=runner.env(), capture_output=True, text=True,
                         timeout=timeout)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 and not rows:
        tail = "\n".join(out.stderr.strip().splitlines()[-5:])
        raise HarnessError(f"vLLM {runner.version} ({runner.how}): worker exit {out.returncode}: {tail}")
    return rows


__all__ = ["RELEASES", "ReleaseRunner", "fetch_tree", "has_tree", "parse_releases", "run_json_lines", "runner_for",
           "tree_path", "venv_python"]
