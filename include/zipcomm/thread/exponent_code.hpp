// Thread level: the exponent codes. A code maps one symbol (the exponent relative to its tile anchor) to a
// prefix-free codeword and back. Both codes are static: no histogram pass, no tables shipped in the stream.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../format.hpp"

namespace zipcomm {
namespace thread {

ZIPCOMM_HOST_DEVICE uint32_t count_leading_zeros(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__clz(static_cast<int>(x)));
#else
  return x == 0 ? 32u : static_cast<uint32_t>(__builtin_clz(x));
#endif
}

/// Statistics-free code grounded in the Gaussian shape of ML tensors (the default).
///
/// A tile of 256 elements is anchored at its largest exponent `a`; each element is coded as d = a - e.
/// For Gaussian data d concentrates on 1..3 with a geometric tail, and where the tile maximum sits inside
/// its binade (the top two mantissa bits of the maximum, `f`) decides how likely d = 0 is. So there are four
/// orders of the symbols, one per f, all using the same codeword lengths:
///   ranks 0,1: '0s' (2 bits)   ranks 2,3: '10s' (3 bits)   rank r >= 4: (r-2) ones then '0' (r-1 bits)
///   escape: fifteen ones, then the raw exponent (EXP_BITS bits).
/// Symbols: 0..15 are d, 16 is an exact zero/subnormal exponent (e == 0), 17 the escape.
/// The orders were fitted once, at design time, to the Gaussian model and to real training tensors
/// (scripts/derive_gaussian_code.py), with the zero symbol then fixed at rank 8 (7 bits) in every order so
/// that sparse tensors stay cheap; they are part of wire format v1 and never change with the data.
struct GaussianCode {
  static constexpr CodeId ID = CodeId::gaussian;
  static constexpr uint32_t NUM_D = 16;
  static constexpr uint32_t ZERO = 16;
  static constexpr uint32_t ESC = 17;
  static constexpr uint32_t ESC_LEN = 15;
  static constexpr uint32_t MAX_LEN = 15;
  static constexpr uint32_t NUM_RANKS = 17;

  /// Rank -> symbol for each fraction bucket f (the specification of the code).
  static constexpr uint8_t ORDER[4][NUM_RANKS] = {
      {2, 3, 1, 4, 5, 6, 7, 8, ZERO, 0, 9, 10, 11, 12, 13, 14, 15},
      {2, 3, 1, 4, 5, 6, 0, 7, ZERO, 8, 9, 10, 11, 12, 13, 14, 15},
      {1, 2, 3, 4, 0, 5, 6, 7, ZERO, 8, 9, 10, 11, 12, 13, 14, 15},
      {1, 2, 3, 0, 4, 5, 6, 7, ZERO, 8, 9, 10, 11, 12, 13, 14, 15},
  };

  // Packed forms of ORDER for register-only lookups on the device: ranks 0..7 in 5-bit fields,
  // symbols 0..7 -> rank in 4-bit fields. Ranks >= 8 and symbols >= 8 follow a rule (see rank_to_symbol).
  static constexpr uint64_t pack_order_lo(int f) {
    uint64_t v = 0;
    for (int r = 0; r < 8; ++r) v |= uint64_t(ORDER[f][r]) << (5 * r);
    return v;
  }
  static constexpr uint32_t pack_inverse_lo(int f) {
    uint32_t v = 0;
    for (int r = 0; r < int(NUM_RANKS); ++r)
      if (ORDER[f][r] < 8) v |= uint32_t(r) << (4 * ORDER[f][r]);
    return v;
  }

  /// Per-tile selection of the order.
  struct Table {
    uint64_t order_lo;
    uint32_t inverse_lo;
    uint32_t f;
  };
  ZIPCOMM_HOST_DEVICE static Table table(uint32_t f) {
    constexpr uint64_t o0 = pack_order_lo(0), o1 = pack_order_lo(1), o2 = pack_order_lo(2), o3 = pack_order_lo(3);
    constexpr uint32_t i0 = pack_inverse_lo(0), i1 = pack_inverse_lo(1), i2 = pack_inverse_lo(2),
                       i3 = pack_inverse_lo(3);
    Table t;
    t.order_lo = f == 0 ? o0 : f == 1 ? o1 : f == 2 ? o2 : o3;
    t.inverse_lo = f == 0 ? i0 : f == 1 ? i1 : f == 2 ? i2 : i3;
    t.f = f;
    return t;
  }

  ZIPCOMM_HOST_DEVICE static uint32_t rank_to_symbol(const Table& t, uint32_t r) {
    if (r < 8) return static_cast<uint32_t>(t.order_lo >> (5 * r)) & 31u;
    if (r == 8) return ZERO;  // rank 8 in every order: zeros are common in some tensors, absent in others
    if (r == 9) return t.f == 0 ? 0u : 8u;
    return r - 1;  // ranks 10..16 carry d = 9..15 in every order
  }
  ZIPCOMM_HOST_DEVICE static uint32_t symbol_to_rank(const Table& t, uint32_t s) {
    if (s < 8) return (t.inverse_lo >> (4 * s)) & 15u;
    if (s == ZERO) return 8u;
    if (s == 8) return t.f == 0 ? 7u : 9u;
    return s + 1;
  }

  /// Codeword of a symbol, MSB-first in the low `len` bits of `bits`.
  ZIPCOMM_HOST_DEVICE static void encode(const Table& t, uint32_t s, uint32_t& bits, uint32_t& len) {
    if (s == ESC) {
      bits = (1u << ESC_LEN) - 1u;
      len = ESC_LEN;
      return;
    }
    uint32_t r = symbol_to_rank(t, s);
    if (r < 4) {
      bits = ((r >> 1) << 2) | (r & 1u);
      len = (r >> 1) + 2;
    } else {
      bits = ((1u << (r - 2)) - 1u) << 1;
      len = r - 1;
    }
  }

  static constexpr uint32_t ESC_RANK = 31;  // decode_rank's answer for the escape codeword

  /// Branch-free decoding of the codeword at the top of `peek` into its rank (device hot loop; the symbol
  /// then comes from a per-tile lookup by rank). Returns ESC_RANK for the escape.
  ZIPCOMM_HOST_DEVICE static uint32_t decode_rank(uint32_t peek, uint32_t& len) {
    const uint32_t ones = count_leading_zeros(~peek);
    const uint32_t small = ones < 2 ? 1u : 0u;
    const uint32_t bit = (peek >> (30 - (ones < 1 ? ones : 1u))) & 1u;
    const uint32_t l = ones + 1 + small;
    len = l < ESC_LEN ? l : ESC_LEN;
    return ones >= ESC_LEN ? ESC_RANK : small ? 2 * ones + bit : ones + 2;
  }

  /// Decodes the codeword at the top of `peek` (MSB = next bit). Bits past the stream end read as zero.
  ZIPCOMM_HOST_DEVICE static uint32_t decode(const Table& t, uint32_t peek, uint32_t& len) {
    uint32_t ones = count_leading_zeros(~peek);
    if (ones >= ESC_LEN) {
      len = ESC_LEN;
      return ESC;
    }
    uint32_t r;
    if (ones < 2) {
      r = 2 * ones + ((peek >> (30 - ones)) & 1u);
      len = ones + 2;
    } else {
      r = ones + 2;
      len = ones + 1;
    }
    return rank_to_symbol(t, r);
  }
};

/// Fixed-width window code: 3 bits per element (d = 0..5, zero, escape). Fastest to decode, looser ratio.
struct Window3Code {
  static constexpr CodeId ID = CodeId::window3;
  static constexpr uint32_t NUM_D = 6;
  static constexpr uint32_t ZERO = 6;
  static constexpr uint32_t ESC = 7;
  static constexpr uint32_t ESC_LEN = 3;
  static constexpr uint32_t MAX_LEN = 3;
  struct Table {
    uint32_t f;
  };
  ZIPCOMM_HOST_DEVICE static Table table(uint32_t f) { return Table{f}; }
  ZIPCOMM_HOST_DEVICE static void encode(const Table&, uint32_t s, uint32_t& bits, uint32_t& len) {
    bits = s;
    len = 3;
  }
  ZIPCOMM_HOST_DEVICE static uint32_t decode(const Table&, uint32_t peek, uint32_t& len) {
    len = 3;
    return peek >> 29;
  }
  static constexpr uint32_t NUM_RANKS = 7;  // ranks are the 3-bit values; 7 is the escape
  static constexpr uint32_t ESC_RANK = 31;
  ZIPCOMM_HOST_DEVICE static uint32_t decode_rank(uint32_t peek, uint32_t& len) {
    len = 3;
    const uint32_t v = peek >> 29;
    return v == ESC ? ESC_RANK : v;
  }
  ZIPCOMM_HOST_DEVICE static uint32_t rank_to_symbol(const Table&, uint32_t r) { return r; }
};

/// Symbol of exponent e in a tile anchored at a (a != 0; tiles with a == 0 carry no codes).
template <class Code>
ZIPCOMM_HOST_DEVICE uint32_t symbol_of(uint32_t e, uint32_t a) {
  if (e == 0) return Code::ZERO;
  uint32_t d = a - e;
  return d < Code::NUM_D ? d : Code::ESC;
}

/// Exponent of a decoded non-escape symbol; returns false when the symbol cannot occur in a valid stream.
template <class Code>
ZIPCOMM_HOST_DEVICE bool exponent_of(uint32_t s, uint32_t a, uint32_t& e) {
  if (s == Code::ZERO) {
    e = 0;
    return true;
  }
  e = a - s;
  return s < a;  // d < a keeps e >= 1
}

/// An escaped exponent is valid only if no regular symbol could have carried it.
template <class Code>
ZIPCOMM_HOST_DEVICE bool escape_valid(uint32_t e, uint32_t a) {
  return e != 0 && e <= a && a - e >= Code::NUM_D;
}

template <CodeId C>
struct CodeFor;
template <>
struct CodeFor<CodeId::gaussian> {
  using type = GaussianCode;
};
template <>
struct CodeFor<CodeId::window3> {
  using type = Window3Code;
};

/// Calls f(DTypeTag, Code) for the run-time pair (dtype, code) and returns its result, or `otherwise` when the
/// pair is unknown. DTypeTag is std::integral_constant<DType, D>. One place lists the supported pairs.
template <class R, class F>
R visit_codec(DType dtype, CodeId code, R otherwise, F&& f) {
  using B = std::integral_constant<DType, DType::bf16>;
  using H = std::integral_constant<DType, DType::fp16>;
  using S = std::integral_constant<DType, DType::fp32>;
  if (code == CodeId::gaussian) {
    if (dtype == DType::bf16) return f(B{}, GaussianCode{});
    if (dtype == DType::fp16) return f(H{}, GaussianCode{});
    if (dtype == DType::fp32) return f(S{}, GaussianCode{});
  } else if (code == CodeId::window3) {
    if (dtype == DType::bf16) return f(B{}, Window3Code{});
    if (dtype == DType::fp16) return f(H{}, Window3Code{});
    if (dtype == DType::fp32) return f(S{}, Window3Code{});
  }
  return otherwise;
}

}  // namespace thread
}  // namespace zipcomm
