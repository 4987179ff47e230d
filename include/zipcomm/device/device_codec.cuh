// Device-wide, stream-ordered compress/decompress entry points (CUB style: a first call with
// d_temp_storage == nullptr only reports temp_storage_bytes). They allocate nothing, never synchronize the
// host, and write the compressed size and a Status to device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "detail/codec_kernels.cuh"

namespace zipcomm {
namespace device {

/// Compresses n elements of dtype D (raw bits at d_in, any alignment) into d_out (16-byte aligned, capacity
/// out_capacity >= format::max_compressed_bytes(D, n, chunk_log2)) in chunks of 2^chunk_log2 elements (12..14;
/// CHUNK_LOG2_AUTO: format::default_chunk_log2(n), the same bytes as host::compress). Writes the stream size to
/// *d_out_bytes and the outcome to *d_status (both device memory). Returns a launch error, or
/// cudaErrorInvalidValue for bad arguments detectable on the host (temp_storage_bytes depends on n and chunk_log2).
template <DType D, class Code = thread::PairCode>
cudaError_t compress(void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in, uint64_t n, void* d_out,
                     uint64_t out_capacity, uint64_t* d_out_bytes, Status* d_status, cudaStream_t stream = 0,
                     uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  return detail::launch_compress<D, Code>(d_temp_storage, temp_storage_bytes, d_in, n, d_out, out_capacity,
                                          d_out_bytes, d_status, stream, ReduceOp::sum(), chunk_log2);
}

/// The Code of decompress for a stream of either code: the header, read on the device, says which (one kernel
/// holds both decoders; naming the code runs the smaller kernel of that code alone).
using AnyCode = detail::AnyCode;

/// Decompresses the stream at d_in (16-byte aligned, in_bytes readable) into d_out (any alignment, room for
/// out_capacity_elems elements). The element count comes from the stream header, on the device; a stream
/// of another dtype or code (unless Code is AnyCode), or one that does not fit, gives an error Status. Nothing
/// is written past out_capacity_elems elements, and nothing is read past in_bytes.
template <DType D, class Code = thread::PairCode>
cudaError_t decompress(void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in, uint64_t in_bytes,
                       void* d_out, uint64_t out_capacity_elems, Status* d_status, cudaStream_t stream = 0) {
  return detail::launch_decompress<D, Code>(d_temp_storage, temp_storage_bytes, d_in, in_bytes, d_out,
                                            out_capacity_elems, d_status, stream);
}

}  // namespace device
}  // namespace zipcomm
