// Thread level: splitting one element into (exponent, raw sign/mantissa bits) and back, per dtype.
#pragma once

#include <cstdint>

#include "../format.hpp"

namespace zipcomm {
namespace thread {

/// Per-dtype bit surgery. `plane0` is what plane 0 stores of an element: a byte of the sign and the top 7
/// mantissa bits, or, for fp8, the sign-mantissa value sign << MANT_BITS | mantissa (format::plane0_planes bits,
/// stored as bit-planes). `low` is the rest of the mantissa (format::low_bits: fp16 3 bits, fp32 16; none for
/// bf16 and fp8), stored per tile at a width.
template <DType D>
struct FloatBits;

template <>
struct FloatBits<DType::bf16> {
  using Bits = uint16_t;
  static constexpr int EXP_BITS = 8, MANT_BITS = 7;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 7) & 0xFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7FFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 8) & 0x80u) | (b & 0x7Fu); }
  ZIPCOMM_HOST_DEVICE static uint32_t low(uint32_t) { return 0; }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t /*low*/) {
    return ((p0 & 0x80u) << 8) | (e << 7) | (p0 & 0x7Fu);
  }
};

template <>
struct FloatBits<DType::fp16> {
  using Bits = uint16_t;
  static constexpr int EXP_BITS = 5, MANT_BITS = 10;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 10) & 0x1Fu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7FFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 8) & 0x80u) | ((b >> 3) & 0x7Fu); }
  ZIPCOMM_HOST_DEVICE static uint32_t low(uint32_t b) { return b & 7u; }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t low) {
    return ((p0 & 0x80u) << 8) | (e << 10) | ((p0 & 0x7Fu) << 3) | (low & 7u);
  }
};

template <>
struct FloatBits<DType::fp32> {
  using Bits = uint32_t;
  static constexpr int EXP_BITS = 8, MANT_BITS = 23;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 23) & 0xFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7FFFFFFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 24) & 0x80u) | ((b >> 16) & 0x7Fu); }
  ZIPCOMM_HOST_DEVICE static uint32_t low(uint32_t b) { return b & 0xFFFFu; }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t low) {
    return ((p0 & 0x80u) << 24) | (e << 23) | ((p0 & 0x7Fu) << 16) | (low & 0xFFFFu);
  }
};

template <>
struct FloatBits<DType::fp8_e4m3> {
  using Bits = uint8_t;
  static constexpr int EXP_BITS = 4, MANT_BITS = 3;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 3) & 0xFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7Fu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 4) & 0x8u) | (b & 0x7u); }
  ZIPCOMM_HOST_DEVICE static uint32_t low(uint32_t) { return 0; }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t /*low*/) {
    return ((p0 & 0x8u) << 4) | (e << 3) | (p0 & 0x7u);
  }
};

template <>
struct FloatBits<DType::fp8_e5m2> {
  using Bits = uint8_t;
  static constexpr int EXP_BITS = 5, MANT_BITS = 2;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 2) & 0x1Fu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7Fu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 5) & 0x4u) | (b & 0x3u); }
  ZIPCOMM_HOST_DEVICE static uint32_t low(uint32_t) { return 0; }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t /*low*/) {
    return ((p0 & 0x4u) << 5) | (e << 2) | (p0 & 0x3u);
  }
};

/// The largest width code (fewest bits stored) whose dropped low bits are all zero in `low_or`, the OR of the
/// low bits of a tile's elements.
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t low_code_for(uint32_t low_or) {
  if constexpr (D == DType::fp32) return low_or == 0 ? 2u : (low_or & 0xFFu) == 0 ? 1u : 0u;
  else if constexpr (D == DType::fp16) return low_or == 0 ? 1u : 0u;
  else return 0u;
}

/// Top two mantissa bits of a magnitude: where the tile maximum sits inside its binade. Selects the code table.
/// (fp8_e5m2: its whole mantissa.)
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t fraction_of(uint32_t magnitude) {
  return (magnitude >> (FloatBits<D>::MANT_BITS - 2)) & 3u;
}

}  // namespace thread
}  // namespace zipcomm
