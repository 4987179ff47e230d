// Kernels behind device::compress / device::decompress.
//
// Compress is one pass: a persistent grid whose warps take chunks in order from an atomic counter, encode
// them (planes straight to the output, exponent words staged in shared memory), find where their chunk goes
// with a decoupled look-back over the sizes of earlier chunks, and write it. Taking chunks in order means
// every chunk a warp waits for is held by a running warp, so the look-back always makes progress.
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/exponent_code.hpp"
#include "../../warp/lane_io.cuh"
#include "../../warp/warp_chunk_decoder.cuh"
#include "../../warp/warp_chunk_encoder.cuh"

namespace zipcomm {
namespace device {
namespace detail {

/// Tuning (H200): 8 warps per block; 8.3 KB of staging per warp keeps 3 blocks (24 warps) per SM.
struct CodecPolicy {
  static constexpr int WARPS = 8;
  static constexpr int THREADS = WARPS * 32;
};

// Look-back status word of a chunk: flag in the top 2 bits, a byte count below.
constexpr uint64_t FLAG_AGGREGATE = 1ull << 62;
constexpr uint64_t FLAG_INCLUSIVE = 2ull << 62;
constexpr uint64_t VALUE_MASK = (1ull << 62) - 1;
constexpr uint64_t SPIN_LIMIT = 1ull << 26;  // ~minutes of polling: only a broken GPU would hit it

struct CompressArgs {
  const void* in;
  uint64_t n;
  uint8_t* out;
  uint64_t* out_bytes;
  Status* status;
  uint64_t* chunk_state;     // num_chunks words, zeroed before launch
  unsigned long long* chunk_counter;  // zeroed before launch
};

/// The next chunk for this warp, taken in increasing order from a counter shared by the grid.
ZIPCOMM_DEVICE uint64_t next_chunk(unsigned long long* counter) {
  unsigned long long c = 0;
  if (warp::lane_id() == 0) c = atomicAdd(counter, 1ull);
  return __shfl_sync(warp::FULL_MASK, c, 0);
}

ZIPCOMM_DEVICE uint64_t warp_sum_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(warp::FULL_MASK, v, o);
  return v;
}

/// Exclusive prefix of chunk sizes before chunk c (decoupled look-back, 32 predecessors per round).
ZIPCOMM_DEVICE uint64_t look_back(uint64_t* state, uint64_t c, bool& timed_out) {
  const uint32_t lane = warp::lane_id();
  uint64_t exclusive = 0;
  int64_t window_end = int64_t(c);
  while (window_end > 0) {
    const int64_t idx = window_end - 1 - lane;
    uint64_t s = FLAG_INCLUSIVE;  // before chunk 0: an inclusive prefix of 0
    if (idx >= 0) {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_device> ref(state[idx]);
      uint64_t spins = 0;
      while (((s = ref.load(cuda::memory_order_relaxed)) >> 62) == 0) {
        if (++spins > SPIN_LIMIT) {
          timed_out = true;
          s = FLAG_INCLUSIVE;
          break;
        }
        __nanosleep(32);
      }
    }
    const uint32_t inclusive = __ballot_sync(warp::FULL_MASK, (s >> 62) == 2);
    if (inclusive) {
      const uint32_t k = __ffs(inclusive) - 1;  // nearest predecessor with a full prefix
      exclusive += warp_sum_u64(lane <= k ? (s & VALUE_MASK) : 0);
      break;
    }
    exclusive += warp_sum_u64(s & VALUE_MASK);
    window_end -= 32;
  }
  timed_out = __any_sync(warp::FULL_MASK, timed_out);
  return exclusive;
}

template <DType D, class Code, bool VECTOR>
__global__ void __launch_bounds__(CodecPolicy::THREADS) compress_kernel(CompressArgs args) {
  using Enc = warp::WarpChunkEncoder<D, Code>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  typename Enc::TempStorage* temp = reinterpret_cast<typename Enc::TempStorage*>(smem_raw);
  const uint32_t warp_in_block = threadIdx.x / 32;
  const uint32_t lane = warp::lane_id();
  const format::Layout L = format::layout_for(D, args.n);

  // Alignment gaps between sections are part of the stream: zero them (block 0, one warp).
  if (blockIdx.x == 0 && warp_in_block == 0) {
    for (uint64_t b = L.plane0_offset + L.plane0_bytes + lane; b < L.plane1_offset; b += 32) args.out[b] = 0;
    for (uint64_t b = L.plane1_offset + L.plane1_bytes + lane; b < L.table_offset; b += 32) args.out[b] = 0;
    for (uint64_t b = L.table_offset + 8 * L.num_chunks + lane; b < L.exp_offset; b += 32) args.out[b] = 0;
    if (L.num_chunks == 0 && lane == 0) {
      *reinterpret_cast<format::Header*>(args.out) = format::make_header(D, Code::ID, 0, L.exp_offset);
      *args.out_bytes = L.exp_offset;
    }
  }

  Enc enc(temp[warp_in_block]);
  const warp::Planes planes{args.out + L.plane0_offset, args.out + L.plane1_offset};
  uint64_t* table = reinterpret_cast<uint64_t*>(args.out + L.table_offset);
  uint8_t* exp_section = args.out + L.exp_offset;

  for (uint64_t c = next_chunk(args.chunk_counter); c < L.num_chunks; c = next_chunk(args.chunk_counter)) {
    const uint32_t elems = format::chunk_elems(args.n, c);
    const uint64_t first_tile = c * format::CHUNK_TILES;
    auto load = [&](uint32_t t, uint32_t (&x)[warp::ITEMS]) {
      const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * warp::ITEMS;
      warp::load_items<D, VECTOR>(args.in, first, thread::lane_valid_count(elems, t, lane), x);
    };
    const warp::ChunkInfo info = enc.Encode(elems, first_tile, load, planes);

    cuda::atomic_ref<uint64_t, cuda::thread_scope_device> my_state(args.chunk_state[c]);
    if (lane == 0 && c > 0) my_state.store(FLAG_AGGREGATE | info.bytes, cuda::memory_order_relaxed);
    bool timed_out = false;
    const uint64_t exclusive = look_back(args.chunk_state, c, timed_out);
    if (lane == 0) my_state.store(FLAG_INCLUSIVE | (exclusive + info.bytes), cuda::memory_order_relaxed);

    enc.Store(exp_section + exclusive, elems, info, load);
    if (lane == 0) {
      table[c] = exclusive + info.bytes;
      if (timed_out) *args.status = Status::timeout;
      if (c + 1 == L.num_chunks) {
        const uint64_t total = L.exp_offset + exclusive + info.bytes;
        *reinterpret_cast<format::Header*>(args.out) = format::make_header(D, Code::ID, args.n, total);
        *args.out_bytes = total;
      }
    }
  }
}

struct DecompressArgs {
  const uint8_t* in;
  uint64_t in_bytes;
  void* out;
  uint64_t out_capacity;
  Status* status;
  unsigned long long* chunk_counter;  // zeroed before launch; warps take chunks from it (balances uneven chunks)
};

ZIPCOMM_DEVICE void report(Status* status, Status s) {
  atomicCAS(reinterpret_cast<unsigned int*>(status), 0u, static_cast<unsigned int>(s));
}

template <DType D, class Code, bool VECTOR>
__global__ void __launch_bounds__(CodecPolicy::THREADS) decompress_kernel(DecompressArgs args) {
  using Dec = warp::WarpChunkDecoder<D, Code>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  typename Dec::TempStorage* temp = reinterpret_cast<typename Dec::TempStorage*>(smem_raw);
  const uint32_t warp_in_block = threadIdx.x / 32;
  const uint32_t lane = warp::lane_id();
  const bool reporter = blockIdx.x == 0 && threadIdx.x == 0;

  format::Header h = *reinterpret_cast<const format::Header*>(args.in);
  Status hs = format::validate_header(h, args.in_bytes);
  if (hs == Status::ok && (h.dtype != uint8_t(D) || h.code != uint8_t(Code::ID))) hs = Status::bad_header;
  if (hs == Status::ok && h.num_elements > args.out_capacity) hs = Status::buffer_too_small;
  if (hs != Status::ok) {
    if (reporter) report(args.status, hs);
    return;
  }
  const uint64_t n = h.num_elements;
  const format::Layout L = format::layout_for(D, n);
  const uint64_t exp_bytes = h.total_bytes - L.exp_offset;
  const uint64_t* table = reinterpret_cast<const uint64_t*>(args.in + L.table_offset);
  const warp::ConstPlanes planes{args.in + L.plane0_offset, args.in + L.plane1_offset};
  Dec dec(temp[warp_in_block]);

  for (uint64_t c = next_chunk(args.chunk_counter); c < L.num_chunks; c = next_chunk(args.chunk_counter)) {
    const uint64_t start = c ? table[c - 1] : 0;
    const uint64_t end = table[c];
    const uint32_t elems = format::chunk_elems(n, c);
    Status s = Status::ok;
    if (!format::chunk_range_valid(D, n, c, start, end, exp_bytes)) {
      s = Status::corrupt_stream;
    } else {
      const uint64_t first_tile = c * format::CHUNK_TILES;
      auto sink = [&](uint32_t t, const uint32_t (&x)[warp::ITEMS], uint32_t cnt) {
        const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * warp::ITEMS;
        warp::store_items<D, VECTOR>(args.out, first, cnt, x);
      };
      s = dec.Decode(args.in + L.exp_offset + start, uint32_t(end - start), elems, first_tile, planes, sink);
    }
    if (s != Status::ok && lane == 0) report(args.status, s);
  }
}

template <class Kernel>
inline cudaError_t persistent_grid(Kernel kernel, size_t smem, uint64_t work_items, int& grid) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, CodecPolicy::THREADS, smem);
  if (e != cudaSuccess) return e;
  uint64_t want = (work_items + CodecPolicy::WARPS - 1) / CodecPolicy::WARPS;
  uint64_t cap = uint64_t(sms) * uint64_t(per_sm > 0 ? per_sm : 1);
  grid = int(want < cap ? (want > 0 ? want : 1) : cap);
  return cudaSuccess;
}

// A template so a header-defined kernel has one definition across translation units.
template <int = 0>
__global__ void set_status_kernel(Status* status, Status value) {
  *status = value;
}

inline size_t compress_temp_bytes(uint64_t num_chunks) { return 16 + 8 * num_chunks; }

template <DType D, class Code>
cudaError_t launch_compress(void* d_temp, size_t& temp_bytes, const void* d_in, uint64_t n, void* d_out,
                            uint64_t out_capacity, uint64_t* d_out_bytes, Status* d_status, cudaStream_t stream) {
  const format::Layout L = format::layout_for(D, n);
  const size_t need = compress_temp_bytes(L.num_chunks);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (!d_status || !d_out_bytes) return cudaErrorInvalidValue;
  Status host_check = Status::ok;
  if (temp_bytes < need || !d_out || (!d_in && n) || (reinterpret_cast<uintptr_t>(d_out) % 16) ||
      (reinterpret_cast<uintptr_t>(d_temp) % 8) || n > (uint64_t(1) << 50))
    host_check = Status::invalid_argument;
  else if (out_capacity < format::max_compressed_bytes(D, n))
    host_check = Status::buffer_too_small;
  if (host_check != Status::ok) {
    set_status_kernel<><<<1, 1, 0, stream>>>(d_status, host_check);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorInvalidValue;
  }
  cudaError_t e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);  // Status::ok
  if (e != cudaSuccess) return e;
  CompressArgs args{d_in,
                    n,
                    static_cast<uint8_t*>(d_out),
                    d_out_bytes,
                    d_status,
                    reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(d_temp) + 16),
                    static_cast<unsigned long long*>(d_temp)};
  const size_t smem = sizeof(typename warp::WarpChunkEncoder<D, Code>::TempStorage) * CodecPolicy::WARPS;
  const bool vector = reinterpret_cast<uintptr_t>(d_in) % 16 == 0;
  int grid = 1;
  if (vector) {
    e = persistent_grid(compress_kernel<D, Code, true>, smem, L.num_chunks, grid);
    if (e == cudaSuccess) compress_kernel<D, Code, true><<<grid, CodecPolicy::THREADS, smem, stream>>>(args);
  } else {
    e = persistent_grid(compress_kernel<D, Code, false>, smem, L.num_chunks, grid);
    if (e == cudaSuccess) compress_kernel<D, Code, false><<<grid, CodecPolicy::THREADS, smem, stream>>>(args);
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

template <DType D, class Code>
cudaError_t launch_decompress(void* d_temp, size_t& temp_bytes, const void* d_in, uint64_t in_bytes, void* d_out,
                              uint64_t out_capacity_elems, Status* d_status, cudaStream_t stream) {
  constexpr size_t need = 16;  // the chunk counter
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (!d_status) return cudaErrorInvalidValue;
  Status host_check = Status::ok;
  if (!d_in || (reinterpret_cast<uintptr_t>(d_in) % 16) || (!d_out && out_capacity_elems))
    host_check = Status::invalid_argument;
  else if (in_bytes < format::HEADER_BYTES)
    host_check = Status::corrupt_stream;
  if (host_check != Status::ok) {
    set_status_kernel<><<<1, 1, 0, stream>>>(d_status, host_check);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorInvalidValue;
  }
  if (temp_bytes < need || reinterpret_cast<uintptr_t>(d_temp) % 8) {
    set_status_kernel<><<<1, 1, 0, stream>>>(d_status, Status::invalid_argument);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorInvalidValue;
  }
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e != cudaSuccess) return e;
  DecompressArgs args{static_cast<const uint8_t*>(d_in), in_bytes,  d_out,
                      out_capacity_elems,                d_status, static_cast<unsigned long long*>(d_temp)};
  const size_t smem = sizeof(typename warp::WarpChunkDecoder<D, Code>::TempStorage) * CodecPolicy::WARPS;
  const bool vector = reinterpret_cast<uintptr_t>(d_out) % 16 == 0;
  // The element count lives in the header on the device: size the grid for the whole GPU.
  const uint64_t many = uint64_t(1) << 40;
  int grid = 1;
  if (vector) {
    e = persistent_grid(decompress_kernel<D, Code, true>, smem, many, grid);
    if (e == cudaSuccess) decompress_kernel<D, Code, true><<<grid, CodecPolicy::THREADS, smem, stream>>>(args);
  } else {
    e = persistent_grid(decompress_kernel<D, Code, false>, smem, many, grid);
    if (e == cudaSuccess) decompress_kernel<D, Code, false><<<grid, CodecPolicy::THREADS, smem, stream>>>(args);
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace detail
}  // namespace device
}  // namespace zipcomm
