// zipcomm quantized message format "ZPQT" v1: constants, header and layout arithmetic (docs/QUANT.md is the
// specification).
//
// LOSSY. This is the opt-in, statistically-lossless quantization tier: a message holds b-bit integer codes
// (b = 2..8) and one set of parameters per group of G elements, from which an approximation of the original
// tensor is rebuilt. It is a format of its own, with its own magic ("ZPQT", not the lossless stream's "ZPCM"),
// so a quantized message can never be mistaken for a lossless stream nor the other way round: each reader
// refuses the other's magic with Status::bad_header.
//
// Everything here is constexpr and host/device compatible (plain C++17, no CUDA needed), so the host reference
// (reference_quant.hpp) and device kernels compute the same offsets by construction.
//
// Layout of a message of n elements (all integers little-endian, every section starts 16-byte aligned):
//
//   [0, 64)                   Header (below)
//   [params_offset, +params)  one parameter record per group, groups in order:
//                               asymmetric: { fp32 scale; fp32 lo; }   8 bytes
//                               symmetric:  { fp32 scale; }            4 bytes
//                             zero padding up to a multiple of 16 bytes
//   [codes_offset, +codes)    the codes, b bits each, LSB-first: the code of element i occupies bits
//                             [i*b, i*b + b) of the section read as a little-endian bit string (bit k of the
//                             section is bit k%8 of byte k/8, equivalently bit k%32 of little-endian 32-bit
//                             word k/32). Groups are contiguous (group g is elements [g*G, g*G + G)).
//                             The section is a whole number of 32-element blocks, b 32-bit words each, padded
//                             to 16 bytes; every bit past element n-1 is zero.
//
// Why 32-element blocks: the codes of 32 consecutive elements starting at a multiple of 32 fill exactly b whole
// 32-bit words (32*b bits), so one warp, one lane per element, writes one block on its own: lane l puts its code
// at bit l*b of the block, word k of the block is the OR of (code_l << (l*b - 32k)) over the lanes that overlap
// it (a right shift when l*b < 32k): one shift and one OR per element and word it touches. For b = 2, 4, 8 no
// code straddles two words. Groups (32, 64 or 128 elements) are whole blocks, so a group's codes start on a
// 32-bit word boundary.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"

namespace zipcomm {
namespace quant {

/// How a group's codes map to values (group_quantizer.hpp gives the exact arithmetic).
enum class QuantMode : uint8_t {
  asymmetric = 1,  ///< x' = lo + code * scale, scale = (hi - lo) / (2^b - 1): 8 bytes of parameters per group
  symmetric = 2,   ///< x' = (code - 2^(b-1)) * scale, scale = max|x| / (2^(b-1) - 1): 4 bytes per group
};

ZIPCOMM_HOST_DEVICE constexpr const char* mode_name(QuantMode m) {
  return m == QuantMode::asymmetric ? "asymmetric" : m == QuantMode::symmetric ? "symmetric" : "?";
}

constexpr uint32_t MAGIC = 0x5451505Au;  // bytes "ZPQT" in memory order (the lossless stream's is "ZPCM")
constexpr uint8_t VERSION = 1;
constexpr uint32_t HEADER_BYTES = 64;
constexpr uint32_t ALIGN = 16;           // section alignment
constexpr uint32_t MIN_BITS = 2, MAX_BITS = 8;
constexpr uint32_t BLOCK_ELEMS = 32;     // codes of 32 consecutive elements fill exactly `bits` 32-bit words
constexpr uint64_t MAX_ELEMENTS = uint64_t(1) << 50;

ZIPCOMM_HOST_DEVICE constexpr bool mode_valid(uint32_t m) { return m == 1 || m == 2; }
/// The original dtypes of a quantized message: bf16, fp16, fp32 (the fp8 dtypes are not quantized further).
ZIPCOMM_HOST_DEVICE constexpr bool original_dtype_valid(uint32_t d) { return d >= 1 && d <= 3; }
ZIPCOMM_HOST_DEVICE constexpr bool bits_valid(uint32_t b) { return b >= MIN_BITS && b <= MAX_BITS; }
ZIPCOMM_HOST_DEVICE constexpr bool group_valid(uint32_t g) { return g == 32 || g == 64 || g == 128; }

/// Bytes of one group's parameter record.
ZIPCOMM_HOST_DEVICE constexpr uint32_t param_bytes(QuantMode m) { return m == QuantMode::asymmetric ? 8u : 4u; }

/// Asymmetric: codes 0 .. asym_max_code(b) = 2^b - 1.
ZIPCOMM_HOST_DEVICE constexpr uint32_t asym_max_code(uint32_t bits) { return (1u << bits) - 1u; }
/// Symmetric: the code of zero (the offset added to the signed level).
ZIPCOMM_HOST_DEVICE constexpr uint32_t sym_mid(uint32_t bits) { return 1u << (bits - 1u); }
/// Symmetric: signed levels -q .. q with q = 2^(b-1) - 1, i.e. codes 1 .. 2^b - 1. Code 0 marks an element of a
/// constant group (its value is the group's scale field: group_quantizer.hpp).
ZIPCOMM_HOST_DEVICE constexpr uint32_t sym_max_level(uint32_t bits) { return sym_mid(bits) - 1u; }

/// Bits per element in a message, parameters included (the codes' b plus the per-group records).
ZIPCOMM_HOST_DEVICE constexpr double bits_per_element(QuantMode m, uint32_t bits, uint32_t group) {
  return double(bits) + 8.0 * double(param_bytes(m)) / double(group);
}

/// Fixed part of a message (64 bytes, little-endian).
struct Header {
  uint32_t magic;          // MAGIC
  uint8_t version;         // VERSION
  uint8_t dtype;           // DType of the original (and of the dequantized) tensor
  uint8_t bits;            // b, 2..8
  uint8_t mode;            // QuantMode
  uint32_t group_size;     // G: 32, 64 or 128
  uint32_t reserved0;      // zero
  uint64_t num_elements;   // n
  uint64_t total_bytes;    // the whole message, header included (== layout_for(...).total_bytes)
  uint64_t params_offset;  // byte offsets from the start of the message
  uint64_t codes_offset;
  uint32_t header_check;   // FNV-1a over bytes [0, 48) of the header
  uint32_t reserved1;      // zero
  uint32_t reserved2;      // zero
  uint32_t reserved3;      // zero
};
static_assert(sizeof(Header) == HEADER_BYTES, "quantized message header is 64 bytes");
static_assert(offsetof(Header, num_elements) == 16 && offsetof(Header, header_check) == 48, "header layout");

/// Where each section of a message lives. Depends only on (mode, bits, group, n): the size of a message is known
/// before any data is seen.
struct Layout {
  uint64_t n = 0;
  uint32_t bits = 0, group = 0;
  QuantMode mode = QuantMode::asymmetric;
  uint64_t num_groups = 0;    // ceil(n / G); the last one may be partial
  uint64_t num_blocks = 0;    // ceil(n / 32)
  uint64_t params_offset = 0, params_bytes = 0;  // params_bytes: num_groups * param_bytes, before padding
  uint64_t codes_offset = 0, codes_bytes = 0;    // codes_bytes: num_blocks * 4 * bits, before padding
  uint64_t total_bytes = 0;
};

ZIPCOMM_HOST_DEVICE constexpr Layout layout_for(QuantMode mode, uint32_t bits, uint32_t group, uint64_t n) {
  Layout l{};
  l.n = n;
  l.bits = bits;
  l.group = group;
  l.mode = mode;
  l.num_groups = group ? format::div_up(n, group) : 0;
  l.num_blocks = format::div_up(n, BLOCK_ELEMS);
  l.params_offset = HEADER_BYTES;
  l.params_bytes = l.num_groups * param_bytes(mode);
  l.codes_offset = format::align_up(l.params_offset + l.params_bytes, ALIGN);
  l.codes_bytes = l.num_blocks * 4u * bits;
  l.total_bytes = format::align_up(l.codes_offset + l.codes_bytes, ALIGN);
  return l;
}

/// Size of a message of n elements: exact (every message of these parameters has this size). 0 for invalid
/// parameters.
ZIPCOMM_HOST_DEVICE constexpr uint64_t max_quantized_bytes(QuantMode mode, uint32_t bits, uint32_t group,
                                                           uint64_t n) {
  return mode_valid(uint32_t(mode)) && bits_valid(bits) && group_valid(group) && n <= MAX_ELEMENTS
             ? layout_for(mode, bits, group, n).total_bytes
             : 0;
}

/// Elements in group g (the last group of a message may hold fewer than G).
ZIPCOMM_HOST_DEVICE constexpr uint32_t group_elems(uint64_t n, uint32_t group, uint64_t g) {
  const uint64_t first = g * group;
  const uint64_t left = n > first ? n - first : 0;
  return static_cast<uint32_t>(left < group ? left : group);
}

/// Where element i's code starts: 32-bit word `word` of the codes section, bit `shift` of it. The code straddles
/// into word + 1 when shift + bits > 32 (never for b = 2, 4, 8).
struct CodePos {
  uint64_t word;
  uint32_t shift;
};
ZIPCOMM_HOST_DEVICE constexpr CodePos code_pos(uint64_t i, uint32_t bits) {
  const uint64_t bit = i * bits;
  return CodePos{bit / 32u, static_cast<uint32_t>(bit % 32u)};
}

/// The padding of a message (zero in every valid message): [begin, end) of gap g, g < SECTION_GAPS. Gap 0 is
/// after the parameter records, gap 1 after the last 32-element block of codes. The unused code bits inside the
/// last block (elements n .. 32*num_blocks - 1) are zero too: readers check them separately.
constexpr int SECTION_GAPS = 2;
ZIPCOMM_HOST_DEVICE constexpr void section_gap(const Layout& l, int g, uint64_t& begin, uint64_t& end) {
  begin = g == 0 ? l.params_offset + l.params_bytes : l.codes_offset + l.codes_bytes;
  end = g == 0 ? l.codes_offset : l.total_bytes;
}

/// FNV-1a over bytes [0, 48) of a header, as the header stores it.
ZIPCOMM_HOST_DEVICE uint32_t header_check_of(const Header& h) {
  return format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
}
/// h with its header_check recomputed (for writers, and for tests that change a field on purpose).
ZIPCOMM_HOST_DEVICE Header seal_header(Header h) {
  h.header_check = header_check_of(h);
  return h;
}

/// The header of a message of n elements of `dtype` quantized with (mode, bits, group).
ZIPCOMM_HOST_DEVICE Header make_header(DType dtype, QuantMode mode, uint32_t bits, uint32_t group, uint64_t n) {
  const Layout l = layout_for(mode, bits, group, n);
  Header h{};
  h.magic = MAGIC;
  h.version = VERSION;
  h.dtype = static_cast<uint8_t>(dtype);
  h.bits = static_cast<uint8_t>(bits);
  h.mode = static_cast<uint8_t>(mode);
  h.group_size = group;
  h.num_elements = n;
  h.total_bytes = l.total_bytes;
  h.params_offset = l.params_offset;
  h.codes_offset = l.codes_offset;
  return seal_header(h);
}

/// Checks everything in a header that can be checked without the rest of the message; `available_bytes` is how
/// many bytes of the message the reader holds. bad_header: wrong magic (a lossless "ZPCM" stream included),
/// check, field or size; unsupported_version: a well-formed header of another version; corrupt_stream: the
/// message is truncated.
ZIPCOMM_HOST_DEVICE Status validate_header(const Header& h, uint64_t available_bytes) {
  if (h.magic != MAGIC) return Status::bad_header;
  if (header_check_of(h) != h.header_check) return Status::bad_header;
  if (h.version != VERSION) return Status::unsupported_version;
  if (!original_dtype_valid(h.dtype) || !bits_valid(h.bits) || !mode_valid(h.mode) || !group_valid(h.group_size))
    return Status::bad_header;
  if (h.reserved0 || h.reserved1 || h.reserved2 || h.reserved3) return Status::bad_header;  // writers zero them
  if (h.num_elements > MAX_ELEMENTS) return Status::bad_header;
  const Layout l = layout_for(static_cast<QuantMode>(h.mode), h.bits, h.group_size, h.num_elements);
  if (h.params_offset != l.params_offset || h.codes_offset != l.codes_offset || h.total_bytes != l.total_bytes)
    return Status::bad_header;
  if (h.total_bytes > available_bytes) return Status::corrupt_stream;  // truncated
  return Status::ok;
}

// ---- compile-time checks of the layout arithmetic --------------------------------------------------------------
static_assert(layout_for(QuantMode::asymmetric, 4, 64, 0).total_bytes == HEADER_BYTES, "empty message");
static_assert(layout_for(QuantMode::asymmetric, 4, 64, 64).total_bytes == 64 + 16 + 32, "one group");
static_assert(layout_for(QuantMode::symmetric, 3, 32, 33).codes_offset == 64 + 16, "params padded to 16");
static_assert(layout_for(QuantMode::symmetric, 3, 32, 33).total_bytes == 64 + 16 + 32, "two 12-byte blocks -> 32");
static_assert(code_pos(11, 3).word == 1 && code_pos(11, 3).shift == 1, "element 11 of b = 3 starts at bit 33");
static_assert(bits_per_element(QuantMode::asymmetric, 4, 64) == 5.0, "4 + 64/64");

}  // namespace quant
}  // namespace zipcomm
