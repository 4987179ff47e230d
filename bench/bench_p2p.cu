// zipcomm P2P benchmark: effective bandwidth of a GPU -> pinned host -> GPU transfer against message size,
// coded (HostStagingLink in copy, relay and kernel modes) and raw (pipelined copy-engine transfer, best chunk size of
// a sweep), measured in the same run on real bf16 gradients. Prints a table and writes JSON
// (bench/plot_p2p.py draws the curve).
//
// Effective GB/s = message bytes / time from the start of the transfer until the receiver holds every element
// (decoded), CUDA events on the caller's stream; median of reps after warm-ups. Every measured configuration is
// checked bit-exact once per size.
// --sweep first times variants of the link's knobs (frame size, tiers, head region, ring depth, grid) at 64 and
// 256 MiB; --trace prints per-frame timelines at 64 MiB (--trace-frame-items N: tier-0 frame size; --trace-head
// ITEM,FRAME,MIB: a head of ITEM-element items, FRAME to a frame, over the first MIB MiB of bf16).
// Usage: zipcomm_bench_p2p [--data DIR] [--max-mib 1024] [--min-kib 1] [--json FILE] [--reps-scale X] [--sweep]
//        [--sweep-only PREFIX] [--trace] [--trace-frame-items N] [--trace-head ITEM,FRAME,MIB] [--no-curve]
//        [--modes copy,relay,kernel,stream]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

using namespace zipcomm;
using namespace zipcomm::comm;

#define CK(...)                                                                                           \
  do {                                                                                                    \
    cudaError_t e_ = (__VA_ARGS__);                                                                       \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #__VA_ARGS__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace {

__global__ void count_diff(const uint4* a, const uint4* b, uint64_t n16, unsigned long long* diff) {
  unsigned long long d = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    d += (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (d) atomicAdd(diff, d);
}

// SM copy over the link (what the kernel mode's data path costs): 16-byte loads and stores, grid-stride.
__global__ void sm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t n16) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += uint64_t(gridDim.x) * blockDim.x)
    dst[i] = __ldcv(src + i);
}

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

}  // namespace

int main(int argc, char** argv) {
  std::string data = "tests/data", json;
  uint64_t max_mib = 1024, min_kib = 1;
  double reps_scale = 1.0;
  bool sweep = false, trace = false, curve = true;
  uint32_t trace_frame_items = 0;
  PipelineTier trace_head = {2048, 128, 0};  // region 0: no head
  std::string modes = "copy,relay,kernel,stream", sweep_only;
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
    else if (a == "--sweep-only" && i + 1 < argc)  // sweep variants whose name starts with this
      sweep = true, sweep_only = argv[++i];
    else if (a == "--trace")  // per-frame timelines of kernel and stream mode at 64 MiB
      trace = true;
    else if (a == "--trace-frame-items" && i + 1 < argc)  // tier-0 frame size of the traced links
      trace = true, trace_frame_items = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (a == "--trace-head" && i + 1 < argc) {  // ITEM,FRAME,MIB: head of the traced links
      unsigned item = 0, frame = 0, mib = 0;
      if (std::sscanf(argv[++i], "%u,%u,%u", &item, &frame, &mib) != 3) {
        std::fprintf(stderr, "--trace-head wants ITEM_ELEMS,FRAME_ITEMS,REGION_MIB (bf16 MiB)\n");
        return 2;
      }
      trace = true, trace_head = {item, frame, uint64_t(mib) << 19};
    }
    else if (a == "--no-curve")
      curve = false;
    else if (a == "--modes" && i + 1 < argc)  // links of the curve, e.g. copy,stream
      modes = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--max-mib 1024] [--min-kib 1] [--json FILE] [--reps-scale X]\n",
                   argv[0]);
      return 2;
    }
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
  const uint64_t max_bytes = max_mib << 20;
  uint8_t *src, *dst;
  unsigned long long* diff;
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&diff, 8));
  for (uint64_t off = 0; off < max_bytes; off += sample.size())
    CK(cudaMemcpy(src + off, sample.data(), std::min<uint64_t>(sample.size(), max_bytes - off),
                  cudaMemcpyHostToDevice));
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

  // ---- the link's raw ceilings: copy engines one way and both ways at once, SM copies over the link -------
  const uint64_t probe = std::min<uint64_t>(max_bytes, uint64_t(256) << 20);
  uint8_t *pinned_a, *pinned_b;
  CK(cudaHostAlloc(&pinned_a, probe, cudaHostAllocMapped));
  CK(cudaHostAlloc(&pinned_b, probe, cudaHostAllocMapped));
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
  const double sm_d2h = time_ms(
      5,
      [&] {
        sm_copy<<<prop.multiProcessorCount * 4, 256, 0, stream>>>(reinterpret_cast<const uint4*>(src),
                                                                  reinterpret_cast<uint4*>(pinned_a), probe / 16);
      },
      nowait);
  const double sm_h2d = time_ms(
      5,
      [&] {
        sm_copy<<<prop.multiProcessorCount * 4, 256, 0, stream>>>(reinterpret_cast<const uint4*>(pinned_b),
                                                                  reinterpret_cast<uint4*>(dst), probe / 16);
      },
      nowait);
  // Both directions by SMs at once (what kernel mode does: sender stores D2H while receiver loads H2D),
  // each kernel on half the SMs' worth of blocks, on two streams.
  const double sm_both = time_ms(
      5,
      [&] {
        CK(cudaEventRecord(a, stream));
        CK(cudaStreamWaitEvent(side, a, 0));
        sm_copy<<<prop.multiProcessorCount * 2, 256, 0, stream>>>(reinterpret_cast<const uint4*>(src),
                                                                  reinterpret_cast<uint4*>(pinned_a), probe / 16);
        sm_copy<<<prop.multiProcessorCount * 2, 256, 0, side>>>(reinterpret_cast<const uint4*>(pinned_b),
                                                                reinterpret_cast<uint4*>(dst), probe / 16);
        CK(cudaEventRecord(b, side));
        CK(cudaStreamWaitEvent(stream, b, 0));
      },
      nowait);
  CK(cudaGetLastError());
  const double gb = double(probe) / 1e9;
  std::printf(
      "link probe (%s): copy engine D2H %.1f GB/s, H2D %.1f GB/s, both at once %.1f GB/s each; "
      "SM copy D2H %.1f GB/s, H2D %.1f GB/s, both at once %.1f GB/s each\n",
      human(probe).c_str(), gb / d2h * 1e3, gb / h2d * 1e3, gb / both * 1e3, gb / sm_d2h * 1e3, gb / sm_h2d * 1e3,
      gb / sm_both * 1e3);
  rows.push_back({probe, "probe_ce_d2h", d2h, gb / d2h * 1e3, ""});
  rows.push_back({probe, "probe_ce_h2d", h2d, gb / h2d * 1e3, ""});
  rows.push_back({probe, "probe_ce_both", both, gb / both * 1e3, "each direction"});
  rows.push_back({probe, "probe_sm_d2h", sm_d2h, gb / sm_d2h * 1e3, ""});
  rows.push_back({probe, "probe_sm_h2d", sm_h2d, gb / sm_h2d * 1e3, ""});
  rows.push_back({probe, "probe_sm_both", sm_both, gb / sm_both * 1e3, "each direction"});
  CK(cudaFreeHost(pinned_a));
  CK(cudaFreeHost(pinned_b));

  // ---- raw baseline: the pipelined copy-engine transfer, best chunk of a sweep ------------------------------
  const uint64_t chunks[] = {uint64_t(128) << 10, uint64_t(256) << 10, uint64_t(512) << 10, uint64_t(1) << 20,
                             uint64_t(2) << 20,   uint64_t(4) << 20,   uint64_t(8) << 20,   uint64_t(16) << 20};
  constexpr uint32_t RAW_BUFFERS = 4;
  uint8_t* raw_host;
  CK(cudaHostAlloc(&raw_host, RAW_BUFFERS * (uint64_t(16) << 20), cudaHostAllocDefault));
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
    const int sms = prop.multiProcessorCount;
    add("copy default", HostLinkMode::copy, [](P2POptions&) {});
    add("copy frames of 64 items", HostLinkMode::copy, [](P2POptions& o) { o.shape.tier[0].frame_items = 64; });
    add("copy frames of 256 items", HostLinkMode::copy, [](P2POptions& o) { o.shape.tier[0].frame_items = 256; });
    add("copy 32 slots", HostLinkMode::copy, [](P2POptions& o) { o.slots = 32; });
    add("copy no fine tail", HostLinkMode::copy, [](P2POptions& o) { o.shape.num_tiers = 1; });
    add("relay default", HostLinkMode::relay, [](P2POptions&) {});
    add("relay frames of 64 items", HostLinkMode::relay, [](P2POptions& o) { o.shape.tier[0].frame_items = 64; });
    add("relay frames of 256 items", HostLinkMode::relay, [](P2POptions& o) { o.shape.tier[0].frame_items = 256; });
    add("relay sender on half the SMs", HostLinkMode::relay, [&](P2POptions& o) { o.sender_blocks = sms / 2; });
    add("relay 32 slots", HostLinkMode::relay, [](P2POptions& o) { o.slots = 32; });
    add("relay 2 decode streams", HostLinkMode::relay, [](P2POptions& o) { o.decode_streams = 2; });
    add("relay tier-1 region 8M", HostLinkMode::relay, [](P2POptions& o) { o.shape.tier[1].region_elems = 8u << 20; });
    add("relay no fine tail", HostLinkMode::relay, [](P2POptions& o) { o.shape.num_tiers = 1; });
    add("kernel default", HostLinkMode::kernel, [](P2POptions&) {});
    add("kernel frames of 64 items", HostLinkMode::kernel, [](P2POptions& o) { o.shape.tier[0].frame_items = 64; });
    add("kernel sender/receiver half SMs", HostLinkMode::kernel, [&](P2POptions& o) {
      o.sender_blocks = sms / 2;
      o.receiver_blocks = sms / 2;
    });
    add("kernel 32 slots", HostLinkMode::kernel, [](P2POptions& o) { o.slots = 32; });
    add("stream default", HostLinkMode::stream, [](P2POptions&) {});
    add("stream frames of 256 items", HostLinkMode::stream, [](P2POptions& o) { o.shape.tier[0].frame_items = 256; });
    add("stream frames of 512 items", HostLinkMode::stream, [](P2POptions& o) { o.shape.tier[0].frame_items = 512; });
    add("stream no split-send", HostLinkMode::stream, [](P2POptions& o) { o.split_send = false; });
    add("stream no split-send, frames of 256", HostLinkMode::stream, [](P2POptions& o) {
      o.split_send = false;
      o.shape.tier[0].frame_items = 256;
    });
    add("stream frames of 256, no fine tail", HostLinkMode::stream, [](P2POptions& o) {
      o.shape.tier[0].frame_items = 256;
      o.shape.num_tiers = 1;
    });
    add("stream frames of 256, sender 64 blocks", HostLinkMode::stream, [](P2POptions& o) {
      o.shape.tier[0].frame_items = 256;
      o.sender_blocks = 64;
    });
    add("stream frames of 256, 32 slots", HostLinkMode::stream, [](P2POptions& o) {
      o.shape.tier[0].frame_items = 256;
      o.slots = 32;
    });
    // The fill at 64 MiB (bench/RESULTS.md): stream_tuned() with a head of small items, so the first frames are
    // published within tens of microseconds, and with tier-0 frames of 1024 items. Names start "stream tuned"
    // (--sweep-only "stream tuned" runs just these); head = item elements x items per frame, region in MiB of
    // bf16 (elements = MiB << 19).
    auto tuned = [&](const char* name, uint32_t frame_items, uint32_t head_item, uint32_t head_frame,
                     uint32_t head_mib) {
      P2POptions o = P2POptions::stream_tuned();
      if (frame_items) o.shape.tier[0].frame_items = frame_items;
      if (head_mib) o.shape.head = {head_item, head_frame, uint64_t(head_mib) << 19};
      vs.push_back({name, HostLinkMode::stream, o});
    };
    tuned("stream tuned (frames of 512)", 0, 0, 0, 0);
    tuned("stream tuned, head 2048x64 over 4 MiB", 0, 2048, 64, 4);
    tuned("stream tuned, head 2048x128 over 4 MiB", 0, 2048, 128, 4);
    tuned("stream tuned, head 2048x128 over 8 MiB", 0, 2048, 128, 8);
    tuned("stream tuned, head 2048x256 over 16 MiB", 0, 2048, 256, 16);
    tuned("stream tuned, head 4096x64 over 4 MiB", 0, 4096, 64, 4);
    tuned("stream tuned, head 4096x128 over 8 MiB", 0, 4096, 128, 8);
    tuned("stream tuned, head 4096x256 over 8 MiB", 0, 4096, 256, 8);
    tuned("stream tuned, head 4096x256 over 16 MiB", 0, 4096, 256, 16);
    // Head frames take ring slots too: a body frame waits for the credit of the frame S slots before it.
    tuned("stream tuned, head 2048x64 over 8 MiB, 32 slots", 0, 2048, 64, 8);
    vs.back().opt.slots = 32;
    tuned("stream tuned, frames of 1024", 1024, 0, 0, 0);
    tuned("stream tuned, frames of 1024, head 2048x128 over 8 MiB", 1024, 2048, 128, 8);
    tuned("stream tuned, frames of 1024, head 4096x256 over 16 MiB", 1024, 4096, 256, 16);
    std::printf("\nknob sweep (coded, always): ms at 64 MiB / 256 MiB, and GB/s\n");
    for (Variant& v : vs) {
      if (!sweep_only.empty() && std::string(v.name).rfind(sweep_only, 0) != 0) continue;
      HostStagingLink<DType::bf16> link;
      CK(link.init(0, v.opt, v.mode));
      double ms[2];
      const uint64_t sizes[2] = {uint64_t(64) << 20, uint64_t(256) << 20};
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

  // ---- per-frame timelines (tuning): when each frame was taken, published and decoded --------------------
  if (trace) {
    const uint64_t bytes = std::min<uint64_t>(max_bytes, uint64_t(64) << 20);
    const uint64_t n = bytes / 2;
    const HostLinkMode tm[2] = {HostLinkMode::kernel, HostLinkMode::stream};
    const char* tn[2] = {"kernel", "stream"};
    P2POptions topt;
    if (trace_frame_items) topt.shape.tier[0].frame_items = trace_frame_items;
    topt.shape.head = trace_head;
    if (!shape_valid(topt.shape)) std::fprintf(stderr, "--trace-head: not a valid head\n"), std::exit(2);
    const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, topt.shape);
    const uint64_t F = plan.num_frames;
    uint64_t* d_trace;
    CK(cudaMalloc(&d_trace, 6 * F * 8));
    std::vector<uint64_t> h(6 * F);
    for (int k = 0; k < 2; ++k) {
      HostStagingLink<DType::bf16> link;
      CK(link.init(0, topt, tm[k]));
      for (int w = 0; w < 2; ++w) {
        CK(link.transfer_coded(src, dst, n, stream));
        if (link.wait() != Status::ok) std::fprintf(stderr, "trace %s: transfer failed\n", tn[k]), std::exit(1);
      }
      CK(cudaMemset(d_trace, 0, 6 * F * 8));
      link.set_trace(d_trace, d_trace + 3 * F);
      CK(cudaEventRecord(a, stream));
      CK(link.transfer_coded(src, dst, n, stream));
      CK(cudaEventRecord(b, stream));
      if (link.wait() != Status::ok) std::fprintf(stderr, "trace %s: transfer failed\n", tn[k]), std::exit(1);
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      link.set_trace(nullptr, nullptr);
      verify(bytes, tn[k]);
      CK(cudaMemcpy(h.data(), d_trace, 6 * F * 8, cudaMemcpyDeviceToHost));
      uint64_t t0 = UINT64_MAX;
      for (uint64_t v : h)
        if (v) t0 = std::min(t0, v);
      auto us = [&](uint64_t v) { return v ? double(v - t0) / 1e3 : -1.0; };
      std::printf("\ntrace, %s mode, %s, %llu frames (%llu in the head), %.3f ms (%.1f GB/s); "
                  "us from the first stamp\n",
                  tn[k], human(bytes).c_str(), (unsigned long long)F,
                  (unsigned long long)(plan.head_parts ? plan.part[0].frames : 0), ms, bytes / ms / 1e6);
      std::printf("%6s %9s %6s %6s | %9s %9s %9s | %9s %9s %9s\n", "frame", "elems", "items", "item", "s.take",
                  "s.planes", "s.done", "r.start", "r.ready", "r.done");
      for (uint64_t f = 0; f < F; ++f) {
        if (F > 28 && f == 12) std::printf("   ...\n");
        if (F > 28 && f >= 12 && f + 12 < F) continue;
        const FrameInfo fi = plan.frame(f);
        const uint64_t* sv = &h[3 * f];
        const uint64_t* rv = &h[3 * F + 3 * f];
        std::printf("%6llu %9llu %6u %6u | %9.1f %9.1f %9.1f | %9.1f %9.1f %9.1f\n", (unsigned long long)f,
                    (unsigned long long)fi.elems, fi.items, fi.item_elems, us(sv[0]), us(sv[1]), us(sv[2]), us(rv[0]),
                    us(rv[1]), us(rv[2]));
      }
      std::fflush(stdout);
    }
    CK(cudaFree(d_trace));
  }
  if (!curve) return 0;

  // ---- the links ------------------------------------------------------------------------------------------
  struct Link {
    const char* name;
    HostStagingLink<DType::bf16> link;
  };
  std::vector<Link> all_links(4);
  const HostLinkMode all_modes[4] = {HostLinkMode::copy, HostLinkMode::relay, HostLinkMode::kernel,
                                     HostLinkMode::stream};
  const char* all_names[4] = {"copy", "relay", "kernel", "stream"};
  int NL = 0;
  for (int k = 0; k < 4; ++k) {
    if ((","+modes+",").find(std::string(",") + all_names[k] + ",") == std::string::npos) continue;
    all_links[NL].name = all_names[k];
    CK(all_links[NL].link.init(0, all_modes[k] == HostLinkMode::stream ? P2POptions::stream_tuned() : P2POptions(),
                               all_modes[k]));
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
  std::printf("\n");
  double min_ratio[4] = {1e9, 1e9, 1e9, 1e9}, min_ratio_64[4] = {1e9, 1e9, 1e9, 1e9};
  for (uint64_t bytes = min_kib << 10; bytes <= max_bytes; bytes *= 2) {
    const uint64_t n = bytes / 2;
    const int reps = std::max(5, int(reps_scale * (bytes <= (uint64_t(1) << 20)    ? 41
                                                   : bytes <= (uint64_t(64) << 20) ? 15
                                                                                   : 7)));
    // raw: best chunk
    double raw_best = 1e30;
    uint64_t raw_chunk = 0;
    std::vector<uint64_t> cands;  // pipelined chunk sizes below the message size, and one chunk (two copies)
    for (uint64_t c : chunks)
      if (c < bytes) cands.push_back(c);
    if (bytes <= RAW_BUFFERS * (uint64_t(16) << 20)) cands.push_back(bytes);
    for (uint64_t c : cands) {
      const double ms = time_ms(
          reps,
          [&] { CK(StagedRawCopy::run(src, dst, bytes, c, raw_host, RAW_BUFFERS, raw_events.data(), stream, side)); },
          nowait);
      if (ms < raw_best) raw_best = ms, raw_chunk = c;
    }
    CK(cudaMemset(dst, 0, bytes));
    CK(StagedRawCopy::run(src, dst, bytes, raw_chunk, raw_host, RAW_BUFFERS, raw_events.data(), stream, side));
    CK(cudaStreamSynchronize(stream));
    verify(bytes, "raw");
    rows.push_back({bytes, "raw", raw_best, bytes / raw_best / 1e6, "chunk " + std::to_string(raw_chunk)});
    double coded[4], autob[4];
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
      CK(cudaMemset(dst, 0, bytes));
      CK(link.transfer_coded(src, dst, n, stream));
      wait();
      verify(bytes, links[k].name);
      autob[k] = time_ms(
          reps, [&] { CK(link.transfer(src, dst, n, stream)); }, wait);
      CK(cudaMemset(dst, 0, bytes));
      CK(link.transfer(src, dst, n, stream));
      wait();
      verify(bytes, links[k].name);
      rows.push_back({bytes, std::string("coded_") + links[k].name, coded[k], bytes / coded[k] / 1e6, ""});
      rows.push_back({bytes, std::string("link_") + links[k].name, autob[k], bytes / autob[k] / 1e6,
                      use_bypass(bytes, link.bypass_threshold()) ? "bypass (raw)" : "coded"});
      const double r = raw_best / autob[k];
      min_ratio[k] = std::min(min_ratio[k], r);
      if (bytes >= (uint64_t(64) << 20)) min_ratio_64[k] = std::min(min_ratio_64[k], r);
    }
    std::printf("%-9s %9.2f %8s |", human(bytes).c_str(), bytes / raw_best / 1e6, human(raw_chunk).c_str());
    for (int k = 0; k < NL; ++k) std::printf(" %8.2f", bytes / coded[k] / 1e6);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %10.2f", bytes / autob[k] / 1e6);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %9.3f", raw_best / autob[k]);
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf(
      "\nGB/s = message bytes / (start .. receiver holds every decoded element); raw = pipelined copy-engine "
      "transfer, best of one chunk and chunks of {128K..16M}; copy/relay/kernel/stream = the link's modes, coded always; +bp "
      "= "
      "the link as used (raw below its measured bypass threshold); c/r/k/raw = link (+bp) speed over raw.\n");
  for (int k = 0; k < NL; ++k)
    std::printf("%s link: min over sizes of speed/raw %.3f; min at >= 64 MiB %.3f\n", links[k].name, min_ratio[k],
                min_ratio_64[k]);

  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"data\": \"llama_grads.bf16 tiled\",\n"
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
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 0;
}
