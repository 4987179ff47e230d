#!/usr/bin/env bash
# One call on the GPU machine: build, run every test (GPU ones included), compute-sanitizer on the GPU tests,
# then the benchmarks. Logs go to $OUT (the device tool brings them back). Needs Catch2 carried in .deps/.
# Usage: bash scripts/gpu-check.sh [quick|nosan]    (quick: no sanitizers, 64 MiB benches; nosan: no
# sanitizers, full-size benches)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/zipcomm-out}
mkdir -p "$OUT"
MODE=${1:-full}
BUILD=build-gpu-check
export NCCL_NVLS_ENABLE=0
log() { echo "=== $* ===" | tee -a "$OUT/summary.txt"; }
{ nvidia-smi; nvidia-smi topo -m; nvcc --version; git log -1 --oneline 2>/dev/null; } > "$OUT/machine.txt" 2>&1
log "commit $(git rev-parse --short HEAD 2>/dev/null) on $(nvidia-smi -L | head -1)"

t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DZIPCOMM_BUILD_FUZZ=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON ${ZIPCOMM_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1 || { log "configure FAILED"; tail -30 "$OUT/configure.log"; exit 1; }
if ! cmake --build $BUILD -j"$(nproc)" > "$OUT/build.log" 2>&1; then
  log "build FAILED"; grep -E "error" "$OUT/build.log" | head -40; exit 1
fi
log "build ok in $(( $(date +%s) - t0 )) s"

ctest --test-dir $BUILD --output-on-failure -j4 > "$OUT/ctest.log" 2>&1
rc=$?
log "ctest rc=$rc: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
[ $rc -ne 0 ] && grep -E "FAILED|Failed|REQUIRE|failed" "$OUT/ctest.log" | head -40
GPU_TESTS=$BUILD/tests/gpu/zipcomm_gpu_tests
$GPU_TESTS --durations yes > "$OUT/gpu_tests.log" 2>&1
log "gpu tests rc=$?: $(tail -3 "$OUT/gpu_tests.log" | tr '\n' ' ')"

if [ "$MODE" = full ]; then
  compute-sanitizer --tool memcheck --error-exitcode 99 $GPU_TESTS "~[large]" > "$OUT/memcheck.log" 2>&1
  log "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  compute-sanitizer --tool racecheck --error-exitcode 99 $GPU_TESTS "[block]" > "$OUT/racecheck.log" 2>&1
  log "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
  compute-sanitizer --tool synccheck --error-exitcode 99 $GPU_TESTS "[block]" > "$OUT/synccheck.log" 2>&1
  log "synccheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/synccheck.log" | tail -1)"
fi
MIB=256
[ "$MODE" = quick ] && MIB=64
$BUILD/bench/zipcomm_bench --data tests/data --mib $MIB --reps 20 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
log "bench rc=$?"
$BUILD/bench/zipcomm_bench_fused --data tests/data --mib $MIB --reps 20 --json "$OUT/bench_fused.json" > "$OUT/bench_fused.txt" 2>&1
log "bench_fused rc=$?"
cat "$OUT/bench_fused.txt"
cat "$OUT/bench.txt"
cat "$OUT/summary.txt"
