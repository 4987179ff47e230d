// One decoupled look-back for the whole library: the device-wide encoder places its chunks with it, the P2P
// sender the chunks of a frame's items. Each caller keeps its own entry layout and reads it through a functor.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "bounded_wait.cuh"

namespace zipcomm {
namespace detail {

#ifdef __CUDACC__

/// What an item of a decoupled look-back has published: nothing yet, its own size, or its inclusive prefix.
enum class LookBackFlag : uint32_t { none = 0, aggregate = 1, inclusive = 2 };

/// An item's published state, as `read` returns it.
struct LookBackEntry {
  LookBackFlag flag;
  uint64_t value;
};

/// The exclusive prefix before item `index`, in every lane of the calling warp: the warp reads its predecessors
/// 32 at a time, nearest first, each lane waiting (poll_bounded with `bound` and `sleep`) until `read(i)` shows
/// that item i published, and stops at the nearest inclusive prefix. Items must be taken in order, so that every
/// item waited for is held by a running warp. A wait that fails ends the look-back with its Status (the same in
/// every lane) and the prefix of the windows read before.
/// \code
/// uint64_t exclusive = 0;
/// using namespace zipcomm::detail;
/// auto read = [&](uint64_t i) {  // flag in the top 2 bits, the value below
///   const uint64_t v = cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(state[i]).load(
///       cuda::memory_order_relaxed);
///   return LookBackEntry{LookBackFlag(v >> 62), v & ((1ull << 62) - 1)};
/// };
/// const zipcomm::Status s = warp_look_back(c, read, bound, FixedSleep{256}, exclusive);
/// \endcode
template <class Read, class Sleep>
ZIPCOMM_DEVICE Status warp_look_back(uint64_t index, Read&& read, const WaitBound& bound, Sleep sleep,
                                     uint64_t& exclusive) {
  const uint32_t lane = warp::lane_id();
  exclusive = 0;
  for (int64_t window_end = int64_t(index); window_end > 0; window_end -= 32) {
    const int64_t idx = window_end - 1 - int64_t(lane);
    LookBackEntry e{LookBackFlag::inclusive, 0};  // before item 0: an inclusive prefix of 0
    uint32_t failed = 0;
    if (idx >= 0) {
      auto published = [&] {
        e = read(uint64_t(idx));
        return WaitStep{e.flag != LookBackFlag::none, Status::ok};
      };
      failed = uint32_t(poll_bounded(published, bound, sleep));
    }
    failed = __reduce_max_sync(warp::FULL_MASK, failed);
    if (failed) return Status(failed);
    const uint32_t inclusive = __ballot_sync(warp::FULL_MASK, e.flag == LookBackFlag::inclusive);
    if (inclusive) {
      const uint32_t k = __ffs(inclusive) - 1;  // the nearest predecessor that knows its full prefix
      exclusive += warp_sum(lane <= k ? e.value : 0);
      return Status::ok;
    }
    exclusive += warp_sum(e.value);
  }
  return Status::ok;
}

#endif  // __CUDACC__

}  // namespace detail
}  // namespace zipcomm
