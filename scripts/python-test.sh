#!/usr/bin/env bash
# Tests the Python package: a venv in build-python/venv, `pip install ./python` (the extension is built from
# ../include, with the GPU codec when nvcc is found), then pytest tests/python against the installed package.
# When pip cannot reach the package index (no network) and the venv does not already hold what is needed, it
# says so and exits 0: the C++ tests stay the gate there. Otherwise any build or test failure exits non-zero.
# Env: ZIPCOMM_PYTHON (interpreter, default python3), ZIPCOMM_PYTHON_CUDA (ON/OFF: force the GPU codec in or
# out), ZIPCOMM_PYTHON_TORCH (cpu/pypi/off: where torch comes from when missing, default cpu), ZIPCOMM_PYTHON_JOBS (build jobs, default nproc), ZIPCOMM_TEST_SEED (replay a run's random tests),
# ZIPCOMM_FILE (zipcomm-file to compare bytes with; default: the one in ${ZIPCOMM_BUILD_DIR:-build}).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${ZIPCOMM_PYTHON:-python3}
VENV=build-python/venv
LOG=build-python/install.log
# What the tests import, and the build requirements of python/pyproject.toml (the build reuses this venv so
# that it needs no network and its build folder is kept between runs).
REQUIREMENTS=(pytest numpy ml_dtypes "scikit-build-core>=0.10" "nanobind>=2.2")
start=$(date +%s)

skip() {
  echo
  echo "=== SKIPPED: Python package tests: $1 ==="
  echo
  exit 0
}
fail() {
  echo "!!! Python package: $1 failed; last 40 lines of $LOG:" >&2
  tail -n 40 "$LOG" >&2
  exit 1
}

mkdir -p build-python
: >"$LOG"
command -v "$PYTHON" >/dev/null 2>&1 || skip "no $PYTHON on PATH"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 \
    || skip "'$PYTHON -m venv' does not work here (Debian: apt-get install python3-venv)"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

echo "=== Python package: requirements ($VENV) ==="
if ! "${pip[@]}" install --retries 1 --timeout 20 "${REQUIREMENTS[@]}" >>"$LOG" 2>&1; then
  # Tell "no network" apart from a real failure: can pip reach its index at all?
  if ! "${pip[@]}" index versions pip --retries 0 --timeout 10 >>"$LOG" 2>&1; then
    skip "pip cannot reach the package index (no network?) and $VENV lacks ${REQUIREMENTS[*]}"
  fi
  fail "pip install ${REQUIREMENTS[*]}"
fi

# torch runs the DDP hook tests (a 4-process gloo training run) and the torch round trips. It is big, so it comes
# from PyTorch's CPU-only index (~200 MB) unless it is already in the venv, or from PyPI (with its CUDA libraries,
# several GB) where that index cannot be reached; ZIPCOMM_PYTHON_TORCH=pypi takes it from PyPI directly, =off leaves
# it out. Without it those tests skip.
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  case "${ZIPCOMM_PYTHON_TORCH:-cpu}" in
    off) ;;
    pypi) "${pip[@]}" install --retries 1 --timeout 60 torch >>"$LOG" 2>&1 || true ;;
    *) # PyTorch's CPU-only index; where it cannot be reached, PyPI's torch (with its CUDA libraries)
       "${pip[@]}" install --retries 1 --timeout 60 torch --index-url https://download.pytorch.org/whl/cpu \
         >>"$LOG" 2>&1 ||
         { echo "=== Python package: PyTorch's CPU index unreachable; torch from PyPI (large) ===";
           "${pip[@]}" install --retries 1 --timeout 60 torch >>"$LOG" 2>&1 || true; } ;;
  esac
  "$VENV/bin/python" -c "import torch" >/dev/null 2>&1 ||
    echo "=== Python package: torch is not installed (ZIPCOMM_PYTHON_TORCH=${ZIPCOMM_PYTHON_TORCH:-cpu}): the DDP hook and torch tests will SKIP ==="
fi

cuda_args=()
if [ -n "${ZIPCOMM_PYTHON_CUDA:-}" ]; then
  cuda_args=(-Ccmake.define.ZIPCOMM_PYTHON_CUDA="$ZIPCOMM_PYTHON_CUDA")
fi
# nvcc: from PATH, else the standard toolkit location (as scripts/build.sh).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
echo "=== Python package: pip install ./python ==="
build_start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=${ZIPCOMM_PYTHON_JOBS:-$(nproc 2>/dev/null || echo 2)} \
  "${pip[@]}" install --no-build-isolation --no-deps -v \
  -Cbuild-dir="$PWD/build-python/cmake-build-${ZIPCOMM_PYTHON_CUDA:-default}" "${cuda_args[@]}" ./python \
  >>"$LOG" 2>&1 || fail "pip install ./python"
grep -E -- '-- zipcomm-python:' "$LOG" | sed 's/^ *//' || true
echo "=== Python package: built and installed in $(( $(date +%s) - build_start )) s (log: $LOG) ==="

echo "=== Python package: pytest tests/python ==="
# From the repository root no folder named zipcomm shadows the installed package.
# -rfEs: a summary line for each failure, error and skip (with the skip's reason, e.g. no GPU).
rc=0
"$VENV/bin/python" -m pytest tests/python -rfEs -p no:cacheprovider || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "!!! Python package tests FAILED (pytest exit $rc) after $(( $(date +%s) - start )) s" >&2
  exit "$rc"
fi
echo "=== Python package tests: ok in $(( $(date +%s) - start )) s ==="
