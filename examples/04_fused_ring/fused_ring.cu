// Example: a user's persistent kernel composing zipcomm's fused block primitives into a compressed ring
// allreduce. The ranks are simulated on one GPU: rank r's buffer, mailbox and flags are plain device memory,
// and a block (rank, channel) plays that rank's share of the ring. With real peers the mailbox pointers would
// be peer (NVLink) pointers and nothing else changes.
//
//   reduce-scatter, step 0        encode own slice (pre-scaled for avg)         BlockStreamEncoder
//   reduce-scatter, steps 1..R-1  decode incoming + reduce + re-encode          BlockDecodeReduceEncode
//   all-gather                    decode into own buffer + forward unchanged    BlockDecodeForward
//
// Every hop waits on a flag with a bounded spin (Status::timeout instead of a hang). The result is checked
// bit for bit against the host reference of the same ring order (host::reduce, one hop at a time).
// Usage: zipcomm_fused_ring [elements per rank = 4000037] [ranks = 4] [op = sum|prod|min|max|avg]
#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zipcomm/block/block_fused.cuh>
#include <zipcomm/block/block_stream_codec.cuh>
#include <zipcomm/host/reference_reduce.hpp>

#include "example_common.cuh"

using namespace zipcomm;
namespace cg = cooperative_groups;

namespace {

constexpr DType D = DType::bf16;
constexpr int WARPS = 8;
constexpr int MAX_RANKS = 16;
using Encoder = block::BlockStreamEncoder<D, WARPS>;
using ReduceEncode = block::BlockDecodeReduceEncode<D, WARPS>;
using Forward = block::BlockDecodeForward<D, WARPS>;
using Decoder = block::BlockStreamDecoder<D, WARPS>;

union SharedStorage {
  Encoder::TempStorage enc;
  ReduceEncode::TempStorage reduce_encode;
  Forward::TempStorage forward;
  Decoder::TempStorage dec;
};

struct Ring {
  int ranks, channels;
  uint64_t n;                      // elements per rank
  uint8_t* data[MAX_RANKS];        // rank buffers (in place: input, then result)
  uint8_t* mailbox[MAX_RANKS];     // per rank: channels x (2 * ranks - 1) slots
  uint64_t* slot_len[MAX_RANKS];   // compressed bytes in each slot
  unsigned* flags[MAX_RANKS];      // epoch once a slot is ready
  uint64_t slot_bytes;
  unsigned epoch;
  uint64_t spin_limit;
  ReduceOp op;
  Status* status;                  // first error of any block
};

__device__ uint64_t part_first(const Ring& g, int slice, int ch) {
  const uint64_t per_slice = (g.n + g.ranks - 1) / g.ranks;
  const uint64_t s0 = std::min<uint64_t>(g.n, uint64_t(slice) * per_slice), s1 = std::min<uint64_t>(g.n, s0 + per_slice);
  const uint64_t per_ch = (s1 - s0 + g.channels - 1) / g.channels;
  return std::min<uint64_t>(s1, s0 + uint64_t(ch) * per_ch);
}
__device__ uint64_t part_count(const Ring& g, int slice, int ch) {
  const uint64_t per_slice = (g.n + g.ranks - 1) / g.ranks;
  const uint64_t s1 = std::min<uint64_t>(g.n, std::min<uint64_t>(g.n, uint64_t(slice) * per_slice) + per_slice);
  const uint64_t per_ch = (s1 - std::min<uint64_t>(g.n, uint64_t(slice) * per_slice) + g.channels - 1) / g.channels;
  const uint64_t f = part_first(g, slice, ch);
  return std::min<uint64_t>(s1, f + per_ch) - f;
}

__global__ void __launch_bounds__(WARPS * 32) ring_allreduce(Ring g) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  __shared__ uint32_t block_status;
  auto cta = cg::this_thread_block();
  const int r = blockIdx.x / g.channels, ch = blockIdx.x % g.channels, R = g.ranks;
  const int next = (r + 1) % R, slots = 2 * R - 1;
  auto slot = [&](int rank, int i) { return g.mailbox[rank] + (uint64_t(ch) * slots + i) * g.slot_bytes; };
  auto elems = [&](int slice) { return g.data[r] + part_first(g, slice, ch) * 2; };
  if (cta.thread_rank() == 0) block_status = 0;
  cta.sync();
  auto fail = [&](Status s) {
    if (s != Status::ok && cta.thread_rank() == 0) {
      block_status = uint32_t(s);
      atomicCAS(reinterpret_cast<unsigned*>(g.status), 0u, unsigned(s));
    }
  };
  auto publish = [&](int i, uint64_t len) {  // slot i of the next rank is written: release it
    cta.sync();
    if (cta.thread_rank() == 0) {
      g.slot_len[next][ch * slots + i] = len;
      cuda::atomic_ref<unsigned, cuda::thread_scope_device> f(g.flags[next][ch * slots + i]);
      f.store(g.epoch, cuda::memory_order_release);
    }
  };
  auto wait = [&](int i) -> uint64_t {  // own slot i, written by the previous rank
    if (cta.thread_rank() == 0) {
      cuda::atomic_ref<unsigned, cuda::thread_scope_device> f(g.flags[r][ch * slots + i]);
      uint64_t spins = 0;
      while (f.load(cuda::memory_order_acquire) != g.epoch)
        if (++spins > g.spin_limit) {
          block_status = uint32_t(Status::timeout);
          atomicCAS(reinterpret_cast<unsigned*>(g.status), 0u, unsigned(Status::timeout));
          break;
        } else {
          __nanosleep(64);
        }
    }
    cta.sync();
    return block_status ? 0 : g.slot_len[r][ch * slots + i];
  };

  // reduce-scatter: at step s rank r sends slice (r - s) mod R
  {
    const int k = r;
    const uint64_t len = Encoder(smem.enc).Encode(cta, elems(k), part_count(g, k, ch), slot(next, 0), g.op);
    publish(0, len);
  }
  for (int s = 1; s < R && !block_status; ++s) {
    const int k = ((r - s) % R + R) % R;
    const uint64_t in_len = wait(s - 1);
    if (block_status) break;
    // the last step keeps its result (slice r + 1 is now complete here) in its own self slot
    uint8_t* dst = s + 1 < R ? slot(next, s) : slot(r, slots - 1);
    uint64_t out_len = 0;
    const Status st = ReduceEncode(smem.reduce_encode)
                          .DecodeReduceEncode(cta, slot(r, s - 1), in_len, elems(k), part_count(g, k, ch), g.op, dst,
                                              g.slot_bytes, out_len);
    fail(st);
    cta.sync();
    if (block_status) break;
    if (s + 1 < R) {
      publish(s, out_len);
    } else {
      // all-gather step 0: own result decoded in place, and the same bytes forwarded to the next rank
      const Status fs = Forward(smem.forward).DecodeForward(cta, dst, out_len, elems(k), part_count(g, k, ch),
                                                            slot(next, R - 1), g.slot_bytes);
      fail(fs);
      publish(R - 1, out_len);
    }
  }
  // all-gather: at step j rank r receives slice (r - j) mod R in slot R - 1 + j
  for (int j = 0; j + 1 < R && !block_status; ++j) {
    const int k = ((r - j) % R + R) % R;
    const uint64_t in_len = wait(R - 1 + j);
    if (block_status) break;
    if (j + 2 < R) {
      fail(Forward(smem.forward)
               .DecodeForward(cta, slot(r, R - 1 + j), in_len, elems(k), part_count(g, k, ch), slot(next, R + j),
                              g.slot_bytes));
      publish(R + j, in_len);
    } else {
      uint8_t* out = elems(k);
      auto sink = [&](uint64_t tile, const uint32_t (&x)[8], uint32_t cnt) {
        warp::store_items_any<D>(out, warp::aligned16(out), tile * format::TILE_ELEMS + (threadIdx.x % 32) * 8, cnt, x);
      };
      fail(Decoder(smem.dec).Decode(cta, slot(r, R - 1 + j), in_len, part_count(g, k, ch), sink));
    }
    cta.sync();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4000037;
  const int R = argc > 2 ? std::atoi(argv[2]) : 4;
  const std::string op_name = argc > 3 ? argv[3] : "sum";
  ReduceOp op = op_name == "prod" ? ReduceOp::prod()
                : op_name == "min" ? ReduceOp::min()
                : op_name == "max" ? ReduceOp::max()
                : op_name == "avg" ? ReduceOp::avg(R)
                                   : ReduceOp::sum();
  if (R < 2 || R > MAX_RANKS) return std::fprintf(stderr, "ranks must be 2..%d\n", MAX_RANKS), 2;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("zipcomm_fused_ring: no GPU on this machine; nothing to run.\n");
    return 0;
  }
  // As many channels as keep every block resident (the ring spins on flags, so all blocks must run at once).
  const size_t smem = sizeof(SharedStorage);
  CK(cudaFuncSetAttribute(ring_allreduce, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_allreduce, WARPS * 32, smem));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int channels = std::max(1, std::min(32, per_sm * sms / R));

  Ring g{};
  g.ranks = R, g.channels = channels, g.n = n, g.op = op;
  const uint64_t part = ((n + R - 1) / R + channels - 1) / channels + 1;
  g.slot_bytes = format::align_up(format::max_compressed_bytes(D, part), 16);
  g.spin_limit = uint64_t(1) << 24;  // ~1 s of polling
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<std::vector<uint8_t>> input(R, std::vector<uint8_t>(2 * n));
  for (int r = 0; r < R; ++r) {
    for (uint64_t i = 0; i < n; ++i) {
      float x = nd(rng);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      const uint16_t h = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
      std::memcpy(&input[r][2 * i], &h, 2);
    }
    CK(cudaMalloc(&g.data[r], 2 * n + 16));
    CK(cudaMemcpy(g.data[r], input[r].data(), 2 * n, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&g.mailbox[r], g.slot_bytes * channels * (2 * R - 1)));
    CK(cudaMalloc(&g.slot_len[r], 8 * channels * (2 * R - 1)));
    CK(cudaMalloc(&g.flags[r], 4 * channels * (2 * R - 1)));
    CK(cudaMemset(g.flags[r], 0, 4 * channels * (2 * R - 1)));
  }
  CK(cudaMalloc(&g.status, sizeof(Status)));
  CK(cudaMemset(g.status, 0, sizeof(Status)));
  g.epoch = 1;
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventRecord(t0));
  ring_allreduce<<<R * channels, WARPS * 32, smem>>>(g);
  CK(cudaEventRecord(t1));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  Status st;
  CK(cudaMemcpy(&st, g.status, sizeof st, cudaMemcpyDeviceToHost));

  // Host reference of the same ring: slice k starts at rank k and visits k+1, ..., k-1, one rounding per hop.
  std::vector<uint8_t> want(2 * n), part_acc;
  const uint64_t per_slice = (n + R - 1) / R;
  for (int k = 0; k < R; ++k) {
    const uint64_t s0 = std::min<uint64_t>(n, k * per_slice), len = std::min<uint64_t>(n, s0 + per_slice) - s0;
    part_acc.assign(input[k].begin() + 2 * s0, input[k].begin() + 2 * (s0 + len));
    host::reduce_pre(D, op, part_acc.data(), part_acc.data(), len);
    for (int j = 1; j < R; ++j)
      host::reduce(D, op, part_acc.data(), input[(k + j) % R].data() + 2 * s0, part_acc.data(), len);
    std::memcpy(want.data() + 2 * s0, part_acc.data(), 2 * len);
  }
  int exact = 0;
  for (int r = 0; r < R; ++r) {
    std::vector<uint8_t> got(2 * n);
    CK(cudaMemcpy(got.data(), g.data[r], 2 * n, cudaMemcpyDeviceToHost));
    exact += got == want;
  }
  std::printf("compressed ring allreduce (%s, bf16), %d simulated ranks x %d channels, %llu elements per rank\n",
              op_name.c_str(), R, channels, (unsigned long long)n);
  std::printf("  status: %s; ranks bit-identical to the host ring: %d of %d; %.3f ms (first launch)\n",
              status_string(st), exact, R, ms);
  for (int r = 0; r < R; ++r) {
    CK(cudaFree(g.data[r]));
    CK(cudaFree(g.mailbox[r]));
    CK(cudaFree(g.slot_len[r]));
    CK(cudaFree(g.flags[r]));
  }
  CK(cudaFree(g.status));
  return st == Status::ok && exact == R ? 0 : 1;
}
