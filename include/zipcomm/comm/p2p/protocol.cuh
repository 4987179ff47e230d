// P2P pipeline protocol: how a message is cut into frames and items, the frame layout on the wire, and the
// sequence-flag rules of the slot ring (docs/P2P.md is the description). Plain C++17, no CUDA needed: the
// host tests, a host-side peer and the device kernels all call these functions, so they agree by construction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"

namespace zipcomm {
namespace comm {

constexpr uint32_t FRAME_MAGIC = 0x4650435Au;  // bytes "ZCPF"
constexpr uint8_t FRAME_VERSION = 2;  // v2: item checks are the codec's chunk checks (thread::ChunkCheck)
constexpr uint32_t FRAME_HEADER_BYTES = 64;
constexpr uint32_t MAX_FRAME_ITEMS = 1024;  // bounds the item table and the sender's look-back window
constexpr int MAX_PIPELINE_TIERS = 3;
constexpr int MAX_PLAN_PARTS = MAX_PIPELINE_TIERS + 1;  // the optional head, then the tiers
constexpr int EXPS_BUDGET_CLASSES = MAX_PLAN_PARTS;     // section-B budgets: one per distinct item size

/// What a frame carries: coded items (planes raw, exponents coded) or the elements' bytes as they are.
enum class FrameKind : uint8_t { coded = 1, raw = 2 };

/// One tier of the cut: items of `item_elems` elements (one warp codes one item: one chunk stream),
/// grouped `frame_items` to a frame (the unit of the ring: one slot, one pair of sequence flags).
/// PipelineTier 0 takes the body of the message; tiers 1.. take the last `region_elems` elements, in order, so the
/// end of a message is cut finer: small items decode fast, which keeps the pipeline's drain short.
/// The optional head (PipelineShape::head) takes the first `region_elems` elements: small items there are coded
/// fast, so the first frames are published early, which keeps the pipeline's fill short.
struct PipelineTier {
  uint32_t item_elems;
  uint32_t frame_items;
  uint64_t region_elems;  // ignored for tier 0; for the head, 0 = no head
};

/// How messages are cut. The defaults measured fastest over the H200's pinned-host link (bench_p2p --sweep, ms at
/// 64 / 256 MiB of bf16 gradients; docs/DECISIONS.md has the alternatives; docs/P2P.md section 1 the design).
/// In message order the parts are [head][tier 0: body][tier 1]..[tier num_tiers - 1]. Regions are served from
/// the end first: the tiers 1.. (last tier first), then the head from what is left, then the body gets the rest;
/// so a message no longer than the tail regions has no head, and one no longer than tail + head has no body.
struct PipelineShape {
  PipelineTier tier[MAX_PIPELINE_TIERS] = {
      {16384, 512, 0},                    // 16 MiB frames of bf16: 1.286 / 4.176, 256 items 1.272 / 4.378
      {2048, 512, uint64_t(4) << 20},     // the last 8 MiB of bf16: over 4 MiB 3% slower, 12 MiB no faster
      {512, 512, uint64_t(256) << 10}};   // one item per receiver warp: as fast as 1024 x 256, a better ratio
  uint32_t num_tiers = 3;
  /// The head: off by default (region_elems 0: every head tried was 1-14% slower at 64 MiB); set
  /// head.region_elems to cut a message's start finer. Its item and frame sizes are only looked at (and checked)
  /// when it is on.
  PipelineTier head = {2048, 128, 0};

  ZIPCOMM_HOST_DEVICE bool has_head() const { return head.region_elems != 0; }
};

namespace p2p_detail {
ZIPCOMM_HOST_DEVICE bool tier_valid(const PipelineTier& t) {
  if (t.item_elems == 0 || t.item_elems % format::TILE_ELEMS || t.item_elems > uint32_t(format::MAX_CHUNK_ELEMS))
    return false;
  return t.frame_items != 0 && t.frame_items <= MAX_FRAME_ITEMS;
}
}  // namespace p2p_detail

/// Item sizes are whole tiles (so every item but a message's last starts 16-byte aligned) and at most
/// one chunk; frames hold 1..MAX_FRAME_ITEMS items. The head is checked only when it is on.
ZIPCOMM_HOST_DEVICE bool shape_valid(const PipelineShape& s) {
  if (s.num_tiers < 1 || s.num_tiers > uint32_t(MAX_PIPELINE_TIERS)) return false;
  for (uint32_t k = 0; k < s.num_tiers; ++k)
    if (!p2p_detail::tier_valid(s.tier[k])) return false;
  return !s.has_head() || p2p_detail::tier_valid(s.head);
}

/// The largest item a shape cuts (what a per-warp scratch must hold).
ZIPCOMM_HOST_DEVICE uint32_t largest_item_elems(const PipelineShape& s) {
  uint32_t most = s.has_head() ? s.head.item_elems : 0u;
  for (uint32_t k = 0; k < s.num_tiers && k < uint32_t(MAX_PIPELINE_TIERS); ++k)
    most = s.tier[k].item_elems > most ? s.tier[k].item_elems : most;
  return most;
}

/// Bytes of one item's planes section: the bytes [64, table_offset) of an item of `elems` as a one-chunk stream
/// (plane 0, the width codes: all full), then its low section at full width.
ZIPCOMM_HOST_DEVICE uint64_t item_plane_bytes(DType d, uint64_t elems) {
  const format::Layout L = format::layout_for(d, elems, format::MAX_CHUNK_LOG2);
  return L.table_offset - format::HEADER_BYTES + L.low_max_bytes;
}
/// Item table: per item {u32 end offset of its chunk stream (coded frames; 0 in raw ones), u32 check: the
/// item's elements' thread::chunk_check, as a one-chunk stream stores it}.
constexpr uint32_t ITEM_ENTRY_BYTES = 8;
ZIPCOMM_HOST_DEVICE uint64_t item_table_bytes(uint32_t items) {
  return format::align_up(uint64_t(ITEM_ENTRY_BYTES) * items, format::ALIGN);
}

/// Where one frame sits in the message and how it is laid out.
/// Frame bytes: [planes section: P bytes][frame header: 64][item table][item chunk streams (coded)]. The planes
/// section depends only on the frame's element counts, so a sender ships it as soon as it is split and a
/// receiver places it before any exponent arrives (split-send); section B (header onwards) follows.
struct FrameInfo {
  uint64_t index;         // frame index within the message
  uint64_t first_elem;    // first element of the frame in the message
  uint64_t elems;         // elements in the frame
  uint64_t first_item;    // global index (within the message) of the frame's first item
  uint32_t items;         // items in the frame
  uint32_t item_elems;    // elements per item (the last item of the message may be shorter)
  uint64_t planes_bytes;  // P: planes section (coded) or the raw bytes, 16-byte padded (raw)
  uint64_t exps_bound;    // largest section B (header + table + chunks)

  ZIPCOMM_HOST_DEVICE uint32_t item_elems_at(uint32_t j) const {
    const uint64_t first = uint64_t(j) * item_elems;
    const uint64_t left = elems > first ? elems - first : 0;
    return uint32_t(left < item_elems ? left : item_elems);
  }
};

/// The cut of one message of n elements: parts in message order, part[head_parts + k] = tier k, part[0] = the
/// head when the shape has one (head_parts = 1). Parts can be empty (0 elements, items and frames).
struct FramePlan {
  struct Part {
    uint64_t first_elem, elems;
    uint64_t first_item, items;
    uint64_t first_frame, frames;
    uint32_t item_elems, frame_items;
  };
  DType dtype = DType::bf16;
  FrameKind kind = FrameKind::coded;
  uint64_t n = 0;
  uint32_t num_parts = 0;
  uint32_t head_parts = 0;  // 1: part[0] is the head
  Part part[MAX_PLAN_PARTS] = {};
  uint64_t num_items = 0, num_frames = 0;

  /// Part of tier k (k < the shape's num_tiers).
  ZIPCOMM_HOST_DEVICE const Part& tier_part(uint32_t k) const { return part[head_parts + k]; }

  /// Frame f (f < num_frames).
  ZIPCOMM_HOST_DEVICE FrameInfo frame(uint64_t f) const {
    uint32_t k = 0;
    while (k + 1 < num_parts && f >= part[k].first_frame + part[k].frames) ++k;
    const Part& p = part[k];
    const uint64_t local = f - p.first_frame;
    const uint64_t item_in_part = local * p.frame_items;
    const uint64_t left_items = p.items - item_in_part;
    FrameInfo fi{};
    fi.index = f;
    fi.items = uint32_t(left_items < p.frame_items ? left_items : p.frame_items);
    fi.item_elems = p.item_elems;
    fi.first_item = p.first_item + item_in_part;
    fi.first_elem = p.first_elem + item_in_part * p.item_elems;
    const uint64_t left_elems = p.first_elem + p.elems - fi.first_elem;
    const uint64_t full = uint64_t(fi.items) * p.item_elems;
    fi.elems = left_elems < full ? left_elems : full;
    const uint32_t eb = format::elem_bytes(dtype);
    if (kind == FrameKind::raw) {
      fi.planes_bytes = format::align_up(fi.elems * eb, format::ALIGN);
      fi.exps_bound = FRAME_HEADER_BYTES + item_table_bytes(fi.items);
    } else {
      const uint32_t last = fi.item_elems_at(fi.items - 1);
      fi.planes_bytes = uint64_t(fi.items - 1) * item_plane_bytes(dtype, p.item_elems) + item_plane_bytes(dtype, last);
      fi.exps_bound = FRAME_HEADER_BYTES + item_table_bytes(fi.items) +
                      uint64_t(fi.items - 1) * format::raw_chunk_bytes(dtype, p.item_elems) +
                      format::raw_chunk_bytes(dtype, last);
    }
    return fi;
  }

  /// Frame of global item g (g < num_items), and the item's index inside it.
  ZIPCOMM_HOST_DEVICE uint64_t frame_of_item(uint64_t g, uint32_t& index_in_frame) const {
    uint32_t k = 0;
    while (k + 1 < num_parts && g >= part[k].first_item + part[k].items) ++k;
    const Part& p = part[k];
    const uint64_t local = g - p.first_item;
    index_in_frame = uint32_t(local % p.frame_items);
    return p.first_frame + local / p.frame_items;
  }
};

/// Cuts n elements by `shape`. Parts in message order: [head][tier 0 = body][tier 1]..; the tail regions are
/// served first (last tier first), then the head from what is left, then the body takes the rest (see
/// PipelineShape). Every part but the last is a whole number of its items (a part's remainder moves on to the
/// next part), so every item starts on a tile and only the message's final item can be short.
ZIPCOMM_HOST_DEVICE FramePlan make_plan(DType dtype, FrameKind kind, uint64_t n, const PipelineShape& shape) {
  FramePlan plan;
  plan.dtype = dtype;
  plan.kind = kind;
  plan.n = n;
  const uint32_t h = shape.has_head() ? 1u : 0u;
  plan.head_parts = h;
  plan.num_parts = h + shape.num_tiers;
  uint64_t want[MAX_PLAN_PARTS] = {};
  PipelineTier cut[MAX_PLAN_PARTS] = {};
  uint64_t rest = n;
  for (uint32_t k = shape.num_tiers - 1; k >= 1; --k) {
    want[h + k] = rest < shape.tier[k].region_elems ? rest : shape.tier[k].region_elems;
    rest -= want[h + k];
  }
  if (h) {
    want[0] = rest < shape.head.region_elems ? rest : shape.head.region_elems;
    rest -= want[0];
    cut[0] = shape.head;
  }
  want[h] = rest;
  for (uint32_t k = 0; k < shape.num_tiers; ++k) cut[h + k] = shape.tier[k];
  uint64_t carry = 0, elem = 0, item = 0, frame = 0;
  for (uint32_t k = 0; k < plan.num_parts; ++k) {
    const PipelineTier& t = cut[k];
    uint64_t e = want[k] + carry;
    carry = 0;
    if (k + 1 < plan.num_parts) {  // whole items only; the remainder moves on to the next part
      carry = e % t.item_elems;
      e -= carry;
    }
    FramePlan::Part& p = plan.part[k];
    p.first_elem = elem;
    p.elems = e;
    p.first_item = item;
    p.items = format::div_up(e, t.item_elems);
    p.first_frame = frame;
    p.frames = format::div_up(p.items, t.frame_items);
    p.item_elems = t.item_elems;
    p.frame_items = t.frame_items;
    elem += e;
    item += p.items;
    frame += p.frames;
  }
  plan.num_items = item;
  plan.num_frames = frame;
  return plan;
}

/// Bytes one ring slot needs to hold any frame a plan with this shape can produce (coded or raw).
ZIPCOMM_HOST_DEVICE uint64_t slot_bytes_for(DType dtype, const PipelineShape& shape) {
  uint64_t most = 0;
  for (uint32_t k = 0; k <= shape.num_tiers; ++k) {
    if (k == shape.num_tiers && !shape.has_head()) break;
    const PipelineTier& t = k < shape.num_tiers ? shape.tier[k] : shape.head;
    const uint64_t elems = uint64_t(t.frame_items) * t.item_elems;
    const uint64_t coded =
        t.frame_items * (item_plane_bytes(dtype, t.item_elems) + format::raw_chunk_bytes(dtype, t.item_elems)) +
        FRAME_HEADER_BYTES + item_table_bytes(t.frame_items);
    const uint64_t raw = format::align_up(elems * format::elem_bytes(dtype), format::ALIGN) + FRAME_HEADER_BYTES +
                         item_table_bytes(t.frame_items);
    const uint64_t m = coded > raw ? coded : raw;
    most = m > most ? m : most;
  }
  return format::align_up(most, 128);
}

/// Section B header of a frame (64 bytes, little-endian). Written last by the sender, after the item table
/// and every chunk; its check word covers bytes [0, 60).
struct FrameHeader {
  uint32_t magic;
  uint8_t version;
  uint8_t dtype;
  uint8_t code;
  uint8_t kind;
  uint32_t items;
  uint32_t item_elems;
  uint64_t seq;            // frame sequence number on the ring (monotonic over the ring's life)
  uint64_t message_elems;  // n of the whole message
  uint64_t first_elem;
  uint64_t frame_elems;
  uint64_t planes_bytes;
  uint32_t exps_bytes;  // section B: this header + item table + chunk streams
  uint32_t check;       // FNV-1a over bytes [0, 60)
};
static_assert(sizeof(FrameHeader) == FRAME_HEADER_BYTES, "frame header is 64 bytes");

ZIPCOMM_HOST_DEVICE FrameHeader make_frame_header(const FramePlan& plan, const FrameInfo& fi, CodeId code, uint64_t seq,
                                                  uint32_t exps_bytes) {
  FrameHeader h{};
  h.magic = FRAME_MAGIC;
  h.version = FRAME_VERSION;
  h.dtype = uint8_t(plan.dtype);
  h.code = uint8_t(code);
  h.kind = uint8_t(plan.kind);
  h.items = fi.items;
  h.item_elems = fi.item_elems;
  h.seq = seq;
  h.message_elems = plan.n;
  h.first_elem = fi.first_elem;
  h.frame_elems = fi.elems;
  h.planes_bytes = fi.planes_bytes;
  h.exps_bytes = exps_bytes;
  h.check = format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 60);
  return h;
}

/// Checks a received header against what the receiver expects for frame fi of its own plan.
/// bad_header: not a frame of this protocol/dtype/code/kind, or damaged; size_mismatch: a frame of another
/// message size or cut (the peers disagree on sizes); corrupt_stream: out-of-order sequence or a section B
/// length the frame cannot have.
ZIPCOMM_HOST_DEVICE Status validate_frame_header(const FrameHeader& h, const FramePlan& plan, const FrameInfo& fi,
                                                 CodeId code, uint64_t seq) {
  if (h.magic != FRAME_MAGIC || h.version != FRAME_VERSION) return Status::bad_header;
  if (format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 60) != h.check) return Status::bad_header;
  if (h.dtype != uint8_t(plan.dtype) || h.code != uint8_t(code) || h.kind != uint8_t(plan.kind))
    return Status::bad_header;
  if (h.seq != seq) return Status::corrupt_stream;
  if (h.message_elems != plan.n || h.first_elem != fi.first_elem || h.frame_elems != fi.elems || h.items != fi.items ||
      h.item_elems != fi.item_elems || h.planes_bytes != fi.planes_bytes)
    return Status::size_mismatch;
  const uint64_t least = FRAME_HEADER_BYTES + item_table_bytes(fi.items);
  if (h.exps_bytes < least || h.exps_bytes > fi.exps_bound || h.exps_bytes % format::ALIGN ||
      (plan.kind == FrameKind::raw && h.exps_bytes != least))
    return Status::corrupt_stream;
  return Status::ok;
}

ZIPCOMM_HOST_DEVICE uint32_t item_end(const uint8_t* table, uint32_t j) {
  const uint8_t* p = table + uint64_t(ITEM_ENTRY_BYTES) * j;
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
ZIPCOMM_HOST_DEVICE uint32_t item_check(const uint8_t* table, uint32_t j) { return item_end(table + 4, j); }

/// Whether entry j of an item table can be right: chunk ends non-decreasing, 16-byte multiples, no chunk
/// longer than a raw chunk, none past the chunk area (`chunks` bytes); raw frames: ends are 0.
/// The same rule on the entry's end offset and its predecessor's (0 before item 0).
ZIPCOMM_HOST_DEVICE bool item_ends_valid(uint32_t end, uint32_t prev, const FrameInfo& fi, DType dtype, FrameKind kind,
                                         uint64_t chunks, uint32_t j) {
  if (kind == FrameKind::raw) return end == 0;
  return end >= prev && end % format::ALIGN == 0 && end - prev <= format::raw_chunk_bytes(dtype, fi.item_elems_at(j)) &&
         end <= chunks;
}
ZIPCOMM_HOST_DEVICE bool item_entry_valid(const uint8_t* table, const FrameInfo& fi, DType dtype, FrameKind kind,
                                          uint64_t chunks, uint32_t j) {
  return item_ends_valid(item_end(table, j), j ? item_end(table, j - 1) : 0u, fi, dtype, kind, chunks, j);
}

/// The table's end: a coded frame's last chunk ends where section B ends (`chunks` bytes of chunk streams), and
/// the table's padding is zero.
ZIPCOMM_HOST_DEVICE bool item_table_end_valid(const uint8_t* table, const FrameInfo& fi, FrameKind kind,
                                              uint64_t chunks) {
  if (kind == FrameKind::coded && item_end(table, fi.items - 1) != chunks) return false;
  for (uint64_t b = uint64_t(ITEM_ENTRY_BYTES) * fi.items; b < item_table_bytes(fi.items); ++b)
    if (table[b]) return false;
  return true;
}

/// Checks a frame's item table against its header: every entry valid, the last chunk ending where section B
/// ends, zero padding. Each chunk's content is then checked by the decoder, each item's elements by its check.
ZIPCOMM_HOST_DEVICE Status validate_item_table(const uint8_t* table, const FrameInfo& fi, DType dtype, FrameKind kind,
                                               uint32_t exps_bytes) {
  const uint64_t chunks = exps_bytes - FRAME_HEADER_BYTES - item_table_bytes(fi.items);
  for (uint32_t j = 0; j < fi.items; ++j)
    if (!item_entry_valid(table, fi, dtype, kind, chunks, j)) return Status::corrupt_stream;
  return item_table_end_valid(table, fi, kind, chunks) ? Status::ok : Status::corrupt_stream;
}

/// Item j's share of validate_item_table, for the receiver warp that decodes item j (so no warp checks the
/// whole table on the path from a frame's landing to its first decode): entry j valid with its predecessor's
/// end (where chunk j starts) aligned; the last item also checks that its chunk ends where section B ends and
/// that the table's padding is zero. validate_item_table(...) == ok exactly when every item's share is valid
/// (tested), so a damaged table is refused by at least one item, and no item reads outside the chunk area.
/// `exps_bytes` must have passed validate_frame_header.
ZIPCOMM_HOST_DEVICE bool item_entry_share_valid(const uint8_t* table, const FrameInfo& fi, DType dtype, FrameKind kind,
                                                uint32_t exps_bytes, uint32_t j) {
  const uint64_t chunks = exps_bytes - FRAME_HEADER_BYTES - item_table_bytes(fi.items);
  const uint32_t end = item_end(table, j);
  const uint32_t prev = j ? item_end(table, j - 1) : 0u;
  if (prev % format::ALIGN != 0 || !item_ends_valid(end, prev, fi, dtype, kind, chunks, j)) return false;
  return j + 1 < fi.items || item_table_end_valid(table, fi, kind, chunks);
}

/// Byte offset of item j's planes (coded) or raw bytes (raw) inside the planes section.
ZIPCOMM_HOST_DEVICE uint64_t item_planes_offset(const FramePlan& plan, const FrameInfo& fi, uint32_t j) {
  return plan.kind == FrameKind::raw ? uint64_t(j) * fi.item_elems * format::elem_bytes(plan.dtype)
                                     : uint64_t(j) * item_plane_bytes(plan.dtype, fi.item_elems);
}

// ---- ring sequence flags ---------------------------------------------------------------------------------
// Frames are numbered by a sequence q that runs over the ring's whole life (transfer after transfer). Frame q
// uses slot q % S. A flag word holds q + 1 once frame q's section is there (0: never written). The consumer
// hands the slot back by writing q + 1 into the slot's credit word; the producer may fill slot s with frame q
// once q < S or credit[s] >= q + 1 - S.

enum class FlagState : uint8_t { waiting, ready, broken };

/// Section B bytes a link moves with fixed-size copies (stream mode), per tier (tiers are told apart by
/// their item size; small items code a little worse): header, item table and room for `per_kelem[k]` coded
/// bytes per 1024 elements, 16-byte aligned, at most the frame's bound. A frame whose section B is longer
/// sends the rest apart (the overflow); one that is shorter leaves the tail unused.
/// Entries are budget classes, found by item size (tier_of: the first entry with that size; 0 if none):
/// make_exps_budget gives tier k entry k and the head, when its item size is not a tier's, entry num_tiers;
/// a head with the same item size as a tier shares that tier's budget (same items, same coded size per element).
struct ExpsBudget {
  uint32_t item_elems[EXPS_BUDGET_CLASSES] = {};
  uint32_t per_kelem[EXPS_BUDGET_CLASSES] = {};
  ZIPCOMM_HOST_DEVICE uint32_t tier_of(uint32_t items_elems) const {
    for (uint32_t k = 0; k < EXPS_BUDGET_CLASSES; ++k)
      if (item_elems[k] == items_elems) return k;
    return 0;
  }
};

/// The budget classes of a shape (see ExpsBudget), each starting at `per_kelem`.
ZIPCOMM_HOST_DEVICE ExpsBudget make_exps_budget(const PipelineShape& shape, uint32_t per_kelem) {
  ExpsBudget b;
  uint32_t k = 0;
  for (; k < shape.num_tiers && k < uint32_t(MAX_PIPELINE_TIERS); ++k) {
    b.item_elems[k] = shape.tier[k].item_elems;
    b.per_kelem[k] = per_kelem;
  }
  if (shape.has_head() && b.item_elems[b.tier_of(shape.head.item_elems)] != shape.head.item_elems) {
    b.item_elems[k] = shape.head.item_elems;
    b.per_kelem[k] = per_kelem;
  }
  return b;
}

ZIPCOMM_HOST_DEVICE uint64_t exps_budget_bytes(const FrameInfo& fi, const ExpsBudget& b) {
  const uint64_t per_kelem = b.per_kelem[b.tier_of(fi.item_elems)];
  const uint64_t want = FRAME_HEADER_BYTES + item_table_bytes(fi.items) + (fi.elems * per_kelem + 1023) / 1024;
  const uint64_t aligned = format::align_up(want, format::ALIGN);
  return aligned < fi.exps_bound ? aligned : fi.exps_bound;
}

ZIPCOMM_HOST_DEVICE uint32_t slot_of(uint64_t seq, uint32_t slots) { return uint32_t(seq % slots); }

/// Coded section-B bytes per 1024 elements a frame needed (what the budget must cover for it to travel whole).
ZIPCOMM_HOST_DEVICE uint32_t exps_need_per_kelem(const FrameInfo& fi, uint64_t exps_bytes) {
  const uint64_t fixed = FRAME_HEADER_BYTES + item_table_bytes(fi.items);
  if (exps_bytes <= fixed || fi.elems == 0) return 0;
  const uint64_t need = ((exps_bytes - fixed) * 1024 + fi.elems - 1) / fi.elems;
  return uint32_t(need < (uint64_t(1) << 30) ? need : (uint64_t(1) << 30));
}

/// The budget after a transfer that went well: per budget class, the most a frame of that class needed
/// (`need[k]`, exps_need_per_kelem's maximum; 0 where the transfer had no frame of class k: the budget stays) plus
/// a margin of `margin_permille` / 1000 of it and `margin_per_kelem` bytes per 1024 elements (the defaults, 0.5%
/// and 1, are P2POptions'). `need` has EXPS_BUDGET_CLASSES entries (or fewer: the classes past it stay).
template <size_t N>
inline ExpsBudget adapt_exps_budget(ExpsBudget b, const uint32_t (&need)[N], uint32_t margin_permille = 5,
                                    uint32_t margin_per_kelem = 1) {
  static_assert(N <= size_t(EXPS_BUDGET_CLASSES), "more needs than budget classes");
  for (uint32_t k = 0; k < N; ++k)
    if (need[k]) {
      const uint64_t v = uint64_t(need[k]) + uint64_t(need[k]) * margin_permille / 1000 + margin_per_kelem;
      b.per_kelem[k] = uint32_t(v < (uint64_t(1) << 20) ? v : (uint64_t(1) << 20));
    }
  return b;
}
ZIPCOMM_HOST_DEVICE uint64_t flag_value(uint64_t seq) { return seq + 1; }

/// A ready flag of frame `seq`: an older value means "not yet", a newer one that the peers lost step.
ZIPCOMM_HOST_DEVICE FlagState ready_state(uint64_t flag, uint64_t seq) {
  return flag == seq + 1 ? FlagState::ready : flag < seq + 1 ? FlagState::waiting : FlagState::broken;
}

/// The credit word of frame `seq`'s slot: whether the producer may fill it.
ZIPCOMM_HOST_DEVICE FlagState credit_state(uint64_t credit, uint64_t seq, uint32_t slots) {
  if (seq < slots) return credit == 0 ? FlagState::ready : FlagState::broken;  // first use of the slot
  const uint64_t need = seq + 1 - slots;
  return credit == need ? FlagState::ready : credit < need ? FlagState::waiting : FlagState::broken;
}

// ---- small-message bypass --------------------------------------------------------------------------------

/// Messages below `threshold_bytes` go raw (no coding): for them the fixed costs of coding outweigh the
/// bytes saved. The threshold is measured by a link's calibrate() or set by the user.
ZIPCOMM_HOST_DEVICE bool use_bypass(uint64_t message_bytes, uint64_t threshold_bytes) {
  return message_bytes < threshold_bytes;
}

/// From timings of coded and raw transfers at increasing sizes, the smallest size from which coding wins by
/// at least `margin` (e.g. 0.03) at that size and every larger one measured (sizes ascending). Returns
/// UINT64_MAX when coding does not win at the largest size. Below the smallest measured size nothing is
/// known, so the threshold is never below it.
inline uint64_t choose_bypass_threshold(const uint64_t* bytes, const double* coded_seconds, const double* raw_seconds,
                                        size_t count, double margin) {
  uint64_t threshold = UINT64_MAX;
  for (size_t i = count; i-- > 0;) {
    if (!(coded_seconds[i] * (1.0 + margin) <= raw_seconds[i])) break;
    threshold = bytes[i];
  }
  return threshold;
}

}  // namespace comm
}  // namespace zipcomm
