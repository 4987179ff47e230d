// zipcomm demo: what lossless exponent compression buys on real training tensors, and what it costs.
//
//   build/examples/zipcomm_demo [FOLDER]        (FOLDER defaults to tests/data)
//
// For every raw sample in FOLDER (*.bf16, *.f16/*.fp16, *.f32/*.fp32, *.e4m3, *.e5m2; little-endian, no header)
// it shows:
//   * the compression ratio (compressed bytes / original bytes, everything counted) of the wire format's
//     pair code, next to the entropy bound (raw sign+mantissa bits + order-0 entropy of the exponent
//     field over the whole file) and the gap between them. The code adapts per 256-element tile, so it can
//     beat this whole-file bound (negative gap) on tensors whose scale changes along the buffer;
//   * host reference encoder / decoder throughput (MB/s) and whether decompression is bit-exact;
//   * with a GPU: device encode / decode throughput in GB/s (uncompressed bytes / time, CUDA events, median
//     of 25 runs after warm-up) on a >= 256 MiB buffer made by tiling the sample, the device-to-device copy
//     roofline measured in the same run (bytes read + written / time), the codec's share of it, and whether
//     the GPU writes exactly the host codec's bytes. Without a GPU these figures are skipped.
// Exit code 0 when every check passed, 1 otherwise.
//
// Built as CUDA when ZIPCOMM_WITH_CUDA is defined, as plain C++ (host figures only) otherwise. It instantiates
// only bf16/fp16/fp32 with the pair code, to keep the build short.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <zipcomm/format.hpp>
#include <zipcomm/host/reference_codec.hpp>

#if defined(ZIPCOMM_WITH_CUDA)
#include <cuda_runtime.h>

#include <zipcomm/device/device_codec.cuh>  // templates only: bf16/fp16/fp32 x Gaussian are instantiated below

#include "example_common.cuh"

#define ZIPCOMM_DEMO_GPU 1
#else
#define ZIPCOMM_DEMO_GPU 0
#endif

using zipcomm::CodeId;
using zipcomm::DType;
using zipcomm::Status;
namespace format = zipcomm::format;

namespace {

struct Sample {
  std::string name;
  DType dtype;
  std::vector<uint8_t> data;
  uint64_t n;
};

bool dtype_from_name(const std::string& name, DType* d) {
  auto ext = name.substr(name.find_last_of('.') == std::string::npos ? name.size() : name.find_last_of('.'));
  if (ext == ".bf16") return *d = DType::bf16, true;
  if (ext == ".f16" || ext == ".fp16") return *d = DType::fp16, true;
  if (ext == ".f32" || ext == ".fp32") return *d = DType::fp32, true;
  if (ext == ".e4m3") return *d = DType::fp8_e4m3, true;
  if (ext == ".e5m2") return *d = DType::fp8_e5m2, true;
  return false;
}

double entropy_bound(DType d, const uint8_t* p, uint64_t n) {
  std::vector<uint64_t> hist(256, 0);
  for (uint64_t i = 0; i < n; ++i) {
    if (d == DType::fp32) {
      uint32_t b;
      std::memcpy(&b, p + 4 * i, 4);
      ++hist[(b >> 23) & 0xFF];
    } else if (format::elem_bytes(d) == 1) {  // fp8: the exponent sits above 3 (e4m3) or 2 (e5m2) mantissa bits
      ++hist[(p[i] >> (7 - format::exp_bits(d))) & ((1u << format::exp_bits(d)) - 1)];
    } else {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      ++hist[d == DType::bf16 ? (b >> 7) & 0xFF : (b >> 10) & 0x1F];
    }
  }
  double h = 0;
  for (uint64_t c : hist)
    if (c) h -= double(c) / double(n) * std::log2(double(c) / double(n));
  const double bits = 8.0 * format::elem_bytes(d);
  return (bits - format::exp_bits(d) + h) / bits;
}

/// Best time in seconds of f() over at least 3 runs and about 0.2 s (the first run also warms caches).
template <class F>
double best_seconds(F f) {
  double best = 1e30, total = 0;
  for (int i = 0; i < 100 && (i < 3 || total < 0.2); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = t < best ? t : best;
    total += t;
  }
  return best;
}

#if ZIPCOMM_DEMO_GPU
struct GpuResult {
  bool same_bytes = false, round_trip = false;
  double enc_gbs = 0, dec_gbs = 0, copy_gbs = 0;
  uint64_t big_bytes = 0;
};

template <DType D>
GpuResult gpu_run(const Sample& s, const std::vector<uint8_t>& host_stream) {
  using Code = zipcomm::thread::PairCode;
  GpuResult r;
  const uint64_t sample_bytes = s.data.size();
  // Repetitions: enough for >= 256 MiB, a multiple of 8 so the buffer is a whole number of 16-byte words.
  const uint64_t reps = format::align_up(format::div_up(uint64_t(256) << 20, sample_bytes), 8);
  const uint64_t n_big = reps * s.n, big = reps * sample_bytes;
  r.big_bytes = big;
  const uint64_t cap_big = format::max_compressed_bytes(D, n_big);
  struct Res {
    uint64_t bytes;
    Status status;
  };
  void *d_in, *d_comp, *d_out;
  Res* d_res;
  unsigned long long* d_bad;
  CK(cudaMalloc(&d_in, big));
  CK(cudaMalloc(&d_out, big + 16));
  CK(cudaMalloc(&d_comp, cap_big));
  CK(cudaMalloc(&d_res, sizeof(Res)));
  CK(cudaMalloc(&d_bad, sizeof(unsigned long long)));
  CK(cudaMemcpy(d_in, s.data.data(), sample_bytes, cudaMemcpyHostToDevice));
  size_t t_enc = 0, t_dec = 0;
  CK((zipcomm::device::compress<D, Code>(nullptr, t_enc, d_in, n_big, d_comp, cap_big, &d_res->bytes, &d_res->status)));
  CK((zipcomm::device::decompress<D, Code>(nullptr, t_dec, d_comp, cap_big, d_out, n_big, &d_res->status)));
  void* d_temp = nullptr;
  CK(cudaMalloc(&d_temp, std::max<size_t>(std::max(t_enc, t_dec), 16)));
  Res res;

  // 1. The sample itself: the GPU must write the host codec's bytes.
  CK((zipcomm::device::compress<D, Code>(d_temp, t_enc, d_in, s.n, d_comp, cap_big, &d_res->bytes, &d_res->status)));
  CK(cudaMemcpy(&res, d_res, sizeof res, cudaMemcpyDeviceToHost));
  if (res.status == Status::ok && res.bytes == host_stream.size()) {
    std::vector<uint8_t> got(res.bytes);
    CK(cudaMemcpy(got.data(), d_comp, res.bytes, cudaMemcpyDeviceToHost));
    r.same_bytes = got == host_stream;
  }
  if (res.status != Status::ok) std::printf("  device compress of %s: %s\n", s.name.c_str(), zipcomm::status_string(res.status));

  // 2. Tile the sample to >= 256 MiB (doubling copies on the device).
  for (uint64_t have = sample_bytes; have < big;) {
    uint64_t len = std::min(have, big - have);
    CK(cudaMemcpy(static_cast<uint8_t*>(d_in) + have, d_in, len, cudaMemcpyDeviceToDevice));
    have += len;
  }
  auto enc = [&] {
    size_t t = t_enc;
    CK((zipcomm::device::compress<D, Code>(d_temp, t, d_in, n_big, d_comp, cap_big, &d_res->bytes, &d_res->status)));
  };
  const double enc_ms = examples::median_ms(0, 3, 25, enc);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(&res, d_res, sizeof res, cudaMemcpyDeviceToHost));
  const Status enc_status = res.status;
  const uint64_t comp_bytes = res.bytes;
  auto dec = [&] {
    size_t t = t_dec;
    CK((zipcomm::device::decompress<D, Code>(d_temp, t, d_comp, comp_bytes, d_out, n_big, &d_res->status)));
  };
  const double dec_ms = examples::median_ms(0, 3, 25, dec);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(&res, d_res, sizeof res, cudaMemcpyDeviceToHost));
  const Status dec_status = res.status;
  const unsigned long long bad = examples::count_diff_words(d_in, d_out, big, d_bad, 1024);
  r.round_trip = enc_status == Status::ok && dec_status == Status::ok && bad == 0 && big % 16 == 0;
  if (enc_status != Status::ok || dec_status != Status::ok)
    std::printf("  device codec on the tiled buffer: compress %s, decompress %s\n", zipcomm::status_string(enc_status),
                zipcomm::status_string(dec_status));

  // 3. Copy roofline: device-to-device memcpy of the same bytes, same run.
  const double copy_ms =
      examples::median_ms(0, 3, 25, [&] { CK(cudaMemcpyAsync(d_out, d_in, big, cudaMemcpyDeviceToDevice)); });
  r.enc_gbs = double(big) / (enc_ms * 1e6);
  r.dec_gbs = double(big) / (dec_ms * 1e6);
  r.copy_gbs = 2.0 * double(big) / (copy_ms * 1e6);
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_comp);
  cudaFree(d_res);
  cudaFree(d_bad);
  cudaFree(d_temp);
  return r;
}

GpuResult gpu_run_any(const Sample& s, const std::vector<uint8_t>& host_stream) {
  switch (s.dtype) {
    case DType::bf16: return gpu_run<DType::bf16>(s, host_stream);
    case DType::fp16: return gpu_run<DType::fp16>(s, host_stream);
    case DType::fp8_e4m3: return gpu_run<DType::fp8_e4m3>(s, host_stream);
    case DType::fp8_e5m2: return gpu_run<DType::fp8_e5m2>(s, host_stream);
    default: return gpu_run<DType::fp32>(s, host_stream);
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string folder = argc > 1 ? argv[1] : "tests/data";
  if (argc > 2 || folder == "-h" || folder == "--help") {
    std::printf("usage: zipcomm_demo [FOLDER]   (raw *.bf16, *.f16, *.f32, *.e4m3, *.e5m2 samples; default "
                "tests/data)\n");
    return argc > 2 ? 2 : 0;
  }
  std::vector<Sample> samples;
  std::error_code ec;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec))
    if (e.is_regular_file()) paths.push_back(e.path());
  if (ec) {
    std::fprintf(stderr, "zipcomm_demo: cannot read folder '%s': %s\n", folder.c_str(), ec.message().c_str());
    return 1;
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    Sample s;
    s.name = p.filename().string();
    if (!dtype_from_name(s.name, &s.dtype)) continue;
    FILE* f = std::fopen(p.string().c_str(), "rb");
    if (!f) continue;
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    s.data.resize(size > 0 ? size_t(size) : 0);
    size_t got = s.data.empty() ? 0 : std::fread(s.data.data(), 1, s.data.size(), f);
    std::fclose(f);
    if (got != s.data.size() || s.data.empty() || s.data.size() % format::elem_bytes(s.dtype)) {
      std::printf("skipping %s: empty, unreadable or not a whole number of elements\n", s.name.c_str());
      continue;
    }
    s.n = s.data.size() / format::elem_bytes(s.dtype);
    samples.push_back(std::move(s));
  }
  if (samples.empty()) {
    std::fprintf(stderr, "zipcomm_demo: no samples (*.bf16, *.f16, *.f32, *.e4m3, *.e5m2) in '%s'\n",
                 folder.c_str());
    return 1;
  }

  bool gpu = false;
#if ZIPCOMM_DEMO_GPU
  int count = 0;
  gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaDeviceProp prop{};
  if (gpu) CK(cudaGetDeviceProperties(&prop, 0));
  (void)cudaGetLastError();
#endif

  std::printf("zipcomm %d.%d.%d demo: wire format v%d, pair exponent code, samples from %s\n",
              ZIPCOMM_VERSION_MAJOR, ZIPCOMM_VERSION_MINOR, ZIPCOMM_VERSION_PATCH, int(zipcomm::format::VERSION),
              folder.c_str());
  std::printf("ratio = compressed / original bytes (header, planes, chunk table counted); bound = raw sign+mantissa +\n"
              "order-0 exponent entropy over the whole file; gap = ratio - bound (the per-tile code can beat it).\n\n");
  std::printf("%-24s %-8s %10s %8s %8s %8s %14s %14s %9s\n", "sample", "dtype", "elements", "ratio", "bound", "gap",
              "host enc MB/s", "host dec MB/s", "bit-exact");
  bool all_ok = true;
  std::vector<std::vector<uint8_t>> streams;
  for (const Sample& s : samples) {
    std::vector<uint8_t> stream(format::max_compressed_bytes(s.dtype, s.n));
    uint64_t bytes = 0;
    Status st = Status::ok, st2 = Status::ok;
    const double t_enc = best_seconds([&] {
      st = zipcomm::host::compress(s.dtype, CodeId::pair, s.data.data(), s.n, stream.data(), stream.size(),
                                   &bytes);
    });
    stream.resize(st == Status::ok ? bytes : 0);
    std::vector<uint8_t> back(s.data.size());
    const double t_dec = best_seconds([&] {
      st2 = st == Status::ok ? zipcomm::host::decompress(stream.data(), stream.size(), back.data(), back.size()) : st;
    });
    const bool exact = st == Status::ok && st2 == Status::ok && back == s.data;
    all_ok = all_ok && exact;
    const double ratio = double(stream.size()) / double(s.data.size());
    const double bound = entropy_bound(s.dtype, s.data.data(), s.n);
    std::printf("%-24s %-8s %10llu %8.4f %8.4f %+8.4f %14.1f %14.1f %9s\n", s.name.c_str(), zipcomm::dtype_name(s.dtype),
                (unsigned long long)s.n, ratio, bound, ratio - bound, double(s.data.size()) / t_enc / 1e6,
                double(s.data.size()) / t_dec / 1e6, exact ? "yes" : "NO");
    if (st != Status::ok || st2 != Status::ok)
      std::printf("  host codec: compress %s, decompress %s\n", zipcomm::status_string(st), zipcomm::status_string(st2));
    streams.push_back(std::move(stream));
  }
  std::printf("(host figures: best of >= 3 single-threaded runs of the reference codec, the oracle, not a fast path)\n\n");

  if (!gpu) {
#if ZIPCOMM_DEMO_GPU
    std::printf("GPU figures skipped: no CUDA device available (host reference codec only).\n");
#else
    std::printf("GPU figures skipped: this build has no device codec (built without CUDA).\n");
#endif
    std::printf("\n%s\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED");
    return all_ok ? 0 : 1;
  }
#if ZIPCOMM_DEMO_GPU
  std::printf("GPU: %s (sm_%d%d). Device buffers are each sample tiled to >= 256 MiB: tiling repeats the data, so\n"
              "the ratio of the tiled buffer equals the sample's; throughput = uncompressed bytes / time (CUDA events,\n"
              "median of 25 runs after 3 warm-ups); copy = cudaMemcpyAsync D2D, (read + written bytes) / time.\n\n",
              prop.name, prop.major, prop.minor);
  std::printf("%-24s %9s %11s %11s %11s %8s %8s %11s %11s\n", "sample", "MiB", "enc GB/s", "dec GB/s", "copy GB/s",
              "enc %", "dec %", "GPU==host", "round trip");
  for (size_t i = 0; i < samples.size(); ++i) {
    GpuResult g = gpu_run_any(samples[i], streams[i]);
    all_ok = all_ok && g.same_bytes && g.round_trip;
    std::printf("%-24s %9.0f %11.1f %11.1f %11.1f %7.1f%% %7.1f%% %11s %11s\n", samples[i].name.c_str(),
                g.big_bytes / 1048576.0, g.enc_gbs, g.dec_gbs, g.copy_gbs, 100.0 * g.enc_gbs / g.copy_gbs,
                100.0 * g.dec_gbs / g.copy_gbs, g.same_bytes ? "yes" : "NO", g.round_trip ? "yes" : "NO");
  }
#endif
  std::printf("\n%s\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED");
  return all_ok ? 0 : 1;
}
