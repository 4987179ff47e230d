// The pair code of the wire format (since v3) (thread::PairCode, thread/pair_code.hpp), checked exhaustively over its small
// spaces: the frozen lengths give a complete canonical prefix code per fraction bucket, the decode table maps
// every 12-bit window to the codeword that prefixes it, the encode table's entries (escaped pairs included)
// decode back to their pair, and the symbol mapping is right for every (exponent, anchor).
// Then the coded chunk itself: an independent restatement of the layout in docs/FORMAT.md writes exactly the
// reference encoder's bytes, chunks go raw exactly by the format's rule (the lane limit included), and the
// decoder refuses every non-canonical coding even when it would decode to the right elements.
#include "test_util.hpp"

#include <zipcomm/thread/pair_code.hpp>

#include <algorithm>

using namespace zipcomm;
using thread::PAIR_TABLES;
using thread::PairCode;

namespace {

constexpr uint32_t NP = PairCode::NUM_PAIRS, NS = PairCode::NUM_SYMBOLS, ESCP = PairCode::ESCAPE_PAIR;
constexpr uint32_t WIN = PairCode::MAX_LEN;  // 12

uint32_t len_of(uint32_t f, uint32_t i) { return PairCode::LENGTHS[f][i]; }

/// The indices with a codeword of their own in canonical order: by (length, index).
std::vector<uint32_t> canonical_order(uint32_t f) {
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i <= NP; ++i)
    if (len_of(f, i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return len_of(f, a) < len_of(f, b); });
  return order;
}

/// Canonical codewords computed from the lengths alone (not from PairCode's tables): the first is 0, each next
/// one is the previous plus one, shifted left by the growth in length.
struct Canonical {
  uint32_t code[4][NP + 1] = {};
  Canonical() {
    for (uint32_t f = 0; f < 4; ++f) {
      uint32_t c = 0, prev = 0;
      bool first = true;
      for (uint32_t i : canonical_order(f)) {
        if (!first) c = (c + 1) << (len_of(f, i) - prev);
        first = false;
        prev = len_of(f, i);
        code[f][i] = c;
      }
    }
  }
};
const Canonical& canon() {
  static const Canonical c;
  return c;
}

/// A decode table entry read through its documented layout: bits 0-3 length, 4 slow, 5/6 s0/s1 is ESC,
/// 7-14 d0, 15 s0 is ZERO, 16-22 unused (zero), 23-30 d1, 31 s1 is ZERO.
struct Entry {
  uint32_t len;
  bool escape_pair;
  uint32_t s0, s1;  // symbols (only when !escape_pair)
};
Entry read_entry(uint32_t e) {
  INFO("entry 0x" << std::hex << e);
  Entry r{e & 0xFu, false, 0, 0};
  REQUIRE((e & 0x007F0000u) == 0);
  const bool slow = e & (1u << 4), esc0 = e & (1u << 5), esc1 = e & (1u << 6);
  const bool zero0 = e & (1u << 15), zero1 = e & (1u << 31);
  const uint32_t d0 = (e >> 7) & 0xFFu, d1 = (e >> 23) & 0xFFu;
  REQUIRE(r.len >= 1);
  REQUIRE(r.len <= WIN);
  if (slow && !esc0 && !esc1) {  // the escape pair: nothing else set
    REQUIRE(!zero0);
    REQUIRE(!zero1);
    REQUIRE(d0 == 0);
    REQUIRE(d1 == 0);
    r.escape_pair = true;
    return r;
  }
  REQUIRE(slow == (esc0 || esc1));  // slow: an ESC symbol (raw exponent follows)
  REQUIRE(int(esc0) + int(zero0) + int(d0 != 0) <= 1);
  REQUIRE(int(esc1) + int(zero1) + int(d1 != 0) <= 1);
  REQUIRE(d0 < PairCode::NUM_D);
  REQUIRE(d1 < PairCode::NUM_D);
  r.s0 = esc0 ? PairCode::ESC : zero0 ? PairCode::ZERO : d0;
  r.s1 = esc1 ? PairCode::ESC : zero1 ? PairCode::ZERO : d1;
  return r;
}

}  // namespace

TEST_CASE("pair code: constants and frozen lengths", "[pair_code]") {
  REQUIRE(PairCode::ID == CodeId::pair);
  REQUIRE(uint8_t(CodeId::pair) == 3);
  REQUIRE(PairCode::NUM_D == 16);
  REQUIRE(PairCode::ZERO == 16);
  REQUIRE(PairCode::ESC == 17);
  REQUIRE(NS == 18);
  REQUIRE(NP == 324);
  REQUIRE(ESCP == 324);
  REQUIRE(WIN == 12);
  REQUIRE(PairCode::ID_BITS == 5);
  for (uint32_t f = 0; f < 4; ++f) {
    INFO("f " << f);
    uint32_t escaped = 0;
    for (uint32_t i = 0; i <= NP; ++i) {
      REQUIRE(len_of(f, i) <= WIN);
      escaped += len_of(f, i) == 0;
    }
    REQUIRE(len_of(f, ESCP) != 0);  // the escape pair has a codeword
    REQUIRE(escaped > 0);           // and is used
  }
}

TEST_CASE("pair code: complete canonical prefix code, every 12-bit window decodes to the codeword prefixing it",
          "[pair_code]") {
  for (uint32_t f = 0; f < 4; ++f) {
    INFO("f " << f);
    // Canonical: in (length, index) order, the codewords' intervals of 12-bit windows follow one another
    // without gap or overlap from 0 to 4096 (prefix-free and complete: Kraft sum exactly 1).
    uint32_t next = 0;
    for (uint32_t i : canonical_order(f)) {
      const uint32_t len = len_of(f, i), c = canon().code[f][i];
      INFO("index " << i << " length " << len);
      REQUIRE((c >> len) == 0);
      REQUIRE(c << (WIN - len) == next);
      next += 1u << (WIN - len);
    }
    REQUIRE(next == PairCode::WINDOWS);

    std::vector<uint32_t> hits(NP + 1, 0);
    for (uint32_t w = 0; w < PairCode::WINDOWS; ++w) {
      INFO("window " << w);
      const Entry e = read_entry(PAIR_TABLES.decode[f][w]);
      const uint32_t idx = e.escape_pair ? ESCP : e.s0 * NS + e.s1;
      REQUIRE(len_of(f, idx) == e.len);  // never a pair without a codeword of its own
      REQUIRE(canon().code[f][idx] == w >> (WIN - e.len));
      hits[idx]++;
    }
    for (uint32_t i = 0; i <= NP; ++i) REQUIRE(hits[i] == (len_of(f, i) ? 1u << (WIN - len_of(f, i)) : 0u));
  }
}

TEST_CASE("pair code: every pair's encode entry decodes back to the pair, escapes only for pairs without a codeword",
          "[pair_code]") {
  ZT_RNG("pair encode");
  const uint32_t esc_extra = 2 * PairCode::ID_BITS;
  for (uint32_t f = 0; f < 4; ++f)
    for (uint32_t i = 0; i < NP; ++i) {
      const uint32_t s0 = i / NS, s1 = i % NS;
      INFO("f " << f << " pair (" << s0 << ", " << s1 << ")");
      const uint32_t entry = PAIR_TABLES.encode[f][i];
      const uint32_t len = entry >> PairCode::ENCODE_LEN_SHIFT, bits = entry & ((1u << PairCode::ENCODE_LEN_SHIFT) - 1);
      REQUIRE(len >= 1);
      REQUIRE(len <= 24);
      REQUIRE((bits >> len) == 0);
      if (len_of(f, i)) {
        REQUIRE(len == len_of(f, i));
        REQUIRE(bits == canon().code[f][i]);
      } else {
        REQUIRE(len == len_of(f, ESCP) + esc_extra);
        REQUIRE(bits >> esc_extra == canon().code[f][ESCP]);
      }
      // Decode it the way a decoder does, with arbitrary bits after it: a 12-bit window, the entry's length,
      // and for the escape pair the two 5-bit ids.
      for (int trial = 0; trial < 16; ++trial) {
        const uint64_t stream = (uint64_t(bits) << (64 - len)) | (rng() >> len);  // MSB-first
        const Entry e = read_entry(PAIR_TABLES.decode[f][stream >> (64 - WIN)]);
        uint32_t d0, d1, used = e.len;
        if (e.escape_pair) {
          REQUIRE(len_of(f, i) == 0);
          d0 = uint32_t(stream >> (64 - used - PairCode::ID_BITS)) & 31u;
          used += PairCode::ID_BITS;
          d1 = uint32_t(stream >> (64 - used - PairCode::ID_BITS)) & 31u;
          used += PairCode::ID_BITS;
        } else {
          d0 = e.s0;
          d1 = e.s1;
        }
        REQUIRE(used == len);
        REQUIRE(d0 == s0);
        REQUIRE(d1 == s1);
      }
    }
}

TEST_CASE("pair code: bf16 decode entries give both exponents in place with one subtraction", "[pair_code]") {
  for (uint32_t f = 0; f < 4; ++f)
    for (uint32_t w = 0; w < PairCode::WINDOWS; ++w) {
      const uint32_t entry = PAIR_TABLES.decode[f][w];
      if (entry & (PairCode::SLOW | PairCode::ZERO0 | PairCode::ZERO1)) continue;
      const uint32_t d0 = (entry >> 7) & 0xFFu, d1 = (entry >> 23) & 0xFFu;
      for (uint32_t a = std::max(d0, d1) + 1; a <= 255; ++a) {
        const uint32_t x = ((a << 7) | (a << 23) | PairCode::FILL) - entry;
        if (((x >> 7) & 0xFFu) != a - d0 || ((x >> 23) & 0xFFu) != a - d1)
          FAIL("f " << f << " window " << w << " a " << a);
      }
    }
}

namespace {
void check_symbols(uint32_t max_exp) {
  for (uint32_t a = 1; a <= max_exp; ++a)
    for (uint32_t e = 0; e <= max_exp; ++e) {
      INFO("max_exp " << max_exp << " a " << a << " e " << e);
      const bool esc_ok = PairCode::escape_valid(e, a);
      REQUIRE(esc_ok == (e != 0 && e <= a && a - e >= 16));
      if (e > a) continue;  // cannot occur: a is the tile's largest exponent
      const uint32_t s = PairCode::symbol_of(e, a);
      if (e == 0) {
        REQUIRE(s == PairCode::ZERO);
      } else if (a - e < 16) {
        REQUIRE(s == a - e);  // d symbol; the decoder gets e back as a - d (>= 1 because d < a)
        REQUIRE(s < a);
      } else {
        REQUIRE(s == PairCode::ESC);
        REQUIRE(esc_ok);  // the raw exponent following an ESC is canonical exactly then
      }
    }
}
}  // namespace

TEST_CASE("pair code: symbol_of and escape_valid over every (exponent, anchor), 8-, 5- and 4-bit exponents",
          "[pair_code]") {
  check_symbols(255);
  check_symbols(31);
  check_symbols(15);  // fp8_e4m3: d = a - e <= 14, never ESC
  for (uint32_t a = 1; a <= 15; ++a)
    for (uint32_t e = 0; e <= a; ++e) CHECK(PairCode::symbol_of(e, a) != PairCode::ESC);
}

// ---- the coded chunk, restated from docs/FORMAT.md --------------------------------------------------------------
namespace {

struct DT {
  uint32_t eb, mant;
  uint32_t mag_mask;
};
DT dt_of(DType d) {
  return d == DType::bf16       ? DT{8, 7, 0x7FFFu}
         : d == DType::fp16     ? DT{5, 10, 0x7FFFu}
         : d == DType::fp8_e4m3 ? DT{4, 3, 0x7Fu}
         : d == DType::fp8_e5m2 ? DT{5, 2, 0x7Fu}
                                : DT{8, 23, 0x7FFFFFFFu};
}

struct BitLane {
  std::vector<uint8_t> bits;
  void push(uint32_t v, uint32_t len) {
    for (int b = int(len) - 1; b >= 0; --b) bits.push_back(uint8_t((v >> b) & 1u));
  }
  uint32_t words() const { return uint32_t((bits.size() + 31) / 32); }
};

/// Ways to code a chunk that decode to the right elements but are not the canonical coding (each must be refused).
enum class Tweak {
  none,
  escape_own_codeword,  // a pair that has a codeword of its own written through the escape pair
  esc_for_d,            // an exponent with d < 16 written as ESC + raw exponent
  esc_for_zero,         // a zero exponent written as ESC + raw 0
  past_end_not_zero,    // the item past the chunk's end (odd lane count) coded as d = 0 instead of ZERO
  tail_bit,             // a one among a lane's bits after its last codeword
  extra_word,           // one more (zero) word in a lane
};

struct SpecChunk {
  std::vector<uint8_t> coded;  // the chunk in the coded layout, whatever its size
  uint32_t words = 0, max_lane = 0;
  bool tweaked = false;
};

/// The coded chunk of elements bits[0..elems), written from the specification.
SpecChunk spec_encode(DType d, const uint32_t* bits, uint32_t elems, Tweak tweak = Tweak::none) {
  const DT t = dt_of(d);
  const uint32_t tiles = (elems + 255) / 256;
  std::vector<uint32_t> anchor(tiles), frac(tiles);
  for (uint32_t k = 0; k < tiles; ++k) {
    uint32_t mx = 0;
    for (uint32_t i = k * 256; i < elems && i < k * 256 + 256; ++i) mx = std::max(mx, bits[i] & t.mag_mask);
    anchor[k] = mx >> t.mant;
    frac[k] = (mx >> (t.mant - 2)) & 3u;
  }
  SpecChunk out;
  bool pending = tweak != Tweak::none;
  BitLane lanes[32];
  for (uint32_t l = 0; l < 32; ++l)
    for (uint32_t k = 0; k < tiles; ++k) {
      const uint32_t a = anchor[k], f = frac[k];
      if (a == 0) continue;  // tiles anchored at 0 carry no codes
      const int64_t left = int64_t(elems) - int64_t(k) * 256 - int64_t(l) * 8;
      const uint32_t cnt = left <= 0 ? 0 : left >= 8 ? 8 : uint32_t(left);
      for (uint32_t p = 0; 2 * p < cnt; ++p) {
        uint32_t e[2] = {0, 0}, s[2] = {PairCode::ZERO, PairCode::ZERO};
        for (uint32_t j = 0; j < 2; ++j) {
          if (2 * p + j >= cnt) continue;  // past the end: ZERO
          e[j] = (bits[k * 256 + l * 8 + 2 * p + j] >> t.mant) & ((1u << t.eb) - 1);
          s[j] = e[j] == 0 ? PairCode::ZERO : a - e[j] < 16 ? a - e[j] : PairCode::ESC;
        }
        bool force_escape = false;
        if (pending) {
          if (tweak == Tweak::escape_own_codeword && len_of(f, s[0] * NS + s[1])) force_escape = true;
          for (uint32_t j = 0; j < 2 && pending; ++j) {
            if (tweak == Tweak::esc_for_d && s[j] < 16 && 2 * p + j < cnt) s[j] = PairCode::ESC, pending = false;
            if (tweak == Tweak::esc_for_zero && s[j] == PairCode::ZERO && 2 * p + j < cnt)
              s[j] = PairCode::ESC, pending = false;
          }
          if (tweak == Tweak::past_end_not_zero && 2 * p + 1 == cnt) s[1] = 0, pending = false;
          if (force_escape) pending = false;
          out.tweaked |= !pending;
        }
        const uint32_t idx = s[0] * NS + s[1];
        if (len_of(f, idx) && !force_escape) {
          lanes[l].push(canon().code[f][idx], len_of(f, idx));
        } else {
          lanes[l].push(canon().code[f][ESCP], len_of(f, ESCP));
          lanes[l].push(s[0], 5);
          lanes[l].push(s[1], 5);
        }
        for (uint32_t j = 0; j < 2; ++j)
          if (s[j] == PairCode::ESC) lanes[l].push(e[j], t.eb);
      }
    }
  if (pending && tweak == Tweak::tail_bit)
    for (BitLane& lane : lanes)
      if (lane.bits.size() % 32) {
        lane.bits.resize(lane.words() * 32, 0);
        lane.bits.back() = 1;
        pending = false;
        out.tweaked = true;
        break;
      }
  if (pending && tweak == Tweak::extra_word) {
    lanes[0].bits.resize(lanes[0].words() * 32 + 32, 0);
    out.tweaked = true;
  }
  for (const BitLane& lane : lanes) {
    out.words += lane.words();
    out.max_lane = std::max(out.max_lane, lane.words());
  }
  // anchors, fractions (four per byte, tile 4q + r in bits 2r, 2r + 1), 32 lane word counts, zero padding to
  // 16 bytes, the lane words (32-bit little-endian, bits taken from the most significant one down): with m the
  // smallest lane word count, word w < m of lane l at word 32 w + l, then the words from m on, lane 0's first;
  // zero padding to 16 bytes.
  const uint32_t counts = tiles + (tiles + 3) / 4, hdr = (counts + 32 + 15) / 16 * 16;
  out.coded.assign((hdr + 4 * out.words + 15) / 16 * 16, 0);
  for (uint32_t k = 0; k < tiles; ++k) {
    out.coded[k] = uint8_t(anchor[k]);
    out.coded[tiles + k / 4] |= uint8_t(frac[k] << (2 * (k % 4)));
  }
  uint32_t m = lanes[0].words();
  for (const BitLane& lane : lanes) m = std::min(m, lane.words());
  uint32_t tail = hdr + 4 * 32 * m;  // where the next word past m goes
  for (uint32_t l = 0; l < 32; ++l) {
    out.coded[counts + l] = uint8_t(std::min(lanes[l].words(), 255u));  // past 64 only to be refused
    std::vector<uint8_t> b = lanes[l].bits;
    b.resize(lanes[l].words() * 32, 0);
    for (uint32_t w = 0; w < lanes[l].words(); ++w) {
      uint32_t v = 0;
      for (uint32_t i = 0; i < 32; ++i) v = v << 1 | b[w * 32 + i];
      uint32_t at = hdr + 4 * (32 * w + l);
      if (w >= m) at = tail, tail += 4;
      for (uint32_t byte = 0; byte < 4; ++byte) out.coded[at + byte] = uint8_t(v >> (8 * byte));
    }
  }
  return out;
}

/// Exponents packed LSB-first, EXP_BITS each, zero padding to 16 bytes.
std::vector<uint8_t> spec_raw(DType d, const uint32_t* bits, uint32_t elems) {
  const DT t = dt_of(d);
  std::vector<uint8_t> r(((uint64_t(elems) * t.eb + 7) / 8 + 15) / 16 * 16);
  for (uint32_t i = 0; i < elems; ++i) {
    const uint32_t e = (bits[i] >> t.mant) & ((1u << t.eb) - 1);
    for (uint32_t b = 0; b < t.eb; ++b)
      if ((e >> b) & 1u) r[(uint64_t(i) * t.eb + b) / 8] |= uint8_t(1u << ((uint64_t(i) * t.eb + b) % 8));
  }
  return r;
}

/// The reference encoder's chunk for the same elements.
std::vector<uint8_t> reference_chunk(DType d, const std::vector<uint32_t>& bits, uint32_t elems) {
  std::vector<uint8_t> out(format::raw_chunk_bytes(d, elems) + 64, 0xEE);
  uint32_t n = 0;
  switch (d) {
    case DType::bf16: n = host::detail::encode_chunk<DType::bf16, PairCode>(bits.data(), elems, out.data()); break;
    case DType::fp16: n = host::detail::encode_chunk<DType::fp16, PairCode>(bits.data(), elems, out.data()); break;
    case DType::fp32: n = host::detail::encode_chunk<DType::fp32, PairCode>(bits.data(), elems, out.data()); break;
    case DType::fp8_e4m3:
      n = host::detail::encode_chunk<DType::fp8_e4m3, PairCode>(bits.data(), elems, out.data());
      break;
    case DType::fp8_e5m2:
      n = host::detail::encode_chunk<DType::fp8_e5m2, PairCode>(bits.data(), elems, out.data());
      break;
  }
  for (size_t i = n; i < out.size(); ++i) REQUIRE(out[i] == 0xEE);  // nothing written past the chunk
  out.resize(n);
  return out;
}

/// Elements of a chunk with a given shape: per tile a random anchor (one element carries it), exponents
/// mostly a little below it (d geometric), `zero` of them zero, `esc` of them 16 or more binades below.
/// Every eighth tile is all zero (anchor 0).
std::vector<uint32_t> shaped(DType d, uint32_t n, std::mt19937_64& rng, double esc, double zero) {
  const DT t = dt_of(d);
  const uint32_t max_e = (1u << t.eb) - 1;
  const uint32_t sign = zt::sign_bit(d), mant_mask = (1u << t.mant) - 1;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint32_t> v(n);
  for (uint32_t k = 0; k * 256 < n; ++k) {
    const uint32_t hi = std::min(n, k * 256 + 256);
    if (rng() % 8 == 0) {  // zero tile, mixed signs
      for (uint32_t i = k * 256; i < hi; ++i) v[i] = rng() % 2 ? sign : 0;
      continue;
    }
    const uint32_t a = rng() % 16 == 0 ? max_e : 1 + uint32_t(rng() % (max_e - 1));
    for (uint32_t i = k * 256; i < hi; ++i) {
      uint32_t e;
      const double x = u(rng);
      if (x < zero) {
        e = 0;
      } else if (x < zero + esc && a > 16) {
        e = 1 + uint32_t(rng() % (a - 16));
      } else {
        uint32_t dd = 0;
        while (dd < 20 && rng() % 2) ++dd;
        e = dd < a ? a - dd : 0;
      }
      v[i] = (rng() % 2 ? sign : 0) | e << t.mant | (uint32_t(rng()) & mant_mask);
    }
    v[k * 256 + rng() % (hi - k * 256)] = (rng() % 2 ? sign : 0) | a << t.mant | (uint32_t(rng()) & mant_mask);
  }
  return v;
}

zt::Tensor tensor_of(DType d, const std::vector<uint32_t>& bits) {
  zt::Tensor t(d, bits.size());
  for (size_t i = 0; i < bits.size(); ++i) t.set(i, bits[i]);
  return t;
}

/// A one-chunk stream with its chunk replaced (table end, total size and header check follow).
std::vector<uint8_t> with_chunk(const std::vector<uint8_t>& stream, const std::vector<uint8_t>& chunk) {
  format::Header h;
  std::memcpy(&h, stream.data(), sizeof h);
  const format::Layout l = format::layout_of(h);
  REQUIRE(l.num_chunks == 1);
  std::vector<uint8_t> s(stream.begin(), stream.begin() + l.exp_offset);
  s.insert(s.end(), chunk.begin(), chunk.end());
  const uint64_t end = chunk.size();
  std::memcpy(&s[l.table_offset], &end, 8);
  h.total_bytes = s.size();
  h.header_check = format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
  std::memcpy(s.data(), &h, sizeof h);
  return s;
}

Status decode_status(const std::vector<uint8_t>& s, const zt::Tensor& t) {
  auto r = zt::decompress_guarded(s.data(), s.size(), t.bytes.size());
  REQUIRE(r.guards_ok);
  if (r.status == Status::ok) REQUIRE(r.out == t.bytes);
  return r.status;
}

}  // namespace

TEST_CASE("coded chunks: the specification's bytes are the reference encoder's bytes, raw exactly by the rule",
          "[pair_code][chunk]") {
  ZT_RNG("spec chunks");
  std::vector<uint32_t> sizes = {1,   2,   3,    7,    8,    9,    15,   16,    17,   255,
                                 256, 257, 511, 1000, 2049, 4095, 8192, 16383, 16384};
  for (int i = 0; i < 12; ++i) sizes.push_back(1 + uint32_t(rng() % 16384));
  uint64_t coded = 0, raw = 0;
  for (DType d : zt::kDTypes)
    for (uint32_t n : sizes)
      for (int kind = 0; kind < 6; ++kind) {
        INFO("dtype " << dtype_name(d) << " n " << n << " kind " << kind);
        std::vector<uint32_t> bits;
        switch (kind) {
          case 0: bits = shaped(d, n, rng, 0.0, 0.0); break;      // d symbols only
          case 1: bits = shaped(d, n, rng, 0.01, 0.05); break;    // a few escapes and zeros
          case 2: bits = shaped(d, n, rng, 0.3, 0.2); break;      // escape-heavy
          case 3: bits = std::vector<uint32_t>(n, 0); break;      // all zero: anchors 0, no lane words
          case 4: {                                               // random bits
            bits.resize(n);
            for (auto& b : bits) b = uint32_t(rng()) & zt::elem_mask(d);
            break;
          }
          default: bits = shaped(d, n, rng, 0.0, 0.9); break;     // mostly zeros
        }
        const SpecChunk sc = spec_encode(d, bits.data(), n);
        const uint32_t tiles = format::chunk_tiles(n);
        const bool stays = sc.max_lane <= 64 && sc.coded.size() < format::raw_chunk_bytes(d, n);
        REQUIRE(format::chunk_stays_coded(d, n, sc.words, sc.max_lane) == stays);
        REQUIRE(sc.coded.size() == format::coded_chunk_bytes(tiles, sc.words));
        const std::vector<uint8_t> ref = reference_chunk(d, bits, n);
        if (stays) {
          REQUIRE(ref == sc.coded);
          ++coded;
        } else {
          REQUIRE(ref == spec_raw(d, bits.data(), n));
          ++raw;
        }
        // and it decodes
        const zt::Tensor t = tensor_of(d, bits);
        zt::roundtrip(CodeId::pair, t, 14);
      }
  CHECK(coded > 100);
  CHECK(raw > 50);
}

TEST_CASE("a chunk with one lane over 64 words is raw even when smaller coded, and a coded one is refused",
          "[pair_code][chunk]") {
  ZT_RNG("lane limit");
  for (DType d : zt::kDTypes) {
    INFO("dtype " << dtype_name(d));
    const DT t = dt_of(d);
    const uint32_t a = (1u << t.eb) - 2;  // every tile's anchor
    std::vector<uint32_t> bits(16384);
    for (uint32_t i = 0; i < 16384; ++i) {
      uint32_t dd = 0;
      while (dd < 15 && rng() % 2) ++dd;
      bits[i] = (a - dd) << t.mant | (uint32_t(rng()) & ((1u << t.mant) - 1));
    }
    // Lane 0 (items 0..7 of every tile): its first two items are escapes in every tile. fp8_e4m3 has no
    // escapes (a = 14): all eight items at d = 13, whose pair (13, 13) has no codeword of its own in any
    // fraction bucket (22 bits through the escape pair).
    for (uint32_t k = 0; k < 64; ++k) {
      if (a <= 16) {
        REQUIRE(PairCode::LENGTHS[0][13 * NS + 13] + PairCode::LENGTHS[1][13 * NS + 13] +
                    PairCode::LENGTHS[2][13 * NS + 13] + PairCode::LENGTHS[3][13 * NS + 13] ==
                0);
        for (uint32_t i = 0; i < 8; ++i) bits[k * 256 + i] = (a - 13) << t.mant;
        continue;
      }
      bits[k * 256 + 0] = (1u + uint32_t(rng() % (a - 16))) << t.mant;
      bits[k * 256 + 1] = (1u + uint32_t(rng() % (a - 16))) << t.mant;
    }
    const SpecChunk sc = spec_encode(d, bits.data(), 16384);
    CAPTURE(sc.max_lane, sc.words, sc.coded.size());
    REQUIRE(sc.max_lane > 64);
    REQUIRE(sc.coded.size() < format::raw_chunk_bytes(d, 16384));  // only the lane limit makes it raw
    REQUIRE_FALSE(format::chunk_stays_coded(d, 16384, sc.words, sc.max_lane));
    const zt::Tensor tensor = tensor_of(d, bits);
    const auto s = zt::roundtrip(CodeId::pair, tensor, 14);
    REQUIRE(zt::raw_chunks(s) == 1);
    // The same chunk coded (valid in every other respect) is refused: lane counts are at most 64.
    REQUIRE(decode_status(with_chunk(s, sc.coded), tensor) == Status::corrupt_stream);
  }
}

TEST_CASE("the decoder refuses non-canonical codings that would decode to the right elements", "[pair_code][chunk]") {
  ZT_RNG("non-canonical");
  const std::pair<Tweak, const char*> tweaks[] = {
      {Tweak::escape_own_codeword, "a pair with its own codeword escaped"},
      {Tweak::esc_for_d, "an exponent with d < 16 as ESC"},
      {Tweak::esc_for_zero, "a zero exponent as ESC"},
      {Tweak::past_end_not_zero, "an item past the end not ZERO"},
      {Tweak::tail_bit, "a one after a lane's last codeword"},
      {Tweak::extra_word, "an extra word in a lane"},
  };
  int tried[6] = {};
  for (DType d : zt::kDTypes)
    for (int rep = 0; rep < 4; ++rep) {
      // odd count in the last lane with items, so an item past the end exists; escapes and zeros present
      const uint32_t n = 2 * (1 + uint32_t(rng() % 4000)) + 1;
      const std::vector<uint32_t> bits = shaped(d, n, rng, 0.05, 0.05);
      const zt::Tensor t = tensor_of(d, bits);
      const auto s = zt::roundtrip(CodeId::pair, t, 14);  // one chunk
      const SpecChunk plain = spec_encode(d, bits.data(), n);
      INFO("dtype " << dtype_name(d) << " n " << n);
      if (zt::raw_chunks(s)) continue;  // (improbable) nothing coded to tweak
      REQUIRE(with_chunk(s, plain.coded) == s);
      for (const auto& tw : tweaks) {
        INFO(tw.second);
        int& count = tried[&tw - tweaks];
        const SpecChunk sc = spec_encode(d, bits.data(), n, tw.first);
        if (!sc.tweaked) continue;  // e.g. no escape-able exponent in this data
        if (sc.coded.size() >= format::raw_chunk_bytes(d, n)) continue;
        REQUIRE(sc.coded != plain.coded);
        REQUIRE(decode_status(with_chunk(s, sc.coded), t) == Status::corrupt_stream);
        ++count;
      }
      // Nonzero padding after the lane counts or after the last lane.
      const uint32_t tiles = format::chunk_tiles(n);
      const uint32_t pad_lo = format::lane_counts_offset(tiles) + 32, hdr = format::chunk_header_bytes(tiles);
      for (uint32_t b = pad_lo; b < hdr; ++b) {
        std::vector<uint8_t> c = plain.coded;
        c[b] = uint8_t(1u << (rng() % 8));
        REQUIRE(decode_status(with_chunk(s, c), t) == Status::corrupt_stream);
      }
      for (uint32_t b = hdr + 4 * plain.words; b < plain.coded.size(); ++b) {
        std::vector<uint8_t> c = plain.coded;
        c[b] = uint8_t(1u << (rng() % 8));
        REQUIRE(decode_status(with_chunk(s, c), t) == Status::corrupt_stream);
      }
    }
  for (int k = 0; k < 6; ++k) {
    INFO(tweaks[k].second);
    CHECK(tried[k] >= 3);  // every kind was exercised (at least once per dtype, as a rule)
  }
}
