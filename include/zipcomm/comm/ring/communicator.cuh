// Ring allreduce, host side, for the ranks one process drives: simulated ranks on one GPU (every rank on
// the same device, one cooperative kernel runs them all) and one rank per GPU through peer access
// (cudaDeviceEnablePeerAccess; one kernel per device). Mixed layouts work too: ranks on one device must be
// contiguous, and each device's ranks run in one launch. The NCCL device-API backend drives the same kernel
// with windows from ncclGetLsaPointer (examples/05_ring_allreduce/ring_nccl.cu).
//
// A call returns cudaError_t: CUDA failures, and cudaErrorInvalidValue for bad arguments (then wait() also
// returns Status::invalid_argument). What the ring found (timeout, a peer's size or dtype mismatch, a corrupt
// message) is the Status wait() returns; after an error wait() clears every window, so the next call starts
// clean.
//
// RingMode::automatic chooses between the two rings per call (ring/switch.cuh, docs/RING.md "Raw switch"):
// calibrate() measures both on this communicator and automatic then follows the measurements; without them
// it follows RingOptions::raw_below_bytes if the user set it, else it runs the raw ring, which is the right
// choice whenever the ranks share a GPU or reach each other over NVLink (a compressed hop's decode + reduce +
// encode, ~0.5 TB/s of bf16 on an H100, is slower than either link). RingCallInfo says which ring a call ran
// and why.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/reduce_op.hpp"
#include "../../detail/bounded_wait.cuh"
#include "allreduce.cuh"
#include "schedule.cuh"
#include "switch.cuh"

namespace zipcomm {
namespace comm {

struct RingOptions {
  int max_channels = 32;                                 // blocks per rank, at most (fewer for small messages)
  uint64_t slot_bytes = ring_default_slot_bytes();       // one pipeline chunk's message (multiple of 256)
  uint32_t rounds_per_pass = 2;                          // pipeline chunks per channel a launch holds (mailbox depth)
  // User threshold of RingMode::automatic, per-rank message bytes: raw below it, compressed from it up.
  // RING_SWITCH_UNSET (default): none. calibrate()'s measurements take precedence for their dtype (the last
  // one set wins: set_raw_below_bytes() drops the measurements).
  uint64_t raw_below_bytes = RING_SWITCH_UNSET;
  uint64_t timeout_ns = zipcomm::detail::DEFAULT_WAIT_TIMEOUT_NS;  // bound of every wait on a peer
};

/// What the last call did (for benchmarks and tests).
struct RingCallInfo {
  bool compressed = false;                            // which ring ran
  RingSwitchSource source = RingSwitchSource::forced; // why: forced mode, measurements, user threshold, default
  int channels = 0;
  uint64_t chunk_elems = 0;
  uint64_t rounds = 0;
  uint32_t passes = 0;
};

/// What calibrate() measures: per-rank message sizes min_bytes, min_bytes * step, ... up to max_bytes (and
/// max_bytes itself), both rings at each, `reps` timed calls after one warm-up, the median; op sum.
struct RingCalibration {
  uint64_t min_bytes = uint64_t(64) << 10;
  uint64_t max_bytes = uint64_t(256) << 20;   // calibrate_with_buffers caps it at its buffers' size
  uint32_t step = 4;
  int reps = 5;
  double margin = RING_SWITCH_DEFAULT_MARGIN;  // the compressed ring must win by this fraction of the raw time
};

/// The ranks one process drives, their windows and streams; one allreduce() per call, wait() for the outcome.
/// \code
/// zipcomm::comm::RingCommunicator ring;
/// ring.init({0, 1, 2, 3});                                  // one rank per GPU, peer access
/// ring.allreduce<zipcomm::DType::bf16>(bufs, n, zipcomm::ReduceOp::sum());  // bufs[r] on GPU r, in place
/// cudaError_t cuda_error = cudaSuccess;
/// zipcomm::Status s = ring.wait(&cuda_error);               // ok, or the first error any rank met
/// \endcode
class RingCommunicator {
 public:
  RingCommunicator() = default;
  RingCommunicator(const RingCommunicator&) = delete;
  RingCommunicator& operator=(const RingCommunicator&) = delete;
  ~RingCommunicator() { release(); }

  /// rank_device[r]: the CUDA device of rank r (1..RING_MAX_RANKS ranks). Allocates every window on its
  /// rank's device and enables peer access between the devices used.
  cudaError_t init(const std::vector<int>& rank_device, const RingOptions& options = RingOptions());

  int ranks() const { return int(rank_device_.size()); }
  const RingWindowLayout& layout() const { return layout_; }
  const RingOptions& options() const { return options_; }
  const RingCallInfo& last_call() const { return last_; }
  int device_groups() const { return int(groups_.size()); }
  cudaStream_t stream(int group) const { return groups_[group].stream; }
  uint8_t* window(int rank) const { return windows_[rank]; }

  /// Which ring a call of n elements of dtype d in `mode` runs, and why (ring_switch_decide).
  RingSwitchDecision decide(DType d, uint64_t n, RingMode mode) const {
    const int k = dtype_slot(d);
    return ring_switch_decide(mode, calibration_[k].data(), calibration_[k].size(), margin_[k],
                              options_.raw_below_bytes, n * format::elem_bytes(d));
  }
  bool compresses(DType d, uint64_t n, RingMode mode) const { return decide(d, n, mode).compressed; }

  /// Sets the user threshold of RingMode::automatic (RingOptions::raw_below_bytes; RING_SWITCH_UNSET: none)
  /// and drops every calibration, so that the threshold is what automatic follows.
  void set_raw_below_bytes(uint64_t bytes) {
    options_.raw_below_bytes = bytes;
    clear_calibration();
  }
  void clear_calibration() {
    for (int k = 0; k < 3; ++k) calibration_[k].clear(), margin_[k] = RING_SWITCH_DEFAULT_MARGIN;
  }
  /// Measurements RingMode::automatic follows for dtype d: calibrate()'s, or ones saved from an earlier run.
  /// An empty list drops them. init() drops them too (they belong to one set of ranks and devices).
  void set_calibration(DType d, std::vector<RingSwitchPoint> points, double margin = RING_SWITCH_DEFAULT_MARGIN) {
    calibration_[dtype_slot(d)] = std::move(points);
    margin_[dtype_slot(d)] = margin;
  }
  const std::vector<RingSwitchPoint>& calibration(DType d) const { return calibration_[dtype_slot(d)]; }

  /// \brief Measures the compressed and the raw ring on this communicator (its ranks, devices and links) and
  /// makes RingMode::automatic follow the measurements for dtype D (ring_switch_measured: compressed only
  /// where it won by RingCalibration::margin). Optional: without it automatic runs the raw ring.
  ///
  /// Data: `sample` (host, sample_bytes of D elements, e.g. a real gradient) tiled to max_bytes on every rank,
  /// rotated by a different amount per rank. Allocates 2 x max_bytes per rank for the duration; blocks the
  /// host until done (about 2 x (reps + 1) calls per size). The calls add to the byte counters and timers
  /// (reset_counters() after it). Every rank of the ring must take part: this process owns them all.
  /// Returns cudaSuccess with *status == ok once the measurements are recorded. A ring error (timeout...)
  /// records nothing and is reported in *status (cudaErrorLaunchFailure when status is null).
  template <DType D>
  cudaError_t calibrate(const void* sample, uint64_t sample_bytes, const RingCalibration& c = RingCalibration(),
                        Status* status = nullptr) {
    static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no ring allreduce");
    constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES;
    if (status) *status = Status::ok;
    const uint64_t m = sample_bytes / EB, n = c.max_bytes / EB;
    if (windows_.empty() || !sample || m == 0 || n == 0 || n > (uint64_t(1) << 50)) return cudaErrorInvalidValue;
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    std::vector<void*> src(ranks(), nullptr), pristine(ranks(), nullptr);
    for (int r = 0; r < ranks() && e == cudaSuccess; ++r) {
      e = cudaSetDevice(rank_device_[r]);
      if (e == cudaSuccess) e = cudaMalloc(&src[r], m * EB);
      if (e == cudaSuccess) e = cudaMalloc(&pristine[r], n * EB);
      if (e == cudaSuccess) e = cudaMemcpy(src[r], sample, m * EB, cudaMemcpyHostToDevice);
      // pristine[r][i] = sample[(i + shift) % m]: one period, then doubling copies of whole periods
      const uint64_t shift = uint64_t(r) * m / uint64_t(ranks());
      uint8_t* dst = static_cast<uint8_t*>(pristine[r]);
      const uint8_t* from = static_cast<const uint8_t*>(src[r]);
      const uint64_t first = std::min(n, m - shift);
      if (e == cudaSuccess) e = cudaMemcpy(dst, from + shift * EB, first * EB, cudaMemcpyDeviceToDevice);
      if (e == cudaSuccess && n > first)
        e = cudaMemcpy(dst + first * EB, from, std::min(n - first, shift) * EB, cudaMemcpyDeviceToDevice);
      for (uint64_t have = m; have < n && e == cudaSuccess;) {
        const uint64_t c2 = std::min(have, n - have);
        e = cudaMemcpy(dst + have * EB, dst, c2 * EB, cudaMemcpyDeviceToDevice);
        have += c2;
      }
      // device-to-device cudaMemcpy does not wait, and the ring's streams do not wait for the legacy stream
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    if (e == cudaSuccess) e = calibrate_with_buffers<D>(pristine.data(), n, c, status);
    for (int r = 0; r < ranks(); ++r) {
      cudaSetDevice(rank_device_[r]);
      if (src[r]) cudaFree(src[r]);
      if (pristine[r]) cudaFree(pristine[r]);
    }
    const cudaError_t restore = cudaSetDevice(prev);
    return e != cudaSuccess ? e : restore;
  }

  /// calibrate() on the caller's data: inputs[r], n elements of D on rank r's device (read, not modified;
  /// sizes above n * sizeof(D) are not measured), ready when it is called (synchronize first: it reads them on
  /// the ring's streams). Allocates max_bytes per rank for the duration.
  template <DType D>
  cudaError_t calibrate_with_buffers(const void* const* inputs, uint64_t n,
                                     const RingCalibration& c = RingCalibration(), Status* status = nullptr) {
    static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no ring allreduce");
    constexpr uint32_t EB = format::Traits<D>::ELEM_BYTES;
    if (status) *status = Status::ok;
    uint64_t sizes[64];
    const size_t count = n > (uint64_t(1) << 50) || c.reps < 1 || !(c.margin >= 0.0 && c.margin < 1.0)
                             ? 0
                             : ring_switch_sizes(c.min_bytes, std::min(c.max_bytes, n * EB), c.step, EB, sizes, 64);
    if (windows_.empty() || count == 0 || check_buffers(inputs) != cudaSuccess) return cudaErrorInvalidValue;
    const uint64_t bytes = sizes[count - 1];
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    std::vector<void*> work(ranks(), nullptr);
    for (int r = 0; r < ranks() && e == cudaSuccess; ++r) {
      e = cudaSetDevice(rank_device_[r]);
      if (e == cudaSuccess) e = cudaMalloc(&work[r], bytes);
    }
    const RingCallInfo last = last_;
    std::vector<RingSwitchPoint> points;
    Status st = Status::ok;
    for (size_t i = 0; i < count && e == cudaSuccess && st == Status::ok; ++i) {
      RingSwitchPoint p{sizes[i], 0.0, 0.0};
      e = time_calls<D>(work.data(), inputs, sizes[i] / EB, RingMode::raw, c.reps, p.raw_ms, st);
      if (e == cudaSuccess && st == Status::ok)
        e = time_calls<D>(work.data(), inputs, sizes[i] / EB, RingMode::compressed, c.reps, p.compressed_ms, st);
      points.push_back(p);
    }
    last_ = last;
    for (int r = 0; r < ranks(); ++r)
      if (work[r]) cudaSetDevice(rank_device_[r]), cudaFree(work[r]);
    const cudaError_t restore = cudaSetDevice(prev);
    if (e == cudaSuccess) e = restore;
    if (e == cudaSuccess && st == Status::ok) set_calibration(D, std::move(points), c.margin);
    if (status) *status = st;
    return e == cudaSuccess && st != Status::ok && !status ? cudaErrorLaunchFailure : e;
  }

  /// In-place allreduce of n elements of D: data[r] (on rank r's device, any alignment) holds rank r's input
  /// and receives the result. Enqueued on the communicator's streams (stream(g)): the inputs must be ready
  /// when it is called (synchronize, or order them with events). wait() gives the Status.
  template <DType D>
  cudaError_t allreduce(void* const* data, uint64_t n, const ReduceOp& op, RingMode mode = RingMode::automatic) {
    static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no ring allreduce");
    last_ = RingCallInfo();
    const cudaError_t bad = check_arguments(data, n, op, mode);
    if (bad != cudaSuccess) {
      pending_ = Status::invalid_argument;
      return bad;
    }
    if (n == 0) return cudaSuccess;
    cudaError_t e = cudaSuccess;
    if (seq_.epoch >= (uint32_t(1) << 30)) e = clear_windows();  // keep flag comparisons far from wrapping
    if (e != cudaSuccess) return e;
    const RingSwitchDecision choice = decide(D, n, mode);
    const bool compressed = choice.compressed;
    int channels = 0;
    e = compressed ? channels_for<D, true>(n, channels) : channels_for<D, false>(n, channels);
    if (e != cudaSuccess) return e;
    RingLaunch call{};
    call.peers.ranks = ranks();
    for (int r = 0; r < ranks(); ++r) {
      call.peers.window[r] = windows_[r];
      call.peers.data[r] = data[r];
    }
    call.part = make_ring_partition(n, ranks(), channels, ring_chunk_elems(D, layout_.slot_bytes));
    call.layout = layout_;
    call.op = op;
    call.timeout_ns = options_.timeout_ns;
    last_.compressed = compressed;
    last_.source = choice.source;
    last_.channels = channels;
    last_.chunk_elems = call.part.chunk_elems;
    last_.rounds = call.part.rounds;
    int prev = 0;
    e = cudaGetDevice(&prev);
    if (e != cudaSuccess) return e;
    e = ring_for_each_pass(seq_, call, [&](const RingLaunch& pass) {
      cudaError_t err = cudaSuccess;
      for (const Group& g : groups_) {
        RingLaunch a = pass;
        a.first_rank = g.first_rank;
        a.num_ranks = g.num_ranks;
        a.timers = g.timers;
        err = cudaSetDevice(g.device);
        if (err == cudaSuccess)
          err = compressed ? ring_launch_pass<D, true>(a, g.stream) : ring_launch_pass<D, false>(a, g.stream);
        if (err != cudaSuccess) break;
      }
      if (err == cudaSuccess) ++last_.passes;
      return err;
    });
    const cudaError_t restore = cudaSetDevice(prev);
    return e != cudaSuccess ? e : restore;
  }

  /// allreduce with the dtype chosen at run time (bf16, fp16, fp32; the fp8 dtypes give cudaErrorInvalidValue
  /// and Status::invalid_argument). A template only so that a translation unit that never calls it does not
  /// compile the kernels of all three dtypes.
  template <int UNUSED = 0>
  cudaError_t allreduce(DType dtype, void* const* data, uint64_t n, const ReduceOp& op,
                        RingMode mode = RingMode::automatic) {
    if (!comm_dtype_supported(dtype)) {  // the fp8 dtypes are codec only
      pending_ = Status::invalid_argument;
      return cudaErrorInvalidValue;
    }
    return visit_comm_dtype(dtype, cudaErrorInvalidValue,
                            [&](auto d) { return allreduce<decltype(d)::value>(data, n, op, mode); });
  }

  /// Waits for every enqueued call; the first error any rank met (ok if none). After an error the windows are
  /// cleared (flags, epochs, error words), so the ring can be used again. A CUDA failure while waiting gives
  /// Status::invalid_argument, and *cuda_error (optional) says which; the links' wait() has the same shape.
  Status wait(cudaError_t* cuda_error = nullptr);

  /// Per rank: bytes it sent since the last reset_counters(), and its timers (RING_TIMER_* slots, ns summed
  /// over its blocks). Call after wait().
  cudaError_t read_counters(std::vector<uint64_t>& bytes_sent,
                            std::vector<std::array<uint64_t, RING_TIMER_SLOTS>>* timers = nullptr) const;

  cudaError_t reset_counters();

  void release();

 private:
  struct Group {
    int device, first_rank, num_ranks;
    cudaStream_t stream = nullptr;
    unsigned long long* timers = nullptr;
    int resident[6] = {-1, -1, -1, -1, -1, -1};  // per (dtype, compressed): ring_resident_blocks, once
  };

  cudaError_t check_arguments(void* const* data, uint64_t n, const ReduceOp& op, RingMode mode) const;

  static int dtype_slot(DType d) { return comm_dtype_supported(d) ? int(d) - 1 : 0; }

  cudaError_t check_buffers(const void* const* data) const;

  /// Channels for this call: what the message needs, what the window holds, and what stays resident
  /// (ranks sharing a device share its blocks).
  template <DType D, bool COMPRESSED>
  cudaError_t channels_for(uint64_t n, int& channels) {
    const uint64_t wanted = format::div_up(format::div_up(n, uint64_t(ranks())), RING_MIN_CHANNEL_ELEMS);
    channels = wanted < uint64_t(layout_.channels) ? int(wanted) : layout_.channels;
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    const int slot = (int(D) - 1) * 2 + (COMPRESSED ? 1 : 0);
    for (Group& g : groups_) {
      if (e == cudaSuccess && g.resident[slot] < 0) {
        e = cudaSetDevice(g.device);
        if (e == cudaSuccess) e = ring_resident_blocks<D, COMPRESSED>(g.resident[slot]);
      }
      if (e == cudaSuccess && g.resident[slot] / g.num_ranks < channels) channels = g.resident[slot] / g.num_ranks;
    }
    const cudaError_t restore = cudaSetDevice(prev);
    if (e == cudaSuccess) e = restore;
    if (e == cudaSuccess && channels < 1) e = cudaErrorCooperativeLaunchTooLarge;
    return e;
  }

  /// calibrate(): median time of `reps` allreduce calls (sum) of n elements in `mode` on work[], each on a
  /// fresh copy of inputs[] (copied on the ring's streams before the timed part), after one warm-up call.
  /// One device group: CUDA events on its stream; several: host time from all streams idle to all done.
  /// st: what wait() found.
  template <DType D>
  cudaError_t time_calls(void* const* work, const void* const* inputs, uint64_t n, RingMode mode, int reps,
                         double& ms, Status& st) {
    const size_t bytes = size_t(n) * format::Traits<D>::ELEM_BYTES;
    const bool events = groups_.size() == 1;
    cudaEvent_t a = nullptr, b = nullptr;
    cudaError_t e = cudaSetDevice(groups_[0].device);
    if (e == cudaSuccess && events) e = cudaEventCreate(&a);
    if (e == cudaSuccess && events) e = cudaEventCreate(&b);
    std::vector<double> t;
    for (int rep = -1; rep < reps && e == cudaSuccess; ++rep) {  // rep -1: warm-up
      for (const Group& g : groups_)
        for (int r = g.first_rank; r < g.first_rank + g.num_ranks && e == cudaSuccess; ++r) {
          e = cudaSetDevice(g.device);
          if (e == cudaSuccess) e = cudaMemcpyAsync(work[r], inputs[r], bytes, cudaMemcpyDeviceToDevice, g.stream);
        }
      if (e == cudaSuccess && events) e = cudaSetDevice(groups_[0].device);
      if (e == cudaSuccess) e = events ? cudaEventRecord(a, groups_[0].stream) : sync_all();
      const auto t1 = std::chrono::steady_clock::now();
      if (e == cudaSuccess) e = allreduce<D>(work, n, ReduceOp::sum(), mode);
      if (e == cudaSuccess && events) e = cudaSetDevice(groups_[0].device);
      if (e == cudaSuccess) e = events ? cudaEventRecord(b, groups_[0].stream) : sync_all();
      if (e == cudaSuccess && events) e = cudaEventSynchronize(b);
      float event_ms = 0.0f;
      if (e == cudaSuccess && events) e = cudaEventElapsedTime(&event_ms, a, b);
      const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
      if (e == cudaSuccess && rep >= 0) t.push_back(events ? double(event_ms) : host_ms);
    }
    if (e == cudaSuccess) st = wait(&e);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    ms = t.empty() ? 0.0 : t[t.size() / 2];
    return e;
  }

  cudaError_t sync_all();

  /// Zeroes every window's control area (error word, counters, ready flags) and restarts the
  /// epochs. Only safe with no pass in flight: this process owns every rank.
  cudaError_t clear_windows();

  RingOptions options_;
  std::vector<int> rank_device_;
  std::vector<Group> groups_;
  std::vector<uint8_t*> windows_;
  RingWindowLayout layout_{};
  RingSequence seq_;
  RingCallInfo last_;
  std::vector<RingSwitchPoint> calibration_[3];  // per dtype (bf16, fp16, fp32)
  double margin_[3] = {RING_SWITCH_DEFAULT_MARGIN, RING_SWITCH_DEFAULT_MARGIN, RING_SWITCH_DEFAULT_MARGIN};
  Status pending_ = Status::ok;
};

}  // namespace comm
}  // namespace zipcomm

#include "detail/communicator.cuh"
