"""bench/measure/peer_tests.py without the network: the sdist's sha256 check (exit 2), the extraction of the selected tests
and their helpers, the plugin's rules and verdict on a tiny fake suite, and the table writer."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import sys
import tarfile

import pytest

from testlib import ROOT

sys.path.insert(0, str(ROOT / "bench" / "measure"))  # the plugin imports as `peer_plugin` (what `-p peer_plugin` loads)
_spec = importlib.util.spec_from_file_location("peer_tests", ROOT / "bench" / "measure" / "peer_tests.py")
peer_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer_tests)
import peer_plugin  # noqa: E402

VERSION = "9.9.9"


def _sdist(path, files: dict[str, str]) -> bytes:
    """A .tar.gz laid out like vLLM's sdist (everything under vllm-X/)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{VERSION}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def _cache(tmp_path, content: bytes, digest: str | None = None):
    folder = tmp_path / "vllm-sdist"
    folder.mkdir(parents=True)
    (folder / f"vllm-{VERSION}.tar.gz").write_bytes(content)
    (folder / f"vllm-{VERSION}.tar.gz.sha256").write_text(f"{digest or hashlib.sha256(content).hexdigest()}  x\n")


def test_corrupt_cached_sdist_exits_2(tmp_path, capsys):
    _cache(tmp_path, b"not the sdist", digest="0" * 64)
    assert peer_tests.main(["--vllm", VERSION, "--cache", str(tmp_path), "--stock-only"]) == 2
    err = capsys.readouterr().err
    assert "corrupt" in err and "delete it and rerun" in err


def test_download_with_wrong_sha256_is_refused_and_not_kept(tmp_path, monkeypatch):
    src = tmp_path / "served.tar.gz"
    src.write_bytes(b"tampered")
    monkeypatch.setattr(peer_tests, "sdist_info", lambda v: (src.as_uri(), "0" * 64, f"vllm-{v}.tar.gz"))
    with pytest.raises(peer_tests.BadDownload, match="corrupt"):
        peer_tests.fetch_sdist(VERSION, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "vllm-sdist").iterdir())  # neither the file nor a .part left behind


def test_download_verified_then_cached_with_its_digest(tmp_path, monkeypatch):
    data = _sdist(tmp_path / "served.tar.gz", {"tests/__init__.py": ""})
    digest = hashlib.sha256(data).hexdigest()
    monkeypatch.setattr(peer_tests, "sdist_info",
                        lambda v: ((tmp_path / "served.tar.gz").as_uri(), digest, f"vllm-{v}.tar.gz"))
    path = peer_tests.fetch_sdist(VERSION, tmp_path / "cache")
    assert path.read_bytes() == data and path.with_name(path.name + ".sha256").read_text().startswith(digest)
    monkeypatch.setattr(peer_tests, "sdist_info", None)  # the second call must not ask PyPI
    assert peer_tests.fetch_sdist(VERSION, tmp_path / "cache") == path


def test_sdist_that_is_not_a_tarball_exits_2(tmp_path):
    _cache(tmp_path, b"sha256 matches, but this is no tar.gz")
    assert peer_tests.main(["--vllm", VERSION, "--cache", str(tmp_path), "--stock-only"]) == 2


def test_extracts_selected_trees_and_only_the_helpers_they_import(tmp_path):
    sdist = tmp_path / "s.tar.gz"
    _sdist(sdist, {
        "pyproject.toml": "[tool.pytest.ini_options]\n",
        "vllm/__init__.py": "",  # vLLM's own source must never shadow the installed package
        "tests/__init__.py": "", "tests/conftest.py": "", "tests/v1/__init__.py": "",
        "tests/v1/core/test_a.py": "from tests.v1.helpers import h\nfrom .utils import u\n",
        "tests/v1/core/utils.py": "",
        "tests/v1/helpers.py": "from tests.shared import s\n",
        "tests/shared/__init__.py": "from tests.shared import s\n", "tests/shared/s.py": "",
        "tests/v1/kv_connector/unit/test_b.py": 'PROXY = "examples/disagg/proxy.py"\n',
        "examples/disagg/proxy.py": "", "examples/other.py": "",
        "tests/unrelated/test_c.py": "", "tests/unrelated/conftest.py": "",
    })
    dest = peer_tests.extract_tests(sdist, VERSION, tmp_path)
    got = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() and p.name != ".complete"}
    assert got == {"pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/v1/__init__.py",
                   "tests/v1/core/test_a.py", "tests/v1/core/utils.py", "tests/v1/helpers.py",
                   "tests/shared/__init__.py", "tests/shared/s.py", "tests/v1/kv_connector/unit/test_b.py",
                   "examples/disagg/proxy.py"}


def test_rules_match_whole_test_names_with_any_parameters():
    mm = "tests/v1/core/test_scheduler.py::test_schedule_multimodal_requests"
    assert peer_plugin.rule_for(mm) == peer_plugin.rule_for(mm + "[a-1]") == "needs-multimodal-model-code"
    assert peer_plugin.rule_for(mm + "_and_more") is None
    assert peer_plugin.rule_for("tests/v1/core/test_scheduler_e2e.py::test_x") == "needs-served-model"  # a file
    assert len({name for name, _, _ in peer_plugin.RULES}) == len(peer_plugin.RULES)


def test_plugin_verdict_on_a_tiny_suite(tmp_path):
    """The real pytest call and plugin (stock: no mutant) on a fake suite: one failure, deselections, the report."""
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    core, kv = tmp_path / "tests/v1/core", tmp_path / "tests/v1/kv_connector/unit"
    core.mkdir(parents=True)
    kv.mkdir(parents=True)
    (core / "test_ok.py").write_text("import os\ndef test_hub_is_offline():\n"
                                     "    assert os.environ['HF_HUB_OFFLINE'] == '1'\n")
    (core / "test_scheduler_e2e.py").write_text("raise ImportError('never imported: a rule names this file')\n")
    (kv / "test_bad.py").write_text("def test_fails():\n    assert 1 == 2\n\ndef test_not_reached():\n    pass\n")
    row = peer_tests.run_tests(tmp_path, None, tmp_path / "logs", timeout_s=300)
    assert row["killed"] is True and row["exit"] == 1, row
    assert row["first_failure"] == "tests/v1/kv_connector/unit/test_bad.py::test_fails"
    assert row["why"].startswith("AssertionError") and row["passed"] == 1 and row["failed"] == 1  # -x: stopped
    assert row["deselected"]["needs-served-model"] == {"tests": 0, "files": 1}


def test_table_has_a_row_per_mutant_and_footnotes_every_rule_stub_and_setting():
    deselected = {name: {"tests": 2, "files": 1} for name, _, _ in peer_plugin.RULES}
    rows = [{"mutant": "stock", "killed": False, "passed": 10, "skipped": 1, "failed": 0, "errors": 0,
             "seconds": 9.5, "deselected": deselected},
            {"mutant": "m-killed", "killed": True, "first_failure": "tests/v1/core/test_a.py::test_x", "seconds": 3.2},
            {"mutant": "m-survived", "killed": False, "first_failure": None, "seconds": 9.9},
            {"mutant": "m-hung", "killed": None, "note": "timed out after 5 s in t", "seconds": 5.0},
            {"mutant": "w", "na": "n/a (worker code)", "killed": None}]
    text = peer_tests.table(rows, "HEADER", peer_plugin.RULES, peer_plugin.STUBS, peer_plugin.SETTINGS)
    assert text.startswith("HEADER")
    assert "10 passed, 1 skipped, 0 failed, 0 errors" in text
    assert "| `m-killed` | yes | `tests/v1/core/test_a.py::test_x` | 3.2 |" in text
    assert "| `m-survived` | no | - | 9.9 |" in text
    assert "| `m-hung` | timed out after 5 s in t | - | 5.0 |" in text
    assert "| `w` | n/a (worker code) | - | - |" in text
    assert "| stock" not in text.replace("| `stock", "")  # the stock run is the line above the table
    for name in [n for n, _, _ in peer_plugin.RULES] + [n for n, _ in peer_plugin.STUBS + peer_plugin.SETTINGS]:
        assert f"`{name}`" in text


def test_a_collection_error_is_no_verdict_and_a_mutant_file_path_keeps_the_rootdir(tmp_path):
    """A mutant given as a file path (one token: --hh-mutant=PATH) leaves pytest's rootdir at the suite, so the
    deselection rules still match; a test module that fails to import gives no verdict, never a kill."""
    cmd, _ = peer_tests.pytest_command(str(tmp_path / "my_mutant.py"), tmp_path / "r.json", False)
    assert f"--hh-mutant={tmp_path / 'my_mutant.py'}" in cmd and "--rootdir=." in cmd
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    core = tmp_path / "tests/v1/core"
    core.mkdir(parents=True)
    (tmp_path / "tests/v1/kv_connector/unit").mkdir(parents=True)
    (core / "test_needs_a_package.py").write_text("import a_package_this_venv_lacks\n")
    row = peer_tests.run_tests(tmp_path, None, tmp_path / "logs", timeout_s=300)
    assert row["killed"] is None and row["note"].startswith("collection error"), row
