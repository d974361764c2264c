"""The mutant bank: every mutant applies, self-checks and undoes; user files load like built-ins."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.errors import BadInput
from harness.mutants import REGISTRY, apply_mutant, get_mutant
from harness.vllm_adapter import (block_pool_class, installed_version, kv_cache_manager_class, mamba_manager_class,
                                   request_class, scheduler_class)

from testlib import release_in, run

USER_FILE = '''
from harness.mutants.base import Mutant, mamba_method_wrapped, wrap_mamba_method


def _make(original):
    def take_pending_cow_copies(self):
        return original(self)[1:]
    return take_pending_cow_copies


MUTANT = Mutant(name="user", bug_class="drops the first CoW copy", releases="any", origin="local",
                patch=lambda: wrap_mamba_method("take_pending_cow_copies", _make),
                is_applied=lambda: mamba_method_wrapped("take_pending_cow_copies"))
'''


def _methods():
    import sys

    hash_map = getattr(sys.modules[block_pool_class().__module__], "BlockHashToBlockMap", None)  # 0.34+'s int-id map
    classes = {"": mamba_manager_class(), "pool.": block_pool_class(), "manager.": kv_cache_manager_class(),
               "scheduler.": scheduler_class(), "request.": request_class(),
               **({"hash-map.": hash_map} if hash_map is not None else {})}
    return {f"{prefix}{k}": v for prefix, cls in classes.items() for k, v in vars(cls).items()}


def test_bank_has_at_least_twelve_with_public_origins():
    assert len(REGISTRY) >= 12
    origins = " ".join(m.origin for m in REGISTRY.values())
    for ref in ("#43090", "#48375", "#57908", "seed"):
        assert ref in origins


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_mutant_applies_self_checks_and_undoes(name):
    if not release_in(REGISTRY[name].releases):  # e.g. its target method came in a later release
        pytest.skip(f"{name} targets vLLM {REGISTRY[name].releases}, not the installed {installed_version()}")
    if REGISTRY[name].runner:  # patches model-runner code, not the allocator (tests/test_engine_v1.py runs them)
        pytest.skip(f"{name} patches the {REGISTRY[name].runner} model runner, not MambaManager / BlockPool")
    before = _methods()
    undo = apply_mutant(name)
    try:
        assert REGISTRY[name].is_applied()
        assert _methods() != before
    finally:
        undo()
    assert _methods() == before and not REGISTRY[name].is_applied()


def test_user_mutant_file_loads_and_kills(tmp_path):
    path = tmp_path / "my_patch.py"
    path.write_text(USER_FILE)
    mutant = get_mutant(str(path))
    assert mutant.name == "user"
    _, findings = run("seed-external-hit-same-block.json", str(path))
    assert findings  # the dropped CoW copy leaves the partial-tail key on an unwritten block


def test_bad_mutant_files_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        get_mutant(str(tmp_path / "missing.py"))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(BadInput, match="must define MUTANT"):
        get_mutant(str(empty))
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('nope')\n")
    with pytest.raises(BadInput, match="failed to import"):
        get_mutant(str(broken))


def test_mutants_list(capsys):
    assert main(["mutants", "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in REGISTRY)
