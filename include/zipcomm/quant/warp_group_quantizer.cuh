// Warp level, device: quantize and dequantize tiles of a "ZPQT" message (quant_format.hpp) with the exact
// arithmetic of group_quantizer.hpp. A warp writes the bytes the host reference (reference_quant.hpp) writes, and
// reconstructs the elements it reconstructs, bit for bit.
//
// LOSSY and opt-in (docs/QUANT.md). Every lane owns ITEMS consecutive elements of a tile: 32 for bf16 and fp16
// input, 16 for fp32 (64 bytes, four 16-byte vectors), 32 when dequantizing. A lane's elements lie in one group
// (a group of G = 32, 64, 128 elements spans G / ITEMS neighbouring lanes) and their codes are ITEMS * b / 8
// consecutive bytes of the codes section, so a lane loads and stores whole vectors on its own, and a group's
// range is a shuffle reduction over its lanes. The quantizer needs no shared memory; the dequantizer turns a whole
// tile's lane-blocked elements into warp-contiguous stores through its TempStorage (cub::WarpExchange).
//
// Quantizing divides without a division instruction: the group's correctly rounded reciprocal, one product and
// one fused correction give the reference's correctly rounded quotient (div_by_reciprocal, group_quantizer.hpp),
// so the codes are the reference's. Groups whose scale lies outside [2^-64, 2^64] (ranges below about 2^-62 or
// above 2^64) take the reference's division for every element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <cub/warp/warp_exchange.cuh>

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

/// A lane's elements of one tile as loaded: raw bits, 16-bit elements two to a word (element 2k low), and where
/// they are. Elements past the end of the tensor repeat the lane's first (no effect on a group's range).
template <DType D>
struct LaneItems {
  static constexpr uint32_t ITEMS = quantize_lane_items<D>();
  static constexpr uint32_t WORDS = LANE_BYTES / 4;
  uint32_t w[WORDS];
  LaneSpan span;
};

/// Loads a lane's elements of tile `tile` of the n elements at `in` (raw bits, any alignment; `in_aligned16`:
/// warp-uniform, `in` is 16-byte aligned, so whole lanes take vector loads).
template <DType D>
ZIPCOMM_DEVICE LaneItems<D> load_lane_items(const void* in, bool in_aligned16, uint64_t n, uint64_t tile) {
  constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES, ITEMS = LaneItems<D>::ITEMS;
  LaneItems<D> r;
  r.span = lane_span<ITEMS>(n, tile);
  const uint8_t* base = static_cast<const uint8_t*>(in) + r.span.first * EB;
  if (in_aligned16 && r.span.count == ITEMS) {
#pragma unroll
    for (uint32_t v = 0; v < LaneItems<D>::WORDS / 4; ++v) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(base) + v);
      r.w[4 * v] = x.x, r.w[4 * v + 1] = x.y, r.w[4 * v + 2] = x.z, r.w[4 * v + 3] = x.w;
    }
    return r;
  }
  uint32_t e[ITEMS];
#pragma unroll
  for (uint32_t i = 0; i < ITEMS; ++i) {
    e[i] = 0;
    if (i < r.span.count) {
#pragma unroll
      for (uint32_t k = 0; k < EB; ++k) e[i] |= static_cast<uint32_t>(base[i * EB + k]) << (8 * k);
    } else {
      e[i] = e[0];
    }
  }
#pragma unroll
  for (uint32_t k = 0; k < LaneItems<D>::WORDS; ++k) r.w[k] = EB == 4 ? e[k] : e[2 * k] | e[2 * k + 1] << 16;
  return r;
}

/// Element i of a lane's items, widened exactly to fp32 (thread::to_f32).
template <DType D>
ZIPCOMM_DEVICE float item_f32(const LaneItems<D>& r, uint32_t i) {
  if constexpr (D == DType::bf16) {
    return __uint_as_float(i % 2 ? r.w[i / 2] & 0xFFFF0000u : r.w[i / 2] << 16);
  } else if constexpr (D == DType::fp16) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(r.w[i / 2] >> (16 * (i % 2)))));
  } else {
    return __uint_as_float(r.w[i]);
  }
}

/// Minimum and maximum of a lane's elements as fp32, NaN when one of them is NaN (an infinity shows as itself):
/// 16-bit elements two at a time, in their own type (widening is exact and monotonic).
template <DType D>
ZIPCOMM_DEVICE void lane_range(const LaneItems<D>& r, float& lo, float& hi) {
  if constexpr (D == DType::fp32) {
    lo = hi = __uint_as_float(r.w[0]);
#pragma unroll
    for (uint32_t i = 1; i < LaneItems<D>::WORDS; ++i) {
      lo = detail::min_nan(lo, __uint_as_float(r.w[i]));
      hi = detail::max_nan(hi, __uint_as_float(r.w[i]));
    }
  } else {
    using Pair = typename std::conditional<D == DType::bf16, __nv_bfloat162, __half2>::type;
    Pair l2 = *reinterpret_cast<const Pair*>(&r.w[0]), h2 = l2;
#pragma unroll
    for (uint32_t k = 1; k < LaneItems<D>::WORDS; ++k) {
      l2 = __hmin2_nan(l2, *reinterpret_cast<const Pair*>(&r.w[k]));
      h2 = __hmax2_nan(h2, *reinterpret_cast<const Pair*>(&r.w[k]));
    }
    lo = detail::min_nan(__low2float(l2), __high2float(l2));
    hi = detail::max_nan(__low2float(h2), __high2float(h2));
  }
}

/// Writes a message's header and zeroes its padding after the parameters and after the codes (the unused code
/// bits of the last block are written by the quantizer, as zero codes). Called by one whole warp.
ZIPCOMM_DEVICE void write_frame(uint8_t* msg, DType dtype, const Layout& l) {
  const uint32_t lane = lane_id();
  if (lane == 0) *reinterpret_cast<Header*>(msg) = make_header(dtype, l.mode, l.bits, l.group, l.n);
  for (int gap = 0; gap < SECTION_GAPS; ++gap) {
    uint64_t begin = 0, end = 0;
    section_gap(l, gap, begin, end);
    for (uint64_t b = begin + lane; b < end; b += 32) msg[b] = 0;
  }
}

/// Whether a message's padding after the parameters and after the codes is zero (same in every lane). Called by
/// one whole warp, on a message whose header checked out.
ZIPCOMM_DEVICE bool frame_padding_zero(const uint8_t* msg, const Layout& l) {
  const uint32_t lane = lane_id();
  uint32_t seen = 0;
  for (int gap = 0; gap < SECTION_GAPS; ++gap) {
    uint64_t begin = 0, end = 0;
    section_gap(l, gap, begin, end);
    for (uint64_t b = begin + lane; b < end; b += 32) seen |= msg[b];
  }
  return !__any_sync(FULL_MASK, seen != 0);
}

/// \brief Quantizes tiles of a message of dtype D: group ranges, parameters and codes, the host reference's bytes.
/// All 32 lanes of a warp call every member together; each tile (TILE_ELEMS elements) is quantized by one warp,
/// any warp, in any order.
///
/// \code
/// using Q = zipcomm::quant::warp::WarpGroupQuantizer<zipcomm::DType::bf16>;
/// const zipcomm::quant::Layout l = zipcomm::quant::layout_for(mode, bits, group, n);  // d_msg: 16-byte
/// if (warp_id == 0) zipcomm::quant::warp::write_frame(d_msg, zipcomm::DType::bf16, l); // aligned, l.total_bytes
/// Q q(l, d_msg);
/// for (uint64_t t = warp_id; t * Q::TILE_ELEMS < n; t += warps) {
///   auto items = zipcomm::quant::warp::load_lane_items<zipcomm::DType::bf16>(d_in, in_aligned16, n, t);
///   if (q.Quantize(items) != zipcomm::Status::ok) { ... }   // not_finite, the same in every lane
/// }
/// \endcode
/// A group holding a NaN or an infinity, or whose range overflows (Status::not_finite, as the reference refuses
/// it), gets a NaN scale and zero codes: the message is then one that no reader accepts (corrupt_stream).
template <DType D>
class WarpGroupQuantizer {
 public:
  static constexpr uint32_t ITEMS = quantize_lane_items<D>();
  static constexpr uint32_t TILE_ELEMS = 32 * ITEMS;

  ZIPCOMM_DEVICE WarpGroupQuantizer(const Layout& layout, uint8_t* msg) : l_(layout), msg_(msg) {
    const uint32_t b = l_.bits;
    group_lanes_ = l_.group / ITEMS;
    group_shift_ = 31u - __clz(l_.group);
    mult_ = 1u << b;
    mid_ = sym_mid(b);
    ones4_ = 1u + mult_ + (mult_ << b) + (mult_ << (2 * b));
  }

  /// Quantizes the tile whose elements the lanes hold (`items`, from load_lane_items): writes the parameter
  /// records of its groups and the codes of its blocks. Returns Status::ok or Status::not_finite (the same in
  /// every lane).
  ZIPCOMM_DEVICE Status Quantize(const LaneItems<D>& items) const {
    return l_.mode == QuantMode::symmetric ? QuantizeAs<true>(items) : QuantizeAs<false>(items);
  }

 private:
  static constexpr uint32_t QUADS = ITEMS / 4;         // a lane's codes, four at a time
  static constexpr uint32_t MAGIC_BITS = 0x4B400000u;  // bits of 1.5 * 2^23: t = q + it rounds q to an integer
  static constexpr float MAGIC = 12582912.0f;

  template <bool SYMMETRIC>
  ZIPCOMM_DEVICE Status QuantizeAs(const LaneItems<D>& items) const {
    const QuantMode mode = SYMMETRIC ? QuantMode::symmetric : QuantMode::asymmetric;
    const uint32_t lane = lane_id();
    const LaneSpan sp = items.span;

    // The group's range: a NaN or an infinity among its elements leaves lo or hi not finite.
    float lo, hi;
    lane_range<D>(items, lo, hi);
    if (sp.count == 0) {
      lo = __uint_as_float(0x7F800000u);
      hi = __uint_as_float(0xFF800000u);
    }
    for (uint32_t o = 1; o < group_lanes_; o <<= 1) {
      lo = detail::min_nan(lo, __shfl_xor_sync(FULL_MASK, lo, o));
      hi = detail::max_nan(hi, __shfl_xor_sync(FULL_MASK, hi, o));
    }
    const GroupRange r = GroupRange{lo, hi}.canonical();
    const bool finite = f32_finite(r.lo) && f32_finite(r.hi);
    const GroupParams p = params_from_range(mode, l_.bits, r);
    const bool ok = finite && (params_surely_valid(D, mode, l_.bits, p.scale, p.lo, p.constant) ||
                               params_valid<D>(mode, l_.bits, p.scale, p.lo, p.constant));

    // Constant groups, scale 0 and refused groups: every code is `offset` (the quotient is 0).
    const bool fixed = !ok || p.scale == 0.0f || (SYMMETRIC && p.constant);
    const uint32_t sb = __float_as_uint(p.scale);
    const bool in_range = sb >= 0x1F800000u && sb <= 0x5F800000u;  // 2^-64 <= scale <= 2^64 (scale >= 0 here)
    const float rcp = fixed ? 0.0f : __frcp_rn(p.scale);
    const float base = SYMMETRIC ? 0.0f : p.lo;
    const uint32_t offset = SYMMETRIC && !p.constant ? mid_ : 0u;
    const uint32_t fix = (offset - MAGIC_BITS) * ones4_;  // removes MAGIC from four codes and adds the offset

    uint32_t quad[QUADS];  // codes 4k .. 4k+3, b bits each, from bit 0
    if (fixed || in_range) {
#pragma unroll
      for (uint32_t k = 0; k < QUADS; ++k) {
        uint32_t acc = 0;
#pragma unroll
        for (int j = 3; j >= 0; --j) {
          const float x = item_f32<D>(items, 4 * k + j);
          const float v = div_by_reciprocal(SYMMETRIC ? x : __fsub_rn(x, base), p.scale, rcp);
          // MAGIC + rne(v): for x in [lo, hi], |v| <= 2^b and rne(v) lies within the clamp's bounds already; a
          // quotient below 2^-32 (which div_by_reciprocal may round differently) rounds to 0 either way
          acc = detail::mad_u32(acc, mult_, __float_as_uint(__fadd_rn(v, MAGIC)));
        }
        quad[k] = acc + fix;
      }
    } else {  // the reference's division
#pragma unroll
      for (uint32_t k = 0; k < QUADS; ++k) {
        uint32_t acc = 0;
#pragma unroll
        for (int j = 3; j >= 0; --j)
          acc = acc * mult_ + quantize_value(mode, l_.bits, p, item_f32<D>(items, 4 * k + j));
        quad[k] = acc;
      }
    }
    if (sp.count < ITEMS || !ok) {  // codes past n, and those of a refused group, are 0
      const uint32_t valid = ok ? sp.count : 0u;
#pragma unroll
      for (uint32_t k = 0; k < QUADS; ++k) {
        const uint32_t in_quad = valid > 4 * k ? valid - 4 * k : 0u;
        quad[k] &= in_quad >= 4 ? ~0u : (1u << (in_quad * l_.bits)) - 1u;
      }
    }

    const bool leader = (lane & (group_lanes_ - 1u)) == 0 && sp.count > 0;
    if (leader) {
      const uint64_t g = sp.first >> group_shift_;
      const float scale = ok ? p.scale : __uint_as_float(0x7FFFFFFFu);
      if (SYMMETRIC)
        *reinterpret_cast<float*>(msg_ + l_.params_offset + 4 * g) = scale;
      else
        *reinterpret_cast<float2*>(msg_ + l_.params_offset + 8 * g) = make_float2(scale, p.lo);
    }
    if (lane_has_codes(l_, sp.first)) {
      uint8_t* at = msg_ + lane_codes_offset(l_, sp.first);
      detail::with_bits(l_.bits, [&](auto bits_tag) {
        constexpr uint32_t B = decltype(bits_tag)::value, BYTES = ITEMS * B / 8;
        uint32_t w[(BYTES + 3) / 4];  // the lane's bit string: quad k at bit 4Bk
#pragma unroll
        for (uint32_t i = 0; i < (BYTES + 3) / 4; ++i) w[i] = 0;
#pragma unroll
        for (uint32_t k = 0; k < QUADS; ++k) {
          const uint32_t bit = 4 * B * k, word = bit / 32, shift = bit % 32;
          w[word] |= quad[k] << shift;
          if (shift + 4 * B > 32) w[word + 1] |= quad[k] >> (32 - shift);
        }
        detail::store_bytes<BYTES>(at, w);
      });
    }
    return __any_sync(FULL_MASK, leader && !ok) ? Status::not_finite : Status::ok;
  }

  Layout l_;
  uint8_t* msg_;
  uint32_t group_lanes_, group_shift_, mult_, mid_, ones4_;
};

/// A lane's share of one tile of a message, as loaded: its group's parameters (when its elements exist), its
/// code bits (when its code block exists; zero otherwise) and where its elements are.
struct LaneCodes {
  uint32_t w[8];  // little-endian bit string: element i's code at bits [i*b, i*b + b)
  float scale, lo;
  LaneSpan span;
};

/// \brief Checks and reconstructs tiles of a message whose header checked out (validate_header), with the checks
/// of the host reference: per group, parameters a writer can produce (for the message's dtype), a symmetric
/// group's codes all 0 or none 0, an asymmetric group of scale 0 holding only code 0; per lane, zero code bits
/// past the last element. All 32 lanes of a warp call every member together; each tile (TILE_ELEMS elements)
/// goes to one warp, any warp, in any order. The padding after the sections is checked apart
/// (frame_padding_zero).
///
/// \code
/// __shared__ zipcomm::quant::warp::WarpGroupDequantizer::TempStorage temp[WARPS];   // one per warp
/// zipcomm::quant::warp::WarpGroupDequantizer dq(temp[warp_in_block], layout, msg_dtype, d_msg);
/// for (uint64_t t = warp_id; t * dq.TILE_ELEMS < layout.n; t += warps) {
///   auto codes = dq.Load(t);
///   zipcomm::Status s = dq.Dequantize<zipcomm::DType::bf16>(codes, d_out, out_aligned16);   // into bf16
/// }
/// \endcode
/// A group that fails a check is not written (Status::corrupt_stream); the other groups of the tile are.
class WarpGroupDequantizer {
 public:
  static constexpr uint32_t ITEMS = DEQUANTIZE_LANE_ITEMS;
  static constexpr uint32_t TILE_ELEMS = 32 * ITEMS;

 private:
  // A lane's 32 output elements as 16-byte vectors: 4 (bf16, fp16) or 8 (fp32).
  template <DType O>
  static constexpr uint32_t lane_vectors() {
    return ITEMS * format::Traits<O>::ELEM_BYTES / 16;
  }
  template <DType O>
  using Exchange = cub::WarpExchange<uint4, int(lane_vectors<O>())>;

 public:
  /// Where a whole tile's elements change hands on their way out, so that each store instruction of the warp
  /// writes 512 contiguous bytes (lane-blocked stores write half sectors and cost ~2x in L2 store traffic).
  struct TempStorage {
    union {
      typename Exchange<DType::bf16>::TempStorage half;  // bf16 and fp16 output
      typename Exchange<DType::fp32>::TempStorage full;
    };
  };

  ZIPCOMM_DEVICE WarpGroupDequantizer(TempStorage& temp, const Layout& layout, DType msg_dtype, const uint8_t* msg)
      : temp_(temp), l_(layout), msg_(msg), dtype_(msg_dtype) {
    group_lanes_ = l_.group / ITEMS;
    group_shift_ = 31u - __clz(l_.group);
  }

  /// Starts the loads of the lane's parameters and codes of tile `tile`.
  ZIPCOMM_DEVICE LaneCodes Load(uint64_t tile) const {
    LaneCodes c{{0, 0, 0, 0, 0, 0, 0, 0}, 0.0f, 0.0f, lane_span<ITEMS>(l_.n, tile)};
    if (c.span.count > 0) {
      const uint64_t g = c.span.first >> group_shift_;
      if (l_.mode == QuantMode::asymmetric) {
        const float2 r = __ldg(reinterpret_cast<const float2*>(msg_ + l_.params_offset + 8 * g));
        c.scale = r.x, c.lo = r.y;
      } else {
        c.scale = __ldg(reinterpret_cast<const float*>(msg_ + l_.params_offset + 4 * g));
      }
    }
    if (lane_has_codes(l_, c.span.first)) {
      const uint8_t* at = msg_ + lane_codes_offset(l_, c.span.first);
      detail::with_bits(l_.bits, [&](auto bits_tag) {
        detail::load_bytes<ITEMS * decltype(bits_tag)::value / 8>(at, c.w);
      });
    }
    return c;
  }

  /// Checks the tile whose codes the lanes hold (`codes`, from Load) and writes its elements, as dtype O, to
  /// `out` (element i at out + i * sizeof(O); `out_aligned16`: warp-uniform, out is 16-byte aligned). Returns
  /// Status::ok or Status::corrupt_stream (the same in every lane).
  template <DType O>
  ZIPCOMM_DEVICE Status Dequantize(const LaneCodes& codes, void* out, bool out_aligned16) const {
    return l_.mode == QuantMode::symmetric ? DequantizeAs<O, true>(codes, out, out_aligned16)
                                           : DequantizeAs<O, false>(codes, out, out_aligned16);
  }

 private:
  static constexpr uint32_t LEVEL_BITS = 0x4B000000u;  // bits of 2^23: (LEVEL_BITS | c) is the float 2^23 + c

  template <DType O, bool SYMMETRIC>
  ZIPCOMM_DEVICE Status DequantizeAs(const LaneCodes& in, void* out, bool out_aligned16) const {
    const QuantMode mode = SYMMETRIC ? QuantMode::symmetric : QuantMode::asymmetric;
    const uint32_t lane = lane_id();
    const LaneSpan sp = in.span;
    const uint32_t b = l_.bits;
    bool lane_bad = false;
    uint32_t any_bits = 0;
#pragma unroll
    for (uint32_t k = 0; k < 8; ++k) any_bits |= in.w[k];
    if (sp.count < ITEMS) {  // code bits past the last element are zero
      uint32_t extra = 0;
#pragma unroll
      for (uint32_t k = 0; k < 8; ++k) extra |= in.w[k] & ~detail::valid_bits_mask(sp.count * b, k);
      lane_bad = extra != 0;
    }

    // Each code as the float 2^23 + code; a zero code shows as the smallest of them.
    uint32_t level[ITEMS];
    detail::with_bits(b, [&](auto bits_tag) {
      constexpr uint32_t B = decltype(bits_tag)::value, M = (1u << B) - 1u;
#pragma unroll
      for (uint32_t i = 0; i < ITEMS; ++i) {
        const uint32_t bit = i * B, word = bit / 32, shift = bit % 32;
        const uint32_t v = shift + B > 32 ? __funnelshift_r(in.w[word], in.w[word + 1], shift) : in.w[word] >> shift;
        level[i] = (v & M) | LEVEL_BITS;
      }
    });
    bool any_zero = false;
    if (SYMMETRIC) {
      uint32_t smallest = level[0];
      if (sp.count == ITEMS) {
#pragma unroll
        for (uint32_t i = 1; i < ITEMS; ++i) smallest = level[i] < smallest ? level[i] : smallest;
      } else {  // only the codes of existing elements
#pragma unroll
        for (uint32_t i = 1; i < ITEMS; ++i) smallest = i < sp.count && level[i] < smallest ? level[i] : smallest;
      }
      any_zero = sp.count > 0 && smallest == LEVEL_BITS;
    }

    const bool live = sp.count > 0;
    const uint32_t group_mask = ((1u << group_lanes_) - 1u) << (lane & ~(group_lanes_ - 1u));
    const bool group_lane_bad = (__ballot_sync(FULL_MASK, lane_bad) & group_mask) != 0;
    const bool group_all_zero = (__ballot_sync(FULL_MASK, live && any_bits != 0) & group_mask) == 0;
    bool ok = !group_lane_bad;
    bool constant = false;
    if (SYMMETRIC) {
      const bool group_has_zero = (__ballot_sync(FULL_MASK, live && any_zero) & group_mask) != 0;
      constant = group_all_zero;
      ok = ok && (!group_has_zero || constant);  // code 0 marks a constant group: all of its codes or none
    } else {
      ok = ok && (__float_as_uint(in.scale) != 0u || group_all_zero);  // scale 0 holds only code 0
    }
    ok = ok && (params_surely_valid(dtype_, mode, b, in.scale, in.lo, constant) ||
                params_valid_as(dtype_, mode, b, in.scale, in.lo, constant));

    // x' = lo + code * scale, or (code - mid) * scale; (2^23 + code) - 2^23 - mid is exact.
    const float level_base = 8388608.0f + (SYMMETRIC ? static_cast<float>(sym_mid(b)) : 0.0f);
    if (__all_sync(FULL_MASK, sp.count == ITEMS && ok) && out_aligned16) {  // the whole tile, warp-contiguous
      constexpr uint32_t V = lane_vectors<O>(), EB = format::Traits<O>::ELEM_BYTES;
      uint4 vec[V];
#pragma unroll
      for (uint32_t c = 0; c < ITEMS / 8; ++c) {
        float v[8];
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
          const float code = __fsub_rn(__uint_as_float(level[8 * c + j]), level_base);
          v[j] = SYMMETRIC ? (constant ? in.scale : __fmul_rn(code, in.scale))
                           : __fadd_rn(in.lo, __fmul_rn(code, in.scale));
        }
        PackEight<O>(v, &vec[c * V / (ITEMS / 8)]);
      }
      Exchange<O>(reinterpret_cast<typename Exchange<O>::TempStorage&>(temp_)).BlockedToStriped(vec, vec);
      uint4* tile = reinterpret_cast<uint4*>(static_cast<uint8_t*>(out) + (sp.first - uint64_t(lane) * ITEMS) * EB);
#pragma unroll
      for (uint32_t k = 0; k < V; ++k) tile[k * 32 + lane] = vec[k];
      __syncwarp();  // temp_ is the next tile's
      return Status::ok;
    }
    if (live && ok) {
      const bool vector = out_aligned16 && sp.count == ITEMS;
#pragma unroll
      for (uint32_t c = 0; c < ITEMS / 8; ++c) {  // 8 elements at a time: one or two 16-byte stores
        float v[8];
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) {
          const float code = __fsub_rn(__uint_as_float(level[8 * c + j]), level_base);
          v[j] = SYMMETRIC ? (constant ? in.scale : __fmul_rn(code, in.scale))
                           : __fadd_rn(in.lo, __fmul_rn(code, in.scale));
        }
        const uint32_t left = sp.count > 8 * c ? sp.count - 8 * c : 0u;
        StoreEight<O>(v, static_cast<uint8_t*>(out) + (sp.first + 8 * c) * format::Traits<O>::ELEM_BYTES, vector,
                      left < 8 ? left : 8u);
      }
    }
    return __any_sync(FULL_MASK, (live && !ok) || lane_bad) ? Status::corrupt_stream : Status::ok;
  }

  /// params_valid for the message's dtype, known at run time.
  ZIPCOMM_DEVICE static bool params_valid_as(DType d, QuantMode mode, uint32_t bits, float scale, float lo,
                                             bool constant) {
    return d == DType::bf16   ? params_valid<DType::bf16>(mode, bits, scale, lo, constant)
           : d == DType::fp16 ? params_valid<DType::fp16>(mode, bits, scale, lo, constant)
                              : params_valid<DType::fp32>(mode, bits, scale, lo, constant);
  }

  /// 8 elements as dtype O in 16-byte vectors: one (bf16, fp16) or two (fp32).
  template <DType O>
  ZIPCOMM_DEVICE static void PackEight(const float (&v)[8], uint4* vec) {
    constexpr uint32_t EB = format::Traits<O>::ELEM_BYTES;
    uint32_t w[2 * EB];
#pragma unroll
    for (uint32_t k = 0; k < 2 * EB; ++k) {
      if constexpr (O == DType::fp32)
        w[k] = __float_as_uint(v[k]);
      else
        w[k] = detail::narrow_pair<O>(v[2 * k], v[2 * k + 1]);
    }
#pragma unroll
    for (uint32_t k = 0; k < EB / 2; ++k) vec[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
  }

  /// Stores `count` (<= 8) elements of dtype O at `at`; vector: all 8, `at` 16-byte aligned.
  template <DType O>
  ZIPCOMM_DEVICE static void StoreEight(const float (&v)[8], uint8_t* at, bool vector, uint32_t count) {
    constexpr uint32_t EB = format::Traits<O>::ELEM_BYTES;
    uint32_t w[2 * EB];  // the 8 elements as words
#pragma unroll
    for (uint32_t k = 0; k < 2 * EB; ++k) {
      if constexpr (O == DType::fp32)
        w[k] = __float_as_uint(v[k]);
      else
        w[k] = detail::narrow_pair<O>(v[2 * k], v[2 * k + 1]);
    }
    if (vector) {
#pragma unroll
      for (uint32_t k = 0; k < EB / 2; ++k)
        reinterpret_cast<uint4*>(at)[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
      return;
    }
#pragma unroll
    for (uint32_t i = 0; i < 8; ++i) {
      if (i < count) {
        const uint32_t e = EB == 4 ? w[i] : w[i / 2] >> (16 * (i % 2));
#pragma unroll
        for (uint32_t k = 0; k < EB; ++k) at[i * EB + k] = static_cast<uint8_t>(e >> (8 * k));
      }
    }
  }

  TempStorage& temp_;
  Layout l_;
  const uint8_t* msg_;
  DType dtype_;
  uint32_t group_lanes_, group_shift_;
};

}  // namespace warp
}  // namespace quant
}  // namespace zipcomm
