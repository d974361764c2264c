#!/usr/bin/env bash
# Install what models/gpu.py needs on a CUDA machine (docs/gpu.md): triton, einops and a pure-Python mamba-ssm.
#
#   tools/gpu_setup.sh [WHEEL_DIR]     # WHEEL_DIR (default .whl) holds wheels / the mamba-ssm sdist: offline
#                                      # install from it (--no-index); without it, pip's configured index is used
#
# mamba-ssm ships no wheel on PyPI, only an sdist whose setup.py compiles the selective_scan_cuda extension.
# MAMBA_SKIP_CUDA_BUILD=TRUE builds without it (the Triton kernels need none); MAMBA_FORCE_BUILD=TRUE stops
# setup.py fetching a prebuilt wheel from GitHub (offline, that fetch fails with a URLError it does not catch).
# --no-build-isolation: setup.py imports torch, which must be the installed one. --no-deps: its install_requires
# name transformers and ninja, which the Triton kernels do not need.
# Every step that cannot be done ends the script with "gpu_setup: SKIPPED: <why>" and exit 0; gpu_check.py then
# reports SKIPPED with models.gpu.available()'s reason.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${1:-${WHEEL_DIR:-.whl}}

skip() { echo "gpu_setup: SKIPPED: $*"; exit 0; }
has() { "$PY" -c "import $1" >/dev/null 2>&1; }
pipi() {
    if [ -d "$WHEELS" ]; then
        "$PY" -m pip install -q --disable-pip-version-check --no-index --find-links "$WHEELS" "$@"
    else
        "$PY" -m pip install -q --disable-pip-version-check "$@"
    fi
}

"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || skip "no CUDA device visible to $PY's torch"
has triton || pipi triton || skip "triton is not installed and could not be (no triton wheel in $WHEELS?)"
has einops || pipi einops || skip "einops could not be installed (mamba_ssm.ops.triton imports it)"
for m in setuptools wheel packaging; do  # build requirements, needed without build isolation
    has $m || pipi $m || skip "build requirement $m could not be installed"
done
if "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("mamba_ssm") is None)'; then
    echo "gpu_setup: mamba-ssm already installed"
else
    MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE pipi --no-build-isolation --no-deps mamba-ssm \
        || skip "mamba-ssm could not be built (offline without its sdist in $WHEELS?)"
fi
"$PY" -c 'from models.gpu import available; ok, why = available(); print("gpu_setup: models.gpu.available():", ok, why)'
