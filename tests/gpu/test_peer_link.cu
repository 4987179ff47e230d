// GPU tests of PeerLink: on one GPU (bf16, fp16, fp32) and between two GPUs with peer access (else GPU 0 to
// itself): bit-exact coded and raw transfers, calibrate(), batches, and failed batches reported by wait().
// Tags: [p2p]; [concurrent] needs sender and receiver kernels running at once; [multigpu] wants two GPUs.
#include <zipcomm/comm/p2p.cuh>

#include "p2p_harness.cuh"

using namespace p2p_test;

namespace {

/// Gaussian values of type D (`elems` of them, scale `sigma`) through a coded peer link from GPU 0 to itself.
template <DType D>
void check_gaussian_on_one_gpu(const P2POptions& o, uint64_t elems, float sigma, size_t src_off, size_t dst_off,
                               std::mt19937_64& rng) {
  PeerLink<D> peer;
  CUDA_OK(peer.init(0, 0, o));
  peer.set_bypass_threshold(0);
  const std::vector<uint8_t> host = gpu_test::gaussian_bytes(D, elems, sigma, rng);
  check_link_transfer(peer, Path::chosen, host, src_off, dst_off);
}

}  // namespace

TEST_CASE("p2p peer link on one GPU: bf16 (wrapping), fp16 and fp32", "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const P2POptions o = small_ring_options();
  {
    PeerLink<DType::bf16> peer;
    CUDA_OK(peer.init(0, 0, o));
    peer.set_bypass_threshold(0);
    for (uint64_t n : {uint64_t(5), uint64_t(123457), uint64_t(3) << 20})
      check_link_transfer(peer, Path::chosen, test_bf16(n, rng), element_offset(rng), element_offset(rng));
    peer.set_bypass_threshold(uint64_t(1) << 20);  // below: one peer copy
    check_link_transfer(peer, Path::chosen, test_bf16(1000, rng), 0, 0);
  }
  // 16- and 32-bit types: the peer link moves bytes, so the checker sees elements as pairs of bytes (and
  // check_link_transfer gives an fp32 link its own element count).
  check_gaussian_on_one_gpu<DType::fp16>(o, 400001, 1.0f, 0, 2, rng);
  check_gaussian_on_one_gpu<DType::fp32>(o, 300001, 0.02f, 4, 8, rng);
}

namespace {

/// The devices a peer link test runs between: GPU 0 -> GPU 1 when there are two with peer access both ways,
/// else GPU 0 to itself.
int peer_recv_device() {
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  if (devices < 2) return 0;
  int a = 0, b = 0;
  CUDA_OK(cudaDeviceCanAccessPeer(&a, 0, 1));
  CUDA_OK(cudaDeviceCanAccessPeer(&b, 1, 0));
  return a && b ? 1 : 0;
}

/// Bytes `host` at src_off on the link's send device, moved by `move` to dst_off on its receive device (streams
/// on each), checked bit-exact with guard bytes around the destination.
template <class Move>
void check_peer_transfer(PeerLink<DType::bf16>& link, const std::vector<uint8_t>& host, size_t src_off,
                         size_t dst_off, Move move) {
  const uint64_t n = host.size() / 2;
  const int sd = link.send_device(), rd = link.recv_device();
  CAPTURE(n, src_off, dst_off, sd, rd);
  const size_t guard = GUARD_BYTES, dst_bytes = host.size() + dst_off + 2 * guard;
  void *src = nullptr, *dst = nullptr;
  cudaStream_t ss, rs;
  CUDA_OK(cudaSetDevice(sd));
  CUDA_OK(cudaMalloc(&src, host.size() + src_off + 16));
  if (!host.empty())
    CUDA_OK(cudaMemcpy(static_cast<uint8_t*>(src) + src_off, host.data(), host.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaStreamCreateWithFlags(&ss, cudaStreamNonBlocking));
  CUDA_OK(cudaSetDevice(rd));
  CUDA_OK(cudaMalloc(&dst, dst_bytes));
  CUDA_OK(cudaMemset(dst, GUARD_BYTE, dst_bytes));
  CUDA_OK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaSetDevice(sd));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(move(static_cast<uint8_t*>(src) + src_off, static_cast<uint8_t*>(dst) + guard + dst_off, n, ss, rs));
  CUDA_OK(cudaStreamSynchronize(rs));
  REQUIRE(link.wait() == Status::ok);
  std::vector<uint8_t> all(dst_bytes);
  CUDA_OK(cudaMemcpy(all.data(), dst, dst_bytes, cudaMemcpyDefault));
  for (size_t i = 0; i < guard + dst_off; ++i) REQUIRE(all[i] == GUARD_BYTE);
  for (size_t i = guard + dst_off + host.size(); i < all.size(); ++i) REQUIRE(all[i] == GUARD_BYTE);
  REQUIRE(std::equal(host.begin(), host.end(), all.begin() + guard + dst_off));
  CUDA_OK(cudaSetDevice(sd));
  CUDA_OK(cudaStreamDestroy(ss));
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaSetDevice(rd));
  CUDA_OK(cudaStreamDestroy(rs));
  CUDA_OK(cudaFree(dst));
  CUDA_OK(cudaSetDevice(0));
}

/// check_peer_transfer through one of the link's transfer calls.
void check_peer_transfer(PeerLink<DType::bf16>& link, Path path, const std::vector<uint8_t>& host, size_t src_off,
                         size_t dst_off) {
  check_peer_transfer(link, host, src_off, dst_off,
                      [&](const void* s, void* d, uint64_t n, cudaStream_t ss, cudaStream_t rs) {
                        return start(link, path, s, d, n, ss, rs);
                      });
}

}  // namespace

TEST_CASE("p2p peer link between two GPUs: bit-exact coded and raw, odd sizes and alignments, ring wrapping",
          "[gpu][p2p][concurrent][multigpu]") {
  const int rd = peer_recv_device();
  if (rd == 0) {
    WARN("fewer than two GPUs with peer access to each other: the peer link between two GPUs was not run");
    return;
  }
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (bool small_ring : {true, false}) {
    CAPTURE(small_ring);
    PeerLink<DType::bf16> link;
    CUDA_OK(link.init(0, rd, small_ring ? small_ring_options() : P2POptions()));
    for (uint64_t n : {uint64_t(1), uint64_t(255), uint64_t(123457), (uint64_t(3) << 20) + 3}) {
      const std::vector<uint8_t> host = n > 100000 ? real_bf16(n) : test_bf16(n, rng);
      const size_t so = element_offset(rng), dof = element_offset(rng);
      check_peer_transfer(link, Path::coded, host, so, dof);
      check_peer_transfer(link, Path::raw, host, so, dof);
    }
    // back to back on the same streams, coded: the second waits for the first's receive side
    const std::vector<uint8_t> host = test_bf16(400001, rng);
    check_peer_transfer(link, host, 0, 0, [&](const void* s, void* d, uint64_t m, cudaStream_t a, cudaStream_t b) {
      cudaError_t e = link.transfer_coded(s, d, m, a, b);
      return e != cudaSuccess ? e : link.transfer_coded(s, d, m, a, b);
    });
  }
}

TEST_CASE("p2p peer link: calibrate() measures coded against raw and sets the bypass; transfers stay bit-exact",
          "[gpu][p2p][concurrent][multigpu]") {  // GPU 0 -> GPU 1 where there are two, else GPU 0 to itself
  const int rd = peer_recv_device();
  CAPTURE(rd);
  const uint64_t n = uint64_t(1) << 19;  // 1 MiB of real gradients
  const std::vector<uint8_t> sample = real_bf16(n);
  DeviceBuffer d_sample(sample.size());
  CUDA_OK(cudaMemcpy(d_sample.ptr, sample.data(), sample.size(), cudaMemcpyHostToDevice));
  PeerLink<DType::bf16> link;
  REQUIRE(link.calibrate(d_sample.ptr, n) == cudaErrorInvalidValue);  // not initialized
  CUDA_OK(link.init(0, rd));
  REQUIRE(link.calibrate(nullptr, n) == cudaErrorInvalidValue);
  CUDA_OK(link.calibrate(d_sample.ptr, n / 3, uint64_t(1) << 20));  // a shorter sample is tiled
  const std::vector<P2PCalibrationPoint>& pts = link.calibration();
  REQUIRE(pts.size() == 5);  // 64 KiB .. 1 MiB
  for (size_t i = 0; i < pts.size(); ++i) {
    CAPTURE(i, pts[i].coded_ms, pts[i].raw_ms);
    REQUIRE(pts[i].bytes == (uint64_t(64) << 10) << i);
    REQUIRE(pts[i].coded_ms > 0);
    REQUIRE(pts[i].raw_ms > 0);
  }
  std::vector<uint64_t> sizes;
  std::vector<double> coded, raw;
  for (const P2PCalibrationPoint& p : pts)
    sizes.push_back(p.bytes), coded.push_back(p.coded_ms), raw.push_back(p.raw_ms);
  REQUIRE(link.bypass_threshold() ==
          choose_bypass_threshold(sizes.data(), coded.data(), raw.data(), sizes.size(), 0.03));
  // as used after calibrate(), and both forced paths, below and above the threshold
  for (uint64_t m : {uint64_t(5000), n}) {
    const std::vector<uint8_t> host(sample.begin(), sample.begin() + 2 * m);
    check_peer_transfer(link, Path::chosen, host, 2, 4);
  }
}

TEST_CASE("p2p peer link: transfer_many sends a batch as one pipeline, every message bit-exact",
          "[gpu][p2p][concurrent][multigpu]") {  // GPU 0 -> GPU 1 where there are two, else GPU 0 to itself
  const int rd = peer_recv_device();
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed, rd);
  std::mt19937_64 rng(seed);
  for (bool small_ring : {true, false}) {  // 4 slots: the ring wraps inside messages and across them
    CAPTURE(small_ring);
    PeerLink<DType::bf16> link;
    CUDA_OK(link.init(0, rd, small_ring ? small_ring_options() : P2POptions()));
    for (int k = 0; k < (small_ring ? 6 : 3); ++k) {
      CAPTURE(k);
      link.set_bypass_threshold(0);  // coded, every message
      check_link_batch(link, Path::chosen, batch_sizes(rng, 10), rng, 0, rd);
      link.set_bypass_threshold(uint64_t(1) << 40);  // the whole batch raw
      check_link_batch(link, Path::chosen, batch_sizes(rng, 10), rng, 0, rd);
      check_link_batch(link, Path::raw, batch_sizes(rng, 10), rng, 0, rd);
    }
    // More messages than the link's status records: it waits for itself once on the way, and stays exact.
    link.set_bypass_threshold(0);
    check_link_batch(link, Path::chosen, past_status_records_sizes(rng), rng, 0, rd);
  }
}

TEST_CASE("p2p peer link: transfer_many refuses a bad batch whole, and reports a failed one in wait()",
          "[gpu][p2p][concurrent]") {  // on GPU 0 alone: the failures are the kernels' own
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = uint64_t(1) << 20;
  const std::vector<uint8_t> host = test_bf16(n, rng);
  DeviceBuffer src(host.size()), dst(2 * host.size());
  upload(src.ptr, host.data(), host.size());
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  P2POptions o = small_ring_options();
  PeerLink<DType::bf16> link;
  const P2PMessage good = {src.ptr, dst.ptr, n};
  REQUIRE(link.transfer_many(&good, 1, stream, stream) == cudaErrorInvalidValue);  // not initialized
  CUDA_OK(link.init(0, 0, o));
  link.set_bypass_threshold(0);
  require_bad_batches_refused(link, src, dst, n, stream);
  // A batch whose receiver gives up (1 us timeout): wait() reports it within seconds; after reset() the link works.
  PeerLink<DType::bf16> failing;
  o.timeout_ns = 1000;
  CUDA_OK(failing.init(0, 0, o));
  failing.set_bypass_threshold(0);
  check_failed_batches_reported(failing, src, dst, host, stream);
  CUDA_OK(cudaStreamDestroy(stream));
}
