// Host level: element i of an array of fp8 (1 byte), bf16/fp16 (2 bytes) or fp32 (4 bytes), any alignment, as
// raw bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "../format.hpp"

namespace zipcomm {
namespace host {
namespace detail {

template <DType D>
inline uint32_t load_bits(const uint8_t* src, uint64_t i) {
  if (format::Traits<D>::ELEM_BYTES == 1) return src[i];
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
  if (format::Traits<D>::ELEM_BYTES == 1) {
    dst[i] = static_cast<uint8_t>(b);
  } else if (D == DType::fp32) {
    std::memcpy(dst + 4 * i, &b, 4);
  } else {
    const uint16_t v = static_cast<uint16_t>(b);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

}  // namespace detail
}  // namespace host
}  // namespace zipcomm
