#!/usr/bin/env bash
# One run on a GPU machine: build, run every test (GPU ones included), the stress run (full and p2p modes),
# compute-sanitizer on the GPU tests, then the benchmarks. Logs go to $OUT. Needs
# Catch2 carried in .deps/.
# Usage: bash scripts/gpu-check.sh [full|quick|nosan|san|p2p|codec|quant|python]
# (full: everything; quick: no sanitizers, 64 MiB benches; nosan: no sanitizers, full-size benches; san: build
# and the sanitizers only, for a second run;
# p2p: only the P2P targets: the [p2p] GPU tests (some also first in a process of their own), the P2P examples, a
# short stress run and bench_p2p (stream mode and its copy-mode fallback), no sanitizers - a short run for a change
# confined to the P2P links; codec: the codec
# targets: every GPU test but [p2p], memcheck on the codec, block and fused tests, bench and bench_fused
# (ZIPCOMM_BENCHES="codec fused ring" adds bench_ring) - a short run for a change to the codec; quant: the
# quantization tier: the [quant] GPU tests, memcheck on them, and bench_quant; python: the Python package built
# with the GPU codec against the machine's python3 and its packages, its tests (GPU ones included: codec streams,
# WeightSync, the DDP hook on NCCL, the quantization tier), examples/python/weight_sync.py and
# bench/bench_weight_sync.py). Env:
# ZIPCOMM_BENCHES (subset), ZIPCOMM_BENCH_ARGS (more zipcomm_bench flags, e.g. --sms 16), ZIPCOMM_P2P_ARGS,
# ZIPCOMM_P2P_TIMEOUT (s, 300), ZIPCOMM_P2P_DATA (folder with llama_grads.bf16 for bench_p2p; tests/data),
# ZIPCOMM_P2P_ARGS2 (a second bench_p2p run after the first, e.g. on other data: its output goes to bench_p2p2.*),
# ZIPCOMM_P2P_BATCH (bench_p2p --batch cases, 16x64,4x256,64x16; its JSON travels in the logs' archive),
# ZIPCOMM_STRESS_SECONDS (seconds of transfers under load in scripts/stress.sh: 60 in full mode, 30 in p2p mode)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/zipcomm-out}
mkdir -p "$OUT"
MODE=${1:-full}
BUILD=build-gpu-check
export NCCL_NVLS_ENABLE=0
log() { echo "=== $* ===" | tee -a "$OUT/summary.txt"; }
{ nvidia-smi; nvidia-smi topo -m; nvcc --version; git log -1 --oneline 2>/dev/null; } > "$OUT/machine.txt" 2>&1
log "commit $(git describe --always --dirty 2>/dev/null) on $(nvidia-smi -L | head -1)"

# The Python package: nothing to fetch there (the machine's python3 has torch, CuPy, NumPy, ml_dtypes, pytest,
# nanobind and scikit-build-core); installed into a folder of its own, on PYTHONPATH.
if [ "$MODE" = python ]; then
  t0=$(date +%s)
  rm -rf /tmp/zipcomm-site
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation --no-deps --no-index \
    --target /tmp/zipcomm-site -Cbuild-dir=build-python/gpu-check ./python > "$OUT/python_install.log" 2>&1 ||
    { log "python package build FAILED"; tail -30 "$OUT/python_install.log"; exit 1; }
  export PYTHONPATH=/tmp/zipcomm-site PYTHONUNBUFFERED=1
  log "python package built in $(( $(date +%s) - t0 )) s: $(python3 -c 'import zipcomm; print(zipcomm.build_info())' 2>&1)"
  timeout 420 python3 -m pytest tests/python -rfEs -p no:cacheprovider > "$OUT/python_tests.log" 2>&1
  log "pytest rc=$?: $(tail -1 "$OUT/python_tests.log")"
  grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/python_tests.log" | head -30 | tee -a "$OUT/summary.txt"
  timeout 150 python3 -X faulthandler examples/python/weight_sync.py --layers 2 --quantize 6 > "$OUT/weight_sync_py.txt" 2>&1
  log "weight_sync.py rc=$?"; tail -12 "$OUT/weight_sync_py.txt" | tee -a "$OUT/summary.txt"
  # WeightSync coded against raw (and one quantization choice) over the pinned-host link: table and JSON
  timeout 150 python3 -X faulthandler bench/bench_weight_sync.py --layers 4 --reps 5 --quantize asym6/g128 \
    --json "$OUT/bench_weight_sync.json" > "$OUT/bench_weight_sync.txt" 2>&1
  log "bench_weight_sync rc=$?"; tee -a "$OUT/summary.txt" < "$OUT/bench_weight_sync.txt"
  exit 0
fi

t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DZIPCOMM_BUILD_FUZZ=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON ${ZIPCOMM_CMAKE_ARGS:-} > "$OUT/configure.log" 2>&1 || { log "configure FAILED"; tail -30 "$OUT/configure.log"; exit 1; }
# -k 0: a target that fails to build is reported, and everything else still builds and runs.
TARGETS=()
[ "$MODE" = p2p ] && TARGETS=(--target zipcomm_gpu_tests zipcomm_bench_p2p zipcomm_p2p_pipeline zipcomm_rl_weight_sync zipcomm_probe_split zipcomm_probe_concurrent zipcomm_probe_copy_engines zipcomm_stress_links zipcomm_stress_load)
[ "$MODE" = codec ] && TARGETS=(--target zipcomm_gpu_tests zipcomm_bench zipcomm_bench_fused zipcomm_bench_ring zipcomm_bench_quant)
[ "$MODE" = quant ] && TARGETS=(--target zipcomm_gpu_tests zipcomm_bench_quant)
if ! cmake --build $BUILD -j"$(nproc)" "${TARGETS[@]}" -- -k 0 > "$OUT/build.log" 2>&1; then
  log "build had FAILURES (the rest runs)"; grep -E "error|FAILED" "$OUT/build.log" | head -40
  [ -x $BUILD/tests/gpu/zipcomm_gpu_tests ] || exit 1
fi
log "build ok in $(( $(date +%s) - t0 )) s"

GPU_TESTS=$BUILD/tests/gpu/zipcomm_gpu_tests
if [ "$MODE" = p2p ]; then
  ctest --test-dir $BUILD --output-on-failure -R 'zipcomm_p2p_pipeline|zipcomm_rl_weight_sync|gpu_first_' > "$OUT/ctest.log" 2>&1
  log "ctest (P2P examples, tests first in a process) rc=$?: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
  $GPU_TESTS "[p2p]" --durations yes > "$OUT/gpu_tests.log" 2>&1
  log "gpu tests [p2p] rc=$?: $(tail -3 "$OUT/gpu_tests.log" | tr '\n' ' ')"
  ZIPCOMM_BENCHES=p2p
elif [ "$MODE" = codec ]; then
  timeout 240 $GPU_TESTS "~[p2p]" --durations yes > "$OUT/gpu_tests.log" 2>&1
  log "gpu tests ~[p2p] rc=$?: $(tail -3 "$OUT/gpu_tests.log" | tr '\n' ' ')"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 $GPU_TESTS "[codec],[block],[fused]~[large]" > "$OUT/memcheck.log" 2>&1
  log "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  ZIPCOMM_BENCHES=${ZIPCOMM_BENCHES:-codec fused}
elif [ "$MODE" = quant ]; then
  timeout 300 $GPU_TESTS "[quant]" --durations yes > "$OUT/gpu_tests.log" 2>&1
  log "gpu tests [quant] rc=$?: $(tail -3 "$OUT/gpu_tests.log" | tr '\n' ' ')"
  # [configs] (the same kernels on every configuration: thousands of launches) is left to the plain run
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 99 $GPU_TESTS "[quant]~[large]~[configs]" > "$OUT/memcheck.log" 2>&1
  log "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  ZIPCOMM_BENCHES=quant
elif [ "$MODE" != san ]; then
# GPU tests one at a time: some run sender and receiver kernels side by side and need the GPU to themselves.
ctest --test-dir $BUILD --output-on-failure -j4 -LE gpu > "$OUT/ctest.log" 2>&1
rc=$?
# gpu_codec: run below; gpu_stress_links: the stress run below (full mode)
ctest --test-dir $BUILD --output-on-failure -L gpu -LE stress -E '^gpu_codec$' >> "$OUT/ctest.log" 2>&1
rc=$(( rc | $? ))
log "ctest rc=$rc: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
[ $rc -ne 0 ] && grep -E "FAILED|Failed|REQUIRE|failed" "$OUT/ctest.log" | head -40
$GPU_TESTS --durations yes > "$OUT/gpu_tests.log" 2>&1
log "gpu tests rc=$?: $(tail -3 "$OUT/gpu_tests.log" | tr '\n' ' ')"
fi

# Both host link modes, the peer link on GPU 0 and the ring, byte for byte, while another process loads the GPU: rc 1 if a
# transfer reported ok with wrong bytes (error statuses are counted in the summary, not failed). p2p mode: 30 s.
if [ "$MODE" = full ] || [ "$MODE" = p2p ]; then
  STRESS_S=${ZIPCOMM_STRESS_SECONDS:-60}; [ "$MODE" = p2p ] && STRESS_S=${ZIPCOMM_STRESS_SECONDS:-30}
  bash scripts/stress.sh --build-dir $BUILD --seconds "$STRESS_S" -- --data tests/data > "$OUT/stress.log" 2>&1
  log "stress rc=$?: $(grep -E '^stress summary' "$OUT/stress.log")"
  grep -E 'OK WITH WRONG BYTES|^stress: (FAILED|PASSED)|stress.sh:' "$OUT/stress.log" | head -20 |
    tee -a "$OUT/summary.txt"
fi

# Which host calls wait for a kernel that never ends (the links' transfers must not): exit 1 if one of the links' does.
if [ "$MODE" != san ] && [ -x $BUILD/bench/zipcomm_probe_concurrent ]; then
  timeout 120 $BUILD/bench/zipcomm_probe_concurrent > "$OUT/probe_concurrent.txt" 2>&1
  log "probe_concurrent rc=$?: $(tail -1 "$OUT/probe_concurrent.txt")"
fi
# What slows stream mode's frame copies (pinned flags and footprint, stream memory operations, SM pollers).
if [ "$MODE" != san ] && [ -x $BUILD/bench/zipcomm_probe_copy_engines ]; then
  timeout 90 $BUILD/bench/zipcomm_probe_copy_engines > "$OUT/probe_copy_engines.txt" 2>&1
  log "probe_copy_engines rc=$?"; tee -a "$OUT/summary.txt" < "$OUT/probe_copy_engines.txt"
fi
if [ "$MODE" = full ] || [ "$MODE" = san ]; then
  compute-sanitizer --tool memcheck --error-exitcode 99 $GPU_TESTS "~[large]~[concurrent]" > "$OUT/memcheck.log" 2>&1
  log "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  compute-sanitizer --tool racecheck --error-exitcode 99 $GPU_TESTS "[block]" > "$OUT/racecheck.log" 2>&1
  log "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
  compute-sanitizer --tool synccheck --error-exitcode 99 $GPU_TESTS "[block]" > "$OUT/synccheck.log" 2>&1
  log "synccheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/synccheck.log" | tail -1)"
fi
MIB=256
[ "$MODE" = quick ] && MIB=64
BENCHES=${ZIPCOMM_BENCHES:-codec p2p fused ring quant}  # a subset runs faster
[ "$MODE" = san ] && BENCHES=""
want() { [[ " $BENCHES " == *" $1 "* ]]; }
if want codec; then
  # Both codes, the whole GPU and a communication kernel's share of it (GB/s per SM on 16 SMs)
  $BUILD/bench/zipcomm_bench --data tests/data --mib $MIB --reps 20 --sms 16 ${ZIPCOMM_BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
  log "bench rc=$?"
  # Small calls (a ring step's slice, one tensor of a weight sync): where a chunk per warp leaves most SMs idle
  $BUILD/bench/zipcomm_bench --data tests/data --mib 16 --reps 20 ${ZIPCOMM_BENCH_ARGS:-} > "$OUT/bench_16mib.txt" 2>&1
  log "bench (16 MiB) rc=$?"
  # Encode / decode against message and chunk size: the figures behind format::default_chunk_log2
  $BUILD/bench/zipcomm_bench --data tests/data --chunk-sweep --reps 10 > "$OUT/bench_chunks.txt" 2>&1
  log "bench --chunk-sweep rc=$?"
fi
# P2P pipeline over the pinned-host link: GB/s vs message size, the link (both modes) vs raw; PNG when matplotlib is there
P2P_ARGS=${ZIPCOMM_P2P_ARGS:---sweep}; [ "$MODE" = quick ] && P2P_ARGS="--max-mib 256"
if want p2p; then
  [ -x $BUILD/bench/zipcomm_probe_split ] && timeout 60 $BUILD/bench/zipcomm_probe_split > "$OUT/probe_split.txt" 2>&1
  timeout ${ZIPCOMM_P2P_TIMEOUT:-300} $BUILD/bench/zipcomm_bench_p2p --data "${ZIPCOMM_P2P_DATA:-tests/data}" $P2P_ARGS --json "$OUT/bench_p2p.json" > "$OUT/bench_p2p.txt" 2>&1
  log "bench_p2p rc=$?: $(grep -E 'min over sizes' "$OUT/bench_p2p.txt" | tr '\n' ' ')"
  if [ -n "${ZIPCOMM_P2P_ARGS2:-}" ]; then
    timeout ${ZIPCOMM_P2P_TIMEOUT:-300} $BUILD/bench/zipcomm_bench_p2p $ZIPCOMM_P2P_ARGS2 --json "$OUT/bench_p2p2.json" > "$OUT/bench_p2p2.txt" 2>&1
    log "bench_p2p (second run) rc=$?: $(grep -E 'min over sizes' "$OUT/bench_p2p2.txt" | tr '\n' ' ')"
  fi
  # Messages back to back (a weight sync's buckets): one batch (transfer_many) against one transfer each
  timeout ${ZIPCOMM_P2P_TIMEOUT:-300} $BUILD/bench/zipcomm_bench_p2p --data "${ZIPCOMM_P2P_DATA:-tests/data}" \
    --batch "${ZIPCOMM_P2P_BATCH:-16x64,4x256,64x16}" --json "$OUT/bench_p2p_batch.json" > "$OUT/bench_p2p_batch.txt" 2>&1
  log "bench_p2p --batch rc=$?: $(grep -E 'coded batch against' "$OUT/bench_p2p_batch.txt" | tr '\n' ' ')"
  [ -f "$OUT/bench_p2p.json" ] && { python3 bench/plot_p2p.py "$OUT/bench_p2p.json" "$OUT/bench_p2p.png" >> "$OUT/bench_p2p.txt" 2>&1 ||
    log "plot_p2p: no PNG here; draw it from bench_p2p.json with bench/plot_p2p.py"; }
fi
if want fused; then
  $BUILD/bench/zipcomm_bench_fused --data tests/data --mib $MIB --reps 20 --json "$OUT/bench_fused.json" > "$OUT/bench_fused.txt" 2>&1
  log "bench_fused rc=$?"
  # The sizes of ring hops (a message over its ranks): where each step's chains, not the GPU's width, bound it
  timeout 300 $BUILD/bench/zipcomm_bench_fused --data tests/data --mib 2,4,8,16,32 --reps 10 \
    --json "$OUT/bench_fused_sizes.json" > "$OUT/bench_fused_sizes.txt" 2>&1
  log "bench_fused (2-32 MiB) rc=$?"
fi
# Quantization tier (lossy): quantize/dequantize on the bf16 tensors, b = 4/6/8, G = 32/128, both modes, against the
# copy roofline and next to the lossless codec
if want quant; then
  $BUILD/bench/zipcomm_bench_quant --data tests/data --mib $MIB --reps 20 --json "$OUT/bench_quant.json" > "$OUT/bench_quant.txt" 2>&1
  log "bench_quant rc=$?: $(grep -E 'slowest quantization row' "$OUT/bench_quant.txt")"
fi
# Ring allreduce: compressed vs raw ring, simulated ranks on GPU 0 (peer GPUs and ncclAllReduce where there are several)
if want ring; then
  timeout ${ZIPCOMM_RING_BENCH_S:-300} $BUILD/bench/zipcomm_bench_ring --data tests/data --mib $MIB --json "$OUT/bench_ring.json" > "$OUT/bench_ring.txt" 2>&1
  log "bench_ring rc=$?"
fi
cat "$OUT"/bench*.txt "$OUT"/probe*.txt 2>/dev/null
# $OUT is kept to at most 8 files: logs travel in one archive (bench_quant.json too, except in quant mode).
QUANT_JSON=""; [ "$MODE" != quant ] && QUANT_JSON=$(ls "$OUT"/bench_quant.json 2>/dev/null | xargs -r -n1 basename)
( cd "$OUT" && tar czf all-logs.tgz *.log *.txt $(ls bench_p2p_batch.json 2>/dev/null) $QUANT_JSON 2>/dev/null &&
  rm -f *.log bench*.txt machine.txt bench_p2p_batch.json $QUANT_JSON ncu_*.txt )
cat "$OUT/summary.txt" 2>/dev/null
