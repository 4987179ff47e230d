// Kernels behind device::compress / device::decompress.
//
// Compress is one pass (fp16 and fp32: after one that picks each tile's low-bit width and places the chunks' low
// parts alike): a persistent grid whose warps take chunks in order from an atomic counter, encode them (planes
// straight to the output, lane streams staged in shared memory), find where their chunk goes with a decoupled
// look-back over the sizes of earlier chunks, and write it. Taking chunks in order means every chunk a warp waits
// for is held by a running warp, so the look-back always makes progress.
#pragma once

#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../../detail/bounded_wait.cuh"
#include "../../detail/dynamic_smem.cuh"
#include "../../detail/look_back.cuh"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "../../thread/reduce_op.hpp"
#include "../../warp/lane_io.cuh"
#include "../../warp/pair_tables.cuh"
#include "../../warp/warp_chunk_decoder.cuh"
#include "../../warp/warp_chunk_encoder.cuh"

namespace zipcomm {
namespace device {
namespace detail {

/// Tuning (H200): encode: 8 warps per block, 5 KB table + 8 KB of lane words per warp: 3 blocks (24 warps; fp32 2)
/// per SM. Decode: 16 warps share one 64 KB table, 2 blocks per SM: the lanes' scattered word loads need the
/// L1 that a third block's table would take (946 against 858 GB/s with 3 blocks).
struct CodecPolicy {
  static constexpr int WARPS = 8;
  static constexpr int THREADS = WARPS * 32;
  // A call of at most WARPS chunks per SM: half blocks, over twice the SMs (bf16 encode at 2-8 MiB +7-15%, H100).
  static constexpr int SMALL_CALL_THREADS = THREADS / 2;
  // fp32: 2 blocks of up to 128 registers, where 3 at 80 spill 168 bytes (encode +1-8% at 256 MiB, +9-12% at 16; H100).
  template <DType D>
  static constexpr int ENCODE_MIN_BLOCKS = D == DType::fp32 ? 2 : 3;
};
struct DecodePolicy {
  static constexpr int WARPS = 16;
  static constexpr int THREADS = WARPS * 32;
};

/// Shared memory of a kernel whose warps encode: the code's table (none for the fixed code), a chunk per warp.
template <DType D, class Code, int WARPS>
struct EncodeSmem {
  typename warp::TablesOf<Code>::Encode table;
  typename warp::WarpChunkEncoder<D, Code>::TempStorage warp[WARPS];
};

// Look-back status word of a chunk: its detail::LookBackFlag in the top 2 bits, a byte count below.
constexpr uint32_t FLAG_SHIFT = 62;
constexpr uint64_t FLAG_AGGREGATE = uint64_t(zipcomm::detail::LookBackFlag::aggregate) << FLAG_SHIFT;
constexpr uint64_t FLAG_INCLUSIVE = uint64_t(zipcomm::detail::LookBackFlag::inclusive) << FLAG_SHIFT;
constexpr uint64_t VALUE_MASK = (1ull << FLAG_SHIFT) - 1;
// Bound of a look-back wait: predecessors are running warps of the same kernel, so only a broken GPU (or a
// sanitizer's slowest run) comes near it.
constexpr uint64_t LOOK_BACK_TIMEOUT_NS = 30000000000ull;

struct CompressArgs {
  const void* in;
  uint64_t n;
  uint32_t chunk_log2;       // chunks of 2^chunk_log2 elements
  uint8_t* out;
  uint64_t out_capacity;
  uint64_t* out_bytes;
  Status* status;
  uint64_t* chunk_state;     // num_chunks words, zeroed before launch
  unsigned long long* chunk_counter;  // zeroed before launch
  ReduceOp pre_op;           // avg: scale each element first (a reduction's contribution)
  format::LowWidths low_widths;  // minimal: low_widths_kernel ran first
  // Minimal widths: per chunk its low part's length (the width pass's aggregate), then its end offset (the
  // encoder's look-back); and the sum of the lengths. Zeroed before the width pass.
  uint64_t* low_state = nullptr;
  unsigned long long* low_total = nullptr;
};

/// The next chunk for this warp, taken in increasing order from a counter shared by the grid.
ZIPCOMM_DEVICE uint64_t next_chunk(unsigned long long* counter) {
  unsigned long long c = 0;
  if (warp::lane_id() == 0) c = atomicAdd(counter, 1ull);
  return __shfl_sync(warp::FULL_MASK, c, 0);
}

/// Exclusive prefix of chunk sizes before chunk c (the library's decoupled look-back over the chunk states).
ZIPCOMM_DEVICE uint64_t look_back(uint64_t* state, uint64_t c, bool& timed_out) {
  zipcomm::detail::WaitBound bound;
  bound.timeout_ns = LOOK_BACK_TIMEOUT_NS;
  auto read = [&](uint64_t i) {
    const uint64_t v = cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(state[i]).load(cuda::memory_order_relaxed);
    return zipcomm::detail::LookBackEntry{zipcomm::detail::LookBackFlag(v >> FLAG_SHIFT), v & VALUE_MASK};
  };
  uint64_t exclusive = 0;
  // 256 ns sleeps: a predecessor still coding leaves its SM's schedulers to the others.
  const Status s = zipcomm::detail::warp_look_back(c, read, bound, zipcomm::detail::FixedSleep{256}, exclusive);
  timed_out = s != Status::ok;
  return exclusive;
}

ZIPCOMM_DEVICE void report(Status* status, Status s) {
  if (s != Status::ok) atomicCAS(reinterpret_cast<unsigned int*>(status), 0u, static_cast<unsigned int>(s));
}

/// The body of every kernel that writes a stream: warps take chunks in order, encode what `source` yields
/// (begin(c, elems, first_tile), operator()(tile, x), status()), place them with the look-back, store them.
template <DType D, class Code, class Source>
ZIPCOMM_DEVICE void encode_chunks(const CompressArgs& args, typename warp::WarpChunkEncoder<D, Code>::TempStorage& temp,
                                  const typename warp::TablesOf<Code>::Encode& code_table, Source& source) {
  const uint32_t lane = warp::lane_id();
  // Full width: chunk c's low part starts where c full chunks' end. Minimal: after the lengths of the chunks
  // before it, found by a look-back over the width pass's lengths that never waits (every one is published).
  const bool full = !format::has_low(D) || args.low_widths == format::LowWidths::full;
  const format::Layout fixed = format::layout_for(D, args.n, args.chunk_log2);
  uint64_t* low_table = reinterpret_cast<uint64_t*>(args.out + fixed.low_table_offset);
  const uint64_t low_bytes = full || fixed.num_chunks == 0 ? fixed.low_max_bytes : *args.low_total;
  const format::Layout L = format::layout_for(D, args.n, args.chunk_log2, low_bytes);

  // Alignment gaps between sections are part of the stream: zero them (block 0, one warp).
  if (blockIdx.x == 0 && threadIdx.x < 32) {
    format::for_section_gaps(L, lane, 32, [&](uint64_t b) { args.out[b] = 0; });
    if (L.num_chunks == 0 && lane == 0) {
      *reinterpret_cast<format::Header*>(args.out) =
          format::make_header(D, Code::ID, 0, args.chunk_log2, L.exp_offset, 0);
      *args.out_bytes = L.exp_offset;
    }
  }

  warp::WarpChunkEncoder<D, Code> enc(temp, code_table);
  uint64_t* table = reinterpret_cast<uint64_t*>(args.out + L.table_offset);
  uint32_t* checks = reinterpret_cast<uint32_t*>(args.out + L.check_offset);
  uint8_t* exp_section = args.out + L.exp_offset;

  for (uint64_t c = next_chunk(args.chunk_counter); c < L.num_chunks; c = next_chunk(args.chunk_counter)) {
    const uint32_t elems = L.chunk_elems(c);
    const uint64_t first_tile = L.chunk_first_tile(c);
    uint64_t low_start;
    if (full) {
      low_start = c * format::full_low_chunk_bytes(D, 1u << L.chunk_log2);
    } else {
      bool timed_out = false;
      low_start = look_back(args.low_state, c, timed_out);
      if (lane == 0) {
        const uint64_t end = low_start + (args.low_state[c] & VALUE_MASK);
        cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(args.low_state[c])
            .store(FLAG_INCLUSIVE | end, cuda::memory_order_relaxed);
        low_table[c] = end;
        if (timed_out) report(args.status, Status::timeout);
      }
    }
    const warp::Planes planes{args.out + L.plane0_offset, args.out + L.widths_offset,
                              args.out + L.low_offset + low_start, full};
    source.begin(c, elems, first_tile);
    const warp::ChunkInfo info = enc.Encode(elems, first_tile, source, planes);
    if (format::has_low(D) && full && lane == 0) low_table[c] = low_start + format::full_low_chunk_bytes(D, elems);

    cuda::atomic_ref<uint64_t, cuda::thread_scope_device> my_state(args.chunk_state[c]);
    if (lane == 0 && c > 0) my_state.store(FLAG_AGGREGATE | info.bytes, cuda::memory_order_relaxed);
    bool timed_out = false;
    const uint64_t exclusive = look_back(args.chunk_state, c, timed_out);
    if (lane == 0) my_state.store(FLAG_INCLUSIVE | (exclusive + info.bytes), cuda::memory_order_relaxed);

    enc.Store(exp_section + exclusive, elems, info, source);
    const Status s = source.status();
    if (lane == 0) {
      table[c] = exclusive + info.bytes;
      checks[c] = info.check;
      report(args.status, s);
      if (timed_out) report(args.status, Status::timeout);
      if (c + 1 == L.num_chunks) {
        const uint64_t total = L.exp_offset + exclusive + info.bytes;
        *reinterpret_cast<format::Header*>(args.out) =
            format::make_header(D, Code::ID, args.n, args.chunk_log2, total, low_bytes);
        *args.out_bytes = total;
      }
    }
  }
}

/// Compress's first pass (fp16, fp32): each chunk's width codes, the narrowest whose dropped low bits are zero
/// in every element of the tile, into the stream, and the length of its low part into args.low_state (the
/// encoder's look-back turns the lengths into offsets) and their sum into args.low_total. A warp per chunk; the
/// full tiles of a 16-byte aligned input are read WIDTH_BATCH at a time, every load in flight before the first is
/// used, and without a pre-op their low bits are gathered on whole words.
template <DType D>
__global__ void __launch_bounds__(CodecPolicy::THREADS) low_widths_kernel(CompressArgs args) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES, TILE_BYTES = format::TILE_ELEMS * EB;
  constexpr uint32_t VECS = warp::ITEMS * EB / 16;  // a lane's 16-byte vectors per tile
  constexpr uint32_t WIDTH_BATCH = 8 / VECS;        // fp16 pass 134 -> 93 us, fp32 105 -> 91 (H100, 256 MiB)
  constexpr uint32_t LOW_MASK = EB == 2 ? 0x00070007u : 0x0000FFFFu;  // FB::low of each element of a word
  const uint32_t lane = warp::lane_id();
  const format::Layout L = format::layout_for(D, args.n, args.chunk_log2);
  const bool vector = warp::aligned16(args.in), plain = args.pre_op.id != ReduceOpId::avg;
  const uint64_t warps = uint64_t(gridDim.x) * (blockDim.x / 32);
  uint64_t warp_total = 0;
  for (uint64_t c = blockIdx.x * uint64_t(blockDim.x / 32) + threadIdx.x / 32; c < L.num_chunks; c += warps) {
    const uint32_t elems = L.chunk_elems(c), tiles = format::chunk_tiles(elems);
    const uint32_t full = vector ? elems / format::TILE_ELEMS : 0u;  // tiles read as whole vectors
    const uint64_t lane_first = L.chunk_first_tile(c) * format::TILE_ELEMS + lane * warp::ITEMS;
    warp::LowCursor low;
    auto add_tile = [&](uint32_t t, uint32_t bits) {
      const uint32_t code = thread::low_code_for<D>(__reduce_or_sync(warp::FULL_MASK, bits));
      const uint32_t bits_at = code << (2 * (t % 16));  // a constant index each: codes stays in registers
      if (t < 16) low.codes[0] |= bits_at;
      else if (t < 32) low.codes[1] |= bits_at;
      else if (t < 48) low.codes[2] |= bits_at;
      else low.codes[3] |= bits_at;
      low.at += format::low_tile_bytes(D, code, format::tile_valid_count(elems, t));
    };
    const uint4* at = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(args.in) + lane_first * EB);
    uint32_t t = 0;
    for (; t + WIDTH_BATCH <= full; t += WIDTH_BATCH) {
      uint4 v[WIDTH_BATCH][VECS];
#pragma unroll
      for (uint32_t b = 0; b < WIDTH_BATCH; ++b)
#pragma unroll
        for (uint32_t k = 0; k < VECS; ++k) v[b][k] = __ldg(at + (t + b) * (TILE_BYTES / 16) + k);
#pragma unroll
      for (uint32_t b = 0; b < WIDTH_BATCH; ++b) {
        uint32_t w[4 * VECS];
#pragma unroll
        for (uint32_t k = 0; k < VECS; ++k) w[4 * k] = v[b][k].x, w[4 * k + 1] = v[b][k].y, w[4 * k + 2] = v[b][k].z,
                                            w[4 * k + 3] = v[b][k].w;
        uint32_t bits = 0;
        if (plain) {
#pragma unroll
          for (uint32_t k = 0; k < 4 * VECS; ++k) bits |= w[k] & LOW_MASK;
        } else {
          uint32_t x[warp::ITEMS];
#pragma unroll
          for (uint32_t i = 0; i < warp::ITEMS; ++i) x[i] = EB == 4 ? w[i] : (w[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
          thread::pre_items<D>(args.pre_op, x);
#pragma unroll
          for (uint32_t i = 0; i < warp::ITEMS; ++i) bits |= FB::low(x[i]);
        }
        add_tile(t + b, bits);
      }
    }
    for (; t < tiles; ++t) {  // the rest: partial tiles, an unaligned input
      uint32_t x[warp::ITEMS];
      const uint32_t cnt = format::lane_valid_count(elems, t, lane);
      warp::load_items_any<D>(args.in, vector, lane_first + uint64_t(t) * format::TILE_ELEMS, cnt, x);
      thread::pre_items<D>(args.pre_op, x);
      uint32_t bits = 0;
#pragma unroll
      for (int i = 0; i < warp::ITEMS; ++i)
        if (uint32_t(i) < cnt) bits |= FB::low(x[i]);
      add_tile(t, bits);
    }
    if (lane == 0) {
      warp::store_low_codes(args.out + L.widths_offset, L.chunk_first_tile(c), tiles, low.codes);
      args.low_state[c] = (c ? FLAG_AGGREGATE : FLAG_INCLUSIVE) | low.at;
    }
    warp_total += low.at;
  }
  if (lane == 0 && warp_total) atomicAdd(args.low_total, static_cast<unsigned long long>(warp_total));
}

template <DType D, class Code>
__global__ void __launch_bounds__(CodecPolicy::THREADS, CodecPolicy::ENCODE_MIN_BLOCKS<D>)
    compress_kernel(CompressArgs args) {
  auto& smem = *reinterpret_cast<EncodeSmem<D, Code, CodecPolicy::WARPS>*>(zipcomm::detail::dynamic_smem_bytes);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadCodeTable(smem.table, cta);
  warp::ArrayTileSource<D> source(args.in, args.pre_op);
  encode_chunks<D, Code>(args, smem.warp[threadIdx.x / 32], smem.table, source);
}

/// Decompress's Code for a stream of either code (its header says which).
struct AnyCode {};

struct DecompressArgs {
  const uint8_t* in;
  uint64_t in_bytes;
  void* out;
  uint64_t out_capacity;
  Status* status;
  unsigned long long* chunk_counter;  // zeroed before launch; warps take chunks from it (balances uneven chunks)
};

/// The body of every kernel that reads a stream: checks the header (exact: n must equal `n_or_capacity`;
/// else n <= it; then check(view) -> Status for what else the caller needs), then every warp runs
/// chunk_op(c, chunk, bytes, view) -> Status on its chunks (bytes = 0 for a chunk whose table entries are
/// inconsistent: chunk_op must read nothing of it). Returns whether the header passed (the same in every thread).
/// The first round of chunks goes round robin over the blocks (chunk c to block c % grid): a call of fewer chunks
/// than warps then keeps every SM busy, where from the counter its chunks crowd into the blocks that start first
/// (bf16 decode at 16 MiB 476 -> 614 GB/s, 32 MiB 571 -> 673, 2-8 MiB +8%; H100). Later rounds come from the
/// counter, which balances uneven chunks. So every warp of the grid must call it, the counter zeroed at launch.
template <DType D, class Code, class Check, class ChunkOp>
ZIPCOMM_DEVICE bool decode_chunks(const uint8_t* in, uint64_t in_bytes, uint64_t n_or_capacity, bool exact,
                                  Status* status, unsigned long long* counter, Check& check, ChunkOp& chunk_op) {
  format::StreamView view;
  Status hs = view.open(in, in_bytes, D, Code::ID);
  if (hs == Status::ok && exact && view.layout.n != n_or_capacity) hs = Status::size_mismatch;
  if (hs == Status::ok && !exact && view.layout.n > n_or_capacity) hs = Status::buffer_too_small;
  if (hs == Status::ok) hs = check(view);
  if (hs != Status::ok) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report(status, hs);
    return false;
  }
  const uint64_t first_round = uint64_t(gridDim.x) * (blockDim.x / 32);
  // Through a shuffle, as the counter's chunks come: computed in place, decode + reduce spills at 64 registers.
  uint64_t c = __shfl_sync(warp::FULL_MASK, blockIdx.x + uint64_t(gridDim.x) * (threadIdx.x / 32), 0);
  for (; c < view.layout.num_chunks; c = first_round + next_chunk(counter)) {
    const uint8_t* chunk;
    uint32_t bytes;
    const uint8_t* low;
    uint32_t low_bytes;
    const bool range_ok = view.chunk(D, c, chunk, bytes) && view.chunk_low(D, c, low, low_bytes);
    Status s = chunk_op(c, chunk, bytes, view);
    if (!range_ok) s = Status::corrupt_stream;
    if (warp::lane_id() == 0) report(status, s);
  }
  return true;
}

/// No check beyond the header.
struct HeaderOnly {
  ZIPCOMM_DEVICE Status operator()(const format::StreamView&) const { return Status::ok; }
};

/// Decompress's body in one code, its table loaded.
template <DType D, class Code>
ZIPCOMM_DEVICE void decompress_chunks(const DecompressArgs& args, const typename warp::TablesOf<Code>::Decode& table) {
  warp::WarpChunkDecoder<D, Code> dec(table);
  const bool vector = warp::aligned16(args.out);
  auto chunk_op = [&](uint64_t c, const uint8_t* chunk, uint32_t bytes, const format::StreamView& view) {
    const uint64_t first_tile = view.layout.chunk_first_tile(c);
    constexpr uint32_t TILE_BYTES = format::TILE_ELEMS * format::Traits<D>::ELEM_BYTES;
    const uint64_t lane_first = first_tile * format::TILE_ELEMS + warp::lane_id() * warp::ITEMS;
    uint8_t* lane_out = static_cast<uint8_t*>(args.out) + lane_first * format::Traits<D>::ELEM_BYTES;
    auto sink = [&](uint32_t t, const uint32_t (&x)[warp::ITEMS], uint32_t cnt) {
      warp::store_items_any<D>(lane_out + t * TILE_BYTES, vector, 0, cnt, x);
    };
    return dec.Decode(chunk, bytes, view.layout.chunk_elems(c), first_tile, view.chunk_planes(D, c),
                      view.check(c), sink);
  };
  HeaderOnly check;
  decode_chunks<D, Code>(args.in, args.in_bytes, args.out_capacity, false, args.status, args.chunk_counter, check,
                         chunk_op);
}

template <DType D, class Code>
__global__ void __launch_bounds__(DecodePolicy::THREADS, 2) decompress_kernel(DecompressArgs args) {
  auto& table = *reinterpret_cast<typename warp::TablesOf<Code>::Decode*>(zipcomm::detail::dynamic_smem_bytes);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadCodeTable(table, cta);
  decompress_chunks<D, Code>(args, table);
}

/// Decompress of a stream in either code, read from its header on the device: both decoders in one kernel, the
/// pair code's table loaded for a pair stream only (a stream of no known code is refused by the pair decoder's
/// header check). The host checked in_bytes >= the header's 64 bytes.
template <DType D>
__global__ void __launch_bounds__(DecodePolicy::THREADS, 2) decompress_any_code_kernel(DecompressArgs args) {
  auto cta = cooperative_groups::this_thread_block();
  const uint8_t code = __ldg(args.in + offsetof(format::Header, code));
  if (code == uint8_t(CodeId::fixed)) {
    const auto& none = *reinterpret_cast<const warp::NoTable*>(zipcomm::detail::dynamic_smem_bytes);
    decompress_chunks<D, thread::FixedCode>(args, none);
  } else {
    auto& table = *reinterpret_cast<warp::PairDecodeTable*>(zipcomm::detail::dynamic_smem_bytes);
    warp::LoadPairTable(table, cta);
    decompress_chunks<D, thread::PairCode>(args, table);
  }
}

/// The current device's SM count.
inline cudaError_t sm_count(int& sms) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  return e == cudaSuccess ? cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) : e;
}

/// Grid of a persistent kernel: as many blocks as fit on the GPU at once, no more than the work needs. `sms`: the
/// device's SM count when the caller has it (0: asked here).
template <class Kernel>
inline cudaError_t persistent_grid(Kernel kernel, int threads, size_t smem, uint64_t work_items, int& grid,
                                   int sms = 0) {
  int per_sm = 0;
  cudaError_t e = sms > 0 ? cudaSuccess : sm_count(sms);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (e != cudaSuccess) return e;
  const uint64_t warps = uint64_t(threads / 32);
  uint64_t want = (work_items + warps - 1) / warps;
  uint64_t cap = uint64_t(sms) * uint64_t(per_sm > 0 ? per_sm : 1);
  grid = int(want < cap ? (want > 0 ? want : 1) : cap);
  return cudaSuccess;
}

template <class Kernel, class Args>
inline cudaError_t launch_persistent(Kernel kernel, int threads, size_t smem, uint64_t work_items, cudaStream_t stream,
                                     const Args& args, int sms = 0) {
  int grid = 1;
  cudaError_t e = persistent_grid(kernel, threads, smem, work_items, grid, sms);
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, smem, stream>>>(args);
  return cudaGetLastError();
}

// A template so a header-defined kernel has one definition across translation units.
template <int = 0>
__global__ void set_status_kernel(Status* status, Status value) {
  *status = value;
}

/// An argument error found on the host: written to d_status in stream order, and cudaErrorInvalidValue.
inline cudaError_t fail_in_stream(Status* d_status, Status s, cudaStream_t stream) {
  set_status_kernel<><<<1, 1, 0, stream>>>(d_status, s);
  cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : cudaErrorInvalidValue;
}

/// Temp storage of a stream-writing launch: the chunk counter and the look-back states; with a width pass (fp16,
/// fp32 at minimal width) the low parts' total and states again after them.
inline size_t compress_temp_bytes(uint64_t num_chunks) { return 16 + 8 * num_chunks; }
constexpr uint64_t MAX_ELEMENTS = uint64_t(1) << 50;  // format::validate_header's bound

/// Checks and prepares the arguments every stream-writing launch shares; Status::ok to go on.
inline Status check_compress_args(DType d, void* d_temp, size_t temp_bytes, uint64_t n, uint32_t chunk_log2,
                                  const void* d_out, uint64_t out_capacity) {
  if (!format::chunk_log2_valid(chunk_log2) || n > MAX_ELEMENTS ||
      temp_bytes < compress_temp_bytes(format::layout_for(d, n, chunk_log2).num_chunks) || !d_out ||
      reinterpret_cast<uintptr_t>(d_out) % 16 || reinterpret_cast<uintptr_t>(d_temp) % 8)
    return Status::invalid_argument;
  if (out_capacity < format::max_compressed_bytes(d, n, chunk_log2)) return Status::buffer_too_small;
  return Status::ok;
}

template <DType D, class Code>
cudaError_t launch_compress(void* d_temp, size_t& temp_bytes, const void* d_in, uint64_t n, void* d_out,
                            uint64_t out_capacity, uint64_t* d_out_bytes, Status* d_status, cudaStream_t stream,
                            const ReduceOp& pre_op = ReduceOp::sum(), uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  chunk_log2 = format::resolve_chunk_log2(chunk_log2, n);
  // an invalid chunk size is refused below; the size query still answers
  const format::Layout L =
      format::layout_for(D, n, format::chunk_log2_valid(chunk_log2) ? chunk_log2 : format::MAX_CHUNK_LOG2);
  const size_t need = (format::has_low(D) ? 2 : 1) * compress_temp_bytes(L.num_chunks);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (!d_status || !d_out_bytes) return cudaErrorInvalidValue;
  Status host_check = check_compress_args(D, d_temp, temp_bytes, n, chunk_log2, d_out, out_capacity);
  // fp8 never gets here with a pre-op other than sum: compress_contribution refuses fp8 at compile time.
  if (host_check == Status::ok && ((!d_in && n) || !reduce_op_valid(pre_op) || temp_bytes < need))
    host_check = Status::invalid_argument;
  if (host_check != Status::ok) return fail_in_stream(d_status, host_check, stream);
  cudaError_t e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);  // Status::ok
  if (e != cudaSuccess) return e;
  CompressArgs args{d_in,
                    n,
                    chunk_log2,
                    static_cast<uint8_t*>(d_out),
                    out_capacity,
                    d_out_bytes,
                    d_status,
                    reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(d_temp) + 16),
                    static_cast<unsigned long long*>(d_temp),
                    pre_op,
                    format::LowWidths::minimal};
  int sms = 0;
  if ((e = sm_count(sms)) != cudaSuccess) return e;
  if constexpr (format::has_low(D)) {  // only fp16 and fp32 have width codes to pick first
    // The low parts' offsets come from the encoder's look-back: a CUB scan between the passes cost two launches
    // (fp32 encode at 16 MiB 267-270 -> 307-316 GB/s, fp16 at 4 MiB 73-74 -> 90-93; H100).
    uint8_t* width_temp = static_cast<uint8_t*>(d_temp) + compress_temp_bytes(L.num_chunks);
    args.low_total = reinterpret_cast<unsigned long long*>(width_temp);
    args.low_state = reinterpret_cast<uint64_t*>(width_temp + 16);
    if (L.num_chunks) {
      e = launch_persistent(low_widths_kernel<D>, CodecPolicy::THREADS, 0, L.num_chunks, stream, args, sms);
      if (e != cudaSuccess) return e;
    }
  }
  const size_t smem = sizeof(EncodeSmem<D, Code, CodecPolicy::WARPS>);
  const int threads = L.num_chunks <= uint64_t(sms) * CodecPolicy::WARPS ? CodecPolicy::SMALL_CALL_THREADS
                                                                          : CodecPolicy::THREADS;
  return launch_persistent(compress_kernel<D, Code>, threads, smem, L.num_chunks, stream, args, sms);
}

/// Checks the arguments every stream-reading launch shares; Status::ok to go on.
inline Status check_decompress_args(const void* d_in, uint64_t in_bytes, const void* d_temp, size_t temp_bytes) {
  if (!d_in || reinterpret_cast<uintptr_t>(d_in) % 16 || temp_bytes < 16 || reinterpret_cast<uintptr_t>(d_temp) % 8)
    return Status::invalid_argument;
  if (in_bytes < format::HEADER_BYTES) return Status::corrupt_stream;
  return Status::ok;
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
  Status host_check = check_decompress_args(d_in, in_bytes, d_temp, temp_bytes);
  if (host_check == Status::ok && !d_out && out_capacity_elems) host_check = Status::invalid_argument;
  if (host_check != Status::ok) return fail_in_stream(d_status, host_check, stream);
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e != cudaSuccess) return e;
  DecompressArgs args{static_cast<const uint8_t*>(d_in), in_bytes,  d_out,
                      out_capacity_elems,                d_status, static_cast<unsigned long long*>(d_temp)};
  // The element count lives in the header on the device: size the grid for the whole GPU.
  if constexpr (std::is_same<Code, AnyCode>::value)
    return launch_persistent(decompress_any_code_kernel<D>, DecodePolicy::THREADS, sizeof(warp::PairDecodeTable),
                             uint64_t(1) << 40, stream, args);
  else
    return launch_persistent(decompress_kernel<D, Code>, DecodePolicy::THREADS,
                             sizeof(typename warp::TablesOf<Code>::Decode), uint64_t(1) << 40, stream, args);
}

}  // namespace detail
}  // namespace device
}  // namespace zipcomm
