// Probe: which host calls wait for a kernel that never ends on another stream.
//
// An inference engine syncing weights runs its own persistent kernels all along; any CUDA call that waits for
// the whole device (not only for its own stream) then waits forever. For each operation below, this launches a
// "spinner" kernel (one block, as an engine's reader would be) on a non-blocking stream of its own that spins
// until the host releases it or SPIN_S seconds pass, runs the operation, and times it: an operation that
// takes about SPIN_S waited for the spinner (blocked); one that returns at once did not. The P2P links'
// transfer() + wait() are among the operations (both host link modes, coded and raw; PeerLink on one GPU with
// grids of several sizes).
// Usage: zipcomm_probe_concurrent [--spin-s 3]     (prints a table; exits 1 when a link operation blocked)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#include "example_common.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

/// Spins until *release (mapped pinned memory) is set or `ns` nanoseconds passed on the GPU's clock.
__global__ void spinner(const volatile uint32_t* release, uint64_t ns) {
  uint64_t t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    if (*release) break;
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > ns) break;
    __nanosleep(1000);
  }
}

/// Kernels that do nothing, one per probe: each is launched for the first time in its own probe (lazy loading
/// loads a kernel at its first launch unless something loaded it before).
template <int K>
__global__ void nop_kernel(uint32_t* p) {
  if (p) *p += K;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  double spin_s = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--spin-s") && i + 1 < argc)
      spin_s = std::atof(argv[++i]);
    else
      return std::fprintf(stderr, "usage: %s [--spin-s 3]\n", argv[0]), 2;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("zipcomm_probe_concurrent: no GPU here; nothing to probe.\n");
    return 0;
  }
  CK(cudaSetDevice(0));
  const uint64_t n = uint64_t(16) << 20;  // 32 MiB of bf16: coded above the default bypass threshold
  uint8_t *src, *dst, *pinned, *dev_small;
  uint32_t* release;
  CK(cudaMalloc(&src, 2 * n));
  CK(cudaMalloc(&dst, 2 * n));
  CK(cudaMalloc(&dev_small, 4096));
  CK(cudaMallocHost(&pinned, 4096));
  CK(cudaHostAlloc(&release, 4, cudaHostAllocMapped));
  {  // near-Gaussian bf16 data, so the coded path really codes
    std::vector<uint16_t> h(n);
    uint32_t x = 12345;
    for (uint64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      h[i] = uint16_t(0x3C00 + ((x >> 16) & 0x3FF)) ^ uint16_t((x >> 8) & 0x8000);
    }
    CK(cudaMemcpy(src, h.data(), 2 * n, cudaMemcpyHostToDevice));
  }
  cudaStream_t spin_stream, work;
  CK(cudaStreamCreateWithFlags(&spin_stream, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking));

  HostStagingLink<DType::bf16> links[2];
  const HostLinkMode modes[2] = {HostLinkMode::stream, HostLinkMode::copy};
  const char* mode_names[2] = {"stream", "copy"};
  bool have[2];
  for (int m = 0; m < 2; ++m) {
    CK(links[m].init(0, P2POptions(), modes[m]));
    have[m] = links[m].mode() == modes[m];  // stream mode needs 64-bit stream memory operations
    if (!have[m]) std::printf("(%s mode not available here)\n", mode_names[m]);
  }

  // PeerLink on one GPU: its sender and receiver grids wait on each other, so both must be resident beside the
  // spinner. Grids of every SM (the default), every SM but one, and half of them.
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int peer_blocks[5] = {0, sms - 1, sms / 2, 0, 0};  // the last two: the raw transfer, coded + raw
  PeerLink<DType::bf16> peers[5];
  for (int k = 0; k < 5; ++k) {
    P2POptions o;
    o.sender_blocks = o.receiver_blocks = peer_blocks[k];
    o.timeout_ns = uint64_t(spin_s * 0.4e9);  // a starved transfer reports timeout before the spinner ends
    CK(peers[k].init(0, 0, o));
  }

  struct Op {
    std::string name;
    bool library;
    std::function<bool()> run;  // false: the operation itself failed
  };
  std::vector<Op> ops;
  auto ok = [](cudaError_t e) { return e == cudaSuccess; };
  // Lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) loads a kernel at its first launch;
  // cudaFuncGetAttributes loads it without launching it.
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, nop_kernel<2>));  // before any spinner: loaded now
  CK(cudaFuncGetAttributes(&fa, spinner));
  ops.push_back({"first launch of a kernel not loaded yet + cudaStreamSynchronize", false,
                 [&] { nop_kernel<1><<<1, 1, 0, work>>>(nullptr); return ok(cudaStreamSynchronize(work)); }});
  ops.push_back({"first launch of a kernel loaded by cudaFuncGetAttributes before", false,
                 [&] { nop_kernel<2><<<1, 1, 0, work>>>(nullptr); return ok(cudaStreamSynchronize(work)); }});
  ops.push_back({"cudaFuncGetAttributes of a kernel not loaded yet", false,
                 [&] { cudaFuncAttributes a; return ok(cudaFuncGetAttributes(&a, nop_kernel<3>)); }});
  ops.push_back({"launch of a kernel launched before (nop 1 again)", false,
                 [&] { nop_kernel<1><<<1, 1, 0, work>>>(nullptr); return ok(cudaStreamSynchronize(work)); }});
  ops.push_back({"cudaEventCreate + Record + Synchronize + Destroy", false, [&] {
                   cudaEvent_t ev;
                   return ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) && ok(cudaEventRecord(ev, work)) &&
                          ok(cudaEventSynchronize(ev)) && ok(cudaEventDestroy(ev));
                 }});
  ops.push_back({"cudaStreamCreateWithFlags + cudaStreamDestroy", false, [&] {
                   cudaStream_t st;
                   return ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) && ok(cudaStreamDestroy(st));
                 }});
  ops.push_back({"cudaMemcpyAsync D2H, pinned dst + cudaStreamSynchronize", false, [&] {
                   return ok(cudaMemcpyAsync(pinned, dev_small, 8, cudaMemcpyDeviceToHost, work)) &&
                          ok(cudaStreamSynchronize(work));
                 }});
  ops.push_back({"cudaMemcpyAsync D2H, pageable dst", false, [&] {
                   uint64_t v;
                   return ok(cudaMemcpyAsync(&v, dev_small, 8, cudaMemcpyDeviceToHost, work)) &&
                          ok(cudaStreamSynchronize(work));
                 }});
  ops.push_back({"cudaMemcpyAsync H2D, pageable src", false, [&] {
                   const uint64_t v = 1;
                   return ok(cudaMemcpyAsync(dev_small, &v, 8, cudaMemcpyHostToDevice, work)) &&
                          ok(cudaStreamSynchronize(work));
                 }});
  ops.push_back({"cudaMemcpyAsync H2D, pinned src", false, [&] {
                   return ok(cudaMemcpyAsync(dev_small, pinned, 8, cudaMemcpyHostToDevice, work)) &&
                          ok(cudaStreamSynchronize(work));
                 }});
  ops.push_back({"cudaMemcpyAsync D2D", false, [&] {
                   return ok(cudaMemcpyAsync(dev_small + 2048, dev_small, 8, cudaMemcpyDeviceToDevice, work)) &&
                          ok(cudaStreamSynchronize(work));
                 }});
  ops.push_back({"cudaMemsetAsync", false,
                 [&] { return ok(cudaMemsetAsync(dev_small, 0, 8, work)) && ok(cudaStreamSynchronize(work)); }});
  ops.push_back({"cudaMemcpy D2H pinned (legacy stream)", false,
                 [&] { return ok(cudaMemcpy(pinned, dev_small, 8, cudaMemcpyDeviceToHost)); }});
  ops.push_back({"cudaMemcpy D2D (legacy stream)", false,
                 [&] { return ok(cudaMemcpy(dev_small + 2048, dev_small, 8, cudaMemcpyDeviceToDevice)); }});
  ops.push_back({"cudaMemset (legacy stream)", false, [&] { return ok(cudaMemset(dev_small, 0, 8)); }});
  ops.push_back({"cudaMalloc + cudaFree", false, [&] {
                   void* p = nullptr;
                   return ok(cudaMalloc(&p, 1 << 20)) && ok(cudaFree(p));
                 }});
  ops.push_back({"cudaMallocHost + cudaFreeHost", false, [&] {
                   void* p = nullptr;
                   return ok(cudaMallocHost(&p, 1 << 20)) && ok(cudaFreeHost(p));
                 }});
  for (int m = 0; m < 2; ++m) {
    if (!have[m]) continue;
    ops.push_back({std::string("HostStagingLink ") + mode_names[m] + ": transfer_coded 32 MiB + wait", true, [&, m] {
                     return ok(links[m].transfer_coded(src, dst, n, work)) && links[m].wait() == Status::ok;
                   }});
    ops.push_back({std::string("HostStagingLink ") + mode_names[m] + ": transfer_raw 32 MiB + wait", true, [&, m] {
                     return ok(links[m].transfer_raw(src, dst, n, work)) && links[m].wait() == Status::ok;
                   }});
    ops.push_back({std::string("HostStagingLink ") + mode_names[m] + ": transfer_raw 4 KiB + wait", true, [&, m] {
                     return ok(links[m].transfer_raw(src, dst, 2048, work)) && links[m].wait() == Status::ok;
                   }});
  }

  for (int k = 0; k < 3; ++k) {
    const std::string grid = peer_blocks[k] ? std::to_string(peer_blocks[k]) + " blocks" : "default grids";
    ops.push_back({"PeerLink one GPU, " + grid + ": transfer_coded 32 MiB + wait", true, [&, k] {
                     return ok(peers[k].transfer_coded(src, dst, n, work, work)) && peers[k].wait() == Status::ok;
                   }});
  }
  ops.push_back({"PeerLink one GPU: transfer_raw 32 MiB + wait", true, [&] {
                   return ok(peers[3].transfer_raw(src, dst, n, work, work)) && peers[3].wait() == Status::ok;
                 }});
  // A weight sync's order: a coded transfer, a raw one queued behind it, then one wait.
  ops.push_back({"PeerLink one GPU: transfer_coded + transfer_raw, one wait", true, [&] {
                   return ok(peers[4].transfer_coded(src, dst, n, work, work)) &&
                          ok(peers[4].transfer_raw(src, dst, n, work, work)) && peers[4].wait() == Status::ok;
                 }});

  std::printf("spinner: one block on a non-blocking stream for up to %.1f s; an operation taking about that long "
              "waited for it\n",
              spin_s);
  std::printf("%-62s %10s  %s\n", "operation", "seconds", "result");
  int library_blocked = 0, failed = 0;
  for (const Op& op : ops) {
    *const_cast<volatile uint32_t*>(release) = 0;
    spinner<<<1, 256, 0, spin_stream>>>(release, uint64_t(spin_s * 1e9));
    CK(cudaGetLastError());
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 0.05) {}  // the spinner is running by now
    const auto t1 = std::chrono::steady_clock::now();
    const bool fine = op.run();
    const double s = seconds_since(t1);
    const bool blocked = s > 0.5 * spin_s;
    *const_cast<volatile uint32_t*>(release) = 1;
    CK(cudaStreamSynchronize(spin_stream));
    CK(cudaDeviceSynchronize());
    std::printf("%-62s %10.4f  %s%s\n", op.name.c_str(), s, blocked ? "BLOCKED by the spinner" : "ok",
                fine ? "" : " (the operation failed)");
    if (blocked && op.library) ++library_blocked;
    if (!fine) ++failed;
  }
  // the coded transfers above must also have delivered the data
  unsigned long long* diff;
  CK(cudaMalloc(&diff, 8));
  CK(cudaDeviceSynchronize());
  const unsigned long long d = examples::count_diff_words(src, dst, 2 * n, diff);
  std::printf("last transfer bit-exact: %s\n", d == 0 ? "yes" : "NO");
  std::printf("%d library operations blocked, %d operations failed\n", library_blocked, failed);
  return library_blocked || failed || d ? 1 : 0;
}
