// Warp level, device: check and reconstruct tiles of a "ZPQT" message (quant_format.hpp) as the host reference
// (reference_quant.hpp) does, bit for bit. LOSSY and opt-in (docs/QUANT.md). The lanes' layout is
// warp_lane_codes.cuh's; a whole tile's elements go out warp-contiguous through the dequantizer's TempStorage
// (cub::WarpExchange).
#pragma once

#include <cub/warp/warp_exchange.cuh>

#include "../thread/reduce_op.hpp"
#include "warp_lane_codes.cuh"

namespace zipcomm {
namespace quant {
namespace warp {

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
///   zipcomm::Status s = dq.Dequantize<zipcomm::DType::bf16>(codes, d_out, aligned16);   // into bf16
///   // or, the receive side of a reduction: d_out[i] = d_local[i] + element i
///   // s = dq.DequantizeReduce<zipcomm::DType::bf16>(codes, d_out, aligned16, d_local, zipcomm::ReduceOp::sum());
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
  /// `out` (element i at out + i * sizeof(O); `aligned16`: warp-uniform, out is 16-byte aligned). Returns
  /// Status::ok or Status::corrupt_stream (the same in every lane).
  template <DType O>
  ZIPCOMM_DEVICE Status Dequantize(const LaneCodes& codes, void* out, bool aligned16) const {
    const Epilogue e{nullptr, ReduceOp::sum()};
    return l_.mode == QuantMode::symmetric ? DequantizeAs<O, true, false>(codes, out, aligned16, e)
                                           : DequantizeAs<O, false, false>(codes, out, aligned16, e);
  }

  /// The receive side of a reduction: as Dequantize, writing combine(element, pre(local[i])) (thread/reduce_op.hpp:
  /// what dequantizing into O and then reducing gives); `aligned16`: out and local are 16-byte aligned. A
  /// separate instantiation, so that the plain Dequantize carries none of its registers.
  template <DType O>
  ZIPCOMM_DEVICE Status DequantizeReduce(const LaneCodes& codes, void* out, bool aligned16, const void* local,
                                         ReduceOp op) const {
    const Epilogue e{static_cast<const uint8_t*>(local), op};
    return l_.mode == QuantMode::symmetric ? DequantizeAs<O, true, true>(codes, out, aligned16, e)
                                           : DequantizeAs<O, false, true>(codes, out, aligned16, e);
  }

 private:
  static constexpr uint32_t LEVEL_BITS = 0x4B000000u;  // bits of 2^23: (LEVEL_BITS | c) is the float 2^23 + c

  struct Epilogue {
    const uint8_t* local;  // REDUCE: the local operand
    ReduceOp op;
  };

  template <DType O, bool SYMMETRIC, bool REDUCE>
  ZIPCOMM_DEVICE Status DequantizeAs(const LaneCodes& in, void* out, bool out_aligned16, Epilogue epi) const {
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
        EightValues<SYMMETRIC>(in, level, c, level_base, constant, v);
        PackEight<O>(v, &vec[c * V / (ITEMS / 8)]);
      }
      Exchange<O>(reinterpret_cast<typename Exchange<O>::TempStorage&>(temp_)).BlockedToStriped(vec, vec);
      const uint64_t tile_bytes = (sp.first - uint64_t(lane) * ITEMS) * EB;
      uint4* tile = reinterpret_cast<uint4*>(static_cast<uint8_t*>(out) + tile_bytes);
      if constexpr (REDUCE) {
        const uint4* local = reinterpret_cast<const uint4*>(epi.local + tile_bytes);
#pragma unroll
        for (uint32_t k = 0; k < V; ++k) vec[k] = CombineVector<O>(epi.op, vec[k], local[k * 32 + lane]);
      }
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
        EightValues<SYMMETRIC>(in, level, c, level_base, constant, v);
        const uint32_t left = sp.count > 8 * c ? sp.count - 8 * c : 0u;
        const uint64_t at = (sp.first + 8 * c) * format::Traits<O>::ELEM_BYTES;
        StoreEight<O, REDUCE>(v, static_cast<uint8_t*>(out) + at, epi.local + (REDUCE ? at : 0), epi.op, vector,
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

  /// Elements 8c .. 8c + 7 of the lane: x' = lo + code * scale, or (code - mid) * scale (level_base: 2^23 + mid).
  template <bool SYMMETRIC>
  ZIPCOMM_DEVICE static void EightValues(const LaneCodes& in, const uint32_t (&level)[ITEMS], uint32_t c,
                                         float level_base, bool constant, float (&v)[8]) {
#pragma unroll
    for (uint32_t j = 0; j < 8; ++j) {
      const float code = __fsub_rn(__uint_as_float(level[8 * c + j]), level_base);
      v[j] = SYMMETRIC ? (constant ? in.scale : __fmul_rn(code, in.scale))
                       : __fadd_rn(in.lo, __fmul_rn(code, in.scale));
    }
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

  /// combine(a[i], pre(l[i])) for the 16 / sizeof(O) elements of two vectors.
  template <DType O>
  ZIPCOMM_DEVICE static uint4 CombineVector(ReduceOp op, uint4 a, uint4 l) {
    constexpr int N = 16 / int(format::Traits<O>::ELEM_BYTES);
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, lw[4] = {l.x, l.y, l.z, l.w};
    uint32_t acc[N], loc[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      acc[i] = N == 4 ? aw[i] : (aw[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
      loc[i] = N == 4 ? lw[i] : (lw[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    }
    thread::reduce_items<O, N>(op, acc, loc);
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = N == 4 ? acc[k] : (acc[2 * k] & 0xFFFFu) | (acc[2 * k + 1] << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }

  /// Stores `count` (<= 8) elements of dtype O at `at` (REDUCE: combined with the ones at `local`); vector: all 8,
  /// `at` and `local` 16-byte aligned.
  template <DType O, bool REDUCE>
  ZIPCOMM_DEVICE static void StoreEight(const float (&v)[8], uint8_t* at, const uint8_t* local, ReduceOp op,
                                        bool vector, uint32_t count) {
    constexpr uint32_t EB = format::Traits<O>::ELEM_BYTES;
    uint4 vec[EB / 2];
    PackEight<O>(v, vec);
    if constexpr (REDUCE) {
      uint32_t w[2 * EB] = {};  // local's elements as words (those past count stay 0, and are not stored)
      if (vector) {
#pragma unroll
        for (uint32_t k = 0; k < EB / 2; ++k) {
          const uint4 q = reinterpret_cast<const uint4*>(local)[k];
          w[4 * k] = q.x, w[4 * k + 1] = q.y, w[4 * k + 2] = q.z, w[4 * k + 3] = q.w;
        }
      } else {
#pragma unroll
        for (uint32_t i = 0; i < 8; ++i) {
          if (i < count) {
            uint32_t e = 0;
#pragma unroll
            for (uint32_t b = 0; b < EB; ++b) e |= uint32_t(local[i * EB + b]) << (8 * b);
            w[EB == 4 ? i : i / 2] |= EB == 4 ? e : e << (16 * (i % 2));
          }
        }
      }
#pragma unroll
      for (uint32_t k = 0; k < EB / 2; ++k)
        vec[k] = CombineVector<O>(op, vec[k], make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]));
    }
    if (vector) {
#pragma unroll
      for (uint32_t k = 0; k < EB / 2; ++k) reinterpret_cast<uint4*>(at)[k] = vec[k];
      return;
    }
#pragma unroll
    for (uint32_t i = 0; i < 8; ++i) {
      if (i < count) {
        const uint4& q = vec[(EB == 4 ? i : i / 2) / 4];
        const uint32_t k = (EB == 4 ? i : i / 2) % 4;
        const uint32_t word = k == 0 ? q.x : k == 1 ? q.y : k == 2 ? q.z : q.w;
        const uint32_t e = EB == 4 ? word : word >> (16 * (i % 2));
#pragma unroll
        for (uint32_t b = 0; b < EB; ++b) at[i * EB + b] = static_cast<uint8_t>(e >> (8 * b));
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
