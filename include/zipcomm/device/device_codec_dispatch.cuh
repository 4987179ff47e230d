// Run-time dispatch of the device-wide codec over (dtype, code), for tools that learn the dtype at run time.
// Kept apart from device_codec.cuh because including it compiles all six kernel pairs.
#pragma once

#include "device_codec.cuh"

namespace zipcomm {
namespace device {

/// Run-time dispatch over (dtype, code), for tools that learn the dtype at run time. 
inline cudaError_t compress(DType dtype, CodeId code, void* d_temp_storage, size_t& temp_storage_bytes,
                            const void* d_in, uint64_t n, void* d_out, uint64_t out_capacity, uint64_t* d_out_bytes,
                            Status* d_status, cudaStream_t stream = 0) {
#define ZIPCOMM_DISPATCH(DT, CI, CODE)                                                                     \
  if (dtype == DT && code == CI)                                                                           \
    return compress<DT, CODE>(d_temp_storage, temp_storage_bytes, d_in, n, d_out, out_capacity, d_out_bytes, \
                              d_status, stream);
  ZIPCOMM_DISPATCH(DType::bf16, CodeId::gaussian, thread::GaussianCode)
  ZIPCOMM_DISPATCH(DType::fp16, CodeId::gaussian, thread::GaussianCode)
  ZIPCOMM_DISPATCH(DType::fp32, CodeId::gaussian, thread::GaussianCode)
  ZIPCOMM_DISPATCH(DType::bf16, CodeId::window3, thread::Window3Code)
  ZIPCOMM_DISPATCH(DType::fp16, CodeId::window3, thread::Window3Code)
  ZIPCOMM_DISPATCH(DType::fp32, CodeId::window3, thread::Window3Code)
#undef ZIPCOMM_DISPATCH
  return cudaErrorInvalidValue;
}

inline cudaError_t decompress(DType dtype, CodeId code, void* d_temp_storage, size_t& temp_storage_bytes,
                              const void* d_in, uint64_t in_bytes, void* d_out, uint64_t out_capacity_elems,
                              Status* d_status, cudaStream_t stream = 0) {
#define ZIPCOMM_DISPATCH(DT, CI, CODE)                                                                  \
  if (dtype == DT && code == CI)                                                                        \
    return decompress<DT, CODE>(d_temp_storage, temp_storage_bytes, d_in, in_bytes, d_out, out_capacity_elems, \
                                d_status, stream);
  ZIPCOMM_DISPATCH(DType::bf16, CodeId::gaussian, thread::GaussianCode)
  ZIPCOMM_DISPATCH(DType::fp16, CodeId::gaussian, thread::GaussianCode)
  ZIPCOMM_DISPATCH(DType::fp32, CodeId::gaussian, thread::GaussianCode)
  ZIPCOMM_DISPATCH(DType::bf16, CodeId::window3, thread::Window3Code)
  ZIPCOMM_DISPATCH(DType::fp16, CodeId::window3, thread::Window3Code)
  ZIPCOMM_DISPATCH(DType::fp32, CodeId::window3, thread::Window3Code)
#undef ZIPCOMM_DISPATCH
  return cudaErrorInvalidValue;
}

}  // namespace device
}  // namespace zipcomm
