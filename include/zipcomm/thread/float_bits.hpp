// Thread level: splitting one element into (exponent, raw sign/mantissa bits) and back, per dtype.
#pragma once

#include <cstdint>

#include "../format.hpp"

namespace zipcomm {
namespace thread {

/// Per-dtype bit surgery. `plane0` is the byte every dtype stores per element; fp16 adds 3 bits (sign, m9, m8)
/// kept in bit-planes, fp32 adds the low 16 mantissa bits.
template <DType D>
struct FloatBits;

template <>
struct FloatBits<DType::bf16> {
  using Bits = uint16_t;
  static constexpr int EXP_BITS = 8, MANT_BITS = 7;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 7) & 0xFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7FFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 8) & 0x80u) | (b & 0x7Fu); }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t /*p1*/) {
    return ((p0 & 0x80u) << 8) | (e << 7) | (p0 & 0x7Fu);
  }
};

template <>
struct FloatBits<DType::fp16> {
  using Bits = uint16_t;
  static constexpr int EXP_BITS = 5, MANT_BITS = 10;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 10) & 0x1Fu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7FFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return b & 0xFFu; }
  /// 3 bits: bit 2 = sign, bit 1 = mantissa bit 9, bit 0 = mantissa bit 8.
  ZIPCOMM_HOST_DEVICE static uint32_t plane1(uint32_t b) { return ((b >> 13) & 4u) | ((b >> 8) & 3u); }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t p1) {
    return ((p1 & 4u) << 13) | (e << 10) | ((p1 & 3u) << 8) | (p0 & 0xFFu);
  }
};

template <>
struct FloatBits<DType::fp32> {
  using Bits = uint32_t;
  static constexpr int EXP_BITS = 8, MANT_BITS = 23;
  ZIPCOMM_HOST_DEVICE static uint32_t exponent(uint32_t b) { return (b >> 23) & 0xFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t magnitude(uint32_t b) { return b & 0x7FFFFFFFu; }
  ZIPCOMM_HOST_DEVICE static uint32_t plane0(uint32_t b) { return ((b >> 24) & 0x80u) | ((b >> 16) & 0x7Fu); }
  ZIPCOMM_HOST_DEVICE static uint32_t plane1(uint32_t b) { return b & 0xFFFFu; }
  ZIPCOMM_HOST_DEVICE static constexpr uint32_t assemble(uint32_t e, uint32_t p0, uint32_t p1) {
    return ((p0 & 0x80u) << 24) | (e << 23) | ((p0 & 0x7Fu) << 16) | (p1 & 0xFFFFu);
  }
};

/// Top two mantissa bits of a magnitude: where the tile maximum sits inside its binade. Selects the code table.
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t fraction_of(uint32_t magnitude) {
  return (magnitude >> (FloatBits<D>::MANT_BITS - 2)) & 3u;
}

}  // namespace thread
}  // namespace zipcomm
