// Host reference of the ring allreduce's result (plain C++17; no CUDA needed): slice k (ring/schedule.cuh)
// starts at rank k with pre(x_k) and is combined, one rounding per hop, with ranks k+1, ..., k-1 in that
// order (host::reduce). Chunking and channels do not change the result (the operators are elementwise);
// only the slices do. The compressed and the uncompressed ring must both give these bits on every rank.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../host/reference_reduce.hpp"
#include "../../thread/reduce_op.hpp"
#include "schedule.cuh"

namespace zipcomm {
namespace comm {

/// out[0, n) = the ring's allreduce of inputs[0..ranks-1] (each n elements of dtype). out may be one of the
/// inputs. The fp8 dtypes give invalid_argument (codec only).
inline Status ring_reference(DType dtype, const ReduceOp& op, const std::vector<const void*>& inputs, uint64_t n,
                             void* out) {
  const int ranks = int(inputs.size());
  if (ranks < 1 || ranks > RING_MAX_RANKS || !reduce_op_valid(op) || !comm_dtype_supported(dtype)) {
    return Status::invalid_argument;
  }
  if (n == 0) return Status::ok;
  if (!out) return Status::invalid_argument;
  for (const void* p : inputs)
    if (!p) return Status::invalid_argument;
  const uint64_t eb = format::elem_bytes(dtype);
  std::vector<uint8_t> result(n * eb), acc;
  for (int k = 0; k < ranks; ++k) {
    const RingRange s = ring_slice(n, ranks, k);
    if (s.count == 0) continue;
    acc.resize(s.count * eb);
    Status st = host::reduce_pre(dtype, op, static_cast<const uint8_t*>(inputs[k]) + s.first * eb, acc.data(),
                                 s.count);
    for (int j = 1; j < ranks && st == Status::ok; ++j) {
      const uint8_t* x = static_cast<const uint8_t*>(inputs[(k + j) % ranks]) + s.first * eb;
      st = host::reduce(dtype, op, acc.data(), x, acc.data(), s.count);
    }
    if (st != Status::ok) return st;
    std::memcpy(result.data() + s.first * eb, acc.data(), acc.size());
  }
  std::memcpy(out, result.data(), result.size());
  return Status::ok;
}

}  // namespace comm
}  // namespace zipcomm
