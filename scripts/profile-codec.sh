#!/usr/bin/env bash
# What bounds the codec kernels: Nsight Compute's counters for the device-wide encode and decode of bf16
# gradients (the first launch of each after the bench's warm-up), and lane-instructions per element.
#   bash scripts/profile-codec.sh [BUILD_DIR]     (default build-gpu-check; builds zipcomm_bench there)
# Needs ncu and a GPU; the clocks are left as they are (--clock-control none). Output under $OUT (or
# /tmp/zipcomm-out): ncu_<kernel>.txt with the raw metrics, and a summary line per kernel.
# Env: ZIPCOMM_PROFILE_BENCH (the bench binary in BUILD_DIR/bench, zipcomm_bench), ZIPCOMM_PROFILE_KERNELS
# (compress_kernel decompress_kernel), ZIPCOMM_PROFILE_TAG (appended to the file names and summary lines),
# ZIPCOMM_PROFILE_MIB (the call's size, 256).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/zipcomm-out}
BUILD=${1:-build-gpu-check}
# 128 Mi bf16 elements, 8,192 chunks: at 64 MiB (2,048 chunks) the decoder's 4,224 warps outnumber the chunks and
# ncu saw half the occupancy the kernels reach on large calls
MIB=${ZIPCOMM_PROFILE_MIB:-256}
BENCH=${ZIPCOMM_PROFILE_BENCH:-zipcomm_bench}
TAG=${ZIPCOMM_PROFILE_TAG:-}
mkdir -p "$OUT"
if [ ! -x "$BUILD/bench/$BENCH" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DZIPCOMM_BUILD_FUZZ=OFF \
    -DZIPCOMM_BUILD_TESTS=OFF -DZIPCOMM_BUILD_EXAMPLES=OFF -DZIPCOMM_BUILD_CLI=OFF > "$OUT/profile_configure.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target "$BENCH" > "$OUT/profile_build.log" 2>&1 ||
    { echo "profile-codec.sh: build failed (see $OUT/profile_build.log)" >&2; exit 1; }
fi
metrics=smsp__inst_executed.sum,smsp__thread_inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics=$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active
elements=$(( MIB * 1024 * 1024 / 2 ))
for kernel in ${ZIPCOMM_PROFILE_KERNELS:-compress_kernel decompress_kernel}; do
  # -s 3: past the bench's three warm-up launches of llama_grads bf16 (its first data set)
  ncu --clock-control none -k "regex:^${kernel}" -s 3 -c 1 --metrics "$metrics" --csv \
    "$BUILD/bench/$BENCH" --data tests/data --mib $MIB --reps 1 > "$OUT/ncu_${kernel}${TAG}.txt" 2>&1
  rc=$?
  # a metric's value (and with 2nd arg "unit", its unit) from ncu's CSV
  metric() { grep "\"$1\"" "$OUT/ncu_${kernel}${TAG}.txt" | tail -1 | awk -F'","' -v u="${2:-}" '{gsub(/[",]/,"",$NF); print (u ? $(NF-1) : $NF)}'; }
  thread_inst=$(metric smsp__thread_inst_executed.sum)
  if [ $rc -ne 0 ] || [ -z "$thread_inst" ]; then
    echo "$kernel$TAG: ncu rc=$rc, no metrics (see $OUT/ncu_${kernel}${TAG}.txt)"
    continue
  fi
  awk -v k="$kernel$TAG" -v t="$thread_inst" -v n="$elements" \
    'BEGIN { printf "%s: %.1f lane-instructions per element (%d elements)", k, t / n, n }' | tee -a "$OUT/summary.txt"
  echo "; $(metric gpu__time_duration.sum) $(metric gpu__time_duration.sum unit), issue active $(metric smsp__issue_active.avg.pct_of_peak_sustained_active)%, warps active $(metric sm__warps_active.avg.pct_of_peak_sustained_active)%" | tee -a "$OUT/summary.txt"
done
