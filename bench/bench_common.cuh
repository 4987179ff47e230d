// Shared pieces of the zipcomm benchmarks: checked CUDA calls, median timing with CUDA events, the copy
// roofline measured in the same run, the command line every bench takes, and test-data files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#define CK(...)                                                                                            \
  do {                                                                                                     \
    cudaError_t e_ = (__VA_ARGS__);                                                                        \
    if (e_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #__VA_ARGS__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

namespace bench {

/// Median time of `reps` calls of f (after 3 warm-ups), CUDA events around each stream-ordered call.
template <class F>
double median_ms(int reps, F&& f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
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

/// Device-to-device copy bandwidth, bytes read + written per second, in TB/s.
inline double copy_roofline_tbps(uint64_t bytes, int reps) {
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  const double ms = median_ms(reps, [&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * double(bytes) / ms / 1e9;
}

/// --data DIR --mib N --reps N --json FILE; exits with a usage line on anything else.
struct Options {
  std::string data = "tests/data", json;
  uint64_t mib = 256;
  int reps = 20;
};
inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) o.data = argv[++i];
    else if (a == "--mib" && i + 1 < argc) o.mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc) o.reps = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) o.json = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--mib 256] [--reps 20] [--json FILE]\n", argv[0]);
      std::exit(2);
    }
  }
  if (o.mib == 0 || o.reps <= 0) std::fprintf(stderr, "--mib and --reps must be positive\n"), std::exit(2);
  return o;
}

/// Whole file, or exit with a message naming it.
inline std::vector<uint8_t> read_data_file(const std::string& dir, const char* name) {
  std::ifstream f(dir + "/" + name, std::ios::binary);
  std::vector<uint8_t> v((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (v.empty()) std::fprintf(stderr, "missing or empty %s/%s\n", dir.c_str(), name), std::exit(1);
  return v;
}

}  // namespace bench
