// Shared pieces of the zipcomm benchmarks: median timing with CUDA events, the copy roofline measured in the same
// run, the command line every bench takes, and test-data files (checked CUDA calls: example_common.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "example_common.cuh"

namespace bench {

/// Median time of `reps` calls of f (after 3 warm-ups), CUDA events around each call on the legacy stream.
template <class F>
double median_ms(int reps, F&& f) {
  return examples::median_ms(0, 3, reps, f);
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
  std::vector<uint8_t> v = examples::read_file(dir + "/" + name);
  if (v.empty()) std::fprintf(stderr, "missing or empty %s/%s\n", dir.c_str(), name), std::exit(1);
  return v;
}

}  // namespace bench
