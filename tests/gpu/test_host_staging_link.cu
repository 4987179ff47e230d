// GPU tests of HostStagingLink (the pinned-host link): stream mode and its copy-mode fallback bit-exact at odd
// sizes and alignments, rings that wrap many times, batches, calibrate(), the overflow path and its budget, bad
// arguments, and failed batches reported by wait().
// Tags: [p2p]; [concurrent] needs sender and receiver kernels running at once; [large] moves 1 GiB.
#include <chrono>

#include <zipcomm/comm/p2p.cuh>

#include "p2p_harness.cuh"

using namespace p2p_test;

TEST_CASE("p2p host staging link, copy mode (the fallback): bit-exact at odd sizes and alignments, ring wrapping",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  HostStagingLink<DType::bf16> link;
  CUDA_OK(link.init(0, small_ring_options(), HostLinkMode::copy));
  REQUIRE(link.mode() == HostLinkMode::copy);
  const uint64_t sizes[] = {0, 1, 7, 255, 256, 257, 4095, 16385, 100003, 300000, (uint64_t(1) << 20) + 3};
  for (uint64_t n : sizes) {
    const std::vector<uint8_t> host = test_bf16(n, rng);
    const size_t so = element_offset(rng), doff = element_offset(rng);  // even: bf16 elements stay whole
    check_link_transfer(link, Path::coded, host, so, doff);
    check_link_transfer(link, Path::raw, host, 0, 0);
  }
  // Real gradients, several transfers back to back on one link (sequence numbers run on).
  for (int k = 0; k < 3; ++k)
    check_link_transfer(link, Path::chosen, real_bf16((uint64_t(3) << 20) + 1234 * k), 0, 0);
}

TEST_CASE("p2p host staging link: stream mode where the platform has stream memory operations, else copy mode",
          "[gpu][p2p]") {
  p2p_detail::StreamMemOps ops;
  const HostLinkMode expected = ops.load(0) == cudaSuccess ? HostLinkMode::stream : HostLinkMode::copy;
  INFO("this GPU and driver: " << mode_name(expected) << " mode");
  HostStagingLink<DType::bf16> link;
  CUDA_OK(link.init(0));
  REQUIRE(link.mode() == expected);
  CUDA_OK(link.init(0, P2POptions(), HostLinkMode::stream));  // asking for stream mode: the same choice
  REQUIRE(link.mode() == expected);
  CUDA_OK(link.init(0, P2POptions(), HostLinkMode::copy));  // the fallback, forced
  REQUIRE(link.mode() == HostLinkMode::copy);
  REQUIRE(link.raw_head_elems(uint64_t(1) << 24) == 0);  // copy mode sends every element through the frames
  REQUIRE(link.raw_tail_elems(uint64_t(1) << 24) == 0);
}

TEST_CASE("p2p host staging link, stream mode: bit-exact at odd sizes, ring wrapping", "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  HostStagingLink<DType::bf16> link;
  if (!init_in_mode(link, small_ring_options(), HostLinkMode::stream)) return;
  for (uint64_t n : {uint64_t(1), uint64_t(3000), uint64_t(70001), uint64_t(1) << 21}) {
    const std::vector<uint8_t> host = test_bf16(n, rng);
    check_link_transfer(link, Path::coded, host, element_offset(rng), element_offset(rng));
  }
  check_link_transfer(link, Path::coded, real_bf16(uint64_t(5) << 20), 0, 0);
}

TEST_CASE("p2p host staging link with the default options: bit-exact at sizes around its tiers, in either mode",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const P2POptions o;
  // The tiers' regions from the end: tier 2 alone, tiers 1 and 2, one tier-0 frame and a part, several frames.
  const uint64_t t2 = o.shape.tier[2].region_elems, t1 = o.shape.tier[1].region_elems;
  const uint64_t frame0 = uint64_t(o.shape.tier[0].item_elems) * o.shape.tier[0].frame_items;
  for (HostLinkMode mode : {HostLinkMode::stream, HostLinkMode::copy}) {
    CAPTURE(mode_name(mode));
    HostStagingLink<DType::bf16> link;
    CUDA_OK(link.init(0, o, mode));
    for (uint64_t n : {uint64_t(1), t2 - 1, t2 + 513, t1 + t2 + 7, t1 + t2 + frame0 + 16385, 3 * frame0 + t1 + t2 + 3})
      check_link_transfer(link, Path::coded, test_bf16(n, rng), element_offset(rng), element_offset(rng));
  }
}

TEST_CASE("p2p host staging link, both modes: many transfers back to back, each bit-exact",
          "[gpu][p2p][concurrent]") {
  // The kernels order their item counts at GPU scope and publish each frame with one system-scope release
  // (cumulative through the counters). A missing order shows as a copy engine or the host reading a slot
  // before its bytes, or a slot rewritten while still read: a damaged or stale destination. Repetition, sizes
  // that end in every tier and real and synthetic data give such a race many chances.
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::pair<HostLinkMode, P2POptions> configs[] = {{HostLinkMode::stream, P2POptions()},
                                                         {HostLinkMode::stream, small_staging_options()},
                                                         {HostLinkMode::copy, small_ring_options()}};
  for (const auto& [mode, o] : configs) {
    CAPTURE(mode_name(mode), o.raw_chunk_bytes);
    HostStagingLink<DType::bf16> link;
    if (!init_in_mode(link, o, mode)) continue;
    const int reps = mode == HostLinkMode::stream ? 24 : 8;
    for (int k = 0; k < reps; ++k) {
      const uint64_t n = (uint64_t(1) << 18) + rng() % (uint64_t(6) << 20);
      CAPTURE(k, n);
      check_link_transfer(link, Path::coded, k % 2 ? real_bf16(n) : test_bf16(n, rng), element_offset(rng),
                          element_offset(rng));
    }
  }
}

TEST_CASE("p2p host staging link: transfer_many sends a batch as one pipeline, every message bit-exact",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  // 4 slots: the ring wraps inside messages and across them
  const std::pair<HostLinkMode, P2POptions> configs[] = {{HostLinkMode::stream, P2POptions()},
                                                         {HostLinkMode::stream, small_staging_options()},
                                                         {HostLinkMode::stream, small_ring_options()},
                                                         {HostLinkMode::copy, small_ring_options()}};
  for (const auto& [mode, o] : configs) {
    CAPTURE(mode_name(mode), o.raw_chunk_bytes, o.slots);
    HostStagingLink<DType::bf16> link;
    if (!init_in_mode(link, o, mode)) continue;
    const int reps = mode == HostLinkMode::stream ? 10 : 3;
    for (int k = 0; k < reps; ++k) {
      CAPTURE(k);
      link.set_bypass_threshold(0);  // coded, every message
      check_link_batch(link, Path::chosen, batch_sizes(rng, 10), rng);
      link.set_bypass_threshold(uint64_t(1) << 40);  // the whole batch raw: one pipelined copy
      check_link_batch(link, Path::chosen, batch_sizes(rng, 10), rng);
      check_link_batch(link, Path::raw, batch_sizes(rng, 10), rng);
    }
    // More messages than the link's status records: it waits for itself once on the way, and stays exact.
    link.set_bypass_threshold(0);
    check_link_batch(link, Path::chosen, past_status_records_sizes(rng), rng);
  }
}

TEST_CASE("p2p host staging link: transfer_many refuses a bad batch whole, and reports a failed one in wait()",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = uint64_t(1) << 20;
  const std::vector<uint8_t> host = test_bf16(n, rng);
  DeviceBuffer src(host.size()), dst(2 * host.size());
  upload(src.ptr, host.data(), host.size());
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  P2POptions o;
  HostStagingLink<DType::bf16> link;
  if (!init_in_mode(link, o, HostLinkMode::stream)) return;
  link.set_bypass_threshold(0);
  require_bad_batches_refused(link, src, dst, n, stream);
  // A batch whose receiver gives up (1 us timeout): wait() reports it within seconds; after reset() the link works.
  HostStagingLink<DType::bf16> failing;
  o.timeout_ns = 1000;
  if (!init_in_mode(failing, o, HostLinkMode::stream)) return;
  failing.set_bypass_threshold(0);
  check_failed_batches_reported(failing, src, dst, host, stream);
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_CASE("p2p host staging link: calibrate() picks raw chunks, sets the bypass from its measurements; "
          "transfers as used stay bit-exact",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = uint64_t(1) << 20;  // 2 MiB of real gradients
  const std::vector<uint8_t> sample = real_bf16(n);
  DeviceBuffer d_sample(sample.size());
  CUDA_OK(cudaMemcpy(d_sample.ptr, sample.data(), sample.size(), cudaMemcpyHostToDevice));
  for (HostLinkMode mode : {HostLinkMode::stream, HostLinkMode::copy}) {
    CAPTURE(mode_name(mode));
    HostStagingLink<DType::bf16> link;
    REQUIRE(link.calibrate(d_sample.ptr, n) == cudaErrorInvalidValue);  // not initialized
    if (!init_in_mode(link, P2POptions(), mode)) continue;
    REQUIRE(link.calibrate(nullptr, n) == cudaErrorInvalidValue);
    const uint64_t max_bytes = uint64_t(8) << 20;
    CUDA_OK(link.calibrate(d_sample.ptr, n / 3 + 5, max_bytes));  // a shorter sample (odd length) is tiled
    const std::vector<P2PCalibrationPoint>& pts = link.calibration();
    REQUIRE(pts.size() == 8);  // 64 KiB .. 8 MiB
    std::vector<uint64_t> sizes;
    std::vector<double> coded, raw;
    for (size_t i = 0; i < pts.size(); ++i) {
      CAPTURE(i, pts[i].coded_ms, pts[i].raw_ms);
      REQUIRE(pts[i].bytes == (uint64_t(64) << 10) << i);
      REQUIRE(pts[i].coded_ms > 0);
      REQUIRE(pts[i].raw_ms > 0);
      // a raw chunk was picked for every measured size: one chunk, or a pipelined one no larger than the option
      const uint64_t c = link.calibrated_raw_chunk(pts[i].bytes);
      REQUIRE(c > 0);
      REQUIRE((c == pts[i].bytes || c <= link.options().raw_chunk_bytes));
      sizes.push_back(pts[i].bytes), coded.push_back(pts[i].coded_ms), raw.push_back(pts[i].raw_ms);
    }
    REQUIRE(link.bypass_threshold() ==
            choose_bypass_threshold(sizes.data(), coded.data(), raw.data(), sizes.size(), 0.03));
    // as used after calibrate() (raw with the picked chunks, or coded), at sizes across the measured classes,
    // plus a size past the largest measured one
    for (uint64_t m : {uint64_t(1), uint64_t(33000), uint64_t(300001), uint64_t(1) << 20, (uint64_t(5) << 20) + 7}) {
      std::vector<uint8_t> host = m <= n ? std::vector<uint8_t>(sample.begin(), sample.begin() + 2 * m)
                                         : test_bf16(m, rng);
      check_link_transfer(link, Path::chosen, host, element_offset(rng), element_offset(rng));
    }
  }
}

TEST_CASE("p2p stream mode: overflow, copies whole or in pieces, raw head and tail capped by the staging: "
          "bit-exact, wrapping",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t piece : {uint64_t(1), P2POptions::MIN_COPY_PIECE_BYTES - 1}) {  // pieces too small to be useful
    P2POptions bad = small_ring_options();
    bad.copy_piece_bytes = piece;
    HostStagingLink<DType::bf16> link;
    REQUIRE(link.init(0, bad) == cudaErrorInvalidValue);
    REQUIRE(link.init(0, bad, HostLinkMode::copy) == cudaErrorInvalidValue);
  }
  struct Config {
    uint32_t budget;            // exps_budget_per_kelem; 8: every frame overflows (the overflow stays in the ring)
    uint64_t piece;             // copy_piece_bytes (0: whole copies; odd sizes leave a short last piece)
    uint32_t per_transfer;      // copy_pieces_per_transfer (0: pieces of `piece`)
    uint64_t raw_chunk;         // raw_chunk_bytes: the raw staging is 4 of them, the raw head and tail half of it
  };
  const uint64_t MiB = uint64_t(1) << 20;
  const Config configs[] = {{410, 0, 0, 8 * MiB},         {8, 0, 0, 8 * MiB},          {410, 65536, 0, 8 * MiB},
                            {8, 40000, 0, 256 << 10},     {410, 99999, 0, 1 * MiB},    {410, 4096, 0, 8 * MiB},
                            {410, 0, 8, 8 * MiB},         {8, 65536, 8, 300000},       {8, 16384, 64, 8 * MiB},
                            {410, 4 * MiB, 32, 256 << 10}, {8, 4 * MiB, 32, 1 * MiB},   {410, 4 * MiB, 32, 8 * MiB}};
  for (const Config& c : configs) {
    CAPTURE(c.budget, c.piece, c.per_transfer, c.raw_chunk);
    P2POptions o = small_ring_options();
    o.slots = 8;
    o.exps_budget_per_kelem = c.budget;
    o.copy_piece_bytes = c.piece;
    o.copy_pieces_per_transfer = c.per_transfer;
    o.raw_chunk_bytes = c.raw_chunk;
    HostStagingLink<DType::bf16> link;
    if (!init_in_mode(link, o, HostLinkMode::stream)) return;
    // The raw head and tail: a quarter of the message at most, and half the staging, whole 4 KiB; none in a
    // message under 16 KiB.
    const uint64_t half_staging = HostStagingLink<DType::bf16>::RAW_BUFFERS * c.raw_chunk / 2;
    const uint64_t head = HostStagingLink<DType::bf16>::RAW_HEAD_BYTES;
    const uint64_t tail = HostStagingLink<DType::bf16>::RAW_TAIL_BYTES;
    CHECK(link.raw_head_elems(3000) == 0);
    CHECK(link.raw_tail_elems(3000) == 0);
    CHECK(link.raw_head_elems(uint64_t(3) << 20) == std::min({head, half_staging, uint64_t(3) << 19}) / 4096 * 2048);
    CHECK(link.raw_tail_elems(uint64_t(3) << 20) == std::min({tail, half_staging, uint64_t(3) << 19}) / 4096 * 2048);
    for (uint64_t n : {uint64_t(3000), uint64_t(70001), uint64_t(1) << 21})
      check_link_transfer(link, Path::coded, test_bf16(n, rng), element_offset(rng), element_offset(rng));
    check_link_transfer(link, Path::coded, real_bf16(uint64_t(3) << 20), 0, 0);
  }
}

TEST_CASE("p2p stream mode: section B past the budget goes by the overflow path; the budget adapts",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  P2POptions o = small_ring_options();
  o.exps_budget_per_kelem = 8;  // far too small: every frame's chunks spill into the overflow area
  HostStagingLink<DType::bf16> link;
  if (!init_in_mode(link, o, HostLinkMode::stream)) return;
  // Gaussian, real, and incompressible data (random bits: chunks stay raw, section B near its bound).
  std::vector<uint8_t> noise(2 * ((uint64_t(1) << 20) + 77));
  for (auto& b : noise) b = uint8_t(rng());
  const std::vector<std::vector<uint8_t>> inputs = {test_bf16(300001, rng), real_bf16(uint64_t(3) << 20), noise};
  for (const auto& host : inputs) check_link_transfer(link, Path::coded, host, 0, 2);
  // After a well-behaved transfer the budget covers such data again: the copy engines move about all of it.
  const std::vector<uint8_t> real = real_bf16(uint64_t(4) << 20);
  for (int k = 0; k < 2; ++k) check_link_transfer(link, Path::coded, real, 0, 0);
  // The raw head and tail go as they are; the frames carry the rest.
  const uint64_t n = real.size() / 2, edges = 2 * (link.raw_head_elems(n) + link.raw_tail_elems(n));
  const double wire = double(link.wire_bytes() - edges) / double(real.size() - edges);
  CAPTURE(wire, edges, link.exps_budget().per_kelem[0], link.exps_budget().per_kelem[1],
          link.exps_budget().per_kelem[2]);
  REQUIRE(wire > 0.6);
  REQUIRE(wire < 0.72);  // real bf16 gradients code to ~0.67 of their bytes; the budget adds at most ~2% of that
}

TEST_CASE("p2p host staging link: bad arguments are refused; reset restarts the sequence", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  P2POptions o;
  o.sender_blocks = 4;
  o.receiver_blocks = 4;
  HostStagingLink<DType::bf16> link;
  REQUIRE(link.transfer_coded(nullptr, nullptr, 0, nullptr) == cudaErrorInvalidValue);  // not initialized
  o.slots = 1;
  REQUIRE(link.init(0, o) == cudaErrorInvalidValue);
  o.slots = 16;
  o.shape.tier[0].item_elems = 1000;  // not whole tiles
  REQUIRE(link.init(0, o) == cudaErrorInvalidValue);
  o.shape = PipelineShape();
  o.raw_single_bytes = HostStagingLink<DType::bf16>::RAW_BUFFERS * o.raw_chunk_bytes + 1;  // more than the staging
  REQUIRE(link.init(0, o) == cudaErrorInvalidValue);
  o.raw_single_bytes = P2POptions().raw_single_bytes;
  const HostLinkMode mode = GENERATE(HostLinkMode::stream, HostLinkMode::copy);
  CAPTURE(mode_name(mode));
  CUDA_OK(link.init(0, o, mode));
  const std::vector<uint8_t> host = test_bf16(30000, rng);
  DeviceBuffer src(host.size()), dst(host.size());
  CUDA_OK(cudaMemcpy(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
  REQUIRE(link.transfer_coded(nullptr, dst.ptr, 10, nullptr) == cudaErrorInvalidValue);
  REQUIRE(link.transfer_coded(src.ptr, nullptr, 10, nullptr) == cudaErrorInvalidValue);
  REQUIRE(link.transfer_coded(src.ptr, dst.ptr, uint64_t(1) << 41, nullptr) == cudaErrorInvalidValue);
  for (int round = 0; round < 2; ++round) {
    CUDA_OK(cudaMemset(dst.ptr, 0, dst.bytes));
    CUDA_OK(link.transfer_coded(src.ptr, dst.ptr, 30000, nullptr));
    REQUIRE(link.wait() == Status::ok);
    require_device_bytes(dst.ptr, host);
    CUDA_OK(link.reset());
  }
}

namespace {
__global__ void fill_bf16(uint16_t* p, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (i + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    // sign, mantissa random; exponent concentrated a few binades under a block scale, like gradients
    const uint32_t scale = 100 + uint32_t((i >> 12) % 20);
    const uint32_t e = scale - uint32_t(__clzll(h | 1) % 8);
    p[i] = uint16_t(((h >> 8) & 0x8000u) | (e << 7) | ((h >> 20) & 0x7Fu));
  }
}
__global__ void count_diff(const uint16_t* a, const uint16_t* b, uint64_t n, unsigned long long* diff) {
  unsigned long long d = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    d += a[i] != b[i];
  if (d) atomicAdd(diff, d);
}
}  // namespace

TEST_CASE("p2p host staging link: 1 GiB (default options)", "[gpu][p2p][concurrent][large]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  const uint64_t n = uint64_t(1) << 29;
  DeviceBuffer src(2 * n), dst(2 * n), diff(8);
  fill_bf16<<<1024, 256>>>(src.as<uint16_t>(), n, seed);
  CUDA_OK(cudaMemset(dst.ptr, 0, dst.bytes));
  CUDA_OK(cudaMemset(diff.ptr, 0, 8));
  HostStagingLink<DType::bf16> link;
  CUDA_OK(link.init(0));
  CUDA_OK(link.transfer(src.ptr, dst.ptr, n, nullptr));
  REQUIRE(link.wait() == Status::ok);
  count_diff<<<1024, 256>>>(src.as<uint16_t>(), dst.as<uint16_t>(), n, diff.as<unsigned long long>());
  unsigned long long d = 1;
  CUDA_OK(cudaMemcpy(&d, diff.ptr, 8, cudaMemcpyDeviceToHost));
  REQUIRE(d == 0);
}
