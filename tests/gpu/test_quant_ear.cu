// GPU tests of the Expected Acceptance Rate (quant::device::ear_rows, quant::BlockEar): every row against the
// host reference (quant::host::ear_row) at vocabulary sizes from 1 to a large LLM's, exactly 1 for identical
// rows, bitwise symmetric, NaN for the rows the reference refuses, -inf logits as probability 0.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <zipcomm/quant/device_ear.cuh>
#include <zipcomm/quant/reference_quant.hpp>

#include "gpu_test_util.cuh"

using namespace zipcomm;
using gpu_test::DeviceBuffer;

namespace {

/// Per-row EAR of rows x vocab logits on the device.
std::vector<double> device_ear(const std::vector<float>& p, const std::vector<float>& q, uint64_t rows,
                               uint64_t vocab) {
  DeviceBuffer dp(p.size() * 4), dq(q.size() * 4), out(rows * 8);
  gpu_test::upload(dp.ptr, p.data(), p.size() * 4);
  gpu_test::upload(dq.ptr, q.data(), q.size() * 4);
  CUDA_OK(quant::device::ear_rows(dp.as<float>(), dq.as<float>(), rows, vocab, out.as<double>()));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> r(rows);
  CUDA_OK(cudaMemcpy(r.data(), out.ptr, rows * 8, cudaMemcpyDeviceToHost));
  return r;
}

}  // namespace

TEST_CASE("EAR on the GPU equals the host reference per row", "[gpu][quant][ear]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint64_t vocab : {uint64_t(1), uint64_t(2), uint64_t(255), uint64_t(256), uint64_t(257), uint64_t(30522),
                         uint64_t(151936), uint64_t(1) << 20}) {
    const uint64_t rows = vocab >= (1u << 20) ? 2 : vocab >= 100000 ? 5 : 37;
    CAPTURE(vocab, rows);
    std::vector<float> p(rows * vocab), q(rows * vocab);
    for (uint64_t r = 0; r < rows; ++r) {
      // Temperatures from nearly uniform to nearly one-hot; q is p plus noise of a row-dependent size, some rows
      // identical, some with -inf entries (masked tokens).
      const float temp = 0.1f + 8.0f * float(r % 7) / 6.0f, noise = r % 5 == 0 ? 0.0f : 0.001f * float(1 + r % 9);
      for (uint64_t i = 0; i < vocab; ++i) {
        const float x = temp * normal(rng);
        p[r * vocab + i] = x;
        q[r * vocab + i] = noise == 0.0f ? x : x + noise * temp * normal(rng);
      }
      if (r % 6 == 3 && vocab > 2) {
        p[r * vocab + 1] = -INFINITY;
        q[r * vocab + vocab - 1] = -INFINITY;
      }
    }
    const std::vector<double> got = device_ear(p, q, rows, vocab), back = device_ear(q, p, rows, vocab);
    for (uint64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      const double want = quant::host::ear_row(&p[r * vocab], &q[r * vocab], vocab);
      REQUIRE(std::isfinite(got[r]));
      CHECK(got[r] <= 1.0);
      CHECK(got[r] >= 0.0);
      CHECK(std::fabs(got[r] - want) <= 1e-12);
      CHECK(std::memcmp(&got[r], &back[r], 8) == 0);  // symmetric bit for bit
      if (std::memcmp(&p[r * vocab], &q[r * vocab], vocab * 4) == 0) CHECK(got[r] == 1.0);
    }
  }
}

TEST_CASE("EAR on the GPU: disjoint, refused and empty rows", "[gpu][quant][ear]") {
  const uint64_t vocab = 1000, rows = 6;
  std::vector<float> p(rows * vocab, 0.0f), q(rows * vocab, 0.0f);
  // Row 0: all mass on different tokens (EAR ~ 0). Row 1: NaN. Row 2: +inf. Row 3: no finite logit.
  // Row 4: identical rows with -inf entries. Row 5: p uniform, q uniform over half of the vocabulary.
  for (uint64_t i = 0; i < vocab; ++i) {
    p[i] = i == 3 ? 0.0f : -1000.0f;
    q[i] = i == 7 ? 0.0f : -1000.0f;
    p[3 * vocab + i] = q[3 * vocab + i] = -INFINITY;
    p[4 * vocab + i] = q[4 * vocab + i] = i % 3 ? 1.0f : -INFINITY;
    q[5 * vocab + i] = i < vocab / 2 ? 0.0f : -INFINITY;
  }
  p[1 * vocab + 10] = std::numeric_limits<float>::quiet_NaN();
  q[2 * vocab + 20] = INFINITY;
  const std::vector<double> got = device_ear(p, q, rows, vocab);
  CHECK(got[0] == Approx(0.0).margin(1e-300));
  CHECK(std::isnan(got[1]));
  CHECK(std::isnan(got[2]));
  CHECK(std::isnan(got[3]));
  CHECK(got[4] == 1.0);
  CHECK(got[5] == Approx(0.5).epsilon(1e-14));
  for (uint64_t r = 0; r < rows; ++r) {
    const double want = quant::host::ear_row(&p[r * vocab], &q[r * vocab], vocab);
    CHECK((std::isnan(want) ? std::isnan(got[r]) : std::fabs(got[r] - want) <= 1e-12));
  }
  // Arguments: nothing to do for 0 rows; null pointers refused.
  double* none = nullptr;
  CHECK(quant::device::ear_rows(nullptr, nullptr, 0, vocab, none) == cudaSuccess);
  DeviceBuffer out(8);
  CHECK(quant::device::ear_rows(nullptr, nullptr, 1, vocab, out.as<double>()) == cudaErrorInvalidValue);
  CHECK(quant::device::ear_rows(out.as<float>(), out.as<float>(), 1, vocab, nullptr) == cudaErrorInvalidValue);
  // Vocabulary 0: NaN, as the reference.
  CUDA_OK(quant::device::ear_rows(nullptr, nullptr, 1, 0, out.as<double>()));
  double v = 0;
  CUDA_OK(cudaMemcpy(&v, out.ptr, 8, cudaMemcpyDeviceToHost));
  CHECK(std::isnan(v));
}
