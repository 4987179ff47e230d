// Neumaier's compensated fp64 sum, host and device: the EAR's sums (reference_quant.hpp, device_ear.cuh) keep
// about 2^-104 relative error however many terms they add.
#pragma once

#include <cmath>

#include "../config.hpp"

namespace zipcomm {
namespace quant {

struct CompensatedSum {
  double sum = 0.0, comp = 0.0;
  ZIPCOMM_HOST_DEVICE void add(double v) {
    const double t = sum + v;
    comp += fabs(sum) >= fabs(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  ZIPCOMM_HOST_DEVICE double value() const { return sum + comp; }
};

/// Merges two partial sums (a parallel reduction's operator).
struct MergeCompensated {
  ZIPCOMM_HOST_DEVICE CompensatedSum operator()(const CompensatedSum& a, const CompensatedSum& b) const {
    CompensatedSum r = a;
    r.add(b.sum);
    r.comp += b.comp;
    return r;
  }
};

}  // namespace quant
}  // namespace zipcomm
