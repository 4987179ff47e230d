// Thread level: the pair code of the wire format (since v3). A lane codes the exponents of its items two at a time: each
// pair of tile-relative symbols gets one prefix codeword of at most 12 bits, so one lookup in a 4096-entry table
// decodes both. The code is static (no histogram pass, no table in the stream): its codeword lengths are frozen
// here and in docs/FORMAT.md, derived once by scripts/derive_pair_code.py.
#pragma once

#include <cstdint>

#include "../format.hpp"
#include "fixed_code.hpp"

namespace zipcomm {
namespace thread {

/// A tile of 256 elements is anchored at its largest exponent `a`, with `f` the top two mantissa bits of its
/// largest magnitude (where the maximum sits in its binade, which shifts the distribution of the others).
/// Symbol of exponent e: ZERO for e == 0, d = a - e for d < 16, else ESC (its raw exponent, EXP_BITS bits, follows
/// the pair; fp8_e4m3, whose exponents are 0..15, never has one, and a decoder rejects any).
/// Pair index s0 * 18 + s1; the rare pairs (below 1e-6 on the training tensors) share one escape codeword,
/// followed by s0 and s1 as 5-bit ids.
struct PairCode {
  static constexpr CodeId ID = CodeId::pair;
  static constexpr uint32_t NUM_D = 16, ZERO = 16, ESC = 17, NUM_SYMBOLS = 18;
  static constexpr uint32_t NUM_PAIRS = NUM_SYMBOLS * NUM_SYMBOLS, ESCAPE_PAIR = NUM_PAIRS;
  static constexpr uint32_t MAX_LEN = 12;  // longest codeword: the decode window
  static constexpr uint32_t ID_BITS = 5;   // an escaped pair's symbols
  static constexpr uint32_t WINDOWS = 1u << MAX_LEN;

  /// Codeword length of each pair (index s0 * 18 + s1, then the escape pair) per fraction bucket f; 0: the pair
  /// is coded through the escape pair. Canonical code: codewords are assigned in order of (length, index).
  static constexpr uint8_t LENGTHS[4][NUM_PAIRS + 1] = {
{12,10,9,9,10,11,12,12,12,12,12,12,12,0,0,0,12,0,10,5,4,5,6,7,8,9,10,11,12,12,12,12,12,12,10,12,9,4,3,4,5,6,6,7,8,9,10,12,12,12,12,12,9,12,9,5,4,4,5,6,7,8,9,10,11,12,12,12,12,12,9,12,10,6,5,5,6,7,8,9,10,11,12,12,12,12,12,12,10,12,11,7,6,6,7,8,9,9,10,12,12,12,12,12,12,12,11,12,12,8,6,7,8,9,9,10,11,12,12,12,12,12,12,12,12,12,12,9,7,8,9,9,10,11,12,12,12,12,12,12,12,12,12,0,12,10,8,9,10,10,12,12,12,12,12,12,12,12,0,0,12,0,12,11,10,10,11,11,12,12,12,12,12,12,12,0,0,0,12,0,12,12,10,11,12,12,12,12,12,12,12,12,12,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,12,12,12,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,12,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,0,0,0,0,0,0,12,0,0,12,12,12,12,12,12,0,12,0,0,0,0,0,0,0,0,0,0,12,12,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,12,10,9,9,10,11,12,12,12,12,12,12,12,12,0,0,12,0,0,12,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,12},
    {10,8,7,8,9,10,11,11,12,12,12,12,12,12,12,0,12,12,8,5,4,5,6,6,8,9,10,10,11,12,12,12,12,12,10,12,7,4,3,4,5,6,7,8,9,10,11,12,12,12,12,12,9,12,8,5,4,4,5,6,7,8,9,10,11,12,12,12,12,12,9,12,9,6,5,5,6,7,8,9,10,11,12,12,12,12,12,12,10,12,10,7,6,6,7,8,9,10,11,12,12,12,12,12,12,0,11,12,11,8,7,7,8,9,10,11,12,12,12,12,12,12,12,0,12,0,12,8,8,8,9,10,11,12,12,12,12,12,12,12,12,0,12,0,12,10,9,9,10,11,12,12,12,12,12,12,12,12,0,12,12,0,12,10,10,10,11,12,12,12,12,12,12,12,0,0,0,0,12,0,12,11,11,11,12,12,12,12,12,12,12,12,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,0,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,0,0,0,0,0,12,0,12,0,12,12,12,12,12,12,12,12,0,12,0,0,0,0,0,0,12,0,12,12,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,0,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,0,12,10,9,9,10,11,12,12,12,12,12,12,12,12,0,0,12,0,0,12,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,12},
    {7,5,6,6,7,8,9,10,11,12,12,12,12,12,12,12,11,12,6,4,4,5,5,6,7,9,9,11,12,12,12,12,12,12,9,12,6,4,4,4,5,6,7,8,9,10,11,12,12,12,12,12,9,12,6,5,4,5,6,7,8,9,10,11,12,12,12,12,12,12,10,12,7,5,5,6,7,8,9,10,11,12,12,12,12,12,12,12,11,12,8,6,6,7,8,9,10,11,12,12,12,12,12,12,12,12,12,12,9,7,7,8,9,10,11,12,12,12,12,12,12,12,0,12,12,0,10,8,8,9,10,11,12,12,12,12,12,12,12,0,12,0,12,0,11,9,9,10,11,12,12,12,12,12,12,12,12,0,0,0,12,0,12,11,10,11,12,12,12,12,12,12,12,12,12,12,0,0,12,0,12,12,11,12,12,12,12,12,12,12,12,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,12,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,12,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,0,0,0,0,0,0,0,0,12,0,12,12,12,12,12,12,0,12,0,0,0,0,0,0,0,0,0,0,12,12,12,0,0,12,0,0,0,0,0,0,0,0,0,0,0,0,11,9,9,10,11,12,12,12,12,12,12,12,12,12,0,0,12,0,12,12,12,12,12,0,0,0,12,12,0,0,0,0,0,0,0,0,12},
    {6,5,5,6,7,8,9,10,11,12,12,12,12,12,12,12,10,12,5,3,4,5,5,6,7,8,9,10,11,12,12,12,12,12,9,12,5,4,4,5,6,7,8,9,9,11,12,12,12,12,12,12,9,12,6,5,5,5,6,7,8,9,10,11,12,12,12,12,12,12,10,12,7,5,6,6,7,8,9,10,11,12,12,12,12,12,12,12,11,12,8,6,7,7,8,9,10,11,12,12,12,12,12,12,12,0,12,12,9,7,8,8,9,10,11,12,12,12,12,12,12,12,12,0,12,12,10,8,8,9,10,11,12,12,12,12,12,12,12,0,0,0,12,0,11,9,9,10,11,12,12,12,12,12,12,12,12,0,0,0,12,0,12,10,11,11,12,12,12,12,12,12,12,12,12,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,12,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,12,12,12,0,0,0,0,12,0,12,12,12,12,12,12,12,12,12,0,0,0,0,0,0,0,12,0,12,12,12,12,12,12,12,12,0,0,0,0,0,0,0,0,12,0,12,12,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,0,0,10,9,9,10,11,12,12,12,12,12,12,12,12,12,0,0,12,0,12,12,12,12,12,12,0,0,0,0,0,0,0,0,0,0,0,0,12},
  };

  /// Decode table entry (one per 12-bit window): bits 0-3 codeword length, 4 slow (escape pair or an ESC
  /// symbol), 5/6 s0/s1 is ESC, 7-14 d0, 15 s0 is ZERO, 23-30 d1, 31 s1 is ZERO. The d fields sit where a
  /// bf16 pair's exponents sit, so (a << 7 | a << 23 | FILL) - entry yields both exponents in place.
  static constexpr uint32_t LEN_MASK = 0xFu, SLOW = 1u << 4, ESC0 = 1u << 5, ESC1 = 1u << 6;
  static constexpr uint32_t ZERO0 = 1u << 15, ZERO1 = 1u << 31, D_FIELDS = 0x7F807F80u;
  static constexpr uint32_t FILL = 0x807F807Fu;  // keeps the subtraction free of borrows between fields

  /// Encode table entry (one per pair): the bits to append, right-aligned (an escaped pair's include the
  /// escape codeword and both ids), and their count in bits 24-31.
  static constexpr uint32_t ENCODE_LEN_SHIFT = 24;

  struct Tables {
    uint32_t encode[4][NUM_PAIRS];
    uint32_t decode[4][WINDOWS];
  };

  static constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t f = 0; f < 4; ++f) {
      // Canonical assignment: lengths ascending, index ascending within a length.
      uint32_t code = 0, prev_len = 0;
      uint32_t codes[NUM_PAIRS + 1] = {};
      for (uint32_t len = 1; len <= MAX_LEN; ++len)
        for (uint32_t i = 0; i <= NUM_PAIRS; ++i) {
          if (LENGTHS[f][i] != len) continue;
          code <<= (len - prev_len);
          prev_len = len;
          codes[i] = code++;
        }
      const uint32_t esc_len = LENGTHS[f][ESCAPE_PAIR];
      for (uint32_t i = 0; i < NUM_PAIRS; ++i) {
        const uint32_t s0 = i / NUM_SYMBOLS, s1 = i % NUM_SYMBOLS;
        t.encode[f][i] = LENGTHS[f][i]
                             ? codes[i] | LENGTHS[f][i] << ENCODE_LEN_SHIFT
                             : (codes[ESCAPE_PAIR] << (2 * ID_BITS) | s0 << ID_BITS | s1) |
                                   (esc_len + 2 * ID_BITS) << ENCODE_LEN_SHIFT;
      }
      for (uint32_t i = 0; i <= NUM_PAIRS; ++i) {
        const uint32_t len = LENGTHS[f][i];
        if (len == 0) continue;
        uint32_t e = len;
        if (i == ESCAPE_PAIR) {
          e |= SLOW;
        } else {
          const uint32_t s0 = i / NUM_SYMBOLS, s1 = i % NUM_SYMBOLS;
          e |= s0 < NUM_D ? s0 << 7 : s0 == ZERO ? ZERO0 : ESC0 | SLOW;
          e |= s1 < NUM_D ? s1 << 23 : s1 == ZERO ? ZERO1 : ESC1 | SLOW;
        }
        const uint32_t first = codes[i] << (MAX_LEN - len), count = 1u << (MAX_LEN - len);
        for (uint32_t w = first; w < first + count; ++w) t.decode[f][w] = e;
      }
    }
    return t;
  }

  /// Symbol of exponent e in a tile anchored at a (a != 0: tiles anchored at 0 carry no codes).
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t symbol_of(uint32_t e, uint32_t a) {
    return e == 0 ? ZERO : a - e < NUM_D ? a - e : ESC;
  }
  /// An escaped exponent is valid only if no d symbol could have carried it.
  ZIPCOMM_HOST_DEVICE static constexpr bool escape_valid(uint32_t e, uint32_t a) {
    return e != 0 && e <= a && a - e >= NUM_D;
  }
};

namespace detail {
constexpr bool pair_code_complete(uint32_t f) {  // Kraft sum exactly 1: every 12-bit window decodes
  uint64_t sum = 0;
  for (uint32_t i = 0; i <= PairCode::NUM_PAIRS; ++i)
    if (PairCode::LENGTHS[f][i]) sum += uint64_t(1) << (PairCode::MAX_LEN - PairCode::LENGTHS[f][i]);
  return sum == PairCode::WINDOWS && PairCode::LENGTHS[f][PairCode::ESCAPE_PAIR] != 0;
}
static_assert(pair_code_complete(0) && pair_code_complete(1) && pair_code_complete(2) && pair_code_complete(3),
              "the pair code must be complete");
}  // namespace detail

/// The encode and decode tables, computed at compile time (host) and held in device global memory, from where
/// kernels copy them into shared memory (warp::LoadPairTables).
inline constexpr PairCode::Tables PAIR_TABLES = PairCode::make_tables();
#if defined(__CUDACC__)
static __device__ constexpr PairCode::Tables DEVICE_PAIR_TABLES = PairCode::make_tables();
#endif

template <CodeId C>
struct CodeFor;
template <>
struct CodeFor<CodeId::pair> {
  using type = PairCode;
};

/// Calls f(DTypeTag, Code) for the run-time pair (dtype, code) and returns its result, or `otherwise` when the
/// pair is unknown. One place lists the codes.
template <class R, class F>
R visit_codec(DType dtype, CodeId code, R otherwise, F&& f) {
  if (code == CodeId::pair) return visit_dtype(dtype, otherwise, [&](auto d) -> R { return f(d, PairCode{}); });
  if (code == CodeId::fixed) return visit_dtype(dtype, otherwise, [&](auto d) -> R { return f(d, FixedCode{}); });
  return otherwise;
}

}  // namespace thread
}  // namespace zipcomm
