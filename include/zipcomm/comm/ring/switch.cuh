// Ring allreduce: the choice between the compressed and the uncompressed ring (RingMode::automatic). Plain
// C++17, host only, so that the host tests check the very function RingCommunicator calls.
//
// Compression pays only where the link is much slower than the codec: the ring then moves ~0.67 of the raw
// bytes (bf16 gradients) but every hop also decodes, reduces and encodes, at ~0.5 TB/s of bf16 per GPU (an
// H100): that never pays against NVLink or a GPU's own HBM, and the measured one-GPU ring (8 simulated ranks)
// is faster raw at every size. So without a measurement the switch runs the raw ring; a measurement
// (RingCommunicator::calibrate), a user threshold (RingOptions::raw_below_bytes) or RingMode::compressed
// enables compression. docs/RING.md, "Raw switch".
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace zipcomm {
namespace comm {

enum class RingMode : uint8_t {
  automatic = 0,   // measured (calibrate), else the user threshold, else raw: ring_switch_decide
  compressed = 1,  // always the compressed ring
  raw = 2,         // always the uncompressed ring
};

/// Why a call ran the ring it ran (RingCallInfo::source).
enum class RingSwitchSource : uint8_t {
  forced = 0,      // RingMode::raw or RingMode::compressed
  calibrated = 1,  // RingMode::automatic, from calibrate()'s measurements for the call's dtype
  threshold = 2,   // RingMode::automatic, from the user's RingOptions::raw_below_bytes
  fallback = 3,    // RingMode::automatic, nothing measured or set: the raw ring
};

inline const char* ring_switch_source_name(RingSwitchSource s) {
  switch (s) {
    case RingSwitchSource::forced: return "forced";
    case RingSwitchSource::calibrated: return "calibrated";
    case RingSwitchSource::threshold: return "threshold";
    case RingSwitchSource::fallback: return "default";
  }
  return "?";
}

/// RingOptions::raw_below_bytes when the user set no threshold.
constexpr uint64_t RING_SWITCH_UNSET = ~uint64_t(0);
/// The compressed ring must be at least this much faster (fraction of the raw ring's time) to be chosen.
constexpr double RING_SWITCH_DEFAULT_MARGIN = 0.03;

/// One measurement: median times of both rings for `bytes` per rank (same communicator, data, op).
struct RingSwitchPoint {
  uint64_t bytes;
  double raw_ms, compressed_ms;
};

/// Whether one measurement says the compressed ring wins: both times finite and positive, and the compressed
/// time below raw_ms * (1 - margin). Equal times (and anything within the margin) say raw.
inline bool ring_point_compresses(const RingSwitchPoint& p, double margin) {
  const double m = margin > 0.0 && margin < 1.0 ? margin : 0.0;
  if (!(std::isfinite(p.raw_ms) && std::isfinite(p.compressed_ms)) || p.raw_ms <= 0.0 || p.compressed_ms <= 0.0)
    return false;  // a failed or meaningless measurement is no evidence for compression
  return p.compressed_ms < p.raw_ms * (1.0 - m);
}

/// The measured choice for a message of `bytes` per rank, from points in any order:
///   at a measured size      that size's verdict
///   between two sizes       compressed only if both neighbouring sizes say so (non-monotone measurements
///                           never extend a win past a measured loss)
///   above the largest size  the largest size's verdict (bandwidth-bound: the time ratio settles)
///   below the smallest size raw (not measured; small messages are latency-bound, where coding costs most)
///   no points               raw
/// Several points of one size: compressed only if every one of them says so.
inline bool ring_switch_measured(const RingSwitchPoint* points, size_t count, uint64_t bytes, double margin) {
  bool have_lo = false, have_hi = false;
  uint64_t lo = 0, hi = 0;  // largest measured size <= bytes, smallest >= bytes
  for (size_t i = 0; i < count; ++i) {
    const uint64_t s = points[i].bytes;
    if (s <= bytes && (!have_lo || s > lo)) lo = s, have_lo = true;
    if (s >= bytes && (!have_hi || s < hi)) hi = s, have_hi = true;
  }
  if (!have_lo) return false;
  auto verdict = [&](uint64_t size) {
    for (size_t i = 0; i < count; ++i)
      if (points[i].bytes == size && !ring_point_compresses(points[i], margin)) return false;
    return true;
  };
  return verdict(lo) && (!have_hi || hi == lo || verdict(hi));
}

struct RingSwitchDecision {
  bool compressed;
  RingSwitchSource source;
};

/// The whole switch: a forced mode; else the measurements (count > 0); else the user threshold (compressed
/// from raw_below_bytes per-rank bytes up; RING_SWITCH_UNSET: none); else raw.
inline RingSwitchDecision ring_switch_decide(RingMode mode, const RingSwitchPoint* points, size_t count,
                                             double margin, uint64_t raw_below_bytes, uint64_t bytes) {
  if (mode == RingMode::compressed) return {true, RingSwitchSource::forced};
  if (mode != RingMode::automatic) return {false, RingSwitchSource::forced};
  if (count > 0) return {ring_switch_measured(points, count, bytes, margin), RingSwitchSource::calibrated};
  if (raw_below_bytes != RING_SWITCH_UNSET) return {bytes >= raw_below_bytes, RingSwitchSource::threshold};
  return {false, RingSwitchSource::fallback};
}

/// The per-rank message sizes calibrate() measures: min_bytes, min_bytes * step, ... up to max_bytes, plus
/// max_bytes itself when the progression misses it; each rounded down to whole elements of elem_bytes (and
/// at least one element). Writes at most `capacity` sizes; returns how many it wrote (0 for bad arguments:
/// min_bytes > max_bytes, step < 2, elem_bytes == 0).
inline size_t ring_switch_sizes(uint64_t min_bytes, uint64_t max_bytes, uint64_t step, uint32_t elem_bytes,
                                uint64_t* out, size_t capacity) {
  if (elem_bytes == 0 || step < 2 || max_bytes < elem_bytes || min_bytes > max_bytes) return 0;
  auto whole = [&](uint64_t b) { return b < elem_bytes ? uint64_t(elem_bytes) : b / elem_bytes * elem_bytes; };
  size_t k = 0;
  for (uint64_t s = min_bytes > elem_bytes ? min_bytes : elem_bytes; k < capacity;) {
    out[k++] = whole(s);
    if (s > max_bytes / step) break;  // s * step would pass max_bytes (or overflow)
    s *= step;
  }
  if (k > 0 && k < capacity && out[k - 1] != whole(max_bytes)) out[k++] = whole(max_bytes);
  return k;
}

}  // namespace comm
}  // namespace zipcomm
