// zipcomm quantization benchmark (LOSSY tier, "ZPQT"): device quantize and dequantize throughput on the real bf16
// tensors of tests/data, b = 4, 6, 8, G = 32, 128, asymmetric and symmetric, against the device copy roofline
// measured in the same run, with the lossless codec's encode and decode on the same data for comparison. Prints a
// table and writes JSON.
//
// GB/s counts UNCOMPRESSED (bf16) bytes per second: tensor bytes over the median time of --reps stream-ordered
// calls after 3 warm-ups (CUDA events). %roof = the time the operation's own traffic would take at copy speed
// over the measured time: quantize reads B and writes ratio * B, dequantize the other way round, so the roofline
// in uncompressed GB/s is copy TB/s (read + write) / (1 + ratio), as in zipcomm_bench. Each data set is a sample
// tiled to --mib MiB (whole periods of the sample, a multiple of every group size). Every message is checked
// against the host reference on the sample's period (the tiled tensor's groups repeat it), and every
// reconstruction against the host reference's.
// Usage: zipcomm_bench_quant [--data DIR] [--mib 256] [--reps 20] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench_common.cuh"

#include <zipcomm/device/device_codec.cuh>
#include <zipcomm/quant/device_quant.cuh>
#include <zipcomm/quant/reference_quant.hpp>

using namespace zipcomm;
using quant::QuantMode;

namespace {

struct Row {
  std::string data, operation, mode;
  uint32_t bits, group;  // 0 for the lossless codec's rows
  double ratio, gbps, ms, roof_pct;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "zipcomm_bench_quant: %s\n", what.c_str());
  std::exit(1);
}

/// The first `bytes` of device memory at p.
std::vector<uint8_t> download(const void* p, uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  CK(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost));
  return v;
}

Status device_status(const Status* d_status) {
  Status s;
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(&s, d_status, sizeof s, cudaMemcpyDeviceToHost));
  return s;
}

void bench_dataset(const std::string& name, const std::vector<uint8_t>& sample, uint64_t mib, int reps,
                   double copy_tbps, std::vector<Row>& rows) {
  constexpr DType D = DType::bf16;
  const uint64_t eb = 2, n = mib * 1024 * 1024 / eb, B = n * eb;
  const std::vector<uint8_t> host = bench::tiled_sample(sample, B, eb);
  const uint64_t period = std::min<uint64_t>(sample.size() / (256 * eb) * 256, n);  // elements, a multiple of 256
  const std::vector<uint8_t> head(host.begin(), host.begin() + period * eb);
  const uint64_t cap = std::max<uint64_t>(quant::max_quantized_bytes(QuantMode::asymmetric, 8, 32, n),
                                          format::max_compressed_bytes(D, n));
  uint8_t *d_in, *d_msg, *d_back, *d_temp;
  Status* d_status;
  uint64_t* d_bytes;
  CK(cudaMalloc(&d_in, B));
  CK(cudaMalloc(&d_back, B));
  CK(cudaMalloc(&d_msg, cap));
  CK(cudaMalloc(&d_bytes, 64));
  d_status = reinterpret_cast<Status*>(d_bytes + 1);
  CK(cudaMemcpy(d_in, host.data(), B, cudaMemcpyHostToDevice));
  const double gbs_per_ms = double(B) / 1e6;  // GB/s = B / ms / 1e6
  // moved: bytes the step reads and writes per tensor byte beyond the message (1: a tensor written or read)
  auto roof_pct = [&](double ratio, double ms, double moved = 1.0) {
    return 100.0 * (gbs_per_ms / ms) / (copy_tbps * 1e3 / (moved + ratio));
  };

  for (QuantMode mode : {QuantMode::asymmetric, QuantMode::symmetric})
    for (uint32_t bits : {4u, 6u, 8u})
      for (uint32_t group : {32u, 128u}) {
        const std::string config = std::string(mode == QuantMode::asymmetric ? "asym" : "sym") + " b=" +
                                   std::to_string(bits) + " G=" + std::to_string(group);
        const quant::Layout l = quant::layout_for(mode, bits, group, n);
        const double q_ms = bench::median_ms(reps, [&] {
          CK(quant::device::quantize(d_in, n, D, mode, bits, group, d_msg, l.total_bytes, d_status));
        });
        if (device_status(d_status) != Status::ok) fail(name + " " + config + ": quantize status not ok");
        CK(cudaMemset(d_back, 0xA5, B));  // an earlier configuration's output cannot pass for this one's
        const double dq_ms = bench::median_ms(reps, [&] {
          CK(quant::device::dequantize(d_msg, l.total_bytes, D, d_back, B, d_status));
        });
        if (device_status(d_status) != Status::ok) fail(name + " " + config + ": dequantize status not ok");

        // The host reference on the sample's period: the same parameters, codes and reconstruction.
        const quant::Layout lh = quant::layout_for(mode, bits, group, period);
        std::vector<uint8_t> ref(lh.total_bytes);
        uint64_t ref_bytes = 0;
        if (quant::host::quantize(D, mode, bits, group, head.data(), period, ref.data(), ref.size(), &ref_bytes) !=
            Status::ok)
          fail(name + " " + config + ": host reference refused the sample");
        const std::vector<uint8_t> params = download(d_msg + l.params_offset, lh.params_bytes);
        const std::vector<uint8_t> codes = download(d_msg + l.codes_offset, lh.codes_bytes);
        if (std::memcmp(params.data(), ref.data() + lh.params_offset, lh.params_bytes) != 0 ||
            std::memcmp(codes.data(), ref.data() + lh.codes_offset, lh.codes_bytes) != 0)
          fail(name + " " + config + ": device message differs from the host reference");
        std::vector<uint8_t> ref_back(period * eb);
        const uint64_t last = (n / period - 1) * period;  // the last whole period
        if (quant::host::dequantize(ref.data(), ref.size(), ref_back.data(), ref_back.size()) != Status::ok ||
            download(d_back, period * eb) != ref_back || download(d_back + last * eb, period * eb) != ref_back)
          fail(name + " " + config + ": device reconstruction differs from the host reference");

        const double ratio = double(l.total_bytes) / double(B);
        const std::string m = quant::mode_name(mode);
        rows.push_back({name, "quantize " + config, m, bits, group, ratio, gbs_per_ms / q_ms, q_ms,
                        roof_pct(ratio, q_ms)});
        rows.push_back({name, "dequantize " + config, m, bits, group, ratio, gbs_per_ms / dq_ms, dq_ms,
                        roof_pct(ratio, dq_ms)});
        if (mode != QuantMode::asymmetric || bits != 6 || group != 128) continue;
        // The receive side's fused steps on this choice: + reduce (sum into the tensor itself as the local
        // operand: reads it and the message, writes the result) and + forward (the message copied on too).
        const double r_ms = bench::median_ms(reps, [&] {
          CK(quant::device::dequantize_reduce(d_msg, l.total_bytes, D, d_in, d_back, n, ReduceOp::sum(), d_status));
        });
        std::vector<uint8_t> ref_sum(period * eb);
        if (device_status(d_status) != Status::ok ||
            zipcomm::host::reduce(D, ReduceOp::sum(), ref_back.data(), head.data(), ref_sum.data(), period) !=
                Status::ok ||
            download(d_back, period * eb) != ref_sum)
          fail(name + " " + config + ": dequantize + reduce differs from the host reference");
        uint8_t* d_fwd = nullptr;
        CK(cudaMalloc(&d_fwd, l.total_bytes));
        const double f_ms = bench::median_ms(reps, [&] {
          CK(quant::device::dequantize_forward(d_msg, l.total_bytes, D, d_back, B, d_fwd, l.total_bytes, d_status));
        });
        if (device_status(d_status) != Status::ok || download(d_fwd, l.total_bytes) != download(d_msg, l.total_bytes) ||
            download(d_back, period * eb) != ref_back)
          fail(name + " " + config + ": dequantize + forward differs from the host reference");
        CK(cudaFree(d_fwd));
        rows.push_back({name, "dequantize + reduce " + config, m, bits, group, ratio, gbs_per_ms / r_ms, r_ms,
                        roof_pct(ratio, r_ms, 2.0)});
        rows.push_back({name, "dequantize + forward " + config, m, bits, group, ratio, gbs_per_ms / f_ms, f_ms,
                        roof_pct(2.0 * ratio, f_ms)});
      }

  // The lossless codec on the same tensor.
  size_t temp_bytes = 0, dtemp_bytes = 0;
  CK(device::compress<D>(nullptr, temp_bytes, d_in, n, d_msg, cap, d_bytes, d_status));
  CK(device::decompress<D>(nullptr, dtemp_bytes, d_msg, cap, d_back, n, d_status));
  CK(cudaMalloc(&d_temp, std::max(temp_bytes, dtemp_bytes)));
  const double enc_ms = bench::median_ms(reps, [&] {
    CK(device::compress<D>(d_temp, temp_bytes, d_in, n, d_msg, cap, d_bytes, d_status));
  });
  if (device_status(d_status) != Status::ok) fail(name + ": lossless compress status not ok");
  uint64_t bytes = 0;
  CK(cudaMemcpy(&bytes, d_bytes, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemset(d_back, 0xA5, B));
  const double dec_ms = bench::median_ms(reps, [&] {
    CK(device::decompress<D>(d_temp, dtemp_bytes, d_msg, bytes, d_back, n, d_status));
  });
  if (device_status(d_status) != Status::ok || download(d_back, B) != host)
    fail(name + ": lossless round trip FAILED");
  const double ratio = double(bytes) / double(B);
  rows.push_back({name, "lossless encode (pair code)", "-", 0, 0, ratio, gbs_per_ms / enc_ms, enc_ms,
                  roof_pct(ratio, enc_ms)});
  rows.push_back({name, "lossless decode (pair code)", "-", 0, 0, ratio, gbs_per_ms / dec_ms, dec_ms,
                  roof_pct(ratio, dec_ms)});
  for (void* p : {(void*)d_in, (void*)d_back, (void*)d_msg, (void*)d_bytes, (void*)d_temp}) CK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options opt = bench::parse_options(argc, argv);
  if (!bench::gpu_count("zipcomm_bench_quant")) return 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double copy_tbps = bench::copy_roofline_tbps(opt.mib * 1024 * 1024, opt.reps);

  std::vector<Row> rows;
  for (const char* file : {"llama_grads.bf16", "llama_acts.bf16", "llama_weights.bf16"}) {
    std::string name = file;
    name.resize(name.size() - 5);  // without ".bf16"
    bench_dataset(name, bench::read_data_file(opt.data, file), opt.mib, opt.reps, copy_tbps, rows);
  }

  std::printf("\nzipcomm quantization benchmark (LOSSY tier) on %s (%d SMs); bf16, %llu MiB per data set, median "
              "of %d\n",
              prop.name, prop.multiProcessorCount, (unsigned long long)opt.mib, opt.reps);
  std::printf("device copy roofline: %.2f TB/s (read + write)\n\n", copy_tbps);
  std::printf("%-14s %-30s %7s %9s %8s %7s\n", "data", "operation", "ratio", "GB/s", "ms", "%roof");
  double min_roof = 1e9;
  const Row* slowest = nullptr;
  for (const Row& r : rows) {
    std::printf("%-14s %-30s %7.4f %9.1f %8.3f %6.1f%%\n", r.data.c_str(), r.operation.c_str(), r.ratio, r.gbps, r.ms,
                r.roof_pct);
    if (r.bits && r.roof_pct < min_roof) min_roof = r.roof_pct, slowest = &r;
  }
  std::printf("\nGB/s counts uncompressed bf16 bytes; ratio = message bytes / tensor bytes; %%roof = GB/s over copy "
              "TB/s (read + write) / (1 + ratio) (+ reduce: 2 + ratio; + forward: 1 + 2 ratio).\nEvery device message and reconstruction was checked against the "
              "host reference on the sample's period.\n");
  if (slowest)
    std::printf("slowest quantization row: %.1f%% of the roofline (%s, %s); target >= 80%%\n", min_roof,
                slowest->data.c_str(), slowest->operation.c_str());
  if (!opt.json.empty()) {
    std::ofstream o(opt.json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"sm_count\": " << prop.multiProcessorCount
      << ",\n  \"copy_tbps\": " << copy_tbps << ",\n  \"mib\": " << opt.mib << ",\n  \"reps\": " << opt.reps
      << ",\n  \"dtype\": \"bf16\",\n  \"rows\": [\n";
    bench::write_json_rows(o, rows, [](std::ostream& o, const Row& r) {
      o << "{\"data\": \"" << r.data << "\", \"operation\": \"" << r.operation << "\", \"mode\": \"" << r.mode
        << "\", \"bits\": " << r.bits << ", \"group\": " << r.group << ", \"ratio\": " << r.ratio
        << ", \"gbps\": " << r.gbps << ", \"ms\": " << r.ms << ", \"roof_pct\": " << r.roof_pct << "}";
    });
    o << "  ]\n}\n";
  }
  return 0;
}
