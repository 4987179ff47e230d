#!/usr/bin/env bash
# What bounds the codec kernels: Nsight Compute's counters for the device-wide encode and decode of bf16
# gradients (the first launch of each after the bench's warm-up), and lane-instructions per element.
#   bash scripts/profile-codec.sh [BUILD_DIR]     (default build-gpu-check; builds zipcomm_bench there)
# Needs ncu and a GPU; the clocks are left as they are (--clock-control none). Output under $OUT (or
# /tmp/zipcomm-out): ncu_<kernel>.txt with the raw metrics, and a summary line per kernel.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/zipcomm-out}
BUILD=${1:-build-gpu-check}
MIB=64  # 32 Mi bf16 elements: several times the L2, short under the profiler's replays
mkdir -p "$OUT"
if [ ! -x "$BUILD/bench/zipcomm_bench" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DZIPCOMM_BUILD_FUZZ=OFF \
    -DZIPCOMM_BUILD_TESTS=OFF -DZIPCOMM_BUILD_EXAMPLES=OFF -DZIPCOMM_BUILD_CLI=OFF > "$OUT/profile_configure.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target zipcomm_bench > "$OUT/profile_build.log" 2>&1 ||
    { echo "profile-codec.sh: build failed (see $OUT/profile_build.log)" >&2; exit 1; }
fi
metrics=smsp__inst_executed.sum,smsp__thread_inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics=$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active
elements=$(( MIB * 1024 * 1024 / 2 ))
for kernel in compress_kernel decompress_kernel; do
  # -s 3: past the bench's three warm-up launches of llama_grads bf16 (its first data set)
  ncu --clock-control none -k "regex:^${kernel}" -s 3 -c 1 --metrics "$metrics" --csv \
    "$BUILD/bench/zipcomm_bench" --data tests/data --mib $MIB --reps 1 > "$OUT/ncu_${kernel}.txt" 2>&1
  rc=$?
  thread_inst=$(grep '"smsp__thread_inst_executed.sum"' "$OUT/ncu_${kernel}.txt" | tail -1 | awk -F'","' '{gsub(/[",]/,"",$NF); print $NF}')
  if [ $rc -ne 0 ] || [ -z "$thread_inst" ]; then
    echo "$kernel: ncu rc=$rc, no metrics (see $OUT/ncu_${kernel}.txt)"
    continue
  fi
  awk -v k="$kernel" -v t="$thread_inst" -v n="$elements" \
    'BEGIN { printf "%s: %.1f lane-instructions per element (%d elements)\n", k, t / n, n }' | tee -a "$OUT/summary.txt"
done
