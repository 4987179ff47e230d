// zipcomm codec benchmark: device-wide and block-level encode/decode throughput against the device copy
// roofline measured in the same run. Prints a table and writes JSON.
//
// Throughput counts UNCOMPRESSED bytes per second (../shared/TARGETS.md). Each data set is a real sample
// tiled to --mib MiB (the codec keeps no dictionary, so repetition does not help it; 256 MiB is > 4x L2).
// Usage: zipcomm_bench [--data DIR] [--mib 256] [--reps 20] [--json FILE]
//
// nvCOMP, the closed library a user would pick instead, runs next to zipcomm on the same data when the build
// found it (nvcomp_peer.cuh: batched ANS at 64 KiB and 1 MiB chunks, Bitcomp at 64 KiB). To get it:
//   bash scripts/fetch-nvcomp.sh    # PyPI wheel nvidia-libnvcomp-cu13 -> .deps/nvcomp/{include,lib}
//   cmake -S . -B build             # ZIPCOMM_BENCH_NVCOMP=AUTO finds .deps/nvcomp, NVCOMP_ROOT or pip's copy
// The binary finds libnvcomp through its RPATH. Without nvCOMP the table says "nvCOMP: not found".
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_common.cuh"

#include <zipcomm/block/block_stream_codec.cuh>
#include <zipcomm/device/device_codec.cuh>
#include <zipcomm/host/reference_codec.hpp>

#if ZIPCOMM_BENCH_WITH_NVCOMP
#include "nvcomp_peer.cuh"
#endif

using namespace zipcomm;
namespace cg = cooperative_groups;

namespace {

struct Row {
  std::string data, dtype, what;
  double mib, ratio, gbps, roof_pct;
  std::string library = "zipcomm";
};

constexpr int BLOCK_WARPS = 8;

// Block-level primitives in a user kernel: each block owns consecutive slices of SLICE elements and turns
// each into a self-contained stream (as a collective's step would).
template <DType D>
__global__ void __launch_bounds__(BLOCK_WARPS * 32) block_encode_kernel(const uint8_t* in, uint64_t n, uint64_t slice,
                                                                       uint8_t* out, uint64_t slot_bytes,
                                                                       uint64_t* sizes) {
  using Enc = block::BlockStreamEncoder<D, BLOCK_WARPS>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Enc enc(*reinterpret_cast<typename Enc::TempStorage*>(smem));
  const uint64_t slices = (n + slice - 1) / slice;
  for (uint64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    const uint64_t m = std::min(slice, n - s * slice);
    uint64_t bytes = enc.Encode(cta, in + s * slice * format::elem_bytes(D), m, out + s * slot_bytes);
    if (cta.thread_rank() == 0) sizes[s] = bytes;
    cta.sync();
  }
}

template <DType D>
__global__ void __launch_bounds__(BLOCK_WARPS * 32) block_decode_kernel(const uint8_t* comp, uint64_t n, uint64_t slice,
                                                                       uint64_t slot_bytes, const uint64_t* sizes,
                                                                       uint8_t* out, Status* status) {
  using Dec = block::BlockStreamDecoder<D, BLOCK_WARPS>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Dec dec(*reinterpret_cast<typename Dec::TempStorage*>(smem));
  const uint64_t slices = (n + slice - 1) / slice;
  for (uint64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    uint8_t* dst = out + s * slice * format::elem_bytes(D);
    auto sink = [&](uint64_t tile, const uint32_t (&x)[8], uint32_t cnt) {
      warp::store_items<D, true>(dst, tile * format::TILE_ELEMS + (threadIdx.x % 32) * 8, cnt, x);
    };
    Status st = dec.Decode(cta, comp + s * slot_bytes, sizes[s], slice, sink);
    if (st != Status::ok && cta.thread_rank() == 0) *status = st;
  }
}

template <DType D, class Code>
void bench_dataset(const std::string& name, const std::vector<uint8_t>& sample, uint64_t mib, int reps,
                   double copy_tbps, std::vector<Row>& rows) {
  const uint64_t eb = format::elem_bytes(D);
  const uint64_t n = mib * 1024 * 1024 / eb;
  std::vector<uint8_t> host(n * eb);
  for (uint64_t off = 0; off < host.size(); off += sample.size())
    std::memcpy(host.data() + off, sample.data(), std::min<uint64_t>(sample.size(), host.size() - off));
  const uint64_t cap = format::max_compressed_bytes(D, n);
  void *d_in, *d_out, *d_back, *d_temp;
  uint64_t* d_bytes;
  Status* d_status;
  CK(cudaMalloc(&d_in, n * eb));
  CK(cudaMalloc(&d_back, n * eb));
  CK(cudaMalloc(&d_out, cap));
  CK(cudaMalloc(&d_bytes, 64));
  d_status = reinterpret_cast<Status*>(d_bytes + 1);
  CK(cudaMemcpy(d_in, host.data(), n * eb, cudaMemcpyHostToDevice));
  size_t temp_bytes = 0, dtemp_bytes = 0;
  CK(device::compress<D, Code>(nullptr, temp_bytes, d_in, n, d_out, cap, d_bytes, d_status));
  CK(device::decompress<D, Code>(nullptr, dtemp_bytes, d_out, cap, d_back, n, d_status));
  CK(cudaMalloc(&d_temp, std::max(temp_bytes, dtemp_bytes)));

  const double enc_ms = bench::median_ms(reps, [&] {
    CK(device::compress<D, Code>(d_temp, temp_bytes, d_in, n, d_out, cap, d_bytes, d_status));
  });
  uint64_t bytes = 0;
  Status st;
  CK(cudaMemcpy(&bytes, d_bytes, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
  if (st != Status::ok) std::fprintf(stderr, "compress status %s\n", status_string(st)), std::exit(1);
  const double dec_ms = bench::median_ms(reps, [&] {
    CK(device::decompress<D, Code>(d_temp, dtemp_bytes, d_out, bytes, d_back, n, d_status));
  });
  CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
  std::vector<uint8_t> back(n * eb);
  CK(cudaMemcpy(back.data(), d_back, n * eb, cudaMemcpyDeviceToHost));
  if (st != Status::ok || back != host) std::fprintf(stderr, "%s: round trip FAILED\n", name.c_str()), std::exit(1);

  const double ratio = double(bytes) / double(n * eb);
  const double enc_gbps = n * eb / enc_ms / 1e6, dec_gbps = n * eb / dec_ms / 1e6;
  // Roofline of the bytes each direction must move per uncompressed byte: 1 + ratio (read one, write the
  // other), against the copy's bytes read + written per second.
  const double enc_roof = copy_tbps * 1e3 / (1.0 + ratio), dec_roof = enc_roof;
  const std::string dt = dtype_name(D), code = Code::ID == CodeId::gaussian ? "gaussian" : "window3";
  rows.push_back({name, dt, "device encode (" + code + ")", double(mib), ratio, enc_gbps, 100.0 * enc_gbps / enc_roof});
  rows.push_back({name, dt, "device decode (" + code + ")", double(mib), ratio, dec_gbps, 100.0 * dec_gbps / dec_roof});

  if (Code::ID == CodeId::gaussian) {
    // Block-level primitives in a user kernel, 256 Ki-element slices (a ring step's share of a large
    // message), one self-contained stream each.
    const uint64_t slice = 256ull << 10, slices = (n + slice - 1) / slice;
    const uint64_t slot = format::align_up(format::max_compressed_bytes(D, slice), 16);
    void *d_slots, *d_sizes;
    CK(cudaMalloc(&d_slots, slot * slices));
    CK(cudaMalloc(&d_sizes, 8 * slices));
    using Enc = block::BlockStreamEncoder<D, BLOCK_WARPS>;
    using Dec = block::BlockStreamDecoder<D, BLOCK_WARPS>;
    CK(cudaFuncSetAttribute(block_encode_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(sizeof(typename Enc::TempStorage))));
    CK(cudaFuncSetAttribute(block_decode_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(sizeof(typename Dec::TempStorage))));
    int dev = 0, sms = 0, per_sm_e = 0, per_sm_d = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_e, block_encode_kernel<D>, BLOCK_WARPS * 32,
                                                     sizeof(typename Enc::TempStorage)));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_d, block_decode_kernel<D>, BLOCK_WARPS * 32,
                                                     sizeof(typename Dec::TempStorage)));
    // Every block must get work: the grid is one block per slice-round, capped by residency.
    const int grid_e = int(std::min<uint64_t>(slices, uint64_t(sms) * per_sm_e));
    const int grid_d = int(std::min<uint64_t>(slices, uint64_t(sms) * per_sm_d));
    const double benc_ms = bench::median_ms(reps, [&] {
      block_encode_kernel<D><<<grid_e, BLOCK_WARPS * 32, sizeof(typename Enc::TempStorage)>>>(
          static_cast<const uint8_t*>(d_in), n, slice, static_cast<uint8_t*>(d_slots), slot,
          static_cast<uint64_t*>(d_sizes));
    });
    CK(cudaMemset(d_status, 0, 4));
    const double bdec_ms = bench::median_ms(reps, [&] {
      block_decode_kernel<D><<<grid_d, BLOCK_WARPS * 32, sizeof(typename Dec::TempStorage)>>>(
          static_cast<const uint8_t*>(d_slots), n, slice, slot, static_cast<const uint64_t*>(d_sizes),
          static_cast<uint8_t*>(d_back), d_status);
    });
    CK(cudaGetLastError());
    CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(back.data(), d_back, n * eb, cudaMemcpyDeviceToHost));
    if (st != Status::ok || back != host) std::fprintf(stderr, "%s: block round trip FAILED\n", name.c_str()), std::exit(1);
    std::vector<uint64_t> sizes(slices);
    CK(cudaMemcpy(sizes.data(), d_sizes, 8 * slices, cudaMemcpyDeviceToHost));
    uint64_t total = 0;
    for (uint64_t s : sizes) total += s;
    const double bratio = double(total) / double(n * eb);
    rows.push_back({name, dt, "block encode (256Ki slices, " + std::to_string(grid_e) + " CTAs)", double(mib), bratio,
                    n * eb / benc_ms / 1e6, 100.0 * (n * eb / benc_ms / 1e6) / enc_roof});
    rows.push_back({name, dt, "block decode (256Ki slices, " + std::to_string(grid_d) + " CTAs)", double(mib), bratio,
                    n * eb / bdec_ms / 1e6, 100.0 * (n * eb / bdec_ms / 1e6) / dec_roof});
    CK(cudaFree(d_slots));
    CK(cudaFree(d_sizes));
  }
#if ZIPCOMM_BENCH_WITH_NVCOMP
  // nvCOMP on the same input, once per data set; its ratio counts every byte a receiver needs.
  if (Code::ID == CodeId::gaussian) {
    for (const bench::nvcomp_peer::Config& config : bench::nvcomp_peer::kConfigs) {
      const auto m = bench::nvcomp_peer::measure(config, d_in, d_back, host, int(eb), reps,
                                                 name + " " + dt + " " + config.name);
      if (!m) continue;
      const double e = n * eb / m->encode_ms / 1e6, d = n * eb / m->decode_ms / 1e6;
      const double roof = copy_tbps * 1e3 / (1.0 + m->ratio);
      const std::string op = config.name;
      rows.push_back({name, dt, op + " encode", double(mib), m->ratio, e, 100.0 * e / roof, "nvcomp"});
      rows.push_back({name, dt, op + " decode", double(mib), m->ratio, d, 100.0 * d / roof, "nvcomp"});
    }
  }
#endif
  CK(cudaFree(d_in));
  CK(cudaFree(d_back));
  CK(cudaFree(d_out));
  CK(cudaFree(d_bytes));
  CK(cudaFree(d_temp));
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options opt = bench::parse_options(argc, argv);
  const std::string& data = opt.data;
  const std::string& json = opt.json;
  const uint64_t mib = opt.mib;
  const int reps = opt.reps;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("zipcomm_bench: no GPU on this machine; nothing measured.\n");
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));

  // Copy roofline: device-to-device copy, bytes read + written.
  const double copy_tbps = bench::copy_roofline_tbps(mib * 1024 * 1024, reps);

  // Gaussian N(0, 0.02) reference data (bf16), freshly drawn.
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<uint8_t> gauss(2 * (1u << 22));
  for (size_t i = 0; i < gauss.size() / 2; ++i) {
    float x = nd(rng);
    uint32_t u;
    std::memcpy(&u, &x, 4);
    uint16_t h = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    std::memcpy(&gauss[2 * i], &h, 2);
  }
  std::vector<Row> rows;
  auto file = [&](const char* f) { return bench::read_data_file(data, f); };
  bench_dataset<DType::bf16, thread::GaussianCode>("llama_grads", file("llama_grads.bf16"), mib, reps, copy_tbps, rows);
  bench_dataset<DType::bf16, thread::Window3Code>("llama_grads", file("llama_grads.bf16"), mib, reps, copy_tbps, rows);
  bench_dataset<DType::bf16, thread::GaussianCode>("llama_acts", file("llama_acts.bf16"), mib, reps, copy_tbps, rows);
  bench_dataset<DType::bf16, thread::GaussianCode>("llama_weights", file("llama_weights.bf16"), mib, reps, copy_tbps, rows);
  bench_dataset<DType::bf16, thread::GaussianCode>("gaussian_0.02", gauss, mib, reps, copy_tbps, rows);
  bench_dataset<DType::fp16, thread::GaussianCode>("llama_grads_scaled", file("llama_grads_scaled.f16"), mib, reps,
                                                   copy_tbps, rows);
  bench_dataset<DType::fp32, thread::GaussianCode>("llama_grads", file("llama_grads.f32"), mib, reps, copy_tbps, rows);

  std::printf("\nzipcomm codec benchmark on %s (%d SMs); %llu MiB per data set, median of %d\n", prop.name,
              prop.multiProcessorCount, (unsigned long long)mib, reps);
  std::printf("device copy roofline: %.2f TB/s (read + write)\n", copy_tbps);
#if ZIPCOMM_BENCH_WITH_NVCOMP
  const std::string nvcomp_version = bench::nvcomp_peer::version_string();
  std::printf("nvCOMP: %s\n\n", nvcomp_version.c_str());
#else
  std::printf("nvCOMP: not found (scripts/fetch-nvcomp.sh)\n\n");
#endif
  std::printf("%-20s %-5s %-40s %7s %10s %9s\n", "data", "dtype", "operation", "ratio", "GB/s", "%roof");
  for (const Row& r : rows)
    std::printf("%-20s %-5s %-40s %7.4f %10.1f %8.1f%%\n", r.data.c_str(), r.dtype.c_str(), r.what.c_str(), r.ratio,
                r.gbps, r.roof_pct);
  std::printf("\nGB/s counts uncompressed bytes; %%roof = GB/s over the roofline of the bytes the operation\n"
              "moves: copy TB/s (read + write) / (1 + ratio).\n");
#if ZIPCOMM_BENCH_WITH_NVCOMP
  std::printf("nvCOMP ratio: compressed chunks + %d bytes per chunk (its size, which a receiver needs).\n",
              int(bench::nvcomp_peer::kChunkSizeBytes));
#endif
  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"copy_tbps\": " << copy_tbps << ",\n  \"mib\": " << mib
      << ",\n  \"reps\": " << reps << ",\n  \"nvcomp\": ";
#if ZIPCOMM_BENCH_WITH_NVCOMP
    o << "\"" << nvcomp_version << "\"";
#else
    o << "null";
#endif
    o << ",\n  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      o << "    {\"library\": \"" << r.library << "\", \"data\": \"" << r.data << "\", \"dtype\": \"" << r.dtype
        << "\", \"operation\": \"" << r.what << "\", \"ratio\": " << r.ratio << ", \"gbps\": " << r.gbps
        << ", \"roof_pct\": " << r.roof_pct << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    o << "  ]\n}\n";
  }
#if ZIPCOMM_BENCH_WITH_NVCOMP
  if (const int failed = bench::nvcomp_peer::failed_round_trips()) {
    std::fprintf(stderr, "zipcomm_bench: %d nvCOMP round trip(s) FAILED (not bit-exact); rows left out\n", failed);
    return 1;
  }
#endif
  return 0;
}
