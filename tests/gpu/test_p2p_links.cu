// GPU tests that hold for both links (HostStagingLink and PeerLink): a head region, messages within one ring,
// transfers beside a kernel that never ends, and wait() reporting every transfer's first error.
// Tags: [p2p]; [concurrent] needs sender and receiver kernels running at once.
#include <chrono>
#include <sstream>

#include <zipcomm/comm/p2p.cuh>

#include "p2p_harness.cuh"

using namespace p2p_test;

TEST_CASE("p2p links with a head region: bit-exact at sizes around the regions; the head's budget class adapts",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  // Tail: 65536 + 4096 elements. Heads: 4096-element items (a budget class of their own) and 2048-element
  // items (tier 1's class), each over more frames than the ring has slots.
  const PipelineTier heads[] = {{4096, 4, 150000}, {2048, 8, 100000}};
  const uint64_t tail = 65536 + 4096;
  for (const PipelineTier& head : heads) {
    CAPTURE(head.item_elems, head.frame_items, head.region_elems);
    P2POptions o = small_ring_options();
    o.shape.head = head;
    o.exps_budget_per_kelem = 8;  // far too small at first: head frames overflow too, then the budget adapts
    for (HostLinkMode mode : {HostLinkMode::copy, HostLinkMode::stream}) {
      CAPTURE(mode_name(mode));
      HostStagingLink<DType::bf16> link;
      CUDA_OK(link.init(0, o, mode));
      for (uint64_t n : {uint64_t(1), uint64_t(3000), tail, tail + 5000, tail + head.region_elems - 1,
                         tail + head.region_elems + 16385, uint64_t(1) << 21})
        check_link_transfer(link, Path::coded, test_bf16(n, rng), element_offset(rng), element_offset(rng));
      if (link.mode() != HostLinkMode::stream) continue;  // the budget is stream mode's
      const std::vector<uint8_t> real = real_bf16(uint64_t(4) << 20);
      for (int k = 0; k < 2; ++k) check_link_transfer(link, Path::coded, real, 0, 0);
      const ExpsBudget& b = link.exps_budget();
      const uint32_t k = b.tier_of(head.item_elems);
      CAPTURE(k, b.per_kelem[0], b.per_kelem[1], b.per_kelem[2], b.per_kelem[3]);
      REQUIRE(b.item_elems[k] == head.item_elems);
      REQUIRE(k == (head.item_elems == 4096 ? 3u : 1u));
      REQUIRE(b.per_kelem[k] > 8);  // adapted from what the head's (and, shared, tier 1's) frames needed
      const uint64_t n = real.size() / 2, edges = 2 * (link.raw_head_elems(n) + link.raw_tail_elems(n));
      const double wire = double(link.wire_bytes() - edges) / double(real.size() - edges);  // the frames' part
      CAPTURE(wire, edges);
      REQUIRE(wire > 0.6);
      REQUIRE(wire < 0.72);
    }
    PeerLink<DType::bf16> peer;
    CUDA_OK(peer.init(0, 0, o));
    peer.set_bypass_threshold(0);
    check_link_transfer(peer, Path::chosen, test_bf16(tail + head.region_elems + 12345, rng), 2, 4);
  }
}

TEST_CASE("p2p links within one ring's capacity (no concurrency needed)", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  P2POptions o;                   // default shape; 16 slots hold every frame of these messages
  o.timeout_ns = 20000000000ull;  // also run under compute-sanitizer, which slows kernels down a lot
  o.sender_blocks = 4;
  o.receiver_blocks = 4;
  // Stream mode too: its sender finishes alone here, then the copy engines and the receiver follow.
  for (HostLinkMode mode : {HostLinkMode::copy, HostLinkMode::stream}) {
    CAPTURE(mode_name(mode));
    HostStagingLink<DType::bf16> link;
    CUDA_OK(link.init(0, o, mode));
    for (uint64_t n : {uint64_t(1), uint64_t(1000), uint64_t(40000)}) {
      const std::vector<uint8_t> host = test_bf16(n, rng);
      check_link_transfer(link, Path::coded, host, 2, 6);
    }
  }
  PeerLink<DType::bf16> peer;
  CUDA_OK(peer.init(0, 0, o));
  peer.set_bypass_threshold(0);
  const std::vector<uint8_t> host = test_bf16(50001, rng);
  check_link_transfer(peer, Path::chosen, host, 4, 2);
}

namespace {

/// An inference engine's kernel that runs all along, stand-in: spins until *release (mapped pinned memory) is
/// set or `ns` passed on the GPU clock, then sets *finished.
__global__ void spin_until_released(const volatile uint32_t* release, volatile uint32_t* finished, uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (!*release && t - t0 < ns);
  *finished = 1;
}

}  // namespace

TEST_CASE("p2p links transfer and wait while another kernel runs all along", "[gpu][p2p][concurrent]") {
  // A weight sync runs beside the inference engine's kernels, some of which never end (persistent kernels, a
  // reader polling for new weights). transfer() and wait() must not wait for them: no device-wide
  // synchronization, no allocation or free (cudaFree synchronizes the device), no kernel loaded at first use
  // (lazy loading waits for the running kernels). The other kernel spins for up to 20 s; each transfer must be
  // done in a small part of that, while it still runs.
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = (uint64_t(1) << 22) + rng() % 100000;  // coded: several frames; raw: pipelined
  const std::vector<uint8_t> host = test_bf16(n, rng);
  DeviceBuffer src(host.size()), dst(host.size());
  CUDA_OK(cudaMemcpy(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
  uint32_t* flags;  // [0] release, [1] finished
  CUDA_OK(cudaHostAlloc(&flags, 8, cudaHostAllocMapped));
  cudaStream_t stream, engine;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking));
  cudaFuncAttributes fa;
  CUDA_OK(cudaFuncGetAttributes(&fa, spin_until_released));  // the test's own kernel: loaded before it matters
  using clock = std::chrono::steady_clock;
  // Runs `body` (transfers and their wait()) beside the spinning kernel; checks it ran beside it, in time, and
  // delivered dst bit-exact.
  // Each step's end (seconds since the start) goes into the report: which call waited for the spinner.
  std::ostringstream steps;
  auto beside_spinner = [&](auto body) {
    CUDA_OK(cudaMemset(dst.ptr, 0, dst.bytes));
    CUDA_OK(cudaDeviceSynchronize());
    const_cast<volatile uint32_t*>(flags)[0] = 0;
    const_cast<volatile uint32_t*>(flags)[1] = 0;
    spin_until_released<<<1, 128, 0, engine>>>(flags, flags + 1, uint64_t(20) * 1000 * 1000 * 1000);
    CUDA_OK(cudaGetLastError());
    steps.str("");
    const auto t0 = clock::now();
    auto step = [&](const char* name, bool ok) {
      steps << name << " " << std::chrono::duration<double>(clock::now() - t0).count() << " s; ";
      return ok;
    };
    const Status s = body(step);
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    const bool still_spinning = const_cast<volatile uint32_t*>(flags)[1] == 0;
    const_cast<volatile uint32_t*>(flags)[0] = 1;
    CUDA_OK(cudaStreamSynchronize(engine));
    INFO(status_string(s) << ", " << seconds << " s: " << steps.str());
    REQUIRE(s == Status::ok);
    REQUIRE(still_spinning);
    REQUIRE(seconds < 5);
    require_device_bytes(dst.ptr, host);
  };
  for (HostLinkMode mode : {HostLinkMode::stream, HostLinkMode::copy}) {
    CAPTURE(mode_name(mode));
    HostStagingLink<DType::bf16> link;
    if (!init_in_mode(link, P2POptions(), mode)) continue;
    beside_spinner([&](auto step) {  // coded, then raw on top, one wait(); then the first transfers after a wait()
      if (!step("transfer_coded", link.transfer_coded(src.ptr, dst.ptr, n, stream) == cudaSuccess))
        return Status::invalid_argument;
      if (!step("transfer_raw", link.transfer_raw(src.ptr, dst.ptr, n, stream) == cudaSuccess))
        return Status::invalid_argument;
      const Status s = link.wait();
      if (!step("wait", s == Status::ok)) return s;
      if (!step("transfer", link.transfer(src.ptr, dst.ptr, n, stream) == cudaSuccess)) return Status::invalid_argument;
      return link.wait();
    });
  }
  INFO("peer link");
  PeerLink<DType::bf16> peer;
  CUDA_OK(peer.init(0, 0, P2POptions{}));
  beside_spinner([&](auto step) {
    if (!step("transfer_coded", peer.transfer_coded(src.ptr, dst.ptr, n, stream, stream) == cudaSuccess))
      return Status::invalid_argument;
    if (!step("transfer_raw", peer.transfer_raw(src.ptr, dst.ptr, n, stream, stream) == cudaSuccess))
      return Status::invalid_argument;
    return peer.wait();
  });
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaStreamDestroy(engine));
  CUDA_OK(cudaFreeHost(flags));
}

TEST_CASE("p2p links: wait() reports the first error of every transfer since the last wait()",
          "[gpu][p2p][concurrent]") {
  // Callers issue transfers back to back and wait once (a weight sync sends one per bucket): an error of any of
  // them must reach wait(), even when the transfers after it went well, and past the link's status records.
  // A 1 us timeout makes a coded transfer time out for sure (its receiver waits longer than that for the first
  // frame); a raw transfer waits on no peer.
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = uint64_t(1) << 21;
  const std::vector<uint8_t> host = test_bf16(n, rng);
  DeviceBuffer src(host.size()), dst(host.size());
  upload(src.ptr, host.data(), host.size());
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto dst_exact = [&] {
    std::vector<uint8_t> back(host.size());
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    return back == host;
  };
  using clock = std::chrono::steady_clock;

  SECTION("host staging link, both modes: a coded transfer that times out, then a raw one that does not") {
    const std::pair<HostLinkMode, P2POptions> configs[] = {{HostLinkMode::stream, P2POptions()},
                                                           {HostLinkMode::copy, small_ring_options()}};
    for (auto [mode, o] : configs) {
      CAPTURE(mode_name(mode));
      o.timeout_ns = 1000;
      HostStagingLink<DType::bf16> link;
      if (!init_in_mode(link, o, mode)) continue;
      const auto t0 = clock::now();
      CUDA_OK(link.transfer_coded(src.ptr, dst.ptr, n, stream));
      CUDA_OK(link.transfer_raw(src.ptr, dst.ptr, n, stream));
      const Status s = link.wait();
      INFO(status_string(s));
      REQUIRE(s != Status::ok);
      REQUIRE(clock::now() - t0 < std::chrono::seconds(5));
      REQUIRE(link.transfer_raw(src.ptr, dst.ptr, n, stream) == cudaErrorInvalidValue);  // until reset()
      CUDA_OK(link.reset());
      CUDA_OK(cudaMemsetAsync(dst.ptr, 0, dst.bytes, stream));
      CUDA_OK(link.transfer_raw(src.ptr, dst.ptr, n, stream));
      REQUIRE(link.wait() == Status::ok);
      REQUIRE(dst_exact());
    }
  }
  SECTION("peer link on one GPU: a coded transfer that times out, then a raw one") {
    P2POptions o = small_ring_options();
    o.timeout_ns = 1000;
    PeerLink<DType::bf16> peer;
    CUDA_OK(peer.init(0, 0, o));
    CUDA_OK(peer.transfer_coded(src.ptr, dst.ptr, n, stream, stream));
    CUDA_OK(peer.transfer_raw(src.ptr, dst.ptr, n, stream, stream));
    const Status s = peer.wait();
    INFO(status_string(s));
    REQUIRE(s != Status::ok);
    REQUIRE(peer.transfer_raw(src.ptr, dst.ptr, n, stream, stream) == cudaErrorInvalidValue);
    CUDA_OK(peer.reset());
    CUDA_OK(cudaMemsetAsync(dst.ptr, 0, dst.bytes, stream));
    CUDA_OK(peer.transfer_raw(src.ptr, dst.ptr, n, stream, stream));
    REQUIRE(peer.wait() == Status::ok);
    REQUIRE(dst_exact());
  }
  SECTION("stream mode: more failing transfers than status records; the link stops taking them, wait() reports") {
    P2POptions o;
    o.timeout_ns = 1000;
    HostStagingLink<DType::bf16> link;
    if (!init_in_mode(link, o, HostLinkMode::stream)) return;
    const uint32_t records = p2p_detail::TransferStatusLog::RECORDS;
    uint32_t issued = 0;
    cudaError_t refused = cudaSuccess;
    while (issued < records + 8 && (refused = link.transfer_coded(src.ptr, dst.ptr, 50000, stream)) == cudaSuccess)
      ++issued;
    REQUIRE(issued == records);  // the next one found the records' errors and was refused
    REQUIRE(refused == cudaErrorInvalidValue);
    REQUIRE(link.wait() != Status::ok);
    CUDA_OK(link.reset());
  }
  SECTION("both host staging link modes, peer link: more good transfers than status records, one wait()") {
    const uint32_t count = p2p_detail::TransferStatusLog::RECORDS + 16;
    std::vector<uint64_t> sizes(count), at(count + 1, 0);
    for (uint32_t k = 0; k < count; ++k) {
      sizes[k] = 1000 + rng() % 60000;
      at[k + 1] = at[k] + 2 * sizes[k];
    }
    DeviceBuffer many(at[count]);
    auto check_all = [&] {
      std::vector<uint8_t> back(at[count]);
      CUDA_OK(cudaMemcpy(back.data(), many.ptr, back.size(), cudaMemcpyDeviceToHost));
      for (uint32_t k = 0; k < count; ++k) {
        CAPTURE(k, sizes[k]);
        REQUIRE(std::equal(back.begin() + at[k], back.begin() + at[k + 1], host.begin()));
      }
    };
    for (HostLinkMode mode : {HostLinkMode::stream, HostLinkMode::copy}) {
      CAPTURE(mode_name(mode));
      HostStagingLink<DType::bf16> link;
      if (!init_in_mode(link, mode == HostLinkMode::stream ? P2POptions() : small_ring_options(), mode)) continue;
      CUDA_OK(cudaMemsetAsync(many.ptr, 0, many.bytes, stream));
      for (uint32_t k = 0; k < count; ++k)
        CUDA_OK(link.transfer_coded(src.ptr, many.as(at[k]), sizes[k], stream));
      REQUIRE(link.wait() == Status::ok);
      check_all();
    }
    PeerLink<DType::bf16> peer;
    CUDA_OK(peer.init(0, 0, small_ring_options()));
    CUDA_OK(cudaMemsetAsync(many.ptr, 0, many.bytes, stream));
    for (uint32_t k = 0; k < count; ++k)
      CUDA_OK(peer.transfer_coded(src.ptr, many.as(at[k]), sizes[k], stream, stream));
    REQUIRE(peer.wait() == Status::ok);
    check_all();
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_CASE("p2p links in the fixed code: bit-exact at odd sizes and alignments, both links, both host modes",
          "[gpu][p2p][concurrent][fixed]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const P2POptions o = small_ring_options();
  const uint64_t sizes[] = {1, 257, 3000, 70001, uint64_t(1) << 21};
  for (HostLinkMode mode : {HostLinkMode::copy, HostLinkMode::stream}) {
    CAPTURE(mode_name(mode));
    HostStagingLink<DType::bf16, thread::FixedCode> link;
    CUDA_OK(link.init(0, o, mode));
    for (uint64_t n : sizes)
      check_link_transfer(link, Path::coded, test_bf16(n, rng), element_offset(rng), element_offset(rng));
    check_link_transfer(link, Path::coded, real_bf16(uint64_t(3) << 20), 0, 0);
  }
  PeerLink<DType::bf16, thread::FixedCode> peer;
  CUDA_OK(peer.init(0, 0, o));
  for (uint64_t n : sizes)
    check_link_transfer(peer, Path::coded, test_bf16(n, rng), element_offset(rng), element_offset(rng));
}
