// Probe: how long the P2P sender's plane split of one frame takes, and what bounds it. Each warp splits one
// 16384-element bf16 item, as the sender's warps do for a transfer's first frame (1056 warps: one 8-warp block
// per SM; 512 warps: one frame of the default shape). Variants: the sender's split_item_planes (planes only); a split
// that also folds the item check (thread::ChunkCheck), and one without; loads only; and U tiles' loads issued
// before any is written (U = 2, 4, 8).
// Prints the median kernel time (CUDA events, 30 runs) less an empty kernel's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "example_common.cuh"
#include "zipcomm/comm/p2p.cuh"

namespace {
using namespace zipcomm;
constexpr uint32_t ITEM = 16384;
constexpr uint64_t PLANE_BYTES = ITEM;  // bf16: one sign/mantissa byte per element (the probe's own layout)

__global__ void fill(uint16_t* x, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 15;
    x[i] = uint16_t(0x3C00u + (h & 0x0FFFu) - 0x0800u) ^ uint16_t((h >> 16) & 0x8000u);
  }
}

__global__ void empty_kernel() {}

__global__ void __launch_bounds__(256) split_real(uint8_t* dst, const uint16_t* in, uint32_t* sink) {
  const uint64_t w = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t item_bytes = comm::item_plane_bytes(DType::bf16, ITEM);
  comm::p2p_detail::split_item_planes<DType::bf16>(dst + w * item_bytes, in, true, w * ITEM, ITEM);
  if (warp::lane_id() == 0) sink[w] = uint32_t(w);
}

template <int U, bool CHECK, bool STORE>
__global__ void __launch_bounds__(256) split_unrolled(uint8_t* dst, const uint16_t* in, uint32_t* sink) {
  const uint64_t w = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = warp::lane_id();
  uint8_t* plane = dst + w * PLANE_BYTES * 2;
  uint32_t check = thread::ChunkCheck::lane_seed(lane);
  for (uint32_t t0 = 0; t0 < ITEM / format::TILE_ELEMS; t0 += U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      v[u] = __ldg(reinterpret_cast<const uint4*>(in + w * ITEM + uint64_t(t0 + u) * format::TILE_ELEMS + lane * 8));
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t words[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      uint32_t lo = 0, hi = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t a = words[i] & 0xFFFFu, b = words[i] >> 16;
        using FB = thread::FloatBits<DType::bf16>;
        const uint32_t pa = FB::plane0(a), pb = FB::plane0(b);
        const uint32_t pair = pa | pb << 8;
        if (i < 2) lo |= pair << (16 * i);
        else hi |= pair << (16 * (i - 2));
        if (CHECK) {
          check = thread::ChunkCheck::round(check, words[i]);  // a bf16 pair is one check word
        } else {
          check ^= words[i];
        }
      }
      if (STORE)
        *reinterpret_cast<uint2*>(plane + uint64_t(t0 + u) * format::TILE_ELEMS + lane * 8) = make_uint2(lo, hi);
    }
  }
  if (lane == 0) sink[w] = check;
}

template <class K>
double time_us(K&& launch, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps + 3; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return 1000.0 * t[t.size() / 2];
}
}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const uint64_t max_warps = uint64_t(sms) * 8;
  const uint64_t n = max_warps * ITEM * 8;  // room to move each run to fresh data (not L2-resident)
  uint16_t* in;
  uint8_t* dst;
  uint32_t* sink;
  CK(cudaMalloc(&in, n * 2));
  CK(cudaMalloc(&dst, n * 2));
  CK(cudaMalloc(&sink, max_warps * 4 * 8));
  fill<<<1024, 256>>>(in, n);
  CK(cudaDeviceSynchronize());
  const int reps = 30;
  const double empty = time_us([&] { empty_kernel<<<sms, 256>>>(); }, reps);
  std::printf("probe_split: %d SMs, 8 warps per block, one 16384-element bf16 item per warp; empty kernel %.2f us\n",
              sms, empty);
  std::printf("%-34s %10s %10s\n", "variant (us, empty kernel subtracted)", "1 blk/SM", "64 blocks");
  int rot = 0;
  auto run = [&](const char* name, auto kernel) {
    double us[2];
    const int grids[2] = {sms, 64};
    for (int g = 0; g < 2; ++g)
      us[g] = time_us(
                  [&] {
                    const uint64_t w0 = uint64_t(rot++ % 8) * max_warps;  // another 35 MB each run
                    kernel<<<grids[g], 256>>>(dst + w0 * ITEM * 2, in + w0 * ITEM, sink + w0);
                  },
                  reps) -
              empty;
    CK(cudaGetLastError());
    std::printf("%-34s %10.2f %10.2f\n", name, us[0], us[1]);
  };
  run("sender split_item_planes", split_real);
  run("1 tile in flight, check", split_unrolled<1, true, true>);
  run("2 tiles in flight, check", split_unrolled<2, true, true>);
  run("4 tiles in flight, check", split_unrolled<4, true, true>);
  run("8 tiles in flight, check", split_unrolled<8, true, true>);
  run("4 tiles, no check", split_unrolled<4, false, true>);
  run("1 tile, no check", split_unrolled<1, false, true>);
  run("loads only, 1 tile", split_unrolled<1, false, false>);
  run("loads only, 8 tiles", split_unrolled<8, false, false>);
  CK(cudaDeviceSynchronize());
  return 0;
}
