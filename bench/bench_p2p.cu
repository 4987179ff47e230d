// zipcomm P2P benchmark: effective bandwidth of a GPU -> pinned host -> GPU transfer against message size: the
// HostStagingLink (stream mode, and copy mode, its fallback; --modes) coded always and as used after calibrate()
// (raw below the measured bypass threshold), against the raw pipelined copy-engine transfer (best chunk of a sweep,
// and timed in pairs with the link), measured in the same run on real bf16 gradients. Prints a table and writes
// JSON (bench/plot_p2p.py draws the curve).
//
// Effective GB/s = message bytes / time from the start of the transfer until the receiver holds every element
// (decoded), CUDA events on the caller's stream; median of reps after warm-ups. Every measured configuration is
// checked bit-exact once per size.
// --sweep first times variants of the link's knobs (ring depth, frames, copy pieces, budget margin, grids, copy
// mode) at 64 and 256 MiB (--sweep-mib A,B: other sizes; --sweep-only TEXT: the variants whose name contains it;
// --variant NAME:KEY=VALUE,...: any combination of options, see parse_variant; --curve-variant: one on the curve
// too). --trace prints per-frame timelines of the default link at 64 MiB: the kernels' stamps and each copy's start
// and end (--trace-mib M: another size; --trace-variant SPEC: trace that option set too; --trace-light: the
// kernels' stamps only, no copy events, and the transfer queued behind a hold so that it runs in GPU time as the
// sweep times it). --chain-probe times stream mode's copy chain with coding free.
// --batch COUNTxMIB[,...] measures messages sent back to back (transfer_many against one transfer each; see
// run_batch) instead of the curve.
// --peer measures PeerLink from GPU 0 to GPU 1 instead (the pinned-host part does not run; skipped with a message
// when there are fewer than two GPUs with peer access): raw cudaMemcpyPeerAsync, SM copies over the link (push
// from GPU 0, pull from GPU 1), the link coded always and as used after calibrate(), per size; bit-exact once per
// size (checked on GPU 1 against a copy of the source made there); whether calibrate()'s switch picked the faster
// of coded and raw at every size; a few knob variants at 64 and 256 MiB.
// Usage: zipcomm_bench_p2p [--data DIR] [--max-mib 1024] [--min-kib 1] [--json FILE] [--reps-scale X] [--sweep]
//        [--sweep-only TEXT] [--sweep-mib A,B] [--variant SPEC] [--curve-variant SPEC] [--chain-probe] [--trace]
//        [--trace-light] [--trace-mib M] [--trace-variant SPEC] [--no-curve] [--modes stream,copy] [--peer]
//        [--batch COUNTxMIB[,...]] [--batch-trace]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#include "example_common.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;
using examples::count_diff;

namespace {

// SM copy over a peer link (what PeerLink's sender does): 16-byte loads and stores, grid-stride.
__global__ void sm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t n16) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += uint64_t(gridDim.x) * blockDim.x)
    dst[i] = __ldcv(src + i);
}

// The trace's origin on the kernels' clock (%globaltimer, the clock the link's kernels stamp with).
__global__ void stamp_clock(uint64_t* out) { *out = zipcomm::detail::global_timer_ns(); }

struct Row {
  uint64_t bytes;
  std::string method;
  double ms, gbps;
  std::string note;
};

std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string human(uint64_t b) {
  char s[32];
  if (b >= (uint64_t(1) << 30))
    std::snprintf(s, sizeof s, "%llu GiB", (unsigned long long)(b >> 30));
  else if (b >= (uint64_t(1) << 20))
    std::snprintf(s, sizeof s, "%llu MiB", (unsigned long long)(b >> 20));
  else
    std::snprintf(s, sizeof s, "%llu KiB", (unsigned long long)(b >> 10));
  return s;
}

/// Elapsed ms of CUDA events a (before) and b (after).
float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

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

/// --batch COUNTxMIB[,...]: the weight-sync case, COUNT messages of MIB MiB each back to back (adjacent in one
/// buffer) over the pinned-host link (default options, coded whatever the size): one transfer per message (what a
/// caller of transfer() gets) against one batch (transfer_many: one pipeline), and the same bytes as one message,
/// each coded and raw, all in one run with a one-way device -> host copy of the same bytes (the link's roofline).
/// Rounds run every method in turn (the order rotating); medians. Every method is checked bit-exact.
int run_batch(const std::string& data, const std::string& specs, double reps_scale, const std::string& json,
              bool trace) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("zipcomm_bench_p2p --batch: no GPU on this machine; nothing measured.\n");
    return 0;
  }
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
  const std::vector<uint8_t> sample = read_file(data + "/llama_grads.bf16");
  if (sample.size() < 1024) return std::fprintf(stderr, "missing %s/llama_grads.bf16\n", data.c_str()), 1;
  uint64_t max_bytes = 0;
  for (const auto& c : cases) max_bytes = std::max(max_bytes, (c.first * c.second) << 20);
  uint8_t *src, *dst, *pinned;
  unsigned long long* diff;
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&diff, 8));
  CK(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault));
  for (uint64_t off = 0; off < max_bytes; off += sample.size())
    CK(cudaMemcpy(src + off, sample.data(), std::min<uint64_t>(sample.size(), max_bytes - off),
                  cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());  // a copy from pageable memory may still be landing; the link's streams do not wait
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
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      return double(ms);
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
    const int reps = std::max(3, int(std::lround(9 * reps_scale)));
    std::vector<std::vector<double>> t(M);
    std::vector<double> roof;
    for (int r = 0; r < reps; ++r) {
      for (size_t j = 0; j < M; ++j) t[(j + r) % M].push_back(run_timed(methods[(j + r) % M]));
      CK(cudaEventRecord(a, stream));
      CK(cudaMemcpyAsync(pinned, src, total, cudaMemcpyDeviceToHost, stream));
      CK(cudaEventRecord(b, stream));
      CK(cudaEventSynchronize(b));
      roof.push_back(double(elapsed(a, b)));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double roof_ms = median(roof);
    std::printf("\n%llu x %llu MiB (%.2f GiB), %d rounds; one-way device -> host copy of it all: %.3f ms (%.1f GB/s)\n",
                (unsigned long long)k, (unsigned long long)mib, total / 1073741824.0, reps, roof_ms,
                total / roof_ms / 1e6);
    std::printf("  %-36s %10s %8s %18s\n", "method", "ms", "GB/s", "vs raw, same cut");
    rows.push_back({k, mb, "d2h copy one way (roofline)", roof_ms, total / roof_ms / 1e6});
    double med[M];
    for (size_t j = 0; j < M; ++j) med[j] = median(t[j]);
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
    if (trace) trace_batch(link, msgs, stream);
  }
  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"link\": \"" << link_name << "\",\n"
      << "  \"data\": \"" << data << "/llama_grads.bf16 tiled\",\n  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const BatchRow& r = rows[i];
      o << "    {\"messages\": " << r.messages << ", \"message_bytes\": " << r.message_bytes << ", \"method\": \""
        << r.method << "\", \"ms\": " << r.ms << ", \"gbps\": " << r.gbps << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
    }
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

/// --peer: PeerLink<bf16> from GPU 0 to GPU 1 against the raw peer copies. Returns the exit code.
int run_peer(const std::string& data, uint64_t max_mib, uint64_t min_kib, double reps_scale, const std::string& json) {
  constexpr int S = 0, R = 1;  // send and receive devices
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::printf("zipcomm_bench_p2p --peer: %d GPU(s) here; the peer link needs two: nothing measured (skipped).\n",
                count);
    return 0;
  }
  int can_sr = 0, can_rs = 0;
  CK(cudaDeviceCanAccessPeer(&can_sr, S, R));
  CK(cudaDeviceCanAccessPeer(&can_rs, R, S));
  if (!can_sr || !can_rs) {
    std::printf("zipcomm_bench_p2p --peer: GPU 0 and GPU 1 have no peer access to each other: nothing measured "
                "(skipped).\n");
    return 0;
  }
  for (int k = 0; k < 2; ++k) {
    CK(cudaSetDevice(k == 0 ? S : R));
    const cudaError_t e = cudaDeviceEnablePeerAccess(k == 0 ? R : S, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    else CK(e);
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, S));
  int perf_rank = -1, atomics = -1;
  CK(cudaDeviceGetP2PAttribute(&perf_rank, cudaDevP2PAttrPerformanceRank, S, R));
  CK(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, S, R));
  const std::vector<uint8_t> sample = read_file(data + "/llama_grads.bf16");
  if (sample.size() < 1024) {
    std::fprintf(stderr, "missing %s/llama_grads.bf16\n", data.c_str());
    return 1;
  }
  const uint64_t max_bytes = max_mib << 20;
  // src (GPU 0): the sample tiled; ref (GPU 1): a copy of src to check against; dst (GPU 1): where transfers land.
  uint8_t *src, *dst, *ref;
  unsigned long long* diff;
  cudaStream_t s0, s1;
  CK(cudaSetDevice(S));
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMemcpy(src, sample.data(), std::min<uint64_t>(sample.size(), max_bytes), cudaMemcpyHostToDevice));
  for (uint64_t have = std::min<uint64_t>(sample.size(), max_bytes); have < max_bytes;) {
    const uint64_t c = std::min(have, max_bytes - have);
    CK(cudaMemcpy(src + have, src, c, cudaMemcpyDeviceToDevice));
    have += c;
  }
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(R));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&ref, max_bytes));
  CK(cudaMalloc(&diff, 8));
  CK(cudaMemcpyPeer(ref, R, src, S, max_bytes));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t a, b, pushed;  // timing events on the receiving GPU's stream; `pushed`: GPU 0's push copy is done
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(S));
  CK(cudaEventCreateWithFlags(&pushed, cudaEventDisableTiming));

  // Time of `run` (enqueues one transfer ordered after s1's event a, with s1 done when the receiver holds it):
  // events a, b on s1 (GPU 1); s0 waits for a so that the send side cannot start before the timer. Median.
  auto time_ms = [&](int reps, auto&& run, auto&& wait) {
    std::vector<float> t;
    for (int i = -2; i < reps; ++i) {  // two warm-ups
      CK(cudaSetDevice(R));
      CK(cudaEventRecord(a, s1));
      CK(cudaSetDevice(S));
      CK(cudaStreamWaitEvent(s0, a, 0));
      run();
      CK(cudaSetDevice(R));
      CK(cudaEventRecord(b, s1));
      CK(cudaEventSynchronize(b));
      wait();
      if (i >= 0) t.push_back(elapsed(a, b));
    }
    CK(cudaSetDevice(S));
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  };
  auto nowait = [] {};
  // dst == ref on GPU 1 (count_diff runs on the destination device), then dst cleared for the next check.
  auto verify = [&](uint64_t bytes, const std::string& what) {
    CK(cudaSetDevice(R));
    CK(cudaMemset(diff, 0, 8));
    count_diff<<<264, 256>>>(reinterpret_cast<const uint4*>(ref), reinterpret_cast<const uint4*>(dst), bytes / 16,
                             diff);
    unsigned long long d = 1;
    CK(cudaMemcpy(&d, diff, 8, cudaMemcpyDeviceToHost));
    if (d != 0) {
      std::fprintf(stderr, "%s at %llu bytes: %llu differing 16-byte words: NOT bit-exact\n", what.c_str(),
                   (unsigned long long)bytes, d);
      std::exit(1);
    }
    CK(cudaMemset(dst, 0, bytes));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(S));
  };
  // the raw movers; each leaves s1 done once dst holds the message
  auto ce_copy = [&](uint64_t bytes) {
    CK(cudaSetDevice(R));
    CK(cudaMemcpyPeerAsync(dst, R, src, S, bytes, s1));
    CK(cudaSetDevice(S));
  };
  auto sm_push = [&](uint64_t bytes) {  // GPU 0's SMs store into GPU 1's memory
    CK(cudaSetDevice(S));
    sm_copy<<<prop.multiProcessorCount * 4, 256, 0, s0>>>(reinterpret_cast<const uint4*>(src),
                                                          reinterpret_cast<uint4*>(dst), bytes / 16);
    CK(cudaGetLastError());
    CK(cudaEventRecord(pushed, s0));
    CK(cudaSetDevice(R));
    CK(cudaStreamWaitEvent(s1, pushed, 0));
    CK(cudaSetDevice(S));
  };
  auto sm_pull = [&](uint64_t bytes) {  // GPU 1's SMs load from GPU 0's memory
    CK(cudaSetDevice(R));
    sm_copy<<<prop.multiProcessorCount * 4, 256, 0, s1>>>(reinterpret_cast<const uint4*>(src),
                                                          reinterpret_cast<uint4*>(dst), bytes / 16);
    CK(cudaGetLastError());
    CK(cudaSetDevice(S));
  };
  auto link_wait = [](PeerLink<DType::bf16>& l, const char* what, uint64_t bytes) {
    const Status st = l.wait();
    if (st != Status::ok) {
      std::fprintf(stderr, "peer link (%s): %s at %llu bytes\n", what, status_string(st), (unsigned long long)bytes);
      std::exit(1);
    }
  };

  std::vector<Row> rows;
  std::printf("peer link GPU %d -> GPU %d (%s; CUDA P2P performance rank %d, native atomics %d); real bf16 "
              "gradients tiled to each size\n",
              S, R, prop.name, perf_rank, atomics);

  // ---- probes: the link's raw ceilings at 256 MiB (or --max-mib) ----------------------------------------------
  {
    const uint64_t probe = std::min<uint64_t>(max_bytes, uint64_t(256) << 20);
    const double ce = time_ms(5, [&] { ce_copy(probe); }, nowait);
    const double push = time_ms(5, [&] { sm_push(probe); }, nowait);
    const double pull = time_ms(5, [&] { sm_pull(probe); }, nowait);
    const double gb = double(probe) / 1e9;
    std::printf("link probe (%s): copy engine %.1f GB/s, SM push (GPU 0 stores) %.1f GB/s, SM pull (GPU 1 loads) "
                "%.1f GB/s\n",
                human(probe).c_str(), gb / ce * 1e3, gb / push * 1e3, gb / pull * 1e3);
    rows.push_back({probe, "peer_probe_ce", ce, gb / ce * 1e3, ""});
    rows.push_back({probe, "peer_probe_sm_push", push, gb / push * 1e3, ""});
    rows.push_back({probe, "peer_probe_sm_pull", pull, gb / pull * 1e3, ""});
  }

  // ---- the link: calibrate(), then per size -----------------------------------------------------------------
  PeerLink<DType::bf16> link;
  CK(link.init(S, R));
  CK(cudaSetDevice(S));
  CK(link.calibrate(src, sample.size() / 2, max_bytes));
  const uint64_t threshold = link.bypass_threshold();
  std::printf("calibrate(): 64 KiB .. %s; coded from %s\n", human(max_bytes).c_str(),
              threshold == UINT64_MAX ? "never (raw at every size)" : human(threshold).c_str());
  std::printf("  %9s %10s %10s %s\n", "size", "coded ms", "raw ms", "coded wins by 3%");
  for (const P2PCalibrationPoint& p : link.calibration())
    std::printf("  %9s %10.4f %10.4f %s\n", human(p.bytes).c_str(), p.coded_ms, p.raw_ms,
                p.coded_ms * 1.03 <= p.raw_ms ? "yes" : "no");

  struct Switch {
    uint64_t bytes;
    double raw_ms, coded_ms, link_ms;
    bool coded;
    std::string verdict;
  };
  std::vector<Switch> switches;
  std::printf("\n%-9s %9s %9s %9s | %9s %9s | %7s %10s %s\n", "size", "ce GB/s", "push", "pull", "coded", "link",
              "link is", "link/ce", "switch");
  int wrong = 0;
  for (uint64_t bytes = std::max<uint64_t>(min_kib, 1) << 10; bytes <= max_bytes; bytes *= 2) {
    const uint64_t n = bytes / 2;
    const int reps = std::max(5, int(reps_scale * (bytes <= (uint64_t(1) << 20)    ? 41
                                                   : bytes <= (uint64_t(64) << 20) ? 21
                                                                                   : 7)));
    // time_ms ends with s1 (and the link) idle, and every method writes into a cleared dst: what it holds is
    // the last timed transfer's result, checked right after.
    const double ce = time_ms(reps, [&] { ce_copy(bytes); }, nowait);
    verify(bytes, "peer_raw (cudaMemcpyPeerAsync)");
    const double push = time_ms(reps, [&] { sm_push(bytes); }, nowait);
    verify(bytes, "peer_sm_push");
    const double pull = time_ms(reps, [&] { sm_pull(bytes); }, nowait);
    verify(bytes, "peer_sm_pull");
    const double coded = time_ms(
        reps, [&] { CK(link.transfer_coded(src, dst, n, s0, s1)); }, [&] { link_wait(link, "coded", bytes); });
    verify(bytes, "peer_coded");
    const double used = time_ms(
        reps, [&] { CK(link.transfer(src, dst, n, s0, s1)); }, [&] { link_wait(link, "as used", bytes); });
    verify(bytes, "peer_link");
    const bool link_codes = !use_bypass(bytes, threshold);
    // the switch chose right when it took the faster of its two paths (coded, cudaMemcpyPeerAsync); tie within 3%
    const std::string verdict = std::fabs(coded - ce) <= 0.03 * ce ? "tie"
                                : link_codes == (coded < ce)        ? "right"
                                                                    : "wrong";
    wrong += verdict == "wrong";
    switches.push_back({bytes, ce, coded, used, link_codes, verdict});
    rows.push_back({bytes, "peer_raw", ce, bytes / ce / 1e6, "cudaMemcpyPeerAsync"});
    rows.push_back({bytes, "peer_sm_push", push, bytes / push / 1e6, "GPU 0 SM stores"});
    rows.push_back({bytes, "peer_sm_pull", pull, bytes / pull / 1e6, "GPU 1 SM loads"});
    rows.push_back({bytes, "peer_coded", coded, bytes / coded / 1e6, ""});
    rows.push_back({bytes, "peer_link", used, bytes / used / 1e6, link_codes ? "coded" : "bypass (raw)"});
    std::printf("%-9s %9.2f %9.2f %9.2f | %9.2f %9.2f | %7s %10.3f %s\n", human(bytes).c_str(), bytes / ce / 1e6,
                bytes / push / 1e6, bytes / pull / 1e6, bytes / coded / 1e6, bytes / used / 1e6,
                link_codes ? "coded" : "raw", ce / used, verdict.c_str());
    std::fflush(stdout);
  }
  std::printf(
      "\nGB/s = message bytes / (start .. GPU 1 holds every decoded element); ce = cudaMemcpyPeerAsync (the link's "
      "bypass); push/pull = SM copy kernels over the link; coded = PeerLink::transfer_coded; link = transfer() after "
      "calibrate(); switch: right when the link took the faster of coded and ce (tie: within 3%%).\n"
      "switch: wrong at %d of %zu sizes\n",
      wrong, switches.size());

  // ---- knob variants of the coded link at 64 and 256 MiB -------------------------------------------------------
  struct Variant {
    const char* name;
    P2POptions opt;
  };
  std::vector<Variant> vs;
  auto add = [&](const char* name, auto&& tweak) {
    P2POptions o;
    tweak(o);
    vs.push_back({name, o});
  };
  add("default", [](P2POptions&) {});
  add("frames of 32 items", [](P2POptions& o) { o.shape.tier[0].frame_items = 32; });
  add("frames of 128 items", [](P2POptions& o) { o.shape.tier[0].frame_items = 128; });
  add("no fine tail", [](P2POptions& o) { o.shape.num_tiers = 1; });
  add("32 slots", [](P2POptions& o) { o.slots = 32; });
  add("sender on half the SMs", [&](P2POptions& o) { o.sender_blocks = prop.multiProcessorCount / 2; });
  std::printf("\nknob variants (coded, always): GB/s at 64 MiB / 256 MiB\n");
  for (Variant& v : vs) {
    PeerLink<DType::bf16> l;
    CK(l.init(S, R, v.opt));
    double gbps[2] = {0, 0};
    const uint64_t sizes[2] = {std::min(uint64_t(64) << 20, max_bytes), std::min(uint64_t(256) << 20, max_bytes)};
    for (int k = 0; k < 2; ++k) {
      const uint64_t bytes = sizes[k];
      const double ms = time_ms(
          7, [&] { CK(l.transfer_coded(src, dst, bytes / 2, s0, s1)); }, [&] { link_wait(l, v.name, bytes); });
      verify(bytes, v.name);
      gbps[k] = bytes / ms / 1e6;
      rows.push_back({bytes, std::string("peer_variant: ") + v.name, ms, gbps[k], ""});
    }
    std::printf("  %-24s %8.2f | %8.2f\n", v.name, gbps[0], gbps[1]);
    std::fflush(stdout);
  }

  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"gpus\": " << count << ",\n  \"link\": \"peer GPU " << S
      << " -> GPU " << R << "\",\n  \"p2p_performance_rank\": " << perf_rank
      << ",\n  \"data\": \"" << data << "/llama_grads.bf16 tiled\",\n  \"bypass\": "
      << (threshold == UINT64_MAX ? -1.0 : double(threshold)) << ",\n  \"calibration\": [";
    const auto& pts = link.calibration();
    for (size_t i = 0; i < pts.size(); ++i)
      o << (i ? ", " : "") << "{\"bytes\": " << pts[i].bytes << ", \"coded_ms\": " << pts[i].coded_ms
        << ", \"raw_ms\": " << pts[i].raw_ms << "}";
    o << "],\n  \"switch\": [\n";
    for (size_t i = 0; i < switches.size(); ++i) {
      const Switch& w = switches[i];
      o << "    {\"bytes\": " << w.bytes << ", \"raw_ms\": " << w.raw_ms << ", \"coded_ms\": " << w.coded_ms
        << ", \"link_ms\": " << w.link_ms << ", \"faster\": \"" << (w.coded_ms < w.raw_ms ? "coded" : "raw")
        << "\", \"link\": \"" << (w.coded ? "coded" : "raw") << "\", \"verdict\": \"" << w.verdict << "\"}"
        << (i + 1 < switches.size() ? ",\n" : "\n");
    }
    o << "  ],\n  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      o << "    {\"bytes\": " << r.bytes << ", \"method\": \"" << r.method << "\", \"ms\": " << r.ms
        << ", \"gbps\": " << r.gbps << ", \"note\": \"" << r.note << "\"}" << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    o << "  ]\n}\n";
  }
  CK(cudaSetDevice(S));
  CK(cudaFree(src));
  CK(cudaEventDestroy(pushed));
  CK(cudaSetDevice(R));
  CK(cudaFree(dst));
  CK(cudaFree(ref));
  CK(cudaFree(diff));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return 0;
}

// --variant NAME:KEY=VALUE,...: a link with the default options (stream mode) and these set, timed by the sweep.
// Keys: mode (stream|copy), items (tier-0 frame items), item (tier-0 item elements), slots, budget (first section-B
// budget, bytes per 1024 elements), mpm, mkel (its margin: per mille, bytes per 1024 elements), tiers, t1items,
// t1item, t1region (Ki elements), t2items, t2item, t2region, sblocks, rblocks, piece (KiB), pieces (per transfer),
// head (ITEM/FRAME/MIB of bf16). Returns false (with a message) on a key or value it does not know.
bool parse_variant(const std::string& spec, std::string& name, HostLinkMode& mode, P2POptions& o) {
  const size_t colon = spec.find(':');
  name = spec.substr(0, colon);
  mode = HostLinkMode::stream;
  o = P2POptions();
  if (colon == std::string::npos) return true;
  const std::string rest = spec.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const size_t end = std::min(rest.find(',', pos), rest.size());
    const std::string kv = rest.substr(pos, end - pos);
    pos = end + 1;
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return std::fprintf(stderr, "--variant: '%s' is not KEY=VALUE\n", kv.c_str()), false;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
    if (k == "mode") {
      if (v == "copy") mode = HostLinkMode::copy;
      else if (v == "stream") mode = HostLinkMode::stream;
      else return std::fprintf(stderr, "--variant: unknown mode '%s'\n", v.c_str()), false;
    } else if (k == "items") o.shape.tier[0].frame_items = uint32_t(x);
    else if (k == "item") o.shape.tier[0].item_elems = uint32_t(x);
    else if (k == "slots") o.slots = uint32_t(x);
    else if (k == "budget") o.exps_budget_per_kelem = uint32_t(x);
    else if (k == "mpm") o.exps_budget_margin_permille = uint32_t(x);
    else if (k == "mkel") o.exps_budget_margin_per_kelem = uint32_t(x);
    else if (k == "tiers") o.shape.num_tiers = uint32_t(x);
    else if (k == "t1items") o.shape.tier[1].frame_items = uint32_t(x);
    else if (k == "t1item") o.shape.tier[1].item_elems = uint32_t(x);
    else if (k == "t1region") o.shape.tier[1].region_elems = uint64_t(x) << 10;  // Ki elements
    else if (k == "t2items") o.shape.tier[2].frame_items = uint32_t(x);
    else if (k == "t2item") o.shape.tier[2].item_elems = uint32_t(x);
    else if (k == "t2region") o.shape.tier[2].region_elems = uint64_t(x) << 10;
    else if (k == "sblocks") o.sender_blocks = int(x);
    else if (k == "rblocks") o.receiver_blocks = int(x);
    else if (k == "piece") o.copy_piece_bytes = uint64_t(x) << 10;  // KiB
    else if (k == "pieces") o.copy_pieces_per_transfer = uint32_t(x);
    else if (k == "head") {
      unsigned item = 0, frame = 0, mib = 0;
      if (std::sscanf(v.c_str(), "%u/%u/%u", &item, &frame, &mib) != 3)
        return std::fprintf(stderr, "--variant: head wants ITEM/FRAME/MIB\n"), false;
      o.shape.head = {item, frame, uint64_t(mib) << 19};
    } else
      return std::fprintf(stderr, "--variant: unknown key '%s'\n", k.c_str()), false;
  }
  if (!shape_valid(o.shape)) return std::fprintf(stderr, "--variant %s: not a valid pipeline shape\n", name.c_str()), false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "tests/data", json;
  uint64_t max_mib = 1024, min_kib = 1;
  double reps_scale = 1.0;
  bool sweep = false, trace = false, curve = true, peer = false;
  bool trace_light = false;  // --trace-light: kernel stamps only, the transfer queued behind a hold (GPU time)
  std::vector<std::string> trace_variants;  // --trace-variant specs: more traced links
  uint64_t trace_mib = 64;
  std::string modes = "stream,copy", sweep_only;
  std::vector<std::string> variants;  // --variant specs, timed by the sweep
  std::vector<std::string> curve_variants;  // --curve-variant specs: more links on the curve
  uint64_t sweep_mib[2] = {64, 256};
  bool chain_probe = false;
  std::string batch_specs;  // --batch
  bool batch_trace = false;  // --batch-trace
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--max-mib" && i + 1 < argc)
      max_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--min-kib" && i + 1 < argc)
      min_kib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "--reps-scale" && i + 1 < argc)
      reps_scale = std::atof(argv[++i]);
    else if (a == "--sweep")
      sweep = true;
    else if (a == "--sweep-only" && i + 1 < argc)  // sweep variants whose name contains this
      sweep = true, sweep_only = argv[++i];
    else if (a == "--variant" && i + 1 < argc)  // NAME:KEY=VALUE,... (parse_variant); the built-in variants
      sweep = true, variants.push_back(argv[++i]);  // then run only where --sweep-only names them
    else if (a == "--sweep-mib" && i + 1 < argc) {  // A,B: the sweep's two message sizes (MiB)
      unsigned long long x = 0, y = 0;
      if (std::sscanf(argv[++i], "%llu,%llu", &x, &y) != 2 || !x || !y)
        return std::fprintf(stderr, "--sweep-mib wants A,B (MiB)\n"), 2;
      sweep_mib[0] = x, sweep_mib[1] = y;
    } else if (a == "--curve-variant" && i + 1 < argc)  // NAME:KEY=VALUE,...: one more link on the curve
      curve_variants.push_back(argv[++i]);
    else if (a == "--chain-probe")  // stream mode's copy chain without coding: events, flag waits
      chain_probe = true;
    else if (a == "--trace")  // per-frame timelines (kernels' stamps, copies' events) of the default link at 64 MiB
      trace = true;
    else if (a == "--trace-variant" && i + 1 < argc)  // NAME:KEY=VALUE,...: trace this option set too
      trace = true, trace_variants.push_back(argv[++i]);
    else if (a == "--trace-light")  // no copy events; the traced transfer runs in GPU time, as the sweep times it
      trace = true, trace_light = true;
    else if (a == "--trace-mib" && i + 1 < argc)  // size of the traced transfers (MiB)
      trace = true, trace_mib = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    else if (a == "--no-curve")
      curve = false;
    else if (a == "--modes" && i + 1 < argc)  // links of the curve: stream, copy or both
      modes = argv[++i];
    else if (a == "--batch" && i + 1 < argc)  // COUNTxMIB[,...]: messages back to back, one batch against one each
      batch_specs = argv[++i];
    else if (a == "--batch-trace")  // with --batch: trace one coded batch per case
      batch_trace = true;
    else if (a == "--peer")  // PeerLink GPU 0 -> GPU 1 instead of the pinned-host link
      peer = true;
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--max-mib 1024] [--min-kib 1] [--json FILE] [--reps-scale X] "
                   "[--sweep] [--sweep-only NAME] [--variant NAME:K=V,...] [--sweep-mib A,B] [--chain-probe] "
                   "[--curve-variant NAME:K=V,...] [--trace] [--trace-light] [--trace-mib M] "
                   "[--trace-variant NAME:K=V,...] [--no-curve] [--modes stream,copy] [--peer] "
                   "[--batch COUNTxMIB,...] [--batch-trace]\n", argv[0]);
      return 2;
    }
  }
  if (!batch_specs.empty()) return run_batch(data, batch_specs, reps_scale, json, batch_trace);
  if (peer) {
    if (max_mib == 0) return std::fprintf(stderr, "--max-mib must be positive\n"), 2;
    return run_peer(data, max_mib, min_kib, reps_scale, json);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("zipcomm_bench_p2p: no GPU on this machine; nothing measured.\n");
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaSetDevice(0));
  const std::vector<uint8_t> sample = read_file(data + "/llama_grads.bf16");
  if (sample.size() < 1024) {
    std::fprintf(stderr, "missing %s/llama_grads.bf16\n", data.c_str());
    return 1;
  }
  std::printf("data: %s/llama_grads.bf16 (%zu bf16 elements), tiled over each message\n", data.c_str(),
              sample.size() / 2);
  const uint64_t max_bytes = max_mib << 20;
  uint8_t *src, *dst;
  unsigned long long* diff;
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&diff, 8));
  for (uint64_t off = 0; off < max_bytes; off += sample.size())
    CK(cudaMemcpy(src + off, sample.data(), std::min<uint64_t>(sample.size(), max_bytes - off),
                  cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());  // a copy from pageable memory may still be landing; the link's streams do not wait
  cudaStream_t stream, side;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));

  auto time_ms = [&](int reps, auto&& run, auto&& wait) {
    for (int i = 0; i < 2; ++i) {
      run();
      wait();
    }
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      CK(cudaEventRecord(a, stream));
      run();
      CK(cudaEventRecord(b, stream));
      CK(cudaEventSynchronize(b));
      wait();
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  };
  // Two transfers timed alternately (A, B, A, B, ...): medians of each. The ratio of the link as used to raw
  // comes from such a pair, so drift and the raw sweep's pick of the luckiest chunk do not bias it. `batch`
  // transfers back to back between the two events, time / batch: at a few microseconds per transfer, one
  // transfer between events measures mostly when the host got its calls in (seen: 13 or 20 us for the same two
  // 2 KiB copies, the median flipping between runs); both sides are batched alike.
  // With `blocked` (batched sizes), the batch is queued behind p2p_hold_stream_kernel (nvbench's blocking-kernel
  // method; gives up after 50 ms, then block_go[1] says the timing is not clean) and released once queued: the
  // events then time the GPU's work, not the host's calls. Both sides share each blocked window, `batch`
  // transfers each, interleaved (A B A B ..., B A B A ... in the next window), an event before each transfer:
  // on the H200 the GPU time of a whole window of tiny copies is either ~8.3 or ~16.3 us per transfer (one
  // rate per window, either rate for any host buffer kind), so sides timed in windows of their own got medians
  // at different rates (ratios of 0.5 or 2 for the same two copies). host_us gets each side's median host time
  // per transfer (what the calls cost the caller's thread).
  std::vector<cudaEvent_t> window_events(2 * 32 + 1);
  for (cudaEvent_t& e : window_events) CK(cudaEventCreate(&e));
  uint32_t* block_go;
  CK(cudaHostAlloc(&block_go, 8, cudaHostAllocMapped));
  uint32_t* block_timed_out = block_go + 1;
  block_go[0] = block_go[1] = 0;
  // hold(): what is queued on `stream` next waits for release() (the host's calls are then not timed).
  auto hold = [&] {
    *const_cast<volatile uint32_t*>(block_go) = 0u;
    p2p_hold_stream_kernel<<<1, 1, 0, stream>>>(block_go, block_timed_out, 50000000ull);
    CK(cudaGetLastError());
  };
  auto release = [&] { *const_cast<volatile uint32_t*>(block_go) = 1u; };
  double host_us[2] = {0, 0};
  auto time_pair_ms = [&](int reps, auto&& run_a, auto&& wait_a, auto&& run_b, auto&& wait_b, int batch,
                          bool blocked = false) {
    for (int i = 0; i < 2; ++i) {
      run_a();
      wait_a();
      run_b();
      wait_b();
    }
    std::vector<float> ta, tb;
    std::vector<double> ha, hb;
    if (blocked) {
      if (size_t(2 * batch + 1) > window_events.size())
        std::fprintf(stderr, "paired timing: batch too large\n"), std::exit(1);
      for (int i = 0; i < reps; ++i) {
        hold();
        double host[2] = {0, 0};
        for (int k = 0; k < 2 * batch; ++k) {
          const bool side_a = (k + i) % 2 == 0;
          CK(cudaEventRecord(window_events[k], stream));
          const auto h0 = std::chrono::steady_clock::now();
          if (side_a) run_a(); else run_b();
          const auto h1 = std::chrono::steady_clock::now();
          host[side_a ? 0 : 1] += std::chrono::duration<double, std::micro>(h1 - h0).count();
        }
        CK(cudaEventRecord(window_events[2 * batch], stream));
        release();
        CK(cudaEventSynchronize(window_events[2 * batch]));
        wait_a();
        wait_b();
        float sum[2] = {0, 0};
        for (int k = 0; k < 2 * batch; ++k)
          sum[(k + i) % 2 == 0 ? 0 : 1] += elapsed(window_events[k], window_events[k + 1]);
        ta.push_back(sum[0] / float(batch));
        tb.push_back(sum[1] / float(batch));
        ha.push_back(host[0] / batch);
        hb.push_back(host[1] / batch);
      }
    }
    auto one = [&](auto&& run, auto&& wait, std::vector<float>& t, std::vector<double>& h) {  // host-paced
      CK(cudaEventRecord(a, stream));
      const auto h0 = std::chrono::steady_clock::now();
      for (int k = 0; k < batch; ++k) run();
      const auto h1 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(b, stream));
      CK(cudaEventSynchronize(b));
      wait();
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms / float(batch));
      h.push_back(std::chrono::duration<double, std::micro>(h1 - h0).count() / batch);
    };
    for (int i = 0; i < reps && !blocked; ++i) {  // A B, B A, ...: neither side always runs right after the other
      if (i % 2 == 0) one(run_a, wait_a, ta, ha);
      one(run_b, wait_b, tb, hb);
      if (i % 2 == 1) one(run_a, wait_a, ta, ha);
    }
    if (blocked && block_go[1]) {
      std::fprintf(stderr, "paired timing: the blocking kernel timed out (host blocked while queueing)\n");
      block_go[1] = 0;
    }
    std::sort(ta.begin(), ta.end());
    std::sort(tb.begin(), tb.end());
    std::sort(ha.begin(), ha.end());
    std::sort(hb.begin(), hb.end());
    host_us[0] = ha[ha.size() / 2], host_us[1] = hb[hb.size() / 2];
    return std::make_pair(double(ta[ta.size() / 2]), double(tb[tb.size() / 2]));
  };
  auto verify = [&](uint64_t bytes, const char* what) {
    CK(cudaMemset(diff, 0, 8));
    count_diff<<<264, 256>>>(reinterpret_cast<const uint4*>(src), reinterpret_cast<const uint4*>(dst), bytes / 16,
                             diff);
    unsigned long long d = 1;
    CK(cudaMemcpy(&d, diff, 8, cudaMemcpyDeviceToHost));
    if (d != 0) {
      std::fprintf(stderr, "%s at %llu bytes: %llu differing 16-byte words: NOT bit-exact\n", what,
                   (unsigned long long)bytes, d);
      std::exit(1);
    }
  };
  std::vector<Row> rows;

  // ---- the link's raw ceilings: copy engines one way and both ways at once ------------------------------------
  const uint64_t probe = std::min<uint64_t>(max_bytes, uint64_t(256) << 20);
  uint8_t *pinned_a, *pinned_b;
  CK(cudaHostAlloc(&pinned_a, probe, cudaHostAllocDefault));
  CK(cudaHostAlloc(&pinned_b, probe, cudaHostAllocDefault));
  std::memset(pinned_a, 1, probe);
  std::memset(pinned_b, 2, probe);
  auto nowait = [] {};
  const double d2h = time_ms(
      5, [&] { CK(cudaMemcpyAsync(pinned_a, src, probe, cudaMemcpyDeviceToHost, stream)); }, nowait);
  const double h2d = time_ms(
      5, [&] { CK(cudaMemcpyAsync(dst, pinned_b, probe, cudaMemcpyHostToDevice, stream)); }, nowait);
  const double both = time_ms(
      5,
      [&] {
        CK(cudaEventRecord(a, stream));
        CK(cudaStreamWaitEvent(side, a, 0));
        CK(cudaMemcpyAsync(pinned_a, src, probe, cudaMemcpyDeviceToHost, stream));
        CK(cudaMemcpyAsync(dst, pinned_b, probe, cudaMemcpyHostToDevice, side));
        CK(cudaEventRecord(b, side));
        CK(cudaStreamWaitEvent(stream, b, 0));
      },
      nowait);
  const double gb = double(probe) / 1e9;
  std::printf("link probe (%s): copy engine D2H %.1f GB/s, H2D %.1f GB/s, both at once %.1f GB/s each\n",
              human(probe).c_str(), gb / d2h * 1e3, gb / h2d * 1e3, gb / both * 1e3);
  rows.push_back({probe, "probe_ce_d2h", d2h, gb / d2h * 1e3, ""});
  rows.push_back({probe, "probe_ce_h2d", h2d, gb / h2d * 1e3, ""});
  rows.push_back({probe, "probe_ce_both", both, gb / both * 1e3, "each direction"});
  CK(cudaFreeHost(pinned_a));
  CK(cudaFreeHost(pinned_b));
  const uint64_t MiB = uint64_t(1) << 20;

  // Stream mode's copy chain with coding free (--chain-probe): per frame its planes (half the frame's bytes), then
  // section B (0.17 of them) go device -> pinned -> device; each host -> device copy waits (event) for its
  // device -> host copy; a pinned slot (16 of them) is rewritten only after its previous host -> device copy
  // (event); split-send order (planes of frame i + 1 before section B of frame i) or one copy per frame; and,
  // optionally, a cuStreamWaitValue64 on a flag in GPU memory that is already set wherever the link waits on the
  // sender's flags or the receiver's credits, plus the "landed" write. What the pipeline's dependencies cost,
  // apart from the coding.
  if (chain_probe) {
    p2p_detail::StreamMemOps ops;
    CK(ops.load(0));
    const uint64_t one = 1;
    uint64_t* flag_dev;
    CK(cudaMalloc(&flag_dev, 64));
    CK(cudaMemcpy(flag_dev, &one, 8, cudaMemcpyHostToDevice));
    constexpr uint32_t S = 16;
    const uint64_t max_frame = 16 * MiB, slot_bytes = max_frame;
    uint8_t* slots;
    CK(cudaHostAlloc(&slots, S * slot_bytes, 0));
    std::memset(slots, 3, S * slot_bytes);
    std::vector<cudaEvent_t> ev(3 * S);
    for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    auto chain = [&](uint64_t total, uint64_t frame, bool split, bool flags) {
      const uint64_t F = total / frame, P = frame / 2, B = frame * 11 / 64;
      uint64_t* flag = flag_dev;
      const uint32_t ahead = split ? 1 : 0;
      auto waitv = [&](cudaStream_t st) {
        if (flags) CK(ops.wait_geq(st, flag, 1));
      };
      auto through = [&](uint64_t i, uint64_t from, uint64_t to, cudaEvent_t e) {
        uint8_t* host = slots + (i % S) * slot_bytes;
        CK(cudaMemcpyAsync(host + from, src + i * frame + from, to - from, cudaMemcpyDeviceToHost, stream));
        CK(cudaEventRecord(e, stream));
        CK(cudaStreamWaitEvent(side, e, 0));
        CK(cudaMemcpyAsync(dst + i * frame + from, host + from, to - from, cudaMemcpyHostToDevice, side));
      };
      return time_ms(
          5,
          [&] {
            CK(cudaEventRecord(a, stream));
            CK(cudaStreamWaitEvent(side, a, 0));
            for (uint64_t i = 0; i < F + ahead; ++i) {
              const uint32_t slot = uint32_t(i % S);
              if (i < F && split) {
                waitv(stream);
                if (i >= S) CK(cudaStreamWaitEvent(stream, ev[2 * S + slot], 0));
                if (i >= S) waitv(side);
                through(i, 0, P, ev[slot]);
              }
              if (i >= ahead) {
                const uint64_t f = i - ahead;
                const uint32_t fs = uint32_t(f % S);
                waitv(stream);
                if (!split && f >= S) CK(cudaStreamWaitEvent(stream, ev[2 * S + fs], 0));
                if (!split && f >= S) waitv(side);
                through(f, split ? P : 0, P + B, ev[S + fs]);
                if (flags) CK(ops.write(side, flag + 1, f));
                CK(cudaEventRecord(ev[2 * S + fs], side));
              }
            }
            CK(cudaEventRecord(b, side));
            CK(cudaStreamWaitEvent(stream, b, 0));
          },
          nowait);
    };
    const char* flag_names[2] = {"no flag waits", "flag waits"};
    std::printf("\nstream mode's copy chain, no coding (GB/s each way of what the copies move; ms):\n");
    for (uint64_t total : {uint64_t(64) * MiB, uint64_t(256) * MiB})
      for (uint64_t frame : {16 * MiB, 4 * MiB, 2 * MiB})
        for (int split = 1; split >= 0; --split)
          for (int flags = 0; flags < 2 && frame <= std::min(total, max_bytes); ++flags) {
            const double t = chain(std::min(total, max_bytes), frame, split != 0, flags != 0);
            const uint64_t moved = std::min(total, max_bytes) / frame * (frame / 2 + frame * 11 / 64);
            std::printf("  %s of %s frames, %s, %s: %.3f ms, %.1f GB/s\n", human(std::min(total, max_bytes)).c_str(),
                        human(frame).c_str(), split ? "split-send" : "whole frames", flag_names[flags], t,
                        moved / t / 1e6);
            rows.push_back({std::min(total, max_bytes), "probe_chain", t, moved / t / 1e6,
                            "frame " + std::to_string(frame) + (split ? ", split-send, " : ", whole frames, ") +
                                flag_names[flags]});
          }
    std::fflush(stdout);
    for (auto& e : ev) CK(cudaEventDestroy(e));
    CK(cudaFreeHost(slots));
    CK(cudaFree(flag_dev));
  }

  // ---- raw baseline: the pipelined copy-engine transfer, best chunk of a sweep ------------------------------
  const uint64_t chunks[] = {uint64_t(128) << 10, uint64_t(256) << 10, uint64_t(512) << 10, uint64_t(1) << 20,
                             uint64_t(2) << 20,   uint64_t(4) << 20,   uint64_t(8) << 20,   uint64_t(16) << 20};
  constexpr uint32_t RAW_BUFFERS = 4;
  uint8_t* raw_host;
  CK(cudaHostAlloc(&raw_host, RAW_BUFFERS * (uint64_t(16) << 20), cudaHostAllocDefault));
  uint8_t* raw_host_wc;  // the baseline also gets write-combined staging, and keeps whichever is faster
  CK(cudaHostAlloc(&raw_host_wc, RAW_BUFFERS * (uint64_t(16) << 20), cudaHostAllocWriteCombined));
  std::vector<cudaEvent_t> raw_events(2 * RAW_BUFFERS + 2);
  for (auto& e : raw_events) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  // ---- knob sweep (coded, always) ---------------------------------------------------------------------------
  if (sweep) {
    struct Variant {
      const char* name;
      HostLinkMode mode;
      P2POptions opt;
    };
    std::vector<Variant> vs;
    auto add = [&](const char* name, HostLinkMode m, auto&& tweak) {
      P2POptions o;
      tweak(o);
      vs.push_back({name, m, o});
    };
    // The default link and one knob moved each way (head: item elements x items per frame, region in MiB of bf16,
    // elements = MiB << 19); then copy mode, the fallback.
    const HostLinkMode stream_mode = HostLinkMode::stream;
    add("stream default", stream_mode, [](P2POptions&) {});
    add("stream frames of 256 items", stream_mode, [](P2POptions& o) { o.shape.tier[0].frame_items = 256; });
    add("stream frames of 1024 items", stream_mode, [](P2POptions& o) { o.shape.tier[0].frame_items = 1024; });
    add("stream 8 slots", stream_mode, [](P2POptions& o) { o.slots = 8; });
    add("stream 32 slots", stream_mode, [](P2POptions& o) { o.slots = 32; });
    add("stream head 4096x256 over 8 MiB", stream_mode,
        [](P2POptions& o) { o.shape.head = {4096, 256, uint64_t(8) << 19}; });
    add("stream whole copies", stream_mode, [](P2POptions& o) { o.copy_piece_bytes = o.copy_pieces_per_transfer = 0; });
    add("stream pieces of 1/16", stream_mode, [](P2POptions& o) { o.copy_pieces_per_transfer = 16; });
    add("stream budget margin 2% + 4", stream_mode, [](P2POptions& o) {
      o.exps_budget_margin_permille = 20;
      o.exps_budget_margin_per_kelem = 4;
    });
    add("stream sender on half the SMs", stream_mode,
        [&](P2POptions& o) { o.sender_blocks = prop.multiProcessorCount / 2; });
    add("copy default", HostLinkMode::copy, [](P2POptions&) {});
    add("copy frames of 128 items", HostLinkMode::copy, [](P2POptions& o) { o.shape.tier[0].frame_items = 128; });
    // --variant links: always timed; the built-in ones then only where --sweep-only names them.
    const size_t builtin = vs.size();
    std::vector<std::string> variant_names(variants.size());
    for (size_t i = 0; i < variants.size(); ++i) {
      Variant v{nullptr, HostLinkMode::stream, P2POptions()};
      if (!parse_variant(variants[i], variant_names[i], v.mode, v.opt)) return 2;
      v.name = variant_names[i].c_str();
      vs.push_back(v);
    }
    std::printf("\nknob sweep (coded, always): ms at %llu MiB / %llu MiB, and GB/s\n",
                (unsigned long long)sweep_mib[0], (unsigned long long)sweep_mib[1]);
    for (size_t vi = 0; vi < vs.size(); ++vi) {
      Variant& v = vs[vi];
      if (vi < builtin && !variants.empty() && sweep_only.empty()) continue;
      if (vi < builtin && !sweep_only.empty() && std::string(v.name).find(sweep_only) == std::string::npos) continue;
      HostStagingLink<DType::bf16> link;
      CK(link.init(0, v.opt, v.mode));
      double ms[2];
      const uint64_t sizes[2] = {sweep_mib[0] << 20, sweep_mib[1] << 20};
      for (int k = 0; k < 2; ++k) {
        const uint64_t bytes = std::min(sizes[k], max_bytes);
        auto wait = [&] {
          if (link.wait() != Status::ok) std::fprintf(stderr, "sweep %s: transfer failed\n", v.name), std::exit(1);
        };
        ms[k] = time_ms(
            7, [&] { CK(link.transfer_coded(src, dst, bytes / 2, stream)); }, wait);
        verify(bytes, v.name);
        rows.push_back({bytes, std::string("sweep: ") + v.name, ms[k], bytes / ms[k] / 1e6,
                        "wire " + std::to_string(link.wire_bytes())});
      }
      std::printf(
          "  %-56s %8.3f ms %7.1f GB/s | %8.3f ms %7.1f GB/s%s\n", v.name, ms[0],
          std::min(sizes[0], max_bytes) / ms[0] / 1e6, ms[1], std::min(sizes[1], max_bytes) / ms[1] / 1e6,
          link.wire_bytes()
              ? (" | wire/raw " + std::to_string(double(link.wire_bytes()) / std::min(sizes[1], max_bytes))).c_str()
              : "");
      std::fflush(stdout);
    }
  }

  // ---- per-frame timelines (tuning): when each frame was taken, published, copied and decoded -------------
  // Kernel stamps (%globaltimer) count from the first stamp (the sender's first item); copy marks (CUDA events,
  // stream mode) from an event recorded just before the sender's launch, so the two clocks differ by about
  // the launch latency. For each copy: when its stream reached it (its waits done) and when it ended.
  if (trace) {
    const uint64_t bytes = std::min<uint64_t>(max_bytes, trace_mib << 20);
    const uint64_t n = bytes / 2;
    struct Traced {
      std::string name;
      HostLinkMode mode;
      P2POptions opt;
    };
    std::vector<Traced> traced;
    traced.push_back({"default", HostLinkMode::stream, P2POptions()});
    for (const std::string& spec : trace_variants) {
      Traced t;
      if (!parse_variant(spec, t.name, t.mode, t.opt)) return 2;
      traced.push_back(t);
    }
    for (const Traced& tv : traced) {
      HostStagingLink<DType::bf16> link;
      CK(link.init(0, tv.opt, tv.mode));
      const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n - link.raw_head_elems(n) - link.raw_tail_elems(n),
                                       tv.opt.shape);
      const uint64_t F = plan.num_frames;
      const uint64_t W = 2 * TRACE_STAMPS * F;  // sender's stamps, then the receiver's, then the origin
      uint64_t* d_trace;
      CK(cudaMalloc(&d_trace, (W + 1) * 8));
      const uint64_t IW = ITEM_TRACE_STAMPS * plan.num_items;  // the receiver's per-item stamps
      uint64_t* d_items;
      CK(cudaMalloc(&d_items, IW * 8));
      std::vector<uint64_t> hi(IW);
      std::vector<uint64_t> h(W + 1);
      cudaEvent_t origin;
      CK(cudaEventCreate(&origin));
      std::vector<cudaEvent_t> marks(1 + 8 * F);
      for (cudaEvent_t& m : marks) CK(cudaEventCreate(&m));
      for (int w = 0; w < 2; ++w) {  // warm-up; the budget adapts
        CK(link.transfer_coded(src, dst, n, stream));
        if (link.wait() != Status::ok) std::fprintf(stderr, "trace %s: transfer failed\n", tv.name.c_str()), std::exit(1);
      }
      CK(cudaMemsetAsync(d_trace, 0, (W + 1) * 8, stream));  // ordered before the traced transfer
      CK(cudaMemsetAsync(d_items, 0, IW * 8, stream));
      link.set_trace(d_trace, d_trace + TRACE_STAMPS * F, d_items);
      const bool copies = link.mode() == HostLinkMode::stream && !trace_light;
      if (copies) link.set_copy_trace(marks.data(), marks.size());
      if (trace_light) hold();
      CK(cudaEventRecord(a, stream));
      // One origin for both clocks: a %globaltimer stamp, and an event right after it on the same stream.
      stamp_clock<<<1, 1, 0, stream>>>(d_trace + W);
      CK(cudaEventRecord(origin, stream));
      CK(link.transfer_coded(src, dst, n, stream));
      CK(cudaEventRecord(b, stream));
      if (trace_light) release();
      if (link.wait() != Status::ok) std::fprintf(stderr, "trace %s: transfer failed\n", tv.name.c_str()), std::exit(1);
      if (trace_light && block_go[1])  // the hold gave up before the host had queued the transfer: host-paced
        std::fprintf(stderr, "trace %s: the blocking kernel timed out\n", tv.name.c_str()), block_go[1] = 0;
      const float ms = elapsed(a, b);
      link.set_trace(nullptr, nullptr);
      link.set_copy_trace(nullptr, 0);
      verify(bytes, tv.name.c_str());
      CK(cudaMemcpy(h.data(), d_trace, (W + 1) * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hi.data(), d_items, IW * 8, cudaMemcpyDeviceToHost));
      const uint64_t t0 = h[W];
      auto us = [&](uint64_t v) { return v ? (double(v) - double(t0)) / 1e3 : -1.0; };
      // A mark never recorded reads -1: a part not copied on its own (the planes of every frame but the first).
      auto mark_us = [&](size_t i) {
        float m = 0;
        return cudaEventElapsedTime(&m, origin, marks[i]) == cudaSuccess ? double(m) * 1e3 : -1.0;
      };
      float end_ms = 0;  // the caller's stream sees the transfer done
      CK(cudaEventElapsedTime(&end_ms, origin, b));
      std::printf("\ntrace, %s (%s mode), %s, %llu frames (%llu in the head), %.3f ms (%.1f GB/s), wire/raw %.3f, "
                  "caller's stream done at %.1f us; us from one origin (a clock stamp, then an event, just before the "
                  "transfer); copies start-end\n",
                  tv.name.c_str(), link.mode() == HostLinkMode::stream ? "stream" : "copy", human(bytes).c_str(),
                  (unsigned long long)F, (unsigned long long)(plan.head_parts ? plan.part[0].frames : 0), ms,
                  bytes / ms / 1e6, double(link.wire_bytes()) / bytes, end_ms * 1e3);
      std::printf("%5s %8s %5s | %7s %7s %7s %7s | %15s %15s %15s %15s | %7s %7s %7s %7s\n", "frame", "elems",
                  "items", "s.take", "s.slot", "s.plane", "s.done", "d2h planes", "h2d planes", "d2h B", "h2d B",
                  "r.start", "r.land", "r.ready", "r.done");
      for (uint64_t f = 0; f < F; ++f) {
        if (F > 40 && f == 16) std::printf("   ...\n");
        if (F > 40 && f >= 16 && f + 16 < F) continue;
        const FrameInfo fi = plan.frame(f);
        const uint64_t* sv = &h[TRACE_STAMPS * f];
        const uint64_t* rv = &h[TRACE_STAMPS * (F + f)];
        char cp[4][40];
        for (int c = 0; c < 4; ++c) {  // d2h planes, h2d planes, d2h B, h2d B
          const size_t base = 1 + 8 * f + 4 * (c / 2) + (c % 2 ? 2 : 0);
          if (copies)
            std::snprintf(cp[c], sizeof cp[c], "%7.1f-%7.1f", mark_us(base), mark_us(base + 1));
          else
            std::snprintf(cp[c], sizeof cp[c], "%15s", "-");
        }
        std::printf("%5llu %8llu %5u | %7.1f %7.1f %7.1f %7.1f | %s %s %s %s | %7.1f %7.1f %7.1f %7.1f\n",
                    (unsigned long long)f, (unsigned long long)fi.elems, fi.items, us(sv[0]), us(sv[3]), us(sv[1]),
                    us(sv[2]), cp[0], cp[1], cp[2], cp[3], us(rv[0]), us(rv[3]), us(rv[1]), us(rv[2]));
      }
      // The receiver's items, per frame: when warps took them (after the frame was ready: "late", the warps were
      // busy with earlier items), saw the frame ready, had decoded them and had counted them.
      std::printf("receiver items, us from the origin: taken (first, last), ready (min, median, max), decode time "
                  "(median, max), decoded and counted (last); late = taken after the frame's r.ready\n");
      std::printf("%5s %5s | %7s %7s | %7s %7s %7s | %6s %6s | %7s %7s | %5s\n", "frame", "items", "tk.1st", "tk.last",
                  "rdy.min", "rdy.med", "rdy.max", "dec.md", "dec.mx", "dec.end", "cnt.end", "late");
      for (uint64_t f = 0; f < F; ++f) {
        if (F > 40 && f >= 16 && f + 16 < F) continue;
        const FrameInfo fi = plan.frame(f);
        const double frame_ready = us(h[TRACE_STAMPS * (F + f) + 1]);
        std::vector<double> taken, ready, dec;
        double dec_end = 0, cnt_end = 0;
        uint32_t late = 0;
        for (uint32_t j = 0; j < fi.items; ++j) {
          const uint64_t* it = &hi[ITEM_TRACE_STAMPS * (fi.first_item + j)];
          taken.push_back(us(it[0]));
          ready.push_back(us(it[1]));
          dec.push_back(it[1] && it[2] ? (double(it[2]) - double(it[1])) / 1e3 : -1.0);
          dec_end = std::max(dec_end, us(it[2]));
          cnt_end = std::max(cnt_end, us(it[3]));
          late += us(it[0]) > frame_ready;
        }
        std::sort(taken.begin(), taken.end());
        std::sort(ready.begin(), ready.end());
        std::sort(dec.begin(), dec.end());
        const size_t m = fi.items / 2;
        std::printf("%5llu %5u | %7.1f %7.1f | %7.1f %7.1f %7.1f | %6.1f %6.1f | %7.1f %7.1f | %5u\n",
                    (unsigned long long)f, fi.items, taken.front(), taken.back(), ready.front(), ready[m], ready.back(),
                    dec[m], dec.back(), dec_end, cnt_end, late);
      }
      std::fflush(stdout);
      (void)cudaGetLastError();  // marks of parts not copied were never recorded: their query failed, harmlessly
      for (cudaEvent_t m : marks) CK(cudaEventDestroy(m));
      CK(cudaEventDestroy(origin));
      CK(cudaFree(d_trace));
      CK(cudaFree(d_items));
    }
  }
  if (!curve) return 0;

  // ---- the links ------------------------------------------------------------------------------------------
  struct Link {
    const char* name;
    HostStagingLink<DType::bf16> link;
  };
  // The modes asked for (default options), then each --curve-variant (named by its spec's NAME).
  std::vector<Link> all_links(2 + curve_variants.size());
  std::vector<std::string> curve_names(curve_variants.size());
  const HostLinkMode all_modes[2] = {HostLinkMode::stream, HostLinkMode::copy};
  const char* all_names[2] = {"stream", "copy"};
  int NL = 0;
  for (int k = 0; k < 2; ++k) {
    if (("," + modes + ",").find(std::string(",") + all_names[k] + ",") == std::string::npos) continue;
    all_links[NL].name = all_names[k];
    CK(all_links[NL].link.init(0, P2POptions(), all_modes[k]));
    if (all_links[NL].link.mode() != all_modes[k]) {
      std::printf("%s mode: not supported on this GPU/driver (no 64-bit stream memory operations), skipped\n",
                  all_names[k]);
      continue;
    }
    ++NL;
  }
  for (size_t i = 0; i < curve_variants.size(); ++i) {
    HostLinkMode m;
    P2POptions o;
    if (!parse_variant(curve_variants[i], curve_names[i], m, o)) return 2;
    all_links[NL].name = curve_names[i].c_str();
    CK(all_links[NL].link.init(0, o, m));
    ++NL;
  }
  Link* links = all_links.data();
  for (int k = 0; k < NL; ++k) {
    Link& l = links[k];
    CK(l.link.calibrate(src, sample.size() / 2));
    std::printf("%s mode: measured bypass threshold %s\n", l.name,
                l.link.bypass_threshold() == UINT64_MAX ? "never code" : human(l.link.bypass_threshold()).c_str());
  }

  std::printf("\n%-9s %9s %8s |", "size", "raw GB/s", "chunk");
  for (int k = 0; k < NL; ++k) std::printf(" %8s", links[k].name);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %7s+bp", links[k].name);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %c+bp/raw", links[k].name[0]);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %c+bp/swp", links[k].name[0]);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %6s %13s", "paced", "host us l/r");
  std::printf("\n");
  std::vector<double> min_ratio(NL, 1e9), min_ratio_64(NL, 1e9);
  for (uint64_t bytes = min_kib << 10; bytes <= max_bytes; bytes *= 2) {
    const uint64_t n = bytes / 2;
    const int reps = std::max(5, int(reps_scale * (bytes <= (uint64_t(1) << 20)    ? 41
                                                   : bytes <= (uint64_t(64) << 20) ? 21
                                                                                   : 7)));
    // raw: best chunk
    double raw_best = 1e30;
    uint64_t raw_chunk = 0;
    uint8_t* raw_best_host = raw_host;
    std::vector<uint64_t> cands;  // pipelined chunk sizes below the message size, and one chunk (two copies)
    for (uint64_t c : chunks)
      if (c < bytes) cands.push_back(c);
    if (bytes <= RAW_BUFFERS * (uint64_t(16) << 20)) cands.push_back(bytes);
    for (uint8_t* host : {raw_host, raw_host_wc})
      for (uint64_t c : cands) {
        const double ms = time_ms(
            reps,
            [&] { CK(StagedRawCopy::run(src, dst, bytes, c, host, RAW_BUFFERS, raw_events.data(), stream, side)); },
            nowait);
        if (ms < raw_best) raw_best = ms, raw_chunk = c, raw_best_host = host;
      }
    CK(cudaMemsetAsync(dst, 0, bytes, stream));  // on the copy's stream: a legacy memset could land after it
    CK(StagedRawCopy::run(src, dst, bytes, raw_chunk, raw_best_host, RAW_BUFFERS, raw_events.data(), stream, side));
    CK(cudaStreamSynchronize(stream));
    verify(bytes, "raw");
    rows.push_back({bytes, "raw", raw_best, bytes / raw_best / 1e6,
                    "chunk " + std::to_string(raw_chunk) + (raw_best_host == raw_host_wc ? ", write-combined" : "")});
    std::vector<double> coded(NL), autob(NL), raw_pair(NL), host_link(NL), host_raw(NL), paced_ratio(NL, 0.0);
    // Below 16 MiB a timing covers several transfers back to back, queued behind a blocking kernel (GPU time;
    // the host-paced ratio and each side's host time per call are printed too).
    const int batch = bytes < (uint64_t(256) << 10) ? 32 : bytes < (uint64_t(16) << 20) ? 8 : 1;
    for (int k = 0; k < NL; ++k) {
      HostStagingLink<DType::bf16>& link = links[k].link;
      auto wait = [&] {
        const Status s = link.wait();
        if (s != Status::ok) {
          std::fprintf(stderr, "%s link: %s at %llu bytes\n", links[k].name, status_string(s),
                       (unsigned long long)bytes);
          std::exit(1);
        }
      };
      coded[k] = time_ms(
          reps, [&] { CK(link.transfer_coded(src, dst, n, stream)); }, wait);
      CK(cudaMemsetAsync(dst, 0, bytes, stream));  // on the transfer's stream: a legacy memset could land after it
      CK(link.transfer_coded(src, dst, n, stream));
      wait();
      verify(bytes, links[k].name);
      // The link as used against the raw transfer with `chunk`, timed alternately (blocked: GPU time).
      auto link_vs_raw = [&](uint64_t chunk, bool blocked) {
        return time_pair_ms(
            reps, [&] { CK(link.transfer(src, dst, n, stream)); }, wait,
            [&] {
              CK(StagedRawCopy::run(src, dst, bytes, chunk, raw_best_host, RAW_BUFFERS, raw_events.data(), stream,
                                    side));
            },
            nowait, batch, blocked);
      };
      const auto pair = link_vs_raw(raw_chunk, batch > 1);
      autob[k] = pair.first;
      raw_pair[k] = pair.second;
      host_link[k] = host_us[0], host_raw[k] = host_us[1];
      if (batch > 1 && raw_chunk < bytes) {
        // The sweep picked its chunk by host-paced timing (one transfer per timing); in GPU time one chunk (two
        // copies on one stream) can beat it (256 KiB: 20 us against 26 for two 128 KiB chunks, H200). The
        // pair is timed again against one chunk, and the stronger raw baseline is kept.
        const auto one = link_vs_raw(bytes, true);
        if (one.second < pair.second) {
          autob[k] = one.first;
          raw_pair[k] = one.second;
          host_link[k] = host_us[0], host_raw[k] = host_us[1];
        }
      }
      if (batch > 1) {  // the same pair timed as the host issues it (not blocked): what a caller's loop sees
        const auto paced = link_vs_raw(raw_chunk, false);
        paced_ratio[k] = paced.second / paced.first;
        rows.push_back({bytes, std::string("probe_hostpaced_link_") + links[k].name, paced.first,
                        bytes / paced.first / 1e6, "as link_ but not blocked: the host's calls pace the batch"});
        rows.push_back({bytes, std::string("probe_hostpaced_raw_") + links[k].name, paced.second,
                        bytes / paced.second / 1e6, "as raw_paired_ but not blocked"});
      }
      rows.push_back({bytes, std::string("probe_host_us_link_") + links[k].name, host_link[k] / 1e3, 0,
                      "host time per transfer() call (ms field)"});
      rows.push_back({bytes, std::string("probe_host_us_raw_") + links[k].name, host_raw[k] / 1e3, 0,
                      "host time per raw transfer's calls (ms field)"});
      CK(cudaMemsetAsync(dst, 0, bytes, stream));
      CK(link.transfer(src, dst, n, stream));
      wait();
      verify(bytes, links[k].name);
      rows.push_back({bytes, std::string("coded_") + links[k].name, coded[k], bytes / coded[k] / 1e6, ""});
      rows.push_back({bytes, std::string("link_") + links[k].name, autob[k], bytes / autob[k] / 1e6,
                      use_bypass(bytes, link.bypass_threshold())
                          ? "bypass (raw, chunk " + std::to_string(link.raw_chunk_for(bytes)) + ")"
                          : std::string("coded")});
      rows.push_back({bytes, std::string("raw_paired_") + links[k].name, raw_pair[k], bytes / raw_pair[k] / 1e6,
                      "raw (chunk of the sweep, or one chunk where that was faster in GPU time) timed alternately "
                      "with link_" + std::string(links[k].name)});
      const double r = raw_pair[k] / autob[k];
      min_ratio[k] = std::min(min_ratio[k], r);
      if (bytes >= (uint64_t(64) << 20)) min_ratio_64[k] = std::min(min_ratio_64[k], r);
    }
    std::printf("%-9s %9.2f %8s |", human(bytes).c_str(), bytes / raw_best / 1e6, human(raw_chunk).c_str());
    for (int k = 0; k < NL; ++k) std::printf(" %8.2f", bytes / coded[k] / 1e6);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %10.2f", bytes / autob[k] / 1e6);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %9.3f", raw_pair[k] / autob[k]);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %9.3f", raw_best / autob[k]);
    std::printf(" |");
    for (int k = 0; k < NL; ++k)
      if (batch > 1)
        std::printf(" %6.3f %6.1f/%-6.1f", paced_ratio[k], host_link[k], host_raw[k]);
      else
        std::printf(" %6s %6.1f/%-6.1f", "-", host_link[k], host_raw[k]);
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf(
      "\nGB/s = message bytes / (start .. receiver holds every decoded element); raw = pipelined "
      "copy-engine transfer, best of one chunk and chunks of {128K..16M}; stream/copy = the link's modes, "
      "coded always; +bp = the link as used (raw below its measured bypass threshold); first "
      "s/c+bp/raw = link (+bp) speed over the raw transfer (the sweep's chunk, below 16 MiB also one "
      "chunk: the faster) timed alternately with it (below 256 KiB: 32 transfers of each side per timing, "
      "below 16 MiB: 8, interleaved and queued behind a blocking kernel so the GPU's work is timed, an "
      "event before each transfer; which goes first alternates); second = over the sweep's best raw time "
      "(one transfer per timing); last group, per link: the same ratio with the host pacing the batch (not "
      "blocked), and host us per call, link/raw.\n");
  for (int k = 0; k < NL; ++k)
    std::printf("%s link: min over sizes of speed/raw %.3f; min at >= 64 MiB %.3f\n", links[k].name, min_ratio[k],
                min_ratio_64[k]);

  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"data\": \"" << data << "/llama_grads.bf16 tiled\",\n"
      << "  \"bypass\": {";
    for (int k = 0; k < NL; ++k)
      o << "\"" << links[k].name
        << "\": " << (links[k].link.bypass_threshold() == UINT64_MAX ? -1.0 : double(links[k].link.bypass_threshold()))
        << (k + 1 < NL ? ", " : "},\n");
    o << "  \"min_ratio\": {";
    for (int k = 0; k < NL; ++k) o << "\"" << links[k].name << "\": " << min_ratio[k] << (k + 1 < NL ? ", " : "},\n");
    o << "  \"min_ratio_64mib\": {";
    for (int k = 0; k < NL; ++k)
      o << "\"" << links[k].name << "\": " << min_ratio_64[k] << (k + 1 < NL ? ", " : "},\n");
    o << "  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      o << "    {\"bytes\": " << r.bytes << ", \"method\": \"" << r.method << "\", \"ms\": " << r.ms
        << ", \"gbps\": " << r.gbps << ", \"note\": \"" << r.note << "\"}" << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    o << "  ]\n}\n";
  }
  CK(cudaFreeHost(raw_host));
  CK(cudaFreeHost(raw_host_wc));
  CK(cudaFreeHost(block_go));
  for (cudaEvent_t& e : window_events) CK(cudaEventDestroy(e));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 0;
}
