// P2P pipeline: the bodies of P2PSender and P2PReceiver (declared in p2p/endpoints.cuh).
#pragma once

#include <algorithm>

#include "../endpoints.cuh"

namespace zipcomm {
namespace comm {

namespace p2p_detail {
/// The kernel arguments both ends share, from a launch's settings.
template <class Args, class Launch>
void fill_shared_args(Args& a, const FramePlan& plan, const FrameRingView& ring, const Launch& p, uint32_t tag,
                      SideControl* control) {
  a.plan = plan;
  a.seq_base = p.seq_base;
  a.frame_begin = p.frames.begin;
  a.frame_end = p.frames.end;
  a.ring = ring;
  a.launch_tag = tag;
  a.control = control;
  a.timeout_ns = p.timeout_ns;
  a.trace = p.extras.trace;
  a.poison = p.extras.poison;
  a.overflow_slots = p.extras.overflow_slots;
  a.exps_budget = p.extras.exps_budget;
}
/// Blocks of a launch over frames [f0, f1): one warp per item, at most `cap` blocks.
inline int launch_grid(const FramePlan& plan, uint64_t f0, uint64_t f1, int cap) {
  const uint64_t items =
      (f1 < plan.num_frames ? plan.frame(f1).first_item : plan.num_items) - plan.frame(f0).first_item;
  return int(std::min<uint64_t>(uint64_t(cap), format::div_up(items, P2PPolicy::WARPS)));
}
}  // namespace p2p_detail

template <DType D, class Code>
cudaError_t P2PSender<D, Code>::init(int device, uint32_t slots, const PipelineShape& shape, int blocks) {
  if (!shape_valid(shape) || slots == 0) return cudaErrorInvalidValue;
  device_ = device;
  slots_ = slots;
  p2p_detail::DeviceGuard g(device);
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  blocks_ = blocks > 0 ? blocks : sms;
  scratch_bytes_ = format::align_up(item_plane_bytes(D, largest_item_elems(shape)), 16);
  e = cudaFuncSetAttribute(kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes()));
  // All of L1/shared as shared memory: a sender's and a receiver's block must fit on one SM together (they
  // wait on each other), which the carveout picked for one kernel alone need not leave room for.
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel_, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e == cudaSuccess) e = side_words_.load();
  if (e != cudaSuccess) return e;
  e = state_.device(device, state_bytes());
  if (e != cudaSuccess) return e;
  return scratch_.device(device, size_t(blocks_) * P2PPolicy::WARPS * scratch_bytes_);
}

template <DType D, class Code>
cudaError_t P2PSender<D, Code>::launch(const FramePlan& plan, const void* in, const FrameRingView& ring,
                                       const SendLaunch& p, cudaStream_t stream) {
  const uint64_t f0 = p.frames.begin, f1 = p.frames.end;
  if (ring.num_slots != slots_) return cudaErrorInvalidValue;
  p2p_detail::DeviceGuard g(device_);
  // One clear of what a launch must find zero (item counter, per-slot counters, control words, the per-class
  // need): the sender is idle between launches, and each stream operation before the kernel delays the
  // transfer's first frame by a few microseconds (it was 4 + 2 per frame). By a kernel, not a memset (see
  // p2p_side_words_kernel).
  cudaError_t e = side_words_(state_.get(), nullptr, cleared_bytes(), stream);
  if (e != cudaSuccess || f0 >= f1) return e;
  SendArgs a;
  p2p_detail::fill_shared_args(a, plan, ring, p, next_tag(), control());
  a.in = in;
  a.wait_credits = p.wait_credits;
  a.item_counter = state_.get<unsigned long long>(0);
  a.counters = state_.get<unsigned long long>(16 * 8);
  a.lookback = state_.get<uint64_t>(cleared_bytes());
  a.credit_seen = state_.get<uint64_t>(cleared_bytes() + size_t(slots_) * MAX_FRAME_ITEMS * 8);
  a.scratch = scratch_.get();
  a.scratch_bytes = scratch_bytes_;
  a.exps_need = state_.get<uint32_t>(need_offset());
  a.first_frame_planes_first = p.extras.first_frame_planes_first;
  const int grid = p2p_detail::launch_grid(plan, f0, f1, blocks_);
  kernel_<<<grid, P2PPolicy::THREADS, smem_bytes(), stream>>>(a);
  return cudaGetLastError();
}

template <DType D, class Code>
cudaError_t P2PReceiver<D, Code>::init(int device, uint32_t slots, int blocks, uint32_t lanes) {
  if (slots == 0 || lanes == 0) return cudaErrorInvalidValue;
  device_ = device;
  slots_ = slots;
  lanes_ = lanes;
  p2p_detail::DeviceGuard g(device);
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  blocks_ = blocks > 0 ? blocks : sms;
  e = cudaFuncSetAttribute(kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes()));
  // All of L1/shared as shared memory: a sender's and a receiver's block must fit on one SM together (they
  // wait on each other), which the carveout picked for one kernel alone need not leave room for.
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel_, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e == cudaSuccess) e = side_words_.load();
  if (e != cudaSuccess) return e;
  return state_.device(device, state_words() * 8 + sizeof(SideControl));
}

template <DType D, class Code>
cudaError_t P2PReceiver<D, Code>::launch(const FramePlan& plan, void* out, const FrameRingView& ring,
                                         const RecvLaunch& p, cudaStream_t stream) {
  const uint64_t f0 = p.frames.begin, f1 = p.frames.end;
  if (ring.num_slots != slots_ || p.lane >= lanes_) return cudaErrorInvalidValue;
  p2p_detail::DeviceGuard g(device_);
  if (lanes_ == 1 && f0 < f1) {  // one launch at a time: one clear of the whole state (and the control words,
                                 // which follow it), not 3 + 2 per frame (each delays the kernel); by a kernel
                                 // (p2p_side_words_kernel)
    cudaError_t e =
        side_words_(state_.get(), nullptr, state_words() * 8 + (p.reset_control ? sizeof(SideControl) : 0), stream);
    if (e != cudaSuccess) return e;
    return launch_kernel(plan, out, ring, p, stream);
  }
  cudaError_t e = p.reset_control ? cudaMemsetAsync(control(), 0, sizeof(SideControl), stream) : cudaSuccess;
  if (e != cudaSuccess || f0 >= f1) return e;
  e = cudaMemsetAsync(state_.get(16 * 8 * size_t(p.lane)), 0, 8, stream);  // the lane's item counter
  if (e == cudaSuccess)
    e = p2p_detail::zero_slot_counters(state_.get<unsigned long long>(16 * 8 * size_t(lanes_)), 1, slots_,
                                       p.seq_base + f0, f1 - f0, stream);
  if (e == cudaSuccess)  // the leaders' mirrored flags too: a stale "q + 1" would let warps skip the wait
    e = p2p_detail::zero_slot_counters(state_.get<unsigned long long>((16 * size_t(lanes_) + slots_) * 8), 2, slots_,
                                       p.seq_base + f0, f1 - f0, stream);
  if (e != cudaSuccess) return e;
  return launch_kernel(plan, out, ring, p, stream);
}

template <DType D, class Code>
cudaError_t P2PReceiver<D, Code>::launch_kernel(const FramePlan& plan, void* out, const FrameRingView& ring,
                                                const RecvLaunch& p, cudaStream_t stream) {
  const uint64_t f0 = p.frames.begin, f1 = p.frames.end;
  RecvArgs a;
  p2p_detail::fill_shared_args(a, plan, ring, p, next_tag(), control());
  a.out = out;
  a.wait_flags = p.wait_flags;
  a.give_credits = p.give_credits;
  a.item_counter = state_.get<unsigned long long>(16 * 8 * size_t(p.lane));
  a.frames_done = state_.get<unsigned long long>(16 * 8 * size_t(p.lane) + 8);
  a.counters = state_.get<unsigned long long>(16 * 8 * size_t(lanes_));
  a.mirror = state_.get<uint64_t>((16 * size_t(lanes_) + slots_) * 8);
  a.frame_status = state_.get<uint32_t>((16 * size_t(lanes_) + 3 * size_t(slots_)) * 8);
  a.done_word = p.done_word;
  a.done_value = p.done_value;
  a.item_trace = p.extras.item_trace;
  const int grid = p2p_detail::launch_grid(plan, f0, f1, p.max_blocks > 0 ? std::min(p.max_blocks, blocks_) : blocks_);
  kernel_<<<grid, P2PPolicy::THREADS, smem_bytes(), stream>>>(a);
  return cudaGetLastError();
}

}  // namespace comm
}  // namespace zipcomm
