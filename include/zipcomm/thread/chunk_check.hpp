// Thread level: the check of a chunk's elements that the wire format stores per chunk (docs/FORMAT.md, section 7).
//
// Each of the 32 lanes folds the elements it owns (8 per tile, in tile order) into one running word, with the
// round of xxHash32: acc = rotl(acc + word * P2, 13) * P1. A round is a bijection of the word for a fixed acc
// and of acc for a fixed word, so any change confined to one lane's elements always changes that lane's word;
// the chunk's check is the sum of the lanes' finalized words (murmur3's fmix32, a bijection). Changes spread
// over several lanes go unnoticed with probability about 2^-32. 16-bit elements are folded two to a word, 8-bit
// (fp8) elements four (the first in the low byte; a lane's missing items count as zero).
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"

namespace zipcomm {
namespace thread {

struct ChunkCheck {
  static constexpr uint32_t P1 = 2654435761u, P2 = 2246822519u, P3 = 3266489917u;

  /// The running word of lane `lane` before its first element (lanes start apart, so swapping the elements
  /// of two lanes changes the check).
  ZIPCOMM_HOST_DEVICE static uint32_t lane_seed(uint32_t lane) { return 0x7A43504Du + lane * P3; }

  ZIPCOMM_HOST_DEVICE static uint32_t round(uint32_t acc, uint32_t word) {
    const uint32_t v = acc + word * P2;
    return ((v << 13) | (v >> 19)) * P1;
  }

  ZIPCOMM_HOST_DEVICE static uint32_t lane_final(uint32_t acc) {
    acc ^= acc >> 16;
    acc *= 0x85EBCA6Bu;
    acc ^= acc >> 13;
    acc *= 0xC2B2AE35u;
    return acc ^ (acc >> 16);
  }

  /// Two 16-bit elements (low halves of a and b) as one word, a in the low half.
  ZIPCOMM_HOST_DEVICE static uint32_t pack_pair(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(a, b, 0x5410);
#else
    return (a & 0xFFFFu) | (b << 16);
#endif
  }

  /// Four 8-bit elements (low bytes of a..d) as one word, a in the low byte.
  ZIPCOMM_HOST_DEVICE static uint32_t pack_quad(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
#else
    return (a & 0xFFu) | (b & 0xFFu) << 8 | (c & 0xFFu) << 16 | (d & 0xFFu) << 24;
#endif
  }

  /// Folds a lane's `count` (<= 8) items of one tile (raw element bits; items past count are ignored).
  template <DType D>
  ZIPCOMM_HOST_DEVICE static uint32_t add_items(uint32_t acc, const uint32_t (&x)[format::ITEMS_PER_LANE],
                                                uint32_t count) {
    constexpr int ITEMS = format::ITEMS_PER_LANE;
    if constexpr (format::Traits<D>::ELEM_BYTES == 1) {
      if (count == uint32_t(ITEMS)) {
        acc = round(acc, pack_quad(x[0], x[1], x[2], x[3]));
        return round(acc, pack_quad(x[4], x[5], x[6], x[7]));
      }
      ZIPCOMM_UNROLL
      for (int q = 0; q < ITEMS / 4; ++q)
        if (uint32_t(4 * q) < count) {
          uint32_t v[4];
          ZIPCOMM_UNROLL
          for (int k = 0; k < 4; ++k) v[k] = uint32_t(4 * q + k) < count ? x[4 * q + k] : 0u;
          acc = round(acc, pack_quad(v[0], v[1], v[2], v[3]));
        }
      return acc;
    }
    if (count == uint32_t(ITEMS)) {
      if (D == DType::fp32) {
        ZIPCOMM_UNROLL
        for (int i = 0; i < ITEMS; ++i) acc = round(acc, x[i]);
      } else {
        ZIPCOMM_UNROLL
        for (int p = 0; p < ITEMS / 2; ++p) acc = round(acc, pack_pair(x[2 * p], x[2 * p + 1]));
      }
      return acc;
    }
    if (D == DType::fp32) {
      ZIPCOMM_UNROLL
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < count) acc = round(acc, x[i]);
    } else {
      ZIPCOMM_UNROLL
      for (int p = 0; p < ITEMS / 2; ++p)
        if (uint32_t(2 * p) < count)
          acc = round(acc, pack_pair(x[2 * p], uint32_t(2 * p + 1) < count ? x[2 * p + 1] : 0u));
    }
    return acc;
  }
};

/// The check of a chunk of `elems` elements (raw bits, element order): what an encoder stores and a decoder
/// must find again. Host reference; the warp encoder and decoder compute it lane by lane as they go.
template <DType D>
inline uint32_t chunk_check(const uint32_t* bits, uint32_t elems) {
  constexpr int ITEMS = format::ITEMS_PER_LANE;
  const uint32_t tiles = format::chunk_tiles(elems);
  uint32_t sum = 0;
  for (uint32_t lane = 0; lane < uint32_t(format::LANES); ++lane) {
    uint32_t acc = ChunkCheck::lane_seed(lane);
    for (uint32_t t = 0; t < tiles; ++t) {
      const uint32_t count = format::lane_valid_count(elems, t, lane);
      uint32_t x[ITEMS] = {};
      for (uint32_t i = 0; i < count; ++i) x[i] = bits[t * format::TILE_ELEMS + lane * ITEMS + i];
      acc = ChunkCheck::add_items<D>(acc, x, count);
    }
    sum += ChunkCheck::lane_final(acc);
  }
  return sum;
}

/// chunk_check with the dtype known at run time (0 for an unknown dtype).
inline uint32_t chunk_check(DType dtype, const uint32_t* bits, uint32_t elems) {
  return visit_dtype(dtype, 0u, [&](auto d) { return chunk_check<decltype(d)::value>(bits, elems); });
}

}  // namespace thread
}  // namespace zipcomm
