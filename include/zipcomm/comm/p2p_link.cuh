// P2P pipeline, host side: the sender and receiver ends (device state + launches), the rings, and two links
// built from them: HostStagingLink (GPU -> pinned host buffer -> GPU, the slow link one GPU has) and PeerLink
// (peer GPU memory, two GPUs of one host; the same GPU also works). docs/P2P.md describes the protocol.
//
// A host object owns memory and streams and hands kernels plain handles (FrameRingView, SendArgs, RecvArgs).
// Calls return cudaError_t for CUDA failures and bad arguments (cudaErrorInvalidValue); what the transfer
// found (timeout, corrupt frame, size mismatch) is the Status that wait() returns.
#pragma once

#include <cuda.h>  // types of the stream memory operations only; no libcuda link (entry points at run time)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "p2p_kernels.cuh"
#include "p2p_protocol.cuh"

namespace zipcomm {
namespace comm {

/// Knobs of a link whose best value depends on the platform or the data; what measured fastest on the H200's
/// pinned-host link (bench_p2p --sweep, real bf16 gradients; docs/DECISIONS.md) is the default, and the shape's
/// defaults are in p2p_protocol.cuh. Memory of a HostStagingLink: 16 slots of about 24 MiB (bf16) in pinned host
/// memory, twice that in GPU memory.
struct P2POptions {
  PipelineShape shape;                  // how messages are cut into items and frames
  uint32_t slots = 16;                  // frames in flight: 4 slots 1.347 / 4.301 ms at 64 / 256 MiB, 16 1.205 / 4.181
  uint64_t timeout_ns = 5000000000ull;  // a peer silent this long gives Status::timeout
  int sender_blocks = 0;                // 0: one block per SM
  int receiver_blocks = 0;              // 0: one block per SM (persistent receivers)
  uint64_t bypass_bytes = uint64_t(4) << 20;        // messages below go raw; a guess until calibrate() measures it
  uint64_t raw_chunk_bytes = uint64_t(8) << 20;     // largest chunk of the pipelined raw copy (bypass)
  uint64_t raw_single_bytes = uint64_t(256) << 10;  // raw messages up to this size: one chunk, two copies
  // Stream mode's section-B budget (bytes past it go by SM stores and loads, the overflow): a first guess of the
  // coded exponent bytes per 1024 elements (bf16 gradients need ~350), then after each transfer the most a frame
  // needed plus a margin of permille / 1000 and per_kelem bytes per 1024 elements. Every byte of margin crosses
  // the link on every frame.
  uint32_t exps_budget_per_kelem = 410;
  uint32_t exps_budget_margin_permille = 5;    // 0.5% + 1: 0.4-0.6% faster than 2% + 4 at 64 and 128 MiB
  uint32_t exps_budget_margin_per_kelem = 1;
  // Stream mode: each copy of a frame's planes or section B goes in pieces (each host -> device piece waits only for
  // its own device -> host piece) of 1 / copy_pieces_per_transfer of the transfer's wire bytes, at least
  // copy_piece_bytes (256 KiB if 0); with copy_pieces_per_transfer 0, of copy_piece_bytes (0: whole copies). The
  // host -> device side trails by the largest piece and each piece costs ~3 us of copy engine, so the best piece
  // is about sqrt(wire bytes x cost per piece x link rate): it depends on the link.
  uint64_t copy_piece_bytes = uint64_t(4) << 20;  // 1.245 ms at 64 MiB, whole copies 1.322
  uint32_t copy_pieces_per_transfer = 32;         // 0.4-0.8% faster than 1/16 at 256 MiB
  static constexpr uint64_t MIN_COPY_PIECE_BYTES = 4096;  // copy_piece_bytes below this (but 0) is refused
};

namespace p2p_detail {

inline uint64_t host_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

inline uint64_t host_load_acquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void host_store_release(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/// Owns one cudaMalloc'd or cudaHostAlloc'd block (pinned host memory: mapped and portable unless told otherwise).
class Memory {
 public:
  Memory() = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() { release(); }
  cudaError_t device(int dev, size_t bytes) {
    release();
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess) e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(&ptr_, bytes ? bytes : 1);
    if (e == cudaSuccess) e = cudaMemset(ptr_, 0, bytes ? bytes : 1);
    // The memset runs on the default stream, which the links' non-blocking streams do not wait for: the memory
    // is handed out zeroed, whatever stream uses it first (waiting on that stream alone, not the device).
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    cudaSetDevice(prev);
    host_ = false;
    return e;
  }
  cudaError_t pinned(size_t bytes, unsigned flags = cudaHostAllocMapped | cudaHostAllocPortable) {
    release();
    cudaError_t e = cudaHostAlloc(&ptr_, bytes ? bytes : 1, flags);
    if (e == cudaSuccess) std::memset(ptr_, 0, bytes ? bytes : 1);
    host_ = true;
    return e;
  }
  void release() {
    if (ptr_) host_ ? cudaFreeHost(ptr_) : cudaFree(ptr_);
    ptr_ = nullptr;
  }
  template <class T = uint8_t>
  T* get(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(ptr_) + byte_offset);
  }

 private:
  void* ptr_ = nullptr;
  bool host_ = false;
};

inline cudaError_t first_error(std::initializer_list<cudaError_t> es) {
  for (cudaError_t e : es)
    if (e != cudaSuccess) return e;
  return cudaSuccess;
}

/// Stream memory operations (cuStreamWaitValue64 / cuStreamWriteValue64): a stream waits for a word the GPU's
/// kernels write, or writes one, without the host. Reached through the runtime's driver entry-point lookup, so
/// nothing links libcuda directly.
class StreamMemOps {
 public:
  cudaError_t load(int device) {
    using AttrFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
    void* attr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &attr, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !attr) return cudaErrorNotSupported;
    int ok = 0;
    if (reinterpret_cast<AttrFn>(attr)(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) != CUDA_SUCCESS ||
        !ok)
      return cudaErrorNotSupported;
    void* w = nullptr;
    void* r = nullptr;
    e = cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault, &q);
    if (e == cudaSuccess && q == cudaDriverEntryPointSuccess)
      e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &r, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !w || !r) return cudaErrorNotSupported;
    wait64_ = reinterpret_cast<Fn>(w);
    write64_ = reinterpret_cast<Fn>(r);
    return cudaSuccess;
  }
  /// `stream` waits until *word >= value (as a signed 64-bit difference, so sequence numbers may wrap).
  cudaError_t wait_geq(cudaStream_t stream, const uint64_t* word, uint64_t value) const {
    return call(wait64_, stream, word, value, CU_STREAM_WAIT_VALUE_GEQ);
  }
  /// `stream` writes value to *word once the work before it is done, and its writes visible.
  cudaError_t write(cudaStream_t stream, uint64_t* word, uint64_t value) const {
    return call(write64_, stream, word, value, CU_STREAM_WRITE_VALUE_DEFAULT);
  }

 private:
  using Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  static cudaError_t call(Fn fn, cudaStream_t stream, const uint64_t* word, uint64_t value, unsigned flags) {
    if (!fn) return cudaErrorNotSupported;
    return fn(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), value, flags) == CUDA_SUCCESS
               ? cudaSuccess
               : cudaErrorUnknown;
  }
  Fn wait64_ = nullptr, write64_ = nullptr;
};

/// Zeroes the per-slot counters (`words` 64-bit words per slot, slot-major) of the slots frames
/// [seq0, seq0 + frames) use, in stream order: a launch then starts from zero even where an earlier launch was
/// aborted half-way through a frame. Every slot's previous frame is finished by then (credits or stream order).
inline cudaError_t zero_slot_counters(unsigned long long* counters, uint32_t words, uint32_t slots, uint64_t seq0,
                                      uint64_t frames, cudaStream_t stream) {
  if (frames >= slots) return cudaMemsetAsync(counters, 0, size_t(slots) * words * 8, stream);
  cudaError_t e = cudaSuccess;
  for (uint64_t f = 0; f < frames && e == cudaSuccess; ++f)
    e = cudaMemsetAsync(counters + size_t((seq0 + f) % slots) * words, 0, size_t(words) * 8, stream);
  return e;
}

/// Scoped cudaSetDevice.
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev) {
    cudaGetDevice(&prev_);
    if (prev_ != dev) cudaSetDevice(dev);  // a small transfer's time includes this host work: skip what is a no-op
    set_ = prev_ != dev;
  }
  ~DeviceGuard() {
    if (set_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  bool set_ = false;
};

}  // namespace p2p_detail

/// A ring of frame slots with its flags in one memory block: pinned host memory (mapped; the host and every
/// GPU can use it) or one GPU's memory.
class FrameRing {
 public:
  cudaError_t init_pinned(uint32_t slots, uint64_t slot_bytes) {
    return init(-1, slots, slot_bytes);
  }
  cudaError_t init_device(int device, uint32_t slots, uint64_t slot_bytes) { return init(device, slots, slot_bytes); }
  FrameRingView view() const { return view_; }
  /// Pinned rings: the host address of a device-side pointer into the ring (flags, slots).
  template <class T>
  T* host_alias(T* device_ptr) const {
    return reinterpret_cast<T*>(mem_.get() + (reinterpret_cast<uint8_t*>(device_ptr) - view_.slots));
  }
  /// Sets every flag and credit back to 0 (sequence numbers restart at 0). The ring must be idle.
  cudaError_t reset() {
    if (device_ < 0) {
      std::memset(host_alias(view_.ready_planes), 0, flag_bytes());
      return cudaSuccess;
    }
    p2p_detail::DeviceGuard g(device_);
    cudaError_t e = cudaMemset(view_.ready_planes, 0, flag_bytes());
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
  }

 private:
  size_t flag_bytes() const { return size_t(view_.num_slots) * (3 * 8 + 4); }
  cudaError_t init(int device, uint32_t slots, uint64_t slot_bytes) {
    if (slots == 0 || slot_bytes % 128) return cudaErrorInvalidValue;
    device_ = device;
    const size_t data = size_t(slots) * slot_bytes;
    const size_t total = data + size_t(slots) * (3 * 8 + 4);
    cudaError_t e = device < 0 ? mem_.pinned(total) : mem_.device(device, total);
    if (e != cudaSuccess) return e;
    uint8_t* base = mem_.get();
    if (device < 0) {  // kernels use the device alias of the mapped block
      void* d = nullptr;
      e = cudaHostGetDevicePointer(&d, base, 0);
      if (e != cudaSuccess) return e;
      base = static_cast<uint8_t*>(d);
    }
    view_.slots = base;
    view_.slot_bytes = slot_bytes;
    view_.num_slots = slots;
    view_.ready_planes = reinterpret_cast<uint64_t*>(base + data);
    view_.ready_exps = view_.ready_planes + slots;
    view_.credits = view_.ready_exps + slots;
    view_.exps_bytes = reinterpret_cast<uint32_t*>(view_.credits + slots);
    return cudaSuccess;
  }
  p2p_detail::Memory mem_;
  FrameRingView view_;
  int device_ = -1;
};

/// Optional settings of one P2P kernel launch.
struct P2PLaunchExtras {
  p2p_detail::PoisonList poison;  // flags set far ahead when this side aborts (so copy-engine waiters drain)
  uint64_t* trace = nullptr;      // per-frame %globaltimer stamps (SendArgs::trace, RecvArgs::trace)
  uint64_t* item_trace = nullptr;  // receiver: per-item %globaltimer stamps (RecvArgs::item_trace)
  uint8_t* overflow_slots = nullptr;  // stream mode: where section B past the budget goes (SendArgs, RecvArgs)
  ExpsBudget exps_budget;
  bool first_frame_planes_first = false;  // SendArgs::first_frame_planes_first
};

/// Sender end on one GPU: device state for p2p_send_kernel and its launch.
template <DType D, class Code = thread::PairCode>
class P2PSender {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  static constexpr size_t smem_bytes() {
    return sizeof(P2PSendSmem<D, Code>);
  }

  /// blocks: persistent grid size (0: one per SM).
  cudaError_t init(int device, uint32_t slots, const PipelineShape& shape, int blocks = 0) {
    if (!shape_valid(shape) || slots == 0) return cudaErrorInvalidValue;
    device_ = device;
    slots_ = slots;
    p2p_detail::DeviceGuard g(device);
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    blocks_ = blocks > 0 ? blocks : sms;
    scratch_bytes_ = format::align_up(item_plane_bytes(D, largest_item_elems(shape)), 16);
    e = cudaFuncSetAttribute(p2p_send_kernel<D, Code>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes()));
    // All of L1/shared as shared memory: a sender's and a receiver's block must fit on one SM together (they
    // wait on each other), which the carveout picked for one kernel alone need not leave room for.
    if (e == cudaSuccess) e = cudaFuncSetAttribute(p2p_send_kernel<D, Code>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e == cudaSuccess) e = p2p_detail::load_side_words_kernel();
    if (e != cudaSuccess) return e;
    e = state_.device(device, state_bytes());
    if (e != cudaSuccess) return e;
    return scratch_.device(device, size_t(blocks_) * P2PPolicy::WARPS * scratch_bytes_);
  }

  /// Enqueues the sending of frames [f0, f1) of `plan` (message at `in`) into `ring`; frame f has sequence
  /// number seq_base + f. Resets the control words first (status, abort).
  cudaError_t launch(const FramePlan& plan, const void* in, uint64_t seq_base, uint64_t f0, uint64_t f1,
                     const FrameRingView& ring, bool wait_credits, uint64_t timeout_ns, cudaStream_t stream,
                     const P2PLaunchExtras& extras = {}) {
    if (ring.num_slots != slots_) return cudaErrorInvalidValue;
    p2p_detail::DeviceGuard g(device_);
    // One clear of what a launch must find zero (item counter, per-slot counters, control words, the per-class
    // need): the sender is idle between launches, and each stream operation before the kernel delays the
    // transfer's first frame by a few microseconds (it was 4 + 2 per frame). By a kernel, not a memset (see
    // p2p_side_words_kernel).
    cudaError_t e = p2p_detail::side_words(state_.get(), nullptr, cleared_bytes(), stream);
    if (e != cudaSuccess || f0 >= f1) return e;
    SendArgs a;
    a.plan = plan;
    a.in = in;
    a.seq_base = seq_base;
    a.frame_begin = f0;
    a.frame_end = f1;
    a.ring = ring;
    a.wait_credits = wait_credits;
    a.launch_tag = next_tag();
    a.item_counter = state_.get<unsigned long long>(0);
    a.counters = state_.get<unsigned long long>(16 * 8);
    a.lookback = state_.get<uint64_t>(cleared_bytes());
    a.credit_seen = state_.get<uint64_t>(cleared_bytes() + size_t(slots_) * MAX_FRAME_ITEMS * 8);
    a.scratch = scratch_.get();
    a.scratch_bytes = scratch_bytes_;
    a.control = control();
    a.timeout_ns = timeout_ns;
    a.trace = extras.trace;
    a.poison = extras.poison;
    a.overflow_slots = extras.overflow_slots;
    a.exps_budget = extras.exps_budget;
    a.exps_need = state_.get<uint32_t>(need_offset());
    a.first_frame_planes_first = extras.first_frame_planes_first;
    const uint64_t items =
        (f1 < plan.num_frames ? plan.frame(f1).first_item : plan.num_items) - plan.frame(f0).first_item;
    const int grid = int(std::min<uint64_t>(uint64_t(blocks_), format::div_up(items, P2PPolicy::WARPS)));
    p2p_send_kernel<D, Code><<<grid, P2PPolicy::THREADS, smem_bytes(), stream>>>(a);
    return cudaGetLastError();
  }
  SideControl* control() const { return state_.get<SideControl>(control_offset()); }
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
};

/// Receiver end on one GPU: device state for p2p_recv_kernel and its launches. `lanes` independent item
/// counters let that many launches run at once (one per stream).
template <DType D, class Code = thread::PairCode>
class P2PReceiver {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  static constexpr size_t smem_bytes() {
    return sizeof(warp::PairDecodeTable);
  }

  /// lanes: launches that may run at once (one per stream).
  cudaError_t init(int device, uint32_t slots, int blocks = 0, uint32_t lanes = 1) {
    if (slots == 0 || lanes == 0) return cudaErrorInvalidValue;
    device_ = device;
    slots_ = slots;
    lanes_ = lanes;
    p2p_detail::DeviceGuard g(device);
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    blocks_ = blocks > 0 ? blocks : sms;
    e = cudaFuncSetAttribute(p2p_recv_kernel<D, Code>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes()));
    // All of L1/shared as shared memory: a sender's and a receiver's block must fit on one SM together (they
    // wait on each other), which the carveout picked for one kernel alone need not leave room for.
    if (e == cudaSuccess) e = cudaFuncSetAttribute(p2p_recv_kernel<D, Code>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (e == cudaSuccess) e = p2p_detail::load_side_words_kernel();
    if (e != cudaSuccess) return e;
    return state_.device(device, state_words() * 8 + sizeof(SideControl));
  }

  /// Enqueues the receiving of frames [f0, f1) of `plan` into `out`, decoded where they are in `ring` (GPU
  /// memory: this GPU's or a peer's). wait_flags: wait for each frame's flags on `ring` (false: the frames are
  /// already there, by stream order). reset_control: clear status/abort first (once per transfer). done_word
  /// (optional) gets done_value when every frame of the launch is decoded.
  cudaError_t launch(const FramePlan& plan, void* out, uint64_t seq_base, uint64_t f0, uint64_t f1,
                     const FrameRingView& ring, bool wait_flags, bool give_credits, uint64_t timeout_ns,
                     cudaStream_t stream, uint32_t lane = 0, bool reset_control = true, int max_blocks = 0,
                     uint64_t* done_word = nullptr, uint64_t done_value = 0, const P2PLaunchExtras& extras = {}) {
    if (ring.num_slots != slots_ || lane >= lanes_) return cudaErrorInvalidValue;
    p2p_detail::DeviceGuard g(device_);
    if (lanes_ == 1 && f0 < f1) {  // one launch at a time: one clear of the whole state (and the control words,
                                   // which follow it), not 3 + 2 per frame (each delays the kernel); by a kernel
                                   // (p2p_side_words_kernel)
      cudaError_t e = p2p_detail::side_words(state_.get(), nullptr,
                                             state_words() * 8 + (reset_control ? sizeof(SideControl) : 0), stream);
      if (e != cudaSuccess) return e;
      return launch_kernel(plan, out, seq_base, f0, f1, ring, wait_flags, give_credits, timeout_ns, stream, lane,
                           max_blocks, done_word, done_value, extras);
    }
    cudaError_t e = reset_control ? cudaMemsetAsync(control(), 0, sizeof(SideControl), stream) : cudaSuccess;
    if (e != cudaSuccess || f0 >= f1) return e;
    e = cudaMemsetAsync(state_.get(16 * 8 * size_t(lane)), 0, 8, stream);  // the lane's item counter
    if (e == cudaSuccess)
      e = p2p_detail::zero_slot_counters(state_.get<unsigned long long>(16 * 8 * size_t(lanes_)), 1, slots_,
                                         seq_base + f0, f1 - f0, stream);
    if (e == cudaSuccess)  // the leaders' mirrored flags too: a stale "q + 1" would let warps skip the wait
      e = p2p_detail::zero_slot_counters(state_.get<unsigned long long>((16 * size_t(lanes_) + slots_) * 8), 2, slots_,
                                         seq_base + f0, f1 - f0, stream);
    if (e != cudaSuccess) return e;
    return launch_kernel(plan, out, seq_base, f0, f1, ring, wait_flags, give_credits, timeout_ns, stream, lane,
                         max_blocks, done_word, done_value, extras);
  }
  SideControl* control() const { return state_.get<SideControl>(state_words() * 8); }
  cudaError_t reset() {
    p2p_detail::DeviceGuard g(device_);
    cudaError_t e = cudaMemset(state_.get(), 0, state_words() * 8 + sizeof(SideControl));
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
  }
  int device() const { return device_; }
  int blocks() const { return blocks_; }

 private:
  cudaError_t launch_kernel(const FramePlan& plan, void* out, uint64_t seq_base, uint64_t f0, uint64_t f1,
                            const FrameRingView& ring, bool wait_flags, bool give_credits, uint64_t timeout_ns,
                            cudaStream_t stream, uint32_t lane, int max_blocks,
                            uint64_t* done_word, uint64_t done_value, const P2PLaunchExtras& extras) {
    RecvArgs a;
    a.plan = plan;
    a.out = out;
    a.seq_base = seq_base;
    a.frame_begin = f0;
    a.frame_end = f1;
    a.ring = ring;
    a.wait_flags = wait_flags;
    a.give_credits = give_credits;
    a.launch_tag = next_tag();
    a.item_counter = state_.get<unsigned long long>(16 * 8 * size_t(lane));
    a.frames_done = state_.get<unsigned long long>(16 * 8 * size_t(lane) + 8);
    a.counters = state_.get<unsigned long long>(16 * 8 * size_t(lanes_));
    a.mirror = state_.get<uint64_t>((16 * size_t(lanes_) + slots_) * 8);
    a.frame_status = state_.get<uint32_t>((16 * size_t(lanes_) + 3 * size_t(slots_)) * 8);
    a.done_word = done_word;
    a.done_value = done_value;
    a.control = control();
    a.timeout_ns = timeout_ns;
    a.trace = extras.trace;
    a.poison = extras.poison;
    a.overflow_slots = extras.overflow_slots;
    a.exps_budget = extras.exps_budget;
    a.item_trace = extras.item_trace;
    const uint64_t items =
        (f1 < plan.num_frames ? plan.frame(f1).first_item : plan.num_items) - plan.frame(f0).first_item;
    const int cap = max_blocks > 0 ? std::min(max_blocks, blocks_) : blocks_;
    const int grid = int(std::min<uint64_t>(uint64_t(cap), format::div_up(items, P2PPolicy::WARPS)));
    p2p_recv_kernel<D, Code><<<grid, P2PPolicy::THREADS, smem_bytes(), stream>>>(a);
    return cudaGetLastError();
  }
  // per lane: 16 words (item counter, frames done); per slot: counter, 2 mirror words, frame_status (2 x u32)
  size_t state_words() const { return 16 * size_t(lanes_) + 4 * size_t(slots_) + 2; }
  uint32_t next_tag() {
    if (++tag_ == 0) ++tag_;
    return tag_;
  }
  p2p_detail::Memory state_;
  int device_ = 0, blocks_ = 0;
  uint32_t slots_ = 0, lanes_ = 1, tag_ = 0;
};

/// One message of a batch (HostStagingLink::transfer_many, PeerLink::transfer_many): n elements from src to dst.
struct P2PMessage {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t n = 0;
};

/// Pipelined raw copy through pinned host buffers: chunk i goes device -> host on the caller's stream while
/// chunk i - 1 goes host -> device on a second stream; a message of one chunk is just the two copies on the
/// caller's stream. The bypass of HostStagingLink, and the raw baseline of bench/bench_p2p.cu.
struct StagedRawCopy {
  /// A stretch of bytes to copy (run_segments).
  struct Segment {
    const void* src;
    void* dst;
    uint64_t bytes;
  };
  /// `buffers` chunks of `chunk_bytes` each at `host` (pinned); `events`: 2 * buffers + 2 events. Later work
  /// on `stream` sees dst complete.
  static cudaError_t run(const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes, uint8_t* host,
                         uint32_t buffers, cudaEvent_t* events, cudaStream_t stream, cudaStream_t h2d) {
    const Segment one = {src, dst, bytes};
    return run_segments(&one, 1, chunk_bytes, host, buffers, events, stream, h2d);
  }
  /// Many stretches as one pipeline: the chunks of every segment in turn share the host buffers, so the host ->
  /// device side of one segment overlaps the device -> host side of the next (no drain between segments). A
  /// chunk never spans two segments. Empty segments are skipped; a null pointer in a non-empty one is refused
  /// before anything is enqueued.
  static cudaError_t run_segments(const Segment* segs, size_t count, uint64_t chunk_bytes, uint8_t* host,
                                  uint32_t buffers, cudaEvent_t* events, cudaStream_t stream, cudaStream_t h2d) {
    if (count && !segs) return cudaErrorInvalidValue;
    uint64_t total = 0;
    size_t nonempty = 0, only = 0;
    for (size_t s = 0; s < count; ++s) {
      if (segs[s].bytes == 0) continue;
      if (!segs[s].src || !segs[s].dst) return cudaErrorInvalidValue;
      total += segs[s].bytes, ++nonempty, only = s;
    }
    if (total == 0) return cudaSuccess;
    if (!host || buffers == 0 || chunk_bytes == 0) return cudaErrorInvalidValue;
    if (nonempty == 1 && total <= chunk_bytes) {
      cudaError_t e = cudaMemcpyAsync(host, segs[only].src, total, cudaMemcpyDeviceToHost, stream);
      return e != cudaSuccess ? e : cudaMemcpyAsync(segs[only].dst, host, total, cudaMemcpyHostToDevice, stream);
    }
    cudaEvent_t* copied_out = events;           // chunk in the host buffer
    cudaEvent_t* copied_in = events + buffers;  // host buffer free again
    cudaEvent_t start = events[2 * buffers], done = events[2 * buffers + 1];
    cudaError_t e = cudaEventRecord(start, stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(h2d, start, 0);
    const cudaStream_t d2h = stream;
    uint64_t i = 0;  // chunks issued, over all segments
    for (size_t s = 0; s < count && e == cudaSuccess; ++s) {
      const uint8_t* src = static_cast<const uint8_t*>(segs[s].src);
      uint8_t* dst = static_cast<uint8_t*>(segs[s].dst);
      for (uint64_t off = 0; off < segs[s].bytes && e == cudaSuccess; off += chunk_bytes, ++i) {
        const uint32_t b = uint32_t(i % buffers);
        const uint64_t len = std::min(chunk_bytes, segs[s].bytes - off);
        uint8_t* hb = host + size_t(b) * chunk_bytes;
        if (i >= buffers) e = cudaStreamWaitEvent(d2h, copied_in[b], 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(hb, src + off, len, cudaMemcpyDeviceToHost, d2h);
        if (e == cudaSuccess) e = cudaEventRecord(copied_out[b], d2h);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(h2d, copied_out[b], 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(dst + off, hb, len, cudaMemcpyHostToDevice, h2d);
        if (e == cudaSuccess) e = cudaEventRecord(copied_in[b], h2d);
      }
    }
    if (e == cudaSuccess) e = cudaEventRecord(done, h2d);
    return e != cudaSuccess ? e : cudaStreamWaitEvent(stream, done, 0);
  }
};

/// Status of a transfer as seen by both ends and, in copy mode, the host relay: the first error.
inline Status transfer_status(Status relay, const SideControl& send, const SideControl& recv) {
  if (relay != Status::ok) return relay;
  if (recv.status) return Status(recv.status);  // what the reader got decides: report its error first
  if (send.status) return Status(send.status);
  return Status::ok;
}

namespace p2p_detail {

/// The status words of the transfers a link issued since its last wait(), one record per transfer (pinned):
/// transfers are enqueued without waiting (a weight sync issues one per bucket), and a later transfer must not
/// overwrite an earlier one's error, so wait() can report the first error of all of them. A record is read
/// only after the streams that copy into it were synchronized; when all RECORDS are in use, the link
/// synchronizes and folds them into the log's first error before it issues the next transfer.
class TransferStatusLog {
 public:
  static constexpr uint32_t RECORDS = 64;
  struct Record {
    SideControl side[2];  // [0] sender, [1] receiver: copied from the GPU after the transfer
    Status relay;         // the host relay's status (copy mode)
  };
  cudaError_t init() {
    clear();
    // Mapped: the sides' status words are written into a record by a kernel (p2p_side_words_kernel).
    cudaError_t e = memory_.pinned(RECORDS * sizeof(Record), cudaHostAllocMapped | cudaHostAllocPortable);
    void* dev = nullptr;
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&dev, memory_.get(), 0);
    device_base_ = static_cast<uint8_t*>(dev);
    return e;
  }
  /// The GPU's address of a record's words (where a kernel writes them).
  void* device_alias(const void* host) const {
    return device_base_ + (static_cast<const uint8_t*>(host) - memory_.get());
  }
  /// Before a transfer is issued: with every record in use, synchronizes the link (`synchronize()`, a
  /// cudaError_t) and folds the records into the log's first error; an error among them refuses the transfer
  /// (cudaErrorInvalidValue) and sets `broken`, the error kept for wait() (collect).
  template <class Synchronize>
  cudaError_t make_room(Synchronize&& synchronize, bool& broken) {
    if (pending_ < RECORDS) return cudaSuccess;
    const cudaError_t e = synchronize();
    if (e != cudaSuccess) return e;
    first_ = fold();
    if (first_ == Status::ok) return cudaSuccess;
    broken = true;
    return cudaErrorInvalidValue;
  }
  /// The next transfer's record, cleared (its sides' words are copied into side[]).
  Record& next() {
    Record& r = memory_.get<Record>()[pending_++];
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.relay = Status::ok;
    return r;
  }
  /// The first error of every transfer since the last collect() in issue order, and an empty log. The streams
  /// that wrote the records must be synchronized.
  Status collect() {
    const Status s = fold();
    clear();
    return s;
  }
  void clear() {
    pending_ = 0;
    first_ = Status::ok;
  }

 private:
  /// The first error of first_ and the records, which it empties.
  Status fold() {
    Status first = first_;
    const Record* r = memory_.get<Record>();
    for (uint32_t i = 0; i < pending_ && first == Status::ok; ++i)
      first = transfer_status(r[i].relay, r[i].side[0], r[i].side[1]);
    pending_ = 0;
    return first;
  }

  Memory memory_;
  uint8_t* device_base_ = nullptr;  // memory_ as the GPU addresses it
  uint32_t pending_ = 0;
  Status first_ = Status::ok;  // the first error of records already folded (make_room)
};

}  // namespace p2p_detail

/// Who schedules a HostStagingLink's copies. In both modes the sender kernel codes each frame into GPU memory and
/// the copy engines move it GPU -> pinned ring -> GPU, planes as soon as they are split, section B once complete.
///  stream: the GPU (the default; fastest measured). Persistent sender and receiver kernels; the copy streams
///          wait for the sender's flags (cuStreamWaitValue64, through a gate stream's event) and a stream of its
///          own writes each frame's "landed" flag (cuStreamWriteValue64), which the receiver waits for before it
///          decodes in GPU memory. Section B moves up to a budget by fixed-size copies, the rest (the overflow) by
///          SM stores and loads through the pinned ring. transfer() returns once everything is enqueued.
///  copy:   a host relay inside transfer(): it polls the sender's flags in pinned memory, issues each frame's
///          copies with section B's exact length and one decode launch per frame, and returns once every frame
///          is enqueued. The fallback where the GPU or driver lacks 64-bit stream memory operations: init() picks
///          it then, and tests force it. 0.84-1.1x the raw copy on the H200, below stream mode's 1.34-1.38x.
enum class HostLinkMode : uint8_t { stream = 1, copy = 2 };

/// One measurement of a link's calibrate() (HostStagingLink, PeerLink): median times of a coded and a raw
/// transfer of `bytes`.
struct P2PCalibrationPoint {
  uint64_t bytes;
  double coded_ms, raw_ms;
};

/// GPU -> pinned host ring -> GPU (src and dst on one GPU here; the ring is portable pinned memory).
/// \code
/// zipcomm::comm::HostStagingLink<zipcomm::DType::bf16> link;
/// link.init(0);                                   // GPU 0 sends and receives; stream mode where it can run
/// link.transfer(d_src, d_dst, n, stream);         // coded, or raw below link.bypass_threshold()
/// zipcomm::Status s = link.wait();                // synchronizes; ok once every element arrived intact
/// \endcode
/// Transfers on one link are serialized (issue them on one stream, or order the streams); issue many, then one
/// wait() reports the first error of all of them. Many messages that go together (a weight sync's buckets) are
/// best sent with transfer_many(): one pipeline, the start and drain paid once. After an error, reset() before the
/// next transfer.
template <DType D, class Code = thread::PairCode>
class HostStagingLink {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  static constexpr uint32_t RAW_BUFFERS = 4;
  // Stream mode: a coded transfer's first and last bytes go raw (at most a quarter of it each, whole 4 KiB, and
  // half the raw staging), one copy each way: they keep the copy engines busy while the first frame is split and
  // while the last frames land and decode.
  static constexpr uint64_t RAW_HEAD_BYTES = uint64_t(2) << 20;  // 2.2-2.5% faster at 64 MiB, 1.1-1.3% at 128 MiB
  static constexpr uint64_t RAW_TAIL_BYTES = uint64_t(2) << 20;  // 1.072 / 2.022 ms at 64 / 128 MiB, none 1.089 / 2.035
  static constexpr uint32_t COPY_DECODE_STREAMS = 4;             // copy mode: frames decoding at once

  HostStagingLink() = default;
  HostStagingLink(const HostStagingLink&) = delete;
  HostStagingLink& operator=(const HostStagingLink&) = delete;
  ~HostStagingLink() { destroy(); }

  /// Stream mode where this GPU and driver have 64-bit stream memory operations, else copy mode (mode() says
  /// which runs); HostLinkMode::copy forces copy mode.
  cudaError_t init(int device, const P2POptions& opt = P2POptions(), HostLinkMode mode = HostLinkMode::stream) {
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

  /// Sends n elements from src to dst (both device memory of this GPU, any alignment), stream-ordered
  /// after prior work on `stream`; work later on `stream` sees dst complete (every frame decoded). Coded
  /// when the message has at least bypass_threshold() bytes, raw (pipelined copy) below.
  cudaError_t transfer(const void* src, void* dst, uint64_t n, cudaStream_t stream) {
    return use_bypass(n * format::elem_bytes(D), bypass_) ? transfer_raw(src, dst, n, stream)
                                                          : transfer_coded(src, dst, n, stream);
  }

  /// The coded pipeline, whatever the size.
  cudaError_t transfer_coded(const void* src, void* dst, uint64_t n, cudaStream_t stream) {
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

  /// Sends `count` messages in order as one pipeline: the RL weight-sync case of many tensors or buckets sent
  /// back to back. Stream-ordered after prior work on `stream`; later work on `stream` sees every dst complete
  /// (nothing on `stream` sees part of the batch). In stream mode the messages' frames follow each other through
  /// the ring with no drain between them, so the pipeline's start (the first split, the raw head) and end (the
  /// one-piece lag, the last decodes, the raw tail) are paid once per batch, not once per message; the inner
  /// messages are cut in full items only (fine tiers only at the batch's end) and the copy pieces are sized from
  /// the whole batch. The batch goes raw (one pipelined copy of all of it, transfer_raw_many) when its total is
  /// below bypass_threshold(); coded otherwise, every message, whatever its size. In copy mode each message goes
  /// as transfer() sends it. Every message is checked before anything is enqueued (a bad one refuses the
  /// whole batch: cudaErrorInvalidValue); empty messages are skipped. wait() reports the first error of all of
  /// them. A batch of more than TransferStatusLog::RECORDS messages makes the host wait for the link every
  /// RECORDS messages (the pipeline drains there).
  cudaError_t transfer_many(const P2PMessage* msgs, size_t count, cudaStream_t stream) {
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

  /// The raw pipelined copy (the bypass), whatever the size. A message of one chunk is two copies on
  /// `stream` (what a raw transfer costs at best); larger ones overlap the two directions.
  cudaError_t transfer_raw(const void* src, void* dst, uint64_t n, cudaStream_t stream) {
    cudaError_t e = check(src, dst, n);
    if (e != cudaSuccess) return e;
    p2p_detail::DeviceGuard g(device_);
    raw_pending_ = true;
    raw_stream_ = stream;
    const uint64_t bytes = n * format::elem_bytes(D);
    return StagedRawCopy::run(src, dst, bytes, raw_chunk_for(bytes), raw_buffers_.get(), RAW_BUFFERS, raw_events(),
                              stream, raw_stream());
  }

  /// The raw pipelined copy of a batch (transfer_many's bypass, and its baseline): every message's chunks in turn
  /// through the same staging, so one message's host -> device side overlaps the next one's device -> host side.
  /// The same checks and stream order as transfer_many.
  cudaError_t transfer_raw_many(const P2PMessage* msgs, size_t count, cudaStream_t stream) {
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

  /// Chunk of the raw copy for a message: the chunk calibrate() measured best for its size class (powers of
  /// two), else one chunk (two copies) when small, else about an eighth of it (both directions overlap; on the
  /// H200's PCIe link that was the best chunk from 1 MiB up), 128 KiB .. options().raw_chunk_bytes.
  uint64_t raw_chunk_for(uint64_t bytes) const {
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

  /// Waits for every transfer issued since the last wait(); the first error among them in issue order (ok only
  /// when every element of every one arrived and decoded intact). After an error the link refuses transfers
  /// until reset().
  Status wait() {
    if (!ready_) return Status::invalid_argument;
    p2p_detail::DeviceGuard g(device_);
    if (raw_pending_ && cudaStreamSynchronize(raw_stream_) != cudaSuccess) return Status::invalid_argument;
    if (synchronize() != cudaSuccess) return Status::invalid_argument;
    const Status s = log_.collect();
    const bool adapt = adapt_pending_;
    raw_pending_ = adapt_pending_ = false;
    if (s != Status::ok) broken_ = true;
    if (s == Status::ok && adapt) adapt_budget();
    return s;
  }

  /// Clears rings and state after an error (sequence numbers restart). Waits for the link to be idle.
  cudaError_t reset() {
    p2p_detail::DeviceGuard g(device_);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = ring_.reset();
    if (e == cudaSuccess) e = sender_.reset();
    if (e == cudaSuccess) e = receiver_.reset();
    if (e == cudaSuccess && mode_ == HostLinkMode::stream) e = cudaMemset(stream_flags_.get(), 0, size_t(opt_.slots) * 32);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();  // the memset above is not ordered before the link's streams
    next_seq_ = 0;
    broken_ = false;
    relay_status_ = Status::ok;
    raw_pending_ = adapt_pending_ = false;
    log_.clear();
    return e;
  }

  /// Measures coded and raw transfers of `sample` (elements on this GPU, tiled when shorter) at sizes
  /// 64 KiB .. max_bytes: picks the raw copy's best chunk for each size class, and sets the bypass threshold to
  /// the smallest size from which coding is at least 3% faster at every measured size. Returns the first error.
  cudaError_t calibrate(const void* sample, uint64_t sample_elems, uint64_t max_bytes = uint64_t(256) << 20) {
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
      auto median = [](std::vector<float> v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 1e30 : double(v[v.size() / 2]);
      };
      double best_ms = median(ms[0]);
      uint64_t best_chunk = chunks[0];
      const double first_ms = best_ms;
      for (size_t k = 1; k < K; ++k) {
        const double m = median(ms[k]);
        if (m < best_ms && m < 0.99 * first_ms) best_ms = m, best_chunk = chunks[k];
      }
      const int cls = size_class(bytes);
      if (cls >= 0 && cls < int(RAW_CLASSES)) raw_best_[cls] = best_chunk;
      double t[2] = {0, 0};
      for (int which = 0; which < 2 && e == cudaSuccess; ++which) {
        std::vector<float> ms;
        for (int rep = 0; rep < 6 && e == cudaSuccess; ++rep) {
          e = cudaEventRecord(a, st);
          if (e == cudaSuccess)
            e = which == 0 ? transfer_coded(src.get(), dst.get(), bytes / eb, st)
                           : transfer_raw(src.get(), dst.get(), bytes / eb, st);
          if (e == cudaSuccess) e = cudaEventRecord(b, st);
          if (e == cudaSuccess) e = cudaEventSynchronize(b);
          float m = 0;
          if (e == cudaSuccess) e = cudaEventElapsedTime(&m, a, b);
          if (e == cudaSuccess && wait() != Status::ok) e = cudaErrorUnknown;
          if (rep > 0) ms.push_back(m);  // the first is a warm-up
        }
        if (!ms.empty()) {
          std::sort(ms.begin(), ms.end());
          t[which] = ms[ms.size() / 2];
        }
      }
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
  /// What the last calibrate() measured: per size, the coded and the raw transfer (ms, medians).
  const std::vector<P2PCalibrationPoint>& calibration() const { return points_; }
  /// The raw copy's chunk calibrate() picked for messages of `bytes` (0: none measured, the default rule).
  uint64_t calibrated_raw_chunk(uint64_t bytes) const {
    const int cls = size_class(bytes);
    return cls >= 0 && cls < int(RAW_CLASSES) ? raw_best_[cls] : 0;
  }

  /// For tuning: per-frame %globaltimer stamps of the next coded transfers (TRACE_STAMPS words per frame each
  /// side, see SendArgs::trace and RecvArgs::trace; device memory of this GPU, room for the largest transfer's
  /// frames); with `recv_item_trace`, also ITEM_TRACE_STAMPS words per item for the receiver (RecvArgs::item_trace;
  /// room for the largest transfer's items; a batch, transfer_many, stamps its messages' frames and items one after
  /// the other: room for all of them). nullptr turns it off.
  void set_trace(uint64_t* send_trace, uint64_t* recv_trace, uint64_t* recv_item_trace = nullptr) {
    send_trace_ = send_trace;
    recv_trace_ = recv_trace;
    recv_item_trace_ = recv_item_trace;
  }
  /// For tuning, stream mode: the next coded transfers record `events` (timing-enabled, this GPU; `count` of
  /// them): [0] on the sender's stream before its launch, then 8 per frame (a batch's frames one after the
  /// other): before and after the device -> host copy of its planes, before and after their host -> device copy,
  /// then the same for section B. Copies of frames past the events' room are not marked. nullptr turns it off.
  void set_copy_trace(cudaEvent_t* events, size_t count) {
    copy_trace_ = events;
    copy_trace_count_ = events ? count : 0;
  }

  /// Stream mode: elements of an n-element coded transfer sent raw ahead of the frames (RAW_HEAD_BYTES; at most
  /// a quarter of the message and half the raw staging, in whole 4 KiB, so the coded rest keeps the buffers'
  /// alignment); the frames carry the other n - raw_head_elems(n). 0 in copy mode.
  uint64_t raw_head_elems(uint64_t n) const { return raw_edge_elems(RAW_HEAD_BYTES, n); }
  /// Stream mode: elements at the end of an n-element coded transfer sent raw after the frames (RAW_TAIL_BYTES, the
  /// same rule as the head's); the frames carry the elements between the two.
  uint64_t raw_tail_elems(uint64_t n) const { return raw_edge_elems(RAW_TAIL_BYTES, n); }

  void set_bypass_threshold(uint64_t bytes) { bypass_ = bytes; }
  uint64_t bypass_threshold() const { return bypass_; }
  /// Stream mode: the section-B budget the next transfer's fixed-size copies use (adapted by wait()).
  const ExpsBudget& exps_budget() const { return budget_; }
  /// What the copy engines moved each way for the last coded transfer (stream mode: or batch): planes and section B
  /// of each frame (stream mode: section B up to its budget; an overflow, moved by SMs, is not counted) and the raw
  /// head and tail.
  uint64_t wire_bytes() const { return wire_bytes_; }
  HostLinkMode mode() const { return mode_; }
  const P2POptions& options() const { return opt_; }

 private:
  /// The raw head's or tail's elements for `bytes` asked: at most a quarter of the message and half the raw
  /// staging (the head's and the tail's bytes share it), whole 4 KiB.
  uint64_t raw_edge_elems(uint64_t bytes, uint64_t n) const {
    if (mode_ != HostLinkMode::stream) return 0;
    const uint64_t eb = format::elem_bytes(D);
    const uint64_t most = std::min(RAW_BUFFERS * opt_.raw_chunk_bytes / 2, n * eb / 4);
    return std::min(bytes, most) / 4096 * 4096 / eb;
  }
  cudaStream_t send_stream() const { return streams_[0]; }
  cudaStream_t recv_stream() const { return streams_[1]; }
  cudaStream_t raw_stream() const { return streams_[2]; }
  cudaStream_t d2h_stream() const { return streams_[3]; }
  /// Copy mode: frame f decodes on decode stream f % COPY_DECODE_STREAMS.
  cudaStream_t decode_stream(uint32_t k) const { return streams_[4 + k]; }
  /// Stream mode: the host -> device copies; the "landed" flags' writes (a stream of their own: on the copy
  /// stream such a write was seen 35-250 us late, behind the next copy); the gates, where the copy streams wait
  /// for a flag through an event (k 0: the sender's flags, 1: the receiver's credits).
  cudaStream_t h2d_stream() const { return streams_[4]; }
  cudaStream_t signal_stream() const { return streams_[5]; }
  cudaStream_t gate_stream(uint32_t k) const { return streams_[6 + k]; }
  // events: [0] caller's start, [1] send side done, [2] receive side done, [3] joins; then per slot: section B
  // copied to the device, frame decoded (copy mode), planes and section B copied to the host; then the raw
  // copy's events, the copy pieces' event, per slot the three gate events (gate_events), and the sides' side_done.
  cudaEvent_t& ev(size_t i) { return events_[i]; }
  cudaEvent_t* h2d_done() { return &events_[4]; }
  cudaEvent_t* decode_done() { return &events_[4 + opt_.slots]; }
  cudaEvent_t* d2h_planes_done() { return &events_[4 + 2 * size_t(opt_.slots)]; }
  cudaEvent_t* d2h_done() { return &events_[4 + 3 * size_t(opt_.slots)]; }
  cudaEvent_t* raw_events() { return &events_[4 + 4 * size_t(opt_.slots)]; }
  cudaEvent_t& piece_done() { return events_[4 + 4 * size_t(opt_.slots) + 2 * RAW_BUFFERS + 2]; }
  /// The last two: each side's work done, before the copy of its status words (what the caller's stream waits on).
  cudaEvent_t& side_done(uint32_t side) { return events_[events_.size() - 2 + side]; }
  /// Stream mode, per slot: [kind][slot], kind 0 planes flag, 1 exponents flag, 2 credit.
  cudaEvent_t* gate_events(uint32_t kind) {
    return &events_[4 + 4 * size_t(opt_.slots) + 2 * RAW_BUFFERS + 3 + kind * size_t(opt_.slots)];
  }

  cudaError_t check(const void* src, const void* dst, uint64_t n) const {
    if (!ready_ || broken_) return cudaErrorInvalidValue;  // after an error: reset() first
    if ((n && (!src || !dst)) || n > (uint64_t(1) << 40)) return cudaErrorInvalidValue;
    return cudaSuccess;
  }

  cudaError_t check_many(const P2PMessage* msgs, size_t count) const {
    if (!ready_ || broken_ || (count && !msgs)) return cudaErrorInvalidValue;
    for (size_t i = 0; i < count; ++i) {
      const cudaError_t e = check(msgs[i].src, msgs[i].dst, msgs[i].n);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }

  /// Every stream of the link.
  cudaError_t synchronize() {
    for (cudaStream_t st : streams_) {
      const cudaError_t e = cudaStreamSynchronize(st);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }

  /// Joins every stream of the link into the two sides' streams and marks both sides done (side_done): what
  /// the caller's stream waits on.
  cudaError_t join_sides() {
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
  /// After join_sides(): the next transfer's streams (ev(1), ev(2), and the raw staging's users) and the caller's
  /// stream wait for everything issued so far.
  cudaError_t hand_over(cudaStream_t stream) {
    cudaError_t f = cudaEventRecord(ev(1), send_stream());
    if (f == cudaSuccess) f = cudaEventRecord(ev(2), recv_stream());
    if (f == cudaSuccess) f = cudaStreamWaitEvent(stream, side_done(0), 0);
    if (f == cudaSuccess) f = cudaStreamWaitEvent(stream, side_done(1), 0);
    return f;
  }
  /// A batch cut short: the caller's stream waits for the messages already issued.
  cudaError_t join_caller(cudaStream_t stream) {
    const cudaError_t f = join_sides();
    return f != cudaSuccess ? f : hand_over(stream);
  }

  /// After a transfer's work is enqueued: its sides' status words are copied into its log record, and (`join`)
  /// the caller's stream waits for both sides. A batch's inner messages (transfer_many) do not join: the next
  /// message's work follows on the link's streams, and the caller's stream waits once, after the last; they
  /// leave ev(1), ev(2) as the batch found them, so its raw tail waits only for what came before the batch.
  cudaError_t finish(cudaStream_t stream, cudaError_t e, bool join = true) {
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
      f = p2p_detail::side_words(log_.device_alias(&host[0]), sender_.control(), sizeof(SideControl), send_stream());
    if (f == cudaSuccess)
      f = p2p_detail::side_words(log_.device_alias(&host[1]), receiver_.control(), sizeof(SideControl), recv_stream());
    if (f == cudaSuccess && join) f = hand_over(stream);
    return e != cudaSuccess ? e : f;
  }

  /// A transfer's (or a batch's) first work: the link's streams wait for the caller's prior work (ev(0)) and
  /// for the previous transfer (ev(1), ev(2)); transfers are serialized.
  cudaError_t start_after(cudaStream_t stream) {
    cudaError_t e = cudaEventRecord(ev(0), stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(send_stream(), ev(0), 0);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(recv_stream(), ev(0), 0);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(send_stream(), ev(2), 0);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(recv_stream(), ev(1), 0);
    return e;
  }

  /// Where a message sits in a batch (transfer_many): only the first has a raw head, split-sends its first frame
  /// and holds later frames' splits back until that frame's planes are out (SendArgs::first_frame_planes_first:
  /// 0.3-0.5% faster at 64 and 128 MiB) and a shape head; only the last has a raw tail and the fine tiers; `piece`
  /// (0: from the message's own plan) sizes the copy pieces. A lone transfer is both.
  struct BatchEdges {
    bool first = true, last = true;
    uint64_t piece = 0;
  };
  PipelineShape batch_shape(const BatchEdges& x) const {
    PipelineShape s = opt_.shape;
    if (!x.first) s.head.region_elems = 0;
    if (!x.last) s.num_tiers = 1;  // full items only: the drain that finer items shorten is the batch's end
    return s;
  }

  /// One coded message after start_after(): `e` is what came before (an error skips to finish()).
  cudaError_t issue_coded(const void* src, void* dst, uint64_t n, cudaStream_t stream, cudaError_t e,
                          const BatchEdges& edges) {
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
    e = sender_.launch(plan, src, seq_base, 0, plan.num_frames, ring, true, opt_.timeout_ns, send_stream(),
                       send_extras());
    if (e != cudaSuccess) return finish(stream, e, true);
    for (uint32_t k = 0; k < COPY_DECODE_STREAMS && e == cudaSuccess; ++k) {  // decodes follow the control reset
      e = cudaEventRecord(ev(3), recv_stream());
      if (e == cudaSuccess) e = cudaStreamWaitEvent(decode_stream(k), ev(3), 0);
    }
    if (e == cudaSuccess) e = relay(plan, dst, seq_base);
    return finish(stream, e, true);
  }

  /// Launch settings of one side: its trace, and in stream mode the flags its copy streams wait on (poisoned if
  /// this side aborts: the sender's planes and exponents flags, the receiver's credits), the overflow area, the
  /// budget, and (sender) the first frame's split first.
  P2PLaunchExtras extras(bool sender) const {
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
  P2PLaunchExtras send_extras() const { return extras(true); }
  P2PLaunchExtras recv_extras() const { return extras(false); }

  /// Stream mode's ring: the pinned slots, with its flags in GPU memory. Block of stream_flags_: [ready_planes |
  /// ready_exps | credits | landed], num_slots words each.
  FrameRingView stream_ring() const {
    FrameRingView v = ring_.view();
    uint64_t* f = stream_flags_.get<uint64_t>();
    v.ready_planes = f;
    v.ready_exps = f + v.num_slots;
    v.credits = f + 2 * size_t(v.num_slots);
    return v;
  }

  /// Stream mode (see HostLinkMode): launches the persistent sender and receiver, then enqueues each frame's
  /// fixed-size copies between flag operations; nothing here waits for the GPU. The batch's first frame is
  /// split-sent: its planes are copied as soon as the sender published them (no split-send: 1.419-1.440 ms at
  /// 64 MiB against 1.286-1.300), its section B up to the budget once the frame is complete. Every later frame
  /// goes as one copy per direction of its planes and section-B budget, once complete: the sender is ahead of the
  /// link by then, and each copy costs the copy engine a few microseconds (1.6% faster at 256 MiB than splitting
  /// every frame). The h2d stream copies each frame on, and the signal stream then writes its "landed" flag.
  /// Slots are reused safely: the sender waits for the receiver's credit; the d2h copies into a pinned slot wait
  /// for the h2d copy of the slot's previous frame (event); the h2d copy waits for that frame's credit (its device
  /// slot). The first `raw_head` elements and the last `raw_tail` go raw; the frames carry the rest. In a batch
  /// (`edges`), the messages' copies follow each other on the same streams.
  cudaError_t schedule_stream(const FramePlan& plan, const void* src_all, void* dst_all, uint64_t seq_base,
                              uint64_t raw_head, uint64_t raw_tail, const BatchEdges& edges) {
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
    P2PLaunchExtras sx = send_extras();
    sx.first_frame_planes_first = edges.first;
    if (e == cudaSuccess)
      e = sender_.launch(plan, src, seq_base, 0, F, send_view, true, opt_.timeout_ns, send_stream(), sx);
    if (e == cudaSuccess)
      e = receiver_.launch(plan, dst, seq_base, 0, F, recv_view, true, true, opt_.timeout_ns, recv_stream(), 0, true,
                           0, nullptr, 0, recv_extras());
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

  /// Stream mode: the largest copy of a transfer (0: whole parts): copy_piece_bytes, or with
  /// copy_pieces_per_transfer a share of what the copy engines will move (planes and section-B budgets), at least
  /// copy_piece_bytes.
  uint64_t stream_piece_bytes(const FramePlan& plan) const { return stream_piece_bytes_for(planned_wire_bytes(plan)); }
  uint64_t stream_piece_bytes_for(uint64_t wire) const {
    if (!opt_.copy_pieces_per_transfer) return opt_.copy_piece_bytes;
    const uint64_t grain = uint64_t(64) << 10;
    const uint64_t least = opt_.copy_piece_bytes ? opt_.copy_piece_bytes : uint64_t(256) << 10;
    return std::max(least, format::div_up(wire / opt_.copy_pieces_per_transfer, grain) * grain);
  }
  /// What the copy engines move for a plan's frames (planes and section-B budgets).
  uint64_t planned_wire_bytes(const FramePlan& plan) const {
    uint64_t wire = 0;
    for (uint64_t f = 0; f < plan.num_frames; ++f) {
      const FrameInfo fi = plan.frame(f);
      wire += fi.planes_bytes + exps_budget_bytes(fi, budget_);
    }
    return wire;
  }

  /// Stream mode, after a transfer that went well: sizes each tier's section-B budget from what its frames
  /// needed (the sender keeps the per-tier maximum in GPU memory), a margin over the largest (options), so
  /// the next transfers of similar data move nearly everything with the fixed-size copies.
  void adapt_budget() {
    // On the sender's stream (already idle here): a plain cudaMemcpy would also wait for the caller's other
    // work on the legacy stream's device.
    uint32_t need[EXPS_BUDGET_CLASSES] = {};
    if (cudaMemcpyAsync(need, sender_.exps_need(), sizeof need, cudaMemcpyDeviceToHost, send_stream()) == cudaSuccess &&
        cudaStreamSynchronize(send_stream()) == cudaSuccess)
      budget_ = adapt_exps_budget(budget_, need, opt_.exps_budget_margin_permille, opt_.exps_budget_margin_per_kelem);
  }

  /// Copy mode's host relay: as each frame's planes, then its section B, are published, copy them from the
  /// sender's device ring to the pinned ring and on to the device ring, and launch the frame's decode; hand the
  /// sender's slots back once their copies are done. Bounded: no progress for timeout_ns gives Status::timeout.
  cudaError_t relay(const FramePlan& plan, void* dst, uint64_t seq_base) {
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
        if (e == cudaSuccess)
          e = receiver_.launch(plan, dst, seq_base, next_exps, next_exps + 1, dev_ring, false, false,
                               opt_.timeout_ns, decode_stream(lane), lane, false,
                               int(std::max<uint64_t>(1, format::div_up(fi.items, P2PPolicy::WARPS))));
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

  void destroy() {
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

  P2POptions opt_;
  HostLinkMode mode_ = HostLinkMode::stream;
  int device_ = 0;
  bool ready_ = false, broken_ = false;
  bool raw_pending_ = false;    // a raw transfer since the last wait(), on raw_stream_ (the caller's)
  bool adapt_pending_ = false;  // a coded stream-mode transfer of n > 0 since the last wait(): adapt the budget
  cudaStream_t raw_stream_ = nullptr;
  uint64_t bypass_ = 0, next_seq_ = 0, wire_bytes_ = 0;
  Status relay_status_ = Status::ok;  // the host relay's, of the transfer being issued
  p2p_detail::TransferStatusLog log_;
  FrameRing ring_;
  p2p_detail::Memory dev_ring_, dev_send_, raw_buffers_, stream_flags_;
  p2p_detail::StreamMemOps mem_ops_;
  // Raw copy chunk measured best per size class (class k: [2^k, 2^(k+1)) bytes; 0: not measured).
  static constexpr uint32_t RAW_CLASSES = 48;
  uint64_t raw_best_[RAW_CLASSES] = {};
  std::vector<P2PCalibrationPoint> points_;
  static int size_class(uint64_t bytes) {
    int k = -1;
    while (bytes) bytes >>= 1, ++k;
    return k;
  }
  ExpsBudget budget_;  // stream mode: section B bytes per 1024 elements the fixed-size copies move, per tier
  uint64_t *send_trace_ = nullptr, *recv_trace_ = nullptr, *recv_item_trace_ = nullptr;
  cudaEvent_t* copy_trace_ = nullptr;
  uint64_t trace_frames_before_ = 0, trace_items_before_ = 0;  // a batch's frames and items before this message
  uint64_t batch_head_bytes_ = 0;  // stream mode: raw staging bytes the batch's raw head holds (its first message's)
  size_t copy_trace_count_ = 0;
  P2PSender<D, Code> sender_;
  P2PReceiver<D, Code> receiver_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;
};


/// Peer GPU memory: the sender's SMs write frames straight into a ring in the receiver's GPU memory (NVLink
/// or PCIe peer writes), flags included; the receiver decodes them in place and writes its credits back into
/// the sender's GPU memory. Both kernels are persistent: no host involvement. send_device == recv_device
/// works too (one GPU; used by the tests on one-GPU machines). Below bypass_threshold() a transfer is one
/// cudaMemcpyPeerAsync; calibrate() measures where coding pays on the link (over NVLink it may never).
template <DType D, class Code = thread::PairCode>
class PeerLink {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  PeerLink() = default;
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;
  ~PeerLink() { destroy(); }

  cudaError_t init(int send_device, int recv_device, const P2POptions& opt = P2POptions()) {
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

  /// Sends n elements from src (send device) to dst (receive device): coded from bypass_threshold() bytes up,
  /// one cudaMemcpyPeerAsync below. Ordered after prior work on send_stream (on the send device) and
  /// recv_stream (on the receive device); later work on recv_stream sees dst complete.
  cudaError_t transfer(const void* src, void* dst, uint64_t n, cudaStream_t send_stream, cudaStream_t recv_stream) {
    const P2PMessage m = {src, dst, n};
    return move_many(&m, 1, send_stream, recv_stream, use_bypass(n * format::elem_bytes(D), bypass_));
  }
  /// The coded pipeline, whatever the size.
  cudaError_t transfer_coded(const void* src, void* dst, uint64_t n, cudaStream_t send_stream,
                             cudaStream_t recv_stream) {
    const P2PMessage m = {src, dst, n};
    return move_many(&m, 1, send_stream, recv_stream, false);
  }
  /// The raw copy (one cudaMemcpyPeerAsync, the bypass), whatever the size.
  cudaError_t transfer_raw(const void* src, void* dst, uint64_t n, cudaStream_t send_stream, cudaStream_t recv_stream) {
    const P2PMessage m = {src, dst, n};
    return move_many(&m, 1, send_stream, recv_stream, true);
  }

  /// \brief Sends a batch of messages back to back as one pipeline (a weight sync's buckets): message k + 1's
  /// sender codes while message k's receiver still decodes, so the pipeline fills and drains once per batch, not
  /// once per message. Coded, every message, when the batch's total is at least bypass_threshold(); one
  /// cudaMemcpyPeerAsync per message otherwise. Every message is checked before anything is enqueued (a bad one
  /// refuses the whole batch: cudaErrorInvalidValue); empty messages are skipped. Stream order as transfer():
  /// later work on recv_stream sees every message complete. wait() reports the first error of all of them. A
  /// batch of more than TransferStatusLog::RECORDS messages makes the host wait for the link every RECORDS
  /// messages.
  cudaError_t transfer_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream, cudaStream_t recv_stream) {
    const cudaError_t e = check_many(msgs, count);
    if (e != cudaSuccess) return e;
    const uint64_t total = total_bytes(msgs, count);
    if (total == 0) return cudaSuccess;
    return move_many(msgs, count, send_stream, recv_stream, use_bypass(total, bypass_));
  }
  /// The raw copies of a batch (transfer_many's bypass, and its baseline): one cudaMemcpyPeerAsync per message.
  cudaError_t transfer_raw_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream,
                                cudaStream_t recv_stream) {
    const cudaError_t e = check_many(msgs, count);
    if (e != cudaSuccess) return e;
    if (total_bytes(msgs, count) == 0) return cudaSuccess;
    return move_many(msgs, count, send_stream, recv_stream, true);
  }

  /// \brief Measures coded and raw transfers (transfer_coded, transfer_raw) between this link's devices at 64 KiB,
  /// 128 KiB, ... up to max_bytes, and sets the bypass threshold to the smallest size from which coding is at
  /// least 3% faster at that and every larger measured size (choose_bypass_threshold; UINT64_MAX, "never
  /// code", when coding loses at the largest size). Data: `sample` (sample_elems elements anywhere the GPU can
  /// read: device or host memory) tiled to max_bytes. Time of one transfer: CUDA events on a receive-device
  /// stream, from before the send side starts until the receiver holds every decoded element; median of 5
  /// after a warm-up. Allocates max_bytes on each device for the duration, blocks the host; call with no
  /// transfer in flight. calibration() returns the measurements. A transfer that fails gives cudaErrorUnknown
  /// (the link then needs reset()).
  cudaError_t calibrate(const void* sample, uint64_t sample_elems, uint64_t max_bytes = uint64_t(256) << 20) {
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
      for (int which = 0; which < 2 && e == cudaSuccess; ++which) {
        std::vector<float> ms;
        for (int rep = 0; rep < 6 && e == cudaSuccess; ++rep) {
          {
            p2p_detail::DeviceGuard g(recv_dev_);
            e = cudaEventRecord(a, st[1]);
          }
          if (e == cudaSuccess) {
            p2p_detail::DeviceGuard g(send_dev_);
            e = cudaStreamWaitEvent(st[0], a, 0);  // the send side starts after the timer
          }
          const P2PMessage msg = {src.get(), dst.get(), bytes / eb};
          if (e == cudaSuccess) e = move_many(&msg, 1, st[0], st[1], which == 1);
          float m = 0;
          {
            p2p_detail::DeviceGuard g(recv_dev_);
            if (e == cudaSuccess) e = cudaEventRecord(b, st[1]);
            if (e == cudaSuccess) e = cudaEventSynchronize(b);
            if (e == cudaSuccess) e = cudaEventElapsedTime(&m, a, b);
          }
          if (e == cudaSuccess && wait() != Status::ok) e = cudaErrorUnknown;
          if (rep > 0) ms.push_back(m);  // the first is a warm-up
        }
        if (!ms.empty()) {
          std::sort(ms.begin(), ms.end());
          t[which] = ms[ms.size() / 2];
        }
      }
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
  /// The last calibrate()'s measurements, by size (empty before one).
  const std::vector<P2PCalibrationPoint>& calibration() const { return points_; }

  /// Waits for every transfer issued since the last wait(); the first error among them in issue order. After
  /// an error the link refuses transfers until reset().
  Status wait() {
    if (!ready_) return Status::invalid_argument;
    if (synchronize() != cudaSuccess) return Status::invalid_argument;
    const Status s = log_.collect();
    if (s != Status::ok) broken_ = true;
    return s;
  }

  cudaError_t reset() {
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

  void set_bypass_threshold(uint64_t bytes) { bypass_ = bytes; }
  uint64_t bypass_threshold() const { return bypass_; }
  int send_device() const { return send_dev_; }
  int recv_device() const { return recv_dev_; }
  const P2POptions& options() const { return opt_; }

 private:
  cudaError_t check_many(const P2PMessage* msgs, size_t count) const {
    if (!ready_ || broken_ || (count && !msgs)) return cudaErrorInvalidValue;  // after an error: reset() first
    for (size_t i = 0; i < count; ++i)
      if ((msgs[i].n && (!msgs[i].src || !msgs[i].dst)) || msgs[i].n > (uint64_t(1) << 40))
        return cudaErrorInvalidValue;
    return cudaSuccess;
  }
  static uint64_t total_bytes(const P2PMessage* msgs, size_t count) {
    uint64_t total = 0;
    for (size_t i = 0; i < count; ++i) total += msgs[i].n * format::elem_bytes(D);
    return total;
  }

  /// Messages, raw (cudaMemcpyPeerAsync) or coded, one after the other on the link's two streams: the link's
  /// streams wait once for the callers' streams and the previous transfer, and the callers' streams once for
  /// the last message. Every call on a stream is made with that stream's device current.
  cudaError_t move_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream, cudaStream_t recv_stream,
                        bool raw) {
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
      e = sender_.launch(plan, m.src, seq_base, 0, plan.num_frames, send_view, true, opt_.timeout_ns, streams_[0]);
      if (e == cudaSuccess) {
        p2p_detail::DeviceGuard g(send_dev_);
        e = p2p_detail::side_words(log_.device_alias(&rec[0]), sender_.control(), sizeof(SideControl), streams_[0]);
      }
      if (e == cudaSuccess)
        e = receiver_.launch(plan, m.dst, seq_base, 0, plan.num_frames, send_view, true, true, opt_.timeout_ns,
                             streams_[1]);
      if (e == cudaSuccess) {
        p2p_detail::DeviceGuard g(recv_dev_);
        e = p2p_detail::side_words(log_.device_alias(&rec[1]), receiver_.control(), sizeof(SideControl), streams_[1]);
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

  /// Both sides' streams.
  cudaError_t synchronize() {
    for (int k = 0; k < 2; ++k) {
      p2p_detail::DeviceGuard g(k == 0 ? send_dev_ : recv_dev_);
      const cudaError_t e = cudaStreamSynchronize(streams_[k]);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }

  void destroy() {
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

  P2POptions opt_;
  int send_dev_ = 0, recv_dev_ = 0;
  bool ready_ = false, broken_ = false;
  uint64_t bypass_ = 0, next_seq_ = 0;
  std::vector<P2PCalibrationPoint> points_;
  FrameRing ring_;
  p2p_detail::TransferStatusLog log_;
  p2p_detail::Memory credits_;
  P2PSender<D, Code> sender_;
  P2PReceiver<D, Code> receiver_;
  cudaStream_t streams_[2] = {};
  cudaEvent_t done_[2] = {}, start_[2] = {};
};

}  // namespace comm
}  // namespace zipcomm
