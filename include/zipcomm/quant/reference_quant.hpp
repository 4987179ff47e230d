// Host reference of the quantization tier (plain C++17; no CUDA needed): quantize, dequantize, header checks, and
// the Expected Acceptance Rate (EAR) used to measure fidelity.
//
// LOSSY and opt-in: a quantized message ("ZPQT", quant_format.hpp) rebuilds an approximation of the tensor, with
// the exact arithmetic of group_quantizer.hpp. This file is the executable specification the device kernels are
// checked against: it quantizes one group at a time, element by element, and writes exactly the bytes a device
// writer must write. docs/QUANT.md describes the format, the numerics and the measurements.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../config.hpp"
#include "../format.hpp"
#include "../host/element_bits.hpp"
#include "../host/reference_reduce.hpp"
#include "compensated_sum.hpp"
#include "group_quantizer.hpp"
#include "quant_format.hpp"

namespace zipcomm {
namespace quant {
namespace host {

namespace detail {

using zipcomm::host::detail::load_bits;
using zipcomm::host::detail::store_bits;

inline float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

/// The codes of group g (`count` elements, G <= 128) of a checked message: unpacked from whole blocks.
inline void read_group_codes(const uint8_t* msg, const Layout& l, uint64_t g, uint32_t count, uint32_t* codes) {
  const uint64_t first_block = g * (l.group / BLOCK_ELEMS);
  const uint32_t blocks = static_cast<uint32_t>(format::div_up(count, BLOCK_ELEMS));
  for (uint32_t b = 0; b < blocks; ++b) {
    uint32_t words[MAX_BITS];
    std::memcpy(words, msg + l.codes_offset + (first_block + b) * 4u * l.bits, 4u * l.bits);
    for (uint32_t k = 0; k < BLOCK_ELEMS && b * BLOCK_ELEMS + k < count; ++k)
      codes[b * BLOCK_ELEMS + k] = unpack_code(words, k, l.bits);
  }
}

template <DType D>
inline Status quantize_typed(QuantMode mode, uint32_t bits, uint32_t group, const uint8_t* src, uint64_t n,
                             uint8_t* dst) {
  const Layout l = layout_for(mode, bits, group, n);
  std::memset(dst, 0, l.total_bytes);  // padding and unused code bits are zero
  uint32_t codes[128];
  float x[128];
  for (uint64_t g = 0; g < l.num_groups; ++g) {
    const uint32_t count = group_elems(n, group, g);
    GroupRange r = GroupRange::empty();
    for (uint32_t k = 0; k < count; ++k) {
      const uint32_t b = load_bits<D>(src, g * group + k);
      if (!element_finite<D>(b)) return Status::not_finite;
      x[k] = thread::to_f32<D>(b);
      r.add(x[k]);
    }
    GroupParams p;
    const Status st = make_params<D>(mode, bits, r.canonical(), p);
    if (st != Status::ok) return st;
    uint8_t* rec = dst + l.params_offset + g * param_bytes(mode);
    std::memcpy(rec, &p.scale, 4);
    if (mode == QuantMode::asymmetric) std::memcpy(rec + 4, &p.lo, 4);
    for (uint32_t k = 0; k < group; ++k) codes[k] = k < count ? quantize_value(mode, bits, p, x[k]) : 0u;
    const uint64_t first_block = g * (group / BLOCK_ELEMS);
    for (uint32_t b = 0; b < format::div_up(count, BLOCK_ELEMS); ++b) {
      uint32_t words[MAX_BITS];
      pack_block(codes + b * BLOCK_ELEMS, bits, words);
      std::memcpy(dst + l.codes_offset + (first_block + b) * 4u * bits, words, 4u * bits);
    }
  }
  return Status::ok;
}

/// Checks the body of a message of dtype D whose header was validated (pass 1, write = false), or decodes it into
/// dtype O (pass 2).
template <DType D, DType O>
inline Status dequantize_typed(const uint8_t* msg, const Layout& l, uint8_t* dst, bool write) {
  uint32_t codes[128];
  for (uint64_t g = 0; g < l.num_groups; ++g) {
    const uint32_t count = group_elems(l.n, l.group, g);
    const uint8_t* rec = msg + l.params_offset + g * param_bytes(l.mode);
    const float scale = get_f32(rec);
    const float lo = l.mode == QuantMode::asymmetric ? get_f32(rec + 4) : 0.0f;
    read_group_codes(msg, l, g, count, codes);
    uint32_t zeros = 0;
    for (uint32_t k = 0; k < count; ++k) zeros += codes[k] == 0;
    bool constant = false;
    if (l.mode == QuantMode::symmetric) {
      constant = zeros == count;  // code 0 marks a constant group: all of its codes or none
      if (zeros && !constant) return Status::corrupt_stream;
    } else if (f32_to_bits(scale) == 0u && zeros != count) {
      return Status::corrupt_stream;  // a group of scale 0 has only code 0
    }
    if (!params_valid<D>(l.mode, l.bits, scale, lo, constant)) return Status::corrupt_stream;
    if (write)
      for (uint32_t k = 0; k < count; ++k)
        store_bits<O>(dst, g * l.group + k, dequantize_element<O>(l.mode, l.bits, scale, lo, codes[k]));
  }
  return Status::ok;
}

/// Padding bytes and the code bits past element n-1 are zero.
inline bool padding_zero(const uint8_t* msg, const Layout& l) {
  for (int gap = 0; gap < SECTION_GAPS; ++gap) {
    uint64_t begin = 0, end = 0;
    section_gap(l, gap, begin, end);
    for (uint64_t b = begin; b < end; ++b)
      if (msg[b]) return false;
  }
  if (l.n % BLOCK_ELEMS) {
    uint32_t words[MAX_BITS];
    std::memcpy(words, msg + l.codes_offset + (l.num_blocks - 1) * 4u * l.bits, 4u * l.bits);
    for (uint32_t k = static_cast<uint32_t>(l.n % BLOCK_ELEMS); k < BLOCK_ELEMS; ++k)
      if (unpack_code(words, k, l.bits)) return false;
  }
  return true;
}

using quant::CompensatedSum;

/// Softmax of one row of logits in double: max subtracted, exp, normalised by a compensated sum. false when the
/// row has a NaN or +inf, or no finite logit (-inf logits are allowed: probability 0).
inline bool softmax_row(const float* logits, uint64_t vocab, std::vector<double>& p) {
  double mx = -std::numeric_limits<double>::infinity();
  for (uint64_t i = 0; i < vocab; ++i) {
    const double v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<double>::infinity()) return false;
    mx = v > mx ? v : mx;
  }
  if (!std::isfinite(mx)) return false;
  p.resize(vocab);
  CompensatedSum z;
  for (uint64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp(static_cast<double>(logits[i]) - mx);
    z.add(p[i]);
  }
  const double zv = z.value();  // >= 1: the maximum contributes exp(0)
  for (uint64_t i = 0; i < vocab; ++i) p[i] /= zv;
  return true;
}

}  // namespace detail

/// Reads and validates the header of a message of `bytes` bytes.
inline Status read_header(const void* src, uint64_t bytes, Header* out) {
  if (!src || !out) return Status::invalid_argument;
  if (bytes < HEADER_BYTES) return Status::corrupt_stream;
  std::memcpy(out, src, sizeof(Header));
  return validate_header(*out, bytes);
}

/// Quantizes n elements of `dtype` (raw little-endian bits at src, any alignment) with b = `bits` (2..8), group
/// size `group` (32, 64, 128) and `mode` into dst. dst_capacity must be at least
/// max_quantized_bytes(mode, bits, group, n), which is the exact size written to *out_bytes.
/// Status: invalid_argument (null pointer, unknown dtype/mode, bits or group out of range, n > 2^50),
/// buffer_too_small, not_finite (a NaN or infinity in the input, or a group whose range overflows; dst is then
/// unspecified and *out_bytes untouched).
inline Status quantize(DType dtype, QuantMode mode, uint32_t bits, uint32_t group, const void* src, uint64_t n,
                       void* dst, uint64_t dst_capacity, uint64_t* out_bytes) {
  if ((!src && n) || !dst || !out_bytes || !original_dtype_valid(uint8_t(dtype)) || !mode_valid(uint32_t(mode)) ||
      !bits_valid(bits) || !group_valid(group) || n > MAX_ELEMENTS)
    return Status::invalid_argument;
  const uint64_t total = max_quantized_bytes(mode, bits, group, n);
  if (dst_capacity < total) return Status::buffer_too_small;
  auto s = static_cast<const uint8_t*>(src);
  auto d = static_cast<uint8_t*>(dst);
  const Status st = visit_comm_dtype(dtype, Status::invalid_argument, [&](auto dt) {
    return detail::quantize_typed<decltype(dt)::value>(mode, bits, group, s, n, d);
  });
  if (st != Status::ok) return st;
  const Header h = make_header(dtype, mode, bits, group, n);
  std::memcpy(d, &h, sizeof h);
  *out_bytes = total;
  return Status::ok;
}

/// Dequantizes a message of src_bytes bytes into dst (capacity dst_bytes; must hold n elements of `out_dtype`):
/// each element's fp32 reconstruction narrowed to out_dtype with round-to-nearest-even. Into the message's own
/// dtype (the overload below) that is the reconstruction of docs/QUANT.md; into another dtype it is the same fp32
/// value cast (an fp32 message read into fp16 can overflow to infinity where fp16 has no finite value).
/// Status: invalid_argument (unknown out_dtype), the header's (bad_header, unsupported_version, corrupt_stream
/// when truncated), buffer_too_small, invalid_argument (null dst), corrupt_stream (non-zero padding, parameters no
/// writer produces, codes that contradict their group's parameters: the checks use the message's dtype, whatever
/// out_dtype is). The whole message is checked before the first write: on any error dst is untouched. A
/// quantized message carries no checksum (v1): a changed code decodes to another value.
inline Status dequantize(const void* src, uint64_t src_bytes, void* dst, uint64_t dst_bytes, DType out_dtype) {
  if (!original_dtype_valid(static_cast<uint8_t>(out_dtype))) return Status::invalid_argument;
  Header h;
  Status st = read_header(src, src_bytes, &h);
  if (st != Status::ok) return st;
  if (dst_bytes < h.num_elements * format::elem_bytes(out_dtype)) return Status::buffer_too_small;
  if (!dst && h.num_elements) return Status::invalid_argument;
  auto s = static_cast<const uint8_t*>(src);
  auto d = static_cast<uint8_t*>(dst);
  const Layout l = layout_for(static_cast<QuantMode>(h.mode), h.bits, h.group_size, h.num_elements);
  if (!detail::padding_zero(s, l)) return Status::corrupt_stream;
  return visit_comm_dtype(static_cast<DType>(h.dtype), Status::invalid_argument, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    return visit_comm_dtype(out_dtype, Status::invalid_argument, [&](auto ot) {
      constexpr DType O = decltype(ot)::value;
      const Status check = detail::dequantize_typed<D, O>(s, l, d, false);
      return check != Status::ok ? check : detail::dequantize_typed<D, O>(s, l, d, true);
    });
  });
}

/// Dequantizes into the message's own dtype: the reconstruction docs/QUANT.md defines.
inline Status dequantize(const void* src, uint64_t src_bytes, void* dst, uint64_t dst_bytes) {
  Header h;
  const Status st = read_header(src, src_bytes, &h);
  if (st != Status::ok) return st;
  return dequantize(src, src_bytes, dst, dst_bytes, static_cast<DType>(h.dtype));
}

/// Dequantize + reduce, the receive side of a reduction hop: dst[i] = combine(x'[i], pre(local[i])) for the
/// message's n elements, x' the reconstruction as out_dtype (dequantize() above) and the operators of
/// thread/reduce_op.hpp. local and dst hold n elements of out_dtype (dst may equal local). Status: size_mismatch
/// when the message holds another element count, dequantize()'s otherwise; on any error dst is untouched.
inline Status dequantize_reduce(const void* src, uint64_t src_bytes, DType out_dtype, const void* local, void* dst,
                                uint64_t n, const ReduceOp& op) {
  if (!original_dtype_valid(static_cast<uint8_t>(out_dtype)) || (n && (!local || !dst)) || !reduce_op_valid(op))
    return Status::invalid_argument;
  Header h;
  const Status st = read_header(src, src_bytes, &h);
  if (st != Status::ok) return st;
  if (h.num_elements != n) return Status::size_mismatch;
  std::vector<uint8_t> x(n * format::elem_bytes(out_dtype));
  const Status d = dequantize(src, src_bytes, x.data(), x.size(), out_dtype);
  return d != Status::ok ? d : zipcomm::host::reduce(out_dtype, op, x.data(), local, dst, n);
}

/// Dequantize + forward, an all-gather hop: dequantize() into dst, and the message's bytes (its header's
/// total_bytes) copied to fwd (capacity fwd_bytes; smaller gives buffer_too_small). On any error neither is
/// written.
inline Status dequantize_forward(const void* src, uint64_t src_bytes, void* dst, uint64_t dst_bytes, DType out_dtype,
                                 void* fwd, uint64_t fwd_bytes) {
  Header h;
  const Status st = read_header(src, src_bytes, &h);
  if (st != Status::ok) return st;
  if (!fwd) return Status::invalid_argument;
  if (fwd_bytes < h.total_bytes) return Status::buffer_too_small;
  const Status d = dequantize(src, src_bytes, dst, dst_bytes, out_dtype);
  if (d == Status::ok) std::memcpy(fwd, src, h.total_bytes);
  return d;
}

/// Read access to a message whose header checked out (for tests and tools): parameters and codes as stored.
struct MessageView {
  const uint8_t* base = nullptr;
  Header header{};
  Layout layout{};

  Status open(const void* src, uint64_t bytes) {
    const Status st = read_header(src, bytes, &header);
    if (st != Status::ok) return st;
    base = static_cast<const uint8_t*>(src);
    layout = layout_for(static_cast<QuantMode>(header.mode), header.bits, header.group_size, header.num_elements);
    return Status::ok;
  }
  float scale(uint64_t g) const { return detail::get_f32(base + layout.params_offset + g * param_bytes(layout.mode)); }
  /// Asymmetric: the group's lo; symmetric: 0.
  float lo(uint64_t g) const {
    return layout.mode == QuantMode::asymmetric ? detail::get_f32(base + layout.params_offset + 8 * g + 4) : 0.0f;
  }
  uint32_t code(uint64_t i) const {
    uint32_t words[MAX_BITS];
    std::memcpy(words, base + layout.codes_offset + (i / BLOCK_ELEMS) * 4u * layout.bits, 4u * layout.bits);
    return unpack_code(words, static_cast<uint32_t>(i % BLOCK_ELEMS), layout.bits);
  }
};

// ---- fidelity: the Expected Acceptance Rate -------------------------------------------------------------------
/// sum_x min(p(x), q(x)) for one position, p = softmax(p_logits), q = softmax(q_logits) over `vocab` entries:
/// the probability that a draft token sampled from q is accepted by speculative sampling against p (and the
/// complement of the total variation distance). Exactly 1 when the two rows are bitwise identical; in [0, 1]
/// otherwise, and symmetric in its arguments (bit for bit). NaN when a row has a NaN or +inf logit, no finite
/// logit, or vocab is 0.
inline double ear_row(const float* p_logits, const float* q_logits, uint64_t vocab) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!p_logits || !q_logits || vocab == 0) return nan;
  std::vector<double> p, q;
  if (!detail::softmax_row(p_logits, vocab, p) || !detail::softmax_row(q_logits, vocab, q)) return nan;
  if (std::memcmp(p_logits, q_logits, vocab * sizeof(float)) == 0) return 1.0;
  detail::CompensatedSum s;
  for (uint64_t i = 0; i < vocab; ++i) s.add(p[i] < q[i] ? p[i] : q[i]);
  const double v = s.value();
  return v > 1.0 ? 1.0 : v;  // rounding can leave it a few ulps above 1
}

/// EAR = the mean over `rows` positions of ear_row, with logits stored row-major (rows x vocab fp32) for the
/// original (p) and the quantized (q) model. Exactly 1.0 for identical inputs. NaN for rows == 0 or a bad row.
inline double ear(const float* p_logits, const float* q_logits, uint64_t rows, uint64_t vocab) {
  if (rows == 0) return std::numeric_limits<double>::quiet_NaN();
  detail::CompensatedSum s;
  for (uint64_t r = 0; r < rows; ++r) s.add(ear_row(p_logits + r * vocab, q_logits + r * vocab, vocab));
  return s.value() / static_cast<double>(rows);  // identical rows sum to `rows` exactly
}

}  // namespace host
}  // namespace quant
}  // namespace zipcomm
