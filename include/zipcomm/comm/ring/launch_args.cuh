// Ring allreduce: what one pass (one kernel launch) is given, by value, and its host-side check.
#pragma once

#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/reduce_op.hpp"
#include "schedule.cuh"

namespace zipcomm {
namespace comm {

constexpr int RING_WARPS = 8;
constexpr int RING_THREADS = RING_WARPS * 32;
/// Blocks per SM the kernel is compiled for. 1: the compressed kernel keeps its ~230 registers per thread
/// (no spills; one 8-warp block per SM). 2 caps it at 128 registers, with ~600 bytes of spills (nvcc 13.0,
/// sm_90). Not measured yet: define ZIPCOMM_RING_MIN_BLOCKS_PER_SM to try.
#ifndef ZIPCOMM_RING_MIN_BLOCKS_PER_SM
#define ZIPCOMM_RING_MIN_BLOCKS_PER_SM 1
#endif

/// Timer slots per rank (nanoseconds, summed over the rank's blocks): waiting on flags, one per action kind,
/// then the whole block.
constexpr int RING_TIMER_WAIT = 0;
constexpr int RING_TIMER_TOTAL = 1 + RING_ACTION_KINDS;
constexpr int RING_TIMER_SLOTS = RING_TIMER_TOTAL + 1;
ZIPCOMM_HOST_DEVICE int ring_timer_of(RingActionKind k) { return 1 + int(k); }

/// Every rank's window, and the data buffer of each rank this process runs (others may be null).
struct RingPeers {
  int ranks;
  uint8_t* window[RING_MAX_RANKS];
  void* data[RING_MAX_RANKS];  // n elements, in place: the rank's input, then the result
};

/// Arguments of one pass (one kernel launch).
struct RingLaunch {
  RingPeers peers;
  RingPartition part;
  RingWindowLayout layout;
  ReduceOp op;
  uint32_t epoch;              // this pass's flag value (passes count up from 1 after a reset)
  uint64_t first_round;        // pipeline rounds [first_round, first_round + rounds) of every channel
  uint64_t rounds;
  int first_rank, num_ranks;   // ranks whose blocks this launch runs
  uint64_t timeout_ns;         // bound of every wait on a peer
  unsigned long long* timers;  // optional: [num_ranks][RING_TIMER_SLOTS] nanoseconds, added to
};

/// Host-side check of a launch's arguments for elements of dtype d (what the kernel relies on).
inline bool ring_launch_valid(const RingLaunch& a, DType d) {
  const RingPartition& p = a.part;
  if (!ring_partition_valid(p) || !ring_window_layout_valid(a.layout) || !reduce_op_valid(a.op)) return false;
  if (!comm_dtype_supported(d) || ring_slot_need(d, p.chunk_elems) > a.layout.slot_bytes) return false;
  if (a.peers.ranks != p.ranks || p.channels > a.layout.channels || a.timeout_ns == 0) return false;
  if (a.first_rank < 0 || a.num_ranks < 1 || a.first_rank + a.num_ranks > p.ranks) return false;
  if (p.ranks > 1 && (a.rounds > ring_rounds_per_pass(a.layout, p.ranks) || a.epoch == 0)) return false;
  if (a.first_round + a.rounds > p.rounds || a.rounds == 0) return false;
  for (int r = 0; r < p.ranks; ++r)
    if (!a.peers.window[r] || reinterpret_cast<uintptr_t>(a.peers.window[r]) % RING_SLOT_ALIGN) return false;
  for (int r = a.first_rank; r < a.first_rank + a.num_ranks; ++r)
    if (!a.peers.data[r]) return false;
  return true;
}

}  // namespace comm
}  // namespace zipcomm
