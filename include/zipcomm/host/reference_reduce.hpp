// Host reference of the fused steps (plain C++; no CUDA needed): what decode + reduce, decode + reduce +
// encode and decode + forward must produce, defined as the unfused composition of the host reference codec
// and thread/reduce_op.hpp. The device's fused primitives are tested against these bit for bit. The fp8 dtypes
// are codec only: every function here gives invalid_argument for them.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/reduce_op.hpp"
#include "reference_codec.hpp"

namespace zipcomm {
namespace host {

namespace detail {

/// Reads a stream that must hold exactly n elements of dtype/code; decodes it into `out` when given.
inline Status decode_exact(const void* in, uint64_t in_bytes, DType dtype, CodeId code, uint64_t n,
                           std::vector<uint8_t>* out) {
  Header h;
  Status s = read_header(in, in_bytes, &h);
  if (s != Status::ok) return s;
  if (h.dtype != uint8_t(dtype) || h.code != uint8_t(code)) return Status::bad_header;
  if (h.num_elements != n) return Status::size_mismatch;
  std::vector<uint8_t> tmp;
  std::vector<uint8_t>& dst = out ? *out : tmp;
  dst.assign(n * format::elem_bytes(dtype), 0);
  return decompress(in, in_bytes, dst.data(), dst.size());
}

}  // namespace detail

/// pre(x) of every element: a rank's contribution entering a reduction (avg scales; other ops copy).
inline Status reduce_pre(DType dtype, const ReduceOp& op, const void* in, void* out, uint64_t n) {
  if ((n && (!in || !out)) || !reduce_op_valid(op)) return Status::invalid_argument;
  return visit_comm_dtype(dtype, Status::invalid_argument, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t x = detail::load_bits<D>(static_cast<const uint8_t*>(in), i);
      detail::store_bits<D>(static_cast<uint8_t*>(out), i, thread::reduce_pre<D>(op, x));
    }
    return Status::ok;
  });
}

/// out[i] = combine(acc[i], pre(local[i])): one hop of a reduction, uncompressed. out may equal acc or local.
inline Status reduce(DType dtype, const ReduceOp& op, const void* acc, const void* local, void* out, uint64_t n) {
  if ((n && (!acc || !local || !out)) || !reduce_op_valid(op)) return Status::invalid_argument;
  return visit_comm_dtype(dtype, Status::invalid_argument, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t a[1] = {detail::load_bits<D>(static_cast<const uint8_t*>(acc), i)};
      const uint32_t b[1] = {detail::load_bits<D>(static_cast<const uint8_t*>(local), i)};
      thread::reduce_items<D, 1>(op, a, b);
      detail::store_bits<D>(static_cast<uint8_t*>(out), i, a[0]);
    }
    return Status::ok;
  });
}

/// Decode + reduce: out = combine(decode(in), pre(local)); in must hold exactly n elements of dtype/code.
inline Status decompress_reduce(const void* in, uint64_t in_bytes, DType dtype, CodeId code, const void* local,
                                void* out, uint64_t n, const ReduceOp& op) {
  if (!in || (n && (!local || !out)) || !reduce_op_valid(op) || !comm_dtype_supported(dtype))
    return Status::invalid_argument;
  std::vector<uint8_t> decoded;
  Status s = detail::decode_exact(in, in_bytes, dtype, code, n, &decoded);
  if (s != Status::ok) return s;
  return reduce(dtype, op, decoded.data(), local, out, n);
}

/// Decode + reduce + encode: out = encode(combine(decode(in), pre(local))) in the chunk size of `in`, every tile's
/// low bits at full width (the bytes of device::decompress_reduce_compress, which places them before it has seen
/// a chunk).
inline Status decompress_reduce_compress(const void* in, uint64_t in_bytes, DType dtype, CodeId code,
                                         const void* local, uint64_t n, const ReduceOp& op, void* out,
                                         uint64_t out_capacity, uint64_t* out_bytes) {
  if (!out_bytes) return Status::invalid_argument;
  *out_bytes = 0;
  if (!out || !comm_dtype_supported(dtype)) return Status::invalid_argument;
  std::vector<uint8_t> reduced(n * format::elem_bytes(dtype));
  Status s = decompress_reduce(in, in_bytes, dtype, code, local, reduced.data(), n, op);
  if (s != Status::ok) return s;
  Header h;
  s = read_header(in, in_bytes, &h);
  if (s == Status::ok)
    s = compress(dtype, code, reduced.data(), n, out, out_capacity, out_bytes, format::LowWidths::full, h.chunk_log2);
  if (s != Status::ok) *out_bytes = 0;
  return s;
}

/// A rank's first send: encode(pre(in)), in chunks of 2^chunk_log2 elements (as compress).
inline Status compress_contribution(DType dtype, CodeId code, const void* in, uint64_t n, const ReduceOp& op,
                                    void* out, uint64_t out_capacity, uint64_t* out_bytes,
                                    uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  if (!comm_dtype_supported(dtype)) return Status::invalid_argument;
  std::vector<uint8_t> scaled(n * format::elem_bytes(dtype));
  Status s = reduce_pre(dtype, op, in, scaled.data(), n);
  if (s != Status::ok) return s;
  return compress(dtype, code, scaled.data(), n, out, out_capacity, out_bytes, format::LowWidths::minimal, chunk_log2);
}

/// Decode + forward: out = decode(in); fwd = the stream's bytes, unchanged.
inline Status decompress_forward(const void* in, uint64_t in_bytes, DType dtype, CodeId code, void* out, uint64_t n,
                                 void* fwd, uint64_t fwd_capacity) {
  if (!in || !fwd || (n && !out) || !comm_dtype_supported(dtype)) return Status::invalid_argument;
  Header h;
  if (read_header(in, in_bytes, &h) == Status::ok && h.dtype == uint8_t(dtype) && h.code == uint8_t(code) &&
      h.num_elements == n && fwd_capacity < h.total_bytes)
    return Status::buffer_too_small;  // checked before any chunk, as the device does
  std::vector<uint8_t> decoded;
  Status s = detail::decode_exact(in, in_bytes, dtype, code, n, &decoded);
  if (s != Status::ok) return s;
  std::memcpy(fwd, in, h.total_bytes);
  if (n) std::memcpy(out, decoded.data(), decoded.size());
  return Status::ok;
}

}  // namespace host
}  // namespace zipcomm
