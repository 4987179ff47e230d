// Helpers shared by the zipcomm examples and benchmarks: checked CUDA calls, whole-file reads, median timing with
// CUDA events, and kernels that compare two device buffers. Not part of the library (include/zipcomm).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace examples {

/// Rank named in failure messages ("rank N ..."); negative (the default): none.
inline int& error_rank() {
  static int rank = -1;
  return rank;
}

/// Prints "[rank N ]FILE:LINE EXPR: WHAT" to stderr and exits 1.
[[noreturn]] inline void fail_call(const char* file, int line, const char* expr, const char* what) {
  if (error_rank() >= 0)
    std::fprintf(stderr, "rank %d %s:%d %s: %s\n", error_rank(), file, line, expr, what);  // one write per line
  else
    std::fprintf(stderr, "%s:%d %s: %s\n", file, line, expr, what);
  std::exit(1);
}

/// Function form of CK.
inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) fail_call(file, line, expr, cudaGetErrorString(e));
}

/// Exits 1 with the call, its place and the CUDA error unless the call returned cudaSuccess.
#define CK(...) ::examples::check_cuda((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)

/// The whole file; empty when it is missing or unreadable.
inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// Median time in ms of `reps` calls of f after `warmups` untimed ones, CUDA events on stream s around each call.
template <class F>
double median_ms(cudaStream_t s, int warmups, int reps, F&& f) {
  for (int i = 0; i < warmups; ++i) f();
  CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Adds to *diff the number of 16-byte words (n16 of them) in which a and b differ.
static __global__ void count_diff(const uint4* a, const uint4* b, uint64_t n16, unsigned long long* diff) {
  unsigned long long d = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    d += (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (d) atomicAdd(diff, d);
}

/// 16-byte words in which device buffers a and b (16-byte aligned) differ over their first `bytes` (a multiple of
/// 16), counted on the current device in d_count (one counter there); waits for the result.
inline unsigned long long count_diff_words(const void* a, const void* b, uint64_t bytes, unsigned long long* d_count,
                                           int blocks = 264, cudaStream_t s = 0) {
  CK(cudaMemsetAsync(d_count, 0, sizeof *d_count, s));
  count_diff<<<blocks, 256, 0, s>>>(static_cast<const uint4*>(a), static_cast<const uint4*>(b), bytes / 16, d_count);
  CK(cudaGetLastError());
  unsigned long long d = 1;
  CK(cudaMemcpyAsync(&d, d_count, sizeof d, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return d;
}

/// Elements of two 16-bit arrays that differ (out[0]) and the largest distance between them in ulps (out[1]; the
/// values' monotone integer order). Vector loads where 16-byte aligned (cudaMalloc'd buffers).
static __global__ void count_diff16(const uint16_t* a, const uint16_t* b, uint64_t n, unsigned long long* out) {
  unsigned long long cnt = 0, worst = 0;
  auto one = [&](uint32_t x, uint32_t y) {
    if (x == y) return;
    ++cnt;
    const long long kx = (x & 0x8000u) ? -(long long)(x & 0x7FFFu) : (long long)x;
    const long long ky = (y & 0x8000u) ? -(long long)(y & 0x7FFFu) : (long long)y;
    const unsigned long long d = (unsigned long long)(kx > ky ? kx - ky : ky - kx);
    worst = d > worst ? d : worst;
  };
  const uint64_t n8 = n / 8, stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n8; i += stride) {
    const uint4 x = reinterpret_cast<const uint4*>(a)[i], y = reinterpret_cast<const uint4*>(b)[i];
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
    for (int k = 0; k < 4; ++k) {
      if (xs[k] == ys[k]) continue;
      one(xs[k] & 0xFFFFu, ys[k] & 0xFFFFu);
      one(xs[k] >> 16, ys[k] >> 16);
    }
  }
  for (uint64_t i = n8 * 8 + blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += stride) one(a[i], b[i]);
  if (cnt) atomicAdd(&out[0], cnt);
  if (worst) atomicMax(&out[1], worst);
}

/// count_diff16 over n elements on the current device, d_out: two counters there; waits for the result:
/// {elements that differ, largest distance in ulps}.
inline std::array<unsigned long long, 2> diff16(const void* a, const void* b, uint64_t n, unsigned long long* d_out,
                                                int blocks, cudaStream_t s = 0) {
  std::array<unsigned long long, 2> h{};
  CK(cudaMemsetAsync(d_out, 0, sizeof h, s));
  count_diff16<<<blocks, 256, 0, s>>>(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n, d_out);
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(h.data(), d_out, sizeof h, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return h;
}

/// Loads this header's kernels now (lazy loading would load them at their first launch, and loading waits for
/// the kernels running on the GPU: a program that keeps a kernel running all along loads first).
inline cudaError_t load_kernels() {
  cudaFuncAttributes fa;
  const cudaError_t e = cudaFuncGetAttributes(&fa, count_diff);
  return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, count_diff16);
}

}  // namespace examples
