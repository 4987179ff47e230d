// zipcomm_bench_p2p --batch COUNTxMIB[,...]: messages sent back to back over the pinned-host link, one transfer
// each against one batch (transfer_many) and one message of it all, coded and raw; --batch-trace adds the per-frame
// timeline of one coded batch.
#include <cmath>
#include <fstream>
#include <functional>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {
namespace {

/// --batch-trace: one coded batch with the kernels' per-frame stamps and every copy's events, from one origin (us):
/// where the link idles between messages.
void trace_batch(HostStagingLink<DType::bf16>& link, const std::vector<P2PMessage>& msgs, cudaStream_t stream) {
  const uint64_t frames_max = 4096;
  uint64_t *send_trace, *recv_trace, *origin;
  CK(cudaMalloc(&send_trace, frames_max * TRACE_STAMPS * 8));
  CK(cudaMalloc(&recv_trace, frames_max * TRACE_STAMPS * 8));
  CK(cudaMalloc(&origin, 8));
  // On `stream`, which the link's work follows: a legacy-stream memset could land after the stamps.
  CK(cudaMemsetAsync(send_trace, 0, frames_max * TRACE_STAMPS * 8, stream));
  CK(cudaMemsetAsync(recv_trace, 0, frames_max * TRACE_STAMPS * 8, stream));
  std::vector<cudaEvent_t> ev(1 + 8 * frames_max);
  for (cudaEvent_t& e : ev) CK(cudaEventCreate(&e));
  cudaEvent_t o_ev;
  CK(cudaEventCreate(&o_ev));
  link.set_trace(send_trace, recv_trace);
  link.set_copy_trace(ev.data(), ev.size());
  CK(cudaEventRecord(o_ev, stream));
  stamp_clock<<<1, 1, 0, stream>>>(origin);
  CK(cudaGetLastError());
  CK(link.transfer_many(msgs.data(), msgs.size(), stream));
  CK(cudaStreamSynchronize(stream));
  if (link.wait() != Status::ok) std::fprintf(stderr, "--batch-trace: the traced batch failed\n"), std::exit(1);
  link.set_trace(nullptr, nullptr);
  link.set_copy_trace(nullptr, 0);
  uint64_t o = 0;
  CK(cudaMemcpy(&o, origin, 8, cudaMemcpyDeviceToHost));
  std::vector<uint64_t> st(frames_max * TRACE_STAMPS), rt(frames_max * TRACE_STAMPS);
  CK(cudaMemcpy(st.data(), send_trace, st.size() * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rt.data(), recv_trace, rt.size() * 8, cudaMemcpyDeviceToHost));
  auto us = [&](uint64_t t) { return t ? double(int64_t(t - o)) / 1e3 : -1.0; };
  auto ev_us = [&](cudaEvent_t e) {  // -1: not recorded (a part the frame did not have)
    float ms = 0;
    if (cudaEventElapsedTime(&ms, o_ev, e) != cudaSuccess) return cudaGetLastError(), -1.0;
    return double(ms) * 1e3;
  };
  std::printf("  trace of one coded batch (us from one origin; send: taken/planes/published/slot free, copies of "
              "section B or the whole frame: d2h start/end, h2d start/end, recv: leader waiting/checked/decoded)\n");
  std::printf("  %5s | %8s %8s %8s %8s | %8s %8s %8s %8s | %8s %8s %8s\n", "frame", "taken", "planes",
              "publ", "free", "d2h>", "d2h<", "h2d>", "h2d<", "leader", "checked", "decoded");
  for (uint64_t g = 0; g < frames_max; ++g) {
    const uint64_t* a = &st[TRACE_STAMPS * g];
    const uint64_t* r = &rt[TRACE_STAMPS * g];
    if (!a[0] && !r[0]) break;
    const cudaEvent_t* c = &ev[1 + 8 * g + 4];  // section B (or the whole frame)
    std::printf("  %5llu | %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f\n",
                (unsigned long long)g, us(a[0]), us(a[1]), us(a[2]), us(a[3]), ev_us(c[0]), ev_us(c[1]),
                ev_us(c[2]), ev_us(c[3]), us(r[0]), us(r[1]), us(r[2]));
  }
  for (cudaEvent_t& e : ev) CK(cudaEventDestroy(e));
  CK(cudaEventDestroy(o_ev));
  CK(cudaFree(send_trace));
  CK(cudaFree(recv_trace));
  CK(cudaFree(origin));
}

}  // namespace

/// --batch COUNTxMIB[,...]: the weight-sync case, COUNT messages of MIB MiB each back to back (adjacent in one
/// buffer) over the pinned-host link (default options, coded whatever the size): one transfer per message (what a
/// caller of transfer() gets) against one batch (transfer_many: one pipeline), and the same bytes as one message,
/// each coded and raw, all in one run with a one-way device -> host copy of the same bytes (the link's roofline).
/// Rounds run every method in turn (the order rotating); medians. Every method is checked bit-exact.
int run_batch(const Options& opt) {
  if (!bench::gpu_count("zipcomm_bench_p2p --batch")) return 0;
  const std::string &data = opt.data, &specs = opt.batch_specs, &json = opt.json;
  std::vector<std::pair<uint64_t, uint64_t>> cases;  // (messages, MiB each)
  for (size_t at = 0; at < specs.size();) {
    size_t end = specs.find(',', at);
    if (end == std::string::npos) end = specs.size();
    unsigned long long k = 0, mib = 0;
    if (std::sscanf(specs.substr(at, end - at).c_str(), "%llux%llu", &k, &mib) != 2 || !k || !mib || k > 4096)
      return std::fprintf(stderr, "--batch: COUNTxMIB[,COUNTxMIB...], e.g. 16x64\n"), 2;
    cases.push_back({k, mib});
    at = end + 1;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaSetDevice(0));
  const std::vector<uint8_t> sample = read_gradients(data);
  uint64_t max_bytes = 0;
  for (const auto& c : cases) max_bytes = std::max(max_bytes, (c.first * c.second) << 20);
  uint8_t *src, *dst, *pinned;
  unsigned long long* diff;
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&diff, 8));
  CK(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault));
  fill_tiled(src, max_bytes, sample);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  HostStagingLink<DType::bf16> link;
  CK(link.init(0));
  const std::string link_name =
      std::string("pinned host, ") + (link.mode() == HostLinkMode::stream ? "stream" : "copy") + " mode";
  link.set_bypass_threshold(0);  // coded whatever the size: the comparison is coded against raw
  struct BatchRow {
    uint64_t messages, message_bytes;
    std::string method;
    double ms, gbps;
  };
  std::vector<BatchRow> rows;
  std::printf("data: %s/llama_grads.bf16 tiled; GPU: %s; link: %s\n", data.c_str(), prop.name, link_name.c_str());
  for (const auto& c : cases) {
    const uint64_t k = c.first, mib = c.second;
    const uint64_t mb = mib << 20, total = k * mb;
    std::vector<P2PMessage> msgs(k);
    for (uint64_t i = 0; i < k; ++i) msgs[i] = {src + i * mb, dst + i * mb, mb / 2};
    const P2PMessage whole = {src, dst, total / 2};
    auto fail = [&](const char* what) { std::fprintf(stderr, "--batch: %s failed\n", what), std::exit(1); };
    struct Method {
      const char* name;
      std::function<void()> run;
    };
    const Method methods[] = {
        {"raw, one transfer per message",
         [&] { for (const P2PMessage& m : msgs) CK(link.transfer_raw(m.src, m.dst, m.n, stream)); }},
        {"raw, one batch (transfer_raw_many)", [&] { CK(link.transfer_raw_many(msgs.data(), k, stream)); }},
        {"raw, one message of it all", [&] { CK(link.transfer_raw(whole.src, whole.dst, whole.n, stream)); }},
        {"coded, one transfer per message",
         [&] { for (const P2PMessage& m : msgs) CK(link.transfer_coded(m.src, m.dst, m.n, stream)); }},
        {"coded, one batch (transfer_many)", [&] { CK(link.transfer_many(msgs.data(), k, stream)); }},
        {"coded, one message of it all", [&] { CK(link.transfer_coded(whole.src, whole.dst, whole.n, stream)); }},
    };
    constexpr size_t M = sizeof(methods) / sizeof(methods[0]);
    auto run_timed = [&](const Method& m) {
      CK(cudaEventRecord(a, stream));
      m.run();
      CK(cudaEventRecord(b, stream));
      CK(cudaEventSynchronize(b));
      if (link.wait() != Status::ok) fail(m.name);
      return double(bench::elapsed_ms(a, b));
    };
    for (const Method& m : methods) {  // warm-up and bit-exact check of each
      CK(cudaMemsetAsync(dst, 0, total, stream));
      run_timed(m);
      CK(cudaMemsetAsync(diff, 0, 8, stream));
      count_diff<<<264, 256, 0, stream>>>(reinterpret_cast<const uint4*>(src), reinterpret_cast<const uint4*>(dst),
                                          total / 16, diff);
      unsigned long long d = 1;
      CK(cudaMemcpyAsync(&d, diff, 8, cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      if (d) std::fprintf(stderr, "--batch: %s: %llu differing words: NOT bit-exact\n", m.name, d), std::exit(1);
    }
    const int reps = std::max(3, int(std::lround(9 * opt.reps_scale)));
    std::vector<std::vector<double>> t(M);
    std::vector<double> roof;
    for (int r = 0; r < reps; ++r) {
      for (size_t j = 0; j < M; ++j) t[(j + r) % M].push_back(run_timed(methods[(j + r) % M]));
      CK(cudaEventRecord(a, stream));
      CK(cudaMemcpyAsync(pinned, src, total, cudaMemcpyDeviceToHost, stream));
      CK(cudaEventRecord(b, stream));
      CK(cudaEventSynchronize(b));
      roof.push_back(double(bench::elapsed_ms(a, b)));
    }
    const double roof_ms = bench::median(roof);
    std::printf("\n%llu x %llu MiB (%.2f GiB), %d rounds; one-way device -> host copy of it all: %.3f ms (%.1f GB/s)\n",
                (unsigned long long)k, (unsigned long long)mib, total / 1073741824.0, reps, roof_ms,
                total / roof_ms / 1e6);
    std::printf("  %-36s %10s %8s %18s\n", "method", "ms", "GB/s", "vs raw, same cut");
    rows.push_back({k, mb, "d2h copy one way (roofline)", roof_ms, total / roof_ms / 1e6});
    double med[M];
    for (size_t j = 0; j < M; ++j) med[j] = bench::median(t[j]);
    for (size_t j = 0; j < M; ++j) {
      const double gbps = total / med[j] / 1e6;
      std::printf("  %-36s %10.3f %8.1f", methods[j].name, med[j], gbps);
      if (j >= 3) std::printf(" %17.3fx", med[j - 3] / med[j]);
      std::printf("\n");
      rows.push_back({k, mb, methods[j].name, med[j], gbps});
    }
    std::printf("  coded batch against raw one transfer per message: %.3fx; against raw one batch: %.3fx\n",
                med[0] / med[4], med[1] / med[4]);
    std::fflush(stdout);
    if (opt.batch_trace) trace_batch(link, msgs, stream);
  }
  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"link\": \"" << link_name << "\",\n"
      << "  \"data\": \"" << data << "/llama_grads.bf16 tiled\",\n  \"rows\": [\n";
    bench::write_json_rows(o, rows, [](std::ostream& o, const BatchRow& r) {
      o << "{\"messages\": " << r.messages << ", \"message_bytes\": " << r.message_bytes << ", \"method\": \""
        << r.method << "\", \"ms\": " << r.ms << ", \"gbps\": " << r.gbps << "}";
    });
    o << "  ]\n}\n";
  }
  CK(cudaFree(src));
  CK(cudaFree(dst));
  CK(cudaFree(diff));
  CK(cudaFreeHost(pinned));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace p2p_bench
