// HostStagingLink, stream mode: the GPU schedules the copy engines between the pinned frame ring and both ends,
// gated by the sender's and the receiver's flags (stream memory operations); no host thread.
#pragma once

#include "../host_staging_link.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
FrameRingView HostStagingLink<D, Code>::stream_ring() const {
  FrameRingView v = ring_.view();
  uint64_t* f = stream_flags_.get<uint64_t>();
  v.ready_planes = f;
  v.ready_exps = f + v.num_slots;
  v.credits = f + 2 * size_t(v.num_slots);
  return v;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::schedule_stream(const FramePlan& plan, const void* src_all, void* dst_all,
                                                      uint64_t seq_base, uint64_t raw_head, uint64_t raw_tail,
                                                      const BatchEdges& edges) {
  const uint64_t head_bytes = raw_head * format::elem_bytes(D);
  const uint8_t* src = static_cast<const uint8_t*>(src_all) + head_bytes;
  uint8_t* dst = static_cast<uint8_t*>(dst_all) + head_bytes;
  const FrameRingView pinned = stream_ring();
  const uint32_t S = pinned.num_slots;
  const uint64_t SB = pinned.slot_bytes;
  uint64_t* landed = stream_flags_.get<uint64_t>() + 3 * size_t(S);
  FrameRingView send_view = pinned;
  send_view.slots = dev_send_.get();  // the whole frame in GPU memory, for the copy engines
  FrameRingView recv_view = pinned;
  recv_view.slots = dev_ring_.get();  // as the copy engine lands it
  recv_view.ready_planes = landed;
  const uint64_t F = plan.num_frames;
  const cudaStream_t d2h = d2h_stream(), h2d = h2d_stream();
  auto trace_mark = [&](uint64_t f, int part) -> cudaEvent_t* {
    const uint64_t g = trace_frames_before_ + f;  // frame of the batch
    return 1 + 8 * (g + 1) <= copy_trace_count_ ? copy_trace_ + 1 + 8 * g + 4 * part : nullptr;
  };
  cudaError_t e =
      copy_trace_count_ && trace_frames_before_ == 0 ? cudaEventRecord(copy_trace_[0], send_stream()) : cudaSuccess;
  // Raw bytes [at, at + len) of the transfer, source -> raw staging -> destination: one copy each way, after the
  // caller's prior work (ev(0)) and once the staging is free (ev(2): the previous transfer done). The raw head
  // and the raw tail.
  auto copy_raw = [&](uint64_t at, uint64_t len, uint8_t* staging) {
    cudaError_t r = cudaStreamWaitEvent(d2h, ev(0), 0);
    if (r == cudaSuccess) r = cudaStreamWaitEvent(d2h, ev(2), 0);
    if (r == cudaSuccess)
      r = cudaMemcpyAsync(staging, static_cast<const uint8_t*>(src_all) + at, len, cudaMemcpyDeviceToHost, d2h);
    if (r == cudaSuccess) r = cudaEventRecord(piece_done(), d2h);
    if (r == cudaSuccess) r = cudaStreamWaitEvent(h2d, piece_done(), 0);
    if (r == cudaSuccess)
      r = cudaMemcpyAsync(static_cast<uint8_t*>(dst_all) + at, staging, len, cudaMemcpyHostToDevice, h2d);
    return r;
  };
  // The raw head first, before the launches, so its device -> host copy starts at once and ends about when the
  // first frame's planes are split; its host -> device copy fills the time until the first frame's piece lands.
  if (edges.first) batch_head_bytes_ = head_bytes;  // the batch's raw tail is staged after these bytes
  if (head_bytes && e == cudaSuccess) e = copy_raw(0, head_bytes, raw_buffers_.get());
  SendLaunch sp;
  sp.frames = {0, F};
  sp.seq_base = seq_base;
  sp.timeout_ns = opt_.timeout_ns;
  sp.extras = send_extras();
  sp.extras.first_frame_planes_first = edges.first;
  RecvLaunch rp;
  rp.frames = {0, F};
  rp.seq_base = seq_base;
  rp.timeout_ns = opt_.timeout_ns;
  rp.extras = recv_extras();
  if (e == cudaSuccess) e = sender_.launch(plan, src, send_view, sp, send_stream());
  if (e == cudaSuccess) e = receiver_.launch(plan, dst, recv_view, rp, recv_stream());
  // A copy stream's wait for a flag: through a gate stream, which waits on the flag and records the slot's gate
  // event of that kind, the copy stream waiting on the event (a stream memory wait on a flag already set cost
  // up to ~20 us, an event ~2 us: 1.134 / 3.974 ms at 64 / 256 MiB against 1.170 / 4.031); the first frame's
  // planes directly, as the stream reaches that wait before the sender sets the flag.
  auto wait_flag = [&](cudaStream_t st, uint64_t f, uint32_t kind, uint64_t* flag, uint64_t value) {
    if (f == 0 && kind == 0) return mem_ops_.wait_geq(st, flag, value);
    const cudaStream_t g = gate_stream(kind == 2 ? 1 : 0);
    cudaEvent_t gev = gate_events(kind)[slot_of(seq_base + f, S)];
    cudaError_t r = mem_ops_.wait_geq(g, flag, value);
    if (r == cudaSuccess) r = cudaEventRecord(gev, g);
    return r == cudaSuccess ? cudaStreamWaitEvent(st, gev, 0) : r;
  };
  // One stretch of a frame, GPU -> pinned -> GPU: the d2h copy, then (event) the h2d copy. An event may be
  // recorded again right after a stream waited on it: the wait keeps the record it saw. Longer than the piece
  // size: in pieces, each h2d piece waiting for its own d2h piece, and `ev` marks the whole stretch out.
  // `mark` (trace): events before and after each side's copies.
  const uint64_t piece = edges.piece ? edges.piece : stream_piece_bytes(plan);
  auto copy_through = [&](uint8_t* host, const uint8_t* from_dev, uint8_t* to_dev, uint64_t len, cudaEvent_t ev,
                          cudaEvent_t* mark) {
    const bool pieces = piece && len > piece;
    const cudaEvent_t link_ev = pieces ? piece_done() : ev;
    cudaError_t r = mark ? cudaEventRecord(mark[0], d2h) : cudaSuccess;
    bool h2d_marked = false;
    for (uint64_t off = 0; off < len && r == cudaSuccess; off += pieces ? piece : len) {
      const uint64_t n = pieces ? std::min(piece, len - off) : len;
      r = cudaMemcpyAsync(host + off, from_dev + off, n, cudaMemcpyDeviceToHost, d2h);
      if (r == cudaSuccess) r = cudaEventRecord(link_ev, d2h);
      if (r == cudaSuccess) r = cudaStreamWaitEvent(h2d, link_ev, 0);
      if (r == cudaSuccess && mark && !h2d_marked) r = cudaEventRecord(mark[2], h2d), h2d_marked = true;
      if (r == cudaSuccess) r = cudaMemcpyAsync(to_dev + off, host + off, n, cudaMemcpyHostToDevice, h2d);
    }
    if (r == cudaSuccess && pieces) r = cudaEventRecord(ev, d2h);
    if (r == cudaSuccess && mark) r = cudaEventRecord(mark[1], d2h);
    if (r == cudaSuccess && mark) r = cudaEventRecord(mark[3], h2d);
    return r;
  };
  wire_bytes_ += head_bytes;
  for (uint64_t f = 0; f < F && e == cudaSuccess; ++f) {
    const uint64_t q = seq_base + f;
    const uint32_t slot = slot_of(q, S);
    const FrameInfo fi = plan.frame(f);
    const bool split = edges.first && f == 0;
    const uint64_t P = fi.planes_bytes, to = P + exps_budget_bytes(fi, budget_);
    uint8_t* host = pinned.slots + slot * SB;
    uint8_t *from_dev = dev_send_.get() + slot * SB, *to_dev = dev_ring_.get() + slot * SB;
    // The split frame's planes, or the whole frame; the pinned slot free (its previous frame's h2d copy done),
    // the device slot free (its previous frame's credit).
    e = split ? wait_flag(d2h, f, 0, &pinned.ready_planes[slot], flag_value(q))
              : wait_flag(d2h, f, 1, &pinned.ready_exps[slot], flag_value(q));
    if (e == cudaSuccess && q >= S) e = cudaStreamWaitEvent(d2h, h2d_done()[slot], 0);
    if (e == cudaSuccess && q >= S) e = wait_flag(h2d, f, 2, &pinned.credits[slot], flag_value(q - S));
    uint64_t from = 0;
    if (split) {
      if (e == cudaSuccess) e = copy_through(host, from_dev, to_dev, P, d2h_planes_done()[slot], trace_mark(f, 0));
      if (e == cudaSuccess) e = wait_flag(d2h, f, 1, &pinned.ready_exps[slot], flag_value(q));
      from = P;
    }
    if (e == cudaSuccess)
      e = copy_through(host + from, from_dev + from, to_dev + from, to - from, d2h_done()[slot], trace_mark(f, 1));
    if (e == cudaSuccess) e = cudaEventRecord(h2d_done()[slot], h2d);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(signal_stream(), h2d_done()[slot], 0);
    if (e == cudaSuccess) e = mem_ops_.write(signal_stream(), &landed[slot], flag_value(q));
    wire_bytes_ += to;  // what the copy engines moved; the overflow is GPU-side only
  }
  // The raw tail last: its device -> host copy follows the last frame's, and its host -> device copy runs while
  // that frame's "landed" flag is seen and its items decode. Through the raw staging after the bytes of the
  // batch's raw head (its first message's), which may still be on their way out: the two copies are not ordered
  // against each other.
  const uint64_t tail_bytes = raw_tail * format::elem_bytes(D);
  if (tail_bytes && e == cudaSuccess) {
    e = copy_raw((plan.n + raw_head) * format::elem_bytes(D), tail_bytes, raw_buffers_.get() + batch_head_bytes_);
    wire_bytes_ += tail_bytes;
  }
  return e;
}

template <DType D, class Code>
uint64_t HostStagingLink<D, Code>::stream_piece_bytes_for(uint64_t wire) const {
  if (!opt_.copy_pieces_per_transfer) return opt_.copy_piece_bytes;
  const uint64_t grain = uint64_t(64) << 10;
  const uint64_t least = opt_.copy_piece_bytes ? opt_.copy_piece_bytes : uint64_t(256) << 10;
  return std::max(least, format::div_up(wire / opt_.copy_pieces_per_transfer, grain) * grain);
}

template <DType D, class Code>
uint64_t HostStagingLink<D, Code>::planned_wire_bytes(const FramePlan& plan) const {
  uint64_t wire = 0;
  for (uint64_t f = 0; f < plan.num_frames; ++f) {
    const FrameInfo fi = plan.frame(f);
    wire += fi.planes_bytes + exps_budget_bytes(fi, budget_);
  }
  return wire;
}

template <DType D, class Code>
void HostStagingLink<D, Code>::adapt_budget() {
  // On the sender's stream (already idle here): a plain cudaMemcpy would also wait for the caller's other
  // work on the legacy stream's device.
  uint32_t need[EXPS_BUDGET_CLASSES] = {};
  if (cudaMemcpyAsync(need, sender_.exps_need(), sizeof need, cudaMemcpyDeviceToHost, send_stream()) == cudaSuccess &&
      cudaStreamSynchronize(send_stream()) == cudaSuccess)
    budget_ = adapt_exps_budget(budget_, need, opt_.exps_budget_margin_permille, opt_.exps_budget_margin_per_kelem);
}

}  // namespace comm
}  // namespace zipcomm
