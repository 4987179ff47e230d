// Shared helpers of the GPU tests: checked CUDA calls, device buffers, test data.
#pragma once

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <zipcomm/format.hpp>

#define CUDA_OK(...)                                            \
  do {                                                          \
    cudaError_t e_ = (__VA_ARGS__);                             \
    INFO(#__VA_ARGS__ << " -> " << cudaGetErrorString(e_));     \
    REQUIRE(e_ == cudaSuccess);                                 \
  } while (0)

namespace gpu_test {

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

inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("ZIPCOMM_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

inline uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline uint16_t to_fp16(float x) {  // round-to-nearest-even conversion, enough for test data
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  float a = std::fabs(x);
  if (!(a < 65520.0f)) return uint16_t(sign | 0x7C00u);
  if (a < 6.103515625e-05f) return uint16_t(sign | uint32_t(std::nearbyint(a / 5.9604644775390625e-08f)));
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = uint32_t(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  uint32_t exp = uint32_t(e - 1 + 15);
  if (mant == 1024) mant = 0, ++exp;
  return uint16_t(sign | (exp << 10) | mant);
}

/// n elements of N(0, sigma) in dtype d, as raw little-endian bytes.
inline std::vector<uint8_t> gaussian_bytes(zipcomm::DType d, uint64_t n, float sigma, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<uint8_t> out(n * zipcomm::format::elem_bytes(d));
  for (uint64_t i = 0; i < n; ++i) {
    float x = nd(rng);
    if (d == zipcomm::DType::fp32) {
      std::memcpy(&out[4 * i], &x, 4);
    } else {
      uint16_t h = d == zipcomm::DType::bf16 ? to_bf16(x) : to_fp16(x * 1024.0f);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace gpu_test
