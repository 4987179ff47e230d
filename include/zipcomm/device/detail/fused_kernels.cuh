// Kernels behind the device-wide fused steps (device/device_fused.cuh). They reuse the codec's persistent
// chunk loops (codec_kernels.cuh): decode_chunks for the steps that read a stream, encode_chunks (with its
// look-back) for the step that writes one.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"
#include "../../detail/dynamic_smem.cuh"
#include "../../format.hpp"
#include "../../thread/reduce_op.hpp"
#include "../../warp/lane_io.cuh"
#include "../../warp/warp_chunk_fused.cuh"
#include "codec_kernels.cuh"

namespace zipcomm {
namespace device {
namespace detail {

/// decode + reduce + encode: 69 KB of tables per block and 8 KB of lane words per warp: one block of 16 warps
/// per SM (two blocks of 8 would need the tables twice).
struct FusedEncodePolicy {
  static constexpr int WARPS = 16;
  static constexpr int THREADS = WARPS * 32;
};

template <DType D, class Code, int WARPS>
struct FusedEncodeSmem {
  typename warp::TablesOf<Code>::Both tables;
  typename warp::WarpChunkDecodeReduceEncode<D, Code>::TempStorage warp[WARPS];
};

struct FusedArgs {
  const uint8_t* in;
  uint64_t in_bytes;
  const void* local;
  void* out;  // elements (decode + reduce, decode + forward)
  uint64_t n;
  ReduceOp op;
  uint8_t* fwd;  // decode + forward: where the incoming stream goes on
  uint64_t fwd_capacity;
  Status* status;
  unsigned long long* chunk_counter;
};

template <DType D, class Code>
__global__ void __launch_bounds__(DecodePolicy::THREADS, 2) decompress_reduce_kernel(FusedArgs args) {
  auto& table = *reinterpret_cast<typename warp::TablesOf<Code>::Decode*>(zipcomm::detail::dynamic_smem_bytes);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadCodeTable(table, cta);
  warp::WarpChunkDecodeReduce<D, Code> fused(table);
  auto chunk_op = [&](uint64_t c, const uint8_t* chunk, uint32_t bytes, const format::StreamView& view) {
    return fused.DecodeReduce(chunk, bytes, view.layout.chunk_elems(c), view.layout.chunk_first_tile(c),
                              view.chunk_planes(D, c), view.check(c), args.local, args.out, args.op);
  };
  HeaderOnly check;
  decode_chunks<D, Code>(args.in, args.in_bytes, args.n, true, args.status, args.chunk_counter, check, chunk_op);
}

/// The part of a forwarded stream that is neither raw bits nor chunk streams, spread over the chunks' warps:
/// chunk c's table entries and check, and for chunk 0 the header and the alignment gaps between sections.
template <DType D>
ZIPCOMM_DEVICE void forward_stream_frame(const uint8_t* in, uint8_t* fwd, const format::Layout& L, uint64_t c) {
  const uint32_t lane = warp::lane_id();
  if (lane == 0) {
    reinterpret_cast<uint64_t*>(fwd + L.table_offset)[c] = reinterpret_cast<const uint64_t*>(in + L.table_offset)[c];
    if (format::has_low(D))
      reinterpret_cast<uint64_t*>(fwd + L.low_table_offset)[c] =
          reinterpret_cast<const uint64_t*>(in + L.low_table_offset)[c];
    reinterpret_cast<uint32_t*>(fwd + L.check_offset)[c] = reinterpret_cast<const uint32_t*>(in + L.check_offset)[c];
  }
  if (c != 0) return;
  for (uint64_t b = lane; b < L.plane0_offset; b += 32) fwd[b] = in[b];
  format::for_section_gaps(L, lane, 32, [&](uint64_t b) { fwd[b] = in[b]; });
}

template <DType D, class Code>
__global__ void __launch_bounds__(DecodePolicy::THREADS, 2) decompress_forward_kernel(FusedArgs args) {
  auto& table = *reinterpret_cast<typename warp::TablesOf<Code>::Decode*>(zipcomm::detail::dynamic_smem_bytes);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadCodeTable(table, cta);
  warp::WarpChunkDecodeForward<D, Code> fused(table);
  auto check = [&](const format::StreamView& view) {
    return view.total_bytes() > args.fwd_capacity ? Status::buffer_too_small : Status::ok;
  };
  auto chunk_op = [&](uint64_t c, const uint8_t* chunk, uint32_t bytes, const format::StreamView& view) {
    const format::Layout& L = view.layout;
    forward_stream_frame<D>(args.in, args.fwd, L, c);
    uint8_t* fwd_chunk = bytes ? args.fwd + (chunk - args.in) : nullptr;
    const format::ConstPlanes planes = view.chunk_planes(D, c);
    return fused.DecodeForward(chunk, bytes, L.chunk_elems(c), L.chunk_first_tile(c), planes,
                               view.check(c), args.out, fwd_chunk,
                               warp::Planes{args.fwd + L.plane0_offset, args.fwd + L.widths_offset,
                                            args.fwd + (planes.low - args.in), false});
  };
  const bool ok =
      decode_chunks<D, Code>(args.in, args.in_bytes, args.n, true, args.status, args.chunk_counter, check, chunk_op);
  if (ok && args.n == 0 && blockIdx.x == 0 && threadIdx.x < 32)  // no chunk: the header travels alone
    for (uint64_t b = threadIdx.x; b < format::layout_for(D, 0, format::MAX_CHUNK_LOG2).exp_offset; b += 32)
      args.fwd[b] = args.in[b];
}

/// Chunk c of the incoming stream, decoded and reduced tile by tile, for encode_chunks.
template <DType D, class Code>
struct StreamReducedSource {
  warp::ReducedTileSource<D, Code> tiles;
  const format::StreamView& view;
  ZIPCOMM_DEVICE void begin(uint64_t c, uint32_t elems, uint64_t first_tile) {
    const uint8_t* chunk;
    const uint8_t* low;
    uint32_t bytes, low_bytes;
    view.chunk(D, c, chunk, bytes);  // bytes = 0 when inconsistent: the decoder reports it, reading nothing
    if (!view.chunk_low(D, c, low, low_bytes)) bytes = 0;
    tiles.set_chunk(chunk, bytes, elems, first_tile, view.chunk_planes(D, c), view.check(c));
  }
  ZIPCOMM_DEVICE void operator()(uint32_t t, uint32_t (&x)[warp::ITEMS]) { tiles(t, x); }
  ZIPCOMM_DEVICE Status status() const { return tiles.status(); }
};

template <DType D, class Code>
__global__ void __launch_bounds__(FusedEncodePolicy::THREADS)
    decompress_reduce_compress_kernel(FusedArgs in_args, CompressArgs out_args) {
  auto& smem =
      *reinterpret_cast<FusedEncodeSmem<D, Code, FusedEncodePolicy::WARPS>*>(zipcomm::detail::dynamic_smem_bytes);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadCodeTable(smem.tables, cta);
  format::StreamView view;
  Status hs = view.open(in_args.in, in_args.in_bytes, D, Code::ID);
  if (hs == Status::ok && view.layout.n != in_args.n) hs = Status::size_mismatch;
  // The new stream has the incoming one's chunks (a warp decodes a chunk and encodes it again).
  CompressArgs args = out_args;
  args.chunk_log2 = view.layout.chunk_log2;
  if (hs == Status::ok && args.out_capacity < format::max_compressed_bytes(D, args.n, args.chunk_log2))
    hs = Status::buffer_too_small;
  if (hs != Status::ok) {  // the same in every thread: the whole grid returns
    if (blockIdx.x == 0 && threadIdx.x == 0) report(out_args.status, hs);
    return;
  }
  StreamReducedSource<D, Code> source{warp::ReducedTileSource<D, Code>(smem.tables.decode, in_args.local, in_args.op),
                                     view};
  encode_chunks<D, Code>(args, smem.warp[threadIdx.x / 32], smem.tables.encode, source);
}

template <DType D, class Code>
cudaError_t launch_decompress_reduce(void* d_temp, size_t& temp_bytes, const void* d_in, uint64_t in_bytes,
                                     const void* d_local, void* d_out, uint64_t n, const ReduceOp& op,
                                     Status* d_status, cudaStream_t stream) {
  constexpr size_t need = 16;  // the chunk counter
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (!d_status) return cudaErrorInvalidValue;
  Status host_check = check_decompress_args(d_in, in_bytes, d_temp, temp_bytes);
  if (host_check == Status::ok && ((n && (!d_local || !d_out)) || !reduce_op_valid(op) || n > MAX_ELEMENTS))
    host_check = Status::invalid_argument;
  if (host_check != Status::ok) return fail_in_stream(d_status, host_check, stream);
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e != cudaSuccess) return e;
  FusedArgs args{static_cast<const uint8_t*>(d_in), in_bytes, d_local, d_out, n, op, nullptr, 0, d_status,
                 static_cast<unsigned long long*>(d_temp)};
  const size_t smem = sizeof(typename warp::TablesOf<Code>::Decode);
  return launch_persistent(decompress_reduce_kernel<D, Code>, DecodePolicy::THREADS, smem, format::most_chunks(n),
                           stream, args);
}

template <DType D, class Code>
cudaError_t launch_decompress_forward(void* d_temp, size_t& temp_bytes, const void* d_in, uint64_t in_bytes,
                                      void* d_out, uint64_t n, void* d_fwd, uint64_t fwd_capacity, Status* d_status,
                                      cudaStream_t stream) {
  constexpr size_t need = 16;
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (!d_status) return cudaErrorInvalidValue;
  Status host_check = check_decompress_args(d_in, in_bytes, d_temp, temp_bytes);
  if (host_check == Status::ok &&
      ((n && !d_out) || !d_fwd || reinterpret_cast<uintptr_t>(d_fwd) % 16 || n > MAX_ELEMENTS))
    host_check = Status::invalid_argument;
  if (host_check != Status::ok) return fail_in_stream(d_status, host_check, stream);
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e != cudaSuccess) return e;
  FusedArgs args{static_cast<const uint8_t*>(d_in), in_bytes, nullptr, d_out, n, ReduceOp::sum(),
                 static_cast<uint8_t*>(d_fwd), fwd_capacity, d_status, static_cast<unsigned long long*>(d_temp)};
  const size_t smem = sizeof(typename warp::TablesOf<Code>::Decode);
  return launch_persistent(decompress_forward_kernel<D, Code>, DecodePolicy::THREADS, smem, format::most_chunks(n),
                           stream, args);
}

template <DType D, class Code>
cudaError_t launch_decompress_reduce_compress(void* d_temp, size_t& temp_bytes, const void* d_in, uint64_t in_bytes,
                                              const void* d_local, uint64_t n, const ReduceOp& op, void* d_out,
                                              uint64_t out_capacity, uint64_t* d_out_bytes, Status* d_status,
                                              cudaStream_t stream) {
  // The stream's chunk size is read on the device: temp storage for the smallest chunks, the output capacity
  // checked here against the largest ones' bound and on the device against the stream's.
  const uint64_t chunks = format::most_chunks(n);
  const size_t need = compress_temp_bytes(chunks);
  if (d_temp == nullptr) {
    temp_bytes = need;
    return cudaSuccess;
  }
  if (!d_status || !d_out_bytes) return cudaErrorInvalidValue;
  Status host_check = check_decompress_args(d_in, in_bytes, d_temp, temp_bytes);
  if (host_check == Status::ok && temp_bytes < need) host_check = Status::invalid_argument;
  if (host_check == Status::ok)
    host_check = check_compress_args(D, d_temp, temp_bytes, n, format::MAX_CHUNK_LOG2, d_out, out_capacity);
  if (host_check == Status::ok && ((n && !d_local) || !reduce_op_valid(op))) host_check = Status::invalid_argument;
  if (host_check != Status::ok) return fail_in_stream(d_status, host_check, stream);
  cudaError_t e = cudaMemsetAsync(d_temp, 0, need, stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(d_out_bytes, 0, sizeof(uint64_t), stream);
  if (e != cudaSuccess) return e;
  FusedArgs in_args{static_cast<const uint8_t*>(d_in), in_bytes, d_local, nullptr, n, op, nullptr, 0, d_status,
                    nullptr};
  CompressArgs out_args{nullptr,
                        n,
                        format::MAX_CHUNK_LOG2,  // the incoming stream's, set on the device
                        static_cast<uint8_t*>(d_out),
                        out_capacity,
                        d_out_bytes,
                        d_status,
                        reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(d_temp) + 16),
                        static_cast<unsigned long long*>(d_temp),
                        ReduceOp::sum(),
                        format::LowWidths::full};
  const size_t smem = sizeof(FusedEncodeSmem<D, Code, FusedEncodePolicy::WARPS>);
  auto kernel = decompress_reduce_compress_kernel<D, Code>;
  int grid = 1;
  e = persistent_grid(kernel, FusedEncodePolicy::THREADS, smem, chunks, grid);
  if (e != cudaSuccess) return e;
  kernel<<<grid, FusedEncodePolicy::THREADS, smem, stream>>>(in_args, out_args);
  return cudaGetLastError();
}

}  // namespace detail
}  // namespace device
}  // namespace zipcomm
