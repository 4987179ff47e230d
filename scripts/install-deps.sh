#!/usr/bin/env bash
# Installs what zipcomm's build and tests need on Debian/Ubuntu, and nothing when all is present (so it also
# runs on a machine whose apt cannot reach anything). Idempotent; runs as root, or through sudo.
#   cmake >= 3.25, a C++17 compiler, ninja (or make), python3, Catch2 v2 (catch2/catch.hpp, system or
#   .deps/catch2/); optional: clang++ with libFuzzer (for the fuzz tests).
# Exits 1 only when a required one is missing and cannot be installed (no apt-get, or not root and no sudo);
# a missing optional one is a warning.
# The CUDA toolkit is not installed here: the build uses nvcc from PATH or /usr/local/cuda, and builds
# host-only (with a loud message) when there is none.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

have() { command -v "$1" >/dev/null 2>&1; }
log() { echo "install-deps: $*"; }

version_ge() {  # version_ge A B: A >= B
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

missing=()
cmake_ok() { have cmake && version_ge "$(cmake --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')" 3.25; }
cmake_ok || missing+=(cmake)
{ have g++ || have c++; } || missing+=(g++)
{ have ninja || have make; } || missing+=(ninja-build)
have python3 || missing+=(python3)
[ -f /usr/include/catch2/catch.hpp ] || [ -f .deps/catch2/catch.hpp ] || missing+=(catch2)

# libFuzzer: clang++ plus its runtime (libclang-rt-<major>-dev on Debian 12 / Ubuntu).
fuzzer_links() {
  local cxx dir
  cxx=$(command -v clang++ || true)
  [ -n "$cxx" ] || return 1
  dir=$(mktemp -d)
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$dir/f.cpp"
  "$cxx" -fsanitize=fuzzer,address,undefined "$dir/f.cpp" -o "$dir/f" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}
need_fuzzer=0
fuzzer_links || need_fuzzer=1

if [ ${#missing[@]} -eq 0 ] && [ $need_fuzzer -eq 0 ]; then
  log "all dependencies present"
  exit 0
fi

# Without a way to install, only missing required tools are an error; clang/libFuzzer is optional.
SUDO=""
cannot_install=""
if [ "$(id -u)" -ne 0 ]; then
  if have sudo; then SUDO="sudo"; else cannot_install="not root and no sudo"; fi
fi
if [ -z "$cannot_install" ] && ! have apt-get; then cannot_install="no apt-get here"; fi
if [ -n "$cannot_install" ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    log "ERROR: missing ${missing[*]} ($cannot_install); install them by hand" >&2
    [ $need_fuzzer -eq 0 ] || log "       (optional, also missing: clang++ with libFuzzer, for the fuzz tests)" >&2
    exit 1
  fi
  log "WARNING: clang++ with libFuzzer is missing ($cannot_install): the fuzz tests will not be built;" \
      "everything else can be" >&2
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-o Acquire::Retries=1 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20)
APT_LOG=$(mktemp /tmp/zipcomm-apt.XXXXXX.log)
apt_quiet() {  # apt output goes to $APT_LOG; its tail is shown only when it fails
  if $SUDO timeout 900 apt-get "${APT_OPTS[@]}" "$@" >>"$APT_LOG" 2>&1; then return 0; fi
  tail -n 15 "$APT_LOG" | sed 's/^/  apt: /' >&2
  return 1
}
apt_install() { apt_quiet install -y -q --no-install-recommends "$@"; }
log "installing: ${missing[*]} $([ $need_fuzzer -eq 1 ] && echo '(+ clang/libFuzzer)') (apt log: $APT_LOG)"
apt_online=1
apt_quiet update -q || apt_online=0
# apt-get update exits 0 even when it reached no repository: look for fetch failures.
if grep -qE '^(W: Failed to fetch|E: )' "$APT_LOG"; then apt_online=0; fi
if [ ${#missing[@]} -gt 0 ]; then
  [ $apt_online -eq 1 ] || log "WARNING: apt-get update could not reach the package repositories"
  apt_install "${missing[@]}" || { log "ERROR: could not install: ${missing[*]}" >&2; exit 1; }
fi
if ! cmake_ok; then
  log "ERROR: cmake >= 3.25 is required; apt gave $(cmake --version 2>/dev/null | head -n1 || echo none)." >&2
  log "       Install a newer one, e.g. python3 -m pip install 'cmake>=3.25' (in a venv)." >&2
  exit 1
fi

if [ $need_fuzzer -eq 1 ]; then
  # Optional (never fails this script): without it the fuzz targets are not built (CMake says so), everything else still is.
  if [ $apt_online -eq 0 ]; then
    log "WARNING: package repositories unreachable; not installing clang/libFuzzer"
  elif ! have clang++; then apt_install clang || log "WARNING: could not install clang"; fi
  if [ $apt_online -eq 1 ] && have clang++ && ! fuzzer_links; then
    major=$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n1)
    apt_install "libclang-rt-${major}-dev" || log "WARNING: could not install libclang-rt-${major}-dev"
  fi
  if fuzzer_links; then log "libFuzzer: ok"; else
    log "WARNING: clang++ -fsanitize=fuzzer still does not link; fuzz tests will NOT be built" >&2
  fi
fi
log "done"
