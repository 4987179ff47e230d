// Shared helpers of the GPU tests: checked CUDA results, device buffers, uploads; test data (gpu_test_data.hpp).
#pragma once

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <type_traits>

#include "gpu_test_data.hpp"

#define CUDA_OK(...)                                            \
  do {                                                          \
    cudaError_t e_ = (__VA_ARGS__);                             \
    INFO(#__VA_ARGS__ << " -> " << cudaGetErrorString(e_));     \
    REQUIRE(e_ == cudaSuccess);                                 \
  } while (0)

namespace gpu_test {

/// Element types as Catch2 test types (TEMPLATE_TEST_CASE): TestType::value is the DType.
template <zipcomm::DType D>
using DTypeCase = std::integral_constant<zipcomm::DType, D>;
using Bf16 = DTypeCase<zipcomm::DType::bf16>;
using Fp16 = DTypeCase<zipcomm::DType::fp16>;
using Fp32 = DTypeCase<zipcomm::DType::fp32>;
using Fp8E4M3 = DTypeCase<zipcomm::DType::fp8_e4m3>;
using Fp8E5M2 = DTypeCase<zipcomm::DType::fp8_e5m2>;

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { CUDA_OK(cudaMalloc(&ptr, n ? n : 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T = uint8_t>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(ptr) + byte_offset);
  }
};

/// Copies host bytes to device memory and returns once they are there: a cudaMemcpy from pageable memory may
/// return before its DMA lands, and the links and rings run on non-blocking streams, which do not wait for the
/// legacy stream.
inline void upload(void* dst, const void* src, size_t bytes) {
  CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace gpu_test
