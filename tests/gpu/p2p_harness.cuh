// Shared harness of the P2P link tests (test_p2p_*.cu, test_host_staging_link.cu, test_peer_link.cu): launch
// settings of a whole message, test messages, link options, and the transfer checks (bit-exact destination,
// untouched guard bytes, wait() ok) that every link test runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#include "gpu_test_util.cuh"

namespace p2p_test {

using namespace zipcomm;
using namespace zipcomm::comm;
using gpu_test::DeviceBuffer;
using gpu_test::test_bf16;
using gpu_test::upload;

/// Every destination is poisoned with this byte around (and under) the message: a byte outside the message that
/// is not it was written by the transfer.
constexpr uint8_t GUARD_BYTE = 0x5A;
constexpr size_t GUARD_BYTES = 64;

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
inline SendLaunch whole_send(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  return whole<SendLaunch>(plan, seq_base, timeout_ns);
}
inline RecvLaunch whole_recv(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  return whole<RecvLaunch>(plan, seq_base, timeout_ns);
}
// Stream-ordered ends: the frames are in the ring (or the slots free) by stream order; no flag is waited for.
inline SendLaunch ordered_send(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  SendLaunch p = whole_send(plan, seq_base, timeout_ns);
  p.wait_credits = false;
  return p;
}
inline RecvLaunch ordered_recv(const FramePlan& plan, uint64_t seq_base, uint64_t timeout_ns) {
  RecvLaunch p = whole_recv(plan, seq_base, timeout_ns);
  p.wait_flags = false;
  p.give_credits = false;
  return p;
}

inline std::string data_dir() {
  const char* env = std::getenv("ZIPCOMM_TEST_DATA");  // a build carried to another machine
  return env ? env : ZIPCOMM_TEST_DATA_DIR;
}

/// Real gradients (tests/data) tiled to n elements.
inline std::vector<uint8_t> real_bf16(uint64_t n) {
  static const std::vector<uint8_t> sample = gpu_test::read_file(data_dir() + "/llama_grads.bf16");
  REQUIRE(sample.size() >= 2);
  std::vector<uint8_t> v(2 * n);
  for (uint64_t off = 0; off < v.size(); off += sample.size())
    std::memcpy(&v[off], sample.data(), std::min<uint64_t>(sample.size(), v.size() - off));
  return v;
}

/// A random even byte offset below 16: bf16 elements stay whole, and the buffers take any element alignment.
inline size_t element_offset(std::mt19937_64& rng) { return 2 * (rng() % 8); }

inline P2POptions small_ring_options() {
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
inline P2POptions small_staging_options() {
  P2POptions o;
  o.raw_chunk_bytes = uint64_t(256) << 10;
  return o;
}

inline const char* mode_name(HostLinkMode m) { return m == HostLinkMode::stream ? "stream" : "copy"; }

/// Initializes `link` on GPU 0 asking for `mode`; for stream mode, false (with a warning) where the GPU or driver
/// lacks 64-bit stream memory operations and the link fell back to copy mode.
inline bool init_in_mode(HostStagingLink<DType::bf16>& link, const P2POptions& o, HostLinkMode mode) {
  CUDA_OK(link.init(0, o, mode));
  if (link.mode() == mode) return true;
  WARN("stream mode not supported on this GPU/driver (the link runs in copy mode): skipped");
  return false;
}

/// Requires the expect.size() bytes at device address `p` to equal `expect`.
inline void require_device_bytes(const void* p, const std::vector<uint8_t>& expect) {
  std::vector<uint8_t> back(expect.size());
  CUDA_OK(cudaMemcpy(back.data(), p, back.size(), cudaMemcpyDeviceToHost));
  REQUIRE(back == expect);
}

/// Runs `move(src, dst, n, stream)` on bytes `host` placed at the given byte offsets and checks dst bit-exact,
/// plus guard bytes around dst.
template <class Move, class Wait>
void check_transfer(const std::vector<uint8_t>& host, size_t src_off, size_t dst_off, Move move, Wait wait) {
  const uint64_t n = host.size() / 2;
  CAPTURE(n, src_off, dst_off);
  const size_t guard = GUARD_BYTES;
  DeviceBuffer src(host.size() + src_off + 16), dst(host.size() + dst_off + 2 * guard);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // On the transfer's stream: a legacy-stream memset or copy may land after the transfer (no order between them).
  if (!host.empty())
    CUDA_OK(cudaMemcpyAsync(src.as(src_off), host.data(), host.size(), cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaMemsetAsync(dst.ptr, GUARD_BYTE, dst.bytes, stream));
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
  for (size_t i = 0; i < guard + dst_off; ++i) REQUIRE(all[i] == GUARD_BYTE);
  for (size_t i = guard + dst_off + host.size(); i < all.size(); ++i) REQUIRE(all[i] == GUARD_BYTE);
  const bool same = std::equal(host.begin(), host.end(), all.begin() + guard + dst_off);
  if (!same) {
    size_t i = 0;
    while (host[i] == all[guard + dst_off + i]) ++i;
    FAIL("first differing byte " << i << " of " << host.size());
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

/// Which of a link's transfer calls a check goes through: always coded, always raw, or the link's choice by its
/// bypass threshold.
enum class Path { coded, raw, chosen };

/// One transfer of n elements on a host staging link (one stream) by `path`.
template <DType D, class Code>
cudaError_t start(HostStagingLink<D, Code>& link, Path path, const void* src, void* dst, uint64_t n, cudaStream_t s) {
  switch (path) {
    case Path::coded: return link.transfer_coded(src, dst, n, s);
    case Path::raw: return link.transfer_raw(src, dst, n, s);
    default: return link.transfer(src, dst, n, s);
  }
}
/// One transfer of n elements on a peer link (send and receive streams) by `path`.
template <DType D, class Code>
cudaError_t start(PeerLink<D, Code>& link, Path path, const void* src, void* dst, uint64_t n, cudaStream_t send_stream,
                  cudaStream_t recv_stream) {
  switch (path) {
    case Path::coded: return link.transfer_coded(src, dst, n, send_stream, recv_stream);
    case Path::raw: return link.transfer_raw(src, dst, n, send_stream, recv_stream);
    default: return link.transfer(src, dst, n, send_stream, recv_stream);
  }
}

/// check_transfer through `link` on GPU 0: a host staging link, or a peer link from GPU 0 to itself on one stream.
/// check_transfer counts bf16-sized elements; a link of another type gets its own element count.
template <DType D, class Code>
void check_link_transfer(HostStagingLink<D, Code>& link, Path path, const std::vector<uint8_t>& host, size_t src_off,
                         size_t dst_off) {
  check_transfer(
      host, src_off, dst_off,
      [&](const void* s, void* d, uint64_t n, cudaStream_t st) { return start(link, path, s, d, n, st); },
      [&] { return link.wait(); });
}
template <DType D, class Code>
void check_link_transfer(PeerLink<D, Code>& link, Path path, const std::vector<uint8_t>& host, size_t src_off,
                         size_t dst_off) {
  check_transfer(
      host, src_off, dst_off,
      [&](const void* s, void* d, uint64_t n, cudaStream_t st) {
        return start(link, path, s, d, n * 2 / format::elem_bytes(D), st, st);
      },
      [&] { return link.wait(); });
}

/// A batch of messages (sizes in elements) laid out in one source buffer (on send_dev) and one destination buffer
/// (on recv_dev), each at its own element offset with guard bytes between them: `send(msgs, count, send_stream,
/// recv_stream)` moves it (one stream when the devices are the same), and every message must arrive bit-exact
/// with every guard byte untouched, as seen by the receive stream before wait() and after.
template <class Send, class Wait>
void check_batch(const std::vector<uint64_t>& sizes, std::mt19937_64& rng, Send send, Wait wait, int send_dev = 0,
                 int recv_dev = 0) {
  const size_t guard = GUARD_BYTES;
  std::vector<uint64_t> src_at(sizes.size()), dst_at(sizes.size());
  uint64_t src_bytes = 16, dst_bytes = guard;
  for (size_t k = 0; k < sizes.size(); ++k) {
    src_at[k] = src_bytes + element_offset(rng);  // any element alignment
    dst_at[k] = dst_bytes + element_offset(rng);
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
  CUDA_OK(cudaMemset(dst.ptr, GUARD_BYTE, dst.bytes));
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
    for (; at < dst_at[k]; ++at) REQUIRE(all[at] == GUARD_BYTE);
    REQUIRE(std::equal(host.begin() + src_at[k], host.begin() + src_at[k] + 2 * sizes[k], all.begin() + dst_at[k]));
    at = dst_at[k] + 2 * sizes[k];
  }
  for (; at < all.size(); ++at) REQUIRE(all[at] == GUARD_BYTE);
  if (rs != ss) CUDA_OK(cudaStreamDestroy(rs));
  CUDA_OK(cudaSetDevice(send_dev));
  CUDA_OK(cudaStreamDestroy(ss));
  CUDA_OK(cudaSetDevice(0));
}

/// One batch on a host staging link (one stream) or a peer link: transfer_many (coded or raw by the bypass
/// threshold, so Path::coded is the threshold's choice too) or, for Path::raw, transfer_raw_many.
template <DType D>
cudaError_t start_many(HostStagingLink<D>& link, Path path, const P2PMessage* msgs, size_t count,
                       cudaStream_t send_stream, cudaStream_t /*recv_stream: the same*/) {
  return path == Path::raw ? link.transfer_raw_many(msgs, count, send_stream)
                           : link.transfer_many(msgs, count, send_stream);
}
template <DType D>
cudaError_t start_many(PeerLink<D>& link, Path path, const P2PMessage* msgs, size_t count, cudaStream_t send_stream,
                       cudaStream_t recv_stream) {
  return path == Path::raw ? link.transfer_raw_many(msgs, count, send_stream, recv_stream)
                           : link.transfer_many(msgs, count, send_stream, recv_stream);
}

/// check_batch through `link`'s batch call for `path`, from send_dev to recv_dev.
template <class Link>
void check_link_batch(Link& link, Path path, const std::vector<uint64_t>& sizes, std::mt19937_64& rng,
                      int send_dev = 0, int recv_dev = 0) {
  check_batch(
      sizes, rng,
      [&](const P2PMessage* m, size_t c, cudaStream_t ss, cudaStream_t rs) {
        return start_many(link, path, m, c, ss, rs);
      },
      [&] { return link.wait(); }, send_dev, recv_dev);
}

/// On an initialized `link` that codes every message (src: n elements, dst: 2n): a batch with one bad message (a
/// null source, a null destination, an absurd size) is refused whole, coded or raw, before anything moves; an
/// empty batch is accepted.
template <class Link>
void require_bad_batches_refused(Link& link, const DeviceBuffer& src, const DeviceBuffer& dst, uint64_t n,
                                 cudaStream_t stream) {
  const P2PMessage good = {src.ptr, dst.ptr, n};
  const P2PMessage bad[] = {
      {nullptr, dst.as(2 * n), 10}, {src.ptr, nullptr, 10}, {src.ptr, dst.as(2 * n), uint64_t(1) << 41}};
  for (const P2PMessage& b : bad) {
    CUDA_OK(cudaMemset(dst.ptr, GUARD_BYTE, dst.bytes));
    const P2PMessage batch[] = {good, b};
    REQUIRE(start_many(link, Path::chosen, batch, 2, stream, stream) == cudaErrorInvalidValue);
    REQUIRE(start_many(link, Path::raw, batch, 2, stream, stream) == cudaErrorInvalidValue);
    REQUIRE(start_many(link, Path::chosen, nullptr, 2, stream, stream) == cudaErrorInvalidValue);
    CUDA_OK(cudaStreamSynchronize(stream));
    REQUIRE(link.wait() == Status::ok);
    std::vector<uint8_t> back(dst.bytes);
    CUDA_OK(cudaMemcpy(back.data(), dst.ptr, back.size(), cudaMemcpyDeviceToHost));
    REQUIRE(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == GUARD_BYTE; }));
  }
  REQUIRE(start_many(link, Path::chosen, nullptr, 0, stream, stream) == cudaSuccess);  // nothing to send
}

/// On a `failing` link (1 us timeout, every message coded; src: `host`, dst: twice its size): a batch whose
/// receiver gives up is reported by wait() within seconds and refuses the next batch until reset(); a batch
/// longer than the status records, every message failing, is stopped where the link finds the records' errors
/// (the caller's streams still wait for what was issued) and wait() reports; after reset() the link works.
template <class Link>
void check_failed_batches_reported(Link& failing, const DeviceBuffer& src, const DeviceBuffer& dst,
                                   const std::vector<uint8_t>& host, cudaStream_t stream) {
  const uint64_t n = host.size() / 2;
  const P2PMessage three[] = {{src.ptr, dst.ptr, n}, {src.ptr, dst.as(2 * n), n / 2}, {src.ptr, dst.ptr, n}};
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_OK(start_many(failing, Path::chosen, three, 3, stream, stream));
  const Status s = failing.wait();
  INFO(status_string(s));
  REQUIRE(s != Status::ok);
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  REQUIRE(start_many(failing, Path::chosen, three, 3, stream, stream) == cudaErrorInvalidValue);  // until reset()
  CUDA_OK(failing.reset());
  std::vector<P2PMessage> lots(p2p_detail::TransferStatusLog::RECORDS + 8, P2PMessage{src.ptr, dst.ptr, 50000});
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(start_many(failing, Path::chosen, lots.data(), lots.size(), stream, stream) == cudaErrorInvalidValue);
  CUDA_OK(cudaStreamSynchronize(stream));
  REQUIRE(failing.wait() != Status::ok);
  REQUIRE(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10));
  CUDA_OK(failing.reset());
  CUDA_OK(cudaMemsetAsync(dst.ptr, 0, dst.bytes, stream));  // ordered before the transfer, as a legacy memset is not
  CUDA_OK(start_many(failing, Path::raw, three, 1, stream, stream));
  REQUIRE(failing.wait() == Status::ok);
  require_device_bytes(dst.ptr, host);
}

/// 1 to `most` messages of assorted sizes: empty ones, single elements, sizes that end in each tier, a few Mi.
inline std::vector<uint64_t> batch_sizes(std::mt19937_64& rng, size_t most) {
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

/// More messages than a link's status records (1 to 70000 elements each): the link waits for itself once on the
/// way through such a batch.
inline std::vector<uint64_t> past_status_records_sizes(std::mt19937_64& rng) {
  std::vector<uint64_t> lots(p2p_detail::TransferStatusLog::RECORDS + 9);
  for (uint64_t& n : lots) n = 1 + rng() % 70000;
  return lots;
}

}  // namespace p2p_test
