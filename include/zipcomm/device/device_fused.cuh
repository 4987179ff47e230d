// Device-wide, stream-ordered fused steps of a compressed collective (CUB style, like device_codec.cuh: a
// first call with d_temp_storage == nullptr reports temp_storage_bytes; nothing is allocated, the host is
// never synchronized, the outcome is a Status in device memory).
//
//   compress_contribution       stream = encode(pre(local))                  a rank's first send
//   decompress_reduce           out = op(decode(in), pre(local))             last reduce-scatter hop
//   decompress_reduce_compress  stream = encode(op(decode(in), pre(local)))  a reduce-scatter hop
//   decompress_forward          out = decode(in), fwd = in byte for byte     an all-gather hop
//
// The incoming stream (16-byte aligned, in_bytes readable) must hold exactly n elements of D coded with
// Code: another count gives Status::size_mismatch, another dtype or code Status::bad_header. Element arrays
// may have any alignment; d_out may equal d_local. Numeric semantics: docs/REDUCE.md.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/reduce_op.hpp"
#include "detail/codec_kernels.cuh"
#include "detail/fused_kernels.cuh"

namespace zipcomm {
namespace device {

/// Compresses pre(d_in[i]) (avg: scaled by op.scale; the other ops: unchanged). Arguments as compress().
template <DType D, class Code = thread::PairCode>
cudaError_t compress_contribution(void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in, uint64_t n,
                                  const ReduceOp& op, void* d_out, uint64_t out_capacity, uint64_t* d_out_bytes,
                                  Status* d_status, cudaStream_t stream = 0,
                                  uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no fused steps");
  return detail::launch_compress<D, Code>(d_temp_storage, temp_storage_bytes, d_in, n, d_out, out_capacity,
                                          d_out_bytes, d_status, stream, op, chunk_log2);
}

/// d_out[i] = combine(decode(d_in)[i], pre(d_local[i])) for i < n.
template <DType D, class Code = thread::PairCode>
cudaError_t decompress_reduce(void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in, uint64_t in_bytes,
                              const void* d_local, void* d_out, uint64_t n, const ReduceOp& op, Status* d_status,
                              cudaStream_t stream = 0) {
  return detail::launch_decompress_reduce<D, Code>(d_temp_storage, temp_storage_bytes, d_in, in_bytes, d_local, d_out,
                                                   n, op, d_status, stream);
}

/// Writes encode(combine(decode(d_in)[i], pre(d_local[i]))) to d_out (16-byte aligned, out_capacity >=
/// format::max_compressed_bytes(D, n, the incoming stream's chunk_log2)) and its size to *d_out_bytes: a stream
/// with the incoming one's chunk size. With an error status the stream and the size are unspecified (0 when
/// the incoming header was rejected).
template <DType D, class Code = thread::PairCode>
cudaError_t decompress_reduce_compress(void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in,
                                       uint64_t in_bytes, const void* d_local, uint64_t n, const ReduceOp& op,
                                       void* d_out, uint64_t out_capacity, uint64_t* d_out_bytes, Status* d_status,
                                       cudaStream_t stream = 0) {
  return detail::launch_decompress_reduce_compress<D, Code>(d_temp_storage, temp_storage_bytes, d_in, in_bytes,
                                                            d_local, n, op, d_out, out_capacity, d_out_bytes,
                                                            d_status, stream);
}

/// d_out[0, n) = decode(d_in), and the stream's bytes (its header's total_bytes) copied to d_fwd (16-byte
/// aligned, fwd_capacity bytes; too small gives Status::buffer_too_small), each chunk by the warp decoding it.
template <DType D, class Code = thread::PairCode>
cudaError_t decompress_forward(void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in, uint64_t in_bytes,
                               void* d_out, uint64_t n, void* d_fwd, uint64_t fwd_capacity, Status* d_status,
                               cudaStream_t stream = 0) {
  return detail::launch_decompress_forward<D, Code>(d_temp_storage, temp_storage_bytes, d_in, in_bytes, d_out, n,
                                                    d_fwd, fwd_capacity, d_status, stream);
}

}  // namespace device
}  // namespace zipcomm
