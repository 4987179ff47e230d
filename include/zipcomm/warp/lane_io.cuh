// Warp level: moving one lane's 8 consecutive elements (and their raw sign/mantissa planes) between memory
// and registers. Elements travel as raw bits in uint32_t (16-bit types in the low half, fp8 in the low byte).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/warp/warp_scan.cuh>

#include "../format.hpp"
#include "../thread/bit_planes.hpp"
#include "../thread/float_bits.hpp"

namespace zipcomm {
namespace warp {

constexpr uint32_t FULL_MASK = 0xFFFFFFFFu;
constexpr int ITEMS = format::ITEMS_PER_LANE;

ZIPCOMM_DEVICE uint32_t lane_id() { return threadIdx.x & 31u; }

/// PTX prmt: byte n of the result is byte (selector nibble n & 7) of {b, a}; a nibble's bit 3 replicates that
/// byte's top bit instead (__byte_perm ignores it), which turns per-half flag bits into masks in one instruction.
ZIPCOMM_DEVICE uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}
/// Two elements in one word, the first in the low half, as the packed full-tile paths code them: 16-bit elements
/// whole, fp32 elements by their upper halves (sign, exponent and top 7 mantissa bits: a bf16 pattern).
template <DType D>
ZIPCOMM_DEVICE uint32_t packed_pair(uint32_t a, uint32_t b) {
  return prmt(a, b, D == DType::fp32 ? 0x7632u : 0x5410u);
}
/// What the halves of packed_pair's words are: the dtype itself, or bf16 for fp32 (its upper halves).
template <DType D>
constexpr DType packed_half = D == DType::fp32 ? DType::bf16 : D;
/// Brings the line holding p into L1 without a register: a load waits for every load of its scoreboard issued
/// before it, so a register prefetch is only as early as the latest load; a line in L1 makes the late one cheap.
ZIPCOMM_DEVICE void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// The larger of each 16-bit half's two fp8 magnitudes (sign bits cleared) in a word of four; the max of both halves
// is the word's. Two __vmaxu2 instead of four byte extractions.
ZIPCOMM_DEVICE uint32_t byte_magnitudes_max2(uint32_t w) { return __vmaxu2(w & 0x007F007Fu, (w >> 8) & 0x007F007Fu); }

ZIPCOMM_DEVICE uint32_t lanemask_lt() { return (1u << lane_id()) - 1u; }

/// Where a lane's `count` words sit among its coded chunk's words (format::lane_word_index): the warp's smallest
/// count (its words interleaved) and the words past it of the lanes before this one. All 32 lanes call it.
struct LaneWordPlace {
  uint32_t interleaved;
  uint32_t tail_before;
};
ZIPCOMM_DEVICE LaneWordPlace lane_word_place(uint32_t count) {
  using Scan = cub::WarpScan<uint32_t>;
  typename Scan::TempStorage unused;  // a whole warp's scan runs on shuffles and keeps nothing there
  const uint32_t interleaved = __reduce_min_sync(FULL_MASK, count);
  uint32_t tail_before;
  Scan(unused).ExclusiveSum(count - interleaved, tail_before);
  return {interleaved, tail_before};
}

/// Two words of a lane's 8 one-byte items (fp8, plane bytes), item 0 in the low byte of x: plain shifts, which the
/// compiler folds with a split of the same words.
ZIPCOMM_DEVICE uint2 pack_bytes(const uint32_t (&v)[ITEMS]) {
  return make_uint2(v[0] | v[1] << 8 | v[2] << 16 | v[3] << 24, v[4] | v[5] << 8 | v[6] << 16 | v[7] << 24);
}
/// The 8 one-byte items of two words (fp8), first item in the low byte of lo.
ZIPCOMM_DEVICE void unpack_bytes(uint32_t lo, uint32_t hi, uint32_t (&x)[ITEMS]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[i] = (lo >> (8 * i)) & 0xFFu;
    x[4 + i] = (hi >> (8 * i)) & 0xFFu;
  }
}

/// Loads `count` (<= 8) elements starting at element `first` of `src`. VECTOR: src is 16-byte aligned and
/// first is a multiple of 8, so a full lane is one 8-byte (fp8) or one or two 16-byte loads. Missing elements
/// read as 0.
template <DType D, bool VECTOR>
ZIPCOMM_DEVICE void load_items(const void* src, uint64_t first, uint32_t count, uint32_t (&x)[ITEMS]) {
  constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES;
  if (VECTOR && count == ITEMS) {
    if constexpr (EB == 1) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(src) + first));
      unpack_bytes(v.x, v.y, x);
      return;
    }
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(src) + first * EB);
    if constexpr (EB == 2) {
      uint4 v = __ldg(p);
      uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[2 * i] = w[i] & 0xFFFFu;
        x[2 * i + 1] = w[i] >> 16;
      }
    } else {
      uint4 v0 = __ldg(p), v1 = __ldg(p + 1);
      x[0] = v0.x, x[1] = v0.y, x[2] = v0.z, x[3] = v0.w, x[4] = v1.x, x[5] = v1.y, x[6] = v1.z, x[7] = v1.w;
    }
    return;
  }
  const uint8_t* b = static_cast<const uint8_t*>(src) + first * EB;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    uint32_t v = 0;
    if (uint32_t(i) < count) {
      if (VECTOR) {
        v = EB == 1   ? uint32_t(b[i])
            : EB == 2 ? uint32_t(reinterpret_cast<const uint16_t*>(b)[i])
                      : reinterpret_cast<const uint32_t*>(b)[i];
      } else {
#pragma unroll
        for (uint32_t k = 0; k < EB; ++k) v |= uint32_t(b[i * EB + k]) << (8 * k);
      }
    }
    x[i] = v;
  }
}

/// Stores `count` (<= 8) elements at element `first` of `dst`; same alignment contract as load_items.
template <DType D, bool VECTOR>
ZIPCOMM_DEVICE void store_items(void* dst, uint64_t first, uint32_t count, const uint32_t (&x)[ITEMS]) {
  constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES;
  if (VECTOR && count == ITEMS) {
    if constexpr (EB == 1) {
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(dst) + first) = pack_bytes(x);
      return;
    }
    uint4* p = reinterpret_cast<uint4*>(static_cast<uint8_t*>(dst) + first * EB);
    if constexpr (EB == 2) {
      *p = make_uint4(x[0] | (x[1] << 16), x[2] | (x[3] << 16), x[4] | (x[5] << 16), x[6] | (x[7] << 16));
    } else {
      p[0] = make_uint4(x[0], x[1], x[2], x[3]);
      p[1] = make_uint4(x[4], x[5], x[6], x[7]);
    }
    return;
  }
  uint8_t* b = static_cast<uint8_t*>(dst) + first * EB;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (uint32_t(i) < count) {
      if (VECTOR) {
        if (EB == 1)
          b[i] = uint8_t(x[i]);
        else if (EB == 2)
          reinterpret_cast<uint16_t*>(b)[i] = uint16_t(x[i]);
        else
          reinterpret_cast<uint32_t*>(b)[i] = x[i];
      } else {
#pragma unroll
        for (uint32_t k = 0; k < EB; ++k) b[i * EB + k] = uint8_t(x[i] >> (8 * k));
      }
    }
  }
}

/// load_items with the alignment known only at run time (warp-uniform `vector`: base 16-byte aligned).
template <DType D>
ZIPCOMM_DEVICE void load_items_any(const void* src, bool vector, uint64_t first, uint32_t count, uint32_t (&x)[ITEMS]) {
  if (vector)
    load_items<D, true>(src, first, count, x);
  else
    load_items<D, false>(src, first, count, x);
}
template <DType D>
ZIPCOMM_DEVICE void store_items_any(void* dst, bool vector, uint64_t first, uint32_t count, const uint32_t (&x)[ITEMS]) {
  if (vector)
    store_items<D, true>(dst, first, count, x);
  else
    store_items<D, false>(dst, first, count, x);
}
ZIPCOMM_DEVICE bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// A lane's items of the next tile, loaded a tile ahead and kept as loaded: splitting them into items at
/// load time would make the warp wait for the load right there, which is what a prefetch must avoid.
/// Full lanes of 16-byte aligned arrays take the early load; other lanes load when their tile is asked for.
template <DType D>
class LaneItemsPrefetch {
  static constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES;
  static constexpr int VECS = EB == 4 ? 2 : 1;

 public:
  /// Starts the load of the `count` items at element `first` of src (vector: src 16-byte aligned).
  ZIPCOMM_DEVICE void Issue(const void* src, bool vector, uint64_t first, uint32_t count) {
    src_ = src, vector_ = vector, first_ = first, count_ = count;
    if (vector && count == ITEMS) {
      if constexpr (EB == 1) {  // 8 bytes, 8-byte aligned
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(src) + first));
        raw_[0].x = v.x, raw_[0].y = v.y;
      } else {
        const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(src) + first * EB);
#pragma unroll
        for (int v = 0; v < VECS; ++v) raw_[v] = __ldg(p + v);
      }
    }
  }
  /// Issue() of a full lane of a 16-byte aligned array: `at` is the address of its first item.
  ZIPCOMM_DEVICE void IssueFull(const uint8_t* at) {
    vector_ = true, count_ = ITEMS;
    if constexpr (EB == 1) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(at));
      raw_[0].x = v.x, raw_[0].y = v.y;
    } else {
#pragma unroll
      for (int v = 0; v < VECS; ++v) raw_[v] = __ldg(reinterpret_cast<const uint4*>(at) + v);
    }
  }
  /// The items whose load Issue() started.
  ZIPCOMM_DEVICE void Take(uint32_t (&x)[ITEMS]) const {
    if (full())
      TakeFull(x);
    else
      load_items_any<D>(src_, vector_, first_, count_, x);
  }
  /// Whether the items in flight are a full lane's vector (TakeWords may take them).
  ZIPCOMM_DEVICE bool full() const { return vector_ && count_ == ITEMS; }
  /// 16-bit items of a full lane as loaded: two per word, the first in the low half.
  ZIPCOMM_DEVICE void TakeWords(uint32_t (&w)[ITEMS / 2]) const {
    static_assert(EB == 2, "two items per word: 16-bit dtypes");
    w[0] = raw_[0].x, w[1] = raw_[0].y, w[2] = raw_[0].z, w[3] = raw_[0].w;
  }
  /// Take() after IssueFull().
  ZIPCOMM_DEVICE void TakeFull(uint32_t (&x)[ITEMS]) const {
    if constexpr (EB == 1) {
      unpack_bytes(raw_[0].x, raw_[0].y, x);
    } else if constexpr (EB == 2) {
      const uint32_t w[4] = {raw_[0].x, raw_[0].y, raw_[0].z, raw_[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) x[2 * i] = w[i] & 0xFFFFu, x[2 * i + 1] = w[i] >> 16;
    } else {
      x[0] = raw_[0].x, x[1] = raw_[0].y, x[2] = raw_[0].z, x[3] = raw_[0].w;
      x[4] = raw_[VECS - 1].x, x[5] = raw_[VECS - 1].y, x[6] = raw_[VECS - 1].z, x[7] = raw_[VECS - 1].w;
    }
  }

 private:
  uint4 raw_[VECS] = {};
  const void* src_ = nullptr;
  uint64_t first_ = 0;
  uint32_t count_ = 0;
  bool vector_ = false;
};

/// Where one chunk's raw bits go (writers): plane 0 of the stream (the whole section), the stream's width
/// codes (indexed by tile; unused for bf16) and the chunk's low part. `full`: every tile at full width, and
/// the writer stores the chunk's (zero) width codes; else it reads the codes already there (compress's first
/// pass writes them).
struct Planes {
  uint8_t* plane0;
  uint8_t* widths;
  uint8_t* low;
  bool full;
};
/// Where one chunk's raw bits come from (readers).
using format::ConstPlanes;

/// A chunk's width codes (format::low_code_at) and the offset of the next tile's low part in the chunk's.
struct LowCursor {
  uint32_t codes[4] = {0, 0, 0, 0};
  uint32_t at = 0;
  ZIPCOMM_DEVICE uint32_t code(uint32_t t) const { return format::low_code_at(codes, t); }
};

/// The width codes of the chunk of `tiles` tiles whose first tile is `first_tile`: its words (16 tiles each,
/// 4-byte aligned; a chunk's first tile is a multiple of 16), zero past them.
ZIPCOMM_DEVICE LowCursor load_low_codes(const uint8_t* widths, uint64_t first_tile, uint32_t tiles) {
  LowCursor c;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(widths + first_tile / 4);
#pragma unroll
  for (uint32_t i = 0; i < 4; ++i) c.codes[i] = 16 * i < tiles ? __ldg(words + i) : 0u;
  return c;
}
/// Writes a chunk's width codes (its words only: the next chunk's codes may follow in the same 16 bytes).
ZIPCOMM_DEVICE void store_low_codes(uint8_t* widths, uint64_t first_tile, uint32_t tiles, const uint32_t (&codes)[4]) {
  uint32_t* words = reinterpret_cast<uint32_t*>(widths + first_tile / 4);
#pragma unroll
  for (uint32_t i = 0; i < 4; ++i)
    if (16 * i < tiles) words[i] = codes[i];
}

/// A lane's bytes of PLANES bit-planes of its 8 items (the fp16 low bits, the fp8 plane 0): bit i of byte j is bit
/// (PLANES - 1 - j) of v[i] (each below 2^PLANES; a short lane's missing items zero).
template <uint32_t PLANES>
ZIPCOMM_DEVICE uint32_t pack_bit_planes(const uint32_t (&v)[ITEMS]) {
  const uint2 bytes = pack_bytes(v);
  return thread::bytes_to_bit_planes<PLANES>(bytes.x, bytes.y);
}
/// The items' values from pack_bit_planes' bytes.
template <uint32_t PLANES>
ZIPCOMM_DEVICE void unpack_bit_planes(uint32_t planes, uint32_t (&v)[ITEMS]) {
  uint32_t lo, hi;
  thread::bit_planes_to_bytes<PLANES>(planes, lo, hi);
  unpack_bytes(lo, hi, v);
}

/// Where the bit-planes of the tile holding element `first` start in plane 0 (fp8), at this lane's byte.
template <DType D>
ZIPCOMM_DEVICE uint64_t lane_plane0_bits_at(uint64_t first) {
  return (first / format::TILE_ELEMS) * format::plane0_tile_bytes(D) + lane_id();
}

/// The low bits of a lane's items of one tile at width `code` into the tile's low part `tile_low` (the tile has
/// `tile_valid` elements; a lane's `count` of them), as write_planes writes them.
template <DType D>
ZIPCOMM_DEVICE void write_low_bits(uint8_t* tile_low, uint32_t code, uint32_t tile_valid, uint32_t count,
                                   const uint32_t (&x)[ITEMS]) {
  using FB = thread::FloatBits<D>;
  const uint32_t lane = lane_id();
  uint32_t lo[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) lo[i] = uint32_t(i) < count ? FB::low(x[i]) : 0u;
  if constexpr (D == DType::fp16) {
    if (code == 0) {  // three bit-planes: mantissa bits 2, 1, 0; byte = lane, bit = item
      const uint32_t w = pack_bit_planes<3>(lo);
      tile_low[lane] = uint8_t(w);
      tile_low[32 + lane] = uint8_t(w >> 8);
      tile_low[64 + lane] = uint8_t(w >> 16);
    }
  } else if constexpr (D == DType::fp32) {
    // A lane's bytes are one aligned vector; a short tile's padding lies in the vectors of lanes up to the one
    // that ends at the tile's 16-byte boundary.
    if (code == 0 && 16 * lane < format::low_tile_bytes(D, 0, tile_valid)) {
      *reinterpret_cast<uint4*>(tile_low + 16 * lane) =
          make_uint4(lo[0] | lo[1] << 16, lo[2] | lo[3] << 16, lo[4] | lo[5] << 16, lo[6] | lo[7] << 16);
    } else if (code == 1 && 8 * lane < format::low_tile_bytes(D, 1, tile_valid)) {
      *reinterpret_cast<uint2*>(tile_low + 8 * lane) =
          make_uint2(lo[0] >> 8 | (lo[1] >> 8) << 8 | (lo[2] >> 8) << 16 | (lo[3] >> 8) << 24,
                     lo[4] >> 8 | (lo[5] >> 8) << 8 | (lo[6] >> 8) << 16 | (lo[7] >> 8) << 24);
    }
  }
}

/// Writes the raw bits of a lane's items of one tile (its first item is element `first`): plane 0 (a byte per
/// element; fp8: the lane's bytes of the tile's bit-planes), low bits at width `code` into the tile's low part
/// `tile_low` (the tile has `tile_valid` elements; a lane's `count` of them). Bytes and bits of a short last
/// tile that no element owns are written as zero.
template <DType D>
ZIPCOMM_DEVICE void write_planes(uint8_t* plane0, uint8_t* tile_low, uint32_t code, uint32_t tile_valid,
                                 uint64_t first, uint32_t count, const uint32_t (&x)[ITEMS]) {
  using FB = thread::FloatBits<D>;
  uint32_t p0[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) p0[i] = FB::plane0(x[i]);
  if constexpr (format::plane0_bit_planes(D)) {
    constexpr uint32_t P = format::plane0_planes(D);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) p0[i] = uint32_t(i) < count ? p0[i] : 0u;
    const uint32_t w = pack_bit_planes<P>(p0);
    uint8_t* at = plane0 + lane_plane0_bits_at<D>(first);
#pragma unroll
    for (uint32_t j = 0; j < P; ++j) at[j * format::LANES] = uint8_t(w >> (8 * j));
  } else if (count == ITEMS) {
    *reinterpret_cast<uint2*>(plane0 + first) = pack_bytes(p0);
  } else {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
      if (uint32_t(i) < count) plane0[first + i] = uint8_t(p0[i]);
  }
  write_low_bits<D>(tile_low, code, tile_valid, count, x);
}

/// A lane's raw bits for one tile, as loaded: the plane-0 bytes of its 8 items (zero past `count`; fp8: its
/// bytes of the bit-planes, plane j in byte j of p0.x) and their low bits (fp16: the three bit-plane bytes;
/// fp32: 16-bit halves, two per word). Kept packed so that a
/// decoder can carry the next tile's in a few registers while it decodes this one, and unpack them when it
/// assembles.
template <DType D>
struct LanePlanes {
  uint2 p0;
  uint32_t low[D == DType::fp32 ? 4 : 1];
};

/// Loads the raw bits of a lane's items of one tile (arguments as write_planes). `bad` is set when a byte or
/// bit that no element owns is not zero, or when an fp32 tile at the 8-bit width stores only zeros (format:
/// no writer makes one). Called by the whole warp (a vote).
template <DType D>
ZIPCOMM_DEVICE LanePlanes<D> load_planes(const uint8_t* plane0, const uint8_t* tile_low, uint32_t code,
                                         uint32_t tile_valid, uint64_t first, uint32_t count, uint32_t& bad) {
  const uint32_t lane = lane_id();
  LanePlanes<D> r{};
  if constexpr (format::plane0_bit_planes(D)) {
    constexpr uint32_t P = format::plane0_planes(D);
    const uint8_t* at = plane0 + lane_plane0_bits_at<D>(first);
    uint32_t w = 0;
#pragma unroll
    for (uint32_t j = 0; j < P; ++j) w |= uint32_t(at[j * format::LANES]) << (8 * j);
    constexpr uint32_t ONE_PER_PLANE = 0x01010101u >> (8 * (4 - P));
    const uint32_t unused = (0xFFu << count) & 0xFFu;  // a short tile's bits that no element owns are zero
    bad |= (w & unused * ONE_PER_PLANE) != 0;
    r.p0 = make_uint2(w, 0u);
  } else if (count == ITEMS) {
    r.p0 = __ldg(reinterpret_cast<const uint2*>(plane0 + first));
  } else {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const uint32_t b = uint32_t(i) < count ? plane0[first + i] : 0u;
      if (i < 4)
        lo |= b << (8 * i);
      else
        hi |= b << (8 * (i - 4));
    }
    r.p0 = make_uint2(lo, hi);
  }
  if constexpr (D == DType::fp16) {
    if (code == 0) {
      r.low[0] = uint32_t(tile_low[lane]) | uint32_t(tile_low[32 + lane]) << 8 | uint32_t(tile_low[64 + lane]) << 16;
      const uint32_t unused = (0xFFu << count) & 0xFFu;
      bad |= (r.low[0] & (unused | unused << 8 | unused << 16)) != 0;
    }
  } else if constexpr (D == DType::fp32) {
    if (code == 0 && 16 * lane < format::low_tile_bytes(D, 0, tile_valid)) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(tile_low + 16 * lane));
      r.low[0] = v.x, r.low[1] = v.y, r.low[2] = v.z, r.low[3] = v.w;
    } else if (code == 1 && 8 * lane < format::low_tile_bytes(D, 1, tile_valid)) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(tile_low + 8 * lane));
      // bytes b0..b3 of v.x become the high bytes of halves: (b0 << 8) | (b1 << 24), (b2 << 8) | (b3 << 24)
      r.low[0] = __byte_perm(v.x, 0, 0x1404), r.low[1] = __byte_perm(v.x, 0, 0x3424);
      r.low[2] = __byte_perm(v.y, 0, 0x1404), r.low[3] = __byte_perm(v.y, 0, 0x3424);
    }
    if (code == 1) bad |= !__any_sync(FULL_MASK, r.low[0] | r.low[1] | r.low[2] | r.low[3]);
    if (count < ITEMS) {  // halves of missing items are padding
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) >= count) bad |= (r.low[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    }
  }
  return r;
}

/// The elements of loaded raw bits (exponent fields zero).
template <DType D>
ZIPCOMM_DEVICE void unpack_planes(const LanePlanes<D>& r, uint32_t (&x)[ITEMS]) {
  using FB = thread::FloatBits<D>;
  uint32_t p0[ITEMS], lo[ITEMS] = {};
  if constexpr (format::plane0_bit_planes(D))
    unpack_bit_planes<format::plane0_planes(D)>(r.p0.x, p0);
  else
    unpack_bytes(r.p0.x, r.p0.y, p0);
  if constexpr (D == DType::fp16) {
    unpack_bit_planes<3>(r.low[0], lo);
  } else if constexpr (D == DType::fp32) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) lo[i] = (r.low[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
  }
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) x[i] = FB::assemble(0, p0[i], lo[i]);
}

}  // namespace warp
}  // namespace zipcomm
