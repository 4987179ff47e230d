// P2P pipeline: what the sender and receiver kernels are given, by value (FrameRingView, SendArgs, RecvArgs), and
// the per-side control words they report into.
#pragma once

#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// Device handle of one ring of frame slots and its sequence flags. `slots` and the flags may live in pinned
/// host memory (a host relay's flags), in the receiver's GPU memory (peer link) or in local GPU memory; the
/// kernels only need them addressable and use system-scope atomics on the flags. The receiver decodes from
/// `slots` in place, so its slots are GPU memory.
struct FrameRingView {
  uint8_t* slots = nullptr;  // num_slots * slot_bytes, 128-byte aligned
  uint64_t slot_bytes = 0;
  uint32_t num_slots = 0;
  uint64_t* ready_planes = nullptr;  // [num_slots] producer -> consumer: planes section of frame q is there
  uint64_t* ready_exps = nullptr;    // [num_slots] producer -> consumer: the whole frame q is there
  uint64_t* credits = nullptr;       // [num_slots] consumer -> producer: slot free again after frame q
  uint32_t* exps_bytes = nullptr;    // [num_slots] optional: section B length, for a host-side relay

  ZIPCOMM_HOST_DEVICE uint8_t* slot_at(uint32_t s) const { return slots + s * slot_bytes; }
};

/// Tuning: 8 warps per block, one item per warp at a time. With <= 69 KB of shared memory per block, two
/// blocks (a sender's and a receiver's) fit on every SM together.
struct P2PPolicy {
  static constexpr int WARPS = 8;
  static constexpr int THREADS = WARPS * 32;
};

/// Per-transfer control words of one side (device memory). The host zeroes `status` and `abort` before a
/// transfer; counters are tagged, so nothing else needs resetting between launches.
struct SideControl {
  uint32_t status;       // first error of the transfer (Status), 0 = ok
  uint32_t abort;        // nonzero: stop waiting (timeout, or peers out of step)
  uint64_t error_frame;  // frame index (in its message) of the first error
};
static_assert(sizeof(SideControl) % 8 == 0, "side state is cleared and copied in 64-bit words");


namespace p2p_detail {

/// Flags that copy-engine streams wait on (cuStreamWaitValue64, GEQ); an aborting side sets them far ahead so
/// those streams drain instead of hanging. The link is then broken until reset().
struct PoisonList {
  uint64_t* flags = nullptr;
  uint32_t count = 0;
};
constexpr uint64_t POISON_FLAG = uint64_t(1) << 62;

}  // namespace p2p_detail

/// Words per frame in a side's optional trace (SendArgs::trace, RecvArgs::trace).
constexpr uint32_t TRACE_STAMPS = 4;
constexpr uint32_t ITEM_TRACE_STAMPS = 4;

/// Arguments of the sender kernel (by value).
struct SendArgs {
  FramePlan plan;
  const void* in = nullptr;                    // the message: plan.n elements, any alignment
  uint64_t seq_base = 0;                       // ring sequence number of the message's frame 0
  uint64_t frame_begin = 0, frame_end = 0;     // frames this launch sends
  FrameRingView ring;                          // where frames are written
  bool wait_credits = true;                    // false: the caller guarantees the slots are free (stream order)
  uint32_t launch_tag = 1;                     // nonzero, different from the previous launch (per-launch tags)
  unsigned long long* item_counter = nullptr;  // zero at launch; distinct per concurrently running launch
  unsigned long long* counters = nullptr;      // [2 * num_slots] planes split / items done per slot (zero when idle)
  uint64_t* lookback = nullptr;                // [num_slots * MAX_FRAME_ITEMS]
  uint64_t* credit_seen = nullptr;             // [num_slots] credits as last seen by a frame's first warp
  uint8_t* scratch = nullptr;                  // per warp: the encoder's planes output (already sent by the split)
  uint64_t scratch_bytes = 0;
  SideControl* control = nullptr;
  uint64_t timeout_ns = 0;
  uint64_t* trace = nullptr;  // optional, for tuning: [TRACE_STAMPS * frames of the launch] %globaltimer when the
                              // frame's first item was taken, its planes published, the whole frame published,
                              // and its first warp found the slot free
  p2p_detail::PoisonList poison;  // optional: flags set far ahead when this side aborts
  // Optional (stream mode): section B beyond exps_budget_bytes(frame, exps_budget) is also written to the
  // same offsets of slot s at overflow_slots + s * slot_bytes (the part fixed-size copies do not move).
  uint8_t* overflow_slots = nullptr;
  ExpsBudget exps_budget;
  uint32_t* exps_need = nullptr;  // optional [EXPS_BUDGET_CLASSES]: atomicMax of exps_need_per_kelem per class
  // Optional: warps holding items of later frames split them only once the launch's first frame's planes are
  // published (its ready_planes flag; best where that flag is in GPU memory). Every warp starts at once, so
  // otherwise the first frame's split shares the memory system with the next frames' and the first copy of
  // the transfer starts later.
  bool first_frame_planes_first = false;
};

/// Arguments of the receiver kernel (by value).
struct RecvArgs {
  FramePlan plan;
  void* out = nullptr;  // plan.n elements, any alignment
  uint64_t seq_base = 0;
  uint64_t frame_begin = 0, frame_end = 0;
  FrameRingView ring;      // where frames arrive (slots in GPU memory: decoded in place)
  bool wait_flags = true;  // false: every frame of the launch is known to be in the ring
  bool give_credits = true;
  uint32_t launch_tag = 1;
  unsigned long long* item_counter = nullptr;
  unsigned long long* frames_done = nullptr;  // tagged, per launch
  unsigned long long* counters = nullptr;     // [num_slots] items done per slot (zero when idle)
  uint64_t* mirror = nullptr;                 // [2 * num_slots] frame flags as seen by the frame's leader (device)
  uint32_t* frame_status = nullptr;           // [2 * num_slots] the leader's verdict on the header, and
                                              // the header's section B length
  uint64_t* done_word = nullptr;              // optional: set to done_value once every frame of the launch is decoded
  uint64_t done_value = 0;
  SideControl* control = nullptr;
  uint64_t timeout_ns = 0;
  uint64_t* trace = nullptr;  // optional, for tuning: [TRACE_STAMPS * frames of the launch] %globaltimer when
                              // the frame's leader started waiting, found the frame checked, its last item was
                              // decoded, and the leader saw the planes' flag
  uint64_t* item_trace = nullptr;  // optional, for tuning: [ITEM_TRACE_STAMPS * items of the plan] %globaltimer
                                   // when a warp took the item, saw its frame ready, had decoded it, had counted it
  p2p_detail::PoisonList poison;  // optional: flags set far ahead when this side aborts
  // Optional (stream mode): section B beyond exps_budget_bytes(frame, exps_budget) is read from the same
  // offsets of slot s at overflow_slots + s * slot_bytes; each warp copies its chunk's share in first.
  const uint8_t* overflow_slots = nullptr;
  ExpsBudget exps_budget;
};

}  // namespace comm
}  // namespace zipcomm
