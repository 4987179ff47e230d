// Thread level: the bit-planes of a lane's 8 items (fp8 plane 0: format::plane0_planes of them; fp16 low bits:
// three), byte j holding bit (planes - 1 - j) of each item's value, bit i = item i, to and from the values
// themselves, a byte each, whole words at a time: an 8x8 bit transpose by two swaps and a split (Hacker's Delight,
// section 7-3).
#pragma once

#include <cstdint>

#include "../config.hpp"

namespace zipcomm {
namespace thread {

/// Bytes 0..planes-1 of x in reverse order (the planes' bit order against a value's), the rest zero.
template <uint32_t PLANES>
ZIPCOMM_HOST_DEVICE uint32_t reverse_plane_bytes(uint32_t x) {
  static_assert(PLANES == 3 || PLANES == 4, "3 or 4 planes: fp8 plane 0, fp16 low bits");
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, 0u, PLANES == 4 ? 0x0123u : 0x4012u);
#else
  const uint32_t r = (x & 0xFFu) << 24 | (x & 0xFF00u) << 8 | (x >> 8 & 0xFF00u) | x >> 24;
  return PLANES == 4 ? r : r >> 8;
#endif
}

/// The plane bytes of 8 values below 2^PLANES: items 0-3 in the bytes of lo, items 4-7 in those of hi.
template <uint32_t PLANES>
ZIPCOMM_HOST_DEVICE uint32_t bytes_to_bit_planes(uint32_t lo, uint32_t hi) {
  uint32_t x = lo | hi << 4;  // byte k: item k in the low nibble, item k + 4 in the high one
  uint32_t t = (x ^ (x >> 14)) & 0x0000CCCCu;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 7)) & 0x00AA00AAu;
  x ^= t ^ (t << 7);  // byte b: bit b of every item
  return reverse_plane_bytes<PLANES>(x);
}

/// The 8 values of PLANES plane bytes: items 0-3 into the bytes of lo, items 4-7 into those of hi.
template <uint32_t PLANES>
ZIPCOMM_HOST_DEVICE void bit_planes_to_bytes(uint32_t planes, uint32_t& lo, uint32_t& hi) {
  uint32_t x = reverse_plane_bytes<PLANES>(planes);  // byte b: bit b of every item
  uint32_t t = (x ^ (x >> 7)) & 0x00AA00AAu;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCCu;
  x ^= t ^ (t << 14);
  lo = x & 0x0F0F0F0Fu;
  hi = (x >> 4) & 0x0F0F0F0Fu;
}

}  // namespace thread
}  // namespace zipcomm
