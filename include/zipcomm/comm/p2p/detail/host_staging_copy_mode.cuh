// HostStagingLink, copy mode (the fallback where 64-bit stream memory operations are missing): a host relay
// thread moves frames between the pinned ring and the receiver's device buffers with copy engines.
#pragma once

#include "../host_staging_link.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::relay(const FramePlan& plan, void* dst, uint64_t seq_base) {
  const FrameRingView ring = ring_.view();
  const uint32_t S = ring.num_slots;
  const uint64_t SB = ring.slot_bytes;
  uint8_t* host = ring_.host_alias(ring.slots);
  const uint64_t* ready_planes = ring_.host_alias(ring.ready_planes);
  const uint64_t* ready_exps = ring_.host_alias(ring.ready_exps);
  const uint32_t* exps_words = ring_.host_alias(ring.exps_bytes);
  uint64_t* credits = ring_.host_alias(ring.credits);
  FrameRingView dev_ring = ring;
  dev_ring.slots = dev_ring_.get();
  uint8_t* dev_send = dev_send_.get();
  const uint64_t F = plan.num_frames;
  uint64_t next_planes = 0, next_exps = 0, next_credit = 0;
  wire_bytes_ = 0;
  uint64_t last_progress = p2p_detail::host_ns();
  cudaError_t e = cudaSuccess;
  while (next_credit < F && e == cudaSuccess) {
    bool progress = false;
    // Planes run ahead of section B, as far as free device slots allow (split-send on the copy engines).
    while (next_planes < F && next_planes < next_exps + S && e == cudaSuccess) {
      const uint64_t q = seq_base + next_planes;
      const uint32_t slot = slot_of(q, S);
      const FlagState st = ready_state(p2p_detail::host_load_acquire(&ready_planes[slot]), q);
      if (st != FlagState::ready) {
        if (st == FlagState::broken) relay_status_ = Status::corrupt_stream;
        break;
      }
      const FrameInfo fi = plan.frame(next_planes);
      // device -> pinned; the pinned slot is free once frame q - S reached the device
      if (next_planes >= S) e = cudaStreamWaitEvent(d2h_stream(), h2d_done()[slot], 0);
      if (e == cudaSuccess)
        e = cudaMemcpyAsync(host + slot * SB, dev_send + slot * SB, fi.planes_bytes, cudaMemcpyDeviceToHost,
                            d2h_stream());
      if (e == cudaSuccess) e = cudaEventRecord(d2h_planes_done()[slot], d2h_stream());
      if (e == cudaSuccess) e = cudaStreamWaitEvent(recv_stream(), d2h_planes_done()[slot], 0);
      if (e == cudaSuccess && next_planes >= S)
        e = cudaStreamWaitEvent(recv_stream(), decode_done()[slot], 0);  // device slot free
      if (e == cudaSuccess)
        e = cudaMemcpyAsync(dev_ring.slots + slot * SB, host + slot * SB, fi.planes_bytes, cudaMemcpyHostToDevice,
                            recv_stream());
      ++next_planes;
      progress = true;
    }
    while (next_exps < next_planes && e == cudaSuccess && relay_status_ == Status::ok) {
      const uint64_t q = seq_base + next_exps;
      const uint32_t slot = slot_of(q, S);
      const FlagState st = ready_state(p2p_detail::host_load_acquire(&ready_exps[slot]), q);
      if (st != FlagState::ready) {
        if (st == FlagState::broken) relay_status_ = Status::corrupt_stream;
        break;
      }
      const FrameInfo fi = plan.frame(next_exps);
      const uint64_t off = slot * SB + fi.planes_bytes;
      const uint32_t len = __atomic_load_n(&exps_words[slot], __ATOMIC_ACQUIRE);
      // Never copy more than the frame can hold; a bad length is left for the decode launch to reject.
      const uint64_t bytes = len >= FRAME_HEADER_BYTES && len <= fi.exps_bound ? len : FRAME_HEADER_BYTES;
      e = cudaMemcpyAsync(host + off, dev_send + off, bytes, cudaMemcpyDeviceToHost, d2h_stream());
      if (e == cudaSuccess) e = cudaEventRecord(d2h_done()[slot], d2h_stream());
      if (e == cudaSuccess) e = cudaStreamWaitEvent(recv_stream(), d2h_done()[slot], 0);
      if (e == cudaSuccess)
        e = cudaMemcpyAsync(dev_ring.slots + off, host + off, bytes, cudaMemcpyHostToDevice, recv_stream());
      wire_bytes_ += fi.planes_bytes + bytes;
      if (e == cudaSuccess) e = cudaEventRecord(h2d_done()[slot], recv_stream());
      const uint32_t lane = uint32_t(next_exps % COPY_DECODE_STREAMS);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(decode_stream(lane), h2d_done()[slot], 0);
      RecvLaunch rp;  // the frame is in the ring by stream order; the relay hands its slot back
      rp.frames = {next_exps, next_exps + 1};
      rp.seq_base = seq_base;
      rp.wait_flags = false;
      rp.give_credits = false;
      rp.timeout_ns = opt_.timeout_ns;
      rp.lane = lane;
      rp.reset_control = false;
      rp.max_blocks = int(std::max<uint64_t>(1, format::div_up(fi.items, P2PPolicy::WARPS)));
      if (e == cudaSuccess) e = receiver_.launch(plan, dst, dev_ring, rp, decode_stream(lane));
      if (e == cudaSuccess) e = cudaEventRecord(decode_done()[slot], decode_stream(lane));
      ++next_exps;
      progress = true;
    }
    // The sender's device slots go back once copied out.
    while (next_credit < next_exps && e == cudaSuccess) {
      const uint64_t q = seq_base + next_credit;
      const uint32_t slot = slot_of(q, S);
      const cudaError_t qe = cudaEventQuery(d2h_done()[slot]);
      if (qe == cudaErrorNotReady) break;
      if (qe != cudaSuccess) {
        e = qe;
        break;
      }
      p2p_detail::host_store_release(&credits[slot], flag_value(q));
      ++next_credit;
      progress = true;
    }
    if (relay_status_ != Status::ok) break;
    const uint64_t now = p2p_detail::host_ns();
    if (progress) {
      last_progress = now;
    } else if (now - last_progress > opt_.timeout_ns) {
      relay_status_ = Status::timeout;
      break;
    }
  }
  if (e == cudaErrorNotReady) e = cudaSuccess;
  return e;
}

}  // namespace comm
}  // namespace zipcomm
