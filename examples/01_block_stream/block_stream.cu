// 01_block_stream: the block-level primitives inside your own kernel.
//
// Shows what a collective or a P2P pipeline does with zipcomm: every thread block of a persistent kernel
// turns its slices of a bf16 buffer into self-contained v1 streams (block::BlockStreamEncoder, shared
// memory provided by the caller, synchronization through the cooperative-groups block), a second kernel
// decodes them (block::BlockStreamDecoder) through a sink that stores each lane's 8 items, and the host
// reads the same streams with the reference decoder. Checks every bit; exits 1 on any difference.
// Usage: zipcomm_block_stream [elements]   (default 10,000,000; needs a GPU)
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <zipcomm/block/block_stream_codec.cuh>
#include <zipcomm/host/reference_codec.hpp>

#include "example_common.cuh"

namespace cg = cooperative_groups;
using namespace zipcomm;

constexpr int WARPS = 8;
constexpr uint64_t SLICE = 1 << 18;  // elements per stream: one block's share of a collective step
using Enc = block::BlockStreamEncoder<DType::bf16, WARPS>;
using Dec = block::BlockStreamDecoder<DType::bf16, WARPS>;

// Slot s of `out` (slot_bytes apart, 16-byte aligned) receives the stream of elements [s*SLICE, ...).
__global__ void __launch_bounds__(WARPS * 32) compress_slices(const uint16_t* in, uint64_t n, uint8_t* out,
                                                              uint64_t slot_bytes, uint64_t* sizes) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Enc enc(*reinterpret_cast<Enc::TempStorage*>(smem));
  for (uint64_t s = blockIdx.x; s * SLICE < n; s += gridDim.x) {
    const uint64_t m = n - s * SLICE < SLICE ? n - s * SLICE : SLICE;
    const uint64_t bytes = enc.Encode(cta, in + s * SLICE, m, out + s * slot_bytes);
    if (cta.thread_rank() == 0) sizes[s] = bytes;
    cta.sync();  // TempStorage is reused by the next slice
  }
}

__global__ void __launch_bounds__(WARPS * 32) decompress_slices(const uint8_t* in, uint64_t n, uint64_t slot_bytes,
                                                                const uint64_t* sizes, uint16_t* out,
                                                                Status* status) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Dec dec(*reinterpret_cast<Dec::TempStorage*>(smem));
  for (uint64_t s = blockIdx.x; s * SLICE < n; s += gridDim.x) {
    uint16_t* dst = out + s * SLICE;
    // The sink is where a fused collective would reduce or forward; here it stores.
    auto sink = [&](uint64_t tile, const uint32_t (&x)[8], uint32_t count) {
      warp::store_items<DType::bf16, true>(dst, tile * format::TILE_ELEMS + (threadIdx.x % 32) * 8, count, x);
    };
    const Status st = dec.Decode(cta, in + s * slot_bytes, sizes[s], SLICE, sink);
    if (st != Status::ok && cta.thread_rank() == 0) *status = st;
  }
}

int main(int argc, char** argv) {
  const uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000000ull;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("zipcomm_block_stream: no GPU on this machine; nothing to show.\n");
    return 0;
  }
  // Gradient-like data: Gaussian with a scale that changes every 1 Mi elements, as layers do.
  std::vector<uint16_t> host(n);
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (uint64_t i = 0; i < n; ++i) {
    float x = nd(rng) * std::ldexp(1.0f, -6 - int((i >> 20) % 5));
    uint32_t u;
    std::memcpy(&u, &x, 4);
    host[i] = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  const uint64_t slices = (n + SLICE - 1) / SLICE;
  const uint64_t slot = format::align_up(format::max_compressed_bytes(DType::bf16, SLICE, format::MAX_CHUNK_LOG2), 16);
  uint16_t *d_in, *d_out;
  uint8_t* d_streams;
  uint64_t* d_sizes;
  Status* d_status;
  CK(cudaMalloc(&d_in, n * 2));
  CK(cudaMalloc(&d_out, n * 2));
  CK(cudaMalloc(&d_streams, slot * slices));
  CK(cudaMalloc(&d_sizes, 8 * slices));
  CK(cudaMalloc(&d_status, sizeof(Status)));
  CK(cudaMemcpy(d_in, host.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(d_status, 0, sizeof(Status)));
  CK(cudaFuncSetAttribute(compress_slices, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Enc::TempStorage))));
  CK(cudaFuncSetAttribute(decompress_slices, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Dec::TempStorage))));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = int(slices < uint64_t(2 * sms) ? slices : uint64_t(2 * sms));
  compress_slices<<<grid, WARPS * 32, sizeof(Enc::TempStorage)>>>(d_in, n, d_streams, slot, d_sizes);
  CK(cudaGetLastError());
  decompress_slices<<<grid, WARPS * 32, sizeof(Dec::TempStorage)>>>(d_streams, n, slot, d_sizes, d_out, d_status);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  std::vector<uint16_t> back(n);
  std::vector<uint64_t> sizes(slices);
  Status st;
  CK(cudaMemcpy(back.data(), d_out, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sizes.data(), d_sizes, 8 * slices, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&st, d_status, sizeof st, cudaMemcpyDeviceToHost));
  bool ok = st == Status::ok && back == host;
  // The host reference reads what the GPU wrote, stream by stream.
  std::vector<uint8_t> stream(slot);
  std::vector<uint16_t> host_back(SLICE);
  uint64_t total = 0;
  for (uint64_t s = 0; s < slices && ok; ++s) {
    const uint64_t m = n - s * SLICE < SLICE ? n - s * SLICE : SLICE;
    CK(cudaMemcpy(stream.data(), d_streams + s * slot, sizes[s], cudaMemcpyDeviceToHost));
    ok = host::decompress(stream.data(), sizes[s], host_back.data(), m * 2) == Status::ok &&
         std::memcmp(host_back.data(), host.data() + s * SLICE, m * 2) == 0;
    total += sizes[s];
  }
  std::printf("%llu bf16 elements in %llu block streams of %llu: ratio %.4f, device status %s, "
              "GPU round trip and host decode of the GPU streams: %s\n",
              (unsigned long long)n, (unsigned long long)slices, (unsigned long long)SLICE,
              double(total) / double(n * 2), status_string(st), ok ? "bit-exact" : "MISMATCH");
  return ok ? 0 : 1;
}
