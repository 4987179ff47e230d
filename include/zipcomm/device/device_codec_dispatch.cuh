// Run-time dispatch of the device-wide codec over (dtype, code), for tools that learn the dtype at run time.
// Kept apart from device_codec.cuh because including it compiles the kernels of all five dtypes in both codes.
#pragma once

#include "device_codec.cuh"

namespace zipcomm {
namespace device {

/// Run-time dispatch over (dtype, code); same arguments as the templates in device_codec.cuh.
inline cudaError_t compress(DType dtype, CodeId code, void* d_temp_storage, size_t& temp_storage_bytes,
                            const void* d_in, uint64_t n, void* d_out, uint64_t out_capacity, uint64_t* d_out_bytes,
                            Status* d_status, cudaStream_t stream = 0,
                            uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  return thread::visit_codec(dtype, code, cudaErrorInvalidValue, [&](auto dt, auto c) {
    return compress<decltype(dt)::value, decltype(c)>(d_temp_storage, temp_storage_bytes, d_in, n, d_out,
                                                      out_capacity, d_out_bytes, d_status, stream, chunk_log2);
  });
}

inline cudaError_t decompress(DType dtype, CodeId code, void* d_temp_storage, size_t& temp_storage_bytes,
                              const void* d_in, uint64_t in_bytes, void* d_out, uint64_t out_capacity_elems,
                              Status* d_status, cudaStream_t stream = 0) {
  return thread::visit_codec(dtype, code, cudaErrorInvalidValue, [&](auto dt, auto c) {
    return decompress<decltype(dt)::value, decltype(c)>(d_temp_storage, temp_storage_bytes, d_in, in_bytes, d_out,
                                                        out_capacity_elems, d_status, stream);
  });
}

/// Run-time dispatch over the dtype for a stream of either code (device::AnyCode).
inline cudaError_t decompress(DType dtype, void* d_temp_storage, size_t& temp_storage_bytes, const void* d_in,
                              uint64_t in_bytes, void* d_out, uint64_t out_capacity_elems, Status* d_status,
                              cudaStream_t stream = 0) {
  return visit_dtype(dtype, cudaErrorInvalidValue, [&](auto dt) {
    return decompress<decltype(dt)::value, AnyCode>(d_temp_storage, temp_storage_bytes, d_in, in_bytes, d_out,
                                                    out_capacity_elems, d_status, stream);
  });
}

}  // namespace device
}  // namespace zipcomm
