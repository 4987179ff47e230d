// zipcomm_stress_load: keeps a GPU busy from a process of its own while another program is tested on it, in the
// ways the P2P links and the ring compete with: a memory-streaming kernel and an arithmetic kernel on two
// non-blocking streams, the streaming kernel again on the legacy stream with cudaMemset and device-to-device
// cudaMemcpy there, and (--copies on) host <-> device copies through pinned and pageable memory on the legacy
// stream, so that the copy engines and the host link are busy too. At most two rounds are queued at a time.
// Runs until SIGTERM or SIGINT, or until --seconds pass (a bound should whoever started it die). Touches
// --ready FILE once its first round has run (its context is up and its kernels are loaded).
// Usage: zipcomm_stress_load [--seconds 120] [--mib 1024] [--copies on|off] [--ready FILE] [--device 0]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "example_common.cuh"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

/// b = a mixed (a few integer rounds per word): memory-bound.
__global__ void stream_kernel(const uint4* a, uint4* b, uint64_t n16, uint32_t salt) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += uint64_t(gridDim.x) * blockDim.x) {
    uint4 x = a[i];
    x.x = (x.x ^ salt) * 0x9E3779B1u;
    x.y = (x.y + x.x) * 0x85EBCA77u;
    x.z = (x.z ^ x.y) * 0xC2B2AE3Du;
    x.w = (x.w + x.z) * 0x27D4EB2Fu;
    b[i] = x;
  }
}

/// Fused multiply-adds until `ns` passed on the GPU clock: compute-bound, a fixed time whatever the GPU.
__global__ void arithmetic_kernel(float* out, uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  float x0 = threadIdx.x * 1e-3f, x1 = x0 + 1.0f, x2 = x0 + 2.0f, x3 = x0 + 3.0f;
  do {
    for (int k = 0; k < 256; ++k) {
      x0 = fmaf(x0, 0.9999f, 1e-4f);
      x1 = fmaf(x1, 0.9998f, 2e-4f);
      x2 = fmaf(x2, 0.9997f, 3e-4f);
      x3 = fmaf(x3, 0.9996f, 4e-4f);
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  if (x0 + x1 + x2 + x3 == 1234.5f) out[threadIdx.x] = x0;  // keeps the work; never true in practice
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 120;
  uint64_t mib = 1024;
  bool copies = true;
  std::string ready;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--seconds" && more) seconds = std::atof(argv[++i]);
    else if (a == "--mib" && more) mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--copies" && more) copies = std::string(argv[++i]) != "off";
    else if (a == "--ready" && more) ready = argv[++i];
    else if (a == "--device" && more) device = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--seconds 120] [--mib 1024] [--copies on|off] [--ready FILE] [--device 0]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0) || mib < 64) return std::fprintf(stderr, "bad --seconds or --mib (64 at least)\n"), 2;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device)
    return std::fprintf(stderr, "zipcomm_stress_load: no GPU %d here\n", device), 2;
  CK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, device));

  // a, b: the streaming kernels' buffers (mib each); c, d: the legacy stream's memsets and copies; pinned and
  // pageable host buffers for the copies over the host link.
  const uint64_t big = mib << 20, side = big / 16, host_bytes = std::min<uint64_t>(uint64_t(32) << 20, side);
  uint8_t *a, *b, *c, *d, *pinned;
  float* sink;
  CK(cudaMalloc(&a, big));
  CK(cudaMalloc(&b, big));
  CK(cudaMalloc(&c, side));
  CK(cudaMalloc(&d, side));
  CK(cudaMalloc(&sink, 4096));
  CK(cudaHostAlloc(&pinned, 2 * host_bytes, cudaHostAllocDefault));
  std::vector<uint8_t> pageable(host_bytes / 4, 0x3C);
  CK(cudaMemset(a, 0x11, big));
  CK(cudaDeviceSynchronize());
  cudaStream_t streaming, arithmetic;
  CK(cudaStreamCreateWithFlags(&streaming, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&arithmetic, cudaStreamNonBlocking));
  // Round r's end on each stream; round r + 2 waits for it (two rounds queued at most).
  cudaEvent_t done[2][3];
  for (auto& round : done)
    for (cudaEvent_t& e : round) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const cudaStream_t legacy = 0;
  const int grid = prop.multiProcessorCount * 4;

  const auto t0 = std::chrono::steady_clock::now();
  uint64_t rounds = 0, streamed = 0, copied = 0;
  bool announced = false;
  while (!g_stop && seconds_since(t0) < seconds) {
    cudaEvent_t* ev = done[rounds % 2];
    for (int k = 0; k < 3; ++k) CK(cudaEventSynchronize(ev[k]));  // round - 2 is done (a fresh event is, too)
    const uint32_t salt = uint32_t(rounds);
    stream_kernel<<<grid, 256, 0, streaming>>>(reinterpret_cast<const uint4*>(a), reinterpret_cast<uint4*>(b),
                                               big / 16, salt);
    stream_kernel<<<grid, 256, 0, streaming>>>(reinterpret_cast<const uint4*>(b), reinterpret_cast<uint4*>(a),
                                               big / 16, salt + 1);
    CK(cudaGetLastError());
    arithmetic_kernel<<<prop.multiProcessorCount * 2, 256, 0, arithmetic>>>(sink, 2000000);  // 2 ms
    CK(cudaGetLastError());
    CK(cudaMemset(c, int(rounds & 0xFF), side));
    CK(cudaMemcpy(d, c, side, cudaMemcpyDeviceToDevice));
    stream_kernel<<<grid, 256, 0, legacy>>>(reinterpret_cast<const uint4*>(d), reinterpret_cast<uint4*>(c),
                                            side / 16, salt);
    CK(cudaGetLastError());
    if (copies) {
      CK(cudaMemcpyAsync(pinned, c, host_bytes, cudaMemcpyDeviceToHost, legacy));
      CK(cudaMemcpyAsync(d, pinned + host_bytes, host_bytes, cudaMemcpyHostToDevice, legacy));
      if (rounds % 4 == 0) CK(cudaMemcpy(c, pageable.data(), pageable.size(), cudaMemcpyHostToDevice));
      copied += 2 * host_bytes + (rounds % 4 == 0 ? pageable.size() : 0);
    }
    CK(cudaEventRecord(ev[0], streaming));
    CK(cudaEventRecord(ev[1], arithmetic));
    CK(cudaEventRecord(ev[2], legacy));
    streamed += 4 * big + 2 * side;
    ++rounds;
    if (!announced && rounds == 2) {
      for (int k = 0; k < 3; ++k) CK(cudaEventSynchronize(done[0][k]));
      std::printf("zipcomm_stress_load: running on GPU %d (%s), %llu MiB streamed per round%s\n", device, prop.name,
                  (unsigned long long)((4 * big + 2 * side) >> 20), copies ? ", host link copies on" : "");
      std::fflush(stdout);
      if (!ready.empty()) {
        if (std::FILE* f = std::fopen(ready.c_str(), "w")) std::fclose(f);
      }
      announced = true;
    }
  }
  CK(cudaDeviceSynchronize());
  const double s = seconds_since(t0);
  std::printf("zipcomm_stress_load: %llu rounds in %.1f s (%s): %.1f GB streamed, %.1f GB over the host link\n",
              (unsigned long long)rounds, s, g_stop ? "stopped" : "time bound", streamed / 1e9, copied / 1e9);
  return 0;
}
