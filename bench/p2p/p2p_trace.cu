// zipcomm_bench_p2p --trace: per-frame timelines of the pinned-host link (kernel stamps, copy events, the
// receiver's items), for tuning.
#include <string>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {

// ---- per-frame timelines (tuning): when each frame was taken, published, copied and decoded -------------
// Kernel stamps (%globaltimer) count from the first stamp (the sender's first item); copy marks (CUDA events,
// stream mode) from an event recorded just before the sender's launch, so the two clocks differ by about
// the launch latency. For each copy: when its stream reached it (its waits done) and when it ended.
int run_trace(HostBench& hb, const Options& opt) {
  const uint64_t bytes = std::min<uint64_t>(hb.max_bytes, opt.trace_mib << 20);
  const uint64_t n = bytes / 2;
  struct Traced {
    std::string name;
    HostLinkMode mode;
    P2POptions opt;
  };
  std::vector<Traced> traced;
  traced.push_back({"default", HostLinkMode::stream, P2POptions()});
  for (const std::string& spec : opt.trace_variants) {
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
      CK(link.transfer_coded(hb.src, hb.dst, n, hb.stream));
      if (link.wait() != Status::ok) std::fprintf(stderr, "trace %s: transfer failed\n", tv.name.c_str()), std::exit(1);
    }
    CK(cudaMemsetAsync(d_trace, 0, (W + 1) * 8, hb.stream));  // ordered before the traced transfer
    CK(cudaMemsetAsync(d_items, 0, IW * 8, hb.stream));
    link.set_trace(d_trace, d_trace + TRACE_STAMPS * F, d_items);
    const bool copies = link.mode() == HostLinkMode::stream && !opt.trace_light;
    if (copies) link.set_copy_trace(marks.data(), marks.size());
    if (opt.trace_light) hb.hold();
    CK(cudaEventRecord(hb.start, hb.stream));
    // One origin for both clocks: a %globaltimer stamp, and an event right after it on the same stream.
    stamp_clock<<<1, 1, 0, hb.stream>>>(d_trace + W);
    CK(cudaEventRecord(origin, hb.stream));
    CK(link.transfer_coded(hb.src, hb.dst, n, hb.stream));
    CK(cudaEventRecord(hb.stop, hb.stream));
    if (opt.trace_light) hb.release();
    if (link.wait() != Status::ok) std::fprintf(stderr, "trace %s: transfer failed\n", tv.name.c_str()), std::exit(1);
    if (opt.trace_light && hb.block_go[1])  // the hold gave up before the host had queued the transfer: host-paced
      std::fprintf(stderr, "trace %s: the blocking kernel timed out\n", tv.name.c_str()), hb.block_go[1] = 0;
    const float ms = bench::elapsed_ms(hb.start, hb.stop);
    link.set_trace(nullptr, nullptr);
    link.set_copy_trace(nullptr, 0);
    hb.verify(bytes, tv.name.c_str());
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
    CK(cudaEventElapsedTime(&end_ms, origin, hb.stop));
    std::printf(
        "\ntrace, %s (%s mode), %s, %llu frames (%llu in the head), %.3f ms (%.1f GB/s), wire/raw %.3f, "
        "caller's stream done at %.1f us; us from one origin (a clock stamp, then an event, just before the "
        "transfer); copies start-end\n",
        tv.name.c_str(), link.mode() == HostLinkMode::stream ? "stream" : "copy", bench::human_bytes(bytes).c_str(),
        (unsigned long long)F, (unsigned long long)(plan.head_parts ? plan.part[0].frames : 0), ms, bytes / ms / 1e6,
        double(link.wire_bytes()) / bytes, end_ms * 1e3);
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
  return 0;
}

}  // namespace p2p_bench
