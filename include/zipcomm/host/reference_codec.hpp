// Host reference encoder and decoder for the wire format (plain C++; no CUDA needed).
//
// It codes one lane's stream at a time, element by element, so it writes exactly the bytes the device code
// writes. Tests use it as the oracle, and it lets a CPU read what a GPU wrote. Chunks are independent, so a call
// may spread them over threads; the bytes and the status do not depend on how many.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../format.hpp"
#include "chunk_parts.hpp"
#include "reference_chunk_code.hpp"
#include "element_bits.hpp"
#include "../thread/chunk_check.hpp"
#include "../thread/fixed_code.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/float_bits.hpp"

namespace zipcomm {
namespace host {

using format::Header;
using format::Layout;

namespace detail {

/// Writes `planes` bit-planes of one tile's values[0..valid) into out (planes * 32 bytes, already zero): plane j
/// holds bit (planes - 1 - j) of each value; in a plane, byte = lane, bit = item (the fp16 low bits, the fp8
/// plane 0).
static_assert(format::ITEMS_PER_LANE == 8, "a bit-plane holds one byte per lane");
inline void put_bit_planes(const uint32_t* values, uint32_t valid, uint32_t planes, uint8_t* out) {
  for (uint32_t j = 0; j < planes; ++j)
    for (uint32_t lane = 0; lane * format::ITEMS_PER_LANE < valid; ++lane) {
      uint32_t byte = 0;
      for (uint32_t i = 0; i < format::ITEMS_PER_LANE; ++i) {
        const uint32_t k = lane * format::ITEMS_PER_LANE + i;
        if (k < valid) byte |= ((values[k] >> (planes - 1 - j)) & 1u) << i;
      }
      out[j * format::LANES + lane] |= uint8_t(byte);
    }
}

/// ORs the values of put_bit_planes' layout into values[0..valid); false if a bit that no element owns is set.
inline bool get_bit_planes(const uint8_t* in, uint32_t valid, uint32_t planes, uint32_t* values) {
  for (uint32_t j = 0; j < planes; ++j)
    for (uint32_t lane = 0; lane < format::LANES; ++lane) {
      const uint32_t byte = in[j * format::LANES + lane], first = lane * format::ITEMS_PER_LANE;
      const uint32_t owned = first >= valid                                     ? 0u
                             : valid - first >= uint32_t(format::ITEMS_PER_LANE) ? 0xFFu
                                                                                 : (1u << (valid - first)) - 1u;
      if (byte & ~owned) return false;
      for (uint32_t i = 0; first + i < valid && i < format::ITEMS_PER_LANE; ++i)
        values[first + i] |= ((byte >> i) & 1u) << (planes - 1 - j);
    }
  return true;
}

/// Elements [first, first + elems) of the input (first: a chunk's first element) as bits, and their plane 0 in
/// the stream (fp8: bit-planes per tile, the stream's bytes already zero).
template <DType D>
inline void split_plane0(const uint8_t* src, uint8_t* stream, const Layout& l, uint32_t* bits, uint64_t first,
                         uint32_t elems) {
  using FB = thread::FloatBits<D>;
  for (uint32_t k = 0; k < elems; ++k) bits[k] = load_bits<D>(src, first + k);
  if constexpr (format::plane0_bit_planes(D)) {
    uint32_t values[format::TILE_ELEMS];
    for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
      const uint32_t v = format::tile_valid_count(elems, t);
      for (uint32_t k = 0; k < v; ++k) values[k] = FB::plane0(bits[t * format::TILE_ELEMS + k]);
      put_bit_planes(values, v, format::plane0_planes(D),
                     stream + l.plane0_offset + format::plane0_bytes(D, first + uint64_t(t) * format::TILE_ELEMS));
    }
  } else {
    for (uint32_t k = 0; k < elems; ++k)
      stream[l.plane0_offset + first + k] = static_cast<uint8_t>(FB::plane0(bits[k]));
  }
}

/// The width code of one tile (bits[0..valid)) under `widths`.
template <DType D>
inline uint32_t tile_low_code(const uint32_t* bits, uint32_t valid, format::LowWidths widths) {
  uint32_t low_or = 0;
  for (uint32_t k = 0; k < valid; ++k) low_or |= thread::FloatBits<D>::low(bits[k]);
  return widths == format::LowWidths::full ? 0u : thread::low_code_for<D>(low_or);
}

/// Writes one tile's low part at width `code` into out (low_tile_bytes of it, already zero).
template <DType D>
inline void put_low_tile(const uint32_t* bits, uint32_t valid, uint32_t code, uint8_t* out) {
  const uint32_t stored = format::low_stored_bits(D, code);
  for (uint32_t k = 0; k < valid; ++k) {
    const uint32_t low = thread::FloatBits<D>::low(bits[k]);
    if (D == DType::fp32 && stored == 16) out[2 * k] = uint8_t(low), out[2 * k + 1] = uint8_t(low >> 8);
    if (D == DType::fp32 && stored == 8) out[k] = uint8_t(low >> 8);
  }
  if (D == DType::fp16 && stored == 3) {  // three bit-planes: plane j holds mantissa bit 2 - j
    uint32_t lows[format::TILE_ELEMS];
    for (uint32_t k = 0; k < valid; ++k) lows[k] = thread::FloatBits<D>::low(bits[k]);
    put_bit_planes(lows, valid, 3, out);
  }
}

/// ORs one tile's low bits (width `code`, `valid` elements) into bits; false if a byte or bit that no element
/// owns is not zero, or if an fp32 tile at the 8-bit width stores only zeros (no writer makes one: it would
/// let a flipped width code go unseen in a short tile, where both widths take 16 bytes).
template <DType D>
inline bool get_low_tile(const uint8_t* in, uint32_t valid, uint32_t code, uint32_t* bits) {
  const uint32_t stored = format::low_stored_bits(D, code), bytes = format::low_tile_bytes(D, code, valid);
  if (D == DType::fp32 && stored) {
    const uint32_t per = stored / 8;
    uint32_t any = 0;
    for (uint32_t k = 0; k < valid; ++k) {
      bits[k] |= per == 2 ? uint32_t(in[2 * k]) | uint32_t(in[2 * k + 1]) << 8 : uint32_t(in[k]) << 8;
      any |= in[k];
    }
    if (per == 1 && !any) return false;
    for (uint32_t b = valid * per; b < bytes; ++b)
      if (in[b]) return false;
  }
  if (D == DType::fp16 && stored) return get_bit_planes(in, valid, 3, bits);
  return true;
}

/// Picks the low-bit width code of each tile of chunks [first, last) into codes[] and adds up each chunk's low
/// bytes into low_bytes[c]. (Functions of their own, the layout by value: in lambdas capturing by reference each
/// byte stored made the compiler reload what they captured, 5-10% slower on one thread.)
template <DType D>
inline void pick_low_codes(const uint8_t* src, const Layout l, format::LowWidths widths, uint64_t first,
                           uint64_t last, uint8_t* codes, uint64_t* low_bytes) {
  std::vector<uint32_t> chunk_bits(format::MAX_CHUNK_ELEMS);
  for (uint64_t c = first; c < last; ++c) {
    const uint32_t elems = l.chunk_elems(c);
    for (uint32_t k = 0; k < elems; ++k) chunk_bits[k] = load_bits<D>(src, (c << l.chunk_log2) + k);
    uint64_t bytes = 0;
    for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
      const uint32_t v = format::tile_valid_count(elems, t);
      const uint32_t code = tile_low_code<D>(chunk_bits.data() + t * format::TILE_ELEMS, v, widths);
      codes[l.chunk_first_tile(c) + t] = uint8_t(code);
      bytes += format::low_tile_bytes(D, code, v);
    }
    low_bytes[c] = bytes;
  }
}

/// Writes chunks [first, last): plane 0, width codes, low parts, low table and checks into the stream at dst,
/// the exponent streams one after another from exp_out on, and their lengths into exp_len[c].
template <DType D, class Code>
inline void encode_chunks(const uint8_t* src, const Layout l, const uint8_t* codes, const uint64_t* low_end,
                          uint64_t first, uint64_t last, uint8_t* dst, uint8_t* exp_out, uint64_t* exp_len) {
  std::vector<uint32_t> chunk_bits(format::MAX_CHUNK_ELEMS);
  for (uint64_t c = first; c < last; ++c) {
    const uint32_t elems = l.chunk_elems(c);
    split_plane0<D>(src, dst, l, chunk_bits.data(), c << l.chunk_log2, elems);
    uint64_t low_at = l.low_offset + (c ? low_end[c - 1] : 0);
    for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
      const uint64_t tile = l.chunk_first_tile(c) + t;
      const uint32_t v = format::tile_valid_count(elems, t);
      if (format::has_low(D)) dst[l.widths_offset + tile / 4] |= uint8_t(codes[tile] << (2 * (tile % 4)));
      put_low_tile<D>(chunk_bits.data() + t * format::TILE_ELEMS, v, codes[tile], dst + low_at);
      low_at += format::low_tile_bytes(D, codes[tile], v);
    }
    if (format::has_low(D)) std::memcpy(dst + l.low_table_offset + 8 * c, &low_end[c], 8);
    exp_len[c] = encode_chunk<D, Code>(chunk_bits.data(), elems, exp_out);
    exp_out += exp_len[c];
    put_u32(dst + l.check_offset + 4 * c, thread::chunk_check<D>(chunk_bits.data(), elems));
  }
}

template <DType D, class Code>
inline Status compress_typed(const uint8_t* src, uint64_t n, uint8_t* dst, uint64_t capacity, uint64_t* out_bytes,
                             format::LowWidths widths, uint32_t chunk_log2, unsigned threads) {
  const uint64_t bound = format::max_compressed_bytes(D, n, chunk_log2);
  if (capacity < bound) return Status::buffer_too_small;  // the stream may need every byte of the bound
  // The low section's length comes first: it sets where the exponent section starts.
  const Layout fixed = format::layout_for(D, n, chunk_log2);
  std::vector<uint8_t> codes(fixed.num_tiles);
  std::vector<uint64_t> low_end(fixed.num_chunks);  // each chunk's low bytes, then their running sum
  const uint64_t parts = part_count(fixed.num_chunks, threads);  // the same chunks in both passes
  for_each_part(fixed.num_chunks, parts, [&](uint64_t, uint64_t first, uint64_t last) {
    pick_low_codes<D>(src, fixed, widths, first, last, codes.data(), low_end.data());
  });
  uint64_t low_bytes = 0;
  for (uint64_t& e : low_end) e = low_bytes += e;
  const Layout l = format::layout_for(D, n, chunk_log2, low_bytes);
  std::memset(dst, 0, l.exp_offset);
  // Part 0's exponent streams go straight to their place; the other parts' wait in buffers of their own until
  // the lengths before them are known. A part's chunks share a byte of tile width codes with no other part's:
  // a chunk holds a multiple of 4 tiles.
  std::vector<uint64_t> exp_len(l.num_chunks);
  std::vector<std::vector<uint8_t>> held(parts);
  for_each_part(l.num_chunks, parts, [&](uint64_t part, uint64_t first, uint64_t last) {
    uint8_t* exp_out = dst + l.exp_offset;
    if (part) {
      uint64_t most = 0;
      for (uint64_t c = first; c < last; ++c) most += format::raw_chunk_bytes(D, l.chunk_elems(c));
      held[part].resize(most);
      exp_out = held[part].data();
    }
    encode_chunks<D, Code>(src, l, codes.data(), low_end.data(), first, last, dst, exp_out, exp_len.data());
  });
  uint64_t exp_pos = 0;
  for (uint64_t part = 0, c = 0; part < parts; ++part) {
    const uint64_t part_start = exp_pos, last = part_begin(l.num_chunks, parts, part + 1);
    for (; c < last; ++c) {
      exp_pos += exp_len[c];
      std::memcpy(dst + l.table_offset + 8 * c, &exp_pos, 8);
    }
    if (part) std::memcpy(dst + l.exp_offset + part_start, held[part].data(), exp_pos - part_start);
  }
  const uint64_t total = l.exp_offset + exp_pos;
  Header h = format::make_header(D, Code::ID, n, chunk_log2, total, low_bytes);
  std::memcpy(dst, &h, sizeof h);
  *out_bytes = total;
  return Status::ok;
}

/// Chunk c's elements without their exponents: plane 0 and the low parts of its tiles, checked against the
/// width codes, the low table and the zero padding.
template <DType D>
inline Status merge_planes(const uint8_t* stream, const Layout& l, uint64_t c, uint32_t elems, uint32_t* bits) {
  using FB = thread::FloatBits<D>;
  if constexpr (format::plane0_bit_planes(D)) {
    for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
      uint32_t values[format::TILE_ELEMS] = {};
      const uint32_t v = format::tile_valid_count(elems, t);
      const uint64_t first = (c << l.chunk_log2) + uint64_t(t) * format::TILE_ELEMS;
      if (!get_bit_planes(stream + l.plane0_offset + format::plane0_bytes(D, first), v, format::plane0_planes(D),
                          values))
        return Status::corrupt_stream;  // a short last tile's padding bits are zero
      for (uint32_t k = 0; k < v; ++k) bits[t * format::TILE_ELEMS + k] = FB::assemble(0, values[k], 0);
    }
  } else {
    for (uint32_t k = 0; k < elems; ++k)
      bits[k] = FB::assemble(0, stream[l.plane0_offset + (c << l.chunk_log2) + k], 0);
  }
  if (!format::has_low(D)) return Status::ok;
  const uint64_t start = c ? get_u64(stream + l.low_table_offset + 8 * (c - 1)) : 0;
  const uint64_t end = get_u64(stream + l.low_table_offset + 8 * c);
  if (!format::low_range_valid(D, l, c, start, end, l.low_bytes)) return Status::corrupt_stream;
  uint64_t at = start;
  for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
    const uint64_t tile = l.chunk_first_tile(c) + t;
    const uint32_t code = (stream[l.widths_offset + tile / 4] >> (2 * (tile % 4))) & 3u;
    const uint32_t v = format::tile_valid_count(elems, t);
    if (code >= format::low_code_count(D)) return Status::corrupt_stream;
    const uint32_t bytes = format::low_tile_bytes(D, code, v);
    if (at + bytes > end) return Status::corrupt_stream;
    if (!get_low_tile<D>(stream + l.low_offset + at, v, code, bits + t * format::TILE_ELEMS))
      return Status::corrupt_stream;
    at += bytes;
  }
  return at == end ? Status::ok : Status::corrupt_stream;
}

/// Decodes chunks [first, last) into dst; stops at the first bad one.
template <DType D, class Code>
inline Status decode_chunks(const uint8_t* src, const Layout l, uint64_t exp_bytes, uint64_t first, uint64_t last,
                            uint8_t* dst) {
  std::vector<uint32_t> chunk_bits(format::MAX_CHUNK_ELEMS);
  for (uint64_t c = first; c < last; ++c) {
    const uint64_t start = c ? get_u64(src + l.table_offset + 8 * (c - 1)) : 0;
    const uint64_t end = get_u64(src + l.table_offset + 8 * c);
    if (!format::chunk_range_valid(D, l, c, start, end, exp_bytes)) return Status::corrupt_stream;
    const uint32_t elems = l.chunk_elems(c);
    Status s = merge_planes<D>(src, l, c, elems, chunk_bits.data());
    if (s != Status::ok) return s;
    s = decode_chunk<D, Code>(src + l.exp_offset + start, uint32_t(end - start), elems, chunk_bits.data());
    if (s != Status::ok) return s;
    if (thread::chunk_check<D>(chunk_bits.data(), elems) != get_u32(src + l.check_offset + 4 * c))
      return Status::checksum_mismatch;
    for (uint32_t k = 0; k < elems; ++k) store_bits<D>(dst, (c << l.chunk_log2) + k, chunk_bits[k]);
  }
  return Status::ok;
}

template <DType D, class Code>
inline Status decompress_typed(const uint8_t* src, const Header& h, uint8_t* dst, unsigned threads) {
  const Layout l = format::layout_of(h);
  const uint64_t exp_bytes = h.total_bytes - l.exp_offset;
  if (!format::section_gaps_zero(src, l) || !format::widths_tail_zero(src, l)) return Status::corrupt_stream;
  // Each part stops at its first bad chunk; the first part's failure is the one a single thread would meet.
  const uint64_t parts = part_count(l.num_chunks, threads);
  std::vector<Status> failed(parts, Status::ok);
  for_each_part(l.num_chunks, parts, [&](uint64_t part, uint64_t first, uint64_t last) {
    failed[part] = decode_chunks<D, Code>(src, l, exp_bytes, first, last, dst);
  });
  for (Status s : failed)
    if (s != Status::ok) return s;
  // Every chunk's range was checked against the next; an empty stream must have no exponent bytes either.
  if (l.num_chunks == 0 && exp_bytes != 0) return Status::corrupt_stream;
  return Status::ok;
}

}  // namespace detail

/// Reads and validates the header of a stream of `bytes` bytes.
inline Status read_header(const void* src, uint64_t bytes, Header* out) {
  if (!src || !out) return Status::invalid_argument;
  if (bytes < format::HEADER_BYTES) return Status::corrupt_stream;
  std::memcpy(out, src, sizeof(Header));
  return format::validate_header(*out, bytes);
}

/// Compresses n elements of `dtype` (raw bits at src, any alignment) into dst, in chunks of 2^chunk_log2 elements
/// (12..14; CHUNK_LOG2_AUTO: format::default_chunk_log2(n), as device::compress). dst_capacity must be at least
/// format::max_compressed_bytes(dtype, n, chunk_log2). `widths`: minimal writes the bytes of device::compress,
/// full those of the fused and block-level writers. `threads`: how many threads may code chunks (0: one per
/// hardware thread); the bytes are the same for any number.
inline Status compress(DType dtype, CodeId code, const void* src, uint64_t n, void* dst, uint64_t dst_capacity,
                       uint64_t* out_bytes, format::LowWidths widths = format::LowWidths::minimal,
                       uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO, unsigned threads = 1) {
  chunk_log2 = format::resolve_chunk_log2(chunk_log2, n);
  if ((!src && n) || !dst || !out_bytes || !dtype_valid(uint8_t(dtype)) || !code_valid(uint8_t(code)) ||
      !format::chunk_log2_valid(chunk_log2))
    return Status::invalid_argument;
  auto s = static_cast<const uint8_t*>(src);
  auto d = static_cast<uint8_t*>(dst);
  return thread::visit_codec(dtype, code, Status::invalid_argument, [&](auto dt, auto c) {
    return detail::compress_typed<decltype(dt)::value, decltype(c)>(s, n, d, dst_capacity, out_bytes, widths,
                                                                     chunk_log2, threads);
  });
}

/// Decompresses a stream of src_bytes bytes into dst (capacity dst_bytes; must hold n * element size), on up to
/// `threads` threads (0: one per hardware thread); the status is the same for any number.
inline Status decompress(const void* src, uint64_t src_bytes, void* dst, uint64_t dst_bytes, unsigned threads = 1) {
  Header h;
  Status st = read_header(src, src_bytes, &h);
  if (st != Status::ok) return st;
  const DType dtype = static_cast<DType>(h.dtype);
  if (dst_bytes < h.num_elements * format::elem_bytes(dtype)) return Status::buffer_too_small;
  if (!dst && h.num_elements) return Status::invalid_argument;
  auto s = static_cast<const uint8_t*>(src);
  auto d = static_cast<uint8_t*>(dst);
  return thread::visit_codec(dtype, static_cast<CodeId>(h.code), Status::bad_header, [&](auto dt, auto c) {
    return detail::decompress_typed<decltype(dt)::value, decltype(c)>(s, h, d, threads);
  });
}

}  // namespace host
}  // namespace zipcomm
