#!/usr/bin/env bash
# The P2P links and the ring allreduce under load: starts zipcomm_stress_load in the background (another process
# keeping the GPU's SMs, memory and copy engines busy, with work on non-blocking streams and on the legacy stream),
# runs zipcomm_stress_links beside it (both host link modes, the peer link on GPU 0, the ring; every byte checked), then
# stops the load. ctest runs it as gpu_stress_links (labels gpu and stress).
#   bash scripts/stress.sh [--build-dir DIR] [--load BIN] [--stress BIN] [--seconds S] [-- STRESS_ARGS...]
# --seconds: how long the transfers go on (ZIPCOMM_STRESS_SECONDS, else 60); the load runs until it is stopped,
# bounded at S + 120 s. STRESS_ARGS go to zipcomm_stress_links (e.g. --data tests/data, --only host/stream,
# --strict). ZIPCOMM_TEST_SEED=N repeats a run's choices (the seed is printed first). Binaries: --load/--stress,
# else DIR/tests/gpu/ (DIR: --build-dir, ZIPCOMM_BUILD_DIR, else build).
# Exit status: zipcomm_stress_links' (0 every transfer that reported ok was exact; 1 one reported ok with wrong
# bytes, or a CUDA error; 3 error statuses under --strict), 2 when the load did not run alongside.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${ZIPCOMM_BUILD_DIR:-build}
SECONDS_OF_TRANSFERS=${ZIPCOMM_STRESS_SECONDS:-60}
LOAD_BIN="" STRESS_BIN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --load) LOAD_BIN=$2; shift 2 ;;
    --stress) STRESS_BIN=$2; shift 2 ;;
    --seconds) SECONDS_OF_TRANSFERS=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: bash scripts/stress.sh [--build-dir DIR] [--load BIN] [--stress BIN] [--seconds S] [-- ARGS...]" >&2
       exit 2 ;;
  esac
done
LOAD_BIN=${LOAD_BIN:-$BUILD_DIR/tests/gpu/zipcomm_stress_load}
STRESS_BIN=${STRESS_BIN:-$BUILD_DIR/tests/gpu/zipcomm_stress_links}
for bin in "$LOAD_BIN" "$STRESS_BIN"; do
  [ -x "$bin" ] || { echo "stress.sh: no $bin (build zipcomm_stress_load and zipcomm_stress_links)" >&2; exit 2; }
done

work=$(mktemp -d)
load_pid=""
stop_load() {
  [ -n "$load_pid" ] || return 0
  kill -TERM "$load_pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$load_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$load_pid" 2>/dev/null
  wait "$load_pid" 2>/dev/null
  load_pid=""
}
trap 'stop_load; rm -rf "$work"' EXIT

load_bound=$(( ${SECONDS_OF_TRANSFERS%.*} + 120 ))
"$LOAD_BIN" --seconds "$load_bound" --ready "$work/ready" > "$work/load.log" 2>&1 &
load_pid=$!
for _ in $(seq 1 600); do  # up to 60 s for its context and first round
  [ -e "$work/ready" ] && break
  kill -0 "$load_pid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -e "$work/ready" ]; then
  echo "stress.sh: the load did not start:" >&2
  cat "$work/load.log" >&2
  exit 2
fi
cat "$work/load.log"

# The transfers end by themselves after SECONDS_OF_TRANSFERS; `timeout` bounds a stall (each wait is bounded too).
timeout --kill-after=10 $(( ${SECONDS_OF_TRANSFERS%.*} + 180 )) "$STRESS_BIN" --seconds "$SECONDS_OF_TRANSFERS" "$@"
rc=$?
[ $rc -eq 124 ] && echo "stress.sh: zipcomm_stress_links did not end in time"
load_alive=1
kill -0 "$load_pid" 2>/dev/null || load_alive=0
stop_load
tail -n 1 "$work/load.log"
if [ $load_alive -eq 0 ] && [ $rc -eq 0 ]; then
  echo "stress.sh: the load ended before the transfers did: they did not all run under load"
  cat "$work/load.log"
  rc=2
fi
echo "stress.sh: exit status $rc"
exit $rc
