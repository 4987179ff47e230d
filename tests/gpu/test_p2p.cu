// GPU tests of the P2P pipeline (include/zipcomm/comm): bit-exact transfers over the pinned-host link (stream mode
// and its fallback, copy mode) and the peer link (same GPU, or two), odd sizes and alignments, rings that wrap many
// times, batches, a head region, frames identical to the host reference, corrupt frames, peers that disagree on
// sizes, and peers that never answer.
// Tags: [p2p]; [concurrent] needs sender and receiver kernels running at once (skip under a sanitizer that
// serializes launches); [large] moves 1 GiB.
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <zipcomm/comm/p2p.cuh>
#include <zipcomm/comm/p2p/reference.cuh>

#include "gpu_test_util.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;
using gpu_test::DeviceBuffer;
using gpu_test::test_bf16;
using gpu_test::upload;

namespace {

// Launch settings (SendLaunch or RecvLaunch) of one whole message from sequence number seq_base; each test
// names what it changes.
template <class Launch>
Launch whole(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  Launch p;
  p.frames = {0, plan.num_frames};
  p.seq_base = seq_base;
  p.timeout_ns = timeout_ns;
  return p;
}
SendLaunch whole_send(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  return whole<SendLaunch>(plan, seq_base, timeout_ns);
}
RecvLaunch whole_recv(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  return whole<RecvLaunch>(plan, seq_base, timeout_ns);
}
// Stream-ordered ends: the frames are in the ring (or the slots free) by stream order; no flag is waited for.
SendLaunch ordered_send(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  SendLaunch p = whole_send(plan, seq_base, timeout_ns);
  p.wait_credits = false;
  return p;
}
RecvLaunch ordered_recv(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  RecvLaunch p = whole_recv(plan, seq_base, timeout_ns);
  p.wait_flags = false;
  p.give_credits = false;
  return p;
}

std::string data_dir() {
  const char* env = std::getenv("ZIPCOMM_TEST_DATA");  // a build carried to another machine
  return env ? env : ZIPCOMM_TEST_DATA_DIR;
}

/// Real gradients (tests/data) tiled to n elements.
std::vector<uint8_t> real_bf16(uint64_t n) {
  static const std::vector<uint8_t> sample = gpu_test::read_file(data_dir() + "/llama_grads.bf16");
  REQUIRE(sample.size() >= 2);
  std::vector<uint8_t> v(2 * n);
  for (uint64_t off = 0; off < v.size(); off += sample.size())
    std::memcpy(&v[off], sample.data(), std::min<uint64_t>(sample.size(), v.size() - off));
  return v;
}

P2POptions small_ring_options() {
  P2POptions o;
  o.slots = 4;  // frames of the shape below: many per message, so the ring wraps
  o.shape.tier[0] = {16384, 8, 0};
  o.shape.tier[1] = {2048, 16, 65536};
  o.shape.tier[2] = {256, 32, 4096};
  o.timeout_ns = 2000000000ull;  // generous for a healthy run, short enough that a hang fails fast
  o.sender_blocks = 8;
  o.receiver_blocks = 8;
  return o;
}

/// The defaults with 1 MiB of raw staging: stream mode's raw head and tail shrink to half of it (512 KiB each).
P2POptions small_staging_options() {
  P2POptions o;
  o.raw_chunk_bytes = uint64_t(256) << 10;
  return o;
}

const char* mode_name(HostLinkMode m) { return m == HostLinkMode::stream ? "stream" : "copy"; }

/// Initializes `link` on GPU 0 asking for `mode`; for stream mode, false (with a warning) where the GPU or driver
/// lacks 64-bit stream memory operations and the link fell back to copy mode.
bool init_in_mode(HostStagingLink<DType::bf16>& link, const P2POptions& o, HostLinkMode mode) {
  CUDA_OK(link.init(0, o, mode));
  if (link.mode() == mode) return true;
  WARN("stream mode not supported on this GPU/driver (the link runs in copy mode): skipped");
  return false;
}

/// Runs `move(src, dst, n, stream)` on bytes `host` placed at the given byte offsets and checks dst bit-exact,
/// plus guard bytes around dst.
template <class Move, class Wait>
void check_transfer(const std::vector<uint8_t>& host, size_t src_off, size_t dst_off, Move move, Wait wait) {
  const uint64_t n = host.size() / 2;
  CAPTURE(n, src_off, dst_off);
  const size_t guard = 64;
  DeviceBuffer src(host.size() + src_off + 16), dst(host.size() + dst_off + 2 * guard);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // On the transfer's stream: a legacy-stream memset or copy may land after the transfer (no order between them).
  if (!host.empty())
    CUDA_OK(cudaMemcpyAsync(src.as(src_off), host.data(), host.size(), cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaMemsetAsync(dst.ptr, 0x5A, dst.bytes, stream));
  CUDA_OK(move(src.as(src_off), dst.as(guard + dst_off), n, stream));
  // Work enqueued on the caller's stream after the transfer must see dst complete, before any wait().
  DeviceBuffer seen(dst.bytes);
  CUDA_OK(cudaMemcpyAsync(seen.ptr, dst.ptr, dst.bytes, cudaMemcpyDeviceToDevice, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  REQUIRE(wait() == Status::ok);
  std::vector<uint8_t> all(dst.bytes), all_seen(dst.bytes);
  CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(all_seen.data(), seen.ptr, dst.bytes, cudaMemcpyDeviceToHost));
  REQUIRE(all_seen == all);
  for (size_t i = 0; i < guard + dst_off; ++i) REQUIRE(all[i] == 0x5A);
  for (size_t i = guard + dst_off + host.size(); i < all.size(); ++i) REQUIRE(all[i] == 0x5A);
  const bool same = std::equal(host.begin(), host.end(), all.begin() + guard + dst_off);
  if (!same) {
    size_t i = 0;
    while (host[i] == all[guard + dst_off + i]) ++i;
    FAIL("first differing byte " << i << " of " << host.size());
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

/// One warp per item: each warp's share of the item-table check, as the receiver kernel runs it.
__global__ void item_shares_kernel(const uint8_t* table, FrameInfo fi, FrameKind kind, uint32_t exps_bytes,
                                   uint32_t* out) {
  const uint32_t j = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (j >= fi.items) return;
  const bool ok = p2p_detail::warp_item_entry_valid(table, fi, DType::bf16, kind, exps_bytes, j);
  if (warp::lane_id() == 0) out[j] = ok ? 1u : 0u;
}

}  // namespace

TEST_CASE("p2p receiver warps' per-item checks of an item table agree with the host rule", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  DeviceBuffer d_table(item_table_bytes(MAX_FRAME_ITEMS) + 16), d_out(4 * MAX_FRAME_ITEMS);
  uint32_t agreed_bad = 0;
  for (uint32_t items : {1u, 2u, 31u, 32u, 33u, 127u, 128u, 129u, 200u, 255u, 256u, 257u, 512u, 513u, 1000u, 1024u}) {
    for (int round = 0; round < 24; ++round) {
      CAPTURE(items, round);
      FrameInfo fi{};
      fi.items = items;
      fi.item_elems = 2048;
      fi.elems = uint64_t(items) * 2048 - (rng() % 2 ? rng() % 2048 : 0);  // a short last item, or not
      const FrameKind kind = round % 8 == 7 ? FrameKind::raw : FrameKind::coded;
      // A valid table: non-decreasing 16-byte ends, no chunk past its raw size, the last ending at the chunks.
      std::vector<uint8_t> table(item_table_bytes(items), 0);
      uint32_t end = 0;
      for (uint32_t j = 0; j < items; ++j) {
        const uint32_t most = uint32_t(format::raw_chunk_bytes(DType::bf16, fi.item_elems_at(j)) / 16);
        if (kind == FrameKind::coded) end += 16 * uint32_t(rng() % (most + 1));
        const uint32_t check = uint32_t(rng());
        std::memcpy(&table[8 * j], &end, 4);
        std::memcpy(&table[8 * j + 4], &check, 4);
      }
      // Damage, in most rounds: an end moved (often at a lane or round boundary), or a padding byte set.
      if (round % 3 != 0) {
        const uint32_t spots[] = {0u, 31u, 32u, 255u, 256u, 257u, items - 1, uint32_t(rng() % items)};
        const uint32_t j = std::min(items - 1, spots[rng() % 8]);
        uint32_t e;
        std::memcpy(&e, &table[8 * j], 4);
        e += rng() % 2 ? 16u : uint32_t(1 + rng() % 15);
        if (rng() % 3 == 0 && e >= 32) e -= 32;
        std::memcpy(&table[8 * j], &e, 4);
        if (items % 2 && rng() % 4 == 0) table[8 * items + rng() % 8] = uint8_t(1 + rng() % 255);
      }
      const uint32_t exps_bytes = uint32_t(FRAME_HEADER_BYTES + item_table_bytes(items) + end);
      const Status want = validate_item_table(table.data(), fi, DType::bf16, kind, exps_bytes);
      for (uint32_t offset : {0u, 8u, 4u, 1u}) {  // a raw frame's table can sit at any byte
        CAPTURE(offset);
        CUDA_OK(cudaMemcpy(d_table.as(offset), table.data(), table.size(), cudaMemcpyHostToDevice));
        item_shares_kernel<<<(items + 7) / 8, 256>>>(d_table.as(offset), fi, kind, exps_bytes, d_out.as<uint32_t>());
        CUDA_OK(cudaGetLastError());
        std::vector<uint32_t> got(items);
        CUDA_OK(cudaMemcpy(got.data(), d_out.ptr, 4 * items, cudaMemcpyDeviceToHost));
        bool all = true;
        for (uint32_t j = 0; j < items; ++j) {
          CAPTURE(j);
          REQUIRE((got[j] != 0) == item_entry_share_valid(table.data(), fi, DType::bf16, kind, exps_bytes, j));
          all = all && got[j] != 0;
        }
        REQUIRE(all == (want == Status::ok));  // the items together refuse what the whole-table check refuses
      }
      agreed_bad += want != Status::ok;
    }
  }
  REQUIRE(agreed_bad > 60);  // the damage was seen, not only valid tables
}

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
    const size_t so = 2 * (rng() % 8), doff = 2 * (rng() % 8);  // even: bf16 elements stay whole
    check_transfer(
        host, so, doff, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
        [&] { return link.wait(); });
    check_transfer(
        host, 0, 0, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_raw(s, d, m, st); },
        [&] { return link.wait(); });
  }
  // Real gradients, several transfers back to back on one link (sequence numbers run on).
  for (int k = 0; k < 3; ++k)
    check_transfer(
        real_bf16((uint64_t(3) << 20) + 1234 * k), 0, 0,
        [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer(s, d, m, st); },
        [&] { return link.wait(); });
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
    check_transfer(
        host, 2 * (rng() % 8), 2 * (rng() % 8),
        [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
        [&] { return link.wait(); });
  }
  check_transfer(
      real_bf16(uint64_t(5) << 20), 0, 0,
      [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
      [&] { return link.wait(); });
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
      check_transfer(
          test_bf16(n, rng), 2 * (rng() % 8), 2 * (rng() % 8),
          [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
          [&] { return link.wait(); });
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
      check_transfer(
          k % 2 ? real_bf16(n) : test_bf16(n, rng), 2 * (rng() % 8), 2 * (rng() % 8),
          [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
          [&] { return link.wait(); });
    }
  }
}

namespace {

/// A batch of messages (sizes in elements) laid out in one source buffer (on send_dev) and one destination buffer
/// (on recv_dev), each at its own element offset with guard bytes between them: `send(msgs, count, send_stream,
/// recv_stream)` moves it (one stream when the devices are the same), and every message must arrive bit-exact
/// with every guard byte untouched, as seen by the receive stream before wait() and after.
template <class Send, class Wait>
void check_batch(const std::vector<uint64_t>& sizes, std::mt19937_64& rng, Send send, Wait wait, int send_dev = 0,
                 int recv_dev = 0) {
  const size_t guard = 64;
  std::vector<uint64_t> src_at(sizes.size()), dst_at(sizes.size());
  uint64_t src_bytes = 16, dst_bytes = guard;
  for (size_t k = 0; k < sizes.size(); ++k) {
    src_at[k] = src_bytes + 2 * (rng() % 8);  // any element alignment
    dst_at[k] = dst_bytes + 2 * (rng() % 8);
    src_bytes = src_at[k] + 2 * sizes[k];
    dst_bytes = dst_at[k] + 2 * sizes[k] + guard;
  }
  std::vector<uint8_t> host(src_bytes);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::vector<uint8_t> m = k % 2 ? real_bf16(sizes[k]) : test_bf16(sizes[k], rng);
    std::copy(m.begin(), m.end(), host.begin() + src_at[k]);
  }
  cudaStream_t ss, rs;
  CUDA_OK(cudaSetDevice(send_dev));
  DeviceBuffer src(src_bytes);
  upload(src.ptr, host.data(), host.size());  // landed on the send device (the sync below is the receive device's)
  CUDA_OK(cudaStreamCreateWithFlags(&ss, cudaStreamNonBlocking));
  CUDA_OK(cudaSetDevice(recv_dev));
  DeviceBuffer dst(dst_bytes), seen(dst_bytes);
  CUDA_OK(cudaMemset(dst.ptr, 0x5A, dst.bytes));
  CUDA_OK(cudaDeviceSynchronize());  // the memset ran on the legacy stream
  if (recv_dev == send_dev)
    rs = ss;
  else
    CUDA_OK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
  std::vector<P2PMessage> msgs(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) msgs[k] = {src.as(src_at[k]), dst.as(dst_at[k]), sizes[k]};
  CUDA_OK(cudaSetDevice(send_dev));
  CUDA_OK(send(msgs.data(), msgs.size(), ss, rs));
  CUDA_OK(cudaSetDevice(recv_dev));
  CUDA_OK(cudaMemcpyAsync(seen.ptr, dst.ptr, dst.bytes, cudaMemcpyDeviceToDevice, rs));  // before wait()
  CUDA_OK(cudaStreamSynchronize(rs));
  REQUIRE(wait() == Status::ok);
  std::vector<uint8_t> all(dst.bytes), all_seen(dst.bytes);
  CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(all_seen.data(), seen.ptr, dst.bytes, cudaMemcpyDeviceToHost));
  REQUIRE(all_seen == all);
  uint64_t at = 0;  // every byte outside the messages is a guard byte
  for (size_t k = 0; k < sizes.size(); ++k) {
    CAPTURE(k, sizes[k]);
    for (; at < dst_at[k]; ++at) REQUIRE(all[at] == 0x5A);
    REQUIRE(std::equal(host.begin() + src_at[k], host.begin() + src_at[k] + 2 * sizes[k], all.begin() + dst_at[k]));
    at = dst_at[k] + 2 * sizes[k];
  }
  for (; at < all.size(); ++at) REQUIRE(all[at] == 0x5A);
  if (rs != ss) CUDA_OK(cudaStreamDestroy(rs));
  CUDA_OK(cudaSetDevice(send_dev));
  CUDA_OK(cudaStreamDestroy(ss));
  CUDA_OK(cudaSetDevice(0));
}

/// 1 to `most` messages of assorted sizes: empty ones, single elements, sizes that end in each tier, a few Mi.
std::vector<uint64_t> batch_sizes(std::mt19937_64& rng, size_t most) {
  std::vector<uint64_t> v(1 + rng() % most);
  for (uint64_t& n : v) {
    switch (rng() % 6) {
      case 0: n = rng() % 3; break;
      case 1: n = 1 + rng() % 5000; break;
      case 2: n = (uint64_t(1) << 18) + rng() % (uint64_t(1) << 20); break;
      default: n = (uint64_t(1) << 20) + rng() % (uint64_t(3) << 20); break;
    }
  }
  return v;
}

}  // namespace

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
    auto many = [&](const P2PMessage* m, size_t c, cudaStream_t st, cudaStream_t) {
      return link.transfer_many(m, c, st);
    };
    auto wait = [&] { return link.wait(); };
    const int reps = mode == HostLinkMode::stream ? 10 : 3;
    for (int k = 0; k < reps; ++k) {
      CAPTURE(k);
      link.set_bypass_threshold(0);  // coded, every message
      check_batch(batch_sizes(rng, 10), rng, many, wait);
      link.set_bypass_threshold(uint64_t(1) << 40);  // the whole batch raw: one pipelined copy
      check_batch(batch_sizes(rng, 10), rng, many, wait);
      check_batch(
          batch_sizes(rng, 10), rng,
          [&](const P2PMessage* m, size_t c, cudaStream_t st, cudaStream_t) {
            return link.transfer_raw_many(m, c, st);
          },
          wait);
    }
    // More messages than the link's status records: it waits for itself once on the way, and stays exact.
    link.set_bypass_threshold(0);
    std::vector<uint64_t> lots(p2p_detail::TransferStatusLog::RECORDS + 9);
    for (uint64_t& n : lots) n = 1 + rng() % 70000;
    check_batch(lots, rng, many, wait);
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
  // A null source, a null destination, or an absurd size in any message refuses the batch before anything moves.
  const P2PMessage good = {src.ptr, dst.ptr, n};
  const P2PMessage bad[] = {{nullptr, dst.as(2 * n), 10}, {src.ptr, nullptr, 10}, {src.ptr, dst.as(2 * n), uint64_t(1) << 41}};
  for (const P2PMessage& b : bad) {
    CUDA_OK(cudaMemset(dst.ptr, 0x5A, dst.bytes));
    const P2PMessage batch[] = {good, b};
    REQUIRE(link.transfer_many(batch, 2, stream) == cudaErrorInvalidValue);
    REQUIRE(link.transfer_raw_many(batch, 2, stream) == cudaErrorInvalidValue);
    REQUIRE(link.transfer_many(nullptr, 2, stream) == cudaErrorInvalidValue);
    CUDA_OK(cudaStreamSynchronize(stream));
    REQUIRE(link.wait() == Status::ok);
    std::vector<uint8_t> back(dst.bytes);
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    REQUIRE(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0x5A; }));
  }
  REQUIRE(link.transfer_many(nullptr, 0, stream) == cudaSuccess);  // nothing to send
  // A batch whose receiver gives up (1 us timeout): wait() reports it within seconds; after reset() the link works.
  HostStagingLink<DType::bf16> failing;
  o.timeout_ns = 1000;
  if (!init_in_mode(failing, o, HostLinkMode::stream)) return;
  failing.set_bypass_threshold(0);
  const P2PMessage three[] = {{src.ptr, dst.ptr, n}, {src.ptr, dst.as(2 * n), n / 2}, {src.ptr, dst.ptr, n}};
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_OK(failing.transfer_many(three, 3, stream));
  const Status s = failing.wait();
  INFO(status_string(s));
  REQUIRE(s != Status::ok);
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  REQUIRE(failing.transfer_many(three, 3, stream) == cudaErrorInvalidValue);  // until reset()
  CUDA_OK(failing.reset());
  // A batch longer than the status records, every message failing: the link finds the records' errors on the
  // way, stops the batch there (the caller's stream still waits for what was issued) and wait() reports.
  std::vector<P2PMessage> lots(p2p_detail::TransferStatusLog::RECORDS + 8, P2PMessage{src.ptr, dst.ptr, 50000});
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(failing.transfer_many(lots.data(), lots.size(), stream) == cudaErrorInvalidValue);
  CUDA_OK(cudaStreamSynchronize(stream));
  REQUIRE(failing.wait() != Status::ok);
  REQUIRE(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10));
  CUDA_OK(failing.reset());
  CUDA_OK(cudaMemsetAsync(dst.ptr, 0, dst.bytes, stream));  // ordered before the transfer, as a legacy memset is not
  CUDA_OK(failing.transfer_raw_many(three, 1, stream));
  REQUIRE(failing.wait() == Status::ok);
  std::vector<uint8_t> back(host.size());
  CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
  REQUIRE(back == host);
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
      check_transfer(
          host, 2 * (rng() % 8), 2 * (rng() % 8),
          [&](auto s, auto d, uint64_t k, cudaStream_t st) { return link.transfer(s, d, k, st); },
          [&] { return link.wait(); });
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
      check_transfer(
          test_bf16(n, rng), 2 * (rng() % 8), 2 * (rng() % 8),
          [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
          [&] { return link.wait(); });
    check_transfer(
        real_bf16(uint64_t(3) << 20), 0, 0,
        [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
        [&] { return link.wait(); });
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
  for (const auto& host : inputs) {
    check_transfer(
        host, 0, 2, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
        [&] { return link.wait(); });
  }
  // After a well-behaved transfer the budget covers such data again: the copy engines move about all of it.
  const std::vector<uint8_t> real = real_bf16(uint64_t(4) << 20);
  for (int k = 0; k < 2; ++k)
    check_transfer(
        real, 0, 0, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
        [&] { return link.wait(); });
  const double wire = double(link.wire_bytes()) / double(real.size());
  CAPTURE(wire, link.exps_budget().per_kelem[0], link.exps_budget().per_kelem[1], link.exps_budget().per_kelem[2]);
  REQUIRE(wire > 0.6);
  REQUIRE(wire < 0.72);  // real bf16 gradients code to ~0.67 of their bytes; the budget adds at most ~2% of that
}

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
                         tail + head.region_elems + 16385, uint64_t(1) << 21}) {
        check_transfer(
            test_bf16(n, rng), 2 * (rng() % 8), 2 * (rng() % 8),
            [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
            [&] { return link.wait(); });
      }
      if (link.mode() != HostLinkMode::stream) continue;  // the budget is stream mode's
      const std::vector<uint8_t> real = real_bf16(uint64_t(4) << 20);
      for (int k = 0; k < 2; ++k)
        check_transfer(
            real, 0, 0, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
            [&] { return link.wait(); });
      const ExpsBudget& b = link.exps_budget();
      const uint32_t k = b.tier_of(head.item_elems);
      CAPTURE(k, b.per_kelem[0], b.per_kelem[1], b.per_kelem[2], b.per_kelem[3]);
      REQUIRE(b.item_elems[k] == head.item_elems);
      REQUIRE(k == (head.item_elems == 4096 ? 3u : 1u));
      REQUIRE(b.per_kelem[k] > 8);  // adapted from what the head's (and, shared, tier 1's) frames needed
      const double wire = double(link.wire_bytes()) / double(real.size());
      CAPTURE(wire);
      REQUIRE(wire > 0.6);
      REQUIRE(wire < 0.72);
    }
    PeerLink<DType::bf16> peer;
    CUDA_OK(peer.init(0, 0, o));
    peer.set_bypass_threshold(0);
    check_transfer(
        test_bf16(tail + head.region_elems + 12345, rng), 2, 4,
        [&](auto s, auto d, uint64_t m, cudaStream_t st) { return peer.transfer(s, d, m, st, st); },
        [&] { return peer.wait(); });
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
      check_transfer(
          host, 2, 6, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return link.transfer_coded(s, d, m, st); },
          [&] { return link.wait(); });
    }
  }
  PeerLink<DType::bf16> peer;
  CUDA_OK(peer.init(0, 0, o));
  peer.set_bypass_threshold(0);
  const std::vector<uint8_t> host = test_bf16(50001, rng);
  check_transfer(
      host, 4, 2, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return peer.transfer(s, d, m, st, st); },
      [&] { return peer.wait(); });
}

TEST_CASE("p2p peer link on one GPU: bf16 (wrapping), fp16 and fp32", "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const P2POptions o = small_ring_options();
  {
    PeerLink<DType::bf16> peer;
    CUDA_OK(peer.init(0, 0, o));
    peer.set_bypass_threshold(0);
    for (uint64_t n : {uint64_t(5), uint64_t(123457), uint64_t(3) << 20}) {
      check_transfer(
          test_bf16(n, rng), 2 * (rng() % 8), 2 * (rng() % 8),
          [&](auto s, auto d, uint64_t m, cudaStream_t st) { return peer.transfer(s, d, m, st, st); },
          [&] { return peer.wait(); });
    }
    peer.set_bypass_threshold(uint64_t(1) << 20);  // below: one peer copy
    check_transfer(
        test_bf16(1000, rng), 0, 0,
        [&](auto s, auto d, uint64_t m, cudaStream_t st) { return peer.transfer(s, d, m, st, st); },
        [&] { return peer.wait(); });
  }
  // 16- and 32-bit types: the peer link moves bytes, so the checker sees elements as pairs of bytes.
  {
    PeerLink<DType::fp16> peer;
    CUDA_OK(peer.init(0, 0, o));
    peer.set_bypass_threshold(0);
    const std::vector<uint8_t> host = gpu_test::gaussian_bytes(DType::fp16, 400001, 1.0f, rng);
    check_transfer(
        host, 0, 2, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return peer.transfer(s, d, m, st, st); },
        [&] { return peer.wait(); });
  }
  {
    PeerLink<DType::fp32> peer;
    CUDA_OK(peer.init(0, 0, o));
    peer.set_bypass_threshold(0);
    const std::vector<uint8_t> host = gpu_test::gaussian_bytes(DType::fp32, 300001, 0.02f, rng);
    // check_transfer counts bf16-sized elements: pass fp32 counts through a wrapper
    check_transfer(
        host, 4, 8, [&](auto s, auto d, uint64_t m, cudaStream_t st) { return peer.transfer(s, d, m / 2, st, st); },
        [&] { return peer.wait(); });
  }
}

namespace {

/// Lower-level pieces on one GPU: a sender and a receiver over a ring in device memory.
struct Pair {
  P2PSender<DType::bf16> tx;
  P2PReceiver<DType::bf16> rx;
  FrameRing ring;
  PipelineShape shape;
  uint32_t slots;
  cudaStream_t s_tx, s_rx;
  explicit Pair(uint32_t nslots, const PipelineShape& sh = PipelineShape()) : shape(sh), slots(nslots) {
    CUDA_OK(ring.init_device(0, slots, slot_bytes_for(DType::bf16, shape)));
    CUDA_OK(tx.init(0, slots, shape, 8));
    CUDA_OK(rx.init(0, slots, 8));
    CUDA_OK(cudaStreamCreateWithFlags(&s_tx, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&s_rx, cudaStreamNonBlocking));
    CUDA_OK(cudaDeviceSynchronize());  // init() clears the ring and the state on the legacy stream
  }
  ~Pair() {
    cudaStreamDestroy(s_tx);
    cudaStreamDestroy(s_rx);
  }
  Status status(const SideControl* c) {
    SideControl h;
    CUDA_OK(cudaMemcpy(&h, c, sizeof h, cudaMemcpyDeviceToHost));
    return Status(h.status);
  }
};

uint8_t* slot_ptr(const FrameRingView& v, uint64_t seq) { return v.slots + slot_of(seq, v.num_slots) * v.slot_bytes; }

}  // namespace

TEST_CASE("p2p sender with a head region writes exactly the host reference's frames", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  PipelineShape shape;
  shape.tier[0] = {16384, 4, 0};
  shape.tier[1] = {2048, 8, 20000};
  shape.tier[2] = {256, 16, 3000};
  shape.head = {4096, 2, 12288};
  Pair p(8, shape);
  const uint64_t n = 12288 + 4 * 16384 + 20000 + 3000 + 17;  // head: 2 frames, body 1, tiers 1 and 2: 2 each
  const std::vector<uint8_t> host = test_bf16(n, rng);
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  REQUIRE(plan.head_parts == 1);
  REQUIRE(plan.part[0].frames == 2);
  REQUIRE(plan.num_frames <= 8);
  DeviceBuffer src(host.size()), dst(host.size());
  CUDA_OK(cudaMemcpyAsync(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice, p.s_tx));
  const FrameRingView ring = p.ring.view();
  CUDA_OK(cudaMemsetAsync(ring.slots, 0xCD, size_t(8) * ring.slot_bytes, p.s_tx));  // before the sender, in order
  const uint64_t base = 13;
  CUDA_OK(p.tx.launch(plan, src.ptr, ring, ordered_send(plan, base, 1000000000ull), p.s_tx));
  CUDA_OK(cudaStreamSynchronize(p.s_tx));
  REQUIRE(p.status(p.tx.control()) == Status::ok);
  std::vector<uint8_t> ref, got;
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    CAPTURE(f, fi.items, fi.item_elems);
    REQUIRE(host_encode_frame(plan, fi, CodeId::pair, base + f, host.data(), ref) == Status::ok);
    got.resize(ref.size());
    CUDA_OK(cudaMemcpy(got.data(), slot_ptr(ring, base + f), ref.size(), cudaMemcpyDeviceToHost));
    REQUIRE(got == ref);
  }
  CUDA_OK(p.rx.launch(plan, dst.ptr, ring, ordered_recv(plan, base, 1000000000ull), p.s_rx));
  CUDA_OK(cudaStreamSynchronize(p.s_rx));
  REQUIRE(p.status(p.rx.control()) == Status::ok);
  std::vector<uint8_t> back(host.size());
  CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
  REQUIRE(back == host);
}

TEST_CASE("p2p sender writes exactly the host reference's frames; corrupt frames are refused", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  PipelineShape shape;
  shape.tier[0] = {16384, 4, 0};
  shape.tier[1] = {2048, 8, 20000};
  shape.tier[2] = {256, 16, 3000};
  Pair p(8, shape);
  const uint64_t n = 4 * 16384 + 20000 + 3000 + 17;  // one frame per tier and then some; fits 8 slots
  const std::vector<uint8_t> host = test_bf16(n, rng);
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  REQUIRE(plan.num_frames <= 8);
  DeviceBuffer src(host.size()), dst(host.size());
  CUDA_OK(cudaMemcpyAsync(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice, p.s_tx));
  const FrameRingView ring = p.ring.view();
  // poison, on the sender's stream so that it lands first: every frame byte must be written
  CUDA_OK(cudaMemsetAsync(ring.slots, 0xCD, size_t(8) * ring.slot_bytes, p.s_tx));
  const uint64_t base = 40;  // any sequence base: slots are taken modulo the ring
  CUDA_OK(p.tx.launch(plan, src.ptr, ring, ordered_send(plan, base, 1000000000ull), p.s_tx));
  CUDA_OK(cudaStreamSynchronize(p.s_tx));
  REQUIRE(p.status(p.tx.control()) == Status::ok);

  std::vector<uint8_t> ref, got;
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    CAPTURE(f, fi.items, fi.item_elems);
    REQUIRE(host_encode_frame(plan, fi, CodeId::pair, base + f, host.data(), ref) == Status::ok);
    got.resize(ref.size());
    CUDA_OK(cudaMemcpy(got.data(), slot_ptr(ring, base + f), ref.size(), cudaMemcpyDeviceToHost));
    REQUIRE(got == ref);
    uint64_t flags[2];
    CUDA_OK(cudaMemcpy(&flags[0], &ring.ready_planes[slot_of(base + f, 8)], 8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&flags[1], &ring.ready_exps[slot_of(base + f, 8)], 8, cudaMemcpyDeviceToHost));
    REQUIRE(flags[0] == base + f + 1);
    REQUIRE(flags[1] == base + f + 1);
  }

  // The receiver decodes them in place (stream-ordered: no waiting on flags).
  auto receive = [&](uint64_t expect_n) {
    const FramePlan rp = make_plan(DType::bf16, FrameKind::coded, expect_n, shape);
    CUDA_OK(p.rx.reset());  // the same sequence numbers again: forget what the last attempt saw
    CUDA_OK(cudaMemsetAsync(dst.ptr, 0, dst.bytes, p.s_rx));
    RecvLaunch launch = ordered_recv(rp, base, 1000000000ull);
    launch.frames.end = std::min(rp.num_frames, plan.num_frames);
    CUDA_OK(p.rx.launch(rp, dst.ptr, ring, launch, p.s_rx));
    CUDA_OK(cudaStreamSynchronize(p.s_rx));
    return p.status(p.rx.control());
  };
  REQUIRE(receive(n) == Status::ok);
  std::vector<uint8_t> back(host.size());
  CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
  REQUIRE(back == host);

  // Damage one byte of frame 1 at a time: planes, header, item table, a chunk. Every one is refused.
  const FrameInfo f1 = plan.frame(1);
  uint8_t* frame1 = slot_ptr(ring, base + 1);
  REQUIRE(host_encode_frame(plan, f1, CodeId::pair, base + 1, host.data(), ref) == Status::ok);
  struct Spot {
    const char* what;
    uint64_t at;
    Status want;
  };
  const uint64_t b_at = f1.planes_bytes;
  const Spot spots[] = {
      {"planes", rng() % f1.planes_bytes, Status::checksum_mismatch},
      {"header", b_at + rng() % 60, Status::bad_header},
      {"header check", b_at + 60 + rng() % 4, Status::bad_header},
      {"item table", b_at + FRAME_HEADER_BYTES + 8 * (rng() % f1.items), Status::corrupt_stream},
      {"item check", b_at + FRAME_HEADER_BYTES + 8 * (rng() % f1.items) + 4, Status::checksum_mismatch},
      {"chunk",
       b_at + FRAME_HEADER_BYTES + item_table_bytes(f1.items) +
           rng() % (ref.size() - b_at - FRAME_HEADER_BYTES - item_table_bytes(f1.items)),
       Status::corrupt_stream},
  };
  for (const Spot& s : spots) {
    CAPTURE(s.what, s.at);
    uint8_t byte;
    CUDA_OK(cudaMemcpy(&byte, frame1 + s.at, 1, cudaMemcpyDeviceToHost));
    const uint8_t bad = uint8_t(byte ^ (1u << (rng() % 8)));
    CUDA_OK(cudaMemcpy(frame1 + s.at, &bad, 1, cudaMemcpyHostToDevice));
    const Status st = receive(n);
    REQUIRE(st != Status::ok);
    if (s.want == Status::bad_header) REQUIRE(st == Status::bad_header);
    CUDA_OK(cudaMemcpy(frame1 + s.at, &byte, 1, cudaMemcpyHostToDevice));
  }
  REQUIRE(receive(n) == Status::ok);  // repaired
  // A receiver that expects another size refuses the frames as a size mismatch.
  REQUIRE(receive(n + 256) == Status::size_mismatch);
  REQUIRE(receive(n - 1) == Status::size_mismatch);
  // A section B length past the frame's bound (header check recomputed): refused, nothing read past it.
  {
    FrameHeader h;
    CUDA_OK(cudaMemcpy(&h, frame1 + b_at, sizeof h, cudaMemcpyDeviceToHost));
    FrameHeader big = make_frame_header(plan, f1, CodeId::pair, base + 1, uint32_t(f1.exps_bound + 16));
    CUDA_OK(cudaMemcpy(frame1 + b_at, &big, sizeof big, cudaMemcpyHostToDevice));
    REQUIRE(receive(n) == Status::corrupt_stream);
    CUDA_OK(cudaMemcpy(frame1 + b_at, &h, sizeof h, cudaMemcpyHostToDevice));
  }
}

TEST_CASE("p2p peers that disagree on sizes, or never answer, end with an error, not a hang",
          "[gpu][p2p][concurrent]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  PipelineShape shape;
  shape.tier[0] = {16384, 4, 0};
  shape.num_tiers = 1;
  const uint64_t n = 40 * 16384;  // 10 frames through 4 slots
  const std::vector<uint8_t> host = test_bf16(n, rng);
  DeviceBuffer src(host.size()), dst(host.size() + 1024 * 1024);
  upload(src.ptr, host.data(), host.size());
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  const uint64_t timeout = 50000000ull;  // 50 ms
  using clock = std::chrono::steady_clock;

  SECTION("receiver alone: timeout") {
    Pair p(4, shape);
    const auto t0 = clock::now();
    CUDA_OK(p.rx.launch(plan, dst.ptr, p.ring.view(), whole_recv(plan, 0, timeout), p.s_rx));
    CUDA_OK(cudaStreamSynchronize(p.s_rx));
    REQUIRE(p.status(p.rx.control()) == Status::timeout);
    REQUIRE(clock::now() - t0 < std::chrono::seconds(5));
  }
  SECTION("sender alone, message larger than the ring: timeout; the flags copy streams wait on are released") {
    Pair p(4, shape);
    DeviceBuffer poison(4 * 8);
    CUDA_OK(cudaMemsetAsync(poison.ptr, 0, poison.bytes, p.s_tx));  // before the sender sets them
    SendLaunch launch = whole_send(plan, 0, timeout);
    launch.extras.poison = {poison.as<uint64_t>(), 4};
    const auto t0 = clock::now();
    CUDA_OK(p.tx.launch(plan, src.ptr, p.ring.view(), launch, p.s_tx));
    CUDA_OK(cudaStreamSynchronize(p.s_tx));
    REQUIRE(p.status(p.tx.control()) == Status::timeout);
    REQUIRE(clock::now() - t0 < std::chrono::seconds(5));
    uint64_t words[4];
    CUDA_OK(cudaMemcpy(words, poison.ptr, sizeof words, cudaMemcpyDeviceToHost));
    for (uint64_t w : words) REQUIRE(w == p2p_detail::POISON_FLAG);
  }
  SECTION("receiver expects more elements: size mismatch, sender then times out") {
    Pair p(4, shape);
    const FramePlan other = make_plan(DType::bf16, FrameKind::coded, n + 1000, shape);
    CUDA_OK(p.tx.launch(plan, src.ptr, p.ring.view(), whole_send(plan, 0, timeout), p.s_tx));
    CUDA_OK(p.rx.launch(other, dst.ptr, p.ring.view(), whole_recv(other, 0, timeout), p.s_rx));
    CUDA_OK(cudaStreamSynchronize(p.s_rx));
    CUDA_OK(cudaStreamSynchronize(p.s_tx));
    REQUIRE(p.status(p.rx.control()) == Status::size_mismatch);
    REQUIRE(p.status(p.tx.control()) == Status::timeout);
  }
  SECTION("both right: the same pair completes, and signals completion only after decoding") {
    Pair p(4, shape);
    DeviceBuffer done(8);
    CUDA_OK(cudaMemsetAsync(done.ptr, 0, 8, p.s_rx));  // before the receiver sets it
    RecvLaunch launch = whole_recv(plan, 0, timeout * 20);
    launch.done_word = done.as<uint64_t>();
    launch.done_value = 4242;
    CUDA_OK(p.tx.launch(plan, src.ptr, p.ring.view(), whole_send(plan, 0, timeout * 20), p.s_tx));
    CUDA_OK(p.rx.launch(plan, dst.ptr, p.ring.view(), launch, p.s_rx));
    CUDA_OK(cudaStreamSynchronize(p.s_rx));
    CUDA_OK(cudaStreamSynchronize(p.s_tx));
    REQUIRE(p.status(p.rx.control()) == Status::ok);
    REQUIRE(p.status(p.tx.control()) == Status::ok);
    uint64_t d = 0;
    CUDA_OK(cudaMemcpy(&d, done.ptr, 8, cudaMemcpyDeviceToHost));
    REQUIRE(d == 4242);
    std::vector<uint8_t> back(host.size());
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    REQUIRE(back == host);
  }
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
    std::vector<uint8_t> back(host.size());
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    REQUIRE(back == host);
    CUDA_OK(link.reset());
  }
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
  auto beside_spinner = [&](auto body) {
    CUDA_OK(cudaMemset(dst.ptr, 0, dst.bytes));
    CUDA_OK(cudaDeviceSynchronize());
    const_cast<volatile uint32_t*>(flags)[0] = 0;
    const_cast<volatile uint32_t*>(flags)[1] = 0;
    spin_until_released<<<1, 128, 0, engine>>>(flags, flags + 1, uint64_t(20) * 1000 * 1000 * 1000);
    CUDA_OK(cudaGetLastError());
    const auto t0 = clock::now();
    const Status s = body();
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    const bool still_spinning = const_cast<volatile uint32_t*>(flags)[1] == 0;
    const_cast<volatile uint32_t*>(flags)[0] = 1;
    CUDA_OK(cudaStreamSynchronize(engine));
    INFO(status_string(s) << ", " << seconds << " s");
    REQUIRE(s == Status::ok);
    REQUIRE(still_spinning);
    REQUIRE(seconds < 5);
    std::vector<uint8_t> back(host.size());
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    REQUIRE(back == host);
  };
  for (HostLinkMode mode : {HostLinkMode::stream, HostLinkMode::copy}) {
    CAPTURE(mode_name(mode));
    HostStagingLink<DType::bf16> link;
    if (!init_in_mode(link, P2POptions(), mode)) continue;
    beside_spinner([&] {  // coded, then raw on top, one wait(); then the first transfers after a wait()
      if (link.transfer_coded(src.ptr, dst.ptr, n, stream) != cudaSuccess) return Status::invalid_argument;
      if (link.transfer_raw(src.ptr, dst.ptr, n, stream) != cudaSuccess) return Status::invalid_argument;
      const Status s = link.wait();
      if (s != Status::ok) return s;
      if (link.transfer(src.ptr, dst.ptr, n, stream) != cudaSuccess) return Status::invalid_argument;
      return link.wait();
    });
  }
  PeerLink<DType::bf16> peer;
  CUDA_OK(peer.init(0, 0, P2POptions{}));
  beside_spinner([&] {
    if (peer.transfer_coded(src.ptr, dst.ptr, n, stream, stream) != cudaSuccess) return Status::invalid_argument;
    if (peer.transfer_raw(src.ptr, dst.ptr, n, stream, stream) != cudaSuccess) return Status::invalid_argument;
    return peer.wait();
  });
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaStreamDestroy(engine));
  CUDA_OK(cudaFreeHost(flags));
}

TEST_CASE("p2p links: wait() reports the first error of every transfer since the last wait()", "[gpu][p2p][concurrent]") {
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
  const size_t guard = 64, dst_bytes = host.size() + dst_off + 2 * guard;
  void *src = nullptr, *dst = nullptr;
  cudaStream_t ss, rs;
  CUDA_OK(cudaSetDevice(sd));
  CUDA_OK(cudaMalloc(&src, host.size() + src_off + 16));
  if (!host.empty()) CUDA_OK(cudaMemcpy(static_cast<uint8_t*>(src) + src_off, host.data(), host.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaStreamCreateWithFlags(&ss, cudaStreamNonBlocking));
  CUDA_OK(cudaSetDevice(rd));
  CUDA_OK(cudaMalloc(&dst, dst_bytes));
  CUDA_OK(cudaMemset(dst, 0x5A, dst_bytes));
  CUDA_OK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaSetDevice(sd));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(move(static_cast<uint8_t*>(src) + src_off, static_cast<uint8_t*>(dst) + guard + dst_off, n, ss, rs));
  CUDA_OK(cudaStreamSynchronize(rs));
  REQUIRE(link.wait() == Status::ok);
  std::vector<uint8_t> all(dst_bytes);
  CUDA_OK(cudaMemcpy(all.data(), dst, dst_bytes, cudaMemcpyDefault));
  for (size_t i = 0; i < guard + dst_off; ++i) REQUIRE(all[i] == 0x5A);
  for (size_t i = guard + dst_off + host.size(); i < all.size(); ++i) REQUIRE(all[i] == 0x5A);
  REQUIRE(std::equal(host.begin(), host.end(), all.begin() + guard + dst_off));
  CUDA_OK(cudaSetDevice(sd));
  CUDA_OK(cudaStreamDestroy(ss));
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaSetDevice(rd));
  CUDA_OK(cudaStreamDestroy(rs));
  CUDA_OK(cudaFree(dst));
  CUDA_OK(cudaSetDevice(0));
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
      const size_t so = 2 * (rng() % 8), dof = 2 * (rng() % 8);
      check_peer_transfer(link, host, so, dof, [&](const void* s, void* d, uint64_t m, cudaStream_t a, cudaStream_t b) {
        return link.transfer_coded(s, d, m, a, b);
      });
      check_peer_transfer(link, host, so, dof, [&](const void* s, void* d, uint64_t m, cudaStream_t a, cudaStream_t b) {
        return link.transfer_raw(s, d, m, a, b);
      });
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
  for (const P2PCalibrationPoint& p : pts) sizes.push_back(p.bytes), coded.push_back(p.coded_ms), raw.push_back(p.raw_ms);
  REQUIRE(link.bypass_threshold() == choose_bypass_threshold(sizes.data(), coded.data(), raw.data(), sizes.size(), 0.03));
  // as used after calibrate(), and both forced paths, below and above the threshold
  for (uint64_t m : {uint64_t(5000), n}) {
    const std::vector<uint8_t> host(sample.begin(), sample.begin() + 2 * m);
    check_peer_transfer(link, host, 2, 4, [&](const void* s, void* d, uint64_t k, cudaStream_t a, cudaStream_t b) {
      return link.transfer(s, d, k, a, b);
    });
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
    auto many = [&](const P2PMessage* m, size_t c, cudaStream_t ss, cudaStream_t rs) {
      return link.transfer_many(m, c, ss, rs);
    };
    auto raw_many = [&](const P2PMessage* m, size_t c, cudaStream_t ss, cudaStream_t rs) {
      return link.transfer_raw_many(m, c, ss, rs);
    };
    auto wait = [&] { return link.wait(); };
    for (int k = 0; k < (small_ring ? 6 : 3); ++k) {
      CAPTURE(k);
      link.set_bypass_threshold(0);  // coded, every message
      check_batch(batch_sizes(rng, 10), rng, many, wait, 0, rd);
      link.set_bypass_threshold(uint64_t(1) << 40);  // the whole batch raw
      check_batch(batch_sizes(rng, 10), rng, many, wait, 0, rd);
      check_batch(batch_sizes(rng, 10), rng, raw_many, wait, 0, rd);
    }
    // More messages than the link's status records: it waits for itself once on the way, and stays exact.
    link.set_bypass_threshold(0);
    std::vector<uint64_t> lots(p2p_detail::TransferStatusLog::RECORDS + 9);
    for (uint64_t& n : lots) n = 1 + rng() % 70000;
    check_batch(lots, rng, many, wait, 0, rd);
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
  // A null source, a null destination, or an absurd size in any message refuses the batch before anything moves.
  const P2PMessage bad[] = {{nullptr, dst.as(2 * n), 10}, {src.ptr, nullptr, 10}, {src.ptr, dst.as(2 * n), uint64_t(1) << 41}};
  for (const P2PMessage& b : bad) {
    CUDA_OK(cudaMemset(dst.ptr, 0x5A, dst.bytes));
    const P2PMessage batch[] = {good, b};
    REQUIRE(link.transfer_many(batch, 2, stream, stream) == cudaErrorInvalidValue);
    REQUIRE(link.transfer_raw_many(batch, 2, stream, stream) == cudaErrorInvalidValue);
    REQUIRE(link.transfer_many(nullptr, 2, stream, stream) == cudaErrorInvalidValue);
    CUDA_OK(cudaStreamSynchronize(stream));
    REQUIRE(link.wait() == Status::ok);
    std::vector<uint8_t> back(dst.bytes);
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    REQUIRE(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0x5A; }));
  }
  REQUIRE(link.transfer_many(nullptr, 0, stream, stream) == cudaSuccess);  // nothing to send
  // A batch whose receiver gives up (1 us timeout): wait() reports it within seconds; after reset() the link works.
  PeerLink<DType::bf16> failing;
  o.timeout_ns = 1000;
  CUDA_OK(failing.init(0, 0, o));
  failing.set_bypass_threshold(0);
  const P2PMessage three[] = {{src.ptr, dst.ptr, n}, {src.ptr, dst.as(2 * n), n / 2}, {src.ptr, dst.ptr, n}};
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_OK(failing.transfer_many(three, 3, stream, stream));
  const Status s = failing.wait();
  INFO(status_string(s));
  REQUIRE(s != Status::ok);
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  REQUIRE(failing.transfer_many(three, 3, stream, stream) == cudaErrorInvalidValue);  // until reset()
  CUDA_OK(failing.reset());
  // A batch longer than the status records, every message failing: the link finds the records' errors on the
  // way, stops the batch there (the caller's streams still wait for what was issued) and wait() reports.
  std::vector<P2PMessage> lots(p2p_detail::TransferStatusLog::RECORDS + 8, P2PMessage{src.ptr, dst.ptr, 50000});
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(failing.transfer_many(lots.data(), lots.size(), stream, stream) == cudaErrorInvalidValue);
  CUDA_OK(cudaStreamSynchronize(stream));
  REQUIRE(failing.wait() != Status::ok);
  REQUIRE(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10));
  CUDA_OK(failing.reset());
  CUDA_OK(cudaMemsetAsync(dst.ptr, 0, dst.bytes, stream));  // ordered before the transfer, as a legacy memset is not
  CUDA_OK(failing.transfer_raw_many(three, 1, stream, stream));
  REQUIRE(failing.wait() == Status::ok);
  std::vector<uint8_t> back(host.size());
  CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
  REQUIRE(back == host);
  CUDA_OK(cudaStreamDestroy(stream));
}
