// P2P pipeline: the body of PeerLink (declared in p2p/peer_link.cuh).
#pragma once

#include "../peer_link.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::init(int send_device, int recv_device, const P2POptions& opt) {
  if (!shape_valid(opt.shape) || opt.slots < 2) return cudaErrorInvalidValue;
  destroy();
  send_dev_ = send_device;
  recv_dev_ = recv_device;
  opt_ = opt;
  bypass_ = opt.bypass_bytes;
  cudaError_t e = cudaSuccess;
  if (send_device != recv_device) {
    int can = 0;
    e = cudaDeviceCanAccessPeer(&can, send_device, recv_device);
    if (e == cudaSuccess && !can) return cudaErrorPeerAccessUnsupported;
    int back = 0;
    if (e == cudaSuccess) e = cudaDeviceCanAccessPeer(&back, recv_device, send_device);
    if (e == cudaSuccess && !back) return cudaErrorPeerAccessUnsupported;
    for (int k = 0; k < 2 && e == cudaSuccess; ++k) {
      p2p_detail::DeviceGuard g(k == 0 ? send_device : recv_device);
      e = cudaDeviceEnablePeerAccess(k == 0 ? recv_device : send_device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
        e = cudaSuccess;
      }
    }
  }
  const uint64_t slot_bytes = slot_bytes_for(D, opt.shape);
  if (e == cudaSuccess) e = ring_.init_device(recv_device, opt.slots, slot_bytes);
  if (e == cudaSuccess) e = credits_.device(send_device, size_t(opt.slots) * 8);
  if (e == cudaSuccess) e = sender_.init(send_device, opt.slots, opt.shape, opt.sender_blocks);
  if (e == cudaSuccess) e = receiver_.init(recv_device, opt.slots, opt.receiver_blocks, 1);
  if (e == cudaSuccess) e = log_.init();
  for (int k = 0; k < 2 && e == cudaSuccess; ++k) {
    p2p_detail::DeviceGuard g(k == 0 ? send_device : recv_device);
    e = cudaStreamCreateWithFlags(&streams_[k], cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done_[k], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&start_[k], cudaEventDisableTiming);
    // the rings' and counters' memsets ran on the legacy stream; the link's streams do not wait for it
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  ready_ = e == cudaSuccess;
  return e;
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::transfer_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream,
                                             cudaStream_t recv_stream) {
  const cudaError_t e = check_many(msgs, count);
  if (e != cudaSuccess) return e;
  const uint64_t total = total_bytes(msgs, count);
  if (total == 0) return cudaSuccess;
  return move_many(msgs, count, send_stream, recv_stream, use_bypass(total, bypass_));
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::transfer_raw_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream,
                                                 cudaStream_t recv_stream) {
  const cudaError_t e = check_many(msgs, count);
  if (e != cudaSuccess) return e;
  if (total_bytes(msgs, count) == 0) return cudaSuccess;
  return move_many(msgs, count, send_stream, recv_stream, true);
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::calibrate(const void* sample, uint64_t sample_elems, uint64_t max_bytes) {
  if (!sample || sample_elems == 0 || !ready_ || broken_) return cudaErrorInvalidValue;
  const uint64_t eb = format::elem_bytes(D);
  max_bytes = max_bytes / eb * eb;
  p2p_detail::Memory src, dst;
  cudaError_t e = src.device(send_dev_, max_bytes);
  if (e == cudaSuccess) e = dst.device(recv_dev_, max_bytes);
  for (uint64_t off = 0; off < max_bytes && e == cudaSuccess; off += sample_elems * eb)
    e = cudaMemcpy(src.get() + off, sample, std::min(sample_elems * eb, max_bytes - off), cudaMemcpyDefault);
  cudaStream_t st[2] = {nullptr, nullptr};
  cudaEvent_t a = nullptr, b = nullptr;
  for (int k = 0; k < 2 && e == cudaSuccess; ++k) {
    p2p_detail::DeviceGuard g(k == 0 ? send_dev_ : recv_dev_);
    e = cudaDeviceSynchronize();  // the fills and memsets above ran on the legacy stream
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking);
  }
  {
    p2p_detail::DeviceGuard g(recv_dev_);  // events and the stream they time on: the receive device
    if (e == cudaSuccess) e = cudaEventCreate(&a);
    if (e == cudaSuccess) e = cudaEventCreate(&b);
  }
  std::vector<uint64_t> sizes;
  std::vector<double> coded, raw;
  for (uint64_t bytes = uint64_t(64) << 10; bytes <= max_bytes && e == cudaSuccess; bytes *= 2) {
    double t[2] = {0, 0};
    for (int which = 0; which < 2 && e == cudaSuccess; ++which)
      e = p2p_detail::median_after_warmup(
          6,
          [&](float& m) {
            cudaError_t r;
            {
              p2p_detail::DeviceGuard g(recv_dev_);
              r = cudaEventRecord(a, st[1]);
            }
            if (r == cudaSuccess) {
              p2p_detail::DeviceGuard g(send_dev_);
              r = cudaStreamWaitEvent(st[0], a, 0);  // the send side starts after the timer
            }
            const P2PMessage msg = {src.get(), dst.get(), bytes / eb};
            if (r == cudaSuccess) r = move_many(&msg, 1, st[0], st[1], which == 1);
            {
              p2p_detail::DeviceGuard g(recv_dev_);
              if (r == cudaSuccess) r = cudaEventRecord(b, st[1]);
              if (r == cudaSuccess) r = cudaEventSynchronize(b);
              if (r == cudaSuccess) r = cudaEventElapsedTime(&m, a, b);
            }
            if (r == cudaSuccess && wait() != Status::ok) r = cudaErrorUnknown;
            return r;
          },
          &t[which]);
    sizes.push_back(bytes);
    coded.push_back(t[0]);
    raw.push_back(t[1]);
  }
  for (int k = 0; k < 2; ++k)
    if (st[k]) {
      p2p_detail::DeviceGuard g(k == 0 ? send_dev_ : recv_dev_);
      cudaStreamSynchronize(st[k]);
      cudaStreamDestroy(st[k]);
    }
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  if (e == cudaSuccess) {
    bypass_ = choose_bypass_threshold(sizes.data(), coded.data(), raw.data(), sizes.size(), 0.03);
    points_.clear();
    for (size_t i = 0; i < sizes.size(); ++i) points_.push_back({sizes[i], coded[i], raw[i]});
  }
  return e;
}

template <DType D, class Code>
Status PeerLink<D, Code>::wait(cudaError_t* cuda_error) {
  if (cuda_error) *cuda_error = cudaSuccess;
  if (!ready_) return Status::invalid_argument;
  const cudaError_t e = synchronize();
  if (e != cudaSuccess) {
    if (cuda_error) *cuda_error = e;
    return Status::invalid_argument;
  }
  const Status s = log_.collect();
  if (s != Status::ok) broken_ = true;
  return s;
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::reset() {
  cudaError_t e = cudaSuccess;
  for (int dev : {send_dev_, recv_dev_}) {
    p2p_detail::DeviceGuard g(dev);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  if (e == cudaSuccess) e = ring_.reset();
  if (e == cudaSuccess) {
    p2p_detail::DeviceGuard g(send_dev_);
    e = cudaMemset(credits_.get(), 0, size_t(opt_.slots) * 8);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();  // the link's streams do not wait for the legacy stream
  }
  if (e == cudaSuccess) e = sender_.reset();
  if (e == cudaSuccess) e = receiver_.reset();
  next_seq_ = 0;
  broken_ = false;
  log_.clear();
  return e;
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::check_many(const P2PMessage* msgs, size_t count) const {
  if (!ready_ || broken_ || (count && !msgs)) return cudaErrorInvalidValue;  // after an error: reset() first
  for (size_t i = 0; i < count; ++i)
    if ((msgs[i].n && (!msgs[i].src || !msgs[i].dst)) || msgs[i].n > (uint64_t(1) << 40))
      return cudaErrorInvalidValue;
  return cudaSuccess;
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::move_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream,
                                         cudaStream_t recv_stream, bool raw) {
  cudaError_t e = check_many(msgs, count);
  if (e != cudaSuccess) return e;
  e = log_.make_room([&] { return synchronize(); }, broken_);
  if (e != cudaSuccess) return e;
  {
    p2p_detail::DeviceGuard g(send_dev_);
    e = cudaEventRecord(start_[0], send_stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(streams_[0], start_[0], 0);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(streams_[0], done_[1], 0);  // previous transfer received
  }
  {
    p2p_detail::DeviceGuard g(recv_dev_);
    if (e == cudaSuccess) e = cudaEventRecord(start_[1], recv_stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(streams_[1], start_[1], 0);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(streams_[1], done_[0], 0);
    if (e == cudaSuccess && raw) e = cudaStreamWaitEvent(streams_[1], start_[0], 0);  // the sources are ready
  }
  bool made_room = true;
  for (size_t i = 0; i < count && e == cudaSuccess; ++i) {
    const P2PMessage& m = msgs[i];
    if (!m.n) continue;
    if (!made_room) e = log_.make_room([&] { return synchronize(); }, broken_);
    made_room = false;
    if (e != cudaSuccess) break;  // nothing of message i was enqueued; the callers still wait for the ones before
    // A raw message leaves its record as next() clears it (no kernel ran: ok); a coded one gets both sides'
    // status words, written by a kernel after each side's launch (p2p_side_words_kernel: a copy would queue
    // on the copy engines).
    SideControl* rec = log_.next().side;
    if (raw) {
      p2p_detail::DeviceGuard g(recv_dev_);
      e = cudaMemcpyPeerAsync(m.dst, recv_dev_, m.src, send_dev_, m.n * format::elem_bytes(D), streams_[1]);
      continue;
    }
    const FramePlan plan = make_plan(D, FrameKind::coded, m.n, opt_.shape);
    const uint64_t seq_base = next_seq_;
    next_seq_ += plan.num_frames;
    FrameRingView send_view = ring_.view();        // frames and ready flags: the receiver's memory
    send_view.credits = credits_.get<uint64_t>();  // credits: the sender's memory
    SendLaunch sp;
    sp.frames = {0, plan.num_frames};
    sp.seq_base = seq_base;
    sp.timeout_ns = opt_.timeout_ns;
    RecvLaunch rp;
    rp.frames = sp.frames;
    rp.seq_base = seq_base;
    rp.timeout_ns = opt_.timeout_ns;
    e = sender_.launch(plan, m.src, send_view, sp, streams_[0]);
    if (e == cudaSuccess) {
      p2p_detail::DeviceGuard g(send_dev_);
      e = sender_.copy_control(log_.device_alias(&rec[0]), streams_[0]);
    }
    if (e == cudaSuccess)
      e = receiver_.launch(plan, m.dst, send_view, rp, streams_[1]);
    if (e == cudaSuccess) {
      p2p_detail::DeviceGuard g(recv_dev_);
      e = receiver_.copy_control(log_.device_alias(&rec[1]), streams_[1]);
    }
  }
  // The callers' streams wait for whatever was enqueued, also when the batch stopped early.
  cudaError_t f = cudaSuccess;
  for (int k = 0; k < 2 && f == cudaSuccess; ++k) {
    p2p_detail::DeviceGuard g(k == 0 ? send_dev_ : recv_dev_);
    f = cudaEventRecord(done_[k], streams_[k]);
  }
  if (f == cudaSuccess) {
    p2p_detail::DeviceGuard g(recv_dev_);
    f = cudaStreamWaitEvent(recv_stream, done_[1], 0);
    if (f == cudaSuccess) f = cudaStreamWaitEvent(recv_stream, done_[0], 0);
  }
  if (f == cudaSuccess) {
    p2p_detail::DeviceGuard g(send_dev_);
    f = cudaStreamWaitEvent(send_stream, done_[0], 0);
  }
  return e != cudaSuccess ? e : f;
}

template <DType D, class Code>
cudaError_t PeerLink<D, Code>::synchronize() {
  for (int k = 0; k < 2; ++k) {
    p2p_detail::DeviceGuard g(k == 0 ? send_dev_ : recv_dev_);
    const cudaError_t e = cudaStreamSynchronize(streams_[k]);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <DType D, class Code>
void PeerLink<D, Code>::destroy() {
  if (ready_) {
    for (int k = 0; k < 2; ++k) {
      p2p_detail::DeviceGuard g(k == 0 ? send_dev_ : recv_dev_);
      cudaStreamSynchronize(streams_[k]);
      cudaStreamDestroy(streams_[k]);
      cudaEventDestroy(done_[k]);
      cudaEventDestroy(start_[k]);
    }
  }
  ready_ = false;
}

}  // namespace comm
}  // namespace zipcomm
