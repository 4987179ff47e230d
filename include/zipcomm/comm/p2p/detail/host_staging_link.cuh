// P2P pipeline: the body of HostStagingLink (declared in p2p/host_staging_link.cuh): set-up, transfers, wait,
// calibration; each mode's scheduling is in host_staging_stream_mode.cuh and host_staging_copy_mode.cuh.
#pragma once

#include "../host_staging_link.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::init(int device, const P2POptions& opt, HostLinkMode mode) {
  if (!shape_valid(opt.shape) || opt.slots < 2 || opt.raw_chunk_bytes == 0 ||
      opt.raw_single_bytes > RAW_BUFFERS * opt.raw_chunk_bytes ||
      (opt.copy_piece_bytes && opt.copy_piece_bytes < P2POptions::MIN_COPY_PIECE_BYTES))
    return cudaErrorInvalidValue;
  destroy();
  device_ = device;
  opt_ = opt;
  bypass_ = opt.bypass_bytes;
  p2p_detail::DeviceGuard g(device);
  const bool stream = mode == HostLinkMode::stream && mem_ops_.load(device) == cudaSuccess;
  mode_ = stream ? HostLinkMode::stream : HostLinkMode::copy;
  const uint64_t slot_bytes = slot_bytes_for(D, opt.shape);
  cudaError_t e = ring_.init_pinned(opt.slots, slot_bytes);
  // Plain pinned memory for the raw copies (only copy engines touch it): on the H200 two 64 KiB copies
  // through it take 8.4 us of GPU time, through mapped or write-combined pinned memory 16.2 (bench_p2p's
  // blocked timing).
  if (e == cudaSuccess) e = raw_buffers_.pinned(size_t(RAW_BUFFERS) * opt.raw_chunk_bytes, cudaHostAllocDefault);
  if (e == cudaSuccess) e = sender_.init(device, opt.slots, opt.shape, opt.sender_blocks);
  // Stream mode: one persistent receiver per transfer; copy mode: one launch per frame, on the decode streams.
  if (e == cudaSuccess)
    e = receiver_.init(device, opt.slots, stream ? opt.receiver_blocks : 0, stream ? 1u : COPY_DECODE_STREAMS);
  if (e == cudaSuccess) e = dev_ring_.device(device, size_t(opt.slots) * slot_bytes);
  if (e == cudaSuccess) e = dev_send_.device(device, size_t(opt.slots) * slot_bytes);
  // Stream mode: the ring's flags, credits and "landed" flags in GPU memory (only this GPU's kernels and copy
  // streams use them), so no flag wait crosses PCIe: ~1% faster at 64 and 256 MiB than in pinned memory.
  if (e == cudaSuccess && stream) e = stream_flags_.device(device, size_t(opt.slots) * 32);
  budget_ = make_exps_budget(opt.shape, opt.exps_budget_per_kelem);  // a head may share a tier's class
  if (e == cudaSuccess) e = log_.init();
  // send, recv, raw, d2h; then stream mode's h2d, signal and two gate streams, or copy mode's decode streams
  for (uint32_t i = 0; i < 4 + (stream ? 4 : COPY_DECODE_STREAMS) && e == cudaSuccess; ++i) {
    cudaStream_t st;
    e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) streams_.push_back(st);
  }
  const size_t nev = 4 + 7 * size_t(opt.slots) + 2 * RAW_BUFFERS + 2 + 1 + 2;
  for (size_t i = 0; i < nev && e == cudaSuccess; ++i) {
    cudaEvent_t ev;
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) events_.push_back(ev);
  }
  ready_ = e == cudaSuccess;
  return e;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::transfer_coded(const void* src, void* dst, uint64_t n, cudaStream_t stream) {
  cudaError_t e = check(src, dst, n);
  if (e != cudaSuccess) return e;
  p2p_detail::DeviceGuard g(device_);
  e = log_.make_room([&] { return synchronize(); }, broken_);
  if (e != cudaSuccess) return e;
  e = start_after(stream);
  if (e == cudaSuccess) wire_bytes_ = 0;
  trace_frames_before_ = trace_items_before_ = 0;
  return issue_coded(src, dst, n, stream, e, BatchEdges{});
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::transfer_many(const P2PMessage* msgs, size_t count, cudaStream_t stream) {
  cudaError_t e = check_many(msgs, count);
  if (e != cudaSuccess) return e;
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += msgs[i].n * format::elem_bytes(D);
  if (total == 0) return cudaSuccess;
  if (use_bypass(total, bypass_)) return transfer_raw_many(msgs, count, stream);
  if (mode_ != HostLinkMode::stream) {
    for (size_t i = 0; i < count && e == cudaSuccess; ++i)
      if (msgs[i].n) e = transfer(msgs[i].src, msgs[i].dst, msgs[i].n, stream);
    return e;
  }
  p2p_detail::DeviceGuard g(device_);
  size_t first = count, last = 0;
  for (size_t i = 0; i < count; ++i)
    if (msgs[i].n) first = std::min(first, i), last = i;
  // Pieces sized from the whole batch: the host -> device side trails by the largest piece all along, paid
  // once at the batch's end, while every piece costs the copy engines a few microseconds.
  uint64_t wire = 0;
  for (size_t i = first; i <= last; ++i) {
    if (!msgs[i].n) continue;
    BatchEdges x;
    x.first = i == first, x.last = i == last;
    wire += planned_wire_bytes(make_plan(D, FrameKind::coded, msgs[i].n, batch_shape(x)));
  }
  BatchEdges edges;
  edges.piece = stream_piece_bytes_for(wire);
  wire_bytes_ = 0;
  trace_frames_before_ = trace_items_before_ = 0;
  for (size_t i = first; i <= last && e == cudaSuccess; ++i) {
    if (!msgs[i].n) continue;
    e = log_.make_room([&] { return synchronize(); }, broken_);
    if (e != cudaSuccess) {  // nothing of message i was enqueued: the caller still waits for the ones before
      if (i != first) join_caller(stream);
      return e;
    }
    if (i == first) e = start_after(stream);
    edges.first = i == first;
    edges.last = i == last;
    e = issue_coded(msgs[i].src, msgs[i].dst, msgs[i].n, stream, e, edges);  // joins the caller when it fails
  }
  trace_frames_before_ = trace_items_before_ = 0;
  return e;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::transfer_raw(const void* src, void* dst, uint64_t n, cudaStream_t stream) {
  cudaError_t e = check(src, dst, n);
  if (e != cudaSuccess) return e;
  p2p_detail::DeviceGuard g(device_);
  raw_pending_ = true;
  raw_stream_ = stream;
  const uint64_t bytes = n * format::elem_bytes(D);
  return StagedRawCopy::run(src, dst, bytes, raw_chunk_for(bytes), raw_buffers_.get(), RAW_BUFFERS, raw_events(),
                            stream, raw_stream());
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::transfer_raw_many(const P2PMessage* msgs, size_t count, cudaStream_t stream) {
  cudaError_t e = check_many(msgs, count);
  if (e != cudaSuccess) return e;
  std::vector<StagedRawCopy::Segment> segs;
  uint64_t total = 0;
  const uint64_t eb = format::elem_bytes(D);
  for (size_t i = 0; i < count; ++i)
    if (msgs[i].n) segs.push_back({msgs[i].src, msgs[i].dst, msgs[i].n * eb}), total += msgs[i].n * eb;
  if (segs.empty()) return cudaSuccess;
  p2p_detail::DeviceGuard g(device_);
  raw_pending_ = true;
  raw_stream_ = stream;
  // One message: its own chunk; many: the chunk of a message of their average size (the lag of one chunk is paid
  // once per batch, each chunk costs a few microseconds).
  const uint64_t chunk = segs.size() == 1 ? raw_chunk_for(total) : raw_chunk_for(total / segs.size());
  return StagedRawCopy::run_segments(segs.data(), segs.size(), chunk, raw_buffers_.get(), RAW_BUFFERS,
                                     raw_events(), stream, raw_stream());
}

template <DType D, class Code>
uint64_t HostStagingLink<D, Code>::raw_chunk_for(uint64_t bytes) const {
  if (const uint64_t c = calibrated_raw_chunk(bytes)) {
    // one chunk must fit the staging buffers; pipelined ones fit one buffer
    if (c >= bytes && bytes <= RAW_BUFFERS * opt_.raw_chunk_bytes) return bytes;
    return std::min(c, opt_.raw_chunk_bytes);
  }
  if (bytes <= opt_.raw_single_bytes) return bytes;
  uint64_t c = uint64_t(128) << 10;
  while (c * 2 <= bytes / 8 && c * 2 <= opt_.raw_chunk_bytes) c *= 2;
  return std::min(c, opt_.raw_chunk_bytes);
}

template <DType D, class Code>
Status HostStagingLink<D, Code>::wait(cudaError_t* cuda_error) {
  if (cuda_error) *cuda_error = cudaSuccess;
  if (!ready_) return Status::invalid_argument;
  p2p_detail::DeviceGuard g(device_);
  cudaError_t e = raw_pending_ ? cudaStreamSynchronize(raw_stream_) : cudaSuccess;
  if (e == cudaSuccess) e = synchronize();
  if (e != cudaSuccess) {
    if (cuda_error) *cuda_error = e;
    return Status::invalid_argument;
  }
  const Status s = log_.collect();
  const bool adapt = adapt_pending_;
  raw_pending_ = adapt_pending_ = false;
  if (s != Status::ok) broken_ = true;
  if (s == Status::ok && adapt) adapt_budget();
  return s;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::reset() {
  p2p_detail::DeviceGuard g(device_);
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = ring_.reset();
  if (e == cudaSuccess) e = sender_.reset();
  if (e == cudaSuccess) e = receiver_.reset();
  if (e == cudaSuccess && mode_ == HostLinkMode::stream)
    e = cudaMemset(stream_flags_.get(), 0, size_t(opt_.slots) * 32);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // the memset above is not ordered before the link's streams
  next_seq_ = 0;
  broken_ = false;
  relay_status_ = Status::ok;
  raw_pending_ = adapt_pending_ = false;
  log_.clear();
  return e;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::calibrate(const void* sample, uint64_t sample_elems, uint64_t max_bytes) {
  if (!sample || sample_elems == 0 || !ready_) return cudaErrorInvalidValue;
  p2p_detail::DeviceGuard g(device_);
  const uint64_t eb = format::elem_bytes(D);
  p2p_detail::Memory src, dst;
  cudaError_t e = src.device(device_, max_bytes);
  if (e == cudaSuccess) e = dst.device(device_, max_bytes);
  for (uint64_t off = 0; off < max_bytes && e == cudaSuccess; off += sample_elems * eb)
    e = cudaMemcpy(src.get() + off, sample, std::min(sample_elems * eb, max_bytes - off), cudaMemcpyDeviceToDevice);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // device-to-device copies return before they land
  cudaStream_t st = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreate(&a);
  if (e == cudaSuccess) e = cudaEventCreate(&b);
  std::vector<cudaEvent_t> marks;  // chunk timing: an event before each transfer of a window, and one after
  p2p_detail::Memory hold;         // chunk timing: [0] go, [1] the hold kernel timed out (mapped pinned words)
  uint32_t* hold_dev = nullptr;
  if (e == cudaSuccess) e = hold.pinned(2 * sizeof(uint32_t), cudaHostAllocMapped);
  if (e == cudaSuccess) e = cudaHostGetDevicePointer(reinterpret_cast<void**>(&hold_dev), hold.get(), 0);
  std::vector<uint64_t> sizes;
  std::vector<double> coded, raw;
  for (uint64_t& c : raw_best_) c = 0;
  for (uint64_t bytes = uint64_t(64) << 10; bytes <= max_bytes && e == cudaSuccess; bytes *= 2) {
    // The raw copy's chunk for this size class: one chunk, or the best pipelined one.
    std::vector<uint64_t> chunks{bytes <= RAW_BUFFERS * opt_.raw_chunk_bytes ? bytes : opt_.raw_chunk_bytes};
    for (uint64_t c = uint64_t(128) << 10; c < bytes && c <= opt_.raw_chunk_bytes; c *= 2) chunks.push_back(c);
    // Candidates share each timing window, interleaved (a transfer of each in turn, `batch` rounds, an event
    // before each transfer): on the H200 the copies of a whole window run either at ~8 or at ~16 us per pair
    // of tiny copies, so candidates timed in windows of their own were compared across modes. Median of 8
    // windows; another chunk replaces the first candidate only when 1% faster. Below 4 MiB a window holds 8
    // rounds. Each window is queued behind a kernel that holds the stream until the host has issued all of it,
    // so the copies run back to back and GPU time is measured: host-paced, the timing of a transfer of a few
    // tens of microseconds is mostly when the host got its calls in, and picked chunks 1-1.6% slower in GPU
    // time at 2 MiB than the best (bench_p2p, H200). Should the host stall while queueing, the
    // hold gives up after 50 ms and that window is host-paced.
    const int batch = bytes < (uint64_t(4) << 20) ? 8 : 1;
    const size_t K = chunks.size();
    while (marks.size() < batch * K + 1 && e == cudaSuccess) {
      cudaEvent_t m = nullptr;
      e = cudaEventCreate(&m);
      if (e == cudaSuccess) marks.push_back(m);
    }
    std::vector<std::vector<float>> ms(K);
    for (int rep = 0; rep < 9 && e == cudaSuccess; ++rep) {  // rep 0: warm-up
      std::vector<float> sum(K, 0.f);
      uint32_t* go = hold.get<uint32_t>();
      __atomic_store_n(go, 0u, __ATOMIC_RELEASE);
      p2p_hold_stream_kernel<<<1, 1, 0, st>>>(hold_dev, hold_dev + 1, uint64_t(50) * 1000 * 1000);
      e = cudaGetLastError();
      if (e == cudaSuccess) e = cudaEventRecord(marks[0], st);
      for (int i = 0; i < batch && e == cudaSuccess; ++i)
        for (size_t kk = 0; kk < K && e == cudaSuccess; ++kk) {
          e = StagedRawCopy::run(src.get(), dst.get(), bytes, chunks[(kk + rep) % K], raw_buffers_.get(),
                                 RAW_BUFFERS, raw_events(), st, raw_stream());
          if (e == cudaSuccess) e = cudaEventRecord(marks[1 + i * K + kk], st);
        }
      __atomic_store_n(go, 1u, __ATOMIC_RELEASE);  // also when queueing failed: the hold must end
      if (e == cudaSuccess) e = cudaEventSynchronize(marks[batch * K]);
      for (size_t t = 0; t < batch * K && e == cudaSuccess; ++t) {
        float m = 0;
        e = cudaEventElapsedTime(&m, marks[t], marks[t + 1]);
        sum[(t % K + rep) % K] += m;
      }
      for (size_t k = 0; k < K && rep > 0; ++k) ms[k].push_back(sum[k] / float(batch));
    }
    if (e != cudaSuccess) break;
    double best_ms = p2p_detail::median_ms(ms[0], 1e30);
    uint64_t best_chunk = chunks[0];
    const double first_ms = best_ms;
    for (size_t k = 1; k < K; ++k) {
      const double m = p2p_detail::median_ms(ms[k], 1e30);
      if (m < best_ms && m < 0.99 * first_ms) best_ms = m, best_chunk = chunks[k];
    }
    const int cls = size_class(bytes);
    if (cls >= 0 && cls < int(RAW_CLASSES)) raw_best_[cls] = best_chunk;
    double t[2] = {0, 0};
    for (int which = 0; which < 2 && e == cudaSuccess; ++which)
      e = p2p_detail::median_after_warmup(
          6,
          [&](float& m) {
            cudaError_t r = cudaEventRecord(a, st);
            if (r == cudaSuccess)
              r = which == 0 ? transfer_coded(src.get(), dst.get(), bytes / eb, st)
                             : transfer_raw(src.get(), dst.get(), bytes / eb, st);
            if (r == cudaSuccess) r = cudaEventRecord(b, st);
            if (r == cudaSuccess) r = cudaEventSynchronize(b);
            if (r == cudaSuccess) r = cudaEventElapsedTime(&m, a, b);
            if (r == cudaSuccess && wait() != Status::ok) r = cudaErrorUnknown;
            return r;
          },
          &t[which]);
    sizes.push_back(bytes);
    coded.push_back(t[0]);
    raw.push_back(t[1]);
  }
  if (st) cudaStreamDestroy(st);
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  for (cudaEvent_t m : marks) cudaEventDestroy(m);
  if (e == cudaSuccess) {
    bypass_ = choose_bypass_threshold(sizes.data(), coded.data(), raw.data(), sizes.size(), 0.03);
    points_.clear();
    for (size_t i = 0; i < sizes.size(); ++i) points_.push_back({sizes[i], coded[i], raw[i]});
  }
  return e;
}

template <DType D, class Code>
uint64_t HostStagingLink<D, Code>::raw_edge_elems(uint64_t bytes, uint64_t n) const {
  if (mode_ != HostLinkMode::stream) return 0;
  const uint64_t eb = format::elem_bytes(D);
  const uint64_t most = std::min(RAW_BUFFERS * opt_.raw_chunk_bytes / 2, n * eb / 4);
  return std::min(bytes, most) / 4096 * 4096 / eb;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::check_many(const P2PMessage* msgs, size_t count) const {
  if (!ready_ || broken_ || (count && !msgs)) return cudaErrorInvalidValue;
  for (size_t i = 0; i < count; ++i) {
    const cudaError_t e = check(msgs[i].src, msgs[i].dst, msgs[i].n);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::synchronize() {
  for (cudaStream_t st : streams_) {
    const cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::join_sides() {
  cudaError_t f = cudaSuccess;
  auto join = [&](cudaStream_t from, cudaStream_t into) {
    if (f == cudaSuccess) f = cudaEventRecord(ev(3), from);
    if (f == cudaSuccess) f = cudaStreamWaitEvent(into, ev(3), 0);
  };
  join(d2h_stream(), send_stream());
  if (mode_ == HostLinkMode::stream) {
    join(h2d_stream(), recv_stream());
    join(signal_stream(), recv_stream());
    join(gate_stream(0), send_stream());
    join(gate_stream(1), send_stream());
  } else {
    for (uint32_t k = 0; k < COPY_DECODE_STREAMS; ++k) join(decode_stream(k), recv_stream());
  }
  if (f == cudaSuccess) f = cudaEventRecord(side_done(0), send_stream());
  if (f == cudaSuccess) f = cudaEventRecord(side_done(1), recv_stream());
  return f;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::hand_over(cudaStream_t stream) {
  cudaError_t f = cudaEventRecord(ev(1), send_stream());
  if (f == cudaSuccess) f = cudaEventRecord(ev(2), recv_stream());
  if (f == cudaSuccess) f = cudaStreamWaitEvent(stream, side_done(0), 0);
  if (f == cudaSuccess) f = cudaStreamWaitEvent(stream, side_done(1), 0);
  return f;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::finish(cudaStream_t stream, cudaError_t e, bool join) {
  p2p_detail::TransferStatusLog::Record& rec = log_.next();
  rec.relay = relay_status_;
  SideControl* host = rec.side;
  // The caller's stream waits for both sides' work, not for the copies of their status words after it: only
  // wait() reads those, and it synchronizes every stream of the link. (A copy engine's small copy after the
  // receiver's last decode cost the caller a few microseconds per transfer.)
  cudaError_t f = join ? join_sides() : cudaSuccess;
  // By kernels, not copies: a copy queued behind a batch's busy copy streams waited for them to run dry, and the
  // next message's launch behind it (p2p_side_words_kernel).
  if (f == cudaSuccess)
    f = sender_.copy_control(log_.device_alias(&host[0]), send_stream());
  if (f == cudaSuccess)
    f = receiver_.copy_control(log_.device_alias(&host[1]), recv_stream());
  if (f == cudaSuccess && join) f = hand_over(stream);
  return e != cudaSuccess ? e : f;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::start_after(cudaStream_t stream) {
  cudaError_t e = cudaEventRecord(ev(0), stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(send_stream(), ev(0), 0);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(recv_stream(), ev(0), 0);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(send_stream(), ev(2), 0);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(recv_stream(), ev(1), 0);
  return e;
}

template <DType D, class Code>
PipelineShape HostStagingLink<D, Code>::batch_shape(const BatchEdges& x) const {
  PipelineShape s = opt_.shape;
  if (!x.first) s.head.region_elems = 0;
  if (!x.last) s.num_tiers = 1;  // full items only: the drain that finer items shorten is the batch's end
  return s;
}

template <DType D, class Code>
cudaError_t HostStagingLink<D, Code>::issue_coded(const void* src, void* dst, uint64_t n, cudaStream_t stream,
                                                  cudaError_t e, const BatchEdges& edges) {
  relay_status_ = Status::ok;
  const bool stream_mode = mode_ == HostLinkMode::stream;
  // The control words start clear: the launches clear them (the sender's always, the persistent receiver's in
  // stream mode); what no launch clears is cleared here (fewer operations before the kernels).
  if (e == cudaSuccess && n == 0) e = cudaMemsetAsync(sender_.control(), 0, sizeof(SideControl), send_stream());
  if (e == cudaSuccess && (n == 0 || !stream_mode))
    e = cudaMemsetAsync(receiver_.control(), 0, sizeof(SideControl), recv_stream());
  adapt_pending_ = adapt_pending_ || (stream_mode && n > 0);
  if (e != cudaSuccess || n == 0) return finish(stream, e, true);
  const uint64_t raw_head = edges.first ? raw_head_elems(n) : 0, raw_tail = edges.last ? raw_tail_elems(n) : 0;
  const FramePlan plan = make_plan(D, FrameKind::coded, n - raw_head - raw_tail, batch_shape(edges));
  const uint64_t seq_base = next_seq_;
  next_seq_ += plan.num_frames;
  if (stream_mode) {
    e = schedule_stream(plan, src, dst, seq_base, raw_head, raw_tail, edges);
    trace_frames_before_ += plan.num_frames;
    trace_items_before_ += plan.num_items;
    return finish(stream, e, edges.last || e != cudaSuccess);
  }
  FrameRingView ring = ring_.view();
  ring.slots = dev_send_.get();  // frames in GPU memory, flags in pinned memory (the host relay polls them)
  SendLaunch sp;
  sp.frames = {0, plan.num_frames};
  sp.seq_base = seq_base;
  sp.timeout_ns = opt_.timeout_ns;
  sp.extras = send_extras();
  e = sender_.launch(plan, src, ring, sp, send_stream());
  if (e != cudaSuccess) return finish(stream, e, true);
  for (uint32_t k = 0; k < COPY_DECODE_STREAMS && e == cudaSuccess; ++k) {  // decodes follow the control reset
    e = cudaEventRecord(ev(3), recv_stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(decode_stream(k), ev(3), 0);
  }
  if (e == cudaSuccess) e = relay(plan, dst, seq_base);
  return finish(stream, e, true);
}

template <DType D, class Code>
P2PLaunchExtras HostStagingLink<D, Code>::extras(bool sender) const {
  P2PLaunchExtras x;
  x.trace = sender ? send_trace_ : recv_trace_;
  x.item_trace = sender ? nullptr : recv_item_trace_;
  if (x.trace) x.trace += TRACE_STAMPS * trace_frames_before_;  // a batch's messages trace one after the other
  if (x.item_trace) x.item_trace += ITEM_TRACE_STAMPS * trace_items_before_;
  if (mode_ == HostLinkMode::stream) {
    // The copy streams wait on the sender's planes and exponents flags (adjacent: ready_exps = ready_planes +
    // slots) and on the receiver's credits.
    x.poison = {sender ? stream_ring().ready_planes : stream_ring().credits, sender ? 2 * opt_.slots : opt_.slots};
    x.overflow_slots = ring_.view().slots;
    x.exps_budget = budget_;
    x.first_frame_planes_first = sender;
  }
  return x;
}

template <DType D, class Code>
void HostStagingLink<D, Code>::destroy() {
  if (ready_) {
    p2p_detail::DeviceGuard g(device_);
    cudaDeviceSynchronize();
  }
  for (cudaStream_t st : streams_) cudaStreamDestroy(st);
  for (cudaEvent_t ev : events_) cudaEventDestroy(ev);
  streams_.clear();
  events_.clear();
  ready_ = false;
}

}  // namespace comm
}  // namespace zipcomm
