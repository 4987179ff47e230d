#!/usr/bin/env bash
# THE test command: installs missing dependencies, configures and builds everything (build/, Release, ninja
# when available), then runs ctest. GPU tests (label `gpu`) run only when `nvidia-smi -L` lists a GPU; without
# one they are listed as skipped. Fuzz tests (label `fuzz`) are part of the normal run.
# Exits non-zero on any failure, and when no tests are configured at all.
# Final step, after ctest: the Python package (scripts/python-test.sh; ZIPCOMM_SKIP_PYTHON=1 leaves it out).
# Env: see scripts/build.sh (ZIPCOMM_BUILD_DIR, ZIPCOMM_BUILD_TYPE, ZIPCOMM_CMAKE_ARGS).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${ZIPCOMM_BUILD_DIR:-build}

bash scripts/install-deps.sh
bash scripts/build.sh

jobs=$(nproc 2>/dev/null || echo 2)

# Never pass silently with no tests.
total=$(ctest --test-dir "$BUILD_DIR" -N | sed -n 's/^Total Tests: *\([0-9]*\).*/\1/p')
if [ -z "$total" ] || [ "$total" -eq 0 ]; then
  echo "!!! FAILURE: no tests configured (is tests/CMakeLists.txt there? ZIPCOMM_BUILD_TESTS=ON?)" >&2
  exit 1
fi

if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "=== GPU present: $(nvidia-smi -L | head -n 4 | tr '\n' ' ') ==="
  echo "=== ctest: all $total tests ==="
  rc=0
  ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j"$jobs" || rc=$?
else
  gpu_tests=$(ctest --test-dir "$BUILD_DIR" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
  n_gpu=$(printf '%s' "$gpu_tests" | grep -c . || true)
  echo "=== ctest: $(( total - n_gpu )) of $total tests (no GPU: label gpu excluded) ==="
  rc=0
  ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure --no-tests=error -j"$jobs" || rc=$?
  if [ "$n_gpu" -gt 0 ]; then
    cuda_note="they were compiled for sm_90"
    grep -q '^ZIPCOMM_HAS_CUDA:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null \
      || cuda_note="they were NOT even compiled: no CUDA toolkit"
    echo
    echo "=== SKIPPED: $n_gpu GPU tests (label gpu): $(echo "$gpu_tests" | paste -sd ' ' -) — no GPU on this machine; $cuda_note ==="
    echo
  fi
fi

# ---------------------------------------------------------------------------------------------------------
# Final step, apart from the C++ build and ctest: the Python package. It runs whatever ctest gave, and the
# script exits with ctest's status when ctest failed, else with the Python step's.
python_rc=0
python_result="passed or skipped (see above)"
if [ "${ZIPCOMM_SKIP_PYTHON:-0}" = 1 ]; then
  python_result="not run (ZIPCOMM_SKIP_PYTHON=1)"
elif ! bash scripts/python-test.sh; then
  python_rc=1
  python_result="FAILED"
fi
ctest_result=passed
if [ "$rc" -ne 0 ]; then ctest_result="FAILED (exit $rc)"; fi
echo "=== summary: ctest $ctest_result; Python package $python_result ==="
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$python_rc"
