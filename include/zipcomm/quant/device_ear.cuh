// Expected Acceptance Rate on the GPU (quantization tier, docs/QUANT.md section 5): per position, sum_x min(p(x),
// q(x)) of two rows of logits, any vocabulary size, with the host reference's numerics (reference_quant.hpp): fp64
// softmax with the row maximum subtracted, compensated (Neumaier) sums, exactly 1 for bitwise identical rows, NaN
// for a row with a NaN or +inf logit or no finite one.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include <cmath>
#include <cstdint>

#include "../config.hpp"
#include "compensated_sum.hpp"

namespace zipcomm {
namespace quant {

/// \brief One row's EAR, computed by a whole thread block (every thread calls Row together).
///
/// Three passes over the row (maximum and checks, normalisers, the sum of minima); the row should be L2-resident
/// for the second and third (a row of 256 Ki logits is 1 MB per model).
/// \code
/// using Ear = zipcomm::quant::BlockEar<256>;
/// __shared__ Ear::TempStorage temp;
/// double e = Ear(temp).Row(p_row, q_row, vocab);  // the same value in every thread
/// \endcode
template <int BLOCK_THREADS>
class BlockEar {
  using MaxReduce = cub::BlockReduce<float, BLOCK_THREADS>;
  using SumReduce = cub::BlockReduce<CompensatedSum, BLOCK_THREADS>;

 public:
  struct TempStorage {
    union {
      typename MaxReduce::TempStorage max;
      typename SumReduce::TempStorage sum;
    } reduce;
    float max_p, max_q;
    double z_p, z_q, result;
  };

  ZIPCOMM_DEVICE explicit BlockEar(TempStorage& temp) : temp_(temp) {}

  ZIPCOMM_DEVICE double Row(const float* p, const float* q, uint64_t vocab) {
    const uint32_t tid = threadIdx.x;
    float mp = -INFINITY, mq = -INFINITY;
    int bad = 0, differ = 0;
    for (uint64_t i = tid; i < vocab; i += BLOCK_THREADS) {
      const float a = p[i], b = q[i];
      bad |= isnan(a) || isnan(b) || a == INFINITY || b == INFINITY;
      differ |= __float_as_uint(a) != __float_as_uint(b);
      mp = fmaxf(mp, a);
      mq = fmaxf(mq, b);
    }
    bad = __syncthreads_or(bad);
    differ = __syncthreads_or(differ);
    const float row_mp = MaxReduce(temp_.reduce.max).Reduce(mp, cuda::maximum<float>{});
    __syncthreads();
    const float row_mq = MaxReduce(temp_.reduce.max).Reduce(mq, cuda::maximum<float>{});
    if (tid == 0) temp_.max_p = row_mp, temp_.max_q = row_mq;
    __syncthreads();
    mp = temp_.max_p;
    mq = temp_.max_q;
    if (bad || vocab == 0 || !isfinite(mp) || !isfinite(mq)) return nan("");
    if (!differ) return 1.0;

    CompensatedSum zp, zq;
    for (uint64_t i = tid; i < vocab; i += BLOCK_THREADS) {
      zp.add(exp(double(p[i]) - double(mp)));
      zq.add(exp(double(q[i]) - double(mq)));
    }
    const CompensatedSum row_zp = SumReduce(temp_.reduce.sum).Reduce(zp, MergeCompensated());
    __syncthreads();
    const CompensatedSum row_zq = SumReduce(temp_.reduce.sum).Reduce(zq, MergeCompensated());
    if (tid == 0) temp_.z_p = row_zp.value(), temp_.z_q = row_zq.value();
    __syncthreads();
    const double zp_row = temp_.z_p, zq_row = temp_.z_q;  // >= 1: the maximum contributes exp(0)

    CompensatedSum s;
    for (uint64_t i = tid; i < vocab; i += BLOCK_THREADS) {
      const double a = exp(double(p[i]) - double(mp)) / zp_row, b = exp(double(q[i]) - double(mq)) / zq_row;
      s.add(a < b ? a : b);
    }
    const CompensatedSum row = SumReduce(temp_.reduce.sum).Reduce(s, MergeCompensated());
    if (tid == 0) temp_.result = row.value();
    __syncthreads();
    const double v = temp_.result;
    __syncthreads();  // temp_ may be reused by the next row
    return v > 1.0 ? 1.0 : v;
  }

 private:
  TempStorage& temp_;
};

namespace device {
namespace detail {

constexpr int EAR_THREADS = 256;  // one block per row; rows beyond the grid loop

__global__ void __launch_bounds__(EAR_THREADS) ear_rows_kernel(const float* p, const float* q, uint64_t rows,
                                                               uint64_t vocab, double* out) {
  __shared__ typename BlockEar<EAR_THREADS>::TempStorage temp;
  BlockEar<EAR_THREADS> ear(temp);
  for (uint64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const double v = ear.Row(p + r * vocab, q + r * vocab, vocab);
    if (threadIdx.x == 0) out[r] = v;
  }
}

}  // namespace detail

/// Per-row EAR of `rows` x `vocab` fp32 logits stored row-major at d_p (original model) and d_q (quantized):
/// d_out[r] = sum_x min(p_r(x), q_r(x)), as quant::host::ear_row computes it (within a few ulps of fp64: the
/// sums run in another order). Stream-ordered; nothing allocated. cudaErrorInvalidValue for null pointers with
/// rows and vocab nonzero. The model's EAR is the mean of the rows (quant::host::ear takes it with a compensated
/// sum; NaN rows make it NaN).
inline cudaError_t ear_rows(const float* d_p, const float* d_q, uint64_t rows, uint64_t vocab, double* d_out,
                            cudaStream_t stream = 0) {
  if (rows == 0) return cudaSuccess;
  if (!d_out || (vocab && (!d_p || !d_q))) return cudaErrorInvalidValue;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  const uint64_t grid = rows < uint64_t(sms) * 8 ? rows : uint64_t(sms) * 8;
  detail::ear_rows_kernel<<<unsigned(grid), detail::EAR_THREADS, 0, stream>>>(d_p, d_q, rows, vocab, d_out);
  return cudaGetLastError();
}

}  // namespace device
}  // namespace quant
}  // namespace zipcomm
