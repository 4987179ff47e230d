// Shared pieces of the zipcomm benchmarks: median timing with CUDA events, the copy roofline measured in the same
// run, the command line the benches take, test-data files, sizes in words and JSON rows (checked CUDA calls:
// example_common.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "example_common.cuh"

namespace bench {

/// Median time of `reps` calls of f (after 3 warm-ups), CUDA events around each call on the legacy stream.
template <class F>
double median_ms(int reps, F&& f) {
  return examples::median_ms(0, 3, reps, f);
}

/// The same with the events on `stream` (f enqueues its work there).
template <class F>
double median_ms(int reps, cudaStream_t stream, F&& f) {
  return examples::median_ms(stream, 3, reps, f);
}

/// Middle element of v once sorted (the upper one of an even count).
template <class T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Elapsed ms between CUDA events a (before) and b (after).
inline float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

/// Number of GPUs; where there is none, says so as `bench_name` (the bench then measures nothing and succeeds).
inline int gpu_count(const char* bench_name) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return count;
  std::printf("%s: no GPU on this machine; nothing measured.\n", bench_name);
  return 0;
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

/// `bytes` of `sample` repeated. Each copy is cut to whole 256-element tiles, so that every tile of the result is
/// a tile of the sample and the ratio is the sample's (a copy starting mid-tile would mix two tiles' bits).
inline std::vector<uint8_t> tiled_sample(const std::vector<uint8_t>& sample, uint64_t bytes, uint64_t elem_bytes) {
  const uint64_t tile_bytes = 256 * elem_bytes;
  const uint64_t period = sample.size() >= tile_bytes ? sample.size() / tile_bytes * tile_bytes : sample.size();
  std::vector<uint8_t> out(bytes);
  for (uint64_t off = 0; period && off < bytes; off += period)
    std::memcpy(out.data() + off, sample.data(), std::min<uint64_t>(period, bytes - off));
  return out;
}

/// N(0, 0.02) drawn from `rng`, 2^22 values rounded to nearest-even bf16 (the codec benches' synthetic tensor).
inline std::vector<uint8_t> gaussian_bf16_sample(std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<uint8_t> out(2 * (1u << 22));
  for (size_t i = 0; i < out.size() / 2; ++i) {
    const float x = nd(rng);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const uint16_t h = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

/// --data DIR --mib N --reps N --json FILE, and where the bench takes them (codec) --sms N[,M...],
/// --chunk-log2 N and --chunk-sweep; exits with a usage line on anything else.
struct Options {
  std::string data = "tests/data", json;
  uint64_t mib = 256;          // the message size (the first of mibs)
  std::vector<uint64_t> mibs;  // --mib A,B,...: message sizes, where the bench takes several
  int reps = 20;
  std::vector<int> sms;  // SM counts to confine the timed operations to, besides the whole GPU
  uint32_t chunk_log2 = 0;  // device compress's chunk size (0: the format's default for the size)
  bool chunk_sweep = false;  // device encode / decode against message and chunk size
};
/// Positive integers separated by commas, each at most `max`; exits with a message naming `flag` otherwise.
inline std::vector<uint64_t> parse_list(const char* flag, const std::string& list, uint64_t max) {
  std::vector<uint64_t> v;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    char* end = nullptr;
    const unsigned long long x = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || item[0] == '-' || *end != '\0' || x == 0 || x > max)
      std::fprintf(stderr, "%s takes positive integers up to %llu separated by commas (got \"%s\")\n", flag,
                   (unsigned long long)max, list.c_str()),
          std::exit(2);
    v.push_back(x);
    at = comma + 1;
  }
  return v;
}

/// codec: zipcomm_bench's flags too; sizes: --mib may list several message sizes.
inline Options parse_options(int argc, char** argv, bool codec = false, bool sizes = false) {
  Options o;
  auto usage = [&] {
    std::fprintf(stderr, "usage: %s [--data DIR] [--mib %s] [--reps 20] [--json FILE]%s\n", argv[0],
                 sizes ? "256[,M...]" : "256",
                 codec ? " [--sms N[,M...]] [--chunk-log2 12|13|14] [--chunk-sweep]" : "");
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) o.data = argv[++i];
    else if (a == "--mib" && i + 1 < argc) {
      o.mibs = parse_list("--mib", argv[++i], uint64_t(1) << 20);
      if (o.mibs.size() > 1 && !sizes) std::fprintf(stderr, "--mib takes one size here\n"), std::exit(2);
      o.mib = o.mibs.front();
    }
    else if (a == "--reps" && i + 1 < argc) o.reps = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) o.json = argv[++i];
    else if (codec && a == "--chunk-log2" && i + 1 < argc) o.chunk_log2 = uint32_t(std::atoi(argv[++i]));
    else if (codec && a == "--chunk-sweep") o.chunk_sweep = true;
    else if (codec && a == "--sms" && i + 1 < argc) {
      for (uint64_t v : parse_list("--sms", argv[++i], uint64_t(1) << 20)) o.sms.push_back(int(v));
    } else usage();
  }
  if (o.mibs.empty()) o.mibs.push_back(o.mib);
  if (o.reps <= 0) std::fprintf(stderr, "--reps must be positive\n"), std::exit(2);
  return o;
}

/// Whole file, or exit with a message naming it.
inline std::vector<uint8_t> read_data_file(const std::string& dir, const char* name) {
  std::vector<uint8_t> v = examples::read_file(dir + "/" + name);
  if (v.empty()) std::fprintf(stderr, "missing or empty %s/%s\n", dir.c_str(), name), std::exit(1);
  return v;
}

/// Size in whole GiB, MiB or KiB (rounded down): "64 MiB".
inline std::string human_bytes(uint64_t bytes) {
  char s[32];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(s, sizeof s, "%llu GiB", (unsigned long long)(bytes >> 30));
  else if (bytes >= (uint64_t(1) << 20))
    std::snprintf(s, sizeof s, "%llu MiB", (unsigned long long)(bytes >> 20));
  else
    std::snprintf(s, sizeof s, "%llu KiB", (unsigned long long)(bytes >> 10));
  return s;
}

/// text as a JSON string literal: quotes and backslashes escaped, control characters dropped.
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

/// The body of a JSON array of objects, one a line: each row indented by four spaces, written by
/// write_row(o, row) (the braces included), commas between rows.
template <class Row, class WriteRow>
void write_json_rows(std::ostream& o, const std::vector<Row>& rows, WriteRow&& write_row) {
  for (size_t i = 0; i < rows.size(); ++i) {
    o << "    ";
    write_row(o, rows[i]);
    o << (i + 1 < rows.size() ? ",\n" : "\n");
  }
}

}  // namespace bench
