// 02_p2p_pipeline: a compressed, pipelined point-to-point transfer of a large bf16 buffer.
//
// Shows zipcomm::comm's two GPU links on real gradients (tests/data, tiled):
//  (a) HostStagingLink: GPU -> pinned host buffer -> GPU, the slow link one GPU has. The sender kernel codes
//      into GPU memory and the copy engines move each frame to the pinned ring and on to the GPU, scheduled by the
//      GPU itself (stream mode, the default) or, where the driver lacks stream memory operations, by a host relay
//      (copy mode, also shown forced). The same message is timed through the pipelined raw copy (the link's
//      bypass).
//  (b) PeerLink: the sender's SMs write frames into a ring in the peer GPU's memory, the peer decodes them
//      in place. Two GPUs when there are two with peer access; else GPU 0 to itself (then it only shows the
//      protocol: a GPU's own memory is no slow link). Coded, raw (cudaMemcpyPeerAsync) and as used after
//      calibrate().
// Every transfer is checked bit-exact; exits 1 on any difference or error.
// Usage: zipcomm_p2p_pipeline [--data DIR] [--mib 256]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#include "example_common.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

bool same_on_device(const void* a, const void* b, uint64_t bytes) {
  std::vector<uint8_t> x(bytes), y(bytes);
  CK(cudaMemcpy(x.data(), a, bytes, cudaMemcpyDefault));
  CK(cudaMemcpy(y.data(), b, bytes, cudaMemcpyDefault));
  return x == y;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "tests/data";
  uint64_t mib = 256;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--mib" && i + 1 < argc)
      mib = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--mib 256]\n", argv[0]);
      return 2;
    }
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("zipcomm_p2p_pipeline: no GPU here; nothing to show.\n");
    return 0;
  }
  const std::vector<uint8_t> sample = examples::read_file(data + "/llama_grads.bf16");
  if (sample.size() < 2) {
    std::fprintf(stderr, "missing %s/llama_grads.bf16\n", data.c_str());
    return 1;
  }
  const uint64_t bytes = mib << 20, n = bytes / 2;
  std::vector<uint8_t> host(bytes);
  for (uint64_t off = 0; off < bytes; off += sample.size())
    std::memcpy(&host[off], sample.data(), std::min<uint64_t>(sample.size(), bytes - off));

  CK(cudaSetDevice(0));
  void *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  // The links order their work after the caller's stream, never after the legacy stream (the streams here are
  // non-blocking): what a transfer reads or overwrites is set up on `stream`.
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CK(cudaMemcpyAsync(src, host.data(), bytes, cudaMemcpyHostToDevice, stream));
  CK(cudaStreamSynchronize(stream));  // calibrate() reads src on the legacy stream

  // (a) pinned host staging: as it runs here (stream mode where it can), then copy mode forced; the threshold
  // for small messages is measured first.
  for (HostLinkMode mode : {HostLinkMode::stream, HostLinkMode::copy}) {
    HostStagingLink<DType::bf16> link;
    CK(link.init(0, P2POptions(), mode));
    const char* name = link.mode() == HostLinkMode::stream ? "stream" : "copy";
    CK(link.calibrate(src, sample.size() / 2, std::min<uint64_t>(bytes, uint64_t(256) << 20)));
    const double coded = examples::median_ms(stream, 1, 5, [&] { CK(link.transfer(src, dst, n, stream)); });
    if (link.wait() != Status::ok) return std::fprintf(stderr, "host link: transfer failed\n"), 1;
    CK(cudaMemsetAsync(dst, 0, bytes, stream));  // stream-ordered before the transfer that must overwrite it
    CK(link.transfer(src, dst, n, stream));
    const Status st = link.wait();
    if (st != Status::ok) return std::fprintf(stderr, "host link (%s mode): %s\n", name, status_string(st)), 1;
    if (!same_on_device(src, dst, bytes))
      return std::fprintf(stderr, "host link (%s mode): status ok, data differs\n", name), 1;
    CK(cudaMemsetAsync(dst, 0, bytes, stream));  // else the check below would see the coded transfer's bytes
    const double raw = examples::median_ms(stream, 1, 5, [&] { CK(link.transfer_raw(src, dst, n, stream)); });
    if (link.wait() != Status::ok || !same_on_device(src, dst, bytes))
      return std::fprintf(stderr, "raw copy failed\n"), 1;
    std::printf(
        "pinned host link (%s mode), %llu MiB of real bf16 gradients: %.2f ms (%.1f GB/s), raw pipelined "
        "copy %.2f ms (%.1f GB/s): %.2fx; bit-exact. Bypass below %llu KiB (measured).\n",
        name, (unsigned long long)mib, coded, bytes / coded / 1e6, raw, bytes / raw / 1e6, raw / coded,
        (unsigned long long)(link.bypass_threshold() == UINT64_MAX ? 0 : link.bypass_threshold() >> 10));
  }

  // (b) peer GPU memory.
  int peer_dev = 0;
  if (gpus >= 2) {
    int can01 = 0, can10 = 0;
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    if (can01 && can10) peer_dev = 1;
  }
  {
    void* peer_dst = dst;
    cudaStream_t peer_stream = stream;
    if (peer_dev != 0) {
      CK(cudaSetDevice(peer_dev));
      CK(cudaMalloc(&peer_dst, bytes));
      CK(cudaStreamCreateWithFlags(&peer_stream, cudaStreamNonBlocking));
      CK(cudaSetDevice(0));
    }
    PeerLink<DType::bf16> link;
    CK(link.init(0, peer_dev));
    // Timed on the receiving GPU's stream (events must belong to the device of the stream they are recorded on):
    // from before the sending side starts until the receiver holds every decoded element.
    auto peer_ms = [&](auto&& move) {
      CK(cudaSetDevice(peer_dev));
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      std::vector<float> t;
      for (int i = 0; i < 6; ++i) {  // the first is a warm-up
        CK(cudaSetDevice(peer_dev));
        CK(cudaEventRecord(a, peer_stream));
        CK(cudaSetDevice(0));
        CK(cudaStreamWaitEvent(stream, a, 0));
        CK(move());
        CK(cudaSetDevice(peer_dev));
        CK(cudaEventRecord(b, peer_stream));
        CK(cudaEventSynchronize(b));
        if (link.wait() != Status::ok) std::fprintf(stderr, "peer link: transfer failed\n"), std::exit(1);
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i > 0) t.push_back(ms);
      }
      CK(cudaEventDestroy(a));
      CK(cudaEventDestroy(b));
      CK(cudaSetDevice(0));
      std::sort(t.begin(), t.end());
      return double(t[t.size() / 2]);
    };
    auto check = [&](const char* what) {
      if (!same_on_device(src, peer_dst, bytes)) std::fprintf(stderr, "peer link (%s): data differs\n", what), std::exit(1);
      CK(cudaSetDevice(peer_dev));
      CK(cudaMemset(peer_dst, 0, bytes));
      CK(cudaDeviceSynchronize());
      CK(cudaSetDevice(0));
    };
    const double coded = peer_ms([&] { return link.transfer_coded(src, peer_dst, n, stream, peer_stream); });
    check("coded");
    const double raw = peer_ms([&] { return link.transfer_raw(src, peer_dst, n, stream, peer_stream); });
    check("raw");
    CK(link.calibrate(src, sample.size() / 2, std::min<uint64_t>(bytes, uint64_t(256) << 20)));
    const double used = peer_ms([&] { return link.transfer(src, peer_dst, n, stream, peer_stream); });
    check("as used");
    const uint64_t th = link.bypass_threshold();
    std::printf("peer link GPU 0 -> GPU %d%s, %llu MiB of real bf16 gradients: coded %.3f ms (%.1f GB/s), raw "
                "cudaMemcpyPeerAsync %.3f ms (%.1f GB/s): coded/raw speed %.2fx; as used after calibrate() %.3f ms "
                "(%s; coded from %s); bit-exact.\n",
                peer_dev, peer_dev == 0 ? " (one GPU: the protocol only; no slow link to win on)" : "",
                (unsigned long long)mib, coded, bytes / coded / 1e6, raw, bytes / raw / 1e6, raw / coded, used,
                use_bypass(bytes, th) ? "raw" : "coded",
                th == UINT64_MAX ? "never" : (std::to_string(th >> 10) + " KiB").c_str());
    if (peer_dev != 0) {
      CK(cudaSetDevice(peer_dev));
      CK(cudaFree(peer_dst));
      CK(cudaSetDevice(0));
    }
  }
  CK(cudaFree(src));
  CK(cudaFree(dst));
  std::printf("OK\n");
  return 0;
}
