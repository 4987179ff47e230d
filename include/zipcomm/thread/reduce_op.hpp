// Thread level: the reduction operators of the fused primitives, on raw element bits, host and device.
//
// These functions define the numeric result of every compressed reduction (docs/REDUCE.md). Host and device
// compute the same bits: bf16/fp16 widen exactly to fp32, one fp32 operation is rounded to nearest even,
// then narrowed with round-to-nearest-even, once per hop. For two operands of 8 (bf16) or 11 (fp16)
// significant bits the fp32 result is exact or correctly rounded, so the narrowing gives the correctly
// rounded bf16/fp16 result: the same bits as a native bf16/fp16 add or multiply (NCCL's per-hop rounding).
#pragma once

#include <cstdint>
#include <cstring>

#include "../config.hpp"
#include "../format.hpp"

#if defined(__USE_FAST_MATH__)
#error "zipcomm reductions must not be compiled with --use_fast_math: flushed subnormals would change results"
#endif

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace zipcomm {

/// Reduction operator of a collective. avg is a pre-multiplied sum, as NCCL does for floating types: each
/// rank's contribution is multiplied by `scale` (1/nranks) and rounded to the element type once, where it
/// enters the reduction; the hops then add.
enum class ReduceOpId : uint8_t { sum = 0, prod = 1, min = 2, max = 3, avg = 4 };

struct ReduceOp {
  ReduceOpId id = ReduceOpId::sum;
  float scale = 1.0f;  ///< avg only: factor applied to each contribution

  ZIPCOMM_HOST_DEVICE static ReduceOp sum() { return {ReduceOpId::sum, 1.0f}; }
  ZIPCOMM_HOST_DEVICE static ReduceOp prod() { return {ReduceOpId::prod, 1.0f}; }
  ZIPCOMM_HOST_DEVICE static ReduceOp min() { return {ReduceOpId::min, 1.0f}; }
  ZIPCOMM_HOST_DEVICE static ReduceOp max() { return {ReduceOpId::max, 1.0f}; }
  /// Mean over nranks contributions (scale = 1/nranks rounded to fp32).
  ZIPCOMM_HOST_DEVICE static ReduceOp avg(int nranks) { return {ReduceOpId::avg, 1.0f / float(nranks)}; }
};

ZIPCOMM_HOST_DEVICE bool reduce_op_valid(const ReduceOp& op) { return uint8_t(op.id) <= uint8_t(ReduceOpId::avg); }
ZIPCOMM_HOST_DEVICE const char* reduce_op_name(ReduceOpId id) {
  return id == ReduceOpId::sum    ? "sum"
         : id == ReduceOpId::prod ? "prod"
         : id == ReduceOpId::min  ? "min"
         : id == ReduceOpId::max  ? "max"
         : id == ReduceOpId::avg  ? "avg"
                                  : "?";
}

namespace thread {

/// Canonical NaN of each dtype: what every arithmetic NaN result is (an NVIDIA GPU's canonical NaN).
template <DType D>
struct ElementTraits;
template <>
struct ElementTraits<DType::bf16> {
  static constexpr uint32_t SIGN = 0x8000u, INF = 0x7F80u, CANONICAL_NAN = 0x7FFFu;
};
template <>
struct ElementTraits<DType::fp16> {
  static constexpr uint32_t SIGN = 0x8000u, INF = 0x7C00u, CANONICAL_NAN = 0x7FFFu;
};
template <>
struct ElementTraits<DType::fp32> {
  static constexpr uint32_t SIGN = 0x80000000u, INF = 0x7F800000u, CANONICAL_NAN = 0x7FFFFFFFu;
};

template <DType D>
ZIPCOMM_HOST_DEVICE bool is_nan_bits(uint32_t b) {
  return (b & ~ElementTraits<D>::SIGN) > ElementTraits<D>::INF;
}

ZIPCOMM_HOST_DEVICE float f32_from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}
ZIPCOMM_HOST_DEVICE uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

/// fp32 -> fp16 bits, round to nearest even, overflow to infinity, NaN -> canonical NaN (host definition).
ZIPCOMM_HOST_DEVICE uint32_t fp16_from_f32_bits_reference(uint32_t u) {
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFFu;
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520: rounds to infinity
  if (a >= 0x38800000u) {                        // normal fp16 (>= 2^-14): rebias and round 13 bits
    const uint32_t r = a - (112u << 23);
    return sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 (half the smallest subnormal; the tie goes to even 0)
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - (a >> 23);  // value = m * 2^(e-150)
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return sign | q;
}

/// fp32 -> bf16 bits, round to nearest even, NaN -> canonical NaN (host definition).
ZIPCOMM_HOST_DEVICE uint32_t bf16_from_f32_bits_reference(uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

/// fp16 bits -> fp32, exact (host definition).
ZIPCOMM_HOST_DEVICE float f32_from_fp16_bits_reference(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e != 0) return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  const float mag = float(m) * (1.0f / 16777216.0f);  // m * 2^-24, exact
  return sign ? -mag : mag;
}

/// Element bits -> fp32 (exact widening).
template <DType D>
ZIPCOMM_HOST_DEVICE float to_f32(uint32_t b) {
  static_assert(comm_dtype_supported(D), "no reduction arithmetic for the fp8 dtypes");
  if constexpr (D == DType::bf16) {
    return f32_from_bits(b << 16);
  } else if constexpr (D == DType::fp16) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
#else
    return f32_from_fp16_bits_reference(b);
#endif
  } else {
    return f32_from_bits(b);
  }
}

/// fp32 -> element bits, round to nearest even; a NaN becomes the dtype's canonical NaN.
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t from_f32(float f) {
  static_assert(comm_dtype_supported(D), "no reduction arithmetic for the fp8 dtypes");
#if defined(__CUDA_ARCH__)
  if constexpr (D == DType::bf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  } else if constexpr (D == DType::fp16) {
    return __half_as_ushort(__float2half_rn(f));
  } else {
    return __float_as_uint(f);  // arithmetic results on the GPU are already canonical NaNs
  }
#else
  const uint32_t u = f32_to_bits(f);
  if constexpr (D == DType::bf16) {
    return bf16_from_f32_bits_reference(u);
  } else if constexpr (D == DType::fp16) {
    return fp16_from_f32_bits_reference(u);
  } else {
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FFFFFFFu : u;
  }
#endif
}

/// fp32 add and multiply without contraction into an FMA (the result must not depend on the compiler).
ZIPCOMM_HOST_DEVICE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}
ZIPCOMM_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}

/// Total order key of a non-NaN element: -0 sorts below +0.
template <DType D>
ZIPCOMM_HOST_DEVICE int32_t order_key(uint32_t b) {
  const int32_t mag = int32_t(b & ~ElementTraits<D>::SIGN);
  return (b & ElementTraits<D>::SIGN) ? -mag - 1 : mag;
}

/// IEEE 754-2008 minNum/maxNum (C's fminf/fmaxf, which NCCL's min/max use): a NaN operand is ignored,
/// two NaNs give the canonical NaN; -0 < +0. Works on the bits: no rounding is involved.
template <DType D, bool MAX>
ZIPCOMM_HOST_DEVICE uint32_t min_max_bits(uint32_t a, uint32_t b) {
  const bool na = is_nan_bits<D>(a), nb = is_nan_bits<D>(b);
  if (na || nb) return na && nb ? ElementTraits<D>::CANONICAL_NAN : na ? b : a;
  const bool b_wins = MAX ? order_key<D>(b) > order_key<D>(a) : order_key<D>(b) < order_key<D>(a);
  return b_wins ? b : a;
}

/// A contribution entering the reduction: avg scales it (rounded to the element type); the other ops pass it.
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t reduce_pre(const ReduceOp& op, uint32_t x) {
  return op.id == ReduceOpId::avg ? from_f32<D>(mul_rn(to_f32<D>(x), op.scale)) : x;
}

/// One hop: acc (the partial result so far) combined with x (a contribution after reduce_pre).
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t reduce_combine(ReduceOpId id, uint32_t acc, uint32_t x) {
  switch (id) {
    case ReduceOpId::prod: return from_f32<D>(mul_rn(to_f32<D>(acc), to_f32<D>(x)));
    case ReduceOpId::min: return min_max_bits<D, false>(acc, x);
    case ReduceOpId::max: return min_max_bits<D, true>(acc, x);
    default: return from_f32<D>(add_rn(to_f32<D>(acc), to_f32<D>(x)));  // sum, avg
  }
}

/// The sums of two pairs of 16-bit elements, each pair packed in a word (first element in the low half): the
/// bits of reduce_combine's sum on each half (fp32 add, one conversion rounding both results to nearest even).
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t sum_pairs(uint32_t a, uint32_t b) {
  static_assert(D == DType::bf16 || D == DType::fp16, "two elements per word: 16-bit dtypes");
#if defined(__CUDA_ARCH__)
  if constexpr (D == DType::bf16) {
    // A bf16 in the high half of a word is its fp32 value; one in the low half, shifted up.
    const float lo = __fadd_rn(__uint_as_float(a << 16), __uint_as_float(b << 16));
    const float hi = __fadd_rn(__uint_as_float(a & 0xFFFF0000u), __uint_as_float(b & 0xFFFF0000u));
    const __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
    return uint32_t(__bfloat16_as_ushort(r.x)) | uint32_t(__bfloat16_as_ushort(r.y)) << 16;
  } else {
    const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&a));
    const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&b));
    const __half2 r = __floats2half2_rn(__fadd_rn(fa.x, fb.x), __fadd_rn(fa.y, fb.y));
    return uint32_t(__half_as_ushort(r.x)) | uint32_t(__half_as_ushort(r.y)) << 16;
  }
#else
  return reduce_combine<D>(ReduceOpId::sum, a & 0xFFFFu, b & 0xFFFFu) |
         reduce_combine<D>(ReduceOpId::sum, a >> 16, b >> 16) << 16;
#endif
}

/// acc[i] = combine(acc[i], pre(local[i])) for N items; the operator is chosen once, outside the item loop.
template <DType D, int N>
ZIPCOMM_HOST_DEVICE void reduce_items(const ReduceOp& op, uint32_t (&acc)[N], const uint32_t (&local)[N]) {
  switch (op.id) {
    case ReduceOpId::prod:
ZIPCOMM_UNROLL
      for (int i = 0; i < N; ++i) acc[i] = reduce_combine<D>(ReduceOpId::prod, acc[i], local[i]);
      break;
    case ReduceOpId::min:
ZIPCOMM_UNROLL
      for (int i = 0; i < N; ++i) acc[i] = min_max_bits<D, false>(acc[i], local[i]);
      break;
    case ReduceOpId::max:
ZIPCOMM_UNROLL
      for (int i = 0; i < N; ++i) acc[i] = min_max_bits<D, true>(acc[i], local[i]);
      break;
    case ReduceOpId::avg:
ZIPCOMM_UNROLL
      for (int i = 0; i < N; ++i) acc[i] = reduce_combine<D>(ReduceOpId::sum, acc[i], reduce_pre<D>(op, local[i]));
      break;
    default:
ZIPCOMM_UNROLL
      for (int i = 0; i < N; ++i) acc[i] = reduce_combine<D>(ReduceOpId::sum, acc[i], local[i]);
      break;
  }
}

/// x[i] = pre(x[i]) for N items (a rank's own contribution before it is first sent). The fp8 dtypes have no
/// arithmetic: their items pass unchanged (device::compress refuses an avg for them).
template <DType D, int N>
ZIPCOMM_HOST_DEVICE void pre_items(const ReduceOp& op, uint32_t (&x)[N]) {
  if constexpr (comm_dtype_supported(D)) {
    if (op.id != ReduceOpId::avg) return;
ZIPCOMM_UNROLL
    for (int i = 0; i < N; ++i) x[i] = reduce_pre<D>(op, x[i]);
  } else {
    (void)op, (void)x;
  }
}

}  // namespace thread
}  // namespace zipcomm
