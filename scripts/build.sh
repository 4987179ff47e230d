#!/usr/bin/env bash
# Configure + build zipcomm (used by scripts/test.sh and scripts/demo.sh; usable alone).
#   bash scripts/build.sh [target...]      (no target: everything)
# Env: ZIPCOMM_BUILD_DIR (default build), ZIPCOMM_BUILD_TYPE (default Release), ZIPCOMM_CMAKE_ARGS (extra
# configure arguments, e.g. "-DCMAKE_CUDA_ARCHITECTURES=90a"). The full log goes to $ZIPCOMM_BUILD_DIR/build.log;
# only its tail is shown on failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=${ZIPCOMM_BUILD_DIR:-build}
BUILD_TYPE=${ZIPCOMM_BUILD_TYPE:-Release}
LOG="$BUILD_DIR/build.log"

# nvcc: from PATH, else the standard toolkit location; none at all -> host-only build, said loudly.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
mkdir -p "$BUILD_DIR"
: >"$LOG"
fail() {
  echo "!!! $1 failed; last 60 lines of $LOG:" >&2
  tail -n 60 "$LOG" >&2
  exit 1
}

gen_args=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  gen_args=(-G Ninja)   # an existing build dir keeps its generator
fi
echo "=== configure ($BUILD_DIR, $BUILD_TYPE) ==="
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" "${gen_args[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${ZIPCOMM_CMAKE_ARGS:-} >>"$LOG" 2>&1 \
  || fail "configure"
# Show our own configure summary lines and any warnings' first lines.
grep -E '^-- zipcomm:|^CMake (Warning|Deprecation)|^  zipcomm:' "$LOG" || true
if ! grep -q '^ZIPCOMM_HAS_CUDA:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  cat <<'MSG'
##################################################################################################
###  NO WORKING CUDA TOOLKIT (nvcc): building HOST-ONLY. Device headers are NOT compiled and GPU  ###
###  tests/examples are NOT built. Install the CUDA Toolkit (nvcc on PATH or /usr/local/cuda).    ###
##################################################################################################
MSG
fi

jobs=$(nproc 2>/dev/null || echo 2)
targets=()
for t in "$@"; do targets+=(--target "$t"); done
echo "=== build (-j$jobs${targets:+ ${targets[*]}}) ==="
start=$(date +%s)
cmake --build "$BUILD_DIR" -j"$jobs" "${targets[@]}" >>"$LOG" 2>&1 || fail "build"
echo "=== build ok in $(( $(date +%s) - start )) s (log: $LOG) ==="
