// Warp level, device: quantize tiles of a "ZPQT" message (quant_format.hpp) with the exact arithmetic of
// group_quantizer.hpp; a warp writes the bytes the host reference (reference_quant.hpp) writes. LOSSY and opt-in
// (docs/QUANT.md). The lanes' layout is warp_lane_codes.cuh's; the quantizer needs no shared memory.
//
// Quantizing divides without a division instruction: the group's correctly rounded reciprocal, one product and
// one fused correction give the reference's correctly rounded quotient (div_by_reciprocal, group_quantizer.hpp),
// so the codes are the reference's. Groups whose scale lies outside [2^-64, 2^64] (ranges below about 2^-62 or
// above 2^64) take the reference's division for every element.
#pragma once

#include "warp_lane_codes.cuh"

namespace zipcomm {
namespace quant {
namespace warp {

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

}  // namespace warp
}  // namespace quant
}  // namespace zipcomm
