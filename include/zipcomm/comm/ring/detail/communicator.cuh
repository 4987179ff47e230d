// Ring allreduce: the body of RingCommunicator (declared in ring/communicator.cuh).
#pragma once

#include "../communicator.cuh"

namespace zipcomm {
namespace comm {

inline cudaError_t RingCommunicator::init(const std::vector<int>& rank_device, const RingOptions& options) {
  release();
  const int R = int(rank_device.size());
  if (R < 1 || R > RING_MAX_RANKS || options.max_channels < 1 || options.max_channels > RING_MAX_CHANNELS ||
      options.rounds_per_pass < 1 || options.timeout_ns == 0 || options.slot_bytes % RING_SLOT_ALIGN ||
      ring_chunk_elems(DType::fp32, options.slot_bytes) == 0)
    return cudaErrorInvalidValue;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return e;
  std::vector<Group> groups;
  for (int r = 0; r < R; ++r) {
    if (rank_device[r] < 0 || rank_device[r] >= count) return cudaErrorInvalidDevice;
    if (r > 0 && rank_device[r] != rank_device[r - 1]) {
      for (const Group& g : groups)
        if (g.device == rank_device[r]) return cudaErrorInvalidValue;  // a device's ranks must be contiguous
    }
    if (r == 0 || rank_device[r] != rank_device[r - 1]) groups.push_back(Group{rank_device[r], r, 0});
    groups.back().num_ranks++;
  }
  groups_ = groups;
  options_ = options;
  rank_device_ = rank_device;
  const uint32_t slots = options.rounds_per_pass * uint32_t(ring_slots_per_round(R) > 0 ? ring_slots_per_round(R) : 1);
  layout_ = make_ring_window_layout(options.max_channels, slots, options.slot_bytes);
  int prev = 0;
  e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return e;
  // Peer access between every pair of devices used (errors go to every rank, not only to neighbours).
  for (size_t a = 0; a < groups_.size() && e == cudaSuccess; ++a) {
    for (size_t b = 0; b < groups_.size() && e == cudaSuccess; ++b) {
      if (a == b) continue;
      int can = 0;
      e = cudaDeviceCanAccessPeer(&can, groups_[a].device, groups_[b].device);
      if (e == cudaSuccess && !can) e = cudaErrorPeerAccessUnsupported;
      if (e == cudaSuccess) e = cudaSetDevice(groups_[a].device);
      if (e == cudaSuccess) {
        e = cudaDeviceEnablePeerAccess(groups_[b].device, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) {
          (void)cudaGetLastError();
          e = cudaSuccess;
        }
      }
    }
  }
  windows_.assign(R, nullptr);
  for (int r = 0; r < R && e == cudaSuccess; ++r) {
    e = cudaSetDevice(rank_device[r]);
    if (e == cudaSuccess) e = cudaMalloc(&windows_[r], layout_.total_bytes);
    if (e == cudaSuccess) e = cudaMemset(windows_[r], 0, layout_.mailbox_offset);
  }
  for (Group& g : groups_) {
    if (e == cudaSuccess) e = cudaSetDevice(g.device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&g.timers, sizeof(unsigned long long) * RING_TIMER_SLOTS * g.num_ranks);
    if (e == cudaSuccess) e = cudaMemset(g.timers, 0, sizeof(unsigned long long) * RING_TIMER_SLOTS * g.num_ranks);
  }
  // The memsets ran on each device's legacy stream; the ring runs on non-blocking streams.
  for (const Group& g : groups_) {
    if (e == cudaSuccess) e = cudaSetDevice(g.device);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  const cudaError_t restore = cudaSetDevice(prev);
  if (e == cudaSuccess) e = restore;
  if (e != cudaSuccess) release();
  return e;
}

inline Status RingCommunicator::wait(cudaError_t* cuda_error) {
  Status result = pending_;
  pending_ = Status::ok;
  cudaError_t e = cudaSuccess;
  for (const Group& g : groups_)
    if (e == cudaSuccess) e = cudaStreamSynchronize(g.stream);
  for (int r = 0; r < ranks() && e == cudaSuccess; ++r) {
    uint32_t word = 0;
    e = cudaMemcpy(&word, ring_error_word(windows_[r]), sizeof word, cudaMemcpyDefault);
    if (e == cudaSuccess && word != 0 && result == Status::ok) result = static_cast<Status>(word);
  }
  if (e == cudaSuccess && result != Status::ok && result != Status::invalid_argument) e = clear_windows();
  if (cuda_error) *cuda_error = e;
  return e == cudaSuccess ? result : Status::invalid_argument;
}

inline cudaError_t RingCommunicator::read_counters(std::vector<uint64_t>& bytes_sent,
                                                   std::vector<std::array<uint64_t, RING_TIMER_SLOTS>>* timers) const {
  bytes_sent.assign(ranks(), 0);
  cudaError_t e = cudaSuccess;
  for (int r = 0; r < ranks() && e == cudaSuccess; ++r)
    e = cudaMemcpy(&bytes_sent[r], ring_bytes_sent(windows_[r]), 8, cudaMemcpyDefault);
  if (timers) {
    timers->assign(ranks(), {});
    for (const Group& g : groups_) {
      std::vector<unsigned long long> t(size_t(RING_TIMER_SLOTS) * g.num_ranks);
      if (e == cudaSuccess) e = cudaMemcpy(t.data(), g.timers, t.size() * sizeof(t[0]), cudaMemcpyDefault);
      for (int i = 0; i < g.num_ranks && e == cudaSuccess; ++i)
        for (int k = 0; k < RING_TIMER_SLOTS; ++k) (*timers)[g.first_rank + i][k] = t[size_t(i) * RING_TIMER_SLOTS + k];
    }
  }
  return e;
}

inline cudaError_t RingCommunicator::reset_counters() {
  cudaError_t e = sync_all();
  int prev = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&prev);
  for (int r = 0; r < ranks() && e == cudaSuccess; ++r) {
    e = cudaSetDevice(rank_device_[r]);
    if (e == cudaSuccess) e = cudaMemset(ring_bytes_sent(windows_[r]), 0, 8);
  }
  for (const Group& g : groups_) {
    if (e == cudaSuccess) e = cudaSetDevice(g.device);
    if (e == cudaSuccess) e = cudaMemset(g.timers, 0, sizeof(unsigned long long) * RING_TIMER_SLOTS * g.num_ranks);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  const cudaError_t restore = cudaSetDevice(prev);
  return e != cudaSuccess ? e : restore;
}

inline void RingCommunicator::release() {
  for (Group& g : groups_) {
    cudaSetDevice(g.device);
    if (g.stream) cudaStreamSynchronize(g.stream), cudaStreamDestroy(g.stream);
    if (g.timers) cudaFree(g.timers);
  }
  for (uint8_t* w : windows_)
    if (w) cudaFree(w);
  groups_.clear();
  windows_.clear();
  rank_device_.clear();
  clear_calibration();
  seq_ = RingSequence();
  pending_ = Status::ok;
}

inline cudaError_t RingCommunicator::check_arguments(void* const* data, uint64_t n, const ReduceOp& op,
                                                     RingMode mode) const {
  if (windows_.empty() || !reduce_op_valid(op) || uint8_t(mode) > uint8_t(RingMode::raw) ||
      n > (uint64_t(1) << 50))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return check_buffers(data);
}

inline cudaError_t RingCommunicator::check_buffers(const void* const* data) const {
  if (!data) return cudaErrorInvalidValue;
  for (int r = 0; r < ranks(); ++r) {
    // Device (or managed) memory of rank r's device: a host pointer or another device's buffer would be
    // read by the wrong GPU.
    cudaPointerAttributes attr{};
    if (!data[r] || cudaPointerGetAttributes(&attr, data[r]) != cudaSuccess) {
      (void)cudaGetLastError();
      return cudaErrorInvalidValue;
    }
    const bool device_memory = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    if (!device_memory || (attr.type == cudaMemoryTypeDevice && attr.device != rank_device_[r]))
      return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

inline cudaError_t RingCommunicator::sync_all() {
  cudaError_t e = cudaSuccess;
  for (const Group& g : groups_)
    if (e == cudaSuccess) e = cudaStreamSynchronize(g.stream);
  return e;
}

inline cudaError_t RingCommunicator::clear_windows() {
  cudaError_t e = sync_all();
  int prev = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&prev);
  for (int r = 0; r < ranks() && e == cudaSuccess; ++r) {
    e = cudaSetDevice(rank_device_[r]);
    if (e == cudaSuccess) e = cudaMemset(windows_[r], 0, layout_.mailbox_offset);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  const cudaError_t restore = cudaSetDevice(prev);
  seq_ = RingSequence();
  return e != cudaSuccess ? e : restore;
}

}  // namespace comm
}  // namespace zipcomm
