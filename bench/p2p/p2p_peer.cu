// zipcomm_bench_p2p --peer: PeerLink from GPU 0 to GPU 1 against the raw peer copies (cudaMemcpyPeerAsync, SM
// push and pull), calibrate()'s switch checked at every size, and a few knob variants of the coded link.
#include <cmath>
#include <fstream>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {
namespace {

// SM copy over a peer link (what PeerLink's sender does): 16-byte loads and stores, grid-stride.
__global__ void sm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t n16) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += uint64_t(gridDim.x) * blockDim.x)
    dst[i] = __ldcv(src + i);
}

}  // namespace

/// --peer: PeerLink<bf16> from GPU 0 to GPU 1 against the raw peer copies. Returns the exit code.
int run_peer(const Options& opt) {
  const std::string &data = opt.data, &json = opt.json;
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
  const std::vector<uint8_t> sample = read_gradients(data);
  const uint64_t max_bytes = opt.max_mib << 20;
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
      if (i >= 0) t.push_back(bench::elapsed_ms(a, b));
    }
    CK(cudaSetDevice(S));
    return double(bench::median(t));
  };
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
    const double ce = time_ms(5, [&] { ce_copy(probe); }, no_wait);
    const double push = time_ms(5, [&] { sm_push(probe); }, no_wait);
    const double pull = time_ms(5, [&] { sm_pull(probe); }, no_wait);
    const double gb = double(probe) / 1e9;
    std::printf("link probe (%s): copy engine %.1f GB/s, SM push (GPU 0 stores) %.1f GB/s, SM pull (GPU 1 loads) "
                "%.1f GB/s\n",
                bench::human_bytes(probe).c_str(), gb / ce * 1e3, gb / push * 1e3, gb / pull * 1e3);
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
  std::printf("calibrate(): 64 KiB .. %s; coded from %s\n", bench::human_bytes(max_bytes).c_str(),
              threshold == UINT64_MAX ? "never (raw at every size)" : bench::human_bytes(threshold).c_str());
  std::printf("  %9s %10s %10s %s\n", "size", "coded ms", "raw ms", "coded wins by 3%");
  for (const P2PCalibrationPoint& p : link.calibration())
    std::printf("  %9s %10.4f %10.4f %s\n", bench::human_bytes(p.bytes).c_str(), p.coded_ms, p.raw_ms,
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
  for (uint64_t bytes = std::max<uint64_t>(opt.min_kib, 1) << 10; bytes <= max_bytes; bytes *= 2) {
    const uint64_t n = bytes / 2;
    const int reps = std::max(5, int(opt.reps_scale * (bytes <= (uint64_t(1) << 20)    ? 41
                                                   : bytes <= (uint64_t(64) << 20) ? 21
                                                                                   : 7)));
    // time_ms ends with s1 (and the link) idle, and every method writes into a cleared dst: what it holds is
    // the last timed transfer's result, checked right after.
    const double ce = time_ms(reps, [&] { ce_copy(bytes); }, no_wait);
    verify(bytes, "peer_raw (cudaMemcpyPeerAsync)");
    const double push = time_ms(reps, [&] { sm_push(bytes); }, no_wait);
    verify(bytes, "peer_sm_push");
    const double pull = time_ms(reps, [&] { sm_pull(bytes); }, no_wait);
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
    std::printf("%-9s %9.2f %9.2f %9.2f | %9.2f %9.2f | %7s %10.3f %s\n", bench::human_bytes(bytes).c_str(),
                bytes / ce / 1e6, bytes / push / 1e6, bytes / pull / 1e6, bytes / coded / 1e6, bytes / used / 1e6,
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
    write_rows_json(o, rows);
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

}  // namespace p2p_bench
