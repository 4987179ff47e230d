// The ring's raw/compressed switch (comm/ring/switch.cuh): the pure decision RingCommunicator's automatic mode
// calls, from measured (size, raw ms, compressed ms) points, a user threshold or nothing; and the sizes
// calibrate() measures. No GPU involved.
#include "test_util.hpp"

#include <zipcomm/comm/ring/switch.cuh>

#include <algorithm>
#include <limits>
#include <vector>

using namespace zipcomm::comm;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;
constexpr double M = RING_SWITCH_DEFAULT_MARGIN;

bool measured(const std::vector<RingSwitchPoint>& p, uint64_t bytes, double margin = M) {
  return ring_switch_measured(p.data(), p.size(), bytes, margin);
}

/// The H200 one-GPU figures (8 simulated ranks): the raw ring wins everywhere.
const std::vector<RingSwitchPoint> kHbm = {{16 * KiB, 0.051, 0.278},
                                           {1 * MiB, 0.112, 2.361},
                                           {16 * MiB, 0.326, 2.707},
                                           {64 * MiB, 1.207, 6.123},
                                           {256 * MiB, 4.694, 24.453}};

/// A slow link: the compressed ring wins from 1 MiB up (a crossover between 256 KiB and 1 MiB).
const std::vector<RingSwitchPoint> kSlow = {{64 * KiB, 0.10, 0.20},
                                            {256 * KiB, 0.30, 0.35},
                                            {1 * MiB, 1.00, 0.80},
                                            {4 * MiB, 4.00, 2.90},
                                            {16 * MiB, 16.0, 11.0}};

}  // namespace

TEST_CASE("ring switch: one measurement's verdict, margin and ties", "[ring][switch]") {
  REQUIRE(ring_point_compresses({MiB, 1.0, 0.5}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, 0.5, 1.0}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, 1.0, 1.0}, M));    // a tie: raw
  REQUIRE_FALSE(ring_point_compresses({MiB, 1.0, 1.0}, 0.0));  // a tie without margin: still raw
  REQUIRE_FALSE(ring_point_compresses({MiB, 1.0, 0.98}, M));   // 2% faster: inside the 3% margin
  REQUIRE(ring_point_compresses({MiB, 1.0, 0.96}, M));         // 4% faster
  REQUIRE(ring_point_compresses({MiB, 1.0, 0.98}, 0.0));
  // a margin outside [0, 1) counts as 0
  REQUIRE(ring_point_compresses({MiB, 1.0, 0.98}, -1.0));
  REQUIRE(ring_point_compresses({MiB, 1.0, 0.98}, 1.5));
  // failed or meaningless measurements never say "compress"
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_FALSE(ring_point_compresses({MiB, inf, 0.5}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, nan, 0.5}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, 1.0, nan}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, 1.0, 0.0}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, 1.0, -0.5}, M));
  REQUIRE_FALSE(ring_point_compresses({MiB, 0.0, 0.0}, M));
}

TEST_CASE("ring switch: no measurements, sizes below and above the measured range", "[ring][switch]") {
  REQUIRE_FALSE(ring_switch_measured(nullptr, 0, MiB, M));
  REQUIRE_FALSE(measured({}, 0));
  // HBM: raw at, between, below and above every measured size
  const uint64_t sizes[] = {0, 1, 8 * KiB, 16 * KiB, 100 * KiB, 1 * MiB, 3 * MiB, 256 * MiB, uint64_t(1) << 40};
  for (uint64_t b : sizes) REQUIRE_FALSE(measured(kHbm, b));
  // slow link
  REQUIRE_FALSE(measured(kSlow, 1));          // below the range: raw, even far below
  REQUIRE_FALSE(measured(kSlow, 63 * KiB));
  REQUIRE_FALSE(measured(kSlow, 64 * KiB));   // measured: raw
  REQUIRE_FALSE(measured(kSlow, 256 * KiB));  // measured: 0.35 vs 0.30, raw
  REQUIRE_FALSE(measured(kSlow, 512 * KiB));  // between a loss and a win: raw
  REQUIRE(measured(kSlow, 1 * MiB));
  REQUIRE(measured(kSlow, 2 * MiB));          // between two wins
  REQUIRE(measured(kSlow, 16 * MiB));
  REQUIRE(measured(kSlow, 17 * MiB));         // above the range: the largest size's verdict
  REQUIRE(measured(kSlow, 1ull << 40));
  // a single point: its verdict at and above it, raw below
  const std::vector<RingSwitchPoint> one = {{4 * MiB, 2.0, 1.0}};
  REQUIRE(measured(one, 4 * MiB));
  REQUIRE(measured(one, 64 * MiB));
  REQUIRE_FALSE(measured(one, 4 * MiB - 1));
  // below the range even when the smallest size is a win: not measured, raw
  REQUIRE_FALSE(measured({{1 * MiB, 1.0, 0.5}}, MiB / 2));
}

TEST_CASE("ring switch: non-monotone measurements, order and duplicate sizes", "[ring][switch]") {
  // a win, a loss, a win: the loss is never bridged
  const std::vector<RingSwitchPoint> bumpy = {{1 * MiB, 1.0, 0.5}, {4 * MiB, 1.0, 1.5}, {16 * MiB, 1.0, 0.5}};
  REQUIRE(measured(bumpy, 1 * MiB));
  REQUIRE_FALSE(measured(bumpy, 2 * MiB));
  REQUIRE_FALSE(measured(bumpy, 4 * MiB));
  REQUIRE_FALSE(measured(bumpy, 8 * MiB));
  REQUIRE(measured(bumpy, 16 * MiB));
  REQUIRE(measured(bumpy, 64 * MiB));
  // a loss, a win, a loss: the win holds at its size only; above the range the last loss
  const std::vector<RingSwitchPoint> dip = {{1 * MiB, 1.0, 1.5}, {4 * MiB, 1.0, 0.5}, {16 * MiB, 1.0, 1.5}};
  REQUIRE_FALSE(measured(dip, 2 * MiB));
  REQUIRE(measured(dip, 4 * MiB));
  REQUIRE_FALSE(measured(dip, 5 * MiB));
  REQUIRE_FALSE(measured(dip, 64 * MiB));
  // any order gives the same answers
  auto shuffled = kSlow;
  std::reverse(shuffled.begin(), shuffled.end());
  std::swap(shuffled[1], shuffled[3]);
  for (uint64_t b = 1; b < (64 * MiB); b = b * 3 + 7) REQUIRE(measured(shuffled, b) == measured(kSlow, b));
  // several points of one size: compressed only if all agree
  const std::vector<RingSwitchPoint> dup = {{1 * MiB, 1.0, 0.5}, {1 * MiB, 1.0, 1.2}, {4 * MiB, 1.0, 0.5}};
  REQUIRE_FALSE(measured(dup, 1 * MiB));
  REQUIRE_FALSE(measured(dup, 2 * MiB));
  REQUIRE(measured(dup, 4 * MiB));
  const std::vector<RingSwitchPoint> agree = {{1 * MiB, 1.0, 0.5}, {1 * MiB, 2.0, 0.9}};
  REQUIRE(measured(agree, 1 * MiB));
  REQUIRE(measured(agree, 3 * MiB));
  // ties at a measured size: raw there, and between it and a win
  const std::vector<RingSwitchPoint> tie = {{1 * MiB, 1.0, 1.0}, {4 * MiB, 1.0, 0.5}};
  REQUIRE_FALSE(measured(tie, 1 * MiB));
  REQUIRE_FALSE(measured(tie, 2 * MiB));
  REQUIRE(measured(tie, 4 * MiB));
  // an invalid measurement is a loss at its size
  const std::vector<RingSwitchPoint> broken = {{1 * MiB, 1.0, 0.5}, {4 * MiB, 0.0, 0.0}, {16 * MiB, 1.0, 0.5}};
  REQUIRE_FALSE(measured(broken, 4 * MiB));
  REQUIRE_FALSE(measured(broken, 8 * MiB));
  REQUIRE(measured(broken, 16 * MiB));
}

TEST_CASE("ring switch: forced modes, measurements, user threshold, default", "[ring][switch]") {
  const RingSwitchPoint* pts = kSlow.data();
  const size_t cnt = kSlow.size();
  for (uint64_t b : {uint64_t(1), 64 * KiB, 4 * MiB}) {
    CAPTURE(b);
    RingSwitchDecision d = ring_switch_decide(RingMode::compressed, pts, cnt, M, RING_SWITCH_UNSET, b);
    REQUIRE((d.compressed && d.source == RingSwitchSource::forced));
    d = ring_switch_decide(RingMode::raw, pts, cnt, M, 0, b);
    REQUIRE((!d.compressed && d.source == RingSwitchSource::forced));
    d = ring_switch_decide(RingMode::compressed, nullptr, 0, M, RING_SWITCH_UNSET, b);
    REQUIRE((d.compressed && d.source == RingSwitchSource::forced));
    // nothing measured or set: raw, "default"
    d = ring_switch_decide(RingMode::automatic, nullptr, 0, M, RING_SWITCH_UNSET, b);
    REQUIRE((!d.compressed && d.source == RingSwitchSource::fallback));
    // measurements first, even with a threshold set
    d = ring_switch_decide(RingMode::automatic, pts, cnt, M, 1, b);
    REQUIRE(d.source == RingSwitchSource::calibrated);
    REQUIRE(d.compressed == measured(kSlow, b));
    d = ring_switch_decide(RingMode::automatic, kHbm.data(), kHbm.size(), M, 1, b);
    REQUIRE((!d.compressed && d.source == RingSwitchSource::calibrated));
  }
  // the user threshold: raw below, compressed from it up
  RingSwitchDecision d = ring_switch_decide(RingMode::automatic, nullptr, 0, M, 64 * KiB, 64 * KiB - 1);
  REQUIRE((!d.compressed && d.source == RingSwitchSource::threshold));
  d = ring_switch_decide(RingMode::automatic, nullptr, 0, M, 64 * KiB, 64 * KiB);
  REQUIRE((d.compressed && d.source == RingSwitchSource::threshold));
  d = ring_switch_decide(RingMode::automatic, nullptr, 0, M, 0, 0);  // threshold 0: always compressed
  REQUIRE((d.compressed && d.source == RingSwitchSource::threshold));
  // the margin reaches the measured decision
  const std::vector<RingSwitchPoint> close = {{MiB, 1.0, 0.98}};
  REQUIRE_FALSE(ring_switch_decide(RingMode::automatic, close.data(), 1, M, RING_SWITCH_UNSET, MiB).compressed);
  REQUIRE(ring_switch_decide(RingMode::automatic, close.data(), 1, 0.01, RING_SWITCH_UNSET, MiB).compressed);
  // an unknown mode value is not "automatic"
  d = ring_switch_decide(RingMode(7), pts, cnt, M, 0, 4 * MiB);
  REQUIRE((!d.compressed && d.source == RingSwitchSource::forced));
  REQUIRE(std::string(ring_switch_source_name(RingSwitchSource::fallback)) == "default");
  REQUIRE(std::string(ring_switch_source_name(RingSwitchSource::calibrated)) == "calibrated");
}

TEST_CASE("ring switch: the sizes calibrate() measures", "[ring][switch]") {
  uint64_t s[64];
  size_t k = ring_switch_sizes(64 * KiB, 256 * MiB, 4, 2, s, 64);
  REQUIRE(k == 7);
  for (size_t i = 0; i < k; ++i) REQUIRE(s[i] == (64 * KiB) << (2 * i));
  // max off the progression: measured too, last
  k = ring_switch_sizes(64 * KiB, 100 * MiB, 4, 2, s, 64);
  REQUIRE(k == 7);
  REQUIRE(s[5] == 64 * MiB);
  REQUIRE(s[6] == 100 * MiB);
  // min == max: one size
  k = ring_switch_sizes(MiB, MiB, 4, 4, s, 64);
  REQUIRE((k == 1 && s[0] == MiB));
  // whole elements; at least one element
  k = ring_switch_sizes(1, 10, 2, 4, s, 64);  // 1 -> 4 (one element), 8; max 10 -> 8 (already there)
  REQUIRE(k == 2);
  REQUIRE((s[0] == 4 && s[1] == 8));
  // strictly increasing in general, and within [min, max] rounded to elements
  for (uint64_t mn : {uint64_t(1000), 64 * KiB, 3 * MiB})
    for (uint64_t mx : {mn, 5 * mn + 3, 1000 * mn})
      for (uint32_t eb : {2u, 4u}) {
        CAPTURE(mn, mx, eb);
        k = ring_switch_sizes(mn, mx, 4, eb, s, 64);
        REQUIRE(k >= 1);
        for (size_t i = 0; i < k; ++i) {
          REQUIRE(s[i] % eb == 0);
          REQUIRE(s[i] <= mx);
          if (i > 0) REQUIRE(s[i] > s[i - 1]);
        }
        REQUIRE(s[k - 1] == mx / eb * eb);
      }
  // capacity bounds the list; no overflow near 2^64
  REQUIRE(ring_switch_sizes(1, 1ull << 40, 2, 1, s, 8) == 8);
  k = ring_switch_sizes(1ull << 62, ~uint64_t(0) - 1, 4, 2, s, 64);
  REQUIRE(k == 2);
  // bad arguments
  REQUIRE(ring_switch_sizes(2 * MiB, MiB, 4, 2, s, 64) == 0);
  REQUIRE(ring_switch_sizes(MiB, 2 * MiB, 1, 2, s, 64) == 0);
  REQUIRE(ring_switch_sizes(MiB, 2 * MiB, 4, 0, s, 64) == 0);
  REQUIRE(ring_switch_sizes(1, 1, 4, 2, s, 64) == 0);  // not even one element fits max
}
