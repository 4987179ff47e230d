// zipcomm fused-step benchmark: decode + reduce, decode + reduce + encode, decode + forward (device-wide),
// against the copy roofline measured in the same run and against the uncompressed reduce (what a ring hop
// does without compression). Prints a table and writes JSON.
//
// GB/s counts UNCOMPRESSED bytes of the message per second. %roof = the time the step's own memory traffic
// would take at copy speed, over the measured time:
//   decode + reduce          reads ratio*B + B, writes B
//   decode + reduce + encode reads ratio*B + B, writes ratio'*B (ratio' of the result)
//   decode + forward         reads ratio*B, writes B + ratio*B
//   uncompressed reduce      reads 2B, writes B
// Data: the real sample tiled to --mib MiB as the incoming message; the local operand is the same sample
// rotated by 1/3 (a second rank's values of the same kind).
// Usage: zipcomm_bench_fused [--data DIR] [--mib 256[,M...]] [--reps 20] [--json FILE]
// Several sizes (--mib 2,4,8,16,32,256: the hops of rings over a message) each get their own copy roofline.
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
#include <zipcomm/device/device_fused.cuh>
#include <zipcomm/host/reference_reduce.hpp>
#include <zipcomm/warp/lane_io.cuh>

using namespace zipcomm;

namespace {

/// The uncompressed hop: out = combine(acc, pre(local)), 8 elements a thread, vector loads.
template <DType D>
__global__ void uncompressed_reduce(const void* acc, const void* local, void* out, uint64_t n, ReduceOp op) {
  for (uint64_t first = (blockIdx.x * uint64_t(blockDim.x) + threadIdx.x) * 8; first < n;
       first += uint64_t(gridDim.x) * blockDim.x * 8) {
    const uint32_t cnt = uint32_t(std::min<uint64_t>(8, n - first));
    uint32_t x[8], y[8];
    warp::load_items<D, true>(acc, first, cnt, x);
    warp::load_items<D, true>(local, first, cnt, y);
    thread::reduce_items<D>(op, x, y);
    warp::store_items<D, true>(out, first, cnt, x);
  }
}

struct Row {
  std::string data, dtype, op, what;
  double ratio, gbps, roof_pct, ms;
  uint64_t mib = 0;
  double copy_tbps = 0;
};

template <DType D, class Code>
void bench_dataset(const std::string& name, const std::vector<uint8_t>& sample, uint64_t mib, int reps,
                   double copy_tbps, const std::vector<ReduceOp>& ops, std::vector<Row>& rows) {
  const uint64_t eb = format::elem_bytes(D), n = mib * 1024 * 1024 / eb, B = n * eb;
  const std::vector<uint8_t> a = bench::tiled_sample(sample, B, eb);
  std::vector<uint8_t> b(B);
  const uint64_t shift = (sample.size() / 3) / eb * eb;
  for (uint64_t i = 0; i < B; ++i) b[i] = a[(i + shift) % B];
  const uint64_t cap = format::max_compressed_bytes(D, n);
  uint8_t *d_a, *d_b, *d_out, *d_stream, *d_enc, *d_fwd, *d_temp;
  uint64_t* d_bytes;
  Status* d_status;
  CK(cudaMalloc(&d_a, B));
  CK(cudaMalloc(&d_b, B));
  CK(cudaMalloc(&d_out, B));
  CK(cudaMalloc(&d_stream, cap));
  CK(cudaMalloc(&d_enc, cap));
  CK(cudaMalloc(&d_fwd, cap));
  CK(cudaMalloc(&d_bytes, 64));
  d_status = reinterpret_cast<Status*>(d_bytes + 1);
  CK(cudaMemcpy(d_a, a.data(), B, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_b, b.data(), B, cudaMemcpyHostToDevice));
  size_t temp_bytes = 0, fused_temp_bytes = 0;
  CK(device::compress<D, Code>(nullptr, temp_bytes, d_a, n, d_stream, cap, d_bytes, d_status));
  CK(device::decompress_reduce_compress<D, Code>(nullptr, fused_temp_bytes, d_stream, cap, d_b, n, ReduceOp::sum(),
                                                 d_enc, cap, d_bytes, d_status));
  const size_t temp_cap = std::max(temp_bytes, fused_temp_bytes);
  CK(cudaMalloc(&d_temp, temp_cap));
  auto check = [&](const char* what) {
    Status st;
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
    if (st != Status::ok) std::fprintf(stderr, "%s: status %s\n", what, status_string(st)), std::exit(1);
  };
  CK(device::compress<D, Code>(d_temp, temp_bytes, d_a, n, d_stream, cap, d_bytes, d_status));
  check("compress");
  uint64_t in_bytes = 0;
  CK(cudaMemcpy(&in_bytes, d_bytes, 8, cudaMemcpyDeviceToHost));
  const double ratio = double(in_bytes) / double(B);
  const std::string code = Code::ID == CodeId::fixed ? " (fixed code)" : "";  // the pair code unmarked
  const double gbs_per_ms = double(B) / 1e6;  // GB/s = B / ms / 1e6
  auto roof_ms = [&](double moved) { return moved / (copy_tbps * 1e12) * 1e3; };

  for (const ReduceOp& op : ops) {
    const std::string opn = reduce_op_name(op.id);
    size_t tb = temp_cap;
    // uncompressed
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int grid = sms * 16;  // 16 blocks of 256 threads per SM: full occupancy, grid-stride beyond
    const double raw_ms = bench::median_ms(reps, [&] { uncompressed_reduce<D><<<grid, 256>>>(d_a, d_b, d_out, n, op); });
    CK(cudaGetLastError());
    if (Code::ID == CodeId::pair)  // the same for both codes
      rows.push_back({name, dtype_name(D), opn, "uncompressed reduce (2 reads, 1 write)", 1.0, gbs_per_ms / raw_ms,
                      100.0 * roof_ms(3.0 * B) / raw_ms, raw_ms});
    std::vector<uint8_t> want(B);
    CK(cudaMemcpy(want.data(), d_out, B, cudaMemcpyDeviceToHost));

    const double dr_ms = bench::median_ms(reps, [&] {
      CK(device::decompress_reduce<D, Code>(d_temp, tb, d_stream, in_bytes, d_b, d_out, n, op, d_status));
    });
    check("decompress_reduce");
    std::vector<uint8_t> got(B);
    CK(cudaMemcpy(got.data(), d_out, B, cudaMemcpyDeviceToHost));
    if (got != want) std::fprintf(stderr, "decompress_reduce result differs from the uncompressed reduce\n"), std::exit(1);
    rows.push_back({name, dtype_name(D), opn, std::string("decode + reduce") + code, ratio, gbs_per_ms / dr_ms,
                    100.0 * roof_ms((ratio + 2.0) * B) / dr_ms, dr_ms});

    const double dre_ms = bench::median_ms(reps, [&] {
      CK(device::decompress_reduce_compress<D, Code>(d_temp, tb, d_stream, in_bytes, d_b, n, op, d_enc, cap, d_bytes,
                                               d_status));
    });
    check("decompress_reduce_compress");
    uint64_t out_bytes = 0;
    CK(cudaMemcpy(&out_bytes, d_bytes, 8, cudaMemcpyDeviceToHost));
    // the re-encoded result decodes to the uncompressed reduce's result
    CK(device::decompress<D, Code>(d_temp, tb, d_enc, out_bytes, d_out, n, d_status));
    check("decompress");
    CK(cudaMemcpy(got.data(), d_out, B, cudaMemcpyDeviceToHost));
    if (got != want) std::fprintf(stderr, "decompress_reduce_compress result differs\n"), std::exit(1);
    const double ratio_out = double(out_bytes) / double(B);
    rows.push_back({name, dtype_name(D), opn, std::string("decode + reduce + encode") + code, ratio_out,
                    gbs_per_ms / dre_ms,
                    100.0 * roof_ms((ratio + 1.0 + ratio_out) * B) / dre_ms, dre_ms});
  }
  {
    size_t tb = temp_cap;
    const double fwd_ms = bench::median_ms(reps, [&] {
      CK(device::decompress_forward<D, Code>(d_temp, tb, d_stream, in_bytes, d_out, n, d_fwd, cap, d_status));
    });
    check("decompress_forward");
    std::vector<uint8_t> got(B), s1(in_bytes), s2(in_bytes);
    CK(cudaMemcpy(got.data(), d_out, B, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(s1.data(), d_stream, in_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(s2.data(), d_fwd, in_bytes, cudaMemcpyDeviceToHost));
    if (got != a || s1 != s2) std::fprintf(stderr, "decompress_forward result differs\n"), std::exit(1);
    rows.push_back({name, dtype_name(D), "-", std::string("decode + forward") + code, ratio, gbs_per_ms / fwd_ms,
                    100.0 * roof_ms((2.0 * ratio + 1.0) * B) / fwd_ms, fwd_ms});
    const double dec_ms = bench::median_ms(reps, [&] {
      CK(device::decompress<D, Code>(d_temp, tb, d_stream, in_bytes, d_out, n, d_status));
    });
    rows.push_back({name, dtype_name(D), "-", std::string("decode alone (reference)") + code, ratio,
                    gbs_per_ms / dec_ms,
                    100.0 * roof_ms((ratio + 1.0) * B) / dec_ms, dec_ms});
    const double enc_ms = bench::median_ms(reps, [&] {
      CK(device::compress<D, Code>(d_temp, tb, d_a, n, d_enc, cap, d_bytes, d_status));
    });
    rows.push_back({name, dtype_name(D), "-", std::string("encode alone (reference)") + code, ratio,
                    gbs_per_ms / enc_ms,
                    100.0 * roof_ms((ratio + 1.0) * B) / enc_ms, enc_ms});
  }
  for (void* p : {(void*)d_a, (void*)d_b, (void*)d_out, (void*)d_stream, (void*)d_enc, (void*)d_fwd, (void*)d_bytes,
                  (void*)d_temp})
    CK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options opt = bench::parse_options(argc, argv, /*codec=*/false, /*sizes=*/true);
  const std::string& data = opt.data;
  const std::string& json = opt.json;
  const int reps = opt.reps;
  if (!bench::gpu_count("zipcomm_bench_fused")) return 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));

  auto file = [&](const char* f) { return bench::read_data_file(data, f); };
  const std::vector<uint8_t> bf16 = file("llama_grads.bf16"), fp16 = file("llama_grads_scaled.f16"),
                             fp32 = file("llama_grads.f32");
  std::vector<Row> rows;
  const std::vector<ReduceOp> all_ops = {ReduceOp::sum(), ReduceOp::prod(), ReduceOp::min(), ReduceOp::max(),
                                         ReduceOp::avg(8)};
  for (const uint64_t mib : opt.mibs) {
    const double copy_tbps = bench::copy_roofline_tbps(mib * 1024 * 1024, reps);
    const size_t first = rows.size();
    bench_dataset<DType::bf16, thread::PairCode>("llama_grads", bf16, mib, reps, copy_tbps, all_ops, rows);
    bench_dataset<DType::fp16, thread::PairCode>("llama_grads_scaled", fp16, mib, reps, copy_tbps, {ReduceOp::sum()},
                                                 rows);
    bench_dataset<DType::fp32, thread::PairCode>("llama_grads", fp32, mib, reps, copy_tbps, {ReduceOp::sum()}, rows);
    // The fixed code: sum only
    bench_dataset<DType::bf16, thread::FixedCode>("llama_grads", bf16, mib, reps, copy_tbps, {ReduceOp::sum()}, rows);
    bench_dataset<DType::fp16, thread::FixedCode>("llama_grads_scaled", fp16, mib, reps, copy_tbps,
                                                  {ReduceOp::sum()}, rows);
    bench_dataset<DType::fp32, thread::FixedCode>("llama_grads", fp32, mib, reps, copy_tbps, {ReduceOp::sum()}, rows);
    for (size_t i = first; i < rows.size(); ++i) rows[i].mib = mib, rows[i].copy_tbps = copy_tbps;
  }

  std::printf("\nzipcomm fused-step benchmark on %s (%d SMs); median of %d\n", prop.name, prop.multiProcessorCount,
              reps);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (i == 0 || rows[i - 1].mib != r.mib) {
      std::printf("\n%llu MiB messages; device copy roofline: %.2f TB/s (read + write)\n\n", (unsigned long long)r.mib,
                  r.copy_tbps);
      std::printf("%-19s %-5s %-4s %-53s %7s %9s %8s %7s\n", "data", "dtype", "op", "step", "ratio", "GB/s", "ms",
                  "%roof");
    }
    std::printf("%-19s %-5s %-4s %-53s %7.4f %9.1f %8.3f %6.1f%%\n", r.data.c_str(), r.dtype.c_str(), r.op.c_str(),
                r.what.c_str(), r.ratio, r.gbps, r.ms, r.roof_pct);
  }
  std::printf("\nGB/s counts uncompressed message bytes; %%roof = (bytes the step reads + writes) / copy TB/s,\n"
              "over the measured time. Every fused result was checked against the uncompressed path.\n");
  if (!json.empty()) {
    std::ofstream o(json);
    // copy_tbps and mib at the top are the first size's; each row has its own.
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"copy_tbps\": " << rows.front().copy_tbps
      << ",\n  \"mib\": " << opt.mib << ",\n  \"reps\": " << reps << ",\n  \"rows\": [\n";
    bench::write_json_rows(o, rows, [](std::ostream& o, const Row& r) {
      o << "{\"data\": \"" << r.data << "\", \"dtype\": \"" << r.dtype << "\", \"op\": \"" << r.op
        << "\", \"step\": \"" << r.what << "\", \"mib\": " << r.mib << ", \"copy_tbps\": " << r.copy_tbps
        << ", \"ratio\": " << r.ratio << ", \"gbps\": " << r.gbps << ", \"ms\": " << r.ms
        << ", \"roof_pct\": " << r.roof_pct << "}";
    });
    o << "  ]\n}\n";
  }
  return 0;
}
