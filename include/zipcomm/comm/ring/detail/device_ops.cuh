// Ring allreduce, device side: waiting on a peer's flag, raising one, the raw hop and the status broadcast.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cuda/atomic>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "../../../block/block_fused.cuh"
#include "../../../block/block_stream_codec.cuh"
#include "../../../config.hpp"
#include "../../../format.hpp"
#include "../../../thread/pair_code.hpp"
#include "../../../thread/reduce_op.hpp"
#include "../../../warp/lane_io.cuh"
#include "../../../detail/bounded_wait.cuh"
#include "../schedule.cuh"
#include "../launch_args.cuh"

namespace zipcomm {
namespace comm {

namespace detail {

using SysFlag = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;

/// Waits (thread 0 spins, the group sleeps at the barrier) until *flag reaches `target` (wrap-safe), an error
/// appears in the own window's error word, or timeout_ns pass. The same Status in every thread. The acquire
/// load orders the slot reads that follow it; the barrier passes that on to the group.
template <class Group>
ZIPCOMM_DEVICE Status ring_wait(Group& g, uint32_t* flag, uint32_t target, uint32_t* error_word,
                                uint64_t timeout_ns, uint32_t& shared, uint64_t& wait_ns) {
  zipcomm::detail::WaitBound bound;
  bound.timeout_ns = timeout_ns;
  bound.abort = error_word;
  bound.on_abort = zipcomm::detail::AbortReport::word;
  SysFlag f(*flag);
  auto reached = [&] {
    return zipcomm::detail::WaitStep{int32_t(f.load(cuda::memory_order_acquire) - target) >= 0, Status::ok};
  };
  // 64 polls without sleeping (the next message is usually microseconds away), then 64 ns; 512 ns past 4096 polls
  const zipcomm::detail::SpinThenSleep sleep{64, 64, 4096, 512};
  return zipcomm::detail::bounded_wait(g, reached, bound, sleep, &shared, &wait_ns);
}

/// Raises *flag to `value` once every thread of the group has written what the flag announces.
template <class Group>
ZIPCOMM_DEVICE void ring_publish(Group& g, uint32_t* flag, uint32_t value) {
  g.sync();
  if (g.thread_rank() == 0) {
    __threadfence_system();  // the group's writes (ordered before this thread by the barrier) reach the peer first
    SysFlag(*flag).store(value, cuda::memory_order_release);
  }
}

/// The uncompressed hop on `count` elements, 8 per thread per step:
///   in && local:  out = op(in, pre(local))     in only: out = in     local only: out = pre(local)
/// out0 may be local (in place: each thread reads its elements before writing them); out1 (a slot) optional.
/// in and out1 are slot payloads (16-byte aligned); local and out0 may have any alignment.
template <DType D, class Group>
ZIPCOMM_DEVICE void ring_raw_pass(Group& g, const uint8_t* in, const uint8_t* local, uint64_t count,
                                  const ReduceOp& op, uint8_t* out0, uint8_t* out1) {
  const bool local_vec = warp::aligned16(local), out0_vec = warp::aligned16(out0);
  for (uint64_t first = uint64_t(g.thread_rank()) * warp::ITEMS; first < count;
       first += uint64_t(g.size()) * warp::ITEMS) {
    const uint32_t cnt = count - first < uint64_t(warp::ITEMS) ? uint32_t(count - first) : uint32_t(warp::ITEMS);
    uint32_t x[warp::ITEMS];
    if (in) {
      warp::load_items<D, true>(in, first, cnt, x);
      if (local) {
        uint32_t y[warp::ITEMS];
        warp::load_items_any<D>(local, local_vec, first, cnt, y);
        thread::reduce_items<D>(op, x, y);
      }
    } else {
      warp::load_items_any<D>(local, local_vec, first, cnt, x);
      thread::pre_items<D>(op, x);
    }
    if (out0) warp::store_items_any<D>(out0, out0_vec, first, cnt, x);
    if (out1) warp::store_items<D, true>(out1, first, cnt, x);
  }
}

/// Checks a raw message's header.
template <DType D>
ZIPCOMM_DEVICE Status ring_raw_check(const uint8_t* slot, uint64_t count) {
  const RingRawHeader h = *reinterpret_cast<const RingRawHeader*>(slot);
  if (h.magic != RING_RAW_MAGIC || h.dtype != uint8_t(D)) return Status::bad_header;
  return h.count == count ? Status::ok : Status::size_mismatch;
}

/// Thread 0's status, in every thread (a group must take one branch even if a broken peer rewrites a header
/// while it is read).
template <class Group>
ZIPCOMM_DEVICE Status ring_broadcast(Group& g, Status s, uint32_t& shared) {
  g.sync();
  if (g.thread_rank() == 0) shared = uint32_t(s);
  g.sync();
  return static_cast<Status>(shared);
}

}  // namespace detail

}  // namespace comm
}  // namespace zipcomm
