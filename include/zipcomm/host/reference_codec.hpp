// Host reference encoder and decoder for wire format v2 (plain C++; no CUDA needed).
//
// It replays the warp's lane-by-lane schedule one lane at a time, so it writes exactly the bytes the device
// code writes. Tests use it as the oracle, and it lets a CPU read what a GPU wrote.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "../format.hpp"
#include "../thread/chunk_check.hpp"
#include "../thread/chunk_schedule.hpp"
#include "../thread/exponent_code.hpp"
#include "../thread/float_bits.hpp"

namespace zipcomm {
namespace host {

using format::Header;
using format::Layout;

namespace detail {

template <DType D>
inline uint32_t load_bits(const uint8_t* src, uint64_t i) {
  if (D == DType::fp32) {
    uint32_t v;
    std::memcpy(&v, src + 4 * i, 4);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, src + 2 * i, 2);
  return v;
}

template <DType D>
inline void store_bits(uint8_t* dst, uint64_t i, uint32_t b) {
  if (D == DType::fp32) {
    std::memcpy(dst + 4 * i, &b, 4);
  } else {
    uint16_t v = static_cast<uint16_t>(b);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

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

/// Encodes the exponents of one chunk (bits[0..elems)) into `out` (capacity raw_chunk_bytes). Returns bytes.
template <DType D, class Code>
inline uint32_t encode_chunk(const uint32_t* bits, uint32_t elems, uint8_t* out) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = FB::EXP_BITS;
  const uint32_t tiles = format::chunk_tiles(elems);
  const uint32_t hdr = format::chunk_header_bytes(tiles);
  uint8_t anchors[format::CHUNK_TILES], fracs[format::CHUNK_TILES];
  tile_scales<D>(bits, elems, tiles, anchors, fracs);

  // Codewords of each lane, in its stream order.
  struct Piece {
    uint32_t bits, len, raw;  // raw < 0x100 when an escaped exponent follows
    bool esc;
  };
  std::vector<Piece> lane_pieces[format::LANES];
  for (uint32_t t = 0; t < tiles; ++t) {
    if (anchors[t] == 0) continue;
    typename Code::Table tab = Code::table(fracs[t]);
    for (uint32_t l = 0; l < format::LANES; ++l) {
      uint32_t cnt = thread::lane_valid_count(elems, t, l);
      for (uint32_t v = 0; v < cnt; ++v) {
        uint32_t e = FB::exponent(bits[t * format::TILE_ELEMS + l * format::ITEMS_PER_LANE + v]);
        uint32_t s = thread::symbol_of<Code>(e, anchors[t]);
        Piece p{};
        Code::encode(tab, s, p.bits, p.len);
        p.esc = s == Code::ESC;
        p.raw = e;
        lane_pieces[l].push_back(p);
      }
    }
  }

  // Replay the decoder's fetch schedule to find where each lane's words go.
  std::vector<uint32_t> positions[format::LANES];
  uint32_t avail[format::LANES] = {};
  size_t cursor[format::LANES] = {};
  int32_t fin[format::LANES];
  for (uint32_t l = 0; l < format::LANES; ++l) fin[l] = thread::lane_final_pair(elems, l);
  uint32_t base = 0;
  auto step = [&](const bool* need) {
    for (uint32_t l = 0; l < format::LANES; ++l)
      if (need[l]) {
        positions[l].push_back(base++);
        avail[l] += 32;
      }
  };
  for (uint32_t t = 0; t < tiles; ++t) {
    if (anchors[t] == 0) continue;
    for (uint32_t p = 0; p < 4; ++p) {
      bool need[format::LANES], lazy[format::LANES];
      for (uint32_t l = 0; l < format::LANES; ++l) {
        lazy[l] = thread::pair_is_lazy(fin[l], int32_t(4 * t + p));
        bool has = thread::lane_valid_count(elems, t, l) > 2 * p;
        need[l] = thread::need_before_pair(has, lazy[l], avail[l]);
      }
      step(need);
      for (uint32_t j = 0; j < 2; ++j) {
        bool valid[format::LANES];
        for (uint32_t l = 0; l < format::LANES; ++l) {
          valid[l] = thread::lane_valid_count(elems, t, l) > 2 * p + j;
          uint32_t len = valid[l] ? lane_pieces[l][cursor[l]].len : 0;
          need[l] = thread::need_before_code(valid[l], lazy[l], len, avail[l]);
        }
        step(need);
        for (uint32_t l = 0; l < format::LANES; ++l) {
          bool esc = false;
          if (valid[l]) {
            avail[l] -= lane_pieces[l][cursor[l]].len;
            esc = lane_pieces[l][cursor[l]].esc;
          }
          need[l] = thread::need_for_escape(esc, lazy[l], avail[l], EB);
        }
        step(need);
        for (uint32_t l = 0; l < format::LANES; ++l)
          if (valid[l]) {
            if (lane_pieces[l][cursor[l]].esc) avail[l] -= EB;
            ++cursor[l];
          }
      }
    }
  }
  const uint32_t words = base;
  if (!format::chunk_stays_coded(D, elems, words)) {
    // Raw chunk: exponents packed LSB-first.
    uint32_t bytes = format::raw_chunk_bytes(D, elems);
    std::memset(out, 0, bytes);
    for (uint32_t k = 0; k < elems; ++k) {
      uint32_t e = FB::exponent(bits[k]);
      uint64_t bitpos = uint64_t(k) * EB;
      for (uint32_t b = 0; b < EB; ++b)
        if ((e >> b) & 1u) out[(bitpos + b) >> 3] |= uint8_t(1u << ((bitpos + b) & 7));
    }
    return bytes;
  }
  const uint32_t bytes = format::coded_chunk_bytes(tiles, words);
  std::memset(out, 0, bytes);
  for (uint32_t t = 0; t < tiles; ++t) {
    out[t] = anchors[t];
    out[tiles + t / 4] |= uint8_t(fracs[t] << (2 * (t % 4)));
  }
  uint8_t* word_area = out + hdr;
  for (uint32_t l = 0; l < format::LANES; ++l) {
    // Concatenate the lane's bits MSB-first into its words.
    std::vector<uint32_t> w(positions[l].size(), 0);
    uint64_t nbits = 0;
    auto push = [&](uint32_t value, uint32_t len) {
      for (int b = int(len) - 1; b >= 0; --b, ++nbits)
        if ((value >> b) & 1u) w[nbits >> 5] |= 1u << (31 - (nbits & 31));
    };
    for (const Piece& p : lane_pieces[l]) {
      push(p.bits, p.len);
      if (p.esc) push(p.raw, EB);
    }
    for (size_t r = 0; r < w.size(); ++r) put_u32(word_area + 4 * positions[l][r], w[r]);
  }
  return bytes;
}

/// Decodes the exponents of one chunk; `bits` holds the raw planes already merged with zero exponents.
template <DType D, class Code>
inline Status decode_chunk(const uint8_t* in, uint32_t bytes, uint32_t elems, uint32_t* bits) {
  using FB = thread::FloatBits<D>;
  constexpr uint32_t EB = FB::EXP_BITS;
  const uint32_t tiles = format::chunk_tiles(elems);
  const uint32_t raw_bytes = format::raw_chunk_bytes(D, elems);
  if (bytes == raw_bytes) {
    for (uint32_t k = 0; k < elems; ++k) {
      uint64_t bitpos = uint64_t(k) * EB;
      uint32_t e = 0;
      for (uint32_t b = 0; b < EB; ++b) e |= uint32_t((in[(bitpos + b) >> 3] >> ((bitpos + b) & 7)) & 1u) << b;
      bits[k] |= FB::assemble(e, 0, 0);  // planes are already in place
    }
    uint64_t used = uint64_t(elems) * EB;
    for (uint64_t b = used; b < uint64_t(bytes) * 8; ++b)
      if ((in[b >> 3] >> (b & 7)) & 1u) return Status::corrupt_stream;
    return Status::ok;
  }
  const uint32_t hdr = format::chunk_header_bytes(tiles);
  if (bytes > raw_bytes || bytes < hdr || bytes % format::ALIGN) return Status::corrupt_stream;
  // No encoder writes more than CODED_WORD_LIMIT words; the area may hold up to 3 more words of padding.
  if (bytes > format::coded_chunk_bytes(tiles, format::CODED_WORD_LIMIT)) return Status::corrupt_stream;
  const uint32_t max_words = (bytes - hdr) / 4;
  for (uint32_t b = tiles + (tiles + 3) / 4; b < hdr; ++b)
    if (in[b]) return Status::corrupt_stream;
  if (tiles % 4 && (in[tiles + tiles / 4] >> (2 * (tiles % 4)))) return Status::corrupt_stream;
  const uint8_t* word_area = in + hdr;

  uint64_t buf[format::LANES] = {};
  uint32_t avail[format::LANES] = {};
  int32_t fin[format::LANES];
  for (uint32_t l = 0; l < format::LANES; ++l) fin[l] = thread::lane_final_pair(elems, l);
  uint32_t base = 0;
  bool overrun = false;
  auto step = [&](const bool* need) {
    for (uint32_t l = 0; l < format::LANES; ++l)
      if (need[l]) {
        uint32_t pos = base++;
        uint32_t w = pos < max_words ? get_u32(word_area + 4 * pos) : (overrun = true, 0u);
        buf[l] |= uint64_t(w) << (32 - avail[l]);
        avail[l] += 32;
      }
  };
  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t a = in[t];
    const uint32_t f = (in[tiles + t / 4] >> (2 * (t % 4))) & 3u;
    typename Code::Table tab = Code::table(f);
    uint32_t tile_max = 0;
    for (uint32_t p = 0; p < 4; ++p) {
      bool need[format::LANES], lazy[format::LANES];
      for (uint32_t l = 0; l < format::LANES; ++l) {
        lazy[l] = thread::pair_is_lazy(fin[l], int32_t(4 * t + p));
        bool has = thread::lane_valid_count(elems, t, l) > 2 * p;
        need[l] = a != 0 && thread::need_before_pair(has, lazy[l], avail[l]);
      }
      step(need);
      for (uint32_t j = 0; j < 2; ++j) {
        bool valid[format::LANES];
        uint32_t sym[format::LANES], len[format::LANES];
        for (uint32_t l = 0; l < format::LANES; ++l) {
          valid[l] = a != 0 && thread::lane_valid_count(elems, t, l) > 2 * p + j;
          sym[l] = Code::decode(tab, uint32_t(buf[l] >> 32), len[l]);
          need[l] = thread::need_before_code(valid[l], lazy[l], len[l], avail[l]);
        }
        step(need);
        for (uint32_t l = 0; l < format::LANES; ++l) {
          if (need[l]) sym[l] = Code::decode(tab, uint32_t(buf[l] >> 32), len[l]);
          bool esc = false;
          if (valid[l]) {
            if (len[l] > avail[l]) return Status::corrupt_stream;
            buf[l] <<= len[l];
            avail[l] -= len[l];
            esc = sym[l] == Code::ESC;
          }
          need[l] = thread::need_for_escape(esc, lazy[l], avail[l], EB);
        }
        step(need);
        for (uint32_t l = 0; l < format::LANES; ++l) {
          uint32_t k = t * format::TILE_ELEMS + l * format::ITEMS_PER_LANE + 2 * p + j;
          if (k >= elems) continue;
          uint32_t e = 0;
          if (valid[l]) {
            if (sym[l] == Code::ESC) {
              if (avail[l] < EB) return Status::corrupt_stream;
              e = uint32_t(buf[l] >> (64 - EB));
              buf[l] <<= EB;
              avail[l] -= EB;
              if (!thread::escape_valid<Code>(e, a)) return Status::corrupt_stream;
            } else if (!thread::exponent_of<Code>(sym[l], a, e)) {
              return Status::corrupt_stream;
            }
          }
          bits[k] |= FB::assemble(e, 0, 0);
          uint32_t m = FB::magnitude(bits[k]);
          tile_max = m > tile_max ? m : tile_max;
        }
      }
    }
    // The anchor and fraction must describe the decoded tile: a cheap integrity check.
    if ((tile_max >> FB::MANT_BITS) != a || thread::fraction_of<D>(tile_max) != f) return Status::corrupt_stream;
  }
  if (overrun || format::coded_chunk_bytes(tiles, base) != bytes) return Status::corrupt_stream;
  // What each lane fetched and did not read (the tail of its last word, rare unread words) is zero.
  for (uint32_t l = 0; l < format::LANES; ++l)
    if (buf[l] != 0) return Status::corrupt_stream;
  for (uint32_t b = hdr + 4 * base; b < bytes; ++b)
    if (in[b]) return Status::corrupt_stream;
  return Status::ok;
}

template <DType D>
inline void split_planes(const uint8_t* src, uint64_t n, uint8_t* stream, const Layout& l,
                         std::vector<uint32_t>& chunk_bits, uint64_t first, uint32_t elems) {
  using FB = thread::FloatBits<D>;
  for (uint32_t k = 0; k < elems; ++k) {
    uint64_t i = first + k;
    uint32_t b = load_bits<D>(src, i);
    chunk_bits[k] = b;
    stream[l.plane0_offset + i] = static_cast<uint8_t>(FB::plane0(b));
    if constexpr (D == DType::fp32) {
      uint16_t lo = static_cast<uint16_t>(b & 0xFFFFu);
      std::memcpy(stream + l.plane1_offset + 2 * i, &lo, 2);
    } else if constexpr (D == DType::fp16) {
      uint32_t p1 = thread::FloatBits<DType::fp16>::plane1(b);
      uint64_t tile = i / format::TILE_ELEMS;
      uint32_t lane = (i % format::TILE_ELEMS) / format::ITEMS_PER_LANE, v = i % format::ITEMS_PER_LANE;
      for (uint32_t k3 = 0; k3 < 3; ++k3)
        if ((p1 >> (2 - k3)) & 1u) stream[l.plane1_offset + tile * 96 + k3 * 32 + lane] |= uint8_t(1u << v);
    }
  }
  (void)n;
}

template <DType D>
inline uint32_t merge_planes(const uint8_t* stream, const Layout& l, uint64_t i) {
  using FB = thread::FloatBits<D>;
  uint32_t p0 = stream[l.plane0_offset + i], p1 = 0;
  if constexpr (D == DType::fp32) {
    uint16_t lo;
    std::memcpy(&lo, stream + l.plane1_offset + 2 * i, 2);
    p1 = lo;
  } else if constexpr (D == DType::fp16) {
    uint64_t tile = i / format::TILE_ELEMS;
    uint32_t lane = (i % format::TILE_ELEMS) / format::ITEMS_PER_LANE, v = i % format::ITEMS_PER_LANE;
    for (uint32_t k3 = 0; k3 < 3; ++k3)
      p1 |= uint32_t((stream[l.plane1_offset + tile * 96 + k3 * 32 + lane] >> v) & 1u) << (2 - k3);
  }
  return FB::assemble(0, p0, p1);
}

template <DType D, class Code>
inline Status compress_typed(const uint8_t* src, uint64_t n, uint8_t* dst, uint64_t capacity, uint64_t* out_bytes) {
  const Layout l = format::layout_for(D, n);
  const uint64_t bound = format::max_compressed_bytes(D, n);
  if (capacity < bound) return Status::buffer_too_small;  // the stream may need every byte of the bound
  std::memset(dst, 0, l.exp_offset);
  std::vector<uint32_t> chunk_bits(format::CHUNK_ELEMS);
  uint64_t exp_pos = 0;
  for (uint64_t c = 0; c < l.num_chunks; ++c) {
    uint32_t elems = format::chunk_elems(n, c);
    split_planes<D>(src, n, dst, l, chunk_bits, c * format::CHUNK_ELEMS, elems);
    exp_pos += encode_chunk<D, Code>(chunk_bits.data(), elems, dst + l.exp_offset + exp_pos);
    std::memcpy(dst + l.table_offset + 8 * c, &exp_pos, 8);
    put_u32(dst + l.check_offset + 4 * c, thread::chunk_check<D>(chunk_bits.data(), elems));
  }
  const uint64_t total = l.exp_offset + exp_pos;
  Header h = format::make_header(D, Code::ID, n, total);
  std::memcpy(dst, &h, sizeof h);
  *out_bytes = total;
  return Status::ok;
}

/// fp16: the plane-1 bits of positions past n in the last tile are zero (no element owns them).
template <DType D>
inline bool fp16_tail_bits_zero(const uint8_t* stream, const Layout& l) {
  if (D != DType::fp16 || l.n % format::TILE_ELEMS == 0) return true;
  const uint64_t tile = l.num_tiles - 1;
  const uint8_t* t = stream + l.plane1_offset + tile * 96;
  for (uint32_t lane = 0; lane < format::LANES; ++lane) {
    const uint32_t cnt = thread::lane_valid_count(uint32_t(l.n - tile * format::TILE_ELEMS), 0, lane);
    const uint32_t unused = 0xFFu & ~((1u << cnt) - 1u);
    for (uint32_t k3 = 0; k3 < 3; ++k3)
      if (t[k3 * 32 + lane] & unused) return false;
  }
  return true;
}

template <DType D, class Code>
inline Status decompress_typed(const uint8_t* src, const Header& h, uint8_t* dst) {
  const uint64_t n = h.num_elements;
  const Layout l = format::layout_for(D, n);
  const uint64_t exp_bytes = h.total_bytes - l.exp_offset;
  if (!format::section_gaps_zero(src, l) || !fp16_tail_bits_zero<D>(src, l)) return Status::corrupt_stream;
  std::vector<uint32_t> chunk_bits(format::CHUNK_ELEMS);
  uint64_t start = 0;
  for (uint64_t c = 0; c < l.num_chunks; ++c) {
    uint64_t end = get_u64(src + l.table_offset + 8 * c);
    if (!format::chunk_range_valid(D, n, c, start, end, exp_bytes)) return Status::corrupt_stream;
    uint32_t elems = format::chunk_elems(n, c);
    for (uint32_t k = 0; k < elems; ++k) chunk_bits[k] = merge_planes<D>(src, l, c * format::CHUNK_ELEMS + k);
    uint64_t len = end - start;
    Status s = decode_chunk<D, Code>(src + l.exp_offset + start, uint32_t(len), elems, chunk_bits.data());
    if (s != Status::ok) return s;
    if (thread::chunk_check<D>(chunk_bits.data(), elems) != get_u32(src + l.check_offset + 4 * c))
      return Status::checksum_mismatch;
    for (uint32_t k = 0; k < elems; ++k) store_bits<D>(dst, c * format::CHUNK_ELEMS + k, chunk_bits[k]);
    start = end;
  }
  if (start != exp_bytes) return Status::corrupt_stream;
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

/// Compresses n elements of `dtype` (raw bits at src, any alignment) into dst.
/// dst_capacity must be at least format::max_compressed_bytes(dtype, n).
inline Status compress(DType dtype, CodeId code, const void* src, uint64_t n, void* dst, uint64_t dst_capacity,
                       uint64_t* out_bytes) {
  if ((!src && n) || !dst || !out_bytes || !dtype_valid(uint8_t(dtype)) || !code_valid(uint8_t(code)))
    return Status::invalid_argument;
  auto s = static_cast<const uint8_t*>(src);
  auto d = static_cast<uint8_t*>(dst);
  return thread::visit_codec(dtype, code, Status::invalid_argument, [&](auto dt, auto c) {
    return detail::compress_typed<decltype(dt)::value, decltype(c)>(s, n, d, dst_capacity, out_bytes);
  });
}

/// Decompresses a stream of src_bytes bytes into dst (capacity dst_bytes; must hold n * element size).
inline Status decompress(const void* src, uint64_t src_bytes, void* dst, uint64_t dst_bytes) {
  Header h;
  Status st = read_header(src, src_bytes, &h);
  if (st != Status::ok) return st;
  const DType dtype = static_cast<DType>(h.dtype);
  if (dst_bytes < h.num_elements * format::elem_bytes(dtype)) return Status::buffer_too_small;
  if (!dst && h.num_elements) return Status::invalid_argument;
  auto s = static_cast<const uint8_t*>(src);
  auto d = static_cast<uint8_t*>(dst);
  return thread::visit_codec(dtype, static_cast<CodeId>(h.code), Status::bad_header, [&](auto dt, auto c) {
    return detail::decompress_typed<decltype(dt)::value, decltype(c)>(s, h, d);
  });
}

}  // namespace host
}  // namespace zipcomm
