// P2P pipeline, host side: the sender and receiver ends on one GPU (device state and kernel launches).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../config.hpp"
#include "../../detail/bounded_wait.cuh"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "detail/host_resources.cuh"
#include "kernels.cuh"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// Optional settings of one P2P kernel launch.
struct P2PLaunchExtras {
  p2p_detail::PoisonList poison;  // flags set far ahead when this side aborts (so copy-engine waiters drain)
  uint64_t* trace = nullptr;      // per-frame %globaltimer stamps (SendArgs::trace, RecvArgs::trace)
  uint64_t* item_trace = nullptr;  // receiver: per-item %globaltimer stamps (RecvArgs::item_trace)
  uint8_t* overflow_slots = nullptr;  // stream mode: where section B past the budget goes (SendArgs, RecvArgs)
  ExpsBudget exps_budget;
  bool first_frame_planes_first = false;  // SendArgs::first_frame_planes_first
};

/// Frames [begin, end) of a plan: the part of a message one launch handles.
struct FrameRange {
  uint64_t begin = 0, end = 0;
};

/// How one P2PSender::launch runs. Frame f of the plan has ring sequence number seq_base + f.
/// \code
/// zipcomm::comm::SendLaunch p;
/// p.frames = {0, plan.num_frames};   // the whole message
/// p.timeout_ns = 1000000000ull;
/// sender.launch(plan, d_src, ring.view(), p, stream);
/// \endcode
struct SendLaunch {
  FrameRange frames;                    // the frames to send; empty: only the control words are cleared
  uint64_t seq_base = 0;                // ring sequence number of the plan's frame 0
  bool wait_credits = true;             // false: the caller guarantees the slots are free (stream order)
  uint64_t timeout_ns = zipcomm::detail::DEFAULT_WAIT_TIMEOUT_NS;  // bound of every wait on the peer
  P2PLaunchExtras extras;               // traces, poison flags, stream mode's section-B budget
};

/// How one P2PReceiver::launch runs. Frame f of the plan has ring sequence number seq_base + f.
/// \code
/// zipcomm::comm::RecvLaunch p;
/// p.frames = {0, plan.num_frames};
/// p.wait_flags = false;      // the frames are in the ring already (stream order)
/// p.give_credits = false;    // nobody waits for the slots
/// receiver.launch(plan, d_dst, ring.view(), p, stream);
/// \endcode
struct RecvLaunch {
  FrameRange frames;                    // the frames to decode; empty: only the control words are cleared
  uint64_t seq_base = 0;                // ring sequence number of the plan's frame 0
  bool wait_flags = true;               // false: every frame of the launch is in the ring already (stream order)
  bool give_credits = true;             // false: the slots are not handed back to the sender
  uint64_t timeout_ns = zipcomm::detail::DEFAULT_WAIT_TIMEOUT_NS;  // bound of every wait on the peer
  uint32_t lane = 0;                    // item counter of this launch: launches running at once use different lanes
  bool reset_control = true;            // clear status and abort first (once per transfer)
  int max_blocks = 0;                   // grid cap; 0: the receiver's blocks
  uint64_t* done_word = nullptr;        // optional: set to done_value once every frame of the launch is decoded
  uint64_t done_value = 0;
  P2PLaunchExtras extras;               // traces, poison flags, stream mode's section-B budget
};

/// Sender end on one GPU: device state for p2p_send_kernel and its launch.
template <DType D, class Code = thread::PairCode>
class P2PSender {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  static constexpr size_t smem_bytes() {
    return sizeof(P2PSendStorage<D, Code>);
  }

  /// blocks: persistent grid size (0: one per SM).
  cudaError_t init(int device, uint32_t slots, const PipelineShape& shape, int blocks = 0);

  /// Enqueues the sending of frames p.frames of `plan` (message at `in`) into `ring`. Resets the control words
  /// first (status, abort).
  cudaError_t launch(const FramePlan& plan, const void* in, const FrameRingView& ring, const SendLaunch& p,
                     cudaStream_t stream);
  SideControl* control() const { return state_.get<SideControl>(control_offset()); }
  /// Enqueues the copy of the control words (status, abort) to `to` (device memory or mapped pinned memory).
  cudaError_t copy_control(void* to, cudaStream_t stream) const {
    return side_words_(to, control(), sizeof(SideControl), stream);
  }
  /// [EXPS_BUDGET_CLASSES] device words: per budget class, the most coded section-B bytes per 1024 elements a
  /// frame of the last launch needed (classes as the launch's extras.exps_budget tells them apart).
  const uint32_t* exps_need() const { return state_.get<uint32_t>(need_offset()); }
  /// Clears the device state (after an aborted transfer). The sender must be idle.
  cudaError_t reset() {
    p2p_detail::DeviceGuard g(device_);
    cudaError_t e = cudaMemset(state_.get(), 0, state_bytes());
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
  }
  int device() const { return device_; }

 private:
  uint32_t next_tag() {
    if (++tag_ == 0) ++tag_;
    return tag_;
  }
  // Device state, in bytes: [item counter: 16 words][2 counters per slot][SideControl][need per class] (all
  // cleared by each launch) [look-back: slots x MAX_FRAME_ITEMS words][credit_seen: 1 word per slot].
  size_t control_offset() const { return (16 + 2 * size_t(slots_)) * 8; }
  size_t need_offset() const { return control_offset() + format::align_up(sizeof(SideControl), 8); }
  size_t cleared_bytes() const { return format::align_up(need_offset() + EXPS_BUDGET_CLASSES * sizeof(uint32_t), 8); }
  size_t state_bytes() const { return cleared_bytes() + (size_t(slots_) * MAX_FRAME_ITEMS + slots_) * 8; }
  p2p_detail::Memory state_, scratch_;
  int device_ = 0, blocks_ = 0;
  uint32_t slots_ = 0, tag_ = 0;
  uint64_t scratch_bytes_ = 0;
  // The kernels through the stubs init() configured and loaded (see p2p_detail::SideWordsKernel).
  void (*kernel_)(SendArgs) = p2p_send_kernel<D, Code>;
  p2p_detail::SideWordsKernel side_words_;
};

/// Receiver end on one GPU: device state for p2p_recv_kernel and its launches. `lanes` independent item
/// counters let that many launches run at once (one per stream).
template <DType D, class Code = thread::PairCode>
class P2PReceiver {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  static constexpr size_t smem_bytes() {
    return sizeof(P2PRecvStorage<D, Code>);
  }

  /// lanes: launches that may run at once (one per stream).
  cudaError_t init(int device, uint32_t slots, int blocks = 0, uint32_t lanes = 1);

  /// Enqueues the receiving of frames p.frames of `plan` into `out`, decoded where they are in `ring` (GPU
  /// memory: this GPU's or a peer's).
  cudaError_t launch(const FramePlan& plan, void* out, const FrameRingView& ring, const RecvLaunch& p,
                     cudaStream_t stream);
  SideControl* control() const { return state_.get<SideControl>(state_words() * 8); }
  /// Enqueues the copy of the control words (status, abort) to `to` (device memory or mapped pinned memory).
  cudaError_t copy_control(void* to, cudaStream_t stream) const {
    return side_words_(to, control(), sizeof(SideControl), stream);
  }
  cudaError_t reset() {
    p2p_detail::DeviceGuard g(device_);
    cudaError_t e = cudaMemset(state_.get(), 0, state_words() * 8 + sizeof(SideControl));
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
  }
  int device() const { return device_; }
  int blocks() const { return blocks_; }

 private:
  cudaError_t launch_kernel(const FramePlan& plan, void* out, const FrameRingView& ring, const RecvLaunch& p,
                            cudaStream_t stream);
  // per lane: 16 words (item counter, frames done); per slot: counter, 2 mirror words, frame_status (2 x u32)
  size_t state_words() const { return 16 * size_t(lanes_) + 4 * size_t(slots_) + 2; }
  uint32_t next_tag() {
    if (++tag_ == 0) ++tag_;
    return tag_;
  }
  p2p_detail::Memory state_;
  int device_ = 0, blocks_ = 0;
  uint32_t slots_ = 0, lanes_ = 1, tag_ = 0;
  // The kernels through the stubs init() configured and loaded (see p2p_detail::SideWordsKernel).
  void (*kernel_)(RecvArgs) = p2p_recv_kernel<D, Code>;
  p2p_detail::SideWordsKernel side_words_;
};

}  // namespace comm
}  // namespace zipcomm

#include "detail/endpoints.cuh"
