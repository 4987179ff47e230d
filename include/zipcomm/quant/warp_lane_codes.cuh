// Warp level, device: what the quantizer and the dequantizer of a "ZPQT" message (quant_format.hpp) share.
// Every lane owns ITEMS consecutive elements of a tile: 32 for bf16 and fp16 input, 16 for fp32 (64 bytes, four
// 16-byte vectors), 32 when dequantizing. A lane's elements lie in one group (a group of G = 32, 64, 128 elements
// spans G / ITEMS neighbouring lanes) and their codes are ITEMS * b / 8 consecutive bytes of the codes section, so
// a lane loads and stores whole vectors on its own, and a group's range is a shuffle reduction over its lanes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../format.hpp"
#include "group_quantizer.hpp"
#include "quant_format.hpp"

namespace zipcomm {
namespace quant {
namespace warp {

constexpr uint32_t FULL_MASK = 0xFFFFFFFFu;
constexpr uint32_t LANE_BYTES = 64;  // input bytes a lane quantizes per tile: four 16-byte vectors in flight
/// Elements per lane when quantizing dtype D: 32 (bf16, fp16) or 16 (fp32).
template <DType D>
constexpr uint32_t quantize_lane_items() {
  return LANE_BYTES / format::Traits<D>::ELEM_BYTES;
}
constexpr uint32_t DEQUANTIZE_LANE_ITEMS = 32;  // a lane's codes are one whole 32-element block

ZIPCOMM_DEVICE uint32_t lane_id() { return threadIdx.x & 31u; }

/// A lane's elements of a tile of 32 * ITEMS: the first one's index, and how many exist (fewer than ITEMS only
/// in the last tile).
struct LaneSpan {
  uint64_t first;
  uint32_t count;
};
template <uint32_t ITEMS>
ZIPCOMM_DEVICE LaneSpan lane_span(uint64_t n, uint64_t tile) {
  const uint64_t first = (tile * 32u + lane_id()) * ITEMS;
  const uint64_t left = n > first ? n - first : 0;
  return {first, static_cast<uint32_t>(left < ITEMS ? left : ITEMS)};
}

/// Whether the message holds code bytes for the lane whose first element is `first`: its 32-element code block
/// exists (the second lane of a block may hold only the zero codes past n, which are written and checked too).
ZIPCOMM_DEVICE bool lane_has_codes(const Layout& l, uint64_t first) { return first < l.num_blocks * BLOCK_ELEMS; }

/// Where a lane's code bytes start: element `first`'s code (first is a multiple of 8), at byte first * b / 8.
ZIPCOMM_DEVICE uint64_t lane_codes_offset(const Layout& l, uint64_t first) {
  return l.codes_offset + (first / 8) * l.bits;
}

namespace detail {

/// Calls f(std::integral_constant<uint32_t, b>) for b = bits (2..8): code layouts resolved at compile time.
template <class F>
ZIPCOMM_DEVICE void with_bits(uint32_t bits, F&& f) {
  switch (bits) {
    case 2: f(std::integral_constant<uint32_t, 2>{}); break;
    case 3: f(std::integral_constant<uint32_t, 3>{}); break;
    case 4: f(std::integral_constant<uint32_t, 4>{}); break;
    case 5: f(std::integral_constant<uint32_t, 5>{}); break;
    case 6: f(std::integral_constant<uint32_t, 6>{}); break;
    case 7: f(std::integral_constant<uint32_t, 7>{}); break;
    default: f(std::integral_constant<uint32_t, 8>{}); break;
  }
}

/// The widest access that divides BYTES: a lane's code bytes start at a multiple of BYTES (from a 16-byte
/// aligned section), so they are aligned to it.
template <uint32_t BYTES>
constexpr uint32_t access_bytes() {
  return BYTES % 16 == 0 ? 16 : BYTES % 8 == 0 ? 8 : BYTES % 4 == 0 ? 4 : 2;
}

/// Stores BYTES bytes of the little-endian words w at `at`.
template <uint32_t BYTES>
ZIPCOMM_DEVICE void store_bytes(uint8_t* at, const uint32_t* w) {
  constexpr uint32_t A = access_bytes<BYTES>();
#pragma unroll
  for (uint32_t c = 0; c < BYTES / A; ++c) {
    if (A == 16)
      reinterpret_cast<uint4*>(at)[c] = make_uint4(w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]);
    else if (A == 8)
      reinterpret_cast<uint2*>(at)[c] = make_uint2(w[2 * c], w[2 * c + 1]);
    else if (A == 4)
      reinterpret_cast<uint32_t*>(at)[c] = w[c];
    else
      reinterpret_cast<uint16_t*>(at)[c] = static_cast<uint16_t>(w[c / 2] >> (16 * (c % 2)));
  }
}

/// Loads what store_bytes stores into w (words of w past BYTES are left as they are).
template <uint32_t BYTES>
ZIPCOMM_DEVICE void load_bytes(const uint8_t* at, uint32_t* w) {
  constexpr uint32_t A = access_bytes<BYTES>();
#pragma unroll
  for (uint32_t c = 0; c < BYTES / A; ++c) {
    if (A == 16) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(at) + c);
      w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
    } else if (A == 8) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(at) + c);
      w[2 * c] = v.x, w[2 * c + 1] = v.y;
    } else if (A == 4) {
      w[c] = __ldg(reinterpret_cast<const uint32_t*>(at) + c);
    } else {
      const uint32_t h = __ldg(reinterpret_cast<const uint16_t*>(at) + c);
      w[c / 2] = c % 2 ? w[c / 2] | h << 16 : h;
    }
  }
}

/// Mask of the first `valid` bits of word k of a bit string.
ZIPCOMM_DEVICE uint32_t valid_bits_mask(uint32_t valid, uint32_t k) {
  const uint32_t from = 32u * k;
  return valid <= from ? 0u : valid - from >= 32u ? ~0u : (1u << (valid - from)) - 1u;
}

/// fp32 minimum and maximum that return NaN when either operand is NaN (fminf/fmaxf drop a NaN).
ZIPCOMM_DEVICE float min_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a || b != b ? a + b : a < b ? a : b;
#endif
}
ZIPCOMM_DEVICE float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a || b != b ? a + b : a > b ? a : b;
#endif
}

/// a * b + c in one integer multiply-add (for b = 2^bits the compiler would emit a shift and an add).
ZIPCOMM_DEVICE uint32_t mad_u32(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
#else
  return a * b + c;
#endif
}

/// fp32 -> two elements of dtype O in one word (element 2k in the low half), round to nearest even: the bits
/// thread::from_f32<O> gives, two conversions per instruction.
template <DType O>
ZIPCOMM_DEVICE uint32_t narrow_pair(float a, float b) {
  if constexpr (O == DType::bf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

ZIPCOMM_DEVICE void report(Status* status, Status s) {
  if (s != Status::ok) atomicCAS(reinterpret_cast<unsigned int*>(status), 0u, static_cast<unsigned int>(s));
}

}  // namespace detail

}  // namespace warp
}  // namespace quant
}  // namespace zipcomm
