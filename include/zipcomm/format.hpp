// zipcomm wire format v3: constants, header and layout arithmetic (docs/FORMAT.md is the specification).
// Everything here is constexpr/host-device so host reference code and device kernels agree by construction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.hpp"

namespace zipcomm {

enum class DType : uint8_t { bf16 = 1, fp16 = 2, fp32 = 3 };
/// Exponent code of a stream. Ids 1 and 2 were the per-element codes of format versions 1 and 2.
enum class CodeId : uint8_t { pair = 3 };

ZIPCOMM_HOST_DEVICE const char* dtype_name(DType d) {
  return d == DType::bf16 ? "bf16" : d == DType::fp16 ? "fp16" : d == DType::fp32 ? "fp32" : "?";
}
ZIPCOMM_HOST_DEVICE bool dtype_valid(uint8_t d) { return d >= 1 && d <= 3; }
ZIPCOMM_HOST_DEVICE bool code_valid(uint8_t c) { return c == 3; }

namespace format {

constexpr uint32_t MAGIC = 0x4D43505Au;  // bytes "ZPCM" in memory order
constexpr uint8_t VERSION = 3;  // v3: pair code, one contiguous stream per lane (v1, v2 streams are refused)
constexpr uint32_t HEADER_BYTES = 64;

constexpr int LANES = 32;                  // lane streams per chunk (one warp)
constexpr int ITEMS_PER_LANE = 8;          // consecutive elements a lane owns in a tile (16 B of bf16)
constexpr int TILE_ELEMS = LANES * ITEMS_PER_LANE;  // 256: one anchor (local scale) per tile
constexpr int CHUNK_TILES = 64;
constexpr int CHUNK_ELEMS = TILE_ELEMS * CHUNK_TILES;  // 16384: unit of independent decoding
constexpr uint32_t LANE_WORD_LIMIT = 64;  // a chunk is coded only if every lane's stream fits 64 words (4 bits/item)
constexpr uint32_t CODED_WORD_LIMIT = LANES * LANE_WORD_LIMIT;
constexpr uint32_t ALIGN = 16;

ZIPCOMM_HOST_DEVICE constexpr uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
ZIPCOMM_HOST_DEVICE constexpr uint64_t div_up(uint64_t x, uint64_t a) { return (x + a - 1) / a; }

/// Bit layout of one element type. Sign and mantissa ("raw bits") are stored apart from the exponent.
template <DType D>
struct Traits;
template <>
struct Traits<DType::bf16> {
  using Bits = uint16_t;
  static constexpr int EXP_BITS = 8, MANT_BITS = 7, TOTAL_BITS = 16;
  static constexpr uint32_t ELEM_BYTES = 2;
};
template <>
struct Traits<DType::fp16> {
  using Bits = uint16_t;
  static constexpr int EXP_BITS = 5, MANT_BITS = 10, TOTAL_BITS = 16;
  static constexpr uint32_t ELEM_BYTES = 2;
};
template <>
struct Traits<DType::fp32> {
  using Bits = uint32_t;
  static constexpr int EXP_BITS = 8, MANT_BITS = 23, TOTAL_BITS = 32;
  static constexpr uint32_t ELEM_BYTES = 4;
};

ZIPCOMM_HOST_DEVICE constexpr uint32_t elem_bytes(DType d) { return d == DType::fp32 ? 4u : 2u; }
ZIPCOMM_HOST_DEVICE constexpr int exp_bits(DType d) { return d == DType::fp16 ? 5 : 8; }

/// Fixed part of the stream header (64 bytes, little-endian).
struct Header {
  uint32_t magic;
  uint8_t version;
  uint8_t dtype;
  uint8_t code;
  uint8_t chunk_log2;       // log2(CHUNK_ELEMS); fixed at 14, stored so readers can check
  uint64_t num_elements;
  uint64_t total_bytes;     // whole compressed stream, header included
  uint64_t plane1_offset;   // byte offsets from the start of the stream
  uint64_t table_offset;
  uint64_t exp_offset;
  uint32_t header_check;    // FNV-1a over bytes [0, 48) of the header
  uint32_t reserved0;
  uint32_t reserved1;
  uint32_t reserved2;
};
static_assert(sizeof(Header) == HEADER_BYTES, "header is 64 bytes");

/// Where each section of a stream of `n` elements of `dtype` lives. Depends only on (dtype, n).
struct Layout {
  uint64_t n;
  uint64_t num_chunks;
  uint64_t num_tiles;
  uint64_t plane0_offset, plane0_bytes;  // one byte per element
  uint64_t plane1_offset, plane1_bytes;  // fp16: 3 bit-planes per tile; fp32: 2 bytes per element
  uint64_t table_offset;                 // num_chunks x uint64 end offsets into the exponent section
  uint64_t check_offset;                 // num_chunks x uint32 chunk checks (thread::ChunkCheck), after the ends
  uint64_t exp_offset;                   // exponent section: one 16-byte aligned stream per chunk
};

ZIPCOMM_HOST_DEVICE Layout layout_for(DType dtype, uint64_t n) {
  Layout l{};
  l.n = n;
  l.num_chunks = div_up(n, CHUNK_ELEMS);
  l.num_tiles = div_up(n, TILE_ELEMS);
  l.plane0_offset = HEADER_BYTES;
  l.plane0_bytes = n;
  l.plane1_offset = align_up(l.plane0_offset + l.plane0_bytes, ALIGN);
  l.plane1_bytes = dtype == DType::fp16 ? l.num_tiles * 96 : dtype == DType::fp32 ? 2 * n : 0;
  l.table_offset = align_up(l.plane1_offset + l.plane1_bytes, ALIGN);
  l.check_offset = l.table_offset + 8 * l.num_chunks;
  l.exp_offset = align_up(l.check_offset + 4 * l.num_chunks, ALIGN);
  return l;
}

/// Elements in chunk `c` of a stream of n elements.
ZIPCOMM_HOST_DEVICE uint32_t chunk_elems(uint64_t n, uint64_t c) {
  uint64_t first = c * CHUNK_ELEMS;
  uint64_t left = n > first ? n - first : 0;
  return static_cast<uint32_t>(left < CHUNK_ELEMS ? left : CHUNK_ELEMS);
}
ZIPCOMM_HOST_DEVICE uint32_t chunk_tiles(uint32_t elems) { return static_cast<uint32_t>(div_up(elems, TILE_ELEMS)); }
/// Elements lane `lane` owns in tile `tile` of a chunk of `elems` elements (0..8; they are its first ones).
ZIPCOMM_HOST_DEVICE uint32_t lane_valid_count(uint32_t elems, uint32_t tile, uint32_t lane) {
  int64_t left = int64_t(elems) - int64_t(tile) * TILE_ELEMS - int64_t(lane) * ITEMS_PER_LANE;
  return left <= 0 ? 0u : left >= ITEMS_PER_LANE ? uint32_t(ITEMS_PER_LANE) : uint32_t(left);
}
/// Where a coded chunk's 32 lane word counts (one byte each) start: after the anchors (one byte per tile) and
/// the 2-bit fractions packed four per byte.
ZIPCOMM_HOST_DEVICE uint32_t lane_counts_offset(uint32_t tiles) { return static_cast<uint32_t>(tiles + div_up(tiles, 4)); }
/// The chunk header: anchors, fractions, lane word counts, zero padding to 16 bytes; the lane streams follow.
ZIPCOMM_HOST_DEVICE uint32_t chunk_header_bytes(uint32_t tiles) {
  return static_cast<uint32_t>(align_up(lane_counts_offset(tiles) + LANES, ALIGN));
}
/// Size of a chunk stored raw: exponents packed LSB-first, EXP_BITS each, padded to 16 bytes.
ZIPCOMM_HOST_DEVICE uint32_t raw_chunk_bytes(DType d, uint32_t elems) {
  return static_cast<uint32_t>(align_up(div_up(static_cast<uint64_t>(elems) * exp_bits(d), 8), ALIGN));
}
ZIPCOMM_HOST_DEVICE uint32_t coded_chunk_bytes(uint32_t tiles, uint32_t words) {
  return static_cast<uint32_t>(align_up(chunk_header_bytes(tiles) + 4ull * words, ALIGN));
}
/// The encoder's rule for keeping a chunk coded (part of the format so host and device agree on bytes):
/// `words` in all, at most `max_lane_words` in one lane.
ZIPCOMM_HOST_DEVICE bool chunk_stays_coded(DType d, uint32_t elems, uint32_t words, uint32_t max_lane_words) {
  return max_lane_words <= LANE_WORD_LIMIT && coded_chunk_bytes(chunk_tiles(elems), words) < raw_chunk_bytes(d, elems);
}

/// Whether chunk c's stream [start, end) (offsets into the exponent section, from the chunk table) can be
/// valid for a stream of n elements whose exponent section is exp_bytes long.
ZIPCOMM_HOST_DEVICE bool chunk_range_valid(DType d, uint64_t n, uint64_t c, uint64_t start, uint64_t end,
                                           uint64_t exp_bytes) {
  const bool last = c + 1 == div_up(n, CHUNK_ELEMS);
  return start <= end && end <= exp_bytes && start % ALIGN == 0 && end % ALIGN == 0 &&
         end - start <= raw_chunk_bytes(d, chunk_elems(n, c)) && (!last || end == exp_bytes);
}

/// The alignment gaps between sections (zero in every stream): [begin, end) of gap g, g < SECTION_GAPS.
constexpr int SECTION_GAPS = 3;
ZIPCOMM_HOST_DEVICE void section_gap(const Layout& l, int g, uint64_t& begin, uint64_t& end) {
  begin = g == 0 ? l.plane0_offset + l.plane0_bytes : g == 1 ? l.plane1_offset + l.plane1_bytes
                                                              : l.check_offset + 4 * l.num_chunks;
  end = g == 0 ? l.plane1_offset : g == 1 ? l.table_offset : l.exp_offset;
}

/// Applies op(byte offset) to the gap bytes first, first + step, ... (a warp splits them by lane): writers
/// zero them, readers check them, so that no byte of a stream can change unnoticed.
template <class Op>
ZIPCOMM_HOST_DEVICE void for_section_gaps(const Layout& l, uint32_t first, uint32_t step, Op&& op) {
  for (int g = 0; g < SECTION_GAPS; ++g) {
    uint64_t begin, end;
    section_gap(l, g, begin, end);
    for (uint64_t b = begin + first; b < end; b += step) op(b);
  }
}
ZIPCOMM_HOST_DEVICE bool section_gaps_zero(const uint8_t* stream, const Layout& l, uint32_t first = 0,
                                           uint32_t step = 1) {
  uint32_t seen = 0;
  for_section_gaps(l, first, step, [&](uint64_t b) { seen |= stream[b]; });
  return seen == 0;
}

/// Upper bound of the compressed size of n elements (every chunk raw).
ZIPCOMM_HOST_DEVICE uint64_t max_compressed_bytes(DType dtype, uint64_t n) {
  Layout l = layout_for(dtype, n);
  uint64_t full = n / CHUNK_ELEMS;
  uint32_t tail = static_cast<uint32_t>(n - full * CHUNK_ELEMS);
  return l.exp_offset + full * raw_chunk_bytes(dtype, CHUNK_ELEMS) + (tail ? raw_chunk_bytes(dtype, tail) : 0);
}

ZIPCOMM_HOST_DEVICE uint32_t fnv1a(const uint8_t* p, uint32_t len) {
  uint32_t h = 2166136261u;
  for (uint32_t i = 0; i < len; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

ZIPCOMM_HOST_DEVICE Header make_header(DType dtype, CodeId code, uint64_t n, uint64_t total_bytes) {
  Layout l = layout_for(dtype, n);
  Header h{};
  h.magic = MAGIC;
  h.version = VERSION;
  h.dtype = static_cast<uint8_t>(dtype);
  h.code = static_cast<uint8_t>(code);
  h.chunk_log2 = 14;
  h.num_elements = n;
  h.total_bytes = total_bytes;
  h.plane1_offset = l.plane1_offset;
  h.table_offset = l.table_offset;
  h.exp_offset = l.exp_offset;
  h.header_check = fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
  return h;
}

/// Checks everything in a header that can be checked without the rest of the stream. A well-formed header of
/// another version (v1 and v2 have the same header) gives unsupported_version, so a reader can say what it saw.
ZIPCOMM_HOST_DEVICE Status validate_header(const Header& h, uint64_t available_bytes) {
  if (h.magic != MAGIC) return Status::bad_header;
  if (fnv1a(reinterpret_cast<const uint8_t*>(&h), 48) != h.header_check) return Status::bad_header;
  if (h.version != VERSION) return Status::unsupported_version;
  if (!dtype_valid(h.dtype) || !code_valid(h.code) || h.chunk_log2 != 14) return Status::bad_header;
  if (h.reserved0 || h.reserved1 || h.reserved2) return Status::bad_header;  // writers zero them
  if (h.num_elements > (uint64_t(1) << 50)) return Status::bad_header;
  Layout l = layout_for(static_cast<DType>(h.dtype), h.num_elements);
  if (h.plane1_offset != l.plane1_offset || h.table_offset != l.table_offset || h.exp_offset != l.exp_offset)
    return Status::bad_header;
  if (h.total_bytes < l.exp_offset || h.total_bytes > max_compressed_bytes(static_cast<DType>(h.dtype), h.num_elements))
    return Status::bad_header;
  if (h.total_bytes > available_bytes) return Status::corrupt_stream;  // truncated
  return Status::ok;
}

/// A stream whose header was checked: where its sections and chunks are. `in` must be 8-byte aligned.
struct StreamView {
  const uint8_t* base = nullptr;
  Layout layout{};
  uint64_t exp_bytes = 0;  // length of the exponent section

  /// Checks the header of a stream of `available` readable bytes, expected to hold dtype/code, and the
  /// alignment gaps between its sections.
  ZIPCOMM_HOST_DEVICE Status open(const uint8_t* in, uint64_t available, DType dtype, CodeId code) {
    if (available < HEADER_BYTES) return Status::corrupt_stream;
    const Header h = *reinterpret_cast<const Header*>(in);
    Status s = validate_header(h, available);
    if (s != Status::ok) return s;
    if (h.dtype != uint8_t(dtype) || h.code != uint8_t(code)) return Status::bad_header;
    base = in;
    layout = layout_for(dtype, h.num_elements);
    exp_bytes = h.total_bytes - layout.exp_offset;
    return section_gaps_zero(in, layout) ? Status::ok : Status::corrupt_stream;  // at most 45 bytes
  }
  ZIPCOMM_HOST_DEVICE uint64_t total_bytes() const { return layout.exp_offset + exp_bytes; }
  ZIPCOMM_HOST_DEVICE const uint8_t* plane0() const { return base + layout.plane0_offset; }
  ZIPCOMM_HOST_DEVICE const uint8_t* plane1() const { return base + layout.plane1_offset; }
  ZIPCOMM_HOST_DEVICE const uint64_t* table() const { return reinterpret_cast<const uint64_t*>(base + layout.table_offset); }
  /// The stored check of chunk c (the decoder compares it with the check of what it decoded).
  ZIPCOMM_HOST_DEVICE uint32_t check(uint64_t c) const {
    return reinterpret_cast<const uint32_t*>(base + layout.check_offset)[c];
  }
  /// Chunk c's stream; false (and bytes = 0) when its table entries are inconsistent.
  ZIPCOMM_HOST_DEVICE bool chunk(DType dtype, uint64_t c, const uint8_t*& p, uint32_t& bytes) const {
    const uint64_t start = c ? table()[c - 1] : 0, end = table()[c];
    p = base + layout.exp_offset;
    bytes = 0;
    if (!chunk_range_valid(dtype, layout.n, c, start, end, exp_bytes)) return false;
    p += start;
    bytes = static_cast<uint32_t>(end - start);
    return true;
  }
};

}  // namespace format
}  // namespace zipcomm
