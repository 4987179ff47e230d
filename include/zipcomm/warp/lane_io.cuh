// Warp level: moving one lane's 8 consecutive elements (and their raw sign/mantissa planes) between memory
// and registers. Elements travel as raw bits in uint32_t (16-bit types in the low half).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../format.hpp"
#include "../thread/float_bits.hpp"

namespace zipcomm {
namespace warp {

constexpr uint32_t FULL_MASK = 0xFFFFFFFFu;
constexpr int ITEMS = format::ITEMS_PER_LANE;

ZIPCOMM_DEVICE uint32_t lane_id() { return threadIdx.x & 31u; }
ZIPCOMM_DEVICE uint32_t lanemask_lt() { return (1u << lane_id()) - 1u; }

/// Loads `count` (<= 8) elements starting at element `first` of `src`. VECTOR: src is 16-byte aligned and
/// first is a multiple of 8, so a full lane is one or two 16-byte loads. Missing elements read as 0.
template <DType D, bool VECTOR>
ZIPCOMM_DEVICE void load_items(const void* src, uint64_t first, uint32_t count, uint32_t (&x)[ITEMS]) {
  constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES;
  if (VECTOR && count == ITEMS) {
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
        v = EB == 2 ? uint32_t(reinterpret_cast<const uint16_t*>(b)[i]) : reinterpret_cast<const uint32_t*>(b)[i];
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
        if (EB == 2)
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
      const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(src) + first * EB);
#pragma unroll
      for (int v = 0; v < VECS; ++v) raw_[v] = __ldg(p + v);
    }
  }
  /// The items whose load Issue() started.
  ZIPCOMM_DEVICE void Take(uint32_t (&x)[ITEMS]) const {
    if (vector_ && count_ == ITEMS) {
      if constexpr (EB == 2) {
        const uint32_t w[4] = {raw_[0].x, raw_[0].y, raw_[0].z, raw_[0].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) x[2 * i] = w[i] & 0xFFFFu, x[2 * i + 1] = w[i] >> 16;
      } else {
        x[0] = raw_[0].x, x[1] = raw_[0].y, x[2] = raw_[0].z, x[3] = raw_[0].w;
        x[4] = raw_[VECS - 1].x, x[5] = raw_[VECS - 1].y, x[6] = raw_[VECS - 1].z, x[7] = raw_[VECS - 1].w;
      }
    } else {
      load_items_any<D>(src_, vector_, first_, count_, x);
    }
  }

 private:
  uint4 raw_[VECS] = {};
  const void* src_ = nullptr;
  uint64_t first_ = 0;
  uint32_t count_ = 0;
  bool vector_ = false;
};

/// The raw sign/mantissa planes of one stream (16-byte aligned base, offsets from format::Layout).
struct Planes {
  uint8_t* plane0;
  uint8_t* plane1;
};
struct ConstPlanes {
  const uint8_t* plane0;
  const uint8_t* plane1;
};

/// Writes the planes of a lane's items of tile `tile` (global tile index); `first` = its first element.
/// Items past `count` are written as zero where they share a byte with valid ones (fp16 bit-planes).
template <DType D>
ZIPCOMM_DEVICE void write_planes(const Planes& pl, uint64_t tile, uint64_t first, uint32_t count,
                                 const uint32_t (&x)[ITEMS]) {
  using FB = thread::FloatBits<D>;
  uint32_t p0[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) p0[i] = FB::plane0(x[i]);
  if (count == ITEMS) {
    *reinterpret_cast<uint2*>(pl.plane0 + first) =
        make_uint2(p0[0] | p0[1] << 8 | p0[2] << 16 | p0[3] << 24, p0[4] | p0[5] << 8 | p0[6] << 16 | p0[7] << 24);
  } else {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
      if (uint32_t(i) < count) pl.plane0[first + i] = uint8_t(p0[i]);
  }
  if constexpr (D == DType::fp16) {
    uint32_t s = 0, m9 = 0, m8 = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      uint32_t p1 = uint32_t(i) < count ? FB::plane1(x[i]) : 0u;
      s |= ((p1 >> 2) & 1u) << i;
      m9 |= ((p1 >> 1) & 1u) << i;
      m8 |= (p1 & 1u) << i;
    }
    uint8_t* t = pl.plane1 + tile * 96 + lane_id();
    t[0] = uint8_t(s);
    t[32] = uint8_t(m9);
    t[64] = uint8_t(m8);
  } else if constexpr (D == DType::fp32) {
    if (count == ITEMS) {
      *reinterpret_cast<uint4*>(pl.plane1 + 2 * first) =
          make_uint4((x[0] & 0xFFFFu) | x[1] << 16, (x[2] & 0xFFFFu) | x[3] << 16, (x[4] & 0xFFFFu) | x[5] << 16,
                     (x[6] & 0xFFFFu) | x[7] << 16);
    } else {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < count) reinterpret_cast<uint16_t*>(pl.plane1 + 2 * first)[i] = uint16_t(x[i]);
    }
  }
}

/// A lane's raw plane bytes for one tile, as loaded: the plane-0 bytes of its 8 items (zero past `count`),
/// fp16's sign/m9/m8 bit bytes, fp32's low mantissa halves. Kept packed so that a decoder can carry the next
/// tile's planes in a few registers while it decodes this one, and unpack them when it assembles.
template <DType D>
struct LanePlanes {
  uint2 p0;
  uint32_t p1[D == DType::fp32 ? 4 : 1];
};

/// Loads the planes of a lane's items of tile `tile` (global tile index); `first` = its first element.
template <DType D>
ZIPCOMM_DEVICE LanePlanes<D> load_planes(const ConstPlanes& pl, uint64_t tile, uint64_t first, uint32_t count) {
  LanePlanes<D> r{};
  if (count == ITEMS) {
    r.p0 = __ldg(reinterpret_cast<const uint2*>(pl.plane0 + first));
  } else {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const uint32_t b = uint32_t(i) < count ? pl.plane0[first + i] : 0u;
      if (i < 4)
        lo |= b << (8 * i);
      else
        hi |= b << (8 * (i - 4));
    }
    r.p0 = make_uint2(lo, hi);
  }
  if constexpr (D == DType::fp16) {
    const uint8_t* t = pl.plane1 + tile * 96 + lane_id();
    r.p1[0] = uint32_t(t[0]) | uint32_t(t[32]) << 8 | uint32_t(t[64]) << 16;
  } else if constexpr (D == DType::fp32) {
    if (count == ITEMS) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(pl.plane1 + 2 * first));
      r.p1[0] = v.x, r.p1[1] = v.y, r.p1[2] = v.z, r.p1[3] = v.w;
    } else {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < count)
          r.p1[i / 2] |= uint32_t(reinterpret_cast<const uint16_t*>(pl.plane1 + 2 * first)[i]) << (16 * (i % 2));
    }
  }
  return r;
}

/// The elements of loaded planes (exponent fields zero).
template <DType D>
ZIPCOMM_DEVICE void unpack_planes(const LanePlanes<D>& r, uint32_t (&x)[ITEMS]) {
  using FB = thread::FloatBits<D>;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const uint32_t p0 = ((i < 4 ? r.p0.x : r.p0.y) >> (8 * (i % 4))) & 0xFFu;
    uint32_t p1 = 0;
    if constexpr (D == DType::fp16) {
      const uint32_t w = r.p1[0];
      p1 = ((w >> i) & 1u) << 2 | ((w >> (8 + i)) & 1u) << 1 | ((w >> (16 + i)) & 1u);
    } else if constexpr (D == DType::fp32) {
      p1 = (r.p1[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    }
    x[i] = FB::assemble(0, p0, p1);
  }
}

/// Reads the planes of a lane's items into x (exponent fields left zero).
template <DType D>
ZIPCOMM_DEVICE void read_planes(const ConstPlanes& pl, uint64_t tile, uint64_t first, uint32_t count,
                                uint32_t (&x)[ITEMS]) {
  unpack_planes<D>(load_planes<D>(pl, tile, first, count), x);
}

}  // namespace warp
}  // namespace zipcomm
