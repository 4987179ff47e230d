// Thread level, host and device: the exact arithmetic of the quantization tier ("ZPQT", quant_format.hpp).
//
// LOSSY. These functions define, bit for bit, which codes a group of elements gets and which values the codes
// decode to. The host reference (reference_quant.hpp) calls them element by element; a device implementation
// must compute the same bits, which it does when it follows these rules (docs/QUANT.md, section 3):
//
//  * Every element is widened exactly to fp32 (bf16/fp16 -> fp32 is exact). All arithmetic is fp32.
//  * Every operation below is ONE IEEE-754 binary32 operation rounded to nearest even, never fused with another
//    into a multiply-add and never flushed to zero: on the device use __fadd_rn, __fsub_rn, __fmul_rn,
//    __fdiv_rn (the plain `/` of nvcc is not correctly rounded under -prec-div=false, and `a + b * c` may be
//    contracted into an FMA), and compile without --use_fast_math / -ftz=true. (The device quantizer gets the
//    correctly rounded quotient without a division instruction: div_by_reciprocal.) The host versions go through
//    volatile fp32 temporaries so that no compiler contracts them; they assume IEEE binary32 hardware arithmetic
//    (SSE on x86-64, AArch64), never x87 extended precision.
//  * Rounding to an integer code is round-half-to-even (rne_int: __float2int_rn on the device) of a value already
//    clamped to the code range, so it never overflows.
//  * Group minimum and maximum are value comparisons; the result is made canonical by adding +0.0f (-0 becomes
//    +0), so it does not depend on the order of a reduction or on which of +0/-0 a min/max instruction returns.
//  * The dequantized fp32 value is narrowed to the original dtype with round-to-nearest-even (thread::from_f32).
//
// Asymmetric, b bits, L = 2^b - 1, group range [lo, hi]:
//   hi == lo (constant group, all-zero included):   scale = 0, codes 0, x' = lo + 0 * 0 = lo   (exact)
//   otherwise:   scale = (hi - lo) / L
//                code  = scale == 0 ? 0 : rne(clamp((x - lo) / scale, 0, L))
//                x'    = lo + code * scale
//   (scale == 0 with hi > lo only happens when hi - lo is a subnormal below L * 2^-150: every code is 0.)
// Symmetric, b bits, mid = 2^(b-1), q = mid - 1, amax = max(-lo, hi):
//   hi == lo (constant group, value c, all-zero included): scale field = c, codes 0, x' = c   (exact)
//   otherwise:   scale = amax / q
//                code  = scale == 0 ? mid : rne(clamp(x / scale, -q, q)) + mid     (so codes are 1 .. 2^b - 1)
//                x'    = code == 0 ? scale : (code - mid) * scale
//   Code 0 never occurs in a non-constant group; it marks the elements of a constant group, whose value is the
//   group's scale field. For an all-zero group the scale field is 0 and every code 0.
// Refused (Status::not_finite): a NaN or infinity among the elements, and a group whose parameters or whose
// largest reconstruction is not finite in fp32 and in the original dtype (only for ranges near the dtype's
// largest finite value: e.g. bf16/fp32 groups with hi - lo > 3.4e38).
#pragma once

#include <cmath>
#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/reduce_op.hpp"
#include "quant_format.hpp"

namespace zipcomm {
namespace quant {

// ---- fp32 operations, one rounding each ---------------------------------------------------------------------
using thread::add_rn;
using thread::f32_from_bits;
using thread::f32_to_bits;
using thread::mul_rn;

ZIPCOMM_HOST_DEVICE float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  volatile float r = a - b;
  return r;
#endif
}
ZIPCOMM_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  volatile float r = a / b;
  return r;
#endif
}

/// Round half to even to an integer, for |v| <= 2^22 (codes are clamped first: |v| <= 255).
/// Host: v + 1.5 * 2^23 lies in [2^23, 2^24), where the fp32 spacing is 1, so the addition itself rounds v to an
/// integer with ties to even; subtracting the constant again is exact.
ZIPCOMM_HOST_DEVICE int32_t rne_int(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  volatile float t = v + 12582912.0f;
  volatile float r = t - 12582912.0f;
  return static_cast<int32_t>(r);
#endif
}

ZIPCOMM_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// The quotient d / s rounded to nearest even, from r = div_rn(1, s) (the correctly rounded reciprocal) without a
/// division: q = d * r is within an ulp of d / s, the remainder d - q * s is exact in one fused multiply-add, and
/// q + remainder * r rounded once is the correctly rounded quotient (Markstein's theorem, the correction step of
/// the hardware-assisted divisions), provided no intermediate result underflows or overflows: for
/// 2^-64 <= s <= 2^64 and 2^-32 <= |d / s| <= 2^32. A smaller quotient may be off by an ulp (it stays below
/// 2^-31), and d = -0 gives +0. tests/host/test_quant.cpp checks the formula against a division.
ZIPCOMM_HOST_DEVICE float div_by_reciprocal(float d, float s, float r) {
  const float q = mul_rn(d, r);
  return fma_rn(fma_rn(-q, s, d), r, q);
}

ZIPCOMM_HOST_DEVICE bool f32_finite(float x) { return (f32_to_bits(x) & 0x7FFFFFFFu) < 0x7F800000u; }

/// Whether an element of dtype D (raw bits) is finite.
template <DType D>
ZIPCOMM_HOST_DEVICE bool element_finite(uint32_t bits) {
  return (bits & ~thread::ElementTraits<D>::SIGN) < thread::ElementTraits<D>::INF;
}

ZIPCOMM_HOST_DEVICE float clamp_f32(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

// ---- group statistics ---------------------------------------------------------------------------------------
/// Minimum and maximum of a group's elements (fp32 values). Start from empty() and add() every element (in any
/// order, or merge() partial ranges: a warp reduction); finish with canonical(). Elements must be finite.
struct GroupRange {
  float lo, hi;
  ZIPCOMM_HOST_DEVICE static GroupRange empty() { return {f32_from_bits(0x7F800000u), f32_from_bits(0xFF800000u)}; }
  ZIPCOMM_HOST_DEVICE void add(float x) {
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  ZIPCOMM_HOST_DEVICE void merge(const GroupRange& o) {
    lo = o.lo < lo ? o.lo : lo;
    hi = o.hi > hi ? o.hi : hi;
  }
  /// -0 becomes +0 (x + 0.0f): the result no longer depends on which zero a comparison kept.
  ZIPCOMM_HOST_DEVICE GroupRange canonical() const { return {add_rn(lo, 0.0f), add_rn(hi, 0.0f)}; }
};

/// A group's parameters. `scale` (and, asymmetric, `lo`) are what the message stores; `constant` is implied.
struct GroupParams {
  float scale = 0.0f;
  float lo = 0.0f;        // asymmetric only
  bool constant = false;  // hi == lo
};

/// fp32 value of a code (before narrowing to the original dtype).
ZIPCOMM_HOST_DEVICE float dequantize_value(QuantMode mode, uint32_t bits, float scale, float lo, uint32_t code) {
  if (mode == QuantMode::asymmetric) return add_rn(lo, mul_rn(static_cast<float>(code), scale));
  if (code == 0) return scale;  // symmetric constant group
  return mul_rn(static_cast<float>(static_cast<int32_t>(code) - static_cast<int32_t>(sym_mid(bits))), scale);
}

/// The value of a code in the original dtype (raw bits), rounded to nearest even.
template <DType D>
ZIPCOMM_HOST_DEVICE uint32_t dequantize_element(QuantMode mode, uint32_t bits, float scale, float lo, uint32_t code) {
  return thread::from_f32<D>(dequantize_value(mode, bits, scale, lo, code));
}

/// Whether a group's stored parameters are ones a writer can produce, and decode to finite values of dtype D for
/// every code the group can hold. `constant`: the group is constant (symmetric: a reader knows it from the codes,
/// all 0). The writer refuses a group that fails it (not_finite), a reader takes it as a damaged message
/// (corrupt_stream). Reconstructions are monotonic in the code (each step is a correctly rounded monotonic
/// operation), so checking the extreme codes suffices.
template <DType D>
ZIPCOMM_HOST_DEVICE bool params_valid(QuantMode mode, uint32_t bits, float scale, float lo, bool constant) {
  if (!f32_finite(scale)) return false;
  const bool scale_nonneg = (f32_to_bits(scale) >> 31) == 0u;  // +0 or positive (never -0)
  if (mode == QuantMode::asymmetric) {
    if (!f32_finite(lo) || !scale_nonneg) return false;
    return element_finite<D>(dequantize_element<D>(mode, bits, scale, lo, 0)) &&
           element_finite<D>(dequantize_element<D>(mode, bits, scale, lo, asym_max_code(bits)));
  }
  if (constant) return element_finite<D>(dequantize_element<D>(mode, bits, scale, lo, 0));  // the value itself
  return scale_nonneg && element_finite<D>(dequantize_element<D>(mode, bits, scale, lo, asym_max_code(bits)));
}

/// A cheap sufficient condition for params_valid (never true where params_valid is false): parameters of
/// moderate magnitude, so that every reconstruction stays within 2^(E+1), E = 126 for bf16 and fp32, 14 for fp16.
/// Asymmetric: |lo| <= 2^E and 0 <= scale <= 2^(E-b), so |lo + code * scale| <= 2^E + (2^b - 1) * 2^(E-b),
/// rounded at most to 2^(E+1). Symmetric: 0 <= scale <= 2^(E+1-b), so |level * scale| < 2^(b-1) * 2^(E+1-b);
/// a constant group's value |c| <= 2^E. Device code tests it per group and calls params_valid only where it
/// fails (values near the dtype's largest finite value).
ZIPCOMM_HOST_DEVICE bool params_surely_valid(DType dtype, QuantMode mode, uint32_t bits, float scale, float lo,
                                             bool constant) {
  const uint32_t e = dtype == DType::fp16 ? 14u : 126u;
  const uint32_t s = f32_to_bits(scale);  // as an unsigned integer: a sign bit, NaN or infinity is above any limit
  if (mode == QuantMode::asymmetric)
    return s <= (127u + e - bits) << 23 && (f32_to_bits(lo) & 0x7FFFFFFFu) <= (127u + e) << 23;
  if (constant) return (s & 0x7FFFFFFFu) <= (127u + e) << 23;
  return s <= (127u + e + 1u - bits) << 23;
}

/// A group's parameters from its canonical, finite range, before the checks of params_valid.
ZIPCOMM_HOST_DEVICE GroupParams params_from_range(QuantMode mode, uint32_t bits, GroupRange r) {
  GroupParams p{};
  p.constant = r.hi == r.lo;
  if (mode == QuantMode::asymmetric) {
    p.lo = r.lo;
    p.scale = p.constant ? 0.0f : div_rn(sub_rn(r.hi, r.lo), static_cast<float>(asym_max_code(bits)));
  } else {
    const float amax = -r.lo > r.hi ? -r.lo : r.hi;  // negation is exact
    p.scale = p.constant ? r.lo : div_rn(amax, static_cast<float>(sym_max_level(bits)));
  }
  return p;
}

/// A group's parameters from its canonical range. not_finite when the range or the reconstruction overflows.
template <DType D>
ZIPCOMM_HOST_DEVICE Status make_params(QuantMode mode, uint32_t bits, GroupRange r, GroupParams& p) {
  p = GroupParams{};
  if (!f32_finite(r.lo) || !f32_finite(r.hi)) return Status::not_finite;
  p = params_from_range(mode, bits, r);
  return params_valid<D>(mode, bits, p.scale, p.lo, p.constant) ? Status::ok : Status::not_finite;
}

/// The code of one element x (fp32, finite) of a group with parameters p.
ZIPCOMM_HOST_DEVICE uint32_t quantize_value(QuantMode mode, uint32_t bits, const GroupParams& p, float x) {
  if (mode == QuantMode::asymmetric) {
    if (p.scale == 0.0f) return 0u;
    const float v = clamp_f32(div_rn(sub_rn(x, p.lo), p.scale), 0.0f, static_cast<float>(asym_max_code(bits)));
    return static_cast<uint32_t>(rne_int(v));
  }
  if (p.constant) return 0u;
  if (p.scale == 0.0f) return sym_mid(bits);
  const float q = static_cast<float>(sym_max_level(bits));
  const float v = clamp_f32(div_rn(x, p.scale), -q, q);
  return static_cast<uint32_t>(rne_int(v) + static_cast<int32_t>(sym_mid(bits)));
}

// ---- bit packing: one 32-element block = `bits` little-endian 32-bit words ------------------------------------
/// Packs the codes of one block (codes[l] for element l of the block; codes past the end of the message are 0)
/// into words[0 .. bits). Lane l's code goes to bits [l*b, l*b + b) of the block.
ZIPCOMM_HOST_DEVICE void pack_block(const uint32_t* codes, uint32_t bits, uint32_t* words) {
  for (uint32_t w = 0; w < bits; ++w) words[w] = 0;
  for (uint32_t l = 0; l < BLOCK_ELEMS; ++l) {
    const CodePos p = code_pos(l, bits);
    words[p.word] |= codes[l] << p.shift;
    if (p.shift + bits > 32u) words[p.word + 1] |= codes[l] >> (32u - p.shift);  // b = 3, 5, 6, 7 only
  }
}

/// Code of element l (< 32) of a block packed by pack_block. Reads only words[0 .. bits).
ZIPCOMM_HOST_DEVICE uint32_t unpack_code(const uint32_t* words, uint32_t l, uint32_t bits) {
  const CodePos p = code_pos(l, bits);
  uint32_t v = words[p.word] >> p.shift;
  if (p.shift + bits > 32u) v |= words[p.word + 1] << (32u - p.shift);
  return v & ((1u << bits) - 1u);
}

}  // namespace quant
}  // namespace zipcomm
