#!/usr/bin/env bash
# SASS, with source lines, of the device-wide codec kernels of one dtype and code, for scripts/sass_paths.py:
# static instruction counts without a GPU.
#   bash scripts/sass-codec.sh [DTYPE] [CODE]    (bf16|fp16|fp32|fp8_e4m3|fp8_e5m2, pair|fixed; default bf16 fixed)
# Writes $OUT/codec_<dtype>_<code>.sass (OUT: /tmp/zipcomm-out). Needs nvcc and nvdisasm (the CUDA toolkit's, or
# NVDISASM=... from the PyPI wheel nvidia-cuda-nvdisasm: nvidia/cu13/bin/nvdisasm).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DTYPE=${1:-bf16}
CODE=${2:-fixed}
OUT=${OUT:-/tmp/zipcomm-out}
NVDISASM=${NVDISASM:-$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)}
case "$CODE" in pair) CLASS=PairCode ;; fixed) CLASS=FixedCode ;; *) echo "code: pair or fixed" >&2; exit 2 ;; esac
[ -x "$NVDISASM" ] || { echo "sass-codec: no nvdisasm (set NVDISASM)" >&2; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/probe.cu" <<CU
#include "zipcomm/device/device_codec.cuh"
using namespace zipcomm;
void* kernels[] = {
    reinterpret_cast<void*>(&device::detail::compress_kernel<DType::$DTYPE, thread::$CLASS>),
    reinterpret_cast<void*>(&device::detail::decompress_kernel<DType::$DTYPE, thread::$CLASS>),
};
CU
nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -lineinfo -Iinclude -cubin \
  -o "$tmp/probe.cubin" "$tmp/probe.cu"
"$NVDISASM" -c -gi "$tmp/probe.cubin" > "$OUT/codec_${DTYPE}_${CODE}.sass"
echo "$OUT/codec_${DTYPE}_${CODE}.sass"
