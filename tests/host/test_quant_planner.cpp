// Bit-width planner of the quantization tier (quant/bit_planner.hpp): budgets and EAR targets met or reported
// unmet, plans against an exhaustive search on small random models, and refused input.
#include "test_util.hpp"

#include <zipcomm/quant/bit_planner.hpp>

#include <cmath>
#include <random>

using namespace zipcomm;
using quant::BitPlan;
using quant::PlanCandidate;
using quant::PlanGoal;
using quant::PlanTensor;
using quant::QuantMode;

namespace {

// A tensor whose sensitivity falls by a random factor per added bit (like measured ones: roughly halved per
// bit), with candidates in a random order and some of them dominated.
PlanTensor random_tensor(std::mt19937_64& rng) {
  PlanTensor t;
  t.params = std::uniform_int_distribution<uint64_t>(1, 5000)(rng);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double s = 0.05 + 0.5 * u(rng);
  for (uint32_t b = 2; b <= 8; ++b) {
    for (QuantMode m : {QuantMode::asymmetric, QuantMode::symmetric}) {
      PlanCandidate c;
      c.choice = {m, b, 64};
      c.bits_per_param = quant::bits_per_element(m, b, 64);
      c.sensitivity = std::min(1.0, s * (0.8 + 0.4 * u(rng)));
      t.candidates.push_back(c);
    }
    s *= 0.35 + 0.3 * u(rng);
  }
  std::shuffle(t.candidates.begin(), t.candidates.end(), rng);
  t.candidates.resize(std::uniform_int_distribution<size_t>(1, t.candidates.size())(rng));
  return t;
}

struct Totals {
  double bits = 0, sum_sq = 0;
};
Totals totals_of(const std::vector<PlanTensor>& ts, const std::vector<uint32_t>& pick) {
  Totals r;
  double params = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    const PlanCandidate& c = ts[k].candidates[pick[k]];
    r.bits += c.bits_per_param * double(ts[k].params);
    r.sum_sq += c.sensitivity * c.sensitivity;
    params += double(ts[k].params);
  }
  r.bits /= params;
  return r;
}

// Calls f(pick) for every plan of the model.
template <class F>
void every_plan(const std::vector<PlanTensor>& ts, F&& f) {
  std::vector<uint32_t> pick(ts.size(), 0);
  for (;;) {
    f(pick);
    size_t k = 0;
    while (k < ts.size() && ++pick[k] == ts[k].candidates.size()) pick[k++] = 0;
    if (k == ts.size()) return;
  }
}

}  // namespace

TEST_CASE("planner: message bits per parameter count every byte", "[quant][planner]") {
  for (QuantMode m : {QuantMode::asymmetric, QuantMode::symmetric})
    for (uint32_t b = 2; b <= 8; ++b)
      for (uint32_t g : {32u, 64u, 128u})
        for (uint64_t n : {uint64_t(1), uint64_t(1000), uint64_t(1) << 20}) {
          const double got = quant::message_bits_per_param(m, b, g, n);
          CHECK(got == 8.0 * double(quant::layout_for(m, b, g, n).total_bytes) / double(n));
          CHECK(got >= quant::bits_per_element(m, b, g));
        }
  CHECK(quant::message_bits_per_param(QuantMode::asymmetric, 4, 64, 0) == 0.0);
  // A million elements: the header and padding are below 0.001 bits per parameter.
  CHECK(quant::message_bits_per_param(QuantMode::asymmetric, 4, 64, 1 << 20) ==
        Approx(5.0).margin(1e-3));
}

TEST_CASE("planner: a target EAR is met with no plan cheaper and better (exhaustive)", "[quant][planner]") {
  ZT_RNG("planner-target");
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<PlanTensor> ts(std::uniform_int_distribution<int>(1, 4)(rng));
    for (auto& t : ts) t = random_tensor(rng);
    const double target = std::uniform_real_distribution<double>(0.3, 0.999)(rng);
    CAPTURE(trial, target);
    const BitPlan plan = quant::plan_bits(ts, PlanGoal::target_ear, target);
    REQUIRE(plan.pick.size() == ts.size());
    const Totals got = totals_of(ts, plan.pick);
    CHECK(plan.bits_per_param == Approx(got.bits).epsilon(1e-12));
    CHECK(plan.sum_sq == Approx(got.sum_sq).epsilon(1e-12));
    CHECK(plan.predicted_ear == Approx(quant::predicted_ear(got.sum_sq)).epsilon(1e-12));
    double best_possible = 0;  // the best EAR any plan reaches
    bool cheaper_and_better = false;
    every_plan(ts, [&](const std::vector<uint32_t>& pick) {
      const Totals t = totals_of(ts, pick);
      best_possible = std::max(best_possible, quant::predicted_ear(t.sum_sq));
      // Each step of the greedy minimises sum s^2 + lambda * bits for some lambda (it walks the convex hulls
      // in order of slope), so by Everett's theorem no plan of no more bits has a smaller sum s^2.
      if (t.bits <= got.bits * (1 + 1e-12) && t.sum_sq < got.sum_sq * (1 - 1e-9)) cheaper_and_better = true;
    });
    CHECK_FALSE(cheaper_and_better);
    CHECK(plan.met == (plan.predicted_ear >= target));
    if (!plan.met) CHECK(plan.predicted_ear == Approx(best_possible).epsilon(1e-12));
  }
}

TEST_CASE("planner: a budget is never exceeded, and is spent where it helps", "[quant][planner]") {
  ZT_RNG("planner-budget");
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<PlanTensor> ts(std::uniform_int_distribution<int>(1, 4)(rng));
    for (auto& t : ts) t = random_tensor(rng);
    const double budget = std::uniform_real_distribution<double>(2.0, 9.5)(rng);
    CAPTURE(trial, budget);
    const BitPlan plan = quant::plan_bits(ts, PlanGoal::budget, budget);
    REQUIRE(plan.pick.size() == ts.size());
    double cheapest = 0, params = 0;
    for (const auto& t : ts) {
      double c = INFINITY;
      for (const auto& cand : t.candidates) c = std::min(c, cand.bits_per_param);
      cheapest += c * double(t.params);
      params += double(t.params);
    }
    cheapest /= params;
    CHECK(plan.met == (cheapest <= budget));
    if (plan.met) CHECK(plan.bits_per_param <= budget);
    // Within the budget the plan is at least as good as every target-mode plan that fits: the budget walk
    // passes through each of them (bits only grow along it) before it stops.
    if (plan.met) {
      for (double target : {0.5, 0.8, 0.9, 0.95}) {
        const BitPlan t = quant::plan_bits(ts, PlanGoal::target_ear, target);
        if (t.bits_per_param <= budget) CHECK(plan.sum_sq <= t.sum_sq * (1 + 1e-9));
      }
    }
  }
}

TEST_CASE("planner: dominated candidates are never picked; ties and limits", "[quant][planner]") {
  PlanTensor t;
  t.params = 100;
  auto add = [&](uint32_t b, double bits, double s) {
    PlanCandidate c;
    c.choice = {QuantMode::asymmetric, b, 64};
    c.bits_per_param = bits;
    c.sensitivity = s;
    t.candidates.push_back(c);
  };
  add(2, 3.0, 0.5);   // 0
  add(3, 4.0, 0.5);   // 1: dearer, no better
  add(4, 5.0, 0.1);   // 2
  add(5, 6.0, 0.09);  // 3: above the hull of 2 and 4 (s^2 0.0081 vs the chord's 0.005)
  add(6, 7.0, 0.0);   // 4
  add(7, 5.0, 0.2);   // 5: same cost as 2, worse
  const std::vector<PlanTensor> ts{t};
  // Target reachable only at 7 bits: points 1, 3 and 5 are skipped on the way.
  BitPlan p = quant::plan_bits(ts, PlanGoal::target_ear, 0.95);
  REQUIRE(p.pick.size() == 1);
  CHECK(p.pick[0] == 4);
  CHECK(p.met);
  CHECK(p.predicted_ear == 1.0);
  p = quant::plan_bits(ts, PlanGoal::target_ear, 0.85);
  CHECK(p.pick[0] == 2);
  p = quant::plan_bits(ts, PlanGoal::budget, 6.5);
  CHECK(p.pick[0] == 2);
  CHECK(p.met);
  p = quant::plan_bits(ts, PlanGoal::budget, 7.0);
  CHECK(p.pick[0] == 4);
  p = quant::plan_bits(ts, PlanGoal::budget, 2.5);  // nothing fits: the cheapest plan, reported unmet
  CHECK(p.pick[0] == 0);
  CHECK_FALSE(p.met);
  p = quant::plan_bits(ts, PlanGoal::target_ear, 1.5);  // unreachable
  CHECK(p.pick[0] == 4);
  CHECK_FALSE(p.met);
  // No tensors: an empty plan that meets any goal.
  p = quant::plan_bits({}, PlanGoal::budget, 4.0);
  CHECK(p.pick.empty());
  CHECK(p.met);
  CHECK(p.predicted_ear == 1.0);
}

TEST_CASE("planner: invalid candidates give an empty plan", "[quant][planner]") {
  PlanTensor t;
  t.params = 10;
  t.candidates.push_back({{QuantMode::asymmetric, 4, 64}, 5.0, 0.1});
  auto refused = [](std::vector<PlanTensor> ts) {
    const BitPlan p = quant::plan_bits(ts, PlanGoal::budget, 8.0);
    return p.pick.empty() && !p.met;
  };
  CHECK_FALSE(refused({t}));
  PlanTensor empty = t;
  empty.candidates.clear();
  CHECK(refused({t, empty}));
  for (double bad_s : {-0.1, 1.5, double(NAN)}) {
    PlanTensor b = t;
    b.candidates[0].sensitivity = bad_s;
    CHECK(refused({b}));
  }
  for (double bad_bits : {-1.0, double(INFINITY), double(NAN)}) {
    PlanTensor b = t;
    b.candidates[0].bits_per_param = bad_bits;
    CHECK(refused({b}));
  }
}
