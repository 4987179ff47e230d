// One bounded wait for the whole library: the P2P kernels, the ring allreduce, the stream holder and the look-back
// (look_back.cuh) all poll a word another agent writes (a peer GPU, the host, another warp) through poll_bounded /
// bounded_wait, with one time unit (ns, read from %globaltimer) and one default bound. A wait ends when its check
// says so, when an optional abort word becomes nonzero, or when the bound passes (Status::timeout).
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../warp/lane_io.cuh"

#ifdef __CUDACC__
#include <cuda/atomic>
#endif

namespace zipcomm {
namespace detail {

/// Bound of every wait on a peer unless the caller sets one (P2POptions, RingOptions, the launch structs).
constexpr uint64_t DEFAULT_WAIT_TIMEOUT_NS = 5000000000ull;  // 5 s: far above any healthy transfer's wait

#ifdef __CUDACC__

/// Nanoseconds of the GPU's global timer (the one clock every SM shares).
ZIPCOMM_DEVICE uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// The sum of v over the 32 lanes, in every lane.
ZIPCOMM_DEVICE uint64_t warp_sum(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(warp::FULL_MASK, v, o);
  return v;
}

#endif  // __CUDACC__

/// What a nonzero abort word means for the wait's Status.
enum class AbortReport : uint8_t {
  timeout,  // Status::timeout (the P2P sides' abort flag: a peer gave up)
  word,     // the word is the Status to report (the ring's error word)
};

/// How long a wait may last and what else ends it.
struct WaitBound {
  uint64_t timeout_ns = DEFAULT_WAIT_TIMEOUT_NS;
  const uint32_t* abort = nullptr;  // optional: nonzero ends the wait
  AbortReport on_abort = AbortReport::timeout;
};

/// One look of a wait's check: keep waiting, or done with `status` (ok: what was waited for is there).
struct WaitStep {
  bool done;
  Status status;
};

/// Sleeps between polls, doubling from ns to max_ns (a flag that may take long: a frame on a slow link).
struct DoublingSleep {
  uint32_t ns, max_ns;
#ifdef __CUDACC__
  ZIPCOMM_DEVICE void operator()(uint32_t) {
    __nanosleep(ns);
    ns = ns < max_ns ? ns * 2 : ns;
  }
#endif
};

/// Polls free_spins times without sleeping, then sleeps short_ns until poll long_after, then long_ns (a flag
/// that usually comes within microseconds: the ring's next message).
struct SpinThenSleep {
  uint32_t free_spins, short_ns, long_after, long_ns;
#ifdef __CUDACC__
  ZIPCOMM_DEVICE void operator()(uint32_t spin) const {
    if (spin >= free_spins) __nanosleep(spin < long_after ? short_ns : long_ns);
  }
#endif
};

/// The same sleep after every poll.
struct FixedSleep {
  uint32_t ns;
#ifdef __CUDACC__
  ZIPCOMM_DEVICE void operator()(uint32_t) const { __nanosleep(ns); }
#endif
};

#ifdef __CUDACC__

/// One thread polls `check()` (a WaitStep) until it is done, the abort word is nonzero or the bound passes;
/// `sleep(poll index)` runs between polls. waited_ns (optional) gets the time spent added.
template <class Check, class Sleep>
ZIPCOMM_DEVICE Status poll_bounded(Check&& check, const WaitBound& bound, Sleep sleep,
                                   uint64_t* waited_ns = nullptr) {
  const uint64_t start = global_timer_ns();
  Status s = Status::ok;
  for (uint32_t spin = 0;; ++spin) {
    const WaitStep step = check();
    if (step.done) {
      s = step.status;
      break;
    }
    if (bound.abort) {
      const uint32_t a = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*const_cast<uint32_t*>(bound.abort))
                             .load(cuda::memory_order_relaxed);
      if (a != 0) {
        s = bound.on_abort == AbortReport::word ? Status(a) : Status::timeout;
        break;
      }
    }
    if (global_timer_ns() - start > bound.timeout_ns) {
      s = Status::timeout;
      break;
    }
    sleep(spin);
  }
  if (waited_ns) *waited_ns += global_timer_ns() - start;
  return s;
}

/// The calling warp as a wait group: lane 0 polls, the outcome reaches the other lanes by shuffle.
struct WarpGroup {
  ZIPCOMM_DEVICE uint32_t thread_rank() const { return warp::lane_id(); }
  ZIPCOMM_DEVICE void sync() const { __syncwarp(); }
};

/// Thread 0's value in every thread of g: a warp by shuffle; any other group (a thread block, NCCL's
/// ncclCoopCta) through `shared`, which every thread must be done reading (begin_broadcast) before thread 0
/// writes it.
ZIPCOMM_DEVICE void begin_broadcast(WarpGroup&) {}
ZIPCOMM_DEVICE uint32_t end_broadcast(WarpGroup&, uint32_t v, uint32_t*) {
  v = __shfl_sync(warp::FULL_MASK, v, 0);
  __syncwarp();  // orders the other lanes' later reads after lane 0's acquire
  return v;
}
template <class Group>
ZIPCOMM_DEVICE void begin_broadcast(Group& g) {
  g.sync();
}
template <class Group>
ZIPCOMM_DEVICE uint32_t end_broadcast(Group& g, uint32_t v, uint32_t* shared) {
  if (g.thread_rank() == 0) *shared = v;
  g.sync();
  return *shared;
}

/// The group waits: thread 0 polls (poll_bounded) while the others wait at the broadcast; the same Status in
/// every thread. `shared` (a word of shared memory) is needed by groups other than WarpGroup. An acquire load
/// in `check` orders the reads that follow the wait; the broadcast passes that on to the group.
/// \code
/// const Status s = zipcomm::detail::bounded_wait(cta, [&] {
///   return zipcomm::detail::WaitStep{flag_ref.load(cuda::memory_order_acquire) >= target, zipcomm::Status::ok};
/// }, bound, zipcomm::detail::FixedSleep{64}, &shared_word);
/// \endcode
template <class Group, class Check, class Sleep>
ZIPCOMM_DEVICE Status bounded_wait(Group& g, Check&& check, const WaitBound& bound, Sleep sleep,
                                   uint32_t* shared = nullptr, uint64_t* waited_ns = nullptr) {
  begin_broadcast(g);
  uint32_t s = 0;
  if (g.thread_rank() == 0) s = uint32_t(poll_bounded(check, bound, sleep, waited_ns));
  return Status(end_broadcast(g, s, shared));
}

#endif  // __CUDACC__

}  // namespace detail
}  // namespace zipcomm
