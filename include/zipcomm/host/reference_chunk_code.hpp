// Host reference of one chunk's exponent section in each code (pair, fixed, raw), element by element: the bytes the
// device's warp encoders write and the checks its decoders make. reference_codec.hpp builds whole streams on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../format.hpp"
#include "../thread/fixed_code.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/float_bits.hpp"

namespace zipcomm {
namespace host {
namespace detail {

inline void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

/// Anchor (largest exponent) and fraction bucket of each tile of a chunk.
template <DType D>
inline void tile_scales(const uint32_t* bits, uint32_t elems, uint32_t tiles, uint8_t* anchors, uint8_t* fracs) {
  using FB = thread::FloatBits<D>;
  for (uint32_t t = 0; t < tiles; ++t) {
    uint32_t mx = 0;
    for (uint32_t k = t * format::TILE_ELEMS; k < elems && k < (t + 1) * format::TILE_ELEMS; ++k) {
      uint32_t m = FB::magnitude(bits[k]);
      mx = m > mx ? m : mx;
    }
    anchors[t] = static_cast<uint8_t>(mx >> FB::MANT_BITS);
    fracs[t] = static_cast<uint8_t>(thread::fraction_of<D>(mx));
  }
}

/// Exponents of one chunk stored raw: packed LSB-first, EXP_BITS each.
template <DType D>
inline uint32_t store_raw_chunk(const uint32_t* bits, uint32_t elems, uint8_t* out) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = FB::EXP_BITS;
  const uint32_t bytes = format::raw_chunk_bytes(D, elems);
  std::memset(out, 0, bytes);
  for (uint32_t k = 0; k < elems; ++k) {
    const uint32_t e = FB::exponent(bits[k]);
    const uint64_t bitpos = uint64_t(k) * EB;
    for (uint32_t b = 0; b < EB; ++b)
      if ((e >> b) & 1u) out[(bitpos + b) >> 3] |= uint8_t(1u << ((bitpos + b) & 7));
  }
  return bytes;
}

/// One lane's stream: bits appended MSB-first into 32-bit words.
struct LaneBitWriter {
  std::vector<uint32_t> words;
  uint64_t nbits = 0;
  /// Appends the len (0..32) low bits of value, MSB first.
  void push(uint32_t value, uint32_t len) {
    if (len == 0) return;
    const uint32_t used = uint32_t(nbits & 31);
    const uint64_t bits = uint64_t(value) << (64 - len);  // left-aligned; bits above len fall off
    if (used == 0) words.push_back(0);
    words.back() |= uint32_t(bits >> (32 + used));
    if (used + len > 32) words.push_back(uint32_t((bits << (32 - used)) >> 32));
    nbits += len;
  }
};

/// Reads one lane's stream (its words where format::lane_word_index puts them); reading past its words fails.
struct LaneBitReader {
  const uint8_t* words = nullptr;  // the chunk's words
  uint32_t lane = 0, interleaved = 0, tail_before = 0;
  uint32_t count = 0;
  uint64_t pos = 0;
  uint32_t word(uint64_t r) const {
    return get_u32(words + 4 * format::lane_word_index(uint32_t(r), lane, interleaved, tail_before));
  }
  bool read(uint32_t len, uint32_t& value) {
    value = 0;
    if (pos + len > uint64_t(count) * 32) return false;
    value = bits_at(pos, len);
    pos += len;
    return true;
  }
  /// The next `len` bits without consuming them (zeros past the end).
  uint32_t peek(uint32_t len) const { return bits_at(pos, len); }

 private:
  // len (0..32) bits from bit p on, MSB first; zeros past the lane's words.
  uint32_t bits_at(uint64_t p, uint32_t len) const {
    if (len == 0) return 0;
    const uint64_t r = p >> 5;
    const uint64_t hi = r < count ? word(r) : 0u, lo = r + 1 < count ? word(r + 1) : 0u;
    return uint32_t(((hi << 32 | lo) << (p & 31)) >> (64 - len));
  }
};

/// Encodes the exponents of one chunk (bits[0..elems)) in the pair code into `out` (capacity raw_chunk_bytes).
/// Returns bytes.
template <DType D, class Code>
inline uint32_t encode_pair_chunk(const uint32_t* bits, uint32_t elems, uint8_t* out) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = FB::EXP_BITS;
  const uint32_t tiles = format::chunk_tiles(elems);
  const uint32_t hdr = format::chunk_header_bytes(tiles);
  uint8_t anchors[format::MAX_CHUNK_TILES], fracs[format::MAX_CHUNK_TILES];
  tile_scales<D>(bits, elems, tiles, anchors, fracs);

  LaneBitWriter lanes[format::LANES];
  for (uint32_t l = 0; l < format::LANES; ++l)
    for (uint32_t t = 0; t < tiles; ++t) {
      const uint32_t a = anchors[t], cnt = format::lane_valid_count(elems, t, l);
      if (a == 0) continue;
      for (uint32_t p = 0; 2 * p < cnt; ++p) {
        uint32_t e[2] = {0, 0}, s[2] = {Code::ZERO, Code::ZERO};  // an item past the end codes as ZERO
        for (uint32_t j = 0; j < 2; ++j)
          if (2 * p + j < cnt) {
            e[j] = FB::exponent(bits[t * format::TILE_ELEMS + l * format::ITEMS_PER_LANE + 2 * p + j]);
            s[j] = Code::symbol_of(e[j], a);
          }
        const uint32_t entry = thread::PAIR_TABLES.encode[fracs[t]][s[0] * Code::NUM_SYMBOLS + s[1]];
        lanes[l].push(entry & ((1u << Code::ENCODE_LEN_SHIFT) - 1u), entry >> Code::ENCODE_LEN_SHIFT);
        for (uint32_t j = 0; j < 2; ++j)
          if (s[j] == Code::ESC) lanes[l].push(e[j], EB);
      }
    }
  uint32_t words = 0, max_lane = 0;
  for (const LaneBitWriter& w : lanes) {
    words += uint32_t(w.words.size());
    max_lane = w.words.size() > max_lane ? uint32_t(w.words.size()) : max_lane;
  }
  if (!format::chunk_stays_coded(D, elems, words, max_lane)) return store_raw_chunk<D>(bits, elems, out);

  const uint32_t bytes = format::coded_chunk_bytes(tiles, words);
  std::memset(out, 0, bytes);
  for (uint32_t t = 0; t < tiles; ++t) {
    out[t] = anchors[t];
    out[tiles + t / 4] |= uint8_t(fracs[t] << (2 * (t % 4)));
  }
  uint32_t interleaved = max_lane, tail_before = 0;  // the smallest lane word count
  for (const LaneBitWriter& w : lanes) interleaved = w.words.size() < interleaved ? uint32_t(w.words.size()) : interleaved;
  for (uint32_t l = 0; l < format::LANES; ++l) {
    out[format::lane_counts_offset(tiles) + l] = uint8_t(lanes[l].words.size());
    for (uint32_t r = 0; r < lanes[l].words.size(); ++r)
      put_u32(out + hdr + 4 * format::lane_word_index(r, l, interleaved, tail_before), lanes[l].words[r]);
    tail_before += uint32_t(lanes[l].words.size()) - interleaved;
  }
  return bytes;
}

/// ORs the exponents of a raw chunk into bits (planes already in place); false if a padding bit is set.
template <DType D>
inline bool decode_raw_chunk(const uint8_t* in, uint32_t bytes, uint32_t elems, uint32_t* bits) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = FB::EXP_BITS;
  for (uint32_t k = 0; k < elems; ++k) {
    uint64_t bitpos = uint64_t(k) * EB;
    uint32_t e = 0;
    for (uint32_t b = 0; b < EB; ++b) e |= uint32_t((in[(bitpos + b) >> 3] >> ((bitpos + b) & 7)) & 1u) << b;
    bits[k] |= FB::assemble(e, 0, 0);
  }
  for (uint64_t b = uint64_t(elems) * EB; b < uint64_t(bytes) * 8; ++b)
    if ((in[b >> 3] >> (b & 7)) & 1u) return false;
  return true;
}

/// Decodes the exponents of one pair-coded chunk; `bits` holds the raw planes already merged with zero exponents.
template <DType D, class Code>
inline Status decode_pair_chunk(const uint8_t* in, uint32_t bytes, uint32_t elems, uint32_t* bits) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = FB::EXP_BITS;
  const uint32_t tiles = format::chunk_tiles(elems);
  const uint32_t raw_bytes = format::raw_chunk_bytes(D, elems);
  if (bytes == raw_bytes) return decode_raw_chunk<D>(in, bytes, elems, bits) ? Status::ok : Status::corrupt_stream;
  const uint32_t hdr = format::chunk_header_bytes(tiles), counts = format::lane_counts_offset(tiles);
  if (bytes > raw_bytes || bytes < hdr || bytes % format::ALIGN) return Status::corrupt_stream;
  if (tiles % 4 && (in[tiles + tiles / 4] >> (2 * (tiles % 4)))) return Status::corrupt_stream;
  for (uint32_t b = counts + format::LANES; b < hdr; ++b)
    if (in[b]) return Status::corrupt_stream;
  uint32_t words = 0, interleaved = format::LANE_WORD_LIMIT;
  for (uint32_t l = 0; l < format::LANES; ++l) {
    const uint32_t n = in[counts + l];
    if (n > format::LANE_WORD_LIMIT) return Status::corrupt_stream;
    words += n;
    interleaved = n < interleaved ? n : interleaved;
  }
  LaneBitReader lanes[format::LANES];
  for (uint32_t l = 0, tail_before = 0; l < format::LANES; ++l) {
    lanes[l].words = in + hdr;
    lanes[l].lane = l;
    lanes[l].interleaved = interleaved;
    lanes[l].tail_before = tail_before;
    lanes[l].count = in[counts + l];
    tail_before += lanes[l].count - interleaved;
  }
  if (format::coded_chunk_bytes(tiles, words) != bytes) return Status::corrupt_stream;
  for (uint32_t b = hdr + 4 * words; b < bytes; ++b)
    if (in[b]) return Status::corrupt_stream;

  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t a = in[t];
    const uint32_t f = (in[tiles + t / 4] >> (2 * (t % 4))) & 3u;
    uint32_t tile_max = 0;
    for (uint32_t l = 0; l < format::LANES; ++l) {
      const uint32_t cnt = format::lane_valid_count(elems, t, l);
      LaneBitReader& r = lanes[l];
      for (uint32_t p = 0; a != 0 && 2 * p < cnt; ++p) {
        const uint32_t entry = thread::PAIR_TABLES.decode[f][r.peek(Code::MAX_LEN)];
        uint32_t s[2], v;
        if (!r.read(entry & Code::LEN_MASK, v)) return Status::corrupt_stream;
        if ((entry & (Code::SLOW | Code::ESC0 | Code::ESC1)) == Code::SLOW) {  // the escape pair
          if (!r.read(Code::ID_BITS, s[0]) || !r.read(Code::ID_BITS, s[1])) return Status::corrupt_stream;
          if (s[0] >= Code::NUM_SYMBOLS || s[1] >= Code::NUM_SYMBOLS ||
              Code::LENGTHS[f][s[0] * Code::NUM_SYMBOLS + s[1]] != 0)
            return Status::corrupt_stream;  // only pairs without a codeword of their own are escaped
        } else {
          s[0] = entry & Code::ESC0 ? Code::ESC : entry & Code::ZERO0 ? Code::ZERO : (entry >> 7) & 0xFFu;
          s[1] = entry & Code::ESC1 ? Code::ESC : entry & Code::ZERO1 ? Code::ZERO : (entry >> 23) & 0xFFu;
        }
        for (uint32_t j = 0; j < 2; ++j) {
          uint32_t e = 0;
          if (s[j] == Code::ESC) {
            if (!r.read(EB, e) || !Code::escape_valid(e, a)) return Status::corrupt_stream;
          } else if (s[j] != Code::ZERO) {
            if (s[j] >= a) return Status::corrupt_stream;  // e = a - d >= 1
            e = a - s[j];
          }
          if (2 * p + j >= cnt) {
            if (s[j] != Code::ZERO) return Status::corrupt_stream;  // an item past the end codes as ZERO
            continue;
          }
          const uint32_t k = t * format::TILE_ELEMS + l * format::ITEMS_PER_LANE + 2 * p + j;
          bits[k] |= FB::assemble(e, 0, 0);
        }
      }
      for (uint32_t v = 0; v < cnt; ++v) {
        const uint32_t m = FB::magnitude(bits[t * format::TILE_ELEMS + l * format::ITEMS_PER_LANE + v]);
        tile_max = m > tile_max ? m : tile_max;
      }
    }
    // The anchor and fraction must describe the decoded tile: a cheap integrity check.
    if ((tile_max >> FB::MANT_BITS) != a || thread::fraction_of<D>(tile_max) != f) return Status::corrupt_stream;
  }
  // Every lane read all of its words, and the bits after its last codeword are zero.
  for (LaneBitReader& r : lanes) {
    if (format::div_up(r.pos, 32) != r.count) return Status::corrupt_stream;
    uint32_t rest;
    if (r.pos % 32 && (!r.read(32 - r.pos % 32, rest) || rest != 0)) return Status::corrupt_stream;
  }
  return Status::ok;
}

/// Encodes the exponents of one chunk in the fixed code into `out` (capacity raw_chunk_bytes); raw where the
/// coded chunk would not be smaller. Returns bytes.
template <DType D>
inline uint32_t encode_fixed_chunk(const uint32_t* bits, uint32_t elems, uint8_t* out) {
  using FB = thread::FloatBits<D>;
  using FC = thread::FixedCode;
  const uint32_t tiles = format::chunk_tiles(elems);
  std::vector<uint8_t> coded((FC::TILE_CODE_BYTES + 1) * tiles);
  std::vector<uint8_t> exceptions;
  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t* tile = bits + t * format::TILE_ELEMS;
    uint32_t a = 0;
    for (uint32_t k = 0; k < format::tile_valid_count(elems, t); ++k) a = std::max(a, FB::exponent(tile[k]));
    coded[FC::TILE_CODE_BYTES * tiles + t] = uint8_t(a);
    for (uint32_t l = 0; l < format::LANES; ++l) {
      const uint32_t cnt = format::lane_valid_count(elems, t, l);
      const uint32_t* item = tile + l * format::ITEMS_PER_LANE;
      uint32_t field = 0;
      for (uint32_t i = 0; i < cnt; ++i) field |= std::min(a - FB::exponent(item[i]), FC::EXCEPTION) << FC::shift(i);
      for (uint32_t j = 0; j < 3; ++j) coded[FC::TILE_CODE_BYTES * t + FC::FIELD_BYTES * l + j] = uint8_t(field >> 8 * j);
      for (const uint32_t i : FC::EXCEPTION_ORDER)
        if (i < cnt && a - FB::exponent(item[i]) >= FC::EXCEPTION) exceptions.push_back(uint8_t(FB::exponent(item[i])));
    }
  }
  if (!FC::stays_coded(D, elems, uint32_t(exceptions.size()))) return store_raw_chunk<D>(bits, elems, out);
  const uint32_t bytes = FC::chunk_bytes(tiles, uint32_t(exceptions.size()));
  std::memset(out, 0, bytes);
  std::memcpy(out, coded.data(), coded.size());
  if (!exceptions.empty()) std::memcpy(out + coded.size(), exceptions.data(), exceptions.size());
  return bytes;
}

/// Decodes the exponents of one chunk in the fixed code; `bits` holds the raw planes with zero exponents. Every
/// code and exception must be the one the encoder writes (canonical), the anchor the tile's largest exponent.
template <DType D>
inline Status decode_fixed_chunk(const uint8_t* in, uint32_t bytes, uint32_t elems, uint32_t* bits) {
  using FB = thread::FloatBits<D>;
  using FC = thread::FixedCode;
  const uint32_t tiles = format::chunk_tiles(elems), raw_bytes = format::raw_chunk_bytes(D, elems);
  if (bytes == raw_bytes) return decode_raw_chunk<D>(in, bytes, elems, bits) ? Status::ok : Status::corrupt_stream;
  const uint32_t fixed_bytes = (FC::TILE_CODE_BYTES + 1) * tiles;
  if (bytes > raw_bytes || bytes < fixed_bytes || bytes % format::ALIGN) return Status::corrupt_stream;
  const uint8_t* anchors = in + FC::TILE_CODE_BYTES * tiles;
  uint32_t x = 0;  // the next exception byte
  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t a = anchors[t];
    if (a >> FB::EXP_BITS) return Status::corrupt_stream;
    uint32_t largest = 0;
    for (uint32_t l = 0; l < format::LANES; ++l) {
      const uint8_t* f = in + FC::TILE_CODE_BYTES * t + FC::FIELD_BYTES * l;
      const uint32_t field = f[0] | uint32_t(f[1]) << 8 | uint32_t(f[2]) << 16;
      const uint32_t cnt = format::lane_valid_count(elems, t, l);
      for (const uint32_t i : FC::EXCEPTION_ORDER) {
        const uint32_t d = (field >> FC::shift(i)) & FC::EXCEPTION;
        if (i >= cnt) {
          if (d) return Status::corrupt_stream;  // an item past the end codes as 0
          continue;
        }
        uint32_t e;
        if (d == FC::EXCEPTION) {
          if (fixed_bytes + x >= bytes) return Status::corrupt_stream;
          e = in[fixed_bytes + x++];
          if (e + FC::EXCEPTION > a) return Status::corrupt_stream;  // a nearer exponent is coded in place
        } else {
          if (d > a) return Status::corrupt_stream;
          e = a - d;
        }
        largest = std::max(largest, e);
        bits[t * format::TILE_ELEMS + l * format::ITEMS_PER_LANE + i] |= FB::assemble(e, 0, 0);
      }
    }
    if (largest != a) return Status::corrupt_stream;
  }
  if (FC::chunk_bytes(tiles, x) != bytes || x > FC::exception_limit(elems)) return Status::corrupt_stream;
  for (uint32_t b = fixed_bytes + x; b < bytes; ++b)
    if (in[b]) return Status::corrupt_stream;
  return Status::ok;
}

/// One chunk's exponents in the stream's code.
template <DType D, class Code>
inline uint32_t encode_chunk(const uint32_t* bits, uint32_t elems, uint8_t* out) {
  if constexpr (Code::ID == CodeId::fixed) return encode_fixed_chunk<D>(bits, elems, out);
  else return encode_pair_chunk<D, Code>(bits, elems, out);
}
template <DType D, class Code>
inline Status decode_chunk(const uint8_t* in, uint32_t bytes, uint32_t elems, uint32_t* bits) {
  if constexpr (Code::ID == CodeId::fixed) return decode_fixed_chunk<D>(in, bytes, elems, bits);
  else return decode_pair_chunk<D, Code>(in, bytes, elems, bits);
}

}  // namespace detail
}  // namespace host
}  // namespace zipcomm
