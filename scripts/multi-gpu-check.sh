#!/usr/bin/env bash
# One run on a machine with 2, 4 or 8 GPUs: build, the multi-GPU tests, then the benches on 2, 4 and 8
# GPUs (those there are): the compressed ring allreduce through peer access and through NCCL's device API against
# the uncompressed ring and ncclAllReduce up to 4 GiB per rank, and the P2P pipeline between GPU 0 and GPU 1.
# Every step has a timeout, and the steps share a time budget (ZIPCOMM_MGPU_BUDGET_S, default 540 s, to finish
# within 10 minutes); a step that would start with too little time left is skipped and said so.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#
# Results in $OUT, at most 8 files: summary.txt (machine, topology, the key tables),
# bench_ring.json, ring_nccl.json (each {"ranks_N": <that run's JSON>, ...}), bench_p2p_peer.json, and
# all-logs.tgz (every log, and the per-run JSON files). Needs Catch2 carried in .deps/.
# Usage: bash scripts/multi-gpu-check.sh            (env: ZIPCOMM_MGPU_MIB=4096 largest message per rank,
#                                                    ZIPCOMM_MGPU_BUDGET_S=540, ZIPCOMM_CMAKE_ARGS)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-/tmp/zipcomm-out}
mkdir -p "$OUT"
BUILD=build-mgpu-check
MIB=${ZIPCOMM_MGPU_MIB:-4096}
BUDGET=${ZIPCOMM_MGPU_BUDGET_S:-540}
export NCCL_NVLS_ENABLE=0
T0=$(date +%s)
S="$OUT/summary.txt"
: > "$S"
log() { echo "=== $* ===" | tee -a "$S"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# step NAME MAX_S LOG cmd...: runs cmd with a timeout of min(MAX_S, what the budget leaves minus 25 s for the
# wrap-up); skipped when that is under 20 s. Returns cmd's exit code (124: timed out).
step() {
  local name=$1 max=$2 logf=$3
  shift 3
  local l=$(( $(left) - 25 ))
  local t=$(( max < l ? max : l ))
  if [ "$t" -lt 20 ]; then
    log "$name: SKIPPED (time budget spent: $(left) s left)"
    return 125
  fi
  local s0
  s0=$(date +%s)
  timeout -k 10 "$t" "$@" > "$OUT/$logf" 2>&1
  local rc=$?
  local note=""
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && note=" TIMED OUT"
  [ $rc -eq 77 ] && note=" (skipped by the program: exit 77)"
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && FAILED="$FAILED
  $name (rc=$rc)"
  log "$name: rc=$rc in $(( $(date +%s) - s0 )) s (limit $t s)$note"
  return $rc
}
FAILED=""

# ---- machine -----------------------------------------------------------------------------------------------------
NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{
  nvidia-smi
  nvidia-smi topo -m
  nvidia-smi nvlink -s
  nvcc --version
  grep -h -E '^#define NCCL_(MAJOR|MINOR|PATCH)' /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>/dev/null
  ls -l /usr/lib/x86_64-linux-gnu/libnccl* 2>/dev/null
  git log -1 --oneline 2>/dev/null
  env | grep -E '^(NCCL|CUDA)_' | sort
} > "$OUT/machine.log" 2>&1
log "commit $(git describe --always --dirty 2>/dev/null); $NG GPU(s): $(nvidia-smi -L 2>/dev/null | head -1 | sed 's/ (UUID.*//'); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
{ echo "--- nvidia-smi topo -m"; nvidia-smi topo -m 2>&1; echo "---"; } >> "$S"
if [ "$NG" -lt 2 ]; then
  log "fewer than 2 GPUs: nothing multi-GPU to run here (scripts/gpu-check.sh is the one-GPU check)"
fi

# ---- build (the targets used below only) -------------------------------------------------------------------------
step configure 120 configure.log cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DZIPCOMM_BUILD_FUZZ=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON ${ZIPCOMM_CMAKE_ARGS:-} || {
  tail -30 "$OUT/configure.log" | tee -a "$S"
  ( cd "$OUT" && tar czf all-logs.tgz ./*.log && rm -f ./*.log )
  exit 1
}
grep -E 'zipcomm: (CUDA|NCCL)' "$OUT/configure.log" | tee -a "$S"
TARGETS=""
ALL_TARGETS=$(ninja -C $BUILD -t targets all 2>/dev/null)  # (not piped into grep -q: SIGPIPE + pipefail)
for t in zipcomm_gpu_tests zipcomm_bench_ring zipcomm_bench_p2p zipcomm_ring_nccl zipcomm_ring_allreduce zipcomm_p2p_pipeline; do
  if grep -q "^$t:" <<< "$ALL_TARGETS"; then TARGETS="$TARGETS $t"; else log "target $t not configured here"; fi
done
# -k 0: a target that fails to build is reported, and everything else still builds and runs.
step build 300 build.log cmake --build $BUILD -j"$(nproc)" -t $TARGETS -- -k 0 ||
  grep -E "error|FAILED" "$OUT/build.log" | head -40 | tee -a "$S"
have() { [ -x "$1" ]; }
GPU_TESTS=$BUILD/tests/gpu/zipcomm_gpu_tests
BENCH_RING=$BUILD/bench/zipcomm_bench_ring
BENCH_P2P=$BUILD/bench/zipcomm_bench_p2p
RING_NCCL=$BUILD/examples/zipcomm_ring_nccl

# ---- tests: the multi-GPU cases, then the examples that use several GPUs ----------------------------------------
if have $GPU_TESTS; then
  step "gpu tests [multigpu]" 150 gpu_tests_multigpu.log $GPU_TESTS "[multigpu]" --durations yes
  tail -4 "$OUT/gpu_tests_multigpu.log" | tee -a "$S"
  grep -E "WARNING|FAILED|REQUIRE" -A3 "$OUT/gpu_tests_multigpu.log" | head -30 | tee -a "$S"
fi
step "ctest (multi-GPU examples)" 240 ctest.log ctest --test-dir $BUILD --output-on-failure \
  -R '^(zipcomm_ring_allreduce_peer|zipcomm_p2p_pipeline|zipcomm_ring_nccl|zipcomm_ring_nccl_ranks2|zipcomm_ring_nccl_sweep2)$'
grep -E "Test +#|tests passed|tests failed|peer link GPU|rank 0/" "$OUT/ctest.log" | head -30 | tee -a "$S"

# ---- benches -----------------------------------------------------------------------------------------------------
COUNTS=""
for n in 8 4 2; do [ "$NG" -ge $n ] && COUNTS="$COUNTS $n"; done
visible() { seq -s, 0 $(( $1 - 1 )); }   # CUDA_VISIBLE_DEVICES for the first n GPUs

# P2P pipeline between GPU 0 and GPU 1 (PeerLink coded vs raw, calibrate()'s switch)
if [ "$NG" -ge 2 ] && have $BENCH_P2P; then
  step "bench_p2p --peer (GPU 0 -> GPU 1)" 150 bench_p2p_peer.log \
    env CUDA_VISIBLE_DEVICES=0,1 $BENCH_P2P --peer --data tests/data --max-mib 1024 --json "$OUT/bench_p2p_peer.json"
  { grep -E "^(link probe|calibrate|switch:)" "$OUT/bench_p2p_peer.log"
    awk '/^size /,/^$/' "$OUT/bench_p2p_peer.log"; } | tee -a "$S"
fi

# Compressed ring on NCCL's device API vs uncompressed ring vs ncclAllReduce (one process per GPU)
if have $RING_NCCL; then
  for n in $COUNTS; do
    step "ring_nccl --ranks $n --sweep $MIB" 150 ring_nccl_r$n.log env CUDA_VISIBLE_DEVICES="$(visible $n)" \
      $RING_NCCL --ranks $n --sweep $MIB --reps 5 --data tests/data --deadline 140 --json "$OUT/ring_nccl_r$n.json"
    grep -E "^zipcomm_ring_nccl --sweep|bytes/rank|^ *[0-9]+ \||All sizes|FAILED|skipped|do not fit" \
      "$OUT/ring_nccl_r$n.log" | head -20 | tee -a "$S"
  done
fi

# Ring through peer access (RingCommunicator, calibrated switch) and ncclAllReduce in one process
if have $BENCH_RING; then
  for n in $COUNTS; do
    step "bench_ring --ranks $n --mib $MIB (peer + ncclAllReduce)" 180 bench_ring_r$n.log env CUDA_VISIBLE_DEVICES="$(visible $n)" \
      $BENCH_RING --data tests/data --ranks $n --mib $MIB --sim-mib 0 --reps 7 --json "$OUT/bench_ring_r$n.json"
    { grep -E "skipped|calibration up to|calibrated in" "$OUT/bench_ring_r$n.log"
      awk '/^automatic switch/,/^automatic ran/' "$OUT/bench_ring_r$n.log"
      grep -E "^peer +ncclAllReduce" "$OUT/bench_ring_r$n.log"; } | tee -a "$S"
  done
fi

# Lowest priority, if the budget allows: the largest count again with 128 channels per rank (the library's default
# is 32: a quarter of an H200's SMs code for the compressed ring; the raw ring needs few SMs to fill NVLink).
NMAX=$(echo "$COUNTS" | awk '{print $1 + 0}')   # the largest count run above (0: none)
if [ "$NMAX" -ge 2 ] && have $RING_NCCL; then
  step "ring_nccl --ranks $NMAX --sweep $MIB --channels 128" 150 ring_nccl_r${NMAX}_c128.log \
    env CUDA_VISIBLE_DEVICES="$(visible $NMAX)" $RING_NCCL --ranks $NMAX --sweep $MIB --reps 5 --channels 128 \
    --data tests/data --deadline 140 --json "$OUT/ring_nccl_r${NMAX}_c128.json"
  grep -E "^zipcomm_ring_nccl --sweep|bytes/rank|^ *[0-9]+ \||All sizes|FAILED|skipped|do not fit" \
    "$OUT/ring_nccl_r${NMAX}_c128.log" | head -20 | tee -a "$S"
fi
if [ "$NMAX" -ge 2 ] && have $BENCH_RING; then
  step "bench_ring --ranks $NMAX --mib $MIB --channels 128" 180 bench_ring_r${NMAX}_c128.log \
    env CUDA_VISIBLE_DEVICES="$(visible $NMAX)" $BENCH_RING --data tests/data --ranks $NMAX --mib $MIB --sim-mib 0 \
    --reps 7 --channels 128 --json "$OUT/bench_ring_r${NMAX}_c128.json"
  { grep -E "skipped|calibration up to|calibrated in" "$OUT/bench_ring_r${NMAX}_c128.log"
    awk '/^automatic switch/,/^automatic ran/' "$OUT/bench_ring_r${NMAX}_c128.log"; } | tee -a "$S"
fi

# ---- wrap-up: JSON merged per tool (at most 8 files in $OUT), logs in one archive ---------------------------------
merge_json() {  # merge_json OUT KEY=FILE...: {"KEY": <FILE>, ...} over the files that exist
  local out=$1 first=1 kv
  shift
  {
    echo "{"
    for kv in "$@"; do
      [ -s "${kv#*=}" ] || continue
      [ $first -eq 1 ] || echo ","
      first=0
      printf '"%s": ' "${kv%%=*}"
      cat "${kv#*=}"
    done
    echo "}"
  } > "$out"
}
args_rn=(x=/nonexistent); args_br=(x=/nonexistent)   # never empty (set -u and old bash)
for n in $COUNTS; do
  args_rn+=("ranks_$n=$OUT/ring_nccl_r$n.json")
  args_br+=("ranks_$n=$OUT/bench_ring_r$n.json")
done
args_rn+=("ranks_${NMAX}_channels_128=$OUT/ring_nccl_r${NMAX}_c128.json")
args_br+=("ranks_${NMAX}_channels_128=$OUT/bench_ring_r${NMAX}_c128.json")
merge_json "$OUT/ring_nccl.json" "${args_rn[@]}"
merge_json "$OUT/bench_ring.json" "${args_br[@]}"
cp "$S" "$OUT/summary.log"
(
  cd "$OUT" || exit
  shopt -s nullglob
  files=(./*.log ./*_r[0-9]*.json)
  [ ${#files[@]} -gt 0 ] && tar czf all-logs.tgz "${files[@]}" && rm -f "${files[@]}"
)
log "done in $(( $(date +%s) - T0 )) s; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
if [ -n "$FAILED" ]; then
  log "steps that failed or timed out:$FAILED"
else
  log "every step that ran passed"
fi
cat "$S"
[ -z "$FAILED" ]
