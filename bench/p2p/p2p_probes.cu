// zipcomm_bench_p2p: the pinned-host link's raw ceilings (the copy engines one way and both ways at once, run
// every time) and, with --chain-probe, stream mode's copy chain with coding free.
#include <cstring>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {

void probe_copy_engines(HostBench& hb) {
  const uint64_t probe = std::min<uint64_t>(hb.max_bytes, uint64_t(256) << 20);
  uint8_t *pinned_a, *pinned_b;
  CK(cudaHostAlloc(&pinned_a, probe, cudaHostAllocDefault));
  CK(cudaHostAlloc(&pinned_b, probe, cudaHostAllocDefault));
  std::memset(pinned_a, 1, probe);
  std::memset(pinned_b, 2, probe);
  const double d2h = hb.time_ms(
      5, [&] { CK(cudaMemcpyAsync(pinned_a, hb.src, probe, cudaMemcpyDeviceToHost, hb.stream)); }, no_wait);
  const double h2d = hb.time_ms(
      5, [&] { CK(cudaMemcpyAsync(hb.dst, pinned_b, probe, cudaMemcpyHostToDevice, hb.stream)); }, no_wait);
  const double both = hb.time_ms(
      5,
      [&] {
        CK(cudaEventRecord(hb.start, hb.stream));
        CK(cudaStreamWaitEvent(hb.side, hb.start, 0));
        CK(cudaMemcpyAsync(pinned_a, hb.src, probe, cudaMemcpyDeviceToHost, hb.stream));
        CK(cudaMemcpyAsync(hb.dst, pinned_b, probe, cudaMemcpyHostToDevice, hb.side));
        CK(cudaEventRecord(hb.stop, hb.side));
        CK(cudaStreamWaitEvent(hb.stream, hb.stop, 0));
      },
      no_wait);
  const double gb = double(probe) / 1e9;
  std::printf("link probe (%s): copy engine D2H %.1f GB/s, H2D %.1f GB/s, both at once %.1f GB/s each\n",
              bench::human_bytes(probe).c_str(), gb / d2h * 1e3, gb / h2d * 1e3, gb / both * 1e3);
  hb.rows.push_back({probe, "probe_ce_d2h", d2h, gb / d2h * 1e3, ""});
  hb.rows.push_back({probe, "probe_ce_h2d", h2d, gb / h2d * 1e3, ""});
  hb.rows.push_back({probe, "probe_ce_both", both, gb / both * 1e3, "each direction"});
  CK(cudaFreeHost(pinned_a));
  CK(cudaFreeHost(pinned_b));
}

// Stream mode's copy chain with coding free (--chain-probe): per frame its planes (half the frame's bytes), then
// section B (0.17 of them) go device -> pinned -> device; each host -> device copy waits (event) for its
// device -> host copy; a pinned slot (16 of them) is rewritten only after its previous host -> device copy
// (event); split-send order (planes of frame i + 1 before section B of frame i) or one copy per frame; and,
// optionally, a cuStreamWaitValue64 on a flag in GPU memory that is already set wherever the link waits on the
// sender's flags or the receiver's credits, plus the "landed" write. What the pipeline's dependencies cost,
// apart from the coding.
void probe_copy_chain(HostBench& hb) {
  const uint64_t MiB = uint64_t(1) << 20;
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
      CK(cudaMemcpyAsync(host + from, hb.src + i * frame + from, to - from, cudaMemcpyDeviceToHost, hb.stream));
      CK(cudaEventRecord(e, hb.stream));
      CK(cudaStreamWaitEvent(hb.side, e, 0));
      CK(cudaMemcpyAsync(hb.dst + i * frame + from, host + from, to - from, cudaMemcpyHostToDevice, hb.side));
    };
    return hb.time_ms(
        5,
        [&] {
          CK(cudaEventRecord(hb.start, hb.stream));
          CK(cudaStreamWaitEvent(hb.side, hb.start, 0));
          for (uint64_t i = 0; i < F + ahead; ++i) {
            const uint32_t slot = uint32_t(i % S);
            if (i < F && split) {
              waitv(hb.stream);
              if (i >= S) CK(cudaStreamWaitEvent(hb.stream, ev[2 * S + slot], 0));
              if (i >= S) waitv(hb.side);
              through(i, 0, P, ev[slot]);
            }
            if (i >= ahead) {
              const uint64_t f = i - ahead;
              const uint32_t fs = uint32_t(f % S);
              waitv(hb.stream);
              if (!split && f >= S) CK(cudaStreamWaitEvent(hb.stream, ev[2 * S + fs], 0));
              if (!split && f >= S) waitv(hb.side);
              through(f, split ? P : 0, P + B, ev[S + fs]);
              if (flags) CK(ops.write(hb.side, flag + 1, f));
              CK(cudaEventRecord(ev[2 * S + fs], hb.side));
            }
          }
          CK(cudaEventRecord(hb.stop, hb.side));
          CK(cudaStreamWaitEvent(hb.stream, hb.stop, 0));
        },
        no_wait);
  };
  const char* flag_names[2] = {"no flag waits", "flag waits"};
  std::printf("\nstream mode's copy chain, no coding (GB/s each way of what the copies move; ms):\n");
  for (uint64_t total : {uint64_t(64) * MiB, uint64_t(256) * MiB})
    for (uint64_t frame : {16 * MiB, 4 * MiB, 2 * MiB})
      for (int split = 1; split >= 0; --split)
        for (int flags = 0; flags < 2 && frame <= std::min(total, hb.max_bytes); ++flags) {
          const double t = chain(std::min(total, hb.max_bytes), frame, split != 0, flags != 0);
          const uint64_t moved = std::min(total, hb.max_bytes) / frame * (frame / 2 + frame * 11 / 64);
          std::printf("  %s of %s frames, %s, %s: %.3f ms, %.1f GB/s\n",
                      bench::human_bytes(std::min(total, hb.max_bytes)).c_str(), bench::human_bytes(frame).c_str(),
                      split ? "split-send" : "whole frames", flag_names[flags], t, moved / t / 1e6);
          hb.rows.push_back({std::min(total, hb.max_bytes), "probe_chain", t, moved / t / 1e6,
                          "frame " + std::to_string(frame) + (split ? ", split-send, " : ", whole frames, ") +
                              flag_names[flags]});
        }
  std::fflush(stdout);
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaFreeHost(slots));
  CK(cudaFree(flag_dev));
}

}  // namespace p2p_bench
