// GPU tests of the P2P agents on one GPU: a sender and a receiver kernel over a frame ring in device memory. The
// receiver's per-item checks against the host rule, frames identical to the host reference, corrupt frames,
// peers that disagree on sizes, and peers that never answer.
// A user kernel runs the block-level sender and receiver itself.
// Tags: [p2p]; [concurrent] needs sender and receiver kernels running at once.
#include <cooperative_groups.h>

#include <chrono>

#include <zipcomm/comm/p2p.cuh>
#include <zipcomm/comm/p2p/reference.cuh>

#include "p2p_harness.cuh"

using namespace p2p_test;

namespace {

/// One warp per item: each warp's share of the item-table check, as the receiver kernel runs it.
__global__ void item_shares_kernel(const uint8_t* table, FrameInfo fi, FrameKind kind, uint32_t exps_bytes,
                                   uint32_t* out) {
  const uint32_t j = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (j >= fi.items) return;
  const bool ok = p2p_detail::warp_item_entry_valid(table, fi, DType::bf16, kind, exps_bytes, j);
  if (warp::lane_id() == 0) out[j] = ok ? 1u : 0u;
}

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

/// Items of 16384, 2048 and 256 elements, a few per frame: a message of about 90 Ki elements makes a frame or two
/// in each tier, all in the 8 slots of the tests' ring.
PipelineShape small_three_tier_shape() {
  PipelineShape shape;
  shape.tier[0] = {16384, 4, 0};
  shape.tier[1] = {2048, 8, 20000};
  shape.tier[2] = {256, 16, 3000};
  return shape;
}

uint8_t* slot_ptr(const FrameRingView& v, uint64_t seq) { return v.slots + slot_of(seq, v.num_slots) * v.slot_bytes; }

/// Uploads `host` to `src` and sends it, stream-ordered, from sequence number `base` into p's ring (every slot
/// poisoned first, on the sender's stream so that it lands first: every frame byte must be written); requires
/// the sender to finish ok.
void send_into_poisoned_ring(Pair& p, const FramePlan& plan, const std::vector<uint8_t>& host,
                             const DeviceBuffer& src, uint64_t base) {
  CUDA_OK(cudaMemcpyAsync(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice, p.s_tx));
  const FrameRingView ring = p.ring.view();
  CUDA_OK(cudaMemsetAsync(ring.slots, 0xCD, size_t(ring.num_slots) * ring.slot_bytes, p.s_tx));
  CUDA_OK(p.tx.launch(plan, src.ptr, ring, ordered_send(plan, base, 1000000000ull), p.s_tx));
  CUDA_OK(cudaStreamSynchronize(p.s_tx));
  REQUIRE(p.status(p.tx.control()) == Status::ok);
}

/// Requires every frame of `plan` in `ring`, from sequence number `base`, to be the host reference's encoding of
/// `host`, byte for byte; with `ready_flags`, each slot's two ready flags set for it as well (base + f + 1).
void require_reference_frames(const FramePlan& plan, const FrameRingView& ring, uint64_t base,
                              const std::vector<uint8_t>& host, bool ready_flags) {
  std::vector<uint8_t> ref, got;
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    CAPTURE(f, fi.items, fi.item_elems);
    REQUIRE(host_encode_frame(plan, fi, CodeId::pair, base + f, host.data(), ref) == Status::ok);
    got.resize(ref.size());
    CUDA_OK(cudaMemcpy(got.data(), slot_ptr(ring, base + f), ref.size(), cudaMemcpyDeviceToHost));
    REQUIRE(got == ref);
    if (!ready_flags) continue;
    uint64_t flags[2];
    CUDA_OK(cudaMemcpy(&flags[0], &ring.ready_planes[slot_of(base + f, ring.num_slots)], 8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&flags[1], &ring.ready_exps[slot_of(base + f, ring.num_slots)], 8, cudaMemcpyDeviceToHost));
    REQUIRE(flags[0] == base + f + 1);
    REQUIRE(flags[1] == base + f + 1);
  }
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

TEST_CASE("p2p sender with a head region writes exactly the host reference's frames", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  PipelineShape shape = small_three_tier_shape();
  shape.head = {4096, 2, 12288};
  Pair p(8, shape);
  const uint64_t n = 12288 + 4 * 16384 + 20000 + 3000 + 17;  // head: 2 frames, body 1, tiers 1 and 2: 2 each
  const std::vector<uint8_t> host = test_bf16(n, rng);
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  REQUIRE(plan.head_parts == 1);
  REQUIRE(plan.part[0].frames == 2);
  REQUIRE(plan.num_frames <= 8);
  DeviceBuffer src(host.size()), dst(host.size());
  const FrameRingView ring = p.ring.view();
  const uint64_t base = 13;
  send_into_poisoned_ring(p, plan, host, src, base);
  require_reference_frames(plan, ring, base, host, /*ready_flags=*/false);
  CUDA_OK(p.rx.launch(plan, dst.ptr, ring, ordered_recv(plan, base, 1000000000ull), p.s_rx));
  CUDA_OK(cudaStreamSynchronize(p.s_rx));
  REQUIRE(p.status(p.rx.control()) == Status::ok);
  require_device_bytes(dst.ptr, host);
}

TEST_CASE("p2p sender writes exactly the host reference's frames; corrupt frames are refused", "[gpu][p2p]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  PipelineShape shape = small_three_tier_shape();
  Pair p(8, shape);
  const uint64_t n = 4 * 16384 + 20000 + 3000 + 17;  // one frame per tier and then some; fits 8 slots
  const std::vector<uint8_t> host = test_bf16(n, rng);
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  REQUIRE(plan.num_frames <= 8);
  DeviceBuffer src(host.size()), dst(host.size());
  const FrameRingView ring = p.ring.view();
  const uint64_t base = 40;  // any sequence base: slots are taken modulo the ring
  send_into_poisoned_ring(p, plan, host, src, base);

  require_reference_frames(plan, ring, base, host, /*ready_flags=*/true);

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
  require_device_bytes(dst.ptr, host);

  // Damage one byte of frame 1 at a time: planes, header, item table, a chunk. Every one is refused.
  const FrameInfo f1 = plan.frame(1);
  uint8_t* frame1 = slot_ptr(ring, base + 1);
  std::vector<uint8_t> ref;
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
    require_device_bytes(dst.ptr, host);
  }
}

namespace {

using UserSender = BlockFrameSender<DType::bf16, P2PPolicy::WARPS>;
using UserReceiver = BlockFrameReceiver<DType::bf16, P2PPolicy::WARPS>;
union UserTransferStorage {
  UserSender::TempStorage send;
  UserReceiver::TempStorage recv;
};

/// A caller's own persistent kernel: blocks [0, send_blocks) send the message, the others receive it, through
/// the ring's flags and credits (the two halves wait on each other: every block must be resident). Each block's
/// thread 0 then writes the side's status as its block saw it.
__global__ void user_transfer_kernel(SendArgs send, RecvArgs recv, uint32_t send_blocks, uint32_t* block_status) {
  extern __shared__ __align__(16) unsigned char user_smem[];
  auto& temp = *reinterpret_cast<UserTransferStorage*>(user_smem);
  auto cta = cooperative_groups::this_thread_block();
  const bool sender = blockIdx.x < send_blocks;
  if (sender)
    UserSender(temp.send).Send(cta, send, blockIdx.x);
  else
    UserReceiver(temp.recv).Receive(cta, recv);
  cta.sync();
  const SideControl* control = sender ? send.control : recv.control;
  if (cta.thread_rank() == 0) block_status[blockIdx.x] = *const_cast<const volatile uint32_t*>(&control->status);
}

}  // namespace

TEST_CASE("p2p block sender and receiver in a user's own kernel move a message byte-exact", "[gpu][p2p]") {
  const PipelineShape shape = small_three_tier_shape();
  const uint64_t n = 400000;
  const std::vector<uint8_t> host = real_bf16(n);
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  const uint32_t slots = 4;  // fewer than the frames: slots come back by credit while the kernel runs
  REQUIRE(plan.num_frames > slots);
  FrameRing ring;
  CUDA_OK(ring.init_device(0, slots, slot_bytes_for(DType::bf16, shape)));
  const uint32_t send_blocks = 2, recv_blocks = 2;
  const uint64_t scratch_bytes = format::align_up(item_plane_bytes(DType::bf16, largest_item_elems(shape)), 16);

  // Every word a side needs, zeroed: item counters, per-slot counters, look-back, mirrors, control words.
  const size_t words = 2 + 2 * slots + slots * MAX_FRAME_ITEMS + slots + 2 + slots + 2 * slots + slots;
  DeviceBuffer state(words * 8 + 2 * sizeof(SideControl)), scratch(send_blocks * P2PPolicy::WARPS * scratch_bytes);
  DeviceBuffer src(host.size()), dst(host.size()), status((send_blocks + recv_blocks) * 4);
  CUDA_OK(cudaMemset(state.ptr, 0, state.bytes));
  CUDA_OK(cudaMemset(dst.ptr, 0xCD, dst.bytes));
  CUDA_OK(cudaMemcpy(src.ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
  uint64_t* w = state.as<uint64_t>();
  auto take = [&](size_t count) {
    uint64_t* p = w;
    w += count;
    return p;
  };

  SendArgs a;
  a.plan = plan;
  a.in = src.ptr;
  a.frame_end = plan.num_frames;
  a.ring = ring.view();
  a.item_counter = reinterpret_cast<unsigned long long*>(take(1));
  a.counters = reinterpret_cast<unsigned long long*>(take(2 * slots));
  a.lookback = take(slots * MAX_FRAME_ITEMS);
  a.credit_seen = take(slots);
  a.scratch = scratch.as<uint8_t>();
  a.scratch_bytes = scratch_bytes;
  a.timeout_ns = 2000000000ull;
  RecvArgs r;
  r.plan = plan;
  r.out = dst.ptr;
  r.frame_end = plan.num_frames;
  r.ring = ring.view();
  r.item_counter = reinterpret_cast<unsigned long long*>(take(1));
  r.frames_done = reinterpret_cast<unsigned long long*>(take(1));
  r.counters = reinterpret_cast<unsigned long long*>(take(slots));
  r.mirror = take(2 * slots);
  r.frame_status = reinterpret_cast<uint32_t*>(take(slots));
  r.timeout_ns = a.timeout_ns;
  a.control = reinterpret_cast<SideControl*>(w);
  r.control = a.control + 1;

  const size_t smem = sizeof(UserTransferStorage);
  CUDA_OK(cudaFuncSetAttribute(user_transfer_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  user_transfer_kernel<<<send_blocks + recv_blocks, P2PPolicy::THREADS, smem>>>(a, r, send_blocks,
                                                                              status.as<uint32_t>());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  std::vector<uint32_t> seen(send_blocks + recv_blocks);
  CUDA_OK(cudaMemcpy(seen.data(), status.ptr, seen.size() * 4, cudaMemcpyDeviceToHost));
  for (uint32_t b = 0; b < seen.size(); ++b) REQUIRE(Status(seen[b]) == Status::ok);
  require_device_bytes(dst.ptr, host);
}
