// P2P pipeline protocol on the CPU: the cut of a message into tiers, frames and items; frame header and item
// table checks; the ring's sequence-flag rules; the bypass threshold choice; the host reference frames
// (round trips, corruption); and a randomized interleaving of a sender and a receiver over a slot ring that
// follows the same rules as the GPU kernels.
#include "test_util.hpp"

#include <zipcomm/comm/p2p/protocol.cuh>
#include <zipcomm/comm/p2p/reference.cuh>

#include <algorithm>
#include <fstream>
#include <iterator>

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

PipelineShape random_shape(std::mt19937_64& rng) {
  PipelineShape s;
  s.num_tiers = 1 + uint32_t(rng() % MAX_PIPELINE_TIERS);
  for (uint32_t k = 0; k < s.num_tiers; ++k) {
    s.tier[k].item_elems = format::TILE_ELEMS * uint32_t(1 + rng() % (format::MAX_CHUNK_ELEMS / format::TILE_ELEMS));
    s.tier[k].frame_items = uint32_t(1 + rng() % 300);
    s.tier[k].region_elems = rng() % (uint64_t(1) << (10 + rng() % 14));
  }
  if (rng() % 2) {  // a head, half the time; sometimes with a tier's item size
    s.head.item_elems = rng() % 4
                            ? format::TILE_ELEMS * uint32_t(1 + rng() % (format::MAX_CHUNK_ELEMS / format::TILE_ELEMS))
                            : s.tier[rng() % s.num_tiers].item_elems;
    s.head.frame_items = uint32_t(1 + rng() % 300);
    s.head.region_elems = 1 + rng() % (uint64_t(1) << (10 + rng() % 14));
  } else if (rng() % 2) {  // off, whatever its other fields say
    s.head = {uint32_t(rng()), uint32_t(rng()), 0};
  }
  return s;
}

/// The tail's regions together (tiers 1..).
uint64_t tail_elems(const PipelineShape& s) {
  uint64_t t = 0;
  for (uint32_t k = 1; k < s.num_tiers; ++k) t += s.tier[k].region_elems;
  return t;
}

/// The parts of a plan: in message order, tiling it, each part but the last whole items of its own size, the
/// tail served first, then the head (rounded down to its items), then the body.
void check_parts(const FramePlan& p, const PipelineShape& shape) {
  const uint32_t h = shape.has_head() ? 1u : 0u;
  REQUIRE(p.head_parts == h);
  REQUIRE(p.num_parts == h + shape.num_tiers);
  uint64_t elem = 0, item = 0, frame = 0;
  for (uint32_t k = 0; k < p.num_parts; ++k) {
    const FramePlan::Part& q = p.part[k];
    const PipelineTier& t = k < h ? shape.head : shape.tier[k - h];
    CAPTURE(k, q.first_elem, q.elems, q.items, q.frames);
    REQUIRE(q.item_elems == t.item_elems);
    REQUIRE(q.frame_items == t.frame_items);
    REQUIRE(q.first_elem == elem);
    REQUIRE(q.first_item == item);
    REQUIRE(q.first_frame == frame);
    REQUIRE(q.items == format::div_up(q.elems, t.item_elems));
    REQUIRE(q.frames == format::div_up(q.items, t.frame_items));
    if (k + 1 < p.num_parts) REQUIRE(q.elems % t.item_elems == 0);
    elem += q.elems;
    item += q.items;
    frame += q.frames;
  }
  REQUIRE(elem == p.n);
  REQUIRE(item == p.num_items);
  REQUIRE(frame == p.num_frames);
  for (uint32_t k = 0; k < shape.num_tiers; ++k) REQUIRE(&p.tier_part(k) == &p.part[h + k]);
  // The tail gets at least its regions (or the whole message); the head what is left, up to its region,
  // rounded down to whole head items.
  const uint64_t tail_want = std::min(p.n, tail_elems(shape));
  uint64_t tail = 0;
  for (uint32_t k = 1; k < shape.num_tiers; ++k) tail += p.tier_part(k).elems;
  REQUIRE(tail >= tail_want);
  if (h) {
    const uint64_t head_want = std::min(shape.head.region_elems, p.n - tail_want);
    REQUIRE(p.part[0].elems == head_want / shape.head.item_elems * shape.head.item_elems);
    if (p.n <= tail_elems(shape)) REQUIRE(p.part[0].elems == 0);
  }
}

/// Every structural promise of a plan, checked by walking all its frames and items.
void check_plan(const FramePlan& p, const PipelineShape& shape) {
  CAPTURE(p.n, p.num_frames, p.num_items, int(p.kind));
  uint64_t elem = 0, item = 0;
  for (uint64_t f = 0; f < p.num_frames; ++f) {
    const FrameInfo fi = p.frame(f);
    CAPTURE(f, fi.first_elem, fi.elems, fi.items, fi.item_elems);
    REQUIRE(fi.index == f);
    REQUIRE(fi.first_elem == elem);  // frames tile the message in order
    REQUIRE(fi.first_item == item);
    REQUIRE(fi.items >= 1);
    REQUIRE(fi.items <= MAX_FRAME_ITEMS);
    REQUIRE(fi.elems >= 1);
    REQUIRE(fi.elems <= uint64_t(fi.items) * fi.item_elems);
    REQUIRE(fi.elems > uint64_t(fi.items - 1) * fi.item_elems);
    bool tier_ok = false;
    for (uint32_t k = 0; k < shape.num_tiers; ++k)
      tier_ok |= shape.tier[k].item_elems == fi.item_elems && fi.items <= shape.tier[k].frame_items;
    if (shape.has_head()) tier_ok |= shape.head.item_elems == fi.item_elems && fi.items <= shape.head.frame_items;
    REQUIRE(tier_ok);
    // The frame lies in one part, cut by that part's sizes; only a part's last frame can have fewer items.
    uint32_t k = 0;
    while (!(f >= p.part[k].first_frame && f < p.part[k].first_frame + p.part[k].frames)) ++k;
    REQUIRE(k < p.num_parts);
    const FramePlan::Part& part = p.part[k];
    REQUIRE(fi.item_elems == part.item_elems);
    REQUIRE(fi.first_elem >= part.first_elem);
    REQUIRE(fi.first_elem + fi.elems <= part.first_elem + part.elems);
    if (f + 1 < part.first_frame + part.frames) REQUIRE(fi.items == part.frame_items);
    uint64_t sum_elems = 0, sum_planes = 0;
    for (uint32_t j = 0; j < fi.items; ++j) {
      const uint32_t e = fi.item_elems_at(j);
      REQUIRE(e >= 1);
      // Only the message's very last item can be short; every item starts on a tile.
      if (!(f + 1 == p.num_frames && j + 1 == fi.items)) REQUIRE(e == fi.item_elems);
      REQUIRE((fi.first_elem + uint64_t(j) * fi.item_elems) % format::TILE_ELEMS == 0);
      uint32_t jj = ~0u;
      REQUIRE(p.frame_of_item(item + j, jj) == f);
      REQUIRE(jj == j);
      if (p.kind == FrameKind::coded) REQUIRE(item_planes_offset(p, fi, j) == sum_planes);
      sum_planes += item_plane_bytes(p.dtype, e);
      sum_elems += e;
    }
    REQUIRE(sum_elems == fi.elems);
    if (p.kind == FrameKind::coded)
      REQUIRE(fi.planes_bytes == sum_planes);
    else
      REQUIRE(fi.planes_bytes == format::align_up(fi.elems * format::elem_bytes(p.dtype), 16));
    REQUIRE(fi.planes_bytes % 16 == 0);
    REQUIRE(fi.planes_bytes + fi.exps_bound <= slot_bytes_for(p.dtype, shape));
    elem += fi.elems;
    item += fi.items;
  }
  REQUIRE(elem == p.n);
  REQUIRE(item == p.num_items);
  check_parts(p, shape);
}

/// Sizes at and around every region boundary of a shape (tail regions, then the head), and around item
/// multiples there.
std::vector<uint64_t> boundary_sizes(const PipelineShape& s) {
  std::vector<uint64_t> b = {0};
  uint64_t at = 0;
  for (uint32_t k = s.num_tiers; k-- > 1;) b.push_back(at += s.tier[k].region_elems);
  if (s.has_head()) b.push_back(at += s.head.region_elems);
  std::vector<uint64_t> out = {0, 1, 2, 255, 256, 257, 1000};
  const int64_t d[] = {-16385, -16384, -16383, -4097, -4096, -2049, -2048, -2047, -257,  -256,  -255,  -1,
                       0,      1,      255,    256,   257,   2047,  2048,  4096,  16383, 16384, 16385, 100000};
  for (uint64_t x : b)
    for (int64_t e : d)
      if (int64_t(x) + e >= 0) out.push_back(uint64_t(int64_t(x) + e));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The default shape with a head of `item` elements, `frame_items` to a frame, over `region` elements.
PipelineShape with_head(uint32_t item, uint32_t frame_items, uint64_t region) {
  PipelineShape s;
  s.head = {item, frame_items, region};
  return s;
}

std::vector<uint8_t> read_data(const char* name) {
  std::ifstream f(std::string(ZIPCOMM_TEST_DATA_DIR) + "/" + name, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("p2p plan: frames and items tile every message exactly", "[p2p]") {
  ZT_RNG("p2p plan");
  const PipelineShape def;
  REQUIRE(shape_valid(def));
  const uint64_t sizes[] = {0,
                            1,
                            255,
                            256,
                            257,
                            2047,
                            2048,
                            16383,
                            16384,
                            16385,
                            262144,
                            262145,
                            (uint64_t(4) << 20) - 1,
                            uint64_t(4) << 20,
                            (uint64_t(4) << 20) + 262144 + 7,
                            uint64_t(64) << 20,
                            (uint64_t(1) << 29) + 12345};
  for (DType d : zt::kArithmeticDTypes)
    for (FrameKind kind : {FrameKind::coded, FrameKind::raw})
      for (uint64_t n : sizes) check_plan(make_plan(d, kind, n, def), def);
  for (int i = 0; i < 300; ++i) {
    const PipelineShape s = random_shape(rng);
    REQUIRE(shape_valid(s));
    const uint64_t n = rng() % (uint64_t(1) << (rng() % 27));
    const DType d = zt::kArithmeticDTypes[rng() % 3];
    check_plan(make_plan(d, rng() % 2 ? FrameKind::coded : FrameKind::raw, n, s), s);
  }
  // Random shapes (with and without a head) at every one of their region boundaries.
  for (int i = 0; i < 60; ++i) {
    const PipelineShape s = random_shape(rng);
    CAPTURE(i, s.num_tiers, s.has_head(), s.head.item_elems, s.head.region_elems);
    const DType d = zt::kArithmeticDTypes[rng() % 3];
    for (uint64_t n : boundary_sizes(s))
      check_plan(make_plan(d, rng() % 2 ? FrameKind::coded : FrameKind::raw, n, s), s);
  }
}

TEST_CASE("p2p plan with a head: frames and items tile every message exactly", "[p2p]") {
  // Heads of the sizes bench_p2p --sweep tries (2048/4096-element items, 64..256 to a frame, 2..8 Mi elements),
  // one sharing the body's item size, one of a single item per frame, one longer than the default tail.
  const PipelineShape shapes[] = {with_head(2048, 128, uint64_t(4) << 20),
                                  with_head(4096, 64, uint64_t(2) << 20),
                                  with_head(4096, 256, uint64_t(8) << 20),
                                  with_head(16384, 16, uint64_t(1) << 20),
                                  with_head(256, 1, 5000),
                                  with_head(2048, 1024, 1)};
  for (const PipelineShape& s : shapes) {
    REQUIRE(shape_valid(s));
    CAPTURE(s.head.item_elems, s.head.frame_items, s.head.region_elems);
    std::vector<uint64_t> sizes = boundary_sizes(s);
    sizes.push_back(uint64_t(64) << 20);
    sizes.push_back((uint64_t(1) << 29) + 12345);
    for (DType d : zt::kArithmeticDTypes)
      for (FrameKind kind : {FrameKind::coded, FrameKind::raw})
        for (uint64_t n : sizes) check_plan(make_plan(d, kind, n, s), s);
  }
  // One tier only: [head][body], the body last (it holds the remainder and the short item).
  PipelineShape one = with_head(2048, 8, 50000);
  one.num_tiers = 1;
  for (uint64_t n : boundary_sizes(one)) check_plan(make_plan(DType::fp32, FrameKind::coded, n, one), one);
}

TEST_CASE("p2p plan: the end of a message is cut finer (default shape)", "[p2p]") {
  const PipelineShape s;
  const uint64_t n = uint64_t(64) << 20;  // 128 MiB of bf16
  const FramePlan p = make_plan(DType::bf16, FrameKind::coded, n, s);
  REQUIRE(p.part[2].elems == s.tier[2].region_elems);
  REQUIRE(p.part[1].elems == s.tier[1].region_elems);
  REQUIRE(p.part[0].elems == n - s.tier[1].region_elems - s.tier[2].region_elems);
  REQUIRE(p.frame(0).item_elems == 16384);
  REQUIRE(p.frame(p.num_frames - 1).item_elems == 512);
  // A small message only has fine items; one that does not fill tier 2 lives there entirely.
  const FramePlan small = make_plan(DType::bf16, FrameKind::coded, 1000, s);
  REQUIRE(small.num_frames == 1);
  REQUIRE(small.frame(0).item_elems == 512);
  REQUIRE(small.frame(0).items == 2);
  // Remainders of a coarse tier move to the next one: no short item before the last.
  const FramePlan odd = make_plan(DType::bf16, FrameKind::coded, (uint64_t(6) << 20) + 300, s);
  REQUIRE(odd.part[0].elems % 16384 == 0);
  REQUIRE(odd.part[1].elems % 2048 == 0);
}

TEST_CASE("p2p plan: the start of a message is cut finer with a head, and the tail comes first", "[p2p]") {
  const PipelineShape s = with_head(2048, 64, uint64_t(4) << 20);
  const uint64_t tail = tail_elems(s);
  const uint64_t n = uint64_t(32) << 20;  // 64 MiB of bf16
  const FramePlan p = make_plan(DType::bf16, FrameKind::coded, n, s);
  REQUIRE(p.head_parts == 1);
  REQUIRE(p.num_parts == 4);
  REQUIRE(p.part[0].elems == s.head.region_elems);
  REQUIRE(p.tier_part(0).elems == n - s.head.region_elems - tail);
  REQUIRE(p.tier_part(1).elems == s.tier[1].region_elems);
  REQUIRE(p.tier_part(2).elems == s.tier[2].region_elems);
  REQUIRE(p.frame(0).item_elems == 2048);
  REQUIRE(p.frame(0).items == 64);  // the first frame: 128 Ki elements, not 2 Mi
  REQUIRE(p.frame(0).elems == 64 * 2048);
  REQUIRE(p.frame(p.part[0].frames).item_elems == 16384);
  REQUIRE(p.frame(p.part[0].frames).first_elem == s.head.region_elems);
  REQUIRE(p.frame(p.num_frames - 1).item_elems == 512);
  // A message no longer than the tail has no head: the drain matters at every size, and a message this short
  // is cut fine anyway.
  const FramePlan small = make_plan(DType::bf16, FrameKind::coded, 1000, s);
  REQUIRE(small.num_frames == 1);
  REQUIRE(small.part[0].elems == 0);
  REQUIRE(small.frame(0).item_elems == 512);
  REQUIRE(make_plan(DType::bf16, FrameKind::coded, tail, s).part[0].elems == 0);
  // Just past the tail: the head takes whole items of what is left; the rest moves on (body, then tier 1).
  const FramePlan past = make_plan(DType::bf16, FrameKind::coded, tail + 5000, s);
  REQUIRE(past.part[0].elems == 4096);
  REQUIRE(past.tier_part(0).elems == 0);
  REQUIRE(past.frame(0).item_elems == 2048);
  REQUIRE(past.frame(0).items == 2);
  REQUIRE(past.frame(1).item_elems == 2048);  // tier 1's first frame
  REQUIRE(past.frame(1).first_elem == 4096);
  // Between tail and tail + head: no body at all.
  const FramePlan mid = make_plan(DType::bf16, FrameKind::coded, tail + (uint64_t(2) << 20), s);
  REQUIRE(mid.part[0].elems == uint64_t(2) << 20);
  REQUIRE(mid.tier_part(0).elems == 0);
  // Head off: the plan is what it was (no head part, tier k in part k), whatever the head's other fields.
  PipelineShape off = s;
  off.head.region_elems = 0;
  const FramePlan q = make_plan(DType::bf16, FrameKind::coded, n, off);
  const FramePlan d = make_plan(DType::bf16, FrameKind::coded, n, PipelineShape());
  REQUIRE(q.head_parts == 0);
  REQUIRE(q.num_parts == 3);
  REQUIRE(q.num_frames == d.num_frames);
  for (uint32_t k = 0; k < 3; ++k) {
    REQUIRE(q.part[k].elems == d.part[k].elems);
    REQUIRE(q.part[k].frames == d.part[k].frames);
    REQUIRE(&q.tier_part(k) == &q.part[k]);
  }
  REQUIRE(slot_bytes_for(DType::bf16, off) == slot_bytes_for(DType::bf16, PipelineShape()));
  // A head whose frames are the largest sizes the slots.
  PipelineShape big = with_head(16384, 1024, 1);
  REQUIRE(slot_bytes_for(DType::bf16, big) > slot_bytes_for(DType::bf16, PipelineShape()));
  REQUIRE(largest_item_elems(with_head(4096, 8, 1)) == 16384);
  PipelineShape fine = with_head(4096, 8, 1);
  fine.num_tiers = 1;
  fine.tier[0].item_elems = 2048;
  REQUIRE(largest_item_elems(fine) == 4096);
  fine.head.region_elems = 0;
  REQUIRE(largest_item_elems(fine) == 2048);
}

TEST_CASE("p2p shape validity", "[p2p]") {
  PipelineShape s;
  REQUIRE(shape_valid(s));
  s.tier[1].item_elems = 300;  // not whole tiles
  REQUIRE_FALSE(shape_valid(s));
  s = PipelineShape();
  s.tier[0].item_elems = 32768;  // more than one v1 chunk
  REQUIRE_FALSE(shape_valid(s));
  s = PipelineShape();
  s.tier[2].frame_items = MAX_FRAME_ITEMS + 1;
  REQUIRE_FALSE(shape_valid(s));
  s = PipelineShape();
  s.num_tiers = 0;
  REQUIRE_FALSE(shape_valid(s));
  s.num_tiers = MAX_PIPELINE_TIERS + 1;
  REQUIRE_FALSE(shape_valid(s));
  // The head is checked only when it is on.
  s = PipelineShape();
  s.head = {300, 0, 0};
  REQUIRE(shape_valid(s));
  s.head = {300, 16, 1};  // not whole tiles
  REQUIRE_FALSE(shape_valid(s));
  s.head = {32768, 16, 1};  // more than one v1 chunk
  REQUIRE_FALSE(shape_valid(s));
  s.head = {2048, 0, 1};
  REQUIRE_FALSE(shape_valid(s));
  s.head = {2048, MAX_FRAME_ITEMS + 1, 1};
  REQUIRE_FALSE(shape_valid(s));
  s.head = {2048, MAX_FRAME_ITEMS, 1};
  REQUIRE(shape_valid(s));
}

TEST_CASE("p2p frame header: built, checked, and every field guarded", "[p2p]") {
  const PipelineShape s;
  const FramePlan p = make_plan(DType::bf16, FrameKind::coded, 5000000, s);
  const FrameInfo fi = p.frame(3);
  const uint32_t exps = uint32_t(FRAME_HEADER_BYTES + item_table_bytes(fi.items) + 4096);
  const FrameHeader h = make_frame_header(p, fi, CodeId::pair, 77, exps);
  REQUIRE(validate_frame_header(h, p, fi, CodeId::pair, 77) == Status::ok);
  REQUIRE(validate_frame_header(h, p, fi, CodeId::pair, 78) == Status::corrupt_stream);
  REQUIRE(validate_frame_header(h, p, fi, static_cast<CodeId>(2), 77) == Status::bad_header);  // another code
  // Any flipped bit in the covered bytes, or in the check itself, is caught.
  for (uint32_t bit = 0; bit < 64 * 8; ++bit) {
    FrameHeader x = h;
    reinterpret_cast<uint8_t*>(&x)[bit / 8] ^= uint8_t(1u << (bit % 8));
    CAPTURE(bit);
    REQUIRE(validate_frame_header(x, p, fi, CodeId::pair, 77) != Status::ok);
  }
  // A consistent header of another message size: size_mismatch.
  const FramePlan other = make_plan(DType::bf16, FrameKind::coded, 5000001, s);
  const FrameHeader ho = make_frame_header(other, other.frame(3), CodeId::pair, 77, exps);
  REQUIRE(validate_frame_header(ho, p, fi, CodeId::pair, 77) == Status::size_mismatch);
  // Section B lengths the frame cannot have.
  for (uint64_t bad : {uint64_t(0), uint64_t(FRAME_HEADER_BYTES), fi.exps_bound + 16, uint64_t(exps + 8)}) {
    const FrameHeader hb = make_frame_header(p, fi, CodeId::pair, 77, uint32_t(bad));
    CAPTURE(bad);
    REQUIRE(validate_frame_header(hb, p, fi, CodeId::pair, 77) == Status::corrupt_stream);
  }
  // Raw frames: section B is exactly header + table.
  const FramePlan r = make_plan(DType::bf16, FrameKind::raw, 5000000, s);
  const FrameInfo ri = r.frame(0);
  const uint32_t least = uint32_t(FRAME_HEADER_BYTES + item_table_bytes(ri.items));
  REQUIRE(validate_frame_header(make_frame_header(r, ri, CodeId::pair, 0, least), r, ri, CodeId::pair, 0) ==
          Status::ok);
  REQUIRE(validate_frame_header(make_frame_header(r, ri, CodeId::pair, 0, least + 16), r, ri, CodeId::pair,
                                0) == Status::corrupt_stream);
  REQUIRE(validate_frame_header(make_frame_header(r, ri, CodeId::pair, 0, least), p, ri, CodeId::pair, 0) ==
          Status::bad_header);  // raw frame where a coded one is expected
}

TEST_CASE("p2p item table checks", "[p2p]") {
  ZT_RNG("p2p table");
  const PipelineShape s;
  const FramePlan p = make_plan(DType::bf16, FrameKind::coded, 3 * 16384 * 10, s);
  const FrameInfo fi = p.frame(0);
  std::vector<uint8_t> table(item_table_bytes(fi.items), 0);
  uint32_t end = 0;
  for (uint32_t j = 0; j < fi.items; ++j) {
    end += 16 * uint32_t(1 + rng() % (format::raw_chunk_bytes(DType::bf16, fi.item_elems_at(j)) / 16));
    std::memcpy(&table[8 * j], &end, 4);
    const uint32_t check = uint32_t(rng());
    std::memcpy(&table[8 * j + 4], &check, 4);
  }
  const uint32_t exps = uint32_t(FRAME_HEADER_BYTES + table.size() + end);
  REQUIRE(validate_item_table(table.data(), fi, DType::bf16, FrameKind::coded, exps) == Status::ok);
  REQUIRE(validate_item_table(table.data(), fi, DType::bf16, FrameKind::coded, exps + 16) == Status::corrupt_stream);
  auto with = [&](uint32_t j, uint32_t v) {
    std::vector<uint8_t> t = table;
    std::memcpy(&t[8 * j], &v, 4);
    return validate_item_table(t.data(), fi, DType::bf16, FrameKind::coded, exps);
  };
  const uint32_t j = 1 + uint32_t(rng() % (fi.items - 2));
  REQUIRE(with(j, item_end(table.data(), j) + 8) == Status::corrupt_stream);       // unaligned
  REQUIRE(with(j, item_end(table.data(), j - 1) - 16) == Status::corrupt_stream);  // decreasing
  REQUIRE(with(0, 16384 + 16) == Status::corrupt_stream);                          // longer than raw
  REQUIRE(with(fi.items - 1, end - 16) == Status::corrupt_stream);                 // last must end the area
  if (fi.items % 2) {  // the table has padding: it must be zero
    std::vector<uint8_t> t = table;
    t.back() = 1;
    REQUIRE(validate_item_table(t.data(), fi, DType::bf16, FrameKind::coded, exps) == Status::corrupt_stream);
  }
}

TEST_CASE("p2p item table: each item's share of the check refuses exactly what the whole-table check refuses",
          "[p2p]") {
  // The receiver kernel checks the table per item (item_entry_share_valid, by the warp decoding the item); the
  // host reference checks it whole. Both must refuse the same tables: random cuts and kinds, tables intact and
  // damaged (entries moved by +-8/16 bytes, set to random values, swapped, padding set).
  ZT_RNG("p2p table shares");
  int refused = 0, accepted = 0;
  for (int round = 0; round < 4000; ++round) {
    PipelineShape s;
    s.tier[0] = {256u * (1u + uint32_t(rng() % 8)), 1u + uint32_t(rng() % 9), 0};
    s.num_tiers = 1;
    const FrameKind kind = rng() % 4 == 0 ? FrameKind::raw : FrameKind::coded;
    const DType dtype = zt::kArithmeticDTypes[rng() % 3];
    const FramePlan p = make_plan(dtype, kind, 1 + rng() % 40000, s);
    const FrameInfo fi = p.frame(rng() % p.num_frames);
    std::vector<uint8_t> table(item_table_bytes(fi.items), 0);
    uint32_t end = 0;
    for (uint32_t j = 0; j < fi.items; ++j) {
      if (kind == FrameKind::coded)
        end += 16 * uint32_t(1 + rng() % (format::raw_chunk_bytes(dtype, fi.item_elems_at(j)) / 16));
      std::memcpy(&table[8 * j], &end, 4);
    }
    uint32_t exps = uint32_t(FRAME_HEADER_BYTES + table.size() + end);
    const int damages = int(rng() % 3);
    for (int d = 0; d < damages; ++d) {
      const uint32_t j = uint32_t(rng() % fi.items);
      uint32_t v = item_end(table.data(), j);
      switch (rng() % 6) {
        case 0: v += 8; break;
        case 1: v -= 16; break;
        case 2: v += 16; break;
        case 3: v = uint32_t(rng()); break;
        case 4: v = item_end(table.data(), uint32_t(rng() % fi.items)); break;
        default:
          if (table.size() > 8 * size_t(fi.items)) table.back() = uint8_t(1 + rng() % 255);
          break;
      }
      std::memcpy(&table[8 * j], &v, 4);
    }
    if (rng() % 8 == 0 && kind == FrameKind::coded) exps += 16;  // section B longer than the chunks
    bool shares = true;
    for (uint32_t j = 0; j < fi.items; ++j)
      shares = shares && item_entry_share_valid(table.data(), fi, dtype, kind, exps, j);
    const bool whole = validate_item_table(table.data(), fi, dtype, kind, exps) == Status::ok;
    REQUIRE(shares == whole);
    (whole ? accepted : refused)++;
  }
  REQUIRE(accepted > 100);  // both outcomes were exercised
  REQUIRE(refused > 100);
}

TEST_CASE("p2p sequence flags and credits", "[p2p]") {
  REQUIRE(slot_of(0, 8) == 0);
  REQUIRE(slot_of(13, 8) == 5);
  REQUIRE(flag_value(5) == 6);
  // ready: exactly q + 1; older values wait, newer ones mean the peers lost step.
  REQUIRE(ready_state(0, 0) == FlagState::waiting);
  REQUIRE(ready_state(1, 0) == FlagState::ready);
  REQUIRE(ready_state(2, 0) == FlagState::broken);
  REQUIRE(ready_state(9, 16) == FlagState::waiting);  // slot still holds frame q - S
  REQUIRE(ready_state(17, 16) == FlagState::ready);
  // credits: the first S frames need none; frame q needs the credit of frame q - S.
  const uint32_t S = 4;
  for (uint64_t q = 0; q < S; ++q) {
    REQUIRE(credit_state(0, q, S) == FlagState::ready);
    REQUIRE(credit_state(1, q, S) == FlagState::broken);
  }
  REQUIRE(credit_state(0, 4, S) == FlagState::waiting);
  REQUIRE(credit_state(1, 4, S) == FlagState::ready);    // frame 0 consumed: slot 0 free for frame 4
  REQUIRE(credit_state(5, 4, S) == FlagState::broken);   // frame 4 consumed before it was sent
  REQUIRE(credit_state(1, 8, S) == FlagState::waiting);  // frame 4 not consumed yet
  REQUIRE(credit_state(5, 8, S) == FlagState::ready);
}

TEST_CASE("p2p bypass threshold from measurements", "[p2p]") {
  const uint64_t sizes[] = {1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20};
  const double raw[] = {10, 12, 16, 24, 40};
  {
    const double coded[] = {20, 20, 15.6, 20, 30};  // wins from 256 KiB on (by >= 2%)
    REQUIRE(choose_bypass_threshold(sizes, coded, raw, 5, 0.02) == (1 << 18));
    REQUIRE(choose_bypass_threshold(sizes, coded, raw, 5, 0.03) == (1 << 19));  // 15.6 is not 3% below 16
  }
  {
    const double coded[] = {9, 20, 10, 20, 30};  // an early win does not count if a larger size loses
    REQUIRE(choose_bypass_threshold(sizes, coded, raw, 5, 0.02) == (1 << 18));
  }
  {
    const double coded[] = {5, 5, 5, 5, 50};  // loses at the largest size: never code
    REQUIRE(choose_bypass_threshold(sizes, coded, raw, 5, 0.02) == UINT64_MAX);
  }
  {
    const double coded[] = {5, 5, 5, 5, 5};  // wins everywhere: code from the smallest measured size
    REQUIRE(choose_bypass_threshold(sizes, coded, raw, 5, 0.02) == (1 << 16));
  }
  REQUIRE(use_bypass(1000, 1024));
  REQUIRE_FALSE(use_bypass(1024, 1024));
  REQUIRE_FALSE(use_bypass(1 << 30, 0));
  REQUIRE(use_bypass(1 << 30, UINT64_MAX));
}

TEST_CASE("p2p item check: the item's chunk check, changed by any changed element", "[p2p]") {
  ZT_RNG("p2p check");
  zt::Tensor t = zt::gaussian(DType::bf16, 4096, rng);
  const uint32_t c0 = host_item_check(DType::bf16, t.bytes.data(), 4096);
  std::vector<uint32_t> bits(4096);
  for (uint32_t k = 0; k < 4096; ++k) bits[k] = t.get(k);
  REQUIRE(c0 == thread::chunk_check<DType::bf16>(bits.data(), 4096));
  // Swapping two different elements changes the check too (it depends on positions).
  uint32_t i = uint32_t(rng() % 4096), j = 0;
  while (t.get(i) == t.get(j)) ++j;
  const uint32_t vi = t.get(i);
  t.set(i, t.get(j));
  t.set(j, vi);
  REQUIRE(host_item_check(DType::bf16, t.bytes.data(), 4096) != c0);
}

TEST_CASE("p2p reference frames: round trips of every dtype, kind and cut", "[p2p]") {
  ZT_RNG("p2p reference round trip");
  PipelineShape flat;  // small tiers so that short messages still span several frames of every tier
  flat.tier[0] = {16384, 3, 0};
  flat.tier[1] = {2048, 5, 20000};
  flat.tier[2] = {256, 7, 3000};
  PipelineShape sh = flat;  // and a head of 4096-element items over the first 30000 elements
  sh.head = {4096, 2, 30000};
  for (const PipelineShape& s : {flat, sh})
    for (DType d : zt::kArithmeticDTypes) {
      for (uint64_t n :
           {uint64_t(1), uint64_t(300), uint64_t(4097), uint64_t(70000), uint64_t(3 * 16384 * 2 + 25001)}) {
        const zt::Tensor t = rng() % 4 ? zt::gaussian(d, n, rng) : zt::random_bits(d, n, rng);
        for (FrameKind kind : {FrameKind::coded, FrameKind::raw}) {
          CAPTURE(dtype_name(d), n, int(kind));
          const FramePlan p = make_plan(d, kind, n, s);
          std::vector<uint8_t> back(t.bytes.size(), 0xEE), frame;
          uint64_t wire = 0;
          for (uint64_t f = 0; f < p.num_frames; ++f) {
            const FrameInfo fi = p.frame(f);
            REQUIRE(host_encode_frame(p, fi, CodeId::pair, 1000 + f, t.bytes.data(), frame) == Status::ok);
            REQUIRE(frame.size() <= fi.planes_bytes + fi.exps_bound);
            wire += frame.size();
            REQUIRE(host_decode_frame(p, fi, CodeId::pair, 1000 + f, frame.data(), frame.size(), back.data()) ==
                    Status::ok);
            // Decoding against the wrong sequence number or cut is refused.
            REQUIRE(host_decode_frame(p, fi, CodeId::pair, 999 + f, frame.data(), frame.size(), back.data()) ==
                    Status::corrupt_stream);
            REQUIRE(host_decode_frame(p, fi, CodeId::pair, 1000 + f, frame.data(), frame.size() - 16,
                                      back.data()) == Status::corrupt_stream);
          }
          REQUIRE(back == t.bytes);
          if (kind == FrameKind::raw) REQUIRE(wire >= t.bytes.size());
        }
      }
    }
}

TEST_CASE("p2p reference frames: real bf16 gradients compress, and a damaged frame never decodes silently", "[p2p]") {
  ZT_RNG("p2p reference corruption");
  const std::vector<uint8_t> raw = read_data("llama_grads.bf16");
  const uint64_t n = raw.size() / 2;
  PipelineShape s;  // the default tiers scaled to this short cut: every tier is used
  s.tier[1].region_elems = 16384;
  s.tier[2].region_elems = 2048;
  const FramePlan p = make_plan(DType::bf16, FrameKind::coded, n, s);
  REQUIRE(p.part[0].items > 0);
  REQUIRE(p.part[2].items > 0);
  uint64_t wire = 0;
  std::vector<uint8_t> back(raw.size()), frame;
  for (uint64_t f = 0; f < p.num_frames; ++f) {
    const FrameInfo fi = p.frame(f);
    REQUIRE(host_encode_frame(p, fi, CodeId::pair, f, raw.data(), frame) == Status::ok);
    wire += frame.size();
    REQUIRE(host_decode_frame(p, fi, CodeId::pair, f, frame.data(), frame.size(), back.data()) == Status::ok);
  }
  REQUIRE(back == raw);
  const double ratio = double(wire) / double(raw.size());
  CAPTURE(ratio);
  // One v1 stream of the whole cut: 0.671. Short items cost more (half of this cut is in 2048-element items,
  // where each lane's partly filled last word weighs ~2%), which is why only a message's end is cut finer.
  REQUIRE(ratio < 0.69);

  // Flip one random bit anywhere in a frame (planes, header, table, chunks): the frame must be refused, or, if
  // the flip landed on bytes no reader uses (padding inside a chunk word area is checked; plane padding is
  // not), decode to exactly the original elements.
  const FrameInfo fi = p.frame(0);
  REQUIRE(host_encode_frame(p, fi, CodeId::pair, 0, raw.data(), frame) == Status::ok);
  int refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<uint8_t> bad = frame;
    const uint64_t at = rng() % bad.size();
    bad[at] ^= uint8_t(1u << (rng() % 8));
    std::vector<uint8_t> out(raw.size(), 0);
    const Status st = host_decode_frame(p, fi, CodeId::pair, 0, bad.data(), bad.size(), out.data());
    CAPTURE(trial, at);
    if (st != Status::ok) {
      ++refused;
    } else {
      const uint32_t eb = 2;
      REQUIRE(std::equal(out.begin() + fi.first_elem * eb, out.begin() + (fi.first_elem + fi.elems) * eb,
                         raw.begin() + fi.first_elem * eb));
    }
  }
  REQUIRE(refused > 350);
}

// ---- the ring protocol, interleaved ------------------------------------------------------------------------
// A sender and a receiver as step machines over a slot ring in plain memory, run under a random scheduler:
// the same flag and credit rules as the kernels (one frame in flight per step machine; the kernels run many
// items at once, but the slot hand-over rules are the same). A rule too lax would let the sender overwrite a
// frame the receiver has not read yet, and the round trip would fail.
namespace {

struct SimRing {
  uint32_t slots;
  uint64_t slot_bytes;
  std::vector<uint8_t> data;
  std::vector<uint64_t> ready_planes, ready_exps, credits;
  SimRing(uint32_t s, uint64_t b)
      : slots(s), slot_bytes(b), data(size_t(s) * b), ready_planes(s), ready_exps(s), credits(s) {}
  uint8_t* slot(uint32_t k) { return data.data() + size_t(k) * slot_bytes; }
};

struct SimSender {
  SimSender(const FramePlan* p, const uint8_t* m, uint64_t base) : plan(p), message(m), seq_base(base) {}
  const FramePlan* plan;
  const uint8_t* message;
  uint64_t seq_base, f = 0;
  int phase = 0;  // 0: wait credit, 1: planes written, 2: section B written
  std::vector<uint8_t> frame;
  Status status = Status::ok;
  bool done() const { return f >= plan->num_frames || status != Status::ok; }
  bool step(SimRing& r) {  // false: blocked
    if (done()) return false;
    const uint64_t q = seq_base + f;
    const uint32_t s = slot_of(q, r.slots);
    const FrameInfo fi = plan->frame(f);
    if (phase == 0) {
      const FlagState c = credit_state(r.credits[s], q, r.slots);
      if (c == FlagState::broken) status = Status::corrupt_stream;
      if (c != FlagState::ready) return c == FlagState::broken;
      REQUIRE(host_encode_frame(*plan, fi, CodeId::pair, q, message, frame) == Status::ok);
      std::memcpy(r.slot(s), frame.data(), fi.planes_bytes);  // split-send: planes first
      r.ready_planes[s] = flag_value(q);
      phase = 1;
    } else if (phase == 1) {
      std::memcpy(r.slot(s) + fi.planes_bytes, frame.data() + fi.planes_bytes, frame.size() - fi.planes_bytes);
      r.ready_exps[s] = flag_value(q);
      phase = 0;
      ++f;
    }
    return true;
  }
};

struct SimReceiver {
  SimReceiver(const FramePlan* p, uint8_t* o, uint64_t base) : plan(p), out(o), seq_base(base) {}
  const FramePlan* plan;
  uint8_t* out;
  uint64_t seq_base, f = 0;
  int phase = 0;  // 0: wait planes, 1: planes copied, wait section B
  std::vector<uint8_t> staging;
  Status status = Status::ok;
  bool done() const { return f >= plan->num_frames || status != Status::ok; }
  bool step(SimRing& r) {
    if (done()) return false;
    const uint64_t q = seq_base + f;
    const uint32_t s = slot_of(q, r.slots);
    const FrameInfo fi = plan->frame(f);
    const FlagState st = ready_state(phase == 0 ? r.ready_planes[s] : r.ready_exps[s], q);
    if (st == FlagState::broken) status = Status::corrupt_stream;
    if (st != FlagState::ready) return st == FlagState::broken;
    if (phase == 0) {
      staging.assign(r.slot(s), r.slot(s) + fi.planes_bytes);
      phase = 1;
      return true;
    }
    staging.insert(staging.end(), r.slot(s) + fi.planes_bytes, r.slot(s) + r.slot_bytes);
    status = host_decode_frame(*plan, fi, CodeId::pair, q, staging.data(), staging.size(), out);
    r.credits[s] = flag_value(q);  // only after the frame was read in full
    phase = 0;
    ++f;
    return true;
  }
};

/// Runs both under a random scheduler; `idle_limit` steps without progress on either side = timeout.
void run_sim(SimRing& r, SimSender* tx, SimReceiver* rx, std::mt19937_64& rng, int idle_limit = 1000) {
  int idle = 0;
  while ((tx && !tx->done()) || (rx && !rx->done())) {
    const bool pick_tx = tx && (!rx || rng() % 2);
    const bool moved = pick_tx ? tx->step(r) : rx->step(r);
    idle = moved ? 0 : idle + 1;
    if (idle > idle_limit) {
      if (tx && !tx->done()) tx->status = Status::timeout;
      if (rx && !rx->done()) rx->status = Status::timeout;
      return;
    }
  }
}

}  // namespace

TEST_CASE("p2p ring protocol: randomized interleavings deliver every message intact", "[p2p]") {
  ZT_RNG("p2p ring sim");
  PipelineShape plain;
  plain.tier[0] = {16384, 2, 0};
  plain.tier[1] = {2048, 3, 9000};
  plain.tier[2] = {256, 4, 1500};
  PipelineShape head = plain;  // with a head of its own item size
  head.head = {1024, 3, 20000};
  PipelineShape shared = plain;  // with a head of tier 1's item size, frames larger than the body's
  shared.head = {2048, 9, 40000};
  for (const PipelineShape& s : {plain, head, shared})
    for (uint32_t slots : {1u, 2u, 3u, 5u}) {
      SimRing ring(slots, slot_bytes_for(DType::bf16, s));
      uint64_t seq = 0;
      for (int message = 0; message < 4; ++message) {  // sequence numbers run on across messages
        const uint64_t n = 1 + rng() % 150000;
        CAPTURE(s.head.region_elems, s.head.item_elems, slots, message, n);
        const zt::Tensor t = zt::gaussian(DType::bf16, n, rng);
        const FramePlan p = make_plan(DType::bf16, FrameKind::coded, n, s);
        std::vector<uint8_t> out(t.bytes.size(), 0);
        SimSender tx(&p, t.bytes.data(), seq);
        SimReceiver rx(&p, out.data(), seq);
        run_sim(ring, &tx, &rx, rng);
        REQUIRE(tx.status == Status::ok);
        REQUIRE(rx.status == Status::ok);
        REQUIRE(out == t.bytes);
        seq += p.num_frames;
      }
    }
}

TEST_CASE("p2p ring protocol: a silent peer times out, a size disagreement is reported", "[p2p]") {
  ZT_RNG("p2p ring sim errors");
  PipelineShape s;
  s.tier[0] = {16384, 2, 0};
  s.num_tiers = 1;
  const zt::Tensor t = zt::gaussian(DType::bf16, 200000, rng);
  const FramePlan p = make_plan(DType::bf16, FrameKind::coded, t.n, s);
  std::vector<uint8_t> out(t.bytes.size());
  {  // receiver alone: waits, then times out
    SimRing ring(4, slot_bytes_for(DType::bf16, s));
    SimReceiver rx(&p, out.data(), 0);
    run_sim(ring, nullptr, &rx, rng);
    REQUIRE(rx.status == Status::timeout);
  }
  {  // sender alone: fills the ring, then times out waiting for credits
    SimRing ring(4, slot_bytes_for(DType::bf16, s));
    SimSender tx(&p, t.bytes.data(), 0);
    run_sim(ring, &tx, nullptr, rng);
    REQUIRE(tx.status == Status::timeout);
    REQUIRE(tx.f == 4);
  }
  {  // receiver expects another message size: its first frame is refused as a size mismatch
    SimRing ring(4, slot_bytes_for(DType::bf16, s));
    const FramePlan other = make_plan(DType::bf16, FrameKind::coded, t.n + 100, s);
    SimSender tx(&p, t.bytes.data(), 0);
    SimReceiver rx(&other, out.data(), 0);
    std::vector<uint8_t> big(t.bytes.size() + 200);
    rx.out = big.data();
    run_sim(ring, &tx, &rx, rng);
    REQUIRE(rx.status == Status::size_mismatch);
  }
  {  // peers out of step (receiver starts at another sequence number)
    SimRing ring(4, slot_bytes_for(DType::bf16, s));
    SimSender tx(&p, t.bytes.data(), 4);
    SimReceiver rx(&p, out.data(), 0);
    run_sim(ring, &tx, &rx, rng);
    REQUIRE(rx.status != Status::ok);
  }
}

TEST_CASE("p2p stream-mode section-B budget: fixed-size part per tier, adapted from the ring's last frames",
          "[p2p][protocol]") {
  PipelineShape shape;
  shape.tier[0] = {16384, 8, 0};
  shape.tier[1] = {2048, 16, 65536};
  shape.tier[2] = {256, 32, 4096};
  const uint32_t S = 4;
  const uint64_t n = uint64_t(4) << 20;
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  REQUIRE(plan.num_frames > S);
  ExpsBudget b;
  for (uint32_t k = 0; k < 3; ++k) b.item_elems[k] = shape.tier[k].item_elems, b.per_kelem[k] = 1013;
  // The budget never exceeds a frame's bound and always holds header and table.
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint64_t bytes = exps_budget_bytes(fi, b);
    REQUIRE(bytes <= fi.exps_bound);
    REQUIRE(bytes >= FRAME_HEADER_BYTES + item_table_bytes(fi.items));
    REQUIRE(bytes % 16 == 0);
  }
  // What frames needed: 0.35 bytes per element in tier 0, 0.40 in tier 1, 2.1 (raw chunks) in tier 2; each
  // frame's need, maximized per tier as the sender does.
  const double per_elem[3] = {0.35, 0.40, 2.1};
  uint32_t need[MAX_PIPELINE_TIERS] = {};
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint32_t k = b.tier_of(fi.item_elems);
    const uint64_t len = FRAME_HEADER_BYTES + item_table_bytes(fi.items) + uint64_t(per_elem[k] * double(fi.elems));
    need[k] = std::max(need[k], exps_need_per_kelem(fi, len));
    // A budget sized from this need holds the frame's section B whole.
    REQUIRE(exps_need_per_kelem(fi, FRAME_HEADER_BYTES + item_table_bytes(fi.items)) == 0);
  }
  const ExpsBudget a = adapt_exps_budget(b, need);
  for (uint32_t k = 0; k < 3; ++k) {
    CAPTURE(k, a.per_kelem[k]);
    const double want = per_elem[k] * 1024;
    REQUIRE(a.per_kelem[k] >= want);
    REQUIRE(a.per_kelem[k] <= want * 1.03 + 6);
  }
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint32_t k = b.tier_of(fi.item_elems);
    const uint64_t len = FRAME_HEADER_BYTES + item_table_bytes(fi.items) + uint64_t(per_elem[k] * double(fi.elems));
    REQUIRE(exps_budget_bytes(fi, a) >= std::min<uint64_t>(len, fi.exps_bound));
  }
  // Tiers without frames keep their budget.
  const uint32_t none[MAX_PIPELINE_TIERS] = {};
  const ExpsBudget same = adapt_exps_budget(b, none);
  for (uint32_t k = 0; k < 3; ++k) REQUIRE(same.per_kelem[k] == b.per_kelem[k]);
}

TEST_CASE("p2p stream-mode section-B budget with a head: its own class, or a tier's of the same item size",
          "[p2p][protocol]") {
  PipelineShape shape;
  shape.tier[0] = {16384, 8, 0};
  shape.tier[1] = {2048, 16, 65536};
  shape.tier[2] = {256, 32, 4096};
  // Head off: the classes are the tiers, as before.
  const ExpsBudget plain = make_exps_budget(shape, 410);
  for (uint32_t k = 0; k < 3; ++k) {
    REQUIRE(plain.item_elems[k] == shape.tier[k].item_elems);
    REQUIRE(plain.per_kelem[k] == 410);
  }
  REQUIRE(plain.item_elems[3] == 0);
  // A head of tier 1's item size shares tier 1's class.
  shape.head = {2048, 8, 100000};
  const ExpsBudget shared = make_exps_budget(shape, 410);
  REQUIRE(shared.item_elems[3] == 0);
  REQUIRE(shared.tier_of(2048) == 1);
  // A head of another item size gets the next class.
  shape.head = {4096, 8, 100000};
  const ExpsBudget b = make_exps_budget(shape, 410);
  REQUIRE(b.item_elems[3] == 4096);
  REQUIRE(b.tier_of(4096) == 3);
  REQUIRE(b.tier_of(16384) == 0);
  REQUIRE(b.tier_of(256) == 2);
  // With one tier the head's class is 1.
  PipelineShape one = shape;
  one.num_tiers = 1;
  REQUIRE(make_exps_budget(one, 7).tier_of(4096) == 1);
  REQUIRE(make_exps_budget(one, 7).per_kelem[1] == 7);

  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, uint64_t(1) << 20, shape);
  REQUIRE(plan.part[0].frames > 1);
  // Needs per class, maximized as the sender does; the head's class adapts on its own.
  const double per_elem[4] = {0.35, 0.40, 2.1, 0.5};
  uint32_t need[EXPS_BUDGET_CLASSES] = {};
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint32_t k = b.tier_of(fi.item_elems);
    REQUIRE(b.item_elems[k] == fi.item_elems);  // every frame has its class
    const uint64_t len = FRAME_HEADER_BYTES + item_table_bytes(fi.items) + uint64_t(per_elem[k] * double(fi.elems));
    need[k] = std::max(need[k], exps_need_per_kelem(fi, len));
    REQUIRE(exps_budget_bytes(fi, b) <= fi.exps_bound);
  }
  const ExpsBudget a = adapt_exps_budget(b, need);
  for (uint32_t k = 0; k < 4; ++k) {
    CAPTURE(k, a.per_kelem[k]);
    REQUIRE(a.per_kelem[k] >= per_elem[k] * 1024);
    REQUIRE(a.per_kelem[k] <= per_elem[k] * 1024 * 1.03 + 6);
  }
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint32_t k = b.tier_of(fi.item_elems);
    const uint64_t len = FRAME_HEADER_BYTES + item_table_bytes(fi.items) + uint64_t(per_elem[k] * double(fi.elems));
    REQUIRE(exps_budget_bytes(fi, a) >= std::min<uint64_t>(len, fi.exps_bound));
  }
  // A need array of the tiers only (the old size) leaves the head's class as it was.
  const uint32_t tiers_only[MAX_PIPELINE_TIERS] = {100, 100, 100};
  const ExpsBudget c = adapt_exps_budget(b, tiers_only);
  REQUIRE(c.per_kelem[3] == 410);
  REQUIRE(c.per_kelem[0] == 101);  // the default margin: 0.5% (rounded down) + 1
  // The margin is the caller's (P2POptions): none gives exactly the need, 5 per mille + 1 rounds down.
  const ExpsBudget exact = adapt_exps_budget(b, tiers_only, 0, 0);
  REQUIRE(exact.per_kelem[0] == 100);
  REQUIRE(exact.per_kelem[3] == 410);
  const uint32_t big[1] = {355};
  REQUIRE(adapt_exps_budget(b, big, 5, 1).per_kelem[0] == 355 + 1 + 1);
  REQUIRE(adapt_exps_budget(b, big, 20, 4).per_kelem[0] == 355 + 7 + 4);
  // Even with no margin, every frame whose need was counted fits its budget.
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint32_t k = b.tier_of(fi.item_elems);
    const uint64_t len = FRAME_HEADER_BYTES + item_table_bytes(fi.items) + uint64_t(per_elem[k] * double(fi.elems));
    REQUIRE(exps_budget_bytes(fi, adapt_exps_budget(b, need, 0, 0)) >= std::min<uint64_t>(len, fi.exps_bound));
  }
}
