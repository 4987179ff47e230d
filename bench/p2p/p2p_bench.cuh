// Shared pieces of zipcomm_bench_p2p's parts (bench_p2p.cu parses the command line and runs them): the options,
// the result rows and their JSON, the test data, and the pinned-host bench's buffers and timers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#include "bench_common.cuh"

namespace p2p_bench {

using namespace zipcomm;
using namespace zipcomm::comm;
using examples::count_diff;

/// The command line (bench_p2p.cu's header comment says what each flag does).
struct Options {
  std::string data = "tests/data", json;
  uint64_t max_mib = 1024, min_kib = 1;
  double reps_scale = 1.0;
  bool sweep = false, trace = false, curve = true, peer = false;
  bool trace_light = false;                 // kernel stamps only, the transfer queued behind a hold (GPU time)
  std::vector<std::string> trace_variants;  // --trace-variant specs: more traced links
  uint64_t trace_mib = 64;
  std::string modes = "stream,copy", sweep_only;
  std::vector<std::string> variants;        // --variant specs, timed by the sweep
  std::vector<std::string> curve_variants;  // --curve-variant specs: more links on the curve
  uint64_t sweep_mib[2] = {64, 256};
  bool chain_probe = false;
  std::string batch_specs;   // --batch
  bool batch_trace = false;  // --batch-trace
};

/// One measurement of the curve, the probes, the sweep or the peer link (a row of the JSON's "rows").
struct Row {
  uint64_t bytes;
  std::string method;
  double ms, gbps;
  std::string note;
};

/// "rows" body of the JSON: one object per row.
inline void write_rows_json(std::ostream& o, const std::vector<Row>& rows) {
  bench::write_json_rows(o, rows, [](std::ostream& o, const Row& r) {
    o << "{\"bytes\": " << r.bytes << ", \"method\": \"" << r.method << "\", \"ms\": " << r.ms
      << ", \"gbps\": " << r.gbps << ", \"note\": \"" << r.note << "\"}";
  });
}

/// DIR/llama_grads.bf16, the gradients every part sends; exits with a message when it is missing.
inline std::vector<uint8_t> read_gradients(const std::string& data) {
  std::vector<uint8_t> sample = examples::read_file(data + "/llama_grads.bf16");
  if (sample.size() < 1024) std::fprintf(stderr, "missing %s/llama_grads.bf16\n", data.c_str()), std::exit(1);
  return sample;
}

/// `bytes` of device memory at dst filled with the sample repeated (the last copy cut short).
inline void fill_tiled(uint8_t* dst, uint64_t bytes, const std::vector<uint8_t>& sample) {
  for (uint64_t off = 0; off < bytes; off += sample.size())
    CK(cudaMemcpy(dst + off, sample.data(), std::min<uint64_t>(sample.size(), bytes - off), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());  // a copy from pageable memory may still be landing; the link's streams do not wait
}

// The trace's origin on the kernels' clock (%globaltimer, the clock the link's kernels stamp with).
static __global__ void stamp_clock(uint64_t* out) { *out = zipcomm::detail::global_timer_ns(); }

/// --variant NAME:KEY=VALUE,...: the options it names (p2p_sweep.cu lists the keys); false, with a message, on a
/// key or value it does not know.
bool parse_variant(const std::string& spec, std::string& name, HostLinkMode& mode, P2POptions& o);

/// The pinned-host link's bench on GPU 0: the gradients tiled over src, dst to receive, the caller's stream and a
/// side stream, the timers every part uses and the rows they add to.
struct HostBench {
  cudaDeviceProp prop;
  std::vector<uint8_t> sample;
  uint64_t max_bytes;
  uint8_t *src, *dst;
  unsigned long long* diff;
  cudaStream_t stream, side;
  cudaEvent_t start, stop;
  std::vector<Row> rows;
  // Events of a blocked window of time_pair_ms: up to 32 transfers of each side, an event before each.
  std::vector<cudaEvent_t> window_events = std::vector<cudaEvent_t>(2 * 32 + 1);
  uint32_t* block_go;         // mapped: [0] releases the hold, [1] says it timed out
  double host_us[2] = {0, 0};  // the last time_pair_ms: each side's median host time per transfer

  HostBench(const std::string& data, uint64_t max_mib);
  ~HostBench();
  HostBench(const HostBench&) = delete;
  HostBench& operator=(const HostBench&) = delete;

  /// What is queued on `stream` next waits for release() (the host's calls are then not timed).
  void hold();
  void release() { *const_cast<volatile uint32_t*>(block_go) = 1u; }
  /// dst == src over `bytes`, or exit with a message naming `what`.
  void verify(uint64_t bytes, const char* what);

  /// Median ms of `reps` runs of `run` (events on `stream` around it, then `wait`), after two warm-ups.
  template <class Run, class Wait>
  double time_ms(int reps, Run&& run, Wait&& wait) {
    for (int i = 0; i < 2; ++i) {
      run();
      wait();
    }
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      CK(cudaEventRecord(start, stream));
      run();
      CK(cudaEventRecord(stop, stream));
      CK(cudaEventSynchronize(stop));
      wait();
      t.push_back(bench::elapsed_ms(start, stop));
    }
    return double(bench::median(t));
  }

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
  template <class RunA, class WaitA, class RunB, class WaitB>
  std::pair<double, double> time_pair_ms(int reps, RunA&& run_a, WaitA&& wait_a, RunB&& run_b, WaitB&& wait_b,
                                         int batch, bool blocked = false) {
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
          sum[(k + i) % 2 == 0 ? 0 : 1] += bench::elapsed_ms(window_events[k], window_events[k + 1]);
        ta.push_back(sum[0] / float(batch));
        tb.push_back(sum[1] / float(batch));
        ha.push_back(host[0] / batch);
        hb.push_back(host[1] / batch);
      }
    }
    auto one = [&](auto&& run, auto&& wait, std::vector<float>& t, std::vector<double>& h) {  // host-paced
      CK(cudaEventRecord(start, stream));
      const auto h0 = std::chrono::steady_clock::now();
      for (int k = 0; k < batch; ++k) run();
      const auto h1 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(stop, stream));
      CK(cudaEventSynchronize(stop));
      wait();
      t.push_back(bench::elapsed_ms(start, stop) / float(batch));
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
    host_us[0] = bench::median(ha), host_us[1] = bench::median(hb);
    return std::make_pair(double(bench::median(ta)), double(bench::median(tb)));
  }
};

/// Nothing to wait for after a raw copy.
inline void no_wait() {}

// The parts, in the order a run takes them (each file's header comment says what it measures).
int run_batch(const Options& opt);                     // p2p_batch.cu
int run_peer(const Options& opt);                      // p2p_peer.cu
void probe_copy_engines(HostBench& hb);                // p2p_probes.cu
void probe_copy_chain(HostBench& hb);                  // p2p_probes.cu
int run_sweep(HostBench& hb, const Options& opt);      // p2p_sweep.cu
int run_trace(HostBench& hb, const Options& opt);      // p2p_trace.cu
int run_curve(HostBench& hb, const Options& opt);      // p2p_curve.cu

}  // namespace p2p_bench
