// Ring allreduce on the host: the partition and step arithmetic of comm/ring/schedule.cuh, and a host model of
// the whole protocol (every (rank, channel) block a state machine run in random order, mailboxes with
// ready flags and epochs, passes, the host codec on the compressed hops) checked against the ring's
// host reference (comm/ring/reference.cuh) bit for bit. The model follows BlockRingAllreduce::Run step by
// step; what it cannot check is the device code itself (tests/gpu/test_ring.cu does, on a GPU).
#include "test_util.hpp"

#include <zipcomm/comm/ring/reference.cuh>
#include <zipcomm/comm/ring/schedule.cuh>
#include <zipcomm/host/reference_reduce.hpp>

#include <algorithm>
#include <map>
#include <set>

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

const ReduceOp kOps[] = {ReduceOp::sum(), ReduceOp::prod(), ReduceOp::min(), ReduceOp::max(), ReduceOp::avg(5)};

/// Every element of [0, n) in exactly one (slice, channel, round) chunk, chunks inside their slice's part,
/// boundaries on granules, at most chunk_elems each; rounds past p.rounds empty.
void check_partition(uint64_t n, int R, int C, uint64_t chunk) {
  CAPTURE(n, R, C, chunk);
  const RingPartition p = make_ring_partition(n, R, C, chunk);
  REQUIRE(ring_partition_valid(p));
  std::vector<uint8_t> hits(n, 0);
  uint64_t slices_total = 0, next_slice = 0;
  for (int k = 0; k < R; ++k) {
    const RingRange s = ring_slice(n, R, k);
    REQUIRE(s.first == next_slice);  // slices are consecutive
    REQUIRE(s.count <= p.slice_elems);
    next_slice = s.first + s.count;
    slices_total += s.count;
    uint64_t in_slice = 0;
    for (int c = 0; c < C; ++c) {
      for (uint64_t i = 0; i <= p.rounds; ++i) {
        const RingRange e = ring_chunk(p, k, c, i);
        if (i == p.rounds) {
          REQUIRE(e.count == 0);
          continue;
        }
        REQUIRE(e.count <= chunk);
        if (e.count == 0) continue;
        REQUIRE(e.first % RING_GRANULE == 0);
        REQUIRE(e.first >= s.first);
        REQUIRE(e.first + e.count <= s.first + s.count);
        REQUIRE(e.first - s.first >= uint64_t(c) * p.part_elems);  // inside channel c's part
        REQUIRE(e.first + e.count - s.first <= uint64_t(c + 1) * p.part_elems);
        for (uint64_t x = e.first; x < e.first + e.count; ++x) ++hits[x];
        in_slice += e.count;
      }
    }
    REQUIRE(in_slice == s.count);
  }
  REQUIRE(slices_total == n);
  REQUIRE(std::all_of(hits.begin(), hits.end(), [](uint8_t h) { return h == 1; }));
}

// ---- host model of the protocol -----------------------------------------------------------------------------

struct Slot {
  std::vector<uint8_t> bytes;
  uint32_t ready = 0;        // epoch of the message in it
  uint32_t written_in = 0;   // epoch of the last write
  bool read = true;          // its last message was read (true: free)
};

struct ModelRank {
  std::vector<uint8_t> data;
  std::vector<std::vector<Slot>> slots;  // [channel][slot]
};

struct ModelBlock {
  int rank, channel;
  uint64_t j = 0;  // local round
  int step = 0;
  bool done = false;
};

struct Model {
  DType dtype;
  bool compressed;
  ReduceOp op;
  int R;
  uint64_t slot_bytes;
  uint32_t slots_per_channel;
  std::vector<ModelRank> ranks;
  uint32_t epoch = 0;  // last pass issued
  uint64_t messages = 0, bytes_sent = 0;

  Model(DType d, bool comp, ReduceOp o, int nranks, int max_channels, uint32_t rounds_per_pass, uint64_t slot)
      : dtype(d), compressed(comp), op(o), R(nranks), slot_bytes(slot) {
    slots_per_channel = rounds_per_pass * uint32_t(std::max(1, ring_slots_per_round(R)));
    ranks.resize(R);
    for (ModelRank& r : ranks) r.slots.assign(max_channels, std::vector<Slot>(slots_per_channel));
  }

  uint8_t* elems(int r, const RingRange& e) { return ranks[r].data.data() + e.first * format::elem_bytes(dtype); }

  void write_slot(int r, int c, uint32_t q, const std::vector<uint8_t>& bytes, uint32_t ep) {
    Slot& s = ranks[r].slots[c][q];
    INFO("rank " << r << " channel " << c << " slot " << q << " epoch " << ep);
    REQUIRE(s.read);                 // never overwritten before the consumer read it
    REQUIRE(bytes.size() <= slot_bytes);
    REQUIRE(s.written_in < ep);      // one message per slot per pass
    s.bytes = bytes;
    s.read = false;
    s.written_in = ep;
    s.ready = ep;  // the flag is raised after the bytes (publish)
    ++messages;
    bytes_sent += bytes.size();
  }
  const std::vector<uint8_t>& read_slot(int r, int c, uint32_t q, uint32_t ep) {
    Slot& s = ranks[r].slots[c][q];
    REQUIRE(s.ready == ep);  // read only after its flag, in its own pass
    REQUIRE(!s.read);        // and once
    s.read = true;
    return s.bytes;
  }

  std::vector<uint8_t> raw_message(const uint8_t* x, uint64_t count) {
    std::vector<uint8_t> m(RING_RAW_HEADER_BYTES + count * format::elem_bytes(dtype));
    RingRawHeader h{RING_RAW_MAGIC, uint8_t(dtype), {0, 0, 0}, count};
    std::memcpy(m.data(), &h, sizeof h);
    if (count) std::memcpy(m.data() + RING_RAW_HEADER_BYTES, x, count * format::elem_bytes(dtype));
    return m;
  }
  const uint8_t* raw_payload(const std::vector<uint8_t>& m, uint64_t count) {
    RingRawHeader h;
    REQUIRE(m.size() >= sizeof h);
    std::memcpy(&h, m.data(), sizeof h);
    REQUIRE(h.magic == RING_RAW_MAGIC);
    REQUIRE(h.dtype == uint8_t(dtype));
    REQUIRE(h.count == count);
    return m.data() + RING_RAW_HEADER_BYTES;
  }

  /// One step of a block (the body of BlockRingAllreduce::Run's inner loop); false if it must wait.
  bool step(ModelBlock& b, const RingPartition& P, uint64_t first_round, uint64_t rounds, uint32_t ep) {
    const int r = b.rank, c = b.channel, next = (r + 1) % R;
    const RingAction act = ring_action(R, r, b.step);
    const RingRange e = ring_chunk(P, act.slice, c, first_round + b.j);
    const uint64_t eb = format::elem_bytes(dtype);
    std::vector<uint8_t> in;
    if (act.in_msg >= 0) {
      const uint32_t q = ring_slot_index(R, b.j, act.in_msg);
      REQUIRE(q < slots_per_channel);
      if (int32_t(ranks[r].slots[c][q].ready - ep) < 0) return false;
      in = read_slot(r, c, q, ep);
    }
    std::vector<uint8_t> out;
    uint8_t* x = elems(r, e);
    const uint64_t n = e.count;
    if (compressed && act.kind != RingActionKind::local_only) {
      std::vector<uint8_t> buf(slot_bytes);
      uint64_t bytes = 0;
      switch (act.kind) {
        case RingActionKind::send_own:
          REQUIRE(host::compress_contribution(dtype, CodeId::pair, x, n, op, buf.data(), buf.size(), &bytes) ==
                  Status::ok);
          out.assign(buf.begin(), buf.begin() + bytes);
          break;
        case RingActionKind::reduce_send:
          REQUIRE(host::decompress_reduce_compress(in.data(), in.size(), dtype, CodeId::pair, x, n, op,
                                                   buf.data(), buf.size(), &bytes) == Status::ok);
          out.assign(buf.begin(), buf.begin() + bytes);
          break;
        case RingActionKind::reduce_keep: {
          // own self slot, then decode + forward of it
          const uint32_t self = ring_self_slot_index(R, b.j);
          REQUIRE(self < slots_per_channel);
          REQUIRE(host::decompress_reduce_compress(in.data(), in.size(), dtype, CodeId::pair, x, n, op,
                                                   buf.data(), buf.size(), &bytes) == Status::ok);
          std::vector<uint8_t> fwd(slot_bytes);
          REQUIRE(host::decompress_forward(buf.data(), bytes, dtype, CodeId::pair, x, n, fwd.data(),
                                           fwd.size()) == Status::ok);
          out.assign(fwd.begin(), fwd.begin() + bytes);
          break;
        }
        case RingActionKind::forward: {
          REQUIRE(host::decompress_forward(in.data(), in.size(), dtype, CodeId::pair, x, n, buf.data(),
                                           buf.size()) == Status::ok);
          format::Header h;
          std::memcpy(&h, in.data(), sizeof h);
          out.assign(buf.begin(), buf.begin() + h.total_bytes);
          break;
        }
        case RingActionKind::receive: {
          format::Header h;
          REQUIRE(host::read_header(in.data(), in.size(), &h) == Status::ok);
          REQUIRE(h.num_elements == n);
          REQUIRE(host::decompress(in.data(), in.size(), x, n * eb) == Status::ok);
          break;
        }
        default: FAIL("unexpected action");
      }
    } else {
      std::vector<uint8_t> y(n * eb);
      switch (act.kind) {
        case RingActionKind::send_own:
          REQUIRE(host::reduce_pre(dtype, op, x, y.data(), n) == Status::ok);
          out = raw_message(y.data(), n);
          break;
        case RingActionKind::reduce_send:
          REQUIRE(host::reduce(dtype, op, raw_payload(in, n), x, y.data(), n) == Status::ok);
          out = raw_message(y.data(), n);
          break;
        case RingActionKind::reduce_keep:
          REQUIRE(host::reduce(dtype, op, raw_payload(in, n), x, x, n) == Status::ok);
          out = raw_message(x, n);
          break;
        case RingActionKind::forward:
          if (n) std::memcpy(x, raw_payload(in, n), n * eb);
          out = raw_message(x, n);
          break;
        case RingActionKind::receive:
          if (n) std::memcpy(x, raw_payload(in, n), n * eb);
          else raw_payload(in, n);
          break;
        case RingActionKind::local_only:
          REQUIRE(host::reduce_pre(dtype, op, x, x, n) == Status::ok);
          break;
      }
    }
    if (act.out_msg >= 0) {
      const uint32_t q = ring_slot_index(R, b.j, act.out_msg);
      REQUIRE(q < slots_per_channel);
      write_slot(next, c, q, out, ep);
    } else {
      REQUIRE(out.empty());
    }
    if (++b.step == ring_steps(R)) {
      b.step = 0;
      if (++b.j == rounds) b.done = true;
    }
    return true;
  }

  /// One allreduce call: passes of ring_rounds_per_pass rounds. Each rank starts pass e + 1 once all its own
  /// blocks finished pass e (one stream per rank, as with one GPU per rank), independently of the others:
  /// write_slot then checks that no slot is refilled before the next rank read it.
  void allreduce(uint64_t n, int channels, uint64_t chunk, std::mt19937_64& rng) {
    const RingPartition P = make_ring_partition(n, R, channels, chunk);
    REQUIRE(ring_slot_need(dtype, chunk) <= slot_bytes);
    const uint64_t per_pass = std::min<uint64_t>(P.rounds ? P.rounds : 1,
                                                 ring_rounds_per_pass(make_ring_window_layout(channels, slots_per_channel, slot_bytes), R));
    REQUIRE(per_pass >= 1);
    const uint64_t passes = P.rounds ? format::div_up(P.rounds, per_pass) : 0;
    struct RankProgress {
      uint64_t pass = 0;
      std::vector<ModelBlock> blocks;
    };
    std::vector<RankProgress> prog(R);
    const uint32_t base_epoch = epoch;
    auto start_pass = [&](int r) {
      prog[r].blocks.clear();
      for (int c = 0; c < channels; ++c) prog[r].blocks.push_back(ModelBlock{r, c});
    };
    for (int r = 0; r < R; ++r)
      if (passes) start_pass(r);
    for (uint64_t guard = 0;; ++guard) {
      REQUIRE(guard < 100000000ull);
      std::vector<std::pair<int, int>> runnable;
      bool all_done = true;
      for (int r = 0; r < R; ++r) {
        if (prog[r].pass >= passes) continue;
        all_done = false;
        for (int c = 0; c < channels; ++c)
          if (!prog[r].blocks[c].done) runnable.push_back({r, c});
      }
      if (all_done) break;
      std::shuffle(runnable.begin(), runnable.end(), rng);
      bool progressed = false;
      for (auto [r, c] : runnable) {
        const uint64_t p = prog[r].pass;
        const uint32_t ep = base_epoch + uint32_t(p) + 1;
        if (step(prog[r].blocks[c], P, p * per_pass, std::min(per_pass, P.rounds - p * per_pass), ep)) {
          progressed = true;
          break;  // re-shuffle after every step: many interleavings
        }
      }
      INFO("deadlock: no block can make progress");
      REQUIRE(progressed);
      for (int r = 0; r < R; ++r) {
        if (prog[r].pass >= passes) continue;
        const bool finished = std::all_of(prog[r].blocks.begin(), prog[r].blocks.end(),
                                          [](const ModelBlock& b) { return b.done; });
        if (finished && ++prog[r].pass < passes) start_pass(r);
      }
    }
    epoch = base_epoch + uint32_t(passes);
  }
};

std::vector<uint8_t> model_data(DType d, uint64_t n, std::mt19937_64& rng) {
  zt::Tensor t = zt::gaussian(d, n, rng);
  const uint32_t sp16[] = {0x7FC1u, 0xFFFFu, 0x7F80u, 0xFF80u, 0x8000u, 0x0000u, 0x0001u, 0x7C00u, 0x7BFFu};
  const uint32_t sp32[] = {0x7FC00001u, 0xFFFFFFFFu, 0x7F800000u, 0xFF800000u, 0x80000000u, 0u, 1u, 0x7F7FFFFFu};
  for (uint64_t i = 0; i < n; ++i)
    if (rng() % 64 == 0) t.set(i, d == DType::fp32 ? sp32[rng() % 8] : sp16[rng() % 9]);
  return t.bytes;
}

}  // namespace

TEST_CASE("ring partition: slices, channel parts and pipeline chunks cover every element once", "[ring]") {
  ZT_RNG("ring partition");
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(7), uint64_t(255), uint64_t(1023), uint64_t(1024),
                     uint64_t(1025), uint64_t(16385), uint64_t(100003), uint64_t(1000003)})
    for (int R : {1, 2, 3, 5, 8, 16})
      for (int C : {1, 2, 3, 7, 32})
        for (uint64_t chunk : {uint64_t(1024), uint64_t(16384), uint64_t(262144)}) check_partition(n, R, C, chunk);
  for (int i = 0; i < 200; ++i) {
    const uint64_t n = rng() % 3000000;
    check_partition(n, 1 + int(rng() % 16), 1 + int(rng() % 40), RING_GRANULE * (1 + rng() % 300));
  }
}

TEST_CASE("ring slices depend on (n, ranks) only", "[ring]") {
  // The numeric result depends on which rank starts each element's reduction: channels and chunk sizes must
  // not change it, so that the raw switch and the channel count never change the bits.
  for (uint64_t n : {uint64_t(1), uint64_t(5000), uint64_t(1000003)})
    for (int R : {2, 3, 8}) {
      CAPTURE(n, R);
      const uint64_t S = ring_slice_elems(n, R);
      REQUIRE(S % RING_GRANULE == 0);
      REQUIRE(S * uint64_t(R) >= n);
      REQUIRE((S - RING_GRANULE) * uint64_t(R) < n);  // the smallest granule multiple that covers n
      for (int k = 0; k < R; ++k) {
        const RingRange s = ring_slice(n, R, k);
        for (int C : {1, 4, 9})
          for (uint64_t chunk : {uint64_t(1024), uint64_t(65536)}) {
            const RingPartition p = make_ring_partition(n, R, C, chunk);
            uint64_t lo = ~uint64_t(0), hi = 0;
            for (int c = 0; c < C; ++c)
              for (uint64_t i = 0; i < p.rounds; ++i) {
                const RingRange e = ring_chunk(p, k, c, i);
                if (!e.count) continue;
                lo = std::min(lo, e.first);
                hi = std::max(hi, e.first + e.count);
              }
            if (s.count) {
              REQUIRE(lo == s.first);
              REQUIRE(hi == s.first + s.count);
            }
          }
      }
    }
}

TEST_CASE("ring steps: every hop reads what the previous rank sent, in the reference order", "[ring]") {
  for (int R = 1; R <= RING_MAX_RANKS; ++R) {
    CAPTURE(R);
    REQUIRE(ring_steps(R) == (R == 1 ? 1 : 2 * R - 1));
    for (int r = 0; r < R; ++r) {
      CAPTURE(r);
      std::set<int> reduced, kept;
      for (int s = 0; s < ring_steps(R); ++s) {
        CAPTURE(s);
        const RingAction a = ring_action(R, r, s);
        REQUIRE(a.slice >= 0);
        REQUIRE(a.slice < R);
        if (R == 1) {
          REQUIRE(a.kind == RingActionKind::local_only);
          continue;
        }
        REQUIRE(a.slice == ((r - s) % R + R) % R);
        if (a.in_msg >= 0) {
          // the previous rank sent this message at the previous step, on the same slice
          const RingAction p = ring_action(R, (r + R - 1) % R, s - 1);
          REQUIRE(p.out_msg == a.in_msg);
          REQUIRE(p.slice == a.slice);
        } else {
          REQUIRE(s == 0);
        }
        if (a.out_msg >= 0) REQUIRE(a.out_msg < ring_messages_per_round(R));
        const bool reduces = a.kind == RingActionKind::send_own || a.kind == RingActionKind::reduce_send ||
                             a.kind == RingActionKind::reduce_keep;
        const bool keeps = a.kind == RingActionKind::reduce_keep || a.kind == RingActionKind::forward ||
                           a.kind == RingActionKind::receive;
        if (reduces) REQUIRE(reduced.insert(a.slice).second);  // own contribution enters each slice once
        if (keeps) REQUIRE(kept.insert(a.slice).second);       // and each result is written once
        REQUIRE((a.out_msg < 0) == (a.kind == RingActionKind::receive));
      }
      if (R > 1) {
        REQUIRE(int(reduced.size()) == R);
        REQUIRE(int(kept.size()) == R);
      }
    }
    // Slice k: contributions join in the order k, k+1, ..., k-1, and the rank that finishes it is k-1.
    for (int k = 0; k < R && R > 1; ++k) {
      for (int j = 0; j < R; ++j) {
        const RingAction a = ring_action(R, (k + j) % R, j);
        REQUIRE(a.slice == k);
        REQUIRE(a.kind == (j == 0 ? RingActionKind::send_own
                           : j + 1 < R ? RingActionKind::reduce_send
                                       : RingActionKind::reduce_keep));
      }
    }
    // Slots of a pass: every (round, message) and self slot distinct.
    for (uint32_t rounds : {1u, 2u, 5u}) {
      std::set<uint32_t> used;
      for (uint64_t j = 0; j < rounds; ++j) {
        for (int m = 0; m < ring_messages_per_round(R); ++m) REQUIRE(used.insert(ring_slot_index(R, j, m)).second);
        if (R > 1) REQUIRE(used.insert(ring_self_slot_index(R, j)).second);
      }
      if (R > 1) {
        REQUIRE(*used.rbegin() + 1 == rounds * uint32_t(ring_slots_per_round(R)));
        const RingWindowLayout L = make_ring_window_layout(4, rounds * uint32_t(ring_slots_per_round(R)), 4096);
        REQUIRE(ring_rounds_per_pass(L, R) == rounds);
      }
    }
  }
}

TEST_CASE("ring window layout: aligned, disjoint regions", "[ring]") {
  for (int C : {1, 3, 32, RING_MAX_CHANNELS})
    for (uint32_t slots : {1u, 3u, 15u, 62u})
      for (uint64_t slot : {uint64_t(256), uint64_t(4096), ring_default_slot_bytes()}) {
        CAPTURE(C, slots, slot);
        const RingWindowLayout L = make_ring_window_layout(C, slots, slot);
        REQUIRE(ring_window_layout_valid(L));
        REQUIRE(L.ready_offset >= RING_BYTES_SENT_OFFSET + 8);
        REQUIRE(L.mailbox_offset >= L.ready_offset + 4 * uint64_t(C) * slots);
        REQUIRE(L.mailbox_offset % RING_SLOT_ALIGN == 0);
        REQUIRE(L.total_bytes == L.mailbox_offset + uint64_t(C) * slots * slot);
        uint8_t* base = reinterpret_cast<uint8_t*>(uintptr_t(1) << 20);  // only addresses are computed
        REQUIRE(ring_slot(L, base, C - 1, slots - 1) + slot == base + L.total_bytes);
        REQUIRE(reinterpret_cast<uint8_t*>(ring_ready_flag(L, base, C - 1, slots - 1)) + 4 <= base + L.mailbox_offset);
        REQUIRE((ring_slot(L, base, 0, 1) - base) % RING_SLOT_ALIGN == 0);
      }
  REQUIRE_FALSE(ring_window_layout_valid(make_ring_window_layout(0, 3, 4096)));
  REQUIRE_FALSE(ring_window_layout_valid(make_ring_window_layout(2, 3, 4000)));
}

TEST_CASE("ring chunk sizing: the largest chunk whose message fits a slot", "[ring]") {
  for (DType d : zt::kArithmeticDTypes) {
    for (uint64_t slot : {uint64_t(4096), uint64_t(65536), uint64_t(100096), ring_default_slot_bytes(),
                          uint64_t(8) << 20}) {
      CAPTURE(dtype_name(d), slot);
      const uint64_t ce = ring_chunk_elems(d, slot);
      if (ring_slot_need(d, RING_GRANULE) > slot) {  // fp32 in 4 KiB: not one granule
        REQUIRE(ce == 0);
        continue;
      }
      REQUIRE(ce >= RING_GRANULE);
      REQUIRE(ce % RING_GRANULE == 0);
      REQUIRE(ring_slot_need(d, ce) <= slot);
      REQUIRE(ring_slot_need(d, ce) >= format::max_compressed_bytes(d, ce, format::MAX_CHUNK_LOG2));
      REQUIRE(ring_slot_need(d, ce) >= RING_RAW_HEADER_BYTES + ce * format::elem_bytes(d));
      if (ce >= uint64_t(format::MAX_CHUNK_ELEMS)) {
        REQUIRE(ce % format::MAX_CHUNK_ELEMS == 0);
        REQUIRE(ring_slot_need(d, ce + format::MAX_CHUNK_ELEMS) > slot);
      } else {
        REQUIRE(ring_slot_need(d, ce + RING_GRANULE) > slot);
      }
    }
    REQUIRE(ring_chunk_elems(d, 1024) == 0);  // not even one granule
  }
  const uint64_t def = ring_default_slot_bytes();
  REQUIRE(ring_chunk_elems(DType::fp32, def) == 8 * uint64_t(format::MAX_CHUNK_ELEMS));
  REQUIRE(ring_chunk_elems(DType::bf16, def) == 16 * uint64_t(format::MAX_CHUNK_ELEMS));
  REQUIRE(ring_chunk_elems(DType::fp16, def) == 16 * uint64_t(format::MAX_CHUNK_ELEMS));
}

TEST_CASE("ring reference: slice order and rejection of bad arguments", "[ring]") {
  ZT_RNG("ring reference");
  // With sum on values where rounding is exact (small integers), every order gives the plain sum.
  const int R = 5;
  const uint64_t n = 3000;
  std::vector<std::vector<uint8_t>> in(R, std::vector<uint8_t>(4 * n));
  std::vector<double> want(n, 0.0);
  for (int r = 0; r < R; ++r)
    for (uint64_t i = 0; i < n; ++i) {
      const float v = float(int(rng() % 200) - 100);
      std::memcpy(&in[r][4 * i], &v, 4);
      want[i] += v;
    }
  std::vector<const void*> ptrs;
  for (auto& v : in) ptrs.push_back(v.data());
  std::vector<float> out(n);
  REQUIRE(ring_reference(DType::fp32, ReduceOp::sum(), ptrs, n, out.data()) == Status::ok);
  for (uint64_t i = 0; i < n; ++i) REQUIRE(double(out[i]) == want[i]);
  // Order: on bf16 sums that round, the result must be the fold in ring order k, k+1, ..., k-1.
  std::vector<std::vector<uint8_t>> b(R);
  for (int r = 0; r < R; ++r) b[r] = model_data(DType::bf16, n, rng);
  std::vector<const void*> bp;
  for (auto& v : b) bp.push_back(v.data());
  std::vector<uint8_t> got(2 * n);
  REQUIRE(ring_reference(DType::bf16, ReduceOp::sum(), bp, n, got.data()) == Status::ok);
  for (uint64_t i = 0; i < n; ++i) {
    int k = 0;
    while (!(i >= ring_slice(n, R, k).first && i < ring_slice(n, R, k).first + ring_slice(n, R, k).count)) ++k;
    uint32_t acc[1];
    acc[0] = uint32_t(b[k][2 * i]) | uint32_t(b[k][2 * i + 1]) << 8;
    for (int j = 1; j < R; ++j) {
      const uint8_t* x = &b[(k + j) % R][2 * i];
      const uint32_t y[1] = {uint32_t(x[0]) | uint32_t(x[1]) << 8};
      thread::reduce_items<DType::bf16, 1>(ReduceOp::sum(), acc, y);
    }
    REQUIRE((uint32_t(got[2 * i]) | uint32_t(got[2 * i + 1]) << 8) == acc[0]);
  }
  REQUIRE(ring_reference(DType::fp32, ReduceOp::sum(), {}, n, out.data()) == Status::invalid_argument);
  REQUIRE(ring_reference(DType::fp32, ReduceOp{ReduceOpId(9), 1.0f}, ptrs, n, out.data()) == Status::invalid_argument);
  REQUIRE(ring_reference(DType(7), ReduceOp::sum(), ptrs, n, out.data()) == Status::invalid_argument);
  REQUIRE(ring_reference(DType::fp32, ReduceOp::sum(), ptrs, n, nullptr) == Status::invalid_argument);
}

TEST_CASE("ring host model: compressed and raw protocols give the reference bits, no slot misuse", "[ring]") {
  ZT_RNG("ring host model");
  struct Case {
    int R, channels;
    uint64_t n;
    uint32_t rounds_per_pass;
  };
  // Small slots (2048 elements of fp32) so that several rounds and passes happen at modest sizes.
  const uint64_t slot = format::align_up(ring_slot_need(DType::fp32, 2048), RING_SLOT_ALIGN);
  const Case cases[] = {{1, 2, 5000, 1},  {2, 1, 1, 1},     {2, 3, 40000, 1}, {3, 2, 7, 2},
                        {3, 4, 70001, 2}, {4, 2, 16385, 1}, {5, 3, 33333, 3}, {8, 2, 60007, 1}};
  for (const Case& k : cases) {
    for (DType d : zt::kArithmeticDTypes) {
      const ReduceOp op = kOps[rng() % 5];
      const uint64_t chunk = ring_chunk_elems(d, slot);
      CAPTURE(k.R, k.channels, k.n, k.rounds_per_pass, dtype_name(d), reduce_op_name(op.id), chunk);
      std::vector<std::vector<uint8_t>> input(k.R);
      std::vector<const void*> ptrs;
      for (auto& v : input) v = model_data(d, k.n, rng), ptrs.push_back(v.data());
      std::vector<uint8_t> want(k.n * format::elem_bytes(d));
      REQUIRE(ring_reference(d, op, ptrs, k.n, want.data()) == Status::ok);
      std::vector<uint8_t> first_result;
      for (bool compressed : {true, false}) {
        CAPTURE(compressed);
        Model m(d, compressed, op, k.R, k.channels + 1, k.rounds_per_pass, slot);
        // Two calls: the second with another channel count, so slots are refilled across a layout change.
        for (int call = 0; call < 2; ++call) {
          CAPTURE(call);
          for (int r = 0; r < k.R; ++r) m.ranks[r].data = input[r];
          m.allreduce(k.n, call == 0 ? k.channels : k.channels + 1, chunk, rng);
          for (int r = 0; r < k.R; ++r) {
            CAPTURE(r);
            REQUIRE(m.ranks[r].data == want);
          }
        }
        if (k.R > 1 && k.n) REQUIRE(m.messages > 0);
      }
    }
  }
}

TEST_CASE("ring host model: a compressed ring sends fewer bytes than the raw one on Gaussian data", "[ring]") {
  ZT_RNG("ring host model bytes");
  const int R = 4;
  const uint64_t n = 200000;
  const uint64_t slot = ring_default_slot_bytes();
  uint64_t sent[2] = {0, 0};
  for (int compressed = 0; compressed < 2; ++compressed) {
    Model m(DType::bf16, compressed == 1, ReduceOp::sum(), R, 2, 1, slot);
    std::mt19937_64 data_rng(42);
    for (int r = 0; r < R; ++r) m.ranks[r].data = zt::gaussian(DType::bf16, n, data_rng).bytes;
    m.allreduce(n, 2, ring_chunk_elems(DType::bf16, slot), rng);
    sent[compressed] = m.bytes_sent;
  }
  CAPTURE(sent[0], sent[1]);
  REQUIRE(sent[1] < sent[0] * 80 / 100);
}
