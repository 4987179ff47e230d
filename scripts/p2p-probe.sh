#!/usr/bin/env bash
# One short GPU run for P2P tuning: machine facts (NUMA, topology, nsys), a build of zipcomm_bench_p2p alone,
# the bench with the arguments given (default: the copy-chain probe and the default link), and, where nsys
# is installed, a CUDA trace of one 64 MiB stream-mode variant (every copy's start and duration, as CSV).
# Usage: bash scripts/p2p-probe.sh [bench arguments...]      Env: ZIPCOMM_NSYS_VARIANT (a --variant spec; "" = none)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/zipcomm-out}
mkdir -p "$OUT"
BUILD=build-p2p
{ nvidia-smi topo -m; command -v numactl >/dev/null && numactl -H; lscpu | grep -iE 'numa|socket|model name';
  grep -i cpus_allowed_list /proc/self/status; } > "$OUT/p2p-machine.txt" 2>&1
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DZIPCOMM_BUILD_FUZZ=OFF \
  -DZIPCOMM_BUILD_TESTS=OFF -DZIPCOMM_BUILD_EXAMPLES=OFF > "$OUT/p2p-build.log" 2>&1 &&
  cmake --build $BUILD --target zipcomm_bench_p2p >> "$OUT/p2p-build.log" 2>&1 || { tail -30 "$OUT/p2p-build.log"; exit 1; }
BENCH=$BUILD/bench/zipcomm_bench_p2p
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--max-mib 256 --no-curve --chain-probe --variant "default")
timeout 400 $BENCH --data tests/data "${ARGS[@]}" --json "$OUT/probe.json" 2>&1 | tee "$OUT/probe.txt"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
VARIANT=${ZIPCOMM_NSYS_VARIANT-default}
if [ -n "$NSYS" ] && [ -n "$VARIANT" ]; then
  "$NSYS" profile -t cuda -o /tmp/p2p-trace --force-overwrite true $BENCH --data tests/data --max-mib 64 --no-curve \
    --variant "$VARIANT" --sweep-mib 64,64 > "$OUT/nsys.log" 2>&1
  "$NSYS" stats -r cuda_gpu_trace -f csv -o /tmp/p2p-trace /tmp/p2p-trace.nsys-rep >> "$OUT/nsys.log" 2>&1
  gzip -c /tmp/p2p-trace_cuda_gpu_trace.csv > "$OUT/trace.csv.gz" 2>/dev/null || echo "no trace CSV" >> "$OUT/nsys.log"
else
  echo "nsys: not found (or no variant)" > "$OUT/nsys.log"
fi
