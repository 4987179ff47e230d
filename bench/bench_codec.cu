// zipcomm codec benchmark: device-wide (pair and fixed codes) and block-level encode/decode throughput against the
// roofline measured in the same run. Prints a table and writes JSON.
//
// Throughput counts UNCOMPRESSED bytes per second: original bytes over the median time of --reps stream-ordered
// calls after 3 warm-ups (CUDA events). Each data set is a real sample tiled to --mib MiB (the codec keeps no
// dictionary, so repetition does not help it; 256 MiB is > 4x L2).
// Usage: zipcomm_bench [--data DIR] [--mib 256] [--reps 20] [--json FILE] [--sms N[,M...]] [--chunk-log2 N]
//                      [--chunk-sweep]
//
// --sms 16,32 repeats every row (device-wide, block-level, nvCOMP) confined to 16 and then 32 SMs, as a
// communication kernel's share of the GPU, and reports GB/s per SM. The library's API is unchanged: a CUDA green
// context holds the SMs (sm_partition.cuh) and the same operations run on a stream of it.
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
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "device_codec_timing.cuh"
#include "sm_partition.cuh"

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
  std::string library;
  int sms;         // SMs the operation could use (the whole GPU's, or its partition's)
  bool partition;  // confined to an SM partition (--sms)
};

void write_row_json(std::ostream& o, const Row& r) {
  o << "{\"library\": \"" << r.library << "\", \"data\": \"" << r.data << "\", \"dtype\": \"" << r.dtype
    << "\", \"operation\": \"" << r.what << "\", \"mib\": " << r.mib << ", \"sms\": " << (r.partition ? r.sms : 0)
    << ", \"ratio\": " << r.ratio << ", \"gbps\": " << r.gbps << ", \"gbps_per_sm\": " << r.gbps / r.sms
    << ", \"roof_pct\": " << r.roof_pct << "}";
}


// Warps per block of the user kernels below, and decode blocks per SM (a 256 Ki-element slice is 16 chunks).
constexpr int ENCODE_WARPS = 8;
constexpr int DECODE_WARPS = 16;         // 32 x 1 block per SM: 877-905 GB/s (half the warps idle per slice)
constexpr int DECODE_BLOCKS_PER_SM = 2;  // bf16 block decode 1,181-1,204 GB/s; 1: 966-996 (H100)

// Block-level primitives in a user kernel: each block owns consecutive slices of SLICE elements and turns
// each into a self-contained stream (as a collective's step would).
template <DType D, class Code>
__global__ void __launch_bounds__(ENCODE_WARPS * 32) block_encode_kernel(const uint8_t* in, uint64_t n, uint64_t slice,
                                                                       uint8_t* out, uint64_t slot_bytes,
                                                                       uint64_t* sizes) {
  using Enc = block::BlockStreamEncoder<D, ENCODE_WARPS, Code>;
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

template <DType D, class Code>
__global__ void __launch_bounds__(DECODE_WARPS * 32, DECODE_BLOCKS_PER_SM)
    block_decode_kernel(const uint8_t* comp, uint64_t n, uint64_t slice, uint64_t slot_bytes, const uint64_t* sizes,
                        uint8_t* out, Status* status) {
  using Dec = block::BlockStreamDecoder<D, DECODE_WARPS, Code>;
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

template <DType D>
void bench_dataset(const std::string& name, const std::vector<uint8_t>& sample, uint64_t mib, int reps,
                   const std::vector<bench::SmTarget>& targets, uint32_t chunk_log2, std::vector<Row>& rows) {
  const uint64_t eb = format::elem_bytes(D);
  const uint64_t n = mib * 1024 * 1024 / eb;
  const std::vector<uint8_t> host = bench::tiled_sample(sample, n * eb, eb);
  chunk_log2 = format::resolve_chunk_log2(chunk_log2, n);
  const uint64_t cap = format::max_compressed_bytes(D, n, chunk_log2);
  void *d_in, *d_out, *d_back, *d_temp;
  uint64_t* d_bytes;
  Status* d_status;
  CK(cudaMalloc(&d_in, n * eb));
  CK(cudaMalloc(&d_back, n * eb));
  CK(cudaMalloc(&d_out, cap));
  CK(cudaMalloc(&d_bytes, 64));
  d_status = reinterpret_cast<Status*>(d_bytes + 1);
  CK(cudaMemcpy(d_in, host.data(), n * eb, cudaMemcpyHostToDevice));
  // Temp storage depends on n and the chunk size, not on the code.
  size_t temp_bytes = 0, dtemp_bytes = 0;
  CK(device::compress<D>(nullptr, temp_bytes, d_in, n, d_out, cap, d_bytes, d_status, 0, chunk_log2));
  CK(device::decompress<D>(nullptr, dtemp_bytes, d_out, cap, d_back, n, d_status));
  CK(cudaMalloc(&d_temp, std::max(temp_bytes, dtemp_bytes)));
  // The setup ran on the legacy stream, which a partition's non-blocking stream does not wait for.
  CK(cudaDeviceSynchronize());

  const std::string dt = dtype_name(D);
  // Roofline of the bytes each direction must move per uncompressed byte: 1 + ratio (read one, write the
  // other), against the copy's bytes read + written per second on the same SMs.
  auto add_row = [&](const bench::SmTarget& t, const std::string& what, double ratio, double gbps, double roof_ratio,
                     const char* library) {
    const double roof = t.copy_tbps * 1e3 / (1.0 + roof_ratio);
    rows.push_back({name, dt, what + t.suffix(), double(mib), ratio, gbps, 100.0 * gbps / roof, library, t.sms,
                    t.partition});
  };
  const std::string chunks = chunk_log2 == format::default_chunk_log2(n) ? "" : ", " + std::to_string(1u << chunk_log2)
                                                                                       + "-element chunks";
  // The device-wide codec in one code on every target.
  auto device_rows = [&](auto code_tag) {
    using Code = decltype(code_tag);
    const std::string code = Code::ID == CodeId::fixed ? "fixed" : "pair";
    uint64_t bytes = 0;  // the stream's size: every grid must produce the same stream
    double ratio = 0;
    for (const bench::SmTarget& t : targets) {
      const bench::DeviceTiming timing =
          bench::time_device_codec<D, Code>(name + " " + code + t.suffix(), host, d_in, n, d_out, cap, d_back, d_temp,
                                            temp_bytes, dtemp_bytes, d_bytes, d_status, chunk_log2, reps, t.stream);
      if (bytes != 0 && timing.bytes != bytes)
        std::fprintf(stderr, "%s%s: %llu compressed bytes, %llu on the whole GPU\n", name.c_str(), t.suffix().c_str(),
                     (unsigned long long)timing.bytes, (unsigned long long)bytes),
            std::exit(1);
      bytes = timing.bytes;
      ratio = double(bytes) / double(n * eb);
      const double enc_gbps = n * eb / timing.enc_ms / 1e6, dec_gbps = n * eb / timing.dec_ms / 1e6;
      add_row(t, "device encode (" + code + chunks + ")", ratio, enc_gbps, ratio, "zipcomm");
      add_row(t, "device decode (" + code + chunks + ")", ratio, dec_gbps, ratio, "zipcomm");
    }
  };
  device_rows(thread::PairCode{});
  device_rows(thread::FixedCode{});

  std::vector<uint8_t> back(n * eb);
  // Block-level primitives in a user kernel, 256 Ki-element slices (a ring step's share of a large message), one
  // self-contained stream each, in one code.
  auto block_rows = [&](auto code_tag) {
    using Code = decltype(code_tag);
    const std::string code = Code::ID == CodeId::fixed ? "fixed" : "pair";
    const uint64_t slice = 256ull << 10, slices = (n + slice - 1) / slice;
    const uint64_t slot = format::align_up(format::max_compressed_bytes(D, slice), 16);
    void *d_slots, *d_sizes;
    CK(cudaMalloc(&d_slots, slot * slices));
    CK(cudaMalloc(&d_sizes, 8 * slices));
    using Enc = block::BlockStreamEncoder<D, ENCODE_WARPS, Code>;
    using Dec = block::BlockStreamDecoder<D, DECODE_WARPS, Code>;
    CK(cudaFuncSetAttribute(block_encode_kernel<D, Code>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(sizeof(typename Enc::TempStorage))));
    CK(cudaFuncSetAttribute(block_decode_kernel<D, Code>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(sizeof(typename Dec::TempStorage))));
    int per_sm_e = 0, per_sm_d = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_e, block_encode_kernel<D, Code>, ENCODE_WARPS * 32,
                                                     sizeof(typename Enc::TempStorage)));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_d, block_decode_kernel<D, Code>, DECODE_WARPS * 32,
                                                     sizeof(typename Dec::TempStorage)));
    std::vector<uint64_t> sizes(slices);
    uint64_t whole_gpu_total = 0;
    for (const bench::SmTarget& t : targets) {
      // Every block must get work: the grid is one block per slice-round, capped by residency on the SMs the
      // kernel may use (a communication kernel sizes its grid for its SM budget).
      const int grid_e = int(std::min<uint64_t>(slices, uint64_t(t.sms) * per_sm_e));
      const int grid_d = int(std::min<uint64_t>(slices, uint64_t(t.sms) * per_sm_d));
      const double benc_ms = bench::median_ms(reps, t.stream, [&] {
        block_encode_kernel<D, Code><<<grid_e, ENCODE_WARPS * 32, sizeof(typename Enc::TempStorage), t.stream>>>(
            static_cast<const uint8_t*>(d_in), n, slice, static_cast<uint8_t*>(d_slots), slot,
            static_cast<uint64_t*>(d_sizes));
      });
      CK(cudaGetLastError());
      CK(cudaMemsetAsync(d_status, 0, 4, t.stream));
      CK(cudaMemsetAsync(d_back, 0xA5, n * eb, t.stream));
      const double bdec_ms = bench::median_ms(reps, t.stream, [&] {
        block_decode_kernel<D, Code><<<grid_d, DECODE_WARPS * 32, sizeof(typename Dec::TempStorage), t.stream>>>(
            static_cast<const uint8_t*>(d_slots), n, slice, slot, static_cast<const uint64_t*>(d_sizes),
            static_cast<uint8_t*>(d_back), d_status);
      });
      CK(cudaGetLastError());
      Status st;
      CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(back.data(), d_back, n * eb, cudaMemcpyDeviceToHost));
      if (st != Status::ok || back != host)
        std::fprintf(stderr, "%s%s: block round trip FAILED\n", name.c_str(), t.suffix().c_str()), std::exit(1);
      CK(cudaMemcpy(sizes.data(), d_sizes, 8 * slices, cudaMemcpyDeviceToHost));
      uint64_t total = 0;
      for (uint64_t s : sizes) total += s;
      if (whole_gpu_total != 0 && total != whole_gpu_total)
        std::fprintf(stderr, "%s%s: block streams differ in size from the whole GPU's\n", name.c_str(),
                     t.suffix().c_str()),
            std::exit(1);
      whole_gpu_total = total;
      const double bratio = double(total) / double(n * eb);
      const std::string slices_ctas = code + ", 256Ki slices, ";
      add_row(t, "block encode (" + slices_ctas + std::to_string(grid_e) + " CTAs)", bratio, n * eb / benc_ms / 1e6,
              bratio, "zipcomm");
      add_row(t, "block decode (" + slices_ctas + std::to_string(grid_d) + " CTAs)", bratio, n * eb / bdec_ms / 1e6,
              bratio, "zipcomm");
    }
    CK(cudaFree(d_slots));
    CK(cudaFree(d_sizes));
  };
  block_rows(thread::PairCode{});
  block_rows(thread::FixedCode{});
#if ZIPCOMM_BENCH_WITH_NVCOMP
  // nvCOMP on the same input, once per data set; its ratio counts every byte a receiver needs.
  {
    for (const bench::nvcomp_peer::Config& config : bench::nvcomp_peer::kConfigs) {
      for (const bench::SmTarget& t : targets) {
        const auto m = bench::nvcomp_peer::measure(config, d_in, d_back, host, int(eb), reps,
                                                   name + " " + dt + " " + config.name + t.suffix(), t.stream);
        if (!m) continue;
        const std::string op = config.name;
        add_row(t, op + " encode", m->ratio, n * eb / m->encode_ms / 1e6, m->ratio, "nvcomp");
        add_row(t, op + " decode", m->ratio, n * eb / m->decode_ms / 1e6, m->ratio, "nvcomp");
      }
    }
  }
#endif
  CK(cudaFree(d_in));
  CK(cudaFree(d_back));
  CK(cudaFree(d_out));
  CK(cudaFree(d_bytes));
  CK(cudaFree(d_temp));
}

/// --chunk-sweep: device encode and decode of bf16 gradients against the message size, in each chunk size (the
/// figures behind format::default_chunk_log2). One row per size, chunk size and direction.
void chunk_sweep(const std::vector<uint8_t>& sample, int reps, int sms, std::vector<Row>& rows) {
  constexpr DType D = DType::bf16;
  using Code = thread::PairCode;
  const uint64_t sizes_mib[] = {4, 8, 16, 32, 64, 128, 256, 512, 1024};
  const uint64_t n_max = (sizes_mib[8] << 20) / 2;
  const uint64_t cap_max = format::max_compressed_bytes(D, n_max, format::MIN_CHUNK_LOG2);
  void *d_in, *d_out, *d_back, *d_temp;
  uint64_t* d_bytes;
  CK(cudaMalloc(&d_in, n_max * 2));
  CK(cudaMalloc(&d_back, n_max * 2));
  CK(cudaMalloc(&d_out, cap_max));
  CK(cudaMalloc(&d_bytes, 64));
  Status* d_status = reinterpret_cast<Status*>(d_bytes + 1);
  size_t temp_max = 0, dtemp_bytes = 0;
  CK(device::compress<D, Code>(nullptr, temp_max, d_in, n_max, d_out, cap_max, d_bytes, d_status, 0,
                               format::MIN_CHUNK_LOG2));
  CK(device::decompress<D, Code>(nullptr, dtemp_bytes, d_out, cap_max, d_back, n_max, d_status));
  CK(cudaMalloc(&d_temp, std::max(temp_max, dtemp_bytes)));
  for (uint64_t mib : sizes_mib) {
    const uint64_t n = (mib << 20) / 2;
    const std::vector<uint8_t> host = bench::tiled_sample(sample, n * 2, 2);
    CK(cudaMemcpy(d_in, host.data(), n * 2, cudaMemcpyHostToDevice));
    const double copy_tbps = bench::copy_roofline_tbps(n * 2, reps);
    for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2) {
      const uint64_t cap = format::max_compressed_bytes(D, n, log2);
      size_t temp_bytes = 0;
      CK(device::compress<D, Code>(nullptr, temp_bytes, d_in, n, d_out, cap, d_bytes, d_status, 0, log2));
      const std::string what = ", " + std::to_string(1u << log2) + "-element chunks" +
                               (log2 == format::default_chunk_log2(n) ? ", default)" : ")");
      const bench::DeviceTiming t =
          bench::time_device_codec<D, Code>("chunk sweep" + what, host, d_in, n, d_out, cap, d_back, d_temp,
                                            temp_bytes, dtemp_bytes, d_bytes, d_status, log2, reps, 0);
      const double ratio = double(t.bytes) / double(n * 2), roof = copy_tbps * 1e3 / (1.0 + ratio);
      const double enc = n * 2 / t.enc_ms / 1e6, dec = n * 2 / t.dec_ms / 1e6;
      rows.push_back({"llama_grads", "bf16", "device encode (pair" + what, double(mib), ratio, enc, 100 * enc / roof,
                      "zipcomm", sms, false});
      rows.push_back({"llama_grads", "bf16", "device decode (pair" + what, double(mib), ratio, dec, 100 * dec / roof,
                      "zipcomm", sms, false});
    }
  }
  CK(cudaFree(d_in));
  CK(cudaFree(d_back));
  CK(cudaFree(d_out));
  CK(cudaFree(d_temp));
  CK(cudaFree(d_bytes));
  std::printf("\nchunk sweep: bf16 gradients, device encode / decode GB/s (ratio) by message and chunk size, median "
              "of %d\n%-9s", reps, "message");
  for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2)
    std::printf(" %30s", (std::to_string(1u << log2) + "-element chunks").c_str());
  std::printf("  default\n");
  for (size_t i = 0; i < rows.size(); i += 6) {
    std::printf("%-9s", bench::human_bytes(uint64_t(rows[i].mib) << 20).c_str());
    for (size_t k = i; k < i + 6; k += 2)
      std::printf("  %8.1f / %8.1f (%.4f)", rows[k].gbps, rows[k + 1].gbps, rows[k].ratio);
    std::printf("  %u\n", 1u << format::default_chunk_log2((uint64_t(rows[i].mib) << 20) / 2));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options opt = bench::parse_options(argc, argv, /*with_sms=*/true);
  const std::string& data = opt.data;
  const std::string& json = opt.json;
  const uint64_t mib = opt.mib;
  const int reps = opt.reps;
  if (!bench::gpu_count("zipcomm_bench")) return 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));

  // Copy roofline: device-to-device copy, bytes read + written.
  const double copy_tbps = bench::copy_roofline_tbps(mib * 1024 * 1024, reps);

  // --sms: the same operations again on SM partitions (green contexts), each with the copy roofline of its SMs.
  const int all_sms = prop.multiProcessorCount;
  std::vector<std::unique_ptr<bench::SmPartition>> partitions;
  std::vector<double> partition_copy_tbps;
  const std::vector<bench::SmTarget> targets = bench::sm_targets("zipcomm_bench", opt.sms, all_sms, copy_tbps,
                                                                 mib * 1024 * 1024, reps, partitions,
                                                                 partition_copy_tbps);

  // Gaussian N(0, 0.02) reference data (bf16), freshly drawn.
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<uint8_t> gauss = bench::gaussian_bf16_sample(rng);
  std::vector<Row> rows;
  auto file = [&](const char* f) { return bench::read_data_file(data, f); };
  if (opt.chunk_sweep) {
    chunk_sweep(file("llama_grads.bf16"), reps, all_sms, rows);
    if (!json.empty()) {
      std::ofstream o(json);
      o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"sm_count\": " << all_sms << ",\n  \"reps\": " << reps
        << ",\n  \"rows\": [\n";
      bench::write_json_rows(o, rows, write_row_json);
      o << "  ]\n}\n";
    }
    return 0;
  }
  bench_dataset<DType::bf16>("llama_grads", file("llama_grads.bf16"), mib, reps, targets,
                                               opt.chunk_log2, rows);
  bench_dataset<DType::bf16>("llama_acts", file("llama_acts.bf16"), mib, reps, targets,
                                               opt.chunk_log2, rows);
  bench_dataset<DType::bf16>("llama_weights", file("llama_weights.bf16"), mib, reps, targets,
                                                   opt.chunk_log2, rows);
  bench_dataset<DType::bf16>("gaussian_0.02", gauss, mib, reps, targets, opt.chunk_log2, rows);
  bench_dataset<DType::fp16>("llama_grads_scaled", file("llama_grads_scaled.f16"), mib, reps,
                                                   targets, opt.chunk_log2, rows);
  bench_dataset<DType::fp32>("llama_grads", file("llama_grads.f32"), mib, reps, targets,
                                               opt.chunk_log2, rows);
  bench_dataset<DType::fp32>("tiny_lm_grads_autocast", file("tiny_lm_grads_autocast.f32"), mib, reps,
                                               targets, opt.chunk_log2, rows);
  bench_dataset<DType::fp32>("tiny_lm_grads_fp32", file("tiny_lm_grads_fp32.f32"), mib, reps,
                                               targets, opt.chunk_log2, rows);
  // fp8 with one amax scale per tensor (scripts/make_fp8_samples.py)
  for (const std::string t : {"llama_grads", "llama_acts", "llama_weights"}) {
    bench_dataset<DType::fp8_e4m3>(t, file((t + ".e4m3").c_str()), mib, reps, targets,
                                                     opt.chunk_log2, rows);
    bench_dataset<DType::fp8_e5m2>(t, file((t + ".e5m2").c_str()), mib, reps, targets,
                                                     opt.chunk_log2, rows);
  }

  std::printf("\nzipcomm codec benchmark on %s (%d SMs); %llu MiB per data set, median of %d\n", prop.name,
              prop.multiProcessorCount, (unsigned long long)mib, reps);
  std::printf("device copy roofline: %.2f TB/s (read + write)\n", copy_tbps);
#if ZIPCOMM_BENCH_WITH_NVCOMP
  const std::string nvcomp_version = bench::nvcomp_peer::version_string();
  std::printf("nvCOMP: %s\n\n", nvcomp_version.c_str());
#else
  std::printf("nvCOMP: not found (scripts/fetch-nvcomp.sh)\n\n");
#endif
  if (!partitions.empty()) {
    std::printf("SM partitions (--sms: CUDA green contexts; their rows end in \", N SMs\"):\n");
    for (size_t i = 0; i < partitions.size(); ++i) {
      const bench::SmPartition& p = *partitions[i];
      if (!p.ok()) {
        std::printf("  %d SMs: skipped: %s\n", p.requested(), p.why().c_str());
        continue;
      }
      const std::string reported = p.runtime_reported_sms() >= 0
                                       ? std::to_string(p.runtime_reported_sms()) + " SMs"
                                       : std::string("an error");
      std::printf("  %d SMs requested: green context of %d SMs (%s split); a probe kernel ran on %d distinct SMs\n"
                  "    copy kernel on them: %.3f TB/s (read + write); cudaDevAttrMultiProcessorCount with the green "
                  "context current: %s\n",
                  p.requested(), p.sms(), p.split(), p.observed_sms(), partition_copy_tbps[i], reported.c_str());
    }
    std::printf("  device rows: the library sizes its persistent grid for %d SMs x occupancy (cudaGetDevice + "
                "cudaDevAttrMultiProcessorCount,\n  the primary context current); on a partition the blocks beyond "
                "what its SMs hold wait and start as SMs free up,\n  finding no chunk left: what a user of the "
                "unchanged API gets. Block rows size their grid for the SMs they may use.\n  nvCOMP sizes its own "
                "grids. %%roof of partition rows: against the copy kernel on the same SMs.\n\n",
                all_sms);
  }
  std::printf("%-20s %-5s %-48s %7s %10s %8s %9s\n", "data", "dtype", "operation", "ratio", "GB/s", "GB/s/SM",
              "%roof");
  for (const Row& r : rows)
    std::printf("%-20s %-5s %-48s %7.4f %10.1f %8.2f %8.1f%%\n", r.data.c_str(), r.dtype.c_str(), r.what.c_str(),
                r.ratio, r.gbps, r.gbps / r.sms, r.roof_pct);
  std::printf("\nGB/s counts uncompressed bytes; GB/s/SM = GB/s / the SMs the operation could use (all %d on the "
              "whole GPU);\n%%roof = GB/s over the roofline of the bytes the operation moves: copy TB/s (read + "
              "write) / (1 + ratio).\n",
              all_sms);
  // The slowest device-wide and block-level row per partition and code: the per-SM figure a communication
  // kernel's share would see (block rows size their grid for the partition, device rows for the whole GPU).
  for (const bench::SmTarget& t : targets) {
    if (!t.partition) continue;
    for (const std::string level : {"device ", "block "})
      for (const std::string code : {"(pair", "(fixed"}) {
        const Row* slowest = nullptr;
        for (const Row& r : rows)
          if (r.partition && r.sms == t.sms && r.library == "zipcomm" && r.what.rfind(level, 0) == 0 &&
              r.what.find(code) != std::string::npos && (slowest == nullptr || r.gbps < slowest->gbps))
            slowest = &r;
        if (slowest != nullptr)
          std::printf("slowest zipcomm %srow on %d SMs, %s code: %.2f GB/s per SM (%s %s, %s)\n", level.c_str(),
                      t.sms, code.c_str() + 1, slowest->gbps / t.sms, slowest->data.c_str(), slowest->dtype.c_str(),
                      slowest->what.c_str());
      }
  }
#if ZIPCOMM_BENCH_WITH_NVCOMP
  std::printf("nvCOMP ratio: compressed chunks + %d bytes per chunk (its size, which a receiver needs).\n",
              int(bench::nvcomp_peer::kChunkSizeBytes));
#endif
  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"sm_count\": " << all_sms << ",\n  \"copy_tbps\": " << copy_tbps
      << ",\n  \"mib\": " << mib << ",\n  \"reps\": " << reps << ",\n  \"nvcomp\": ";
#if ZIPCOMM_BENCH_WITH_NVCOMP
    o << "\"" << nvcomp_version << "\"";
#else
    o << "null";
#endif
    // sms: the partition's SM count, 0 for the whole GPU; copy_tbps: the copy kernel on those SMs.
    o << ",\n  \"sm_partitions\": [";
    for (size_t i = 0; i < partitions.size(); ++i) {
      const bench::SmPartition& p = *partitions[i];
      o << (i ? ",\n" : "\n") << "    {\"requested\": " << p.requested();
      if (p.ok())
        o << ", \"sms\": " << p.sms() << ", \"split\": \"" << p.split() << "\", \"observed_sms\": " << p.observed_sms()
          << ", \"runtime_reported_sms\": " << p.runtime_reported_sms() << ", \"copy_tbps\": " << partition_copy_tbps[i]
          << "}";
      else
        o << ", \"skipped\": " << bench::json_string(p.why()) << "}";
    }
    o << (partitions.empty() ? "]" : "\n  ]") << ",\n  \"rows\": [\n";
    bench::write_json_rows(o, rows, write_row_json);
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
