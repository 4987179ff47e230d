// zipcomm wire format v6 (v5 streams are still read): constants, header and layout arithmetic; docs/FORMAT.md is
// the specification.
// Everything here is constexpr/host-device so host reference code and device kernels agree by construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "config.hpp"

namespace zipcomm {

/// Element types. fp8_e4m3 is OCP E4M3FN (no infinities, NaN = S.1111.111), fp8_e5m2 OCP E5M2; both are coded
/// losslessly like the others, on all 256 bit patterns.
enum class DType : uint8_t { bf16 = 1, fp16 = 2, fp32 = 3, fp8_e4m3 = 4, fp8_e5m2 = 5 };
/// Exponent code of a stream: `pair` (prefix codewords, the denser) or `fixed` (3 bits per exponent at a fixed
/// place, the faster). Ids 1 and 2 were the per-element codes of format versions 1 and 2.
enum class CodeId : uint8_t { pair = 3, fixed = 4 };
ZIPCOMM_HOST_DEVICE const char* code_name(CodeId c) {
  return c == CodeId::pair ? "pair" : c == CodeId::fixed ? "fixed" : "?";
}

ZIPCOMM_HOST_DEVICE const char* dtype_name(DType d) {
  return d == DType::bf16       ? "bf16"
         : d == DType::fp16     ? "fp16"
         : d == DType::fp32     ? "fp32"
         : d == DType::fp8_e4m3 ? "fp8_e4m3"
         : d == DType::fp8_e5m2 ? "fp8_e5m2"
                                : "?";
}
ZIPCOMM_HOST_DEVICE bool dtype_valid(uint8_t d) { return d >= 1 && d <= 5; }
ZIPCOMM_HOST_DEVICE bool code_valid(uint8_t c) { return c == 3 || c == 4; }
ZIPCOMM_HOST_DEVICE constexpr bool is_fp8(DType d) { return d == DType::fp8_e4m3 || d == DType::fp8_e5m2; }
/// Whether the fused steps (decode + reduce, + encode, + forward), their host reference, the P2P links and the
/// ring take dtype d. The fp8 dtypes are codec only: they have no reduction arithmetic here, and the P2P
/// frames and ring slots are laid out for one plane-0 byte per element.
ZIPCOMM_HOST_DEVICE constexpr bool comm_dtype_supported(DType d) {
  return d == DType::bf16 || d == DType::fp16 || d == DType::fp32;
}

/// Host dispatch: calls f(DTypeTag) for the run-time dtype and returns its result, or `otherwise` when it is unknown.
/// DTypeTag is std::integral_constant<DType, D>. The one list of the dtypes.
template <class R, class F>
R visit_dtype(DType dtype, R otherwise, F&& f) {
  if (dtype == DType::bf16) return f(std::integral_constant<DType, DType::bf16>{});
  if (dtype == DType::fp16) return f(std::integral_constant<DType, DType::fp16>{});
  if (dtype == DType::fp32) return f(std::integral_constant<DType, DType::fp32>{});
  if (dtype == DType::fp8_e4m3) return f(std::integral_constant<DType, DType::fp8_e4m3>{});
  if (dtype == DType::fp8_e5m2) return f(std::integral_constant<DType, DType::fp8_e5m2>{});
  return otherwise;
}

/// visit_dtype over the dtypes with arithmetic (comm_dtype_supported: bf16, fp16, fp32): `otherwise` for the fp8
/// ones, whose f is then never instantiated.
template <class R, class F>
R visit_comm_dtype(DType dtype, R otherwise, F&& f) {
  return visit_dtype(dtype, otherwise, [&](auto d) -> R {
    if constexpr (comm_dtype_supported(decltype(d)::value))
      return f(d);
    else
      return otherwise;
  });
}

namespace format {

constexpr uint32_t MAGIC = 0x4D43505Au;  // bytes "ZPCM" in memory order
constexpr uint8_t VERSION = 6;  // v6: chunks of 4096, 8192 or 16384 elements (v5 streams, all 16384, still read)
constexpr uint8_t OLDEST_READ_VERSION = 5;  // v1-v4 streams are refused
constexpr uint32_t HEADER_BYTES = 64;

constexpr int LANES = 32;                  // lane streams per chunk (one warp)
constexpr int ITEMS_PER_LANE = 8;          // consecutive elements a lane owns in a tile (16 B of bf16)
constexpr int TILE_ELEMS = LANES * ITEMS_PER_LANE;  // 256: one anchor (local scale) per tile
// A chunk (the unit of independent coding, one warp's) holds 2^chunk_log2 elements, a stream-wide choice.
constexpr uint32_t MIN_CHUNK_LOG2 = 12, MAX_CHUNK_LOG2 = 14;
constexpr uint32_t CHUNK_LOG2_AUTO = 0;  // an encoder's argument: default_chunk_log2(n)
constexpr int MAX_CHUNK_TILES = 64;
constexpr int MAX_CHUNK_ELEMS = TILE_ELEMS * MAX_CHUNK_TILES;  // 16384
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
template <>
struct Traits<DType::fp8_e4m3> {
  using Bits = uint8_t;
  static constexpr int EXP_BITS = 4, MANT_BITS = 3, TOTAL_BITS = 8;
  static constexpr uint32_t ELEM_BYTES = 1;
};
template <>
struct Traits<DType::fp8_e5m2> {
  using Bits = uint8_t;
  static constexpr int EXP_BITS = 5, MANT_BITS = 2, TOTAL_BITS = 8;
  static constexpr uint32_t ELEM_BYTES = 1;
};

ZIPCOMM_HOST_DEVICE constexpr uint32_t elem_bytes(DType d) { return d == DType::fp32 ? 4u : is_fp8(d) ? 1u : 2u; }
ZIPCOMM_HOST_DEVICE constexpr int exp_bits(DType d) {
  return d == DType::fp16 || d == DType::fp8_e5m2 ? 5 : d == DType::fp8_e4m3 ? 4 : 8;
}

/// Plane 0 holds each element's sign and top 7 mantissa bits: one byte per element in element order (bf16,
/// fp16, fp32), or, for fp8, whose element is a byte, the sign-mantissa value v = sign << MANT_BITS | mantissa
/// of every element as bit-planes per tile: `plane0_planes` planes of 32 bytes, plane j holding bit
/// (planes - 1 - j) of v (plane 0: the sign), byte = lane, bit = item (the fp16 low bits' layout).
ZIPCOMM_HOST_DEVICE constexpr uint32_t plane0_planes(DType d) {
  return d == DType::fp8_e4m3 ? 4u : d == DType::fp8_e5m2 ? 3u : 0u;
}
ZIPCOMM_HOST_DEVICE constexpr bool plane0_bit_planes(DType d) { return plane0_planes(d) != 0; }
/// Bytes of one tile's bit-planes (fp8).
ZIPCOMM_HOST_DEVICE constexpr uint32_t plane0_tile_bytes(DType d) { return uint32_t(LANES) * plane0_planes(d); }
/// Bytes of plane 0 of `elems` elements that start at a tile boundary: also where in plane 0 the element
/// `elems` (a tile boundary) starts. A short last tile takes its whole bit-planes, the bits no element owns zero.
ZIPCOMM_HOST_DEVICE constexpr uint64_t plane0_bytes(DType d, uint64_t elems) {
  return plane0_bit_planes(d) ? div_up(elems, TILE_ELEMS) * plane0_tile_bytes(d) : elems;
}

/// Low mantissa bits: the mantissa bits below the top 7 (fp16 m[2..0], fp32 m[15..0]; bf16 has none). Each
/// tile stores them at one of a few widths, named by a 2-bit width code; the bits below the stored width are
/// zero in every element of the tile (bf16 values widened to fp32, or converted to fp16, need none).
ZIPCOMM_HOST_DEVICE constexpr uint32_t low_bits(DType d) { return d == DType::fp16 ? 3u : d == DType::fp32 ? 16u : 0u; }
ZIPCOMM_HOST_DEVICE constexpr bool has_low(DType d) { return low_bits(d) != 0; }
/// Valid width codes: fp32 0, 1, 2 store 16, 8, 0 low bits; fp16 0, 1 store 3, 0.
ZIPCOMM_HOST_DEVICE constexpr uint32_t low_code_count(DType d) { return d == DType::fp32 ? 3u : d == DType::fp16 ? 2u : 1u; }
ZIPCOMM_HOST_DEVICE constexpr uint32_t low_stored_bits(DType d, uint32_t code) {
  return d == DType::fp32 ? 16u - 8u * code : d == DType::fp16 ? (code ? 0u : 3u) : 0u;
}
/// The width code that stores no low bits.
ZIPCOMM_HOST_DEVICE constexpr uint32_t low_none_code(DType d) { return low_code_count(d) - 1u; }
/// Bytes of one tile's low part at width `code` with `valid` elements: fp32 whole bytes per element in element
/// order, padded to 16; fp16 three bit-planes of 32 bytes (one byte per lane), whatever `valid` is.
ZIPCOMM_HOST_DEVICE constexpr uint32_t low_tile_bytes(DType d, uint32_t code, uint32_t valid) {
  return d == DType::fp32 ? static_cast<uint32_t>(align_up(uint64_t(valid) * (low_stored_bits(d, code) / 8), ALIGN))
                          : d == DType::fp16 && code == 0 ? 96u : 0u;
}
/// Bytes of the low part of a chunk of `elems` elements with every tile at full width (code 0).
ZIPCOMM_HOST_DEVICE constexpr uint32_t full_low_chunk_bytes(DType d, uint32_t elems) {
  return d == DType::fp32 ? static_cast<uint32_t>((elems / TILE_ELEMS) * 512u +
                                                  align_up(2ull * (elems % TILE_ELEMS), ALIGN))
                          : d == DType::fp16 ? static_cast<uint32_t>(div_up(elems, TILE_ELEMS) * 96u) : 0u;
}
/// How an encoder picks the tiles' width codes: the fewest low bits that hold each tile (the device codec, the
/// host reference), or always full width (writers that place low bits before they have seen a whole stream:
/// the fused hops, the P2P links, the block codec).
enum class LowWidths : uint8_t { minimal, full };

/// The width code of tile t from its chunk's 16 bytes of codes (as four little-endian words).
ZIPCOMM_HOST_DEVICE constexpr uint32_t low_code_at(const uint32_t (&codes)[4], uint32_t t) {
  // selects, not an indexed load: the codes stay in registers
  const uint32_t w = t < 32 ? (t < 16 ? codes[0] : codes[1]) : (t < 48 ? codes[2] : codes[3]);
  return (w >> (2 * (t % 16))) & 3u;
}

/// Fixed part of the stream header (64 bytes, little-endian).
struct Header {
  uint32_t magic;
  uint8_t version;
  uint8_t dtype;
  uint8_t code;
  uint8_t chunk_log2;       // elements per chunk: 12, 13 or 14 (v5: 14)
  uint64_t num_elements;
  uint64_t total_bytes;     // whole compressed stream, header included
  uint64_t table_offset;    // byte offsets from the start of the stream
  uint64_t low_offset;
  uint64_t exp_offset;      // low_offset + the length of the low section
  uint32_t header_check;    // FNV-1a over bytes [0, 48) of the header
  uint32_t reserved0;
  uint32_t reserved1;
  uint32_t reserved2;
};
static_assert(sizeof(Header) == HEADER_BYTES, "header is 64 bytes");

/// Where each section of a stream of `n` elements of `dtype` lives. All but the last two offsets depend only on
/// (dtype, n); the low section's length (`low_bytes`) sets where the exponent section starts.
struct Layout {
  uint64_t n;
  uint32_t chunk_log2;                   // 2^chunk_log2 elements per chunk (the last one can be shorter)
  uint64_t num_chunks;
  uint64_t num_tiles;
  uint64_t plane0_offset, plane0_bytes;  // sign and top mantissa bits: a byte per element, fp8 bit-planes per tile
  uint64_t widths_offset, widths_bytes;  // fp16, fp32: a 2-bit low width code per tile
  uint64_t table_offset;                 // num_chunks x uint64 end offsets into the exponent section
  uint64_t low_table_offset;             // fp16, fp32: num_chunks x uint64 end offsets into the low section
  uint64_t check_offset;                 // num_chunks x uint32 chunk checks (thread::ChunkCheck)
  uint64_t low_offset;                   // low section: each chunk's tiles' low mantissa bits
  uint64_t low_max_bytes;                // the low section with every tile at full width
  uint64_t low_bytes;                    // this stream's low section
  uint64_t exp_offset;                   // exponent section: one 16-byte aligned stream per chunk

  /// Elements in chunk c (0 past the last chunk).
  ZIPCOMM_HOST_DEVICE uint32_t chunk_elems(uint64_t c) const {
    const uint64_t first = c << chunk_log2, size = uint64_t(1) << chunk_log2;
    const uint64_t left = n > first ? n - first : 0;
    return static_cast<uint32_t>(left < size ? left : size);
  }
  /// Global index of chunk c's first tile (the width codes and plane 0 are indexed by tile).
  ZIPCOMM_HOST_DEVICE uint64_t chunk_first_tile(uint64_t c) const { return c << (chunk_log2 - 8); }
};

/// The layout of a stream of chunks of 2^chunk_log2 elements whose low section is `low_bytes` long (default:
/// every tile at full width).
ZIPCOMM_HOST_DEVICE Layout layout_for(DType dtype, uint64_t n, uint32_t chunk_log2, uint64_t low_bytes = ~0ull) {
  Layout l{};
  l.n = n;
  l.chunk_log2 = chunk_log2;
  l.num_chunks = div_up(n, uint64_t(1) << chunk_log2);
  l.num_tiles = div_up(n, TILE_ELEMS);
  const uint64_t low_tables = has_low(dtype) ? 1 : 0;
  l.plane0_offset = HEADER_BYTES;
  l.plane0_bytes = plane0_bytes(dtype, n);
  l.widths_offset = align_up(l.plane0_offset + l.plane0_bytes, ALIGN);
  l.widths_bytes = low_tables * div_up(l.num_tiles, 4);
  l.table_offset = align_up(l.widths_offset + l.widths_bytes, ALIGN);
  l.low_table_offset = l.table_offset + 8 * l.num_chunks;
  l.check_offset = l.low_table_offset + low_tables * 8 * l.num_chunks;
  l.low_offset = align_up(l.check_offset + 4 * l.num_chunks, ALIGN);
  const uint64_t full = n >> chunk_log2;
  const uint32_t tail = static_cast<uint32_t>(n - (full << chunk_log2));
  l.low_max_bytes = full * full_low_chunk_bytes(dtype, 1u << chunk_log2) + full_low_chunk_bytes(dtype, tail);
  l.low_bytes = low_bytes == ~0ull ? l.low_max_bytes : low_bytes;
  l.exp_offset = l.low_offset + l.low_bytes;
  return l;
}

ZIPCOMM_HOST_DEVICE uint32_t chunk_tiles(uint32_t elems) { return static_cast<uint32_t>(div_up(elems, TILE_ELEMS)); }
/// Elements lane `lane` owns in tile `tile` of a chunk of `elems` elements (0..8; they are its first ones).
ZIPCOMM_HOST_DEVICE uint32_t lane_valid_count(uint32_t elems, uint32_t tile, uint32_t lane) {
  int64_t left = int64_t(elems) - int64_t(tile) * TILE_ELEMS - int64_t(lane) * ITEMS_PER_LANE;
  return left <= 0 ? 0u : left >= ITEMS_PER_LANE ? uint32_t(ITEMS_PER_LANE) : uint32_t(left);
}
/// Elements in tile `tile` of a chunk of `elems` elements (0..256).
ZIPCOMM_HOST_DEVICE uint32_t tile_valid_count(uint32_t elems, uint32_t tile) {
  int64_t left = int64_t(elems) - int64_t(tile) * TILE_ELEMS;
  return left <= 0 ? 0u : left >= TILE_ELEMS ? uint32_t(TILE_ELEMS) : uint32_t(left);
}
/// Where a coded chunk's 32 lane word counts (one byte each) start: after the anchors (one byte per tile) and
/// the 2-bit fractions packed four per byte.
ZIPCOMM_HOST_DEVICE uint32_t lane_counts_offset(uint32_t tiles) { return static_cast<uint32_t>(tiles + div_up(tiles, 4)); }
/// The chunk header: anchors, fractions, lane word counts, zero padding to 16 bytes; the lane streams follow.
ZIPCOMM_HOST_DEVICE uint32_t chunk_header_bytes(uint32_t tiles) {
  return static_cast<uint32_t>(align_up(lane_counts_offset(tiles) + LANES, ALIGN));
}
/// Where word r of lane `lane` sits among a coded chunk's words (section 10.3): the first m words of every lane
/// (m = the smallest lane word count) interleaved, word r of lane l at 32 r + l, so a warp's loads of a round share
/// cache lines; then each lane's words past m, lane after lane (`tail_before`: those of the lanes before it).
ZIPCOMM_HOST_DEVICE constexpr uint32_t lane_word_index(uint32_t r, uint32_t lane, uint32_t m, uint32_t tail_before) {
  return r < m ? r * LANES + lane : m * (LANES - 1) + tail_before + r;
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
ZIPCOMM_HOST_DEVICE bool chunk_range_valid(DType d, const Layout& l, uint64_t c, uint64_t start, uint64_t end,
                                           uint64_t exp_bytes) {
  const bool last = c + 1 == l.num_chunks;
  return start <= end && end <= exp_bytes && start % ALIGN == 0 && end % ALIGN == 0 &&
         end - start <= raw_chunk_bytes(d, l.chunk_elems(c)) && (!last || end == exp_bytes);
}

/// Whether chunk c's low part [start, end) (offsets into a low section of low_bytes) can be valid.
ZIPCOMM_HOST_DEVICE bool low_range_valid(DType d, const Layout& l, uint64_t c, uint64_t start, uint64_t end,
                                         uint64_t low_bytes) {
  const bool last = c + 1 == l.num_chunks;
  return start <= end && end <= low_bytes && start % ALIGN == 0 && end % ALIGN == 0 &&
         end - start <= full_low_chunk_bytes(d, l.chunk_elems(c)) && (!last || end == low_bytes);
}

/// The alignment gaps between sections (zero in every stream): [begin, end) of gap g, g < SECTION_GAPS.
constexpr int SECTION_GAPS = 3;
ZIPCOMM_HOST_DEVICE void section_gap(const Layout& l, int g, uint64_t& begin, uint64_t& end) {
  begin = g == 0 ? l.plane0_offset + l.plane0_bytes : g == 1 ? l.widths_offset + l.widths_bytes
                                                              : l.check_offset + 4 * l.num_chunks;
  end = g == 0 ? l.widths_offset : g == 1 ? l.table_offset : l.low_offset;
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

/// The width-code bits of the positions past the last tile (in the last byte of the widths section) are zero.
ZIPCOMM_HOST_DEVICE bool widths_tail_zero(const uint8_t* stream, const Layout& l) {
  if (l.widths_bytes == 0 || l.num_tiles % 4 == 0) return true;
  return (stream[l.widths_offset + l.widths_bytes - 1] >> (2 * (l.num_tiles % 4))) == 0;
}

/// The chunk size an encoder picks for n elements unless told otherwise: 16384 elements once there are enough
/// chunks to occupy a GPU's warps, smaller ones below (a warp codes a chunk tile after tile, so a short message of
/// long chunks leaves most of the GPU idle). Smaller chunks cost their headers, table entries and lane padding:
/// about 0.004 (8192) and 0.012 (4096) of ratio on bf16, 0.008 and 0.024 on fp8.
ZIPCOMM_HOST_DEVICE constexpr uint32_t default_chunk_log2(uint64_t n) {
  // H100, bf16 encode/decode GB/s (zipcomm_bench --chunk-sweep) in 4096 / 8192 / 16384-element chunks:
  // 16 MiB 402/438, 362/411, 264/272; 128 MiB 769/1141, 873/1156, 791/1123; 256 MiB 820/1272, 980/1275, 1053/1267
  return n >= (uint64_t(1) << 27) ? 14u : n >= (uint64_t(1) << 24) ? 13u : 12u;
}
ZIPCOMM_HOST_DEVICE constexpr bool chunk_log2_valid(uint32_t chunk_log2) {
  return chunk_log2 >= MIN_CHUNK_LOG2 && chunk_log2 <= MAX_CHUNK_LOG2;
}
/// An encoder's chunk_log2 argument as it codes n elements: CHUNK_LOG2_AUTO becomes default_chunk_log2(n).
ZIPCOMM_HOST_DEVICE constexpr uint32_t resolve_chunk_log2(uint32_t chunk_log2, uint64_t n) {
  return chunk_log2 == CHUNK_LOG2_AUTO ? default_chunk_log2(n) : chunk_log2;
}
/// The most chunks a stream of n elements can have (the smallest chunks): for work sized before the stream's
/// header is read.
ZIPCOMM_HOST_DEVICE constexpr uint64_t most_chunks(uint64_t n) { return div_up(n, uint64_t(1) << MIN_CHUNK_LOG2); }

/// Upper bound of the compressed size of n elements in chunks of 2^chunk_log2 (every tile's low bits kept, every
/// chunk raw).
ZIPCOMM_HOST_DEVICE uint64_t max_compressed_bytes(DType dtype, uint64_t n, uint32_t chunk_log2) {
  Layout l = layout_for(dtype, n, chunk_log2);
  uint64_t full = n >> chunk_log2;
  uint32_t tail = static_cast<uint32_t>(n - (full << chunk_log2));
  return l.exp_offset + full * raw_chunk_bytes(dtype, 1u << chunk_log2) + (tail ? raw_chunk_bytes(dtype, tail) : 0);
}
/// The bound for the chunk size an encoder picks by default.
ZIPCOMM_HOST_DEVICE uint64_t max_compressed_bytes(DType dtype, uint64_t n) {
  return max_compressed_bytes(dtype, n, default_chunk_log2(n));
}

ZIPCOMM_HOST_DEVICE uint32_t fnv1a(const uint8_t* p, uint32_t len) {
  uint32_t h = 2166136261u;
  for (uint32_t i = 0; i < len; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

/// The header of a stream of n elements in chunks of 2^chunk_log2 whose low section is low_bytes long.
ZIPCOMM_HOST_DEVICE Header make_header(DType dtype, CodeId code, uint64_t n, uint32_t chunk_log2, uint64_t total_bytes,
                                       uint64_t low_bytes) {
  Layout l = layout_for(dtype, n, chunk_log2, low_bytes);
  Header h{};
  h.magic = MAGIC;
  h.version = VERSION;
  h.dtype = static_cast<uint8_t>(dtype);
  h.code = static_cast<uint8_t>(code);
  h.chunk_log2 = static_cast<uint8_t>(chunk_log2);
  h.num_elements = n;
  h.total_bytes = total_bytes;
  h.table_offset = l.table_offset;
  h.low_offset = l.low_offset;
  h.exp_offset = l.exp_offset;
  h.header_check = fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
  return h;
}

/// The layout a header describes (its low section's length included). Meaningful once the header is valid.
ZIPCOMM_HOST_DEVICE Layout layout_of(const Header& h) {
  return layout_for(static_cast<DType>(h.dtype), h.num_elements, h.chunk_log2, h.exp_offset - h.low_offset);
}

/// Checks everything in a header that can be checked without the rest of the stream. A well-formed header of
/// a version not read (v1 to v4 have the same magic and check) gives unsupported_version, so a reader can say
/// what it saw.
ZIPCOMM_HOST_DEVICE Status validate_header(const Header& h, uint64_t available_bytes) {
  if (h.magic != MAGIC) return Status::bad_header;
  if (fnv1a(reinterpret_cast<const uint8_t*>(&h), 48) != h.header_check) return Status::bad_header;
  if (h.version < OLDEST_READ_VERSION || h.version > VERSION) return Status::unsupported_version;
  if (!dtype_valid(h.dtype) || !code_valid(h.code) || !chunk_log2_valid(h.chunk_log2)) return Status::bad_header;
  if (h.version == 5 && (h.chunk_log2 != MAX_CHUNK_LOG2 || h.code != uint8_t(CodeId::pair))) return Status::bad_header;
  if (h.reserved0 || h.reserved1 || h.reserved2) return Status::bad_header;  // writers zero them
  if (h.num_elements > (uint64_t(1) << 50)) return Status::bad_header;
  Layout l = layout_for(static_cast<DType>(h.dtype), h.num_elements, h.chunk_log2);
  if (h.table_offset != l.table_offset || h.low_offset != l.low_offset || h.exp_offset < l.low_offset ||
      h.exp_offset > l.exp_offset || h.exp_offset % ALIGN)
    return Status::bad_header;
  if (h.total_bytes < h.exp_offset ||
      h.total_bytes > max_compressed_bytes(static_cast<DType>(h.dtype), h.num_elements, h.chunk_log2))
    return Status::bad_header;
  if (h.total_bytes > available_bytes) return Status::corrupt_stream;  // truncated
  return Status::ok;
}

/// One chunk's raw bits, for a reader: plane 0 of its stream (the whole section: plane0_bytes(d, first element)
/// is where a tile's bytes start), the stream's width codes (indexed by tile) and the chunk's low part,
/// `low_bytes` long.
struct ConstPlanes {
  const uint8_t* plane0;
  const uint8_t* widths;
  const uint8_t* low;
  uint32_t low_bytes;
};

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
    layout = layout_of(h);
    exp_bytes = h.total_bytes - layout.exp_offset;
    return section_gaps_zero(in, layout) && widths_tail_zero(in, layout) ? Status::ok : Status::corrupt_stream;
  }
  ZIPCOMM_HOST_DEVICE uint64_t total_bytes() const { return layout.exp_offset + exp_bytes; }
  ZIPCOMM_HOST_DEVICE const uint8_t* plane0() const { return base + layout.plane0_offset; }
  ZIPCOMM_HOST_DEVICE const uint8_t* widths() const { return base + layout.widths_offset; }
  ZIPCOMM_HOST_DEVICE const uint8_t* low() const { return base + layout.low_offset; }
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
    if (!chunk_range_valid(dtype, layout, c, start, end, exp_bytes)) return false;
    p += start;
    bytes = static_cast<uint32_t>(end - start);
    return true;
  }
  /// Chunk c's raw bits for a decoder: plane 0, the width codes and its low part (an empty one when its low
  /// table entries are inconsistent: chunk_low tells).
  ZIPCOMM_HOST_DEVICE ConstPlanes chunk_planes(DType dtype, uint64_t c) const {
    const uint8_t* p;
    uint32_t bytes;
    chunk_low(dtype, c, p, bytes);
    return ConstPlanes{plane0(), widths(), p, bytes};
  }
  /// Chunk c's low part; false (and bytes = 0) when its low table entries are inconsistent. Whether its
  /// length matches its tiles' width codes is for the chunk's decoder to check.
  ZIPCOMM_HOST_DEVICE bool chunk_low(DType dtype, uint64_t c, const uint8_t*& p, uint32_t& bytes) const {
    p = low();
    bytes = 0;
    if (!has_low(dtype)) return true;
    const uint64_t* t = reinterpret_cast<const uint64_t*>(base + layout.low_table_offset);
    const uint64_t start = c ? t[c - 1] : 0, end = t[c];
    if (!low_range_valid(dtype, layout, c, start, end, layout.low_bytes)) return false;
    p += start;
    bytes = static_cast<uint32_t>(end - start);
    return true;
  }
};

}  // namespace format
}  // namespace zipcomm
