// Probe: what slows the copy engines of stream mode's frames (GPU -> pinned -> GPU, the host -> device copy of
// each frame after its device -> host copy, slots reused after their previous host -> device copy): pinned
// allocation flags, pinned footprint, the link's stream memory operations (gate waits, "landed" writes on a
// signal stream), and SM warps polling a word with the receiver's backoff while the copies run: in GPU memory
// (GPU or system scope, like the persistent receiver's waiting warps) or, in one case, also in pinned host
// memory. Prints a table only (H200: the copies ran at 48 GB/s each way in every case but the
// last, where ~2,000 warps reading one pinned word about once a microsecond each cut them to 0.1 GB/s).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#define CK(x)                                                                \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

__device__ __forceinline__ uint64_t gns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint64_t ld_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_gpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Every warp's lane 0 polls `flag` (GPU memory; and host_word, if given) with the receiver's backoff until *stop
// (GPU memory, set by a kernel once the copies are done) or for 3 s at most.
template <bool SYS>
__global__ void poller(const uint64_t* flag, const volatile uint32_t* abort_word, const volatile uint32_t* stop,
                       const volatile uint32_t* host_word) {
  if ((threadIdx.x & 31) != 0) return;
  const uint64_t t0 = gns();
  uint32_t sleep = 32;
  uint64_t sink = 0;
  for (uint32_t it = 0;; ++it) {
    sink += SYS ? ld_sys(flag) : ld_gpu(flag);
    if (host_word) sink += *host_word;
    sink += *abort_word;
    sink += gns();
    if ((it & 63) == 0 && (*stop || gns() - t0 > 3000000000ull)) break;
    __nanosleep(sleep);
    sleep = sleep < 1024 ? sleep * 2 : sleep;
  }
  if (sink == 42) *(volatile uint32_t*)abort_word = 1;
}
__global__ void set_word(uint32_t* w, uint32_t v) { *(volatile uint32_t*)w = v; }  // loaded before the pollers run

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("zipcomm_probe_copy_engines: no GPU on this machine; nothing measured.\n");
    return 0;
  }
  const uint64_t MiB = 1 << 20, total = 256 * MiB, frame = 8 * MiB + 2816 * 1024, slot = 24 * MiB;
  uint8_t *src, *dst;
  CK(cudaMalloc(&src, total));
  CK(cudaMalloc(&dst, total));
  CK(cudaMemset(src, 1, total));
  uint64_t* flag;
  uint32_t* abort_word;
  CK(cudaMalloc(&flag, 64));
  CK(cudaMalloc(&abort_word, 64));
  CK(cudaMemset(flag, 0, 64));
  CK(cudaMemset(abort_word, 0, 64));
  uint32_t *stop, *host_word;
  CK(cudaMalloc(&stop, 64));
  CK(cudaHostAlloc(&host_word, 64, cudaHostAllocMapped));
  *host_word = 0;
  cudaStream_t d2h, h2d, bg, bg2;
  CK(cudaStreamCreateWithFlags(&bg2, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&d2h, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&h2d, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&bg, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> dev(64), hev(64);
  for (auto& e : dev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (auto& e : hev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  struct Cfg {
    std::string name;
    unsigned flags;
    uint32_t slots;
    uint64_t piece;
    int poll;
    int memops = 0;
  };
  zipcomm::comm::p2p_detail::StreamMemOps ops;
  if (ops.load(0) != cudaSuccess) {
    std::printf("zipcomm_probe_copy_engines: no 64-bit stream memory operations here; nothing measured.\n");
    return 0;
  }
  uint64_t* words;  // [0]: a flag already set (1); [1..]: landed words
  CK(cudaMalloc(&words, 4096));
  CK(cudaMemset(words, 0, 4096));
  set_word<<<1, 1>>>(reinterpret_cast<uint32_t*>(words), 1);
  CK(cudaDeviceSynchronize());
  cudaStream_t gate0, gate1, sig;
  CK(cudaStreamCreateWithFlags(&gate0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&gate1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sig, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> gev(64);
  for (auto& e : gev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::vector<Cfg> cfgs = {
      {"default pinned, 16 slots", cudaHostAllocDefault, 16, frame, 0},
      {"mapped+portable, 16 slots (the link's ring)", cudaHostAllocMapped | cudaHostAllocPortable, 16, frame, 0},
      {"mapped+portable, 4 slots", cudaHostAllocMapped | cudaHostAllocPortable, 4, frame, 0},
      {"16 slots, the link's stream ops (gates, landed writes)", cudaHostAllocMapped | cudaHostAllocPortable, 16, frame,
       0, 1},
      {"default pinned, 4 slots, 4 MiB pieces (raw-like)", cudaHostAllocDefault, 4, 4 * MiB, 0},
      {"16 slots, gpu-scope pollers", cudaHostAllocMapped | cudaHostAllocPortable, 16, frame, 1},
      {"16 slots, sys-scope pollers", cudaHostAllocMapped | cudaHostAllocPortable, 16, frame, 2},
      {"16 slots, stream ops + gpu-scope pollers", cudaHostAllocMapped | cudaHostAllocPortable, 16, frame, 1, 1},
      {"16 slots, pollers + a host word", cudaHostAllocMapped | cudaHostAllocPortable, 16, frame, 3},
  };

  std::vector<uint8_t*> hosts(cfgs.size());
  for (size_t c = 0; c < cfgs.size(); ++c) {
    CK(cudaHostAlloc(&hosts[c], cfgs[c].slots * slot, cfgs[c].flags));
    std::memset(hosts[c], 3, cfgs[c].slots * slot);
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<std::vector<float>> t(cfgs.size());
  std::printf(
      "GPU -> pinned -> GPU, %llu MiB each way in frames of 10.75 MiB (stream mode's planes + section B "
      "of a 16 MiB bf16 frame), median of 3 (min-max):\n",
      (unsigned long long)(total / MiB));
  for (size_t c = 0; c < cfgs.size(); ++c)
    for (int round = 0; round < 4; ++round) {
      const Cfg& g = cfgs[c];
      set_word<<<1, 1, 0, bg>>>(stop, 0);
      if (g.poll == 1) poller<false><<<sms, 512, 0, bg>>>(flag, abort_word, stop, nullptr);
      if (g.poll == 2) poller<true><<<sms, 512, 0, bg>>>(flag, abort_word, stop, nullptr);
      if (g.poll == 3) poller<true><<<sms, 512, 0, bg>>>(flag, abort_word, stop, host_word);
      CK(cudaEventRecord(a, d2h));
      CK(cudaStreamWaitEvent(h2d, a, 0));
      const uint64_t steps = total / g.piece;
      for (uint64_t i = 0; i < steps; ++i) {
        const uint32_t s = uint32_t(i % g.slots);
        uint8_t* host = hosts[c] + s * slot;
        if (g.memops) {  // the link's frame: d2h waits for the sender's flag through a gate, h2d for a credit
          CK(ops.wait_geq(gate0, words, 1));
          CK(cudaEventRecord(gev[2 * s], gate0));
          CK(cudaStreamWaitEvent(d2h, gev[2 * s], 0));
          CK(ops.wait_geq(gate1, words, 1));
          CK(cudaEventRecord(gev[2 * s + 1], gate1));
          CK(cudaStreamWaitEvent(h2d, gev[2 * s + 1], 0));
        }
        if (i >= g.slots) CK(cudaStreamWaitEvent(d2h, hev[s], 0));  // slot free: its previous h2d done
        CK(cudaMemcpyAsync(host, src + i * g.piece, g.piece, cudaMemcpyDeviceToHost, d2h));
        CK(cudaEventRecord(dev[s], d2h));
        CK(cudaStreamWaitEvent(h2d, dev[s], 0));
        CK(cudaMemcpyAsync(dst + i * g.piece, host, g.piece, cudaMemcpyHostToDevice, h2d));
        CK(cudaEventRecord(hev[s], h2d));
        if (g.memops) {
          CK(cudaStreamWaitEvent(sig, hev[s], 0));
          CK(ops.write(sig, words + 1 + s, i + 1));
        }
      }
      if (g.memops) {
        CK(cudaEventRecord(gev[40], sig));
        CK(cudaStreamWaitEvent(h2d, gev[40], 0));
      }
      CK(cudaEventRecord(b, h2d));
      CK(cudaStreamWaitEvent(bg2, b, 0));
      set_word<<<1, 1, 0, bg2>>>(stop, 1);
      CK(cudaEventSynchronize(b));
      CK(cudaStreamSynchronize(bg));
      CK(cudaStreamSynchronize(bg2));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (round > 0) t[c].push_back(ms);
      if (round == 3) {
        std::sort(t[c].begin(), t[c].end());
        const uint64_t moved = total / g.piece * g.piece;
        std::printf("  %-55s %8.3f ms  %5.1f GB/s each way (%.1f-%.1f)\n", g.name.c_str(), t[c][1],
                    moved / t[c][1] / 1e6, moved / t[c].back() / 1e6, moved / t[c].front() / 1e6);
        std::fflush(stdout);
      }
    }
  return 0;
}
