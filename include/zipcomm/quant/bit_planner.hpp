// Bit-width planner of the quantization tier (plain C++17, host only): given, for every tensor of a model, a set
// of measured candidates (a way to quantize it, what it costs in bits per parameter, and the model's sensitivity
// to it), choose one candidate per tensor for a budget of bits per parameter or for a target EAR.
//
// Sensitivity of tensor k under candidate c: s = 1 - EAR of the model with only tensor k quantized by c, measured
// on calibration inputs. The planner predicts a plan's EAR with the root-sum-square model
//     1 - EAR = sqrt(sum_k s_k^2)
// (independent noises add in variance, and a small EAR drop grows like the noise's standard deviation), which
// docs/QUANT.md section 7 checks against forward passes of a real model; a plan therefore minimises sum_k s_k^2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <vector>

#include "quant_format.hpp"

namespace zipcomm {
namespace quant {

/// One way to send a tensor. bits = 0 means "not quantized": the tensor goes as it is (or through the lossless
/// codec), a candidate the caller adds with its own cost and a sensitivity of 0.
struct QuantChoice {
  QuantMode mode = QuantMode::asymmetric;
  uint32_t bits = 0;
  uint32_t group = 64;
};

/// A measured candidate of one tensor.
struct PlanCandidate {
  QuantChoice choice;
  double bits_per_param = 0;  ///< what the tensor costs on the wire under it, per parameter, all bytes counted
  double sensitivity = 0;     ///< 1 - EAR with only this tensor quantized by `choice` (0 <= s <= 1)
};

/// The candidates of one tensor of `params` parameters.
struct PlanTensor {
  uint64_t params = 0;
  std::vector<PlanCandidate> candidates;
};

/// What the planner was asked for.
enum class PlanGoal : uint8_t {
  budget = 1,      ///< the smallest predicted EAR drop within `budget` average bits per parameter
  target_ear = 2,  ///< the fewest bits per parameter whose predicted EAR reaches `target`
};

/// A plan: one candidate per tensor.
struct BitPlan {
  std::vector<uint32_t> pick;  ///< index into each tensor's candidates
  double bits_per_param = 0;   ///< over all tensors, weighted by their parameters
  double sum_sq = 0;           ///< sum_k s_k^2 of the picks
  double predicted_ear = 1;    ///< 1 - sqrt(sum_sq), at least 0
  bool met = false;            ///< the goal was reached (budget: the cheapest plan fits; target: EAR reached)
};

/// Bits per parameter of a quantized message of n elements (header and padding included).
inline double message_bits_per_param(QuantMode mode, uint32_t bits, uint32_t group, uint64_t n) {
  return n == 0 ? 0.0 : 8.0 * double(layout_for(mode, bits, group, n).total_bytes) / double(n);
}

/// Predicted EAR of a sum of squared sensitivities (the root-sum-square model).
inline double predicted_ear(double sum_sq) { return std::max(0.0, 1.0 - std::sqrt(std::max(0.0, sum_sq))); }

namespace detail {

/// The candidates of a tensor that a convex allocation can pick: by rising cost, the lower convex hull of
/// (cost, s^2), each point strictly better than the one before. Every other candidate costs more for the same or
/// a smaller gain at every price of a bit.
inline std::vector<uint32_t> plan_hull(const PlanTensor& t) {
  std::vector<uint32_t> order(t.candidates.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  auto sq = [&](uint32_t i) { return t.candidates[i].sensitivity * t.candidates[i].sensitivity; };
  auto cost = [&](uint32_t i) { return t.candidates[i].bits_per_param; };
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return cost(a) != cost(b) ? cost(a) < cost(b) : sq(a) != sq(b) ? sq(a) < sq(b) : a < b;
  });
  std::vector<uint32_t> hull;
  for (uint32_t i : order) {
    if (!hull.empty() && sq(i) >= sq(hull.back())) continue;  // costs at least as much, no better
    // Drop points above the segment from their predecessor to i (not convex).
    while (hull.size() >= 2) {
      const uint32_t a = hull[hull.size() - 2], b = hull.back();
      const double lhs = (sq(b) - sq(a)) * (cost(i) - cost(a)), rhs = (sq(i) - sq(a)) * (cost(b) - cost(a));
      if (lhs >= rhs) hull.pop_back();
      else break;
    }
    hull.push_back(i);
  }
  return hull;
}

}  // namespace detail

/// Chooses one candidate per tensor (greedy over the convex hulls: the upgrade that removes most of sum s^2 per
/// added bit first). Goal budget: stop when no further upgrade fits `limit` average bits per parameter; `met` is
/// false when even the cheapest plan does not fit (that plan is returned). Goal target_ear: stop as soon as the
/// predicted EAR reaches `limit`; `met` is false when the best plan does not (that plan is returned).
/// Candidates must have finite costs >= 0 and sensitivities in [0, 1]; a tensor without candidates, or a value
/// outside these ranges, gives an empty `pick`.
inline BitPlan plan_bits(const std::vector<PlanTensor>& tensors, PlanGoal goal, double limit) {
  BitPlan plan;
  double params = 0;
  for (const PlanTensor& t : tensors) {
    if (t.candidates.empty()) return plan;
    for (const PlanCandidate& c : t.candidates)
      if (!(std::isfinite(c.bits_per_param) && c.bits_per_param >= 0 && c.sensitivity >= 0 && c.sensitivity <= 1))
        return plan;
    params += double(t.params);
  }
  std::vector<std::vector<uint32_t>> hulls;
  std::vector<uint32_t> at(tensors.size(), 0);  // position on each hull
  double bits = 0, sum_sq = 0;                  // total bits, sum s^2 of the current picks
  for (const PlanTensor& t : tensors) {
    hulls.push_back(detail::plan_hull(t));
    const PlanCandidate& c = t.candidates[hulls.back()[0]];
    bits += c.bits_per_param * double(t.params);
    sum_sq += c.sensitivity * c.sensitivity;
  }
  auto avg = [&](double b) { return params > 0 ? b / params : 0.0; };
  auto done = [&] { return goal == PlanGoal::target_ear && predicted_ear(sum_sq) >= limit; };
  const bool fits_at_start = goal != PlanGoal::budget || avg(bits) <= limit;

  // An upgrade: tensor k from hull point at[k] to at[k] + 1; gain = s^2 removed per added bit.
  struct Upgrade {
    double gain;
    uint32_t k;
    bool operator<(const Upgrade& o) const { return gain != o.gain ? gain < o.gain : k > o.k; }
  };
  auto upgrade_of = [&](uint32_t k, Upgrade& u) {
    const auto& h = hulls[k];
    if (at[k] + 1 >= h.size()) return false;
    const PlanCandidate &a = tensors[k].candidates[h[at[k]]], &b = tensors[k].candidates[h[at[k] + 1]];
    const double added = (b.bits_per_param - a.bits_per_param) * double(tensors[k].params);
    const double removed = a.sensitivity * a.sensitivity - b.sensitivity * b.sensitivity;
    u = {added > 0 ? removed / added : INFINITY, k};
    return true;
  };
  std::priority_queue<Upgrade> queue;
  for (uint32_t k = 0; k < tensors.size(); ++k) {
    Upgrade u;
    if (upgrade_of(k, u)) queue.push(u);
  }
  while (fits_at_start && !done() && !queue.empty()) {
    const uint32_t k = queue.top().k;
    queue.pop();
    const auto& h = hulls[k];
    const PlanCandidate &a = tensors[k].candidates[h[at[k]]], &b = tensors[k].candidates[h[at[k] + 1]];
    const double added = (b.bits_per_param - a.bits_per_param) * double(tensors[k].params);
    if (goal == PlanGoal::budget && avg(bits + added) > limit) continue;  // this tensor stays where it is
    bits += added;
    sum_sq += b.sensitivity * b.sensitivity - a.sensitivity * a.sensitivity;
    ++at[k];
    Upgrade u;
    if (upgrade_of(k, u)) queue.push(u);
  }
  // Sums taken again from the picks: no drift from the running differences.
  plan.pick.resize(tensors.size());
  bits = sum_sq = 0;
  for (uint32_t k = 0; k < tensors.size(); ++k) {
    plan.pick[k] = hulls[k][at[k]];
    const PlanCandidate& c = tensors[k].candidates[plan.pick[k]];
    bits += c.bits_per_param * double(tensors[k].params);
    sum_sq += c.sensitivity * c.sensitivity;
  }
  plan.bits_per_param = avg(bits);
  plan.sum_sq = sum_sq;
  plan.predicted_ear = predicted_ear(sum_sq);
  plan.met = goal == PlanGoal::budget ? fits_at_start : plan.predicted_ear >= limit;
  return plan;
}

}  // namespace quant
}  // namespace zipcomm
