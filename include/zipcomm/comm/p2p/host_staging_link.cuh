// P2P pipeline, host side: HostStagingLink, GPU -> pinned host ring -> GPU, the slow link one GPU has.
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

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "detail/host_resources.cuh"
#include "detail/transfer_status_log.cuh"
#include "endpoints.cuh"
#include "frame_ring.cuh"
#include "kernels.cuh"
#include "options.cuh"
#include "protocol.cuh"
#include "staged_raw_copy.cuh"

namespace zipcomm {
namespace comm {

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
  cudaError_t init(int device, const P2POptions& opt = P2POptions(), HostLinkMode mode = HostLinkMode::stream);

  /// Sends n elements from src to dst (both device memory of this GPU, any alignment), stream-ordered
  /// after prior work on `stream`; work later on `stream` sees dst complete (every frame decoded). Coded
  /// when the message has at least bypass_threshold() bytes, raw (pipelined copy) below.
  cudaError_t transfer(const void* src, void* dst, uint64_t n, cudaStream_t stream) {
    return use_bypass(n * format::elem_bytes(D), bypass_) ? transfer_raw(src, dst, n, stream)
                                                          : transfer_coded(src, dst, n, stream);
  }

  /// The coded pipeline, whatever the size.
  cudaError_t transfer_coded(const void* src, void* dst, uint64_t n, cudaStream_t stream);

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
  cudaError_t transfer_many(const P2PMessage* msgs, size_t count, cudaStream_t stream);

  /// The raw pipelined copy (the bypass), whatever the size. A message of one chunk is two copies on
  /// `stream` (what a raw transfer costs at best); larger ones overlap the two directions.
  cudaError_t transfer_raw(const void* src, void* dst, uint64_t n, cudaStream_t stream);

  /// The raw pipelined copy of a batch (transfer_many's bypass, and its baseline): every message's chunks in turn
  /// through the same staging, so one message's host -> device side overlaps the next one's device -> host side.
  /// The same checks and stream order as transfer_many.
  cudaError_t transfer_raw_many(const P2PMessage* msgs, size_t count, cudaStream_t stream);

  /// Chunk of the raw copy for a message: the chunk calibrate() measured best for its size class (powers of
  /// two), else one chunk (two copies) when small, else about an eighth of it (both directions overlap; on the
  /// H200's PCIe link that was the best chunk from 1 MiB up), 128 KiB .. options().raw_chunk_bytes.
  uint64_t raw_chunk_for(uint64_t bytes) const;

  /// Waits for every transfer issued since the last wait(); the first error among them in issue order (ok only
  /// when every element of every one arrived and decoded intact). After an error the link refuses transfers
  /// until reset(). A CUDA failure while waiting gives Status::invalid_argument, and *cuda_error (optional) says
  /// which; RingCommunicator::wait() has the same shape.
  Status wait(cudaError_t* cuda_error = nullptr);

  /// Clears rings and state after an error (sequence numbers restart). Waits for the link to be idle.
  cudaError_t reset();

  /// Measures coded and raw transfers of `sample` (elements on this GPU, tiled when shorter) at sizes
  /// 64 KiB .. max_bytes: picks the raw copy's best chunk for each size class, and sets the bypass threshold to
  /// the smallest size from which coding is at least 3% faster at every measured size. Returns the first error.
  cudaError_t calibrate(const void* sample, uint64_t sample_elems, uint64_t max_bytes = uint64_t(256) << 20);
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
  uint64_t raw_edge_elems(uint64_t bytes, uint64_t n) const;
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

  cudaError_t check_many(const P2PMessage* msgs, size_t count) const;

  /// Every stream of the link.
  cudaError_t synchronize();

  /// Joins every stream of the link into the two sides' streams and marks both sides done (side_done): what
  /// the caller's stream waits on.
  cudaError_t join_sides();
  /// After join_sides(): the next transfer's streams (ev(1), ev(2), and the raw staging's users) and the caller's
  /// stream wait for everything issued so far.
  cudaError_t hand_over(cudaStream_t stream);
  /// A batch cut short: the caller's stream waits for the messages already issued.
  cudaError_t join_caller(cudaStream_t stream) {
    const cudaError_t f = join_sides();
    return f != cudaSuccess ? f : hand_over(stream);
  }

  /// After a transfer's work is enqueued: its sides' status words are copied into its log record, and (`join`)
  /// the caller's stream waits for both sides. A batch's inner messages (transfer_many) do not join: the next
  /// message's work follows on the link's streams, and the caller's stream waits once, after the last; they
  /// leave ev(1), ev(2) as the batch found them, so its raw tail waits only for what came before the batch.
  cudaError_t finish(cudaStream_t stream, cudaError_t e, bool join = true);

  /// A transfer's (or a batch's) first work: the link's streams wait for the caller's prior work (ev(0)) and
  /// for the previous transfer (ev(1), ev(2)); transfers are serialized.
  cudaError_t start_after(cudaStream_t stream);

  /// Where a message sits in a batch (transfer_many): only the first has a raw head, split-sends its first frame
  /// and holds later frames' splits back until that frame's planes are out (SendArgs::first_frame_planes_first:
  /// 0.3-0.5% faster at 64 and 128 MiB) and a shape head; only the last has a raw tail and the fine tiers; `piece`
  /// (0: from the message's own plan) sizes the copy pieces. A lone transfer is both.
  struct BatchEdges {
    bool first = true, last = true;
    uint64_t piece = 0;
  };
  PipelineShape batch_shape(const BatchEdges& x) const;

  /// One coded message after start_after(): `e` is what came before (an error skips to finish()).
  cudaError_t issue_coded(const void* src, void* dst, uint64_t n, cudaStream_t stream, cudaError_t e,
                          const BatchEdges& edges);

  /// Launch settings of one side: its trace, and in stream mode the flags its copy streams wait on (poisoned if
  /// this side aborts: the sender's planes and exponents flags, the receiver's credits), the overflow area, the
  /// budget, and (sender) the first frame's split first.
  P2PLaunchExtras extras(bool sender) const;
  P2PLaunchExtras send_extras() const { return extras(true); }
  P2PLaunchExtras recv_extras() const { return extras(false); }

  /// Stream mode's ring: the pinned slots, with its flags in GPU memory. Block of stream_flags_: [ready_planes |
  /// ready_exps | credits | landed], num_slots words each.
  FrameRingView stream_ring() const;

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
                              uint64_t raw_head, uint64_t raw_tail, const BatchEdges& edges);

  /// Stream mode: the largest copy of a transfer (0: whole parts): copy_piece_bytes, or with
  /// copy_pieces_per_transfer a share of what the copy engines will move (planes and section-B budgets), at least
  /// copy_piece_bytes.
  uint64_t stream_piece_bytes(const FramePlan& plan) const { return stream_piece_bytes_for(planned_wire_bytes(plan)); }
  uint64_t stream_piece_bytes_for(uint64_t wire) const;
  /// What the copy engines move for a plan's frames (planes and section-B budgets).
  uint64_t planned_wire_bytes(const FramePlan& plan) const;

  /// Stream mode, after a transfer that went well: sizes each tier's section-B budget from what its frames
  /// needed (the sender keeps the per-tier maximum in GPU memory), a margin over the largest (options), so
  /// the next transfers of similar data move nearly everything with the fixed-size copies.
  void adapt_budget();

  /// Copy mode's host relay: as each frame's planes, then its section B, are published, copy them from the
  /// sender's device ring to the pinned ring and on to the device ring, and launch the frame's decode; hand the
  /// sender's slots back once their copies are done. Bounded: no progress for timeout_ns gives Status::timeout.
  cudaError_t relay(const FramePlan& plan, void* dst, uint64_t seq_base);

  void destroy();

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

}  // namespace comm
}  // namespace zipcomm

#include "detail/host_staging_link.cuh"
#include "detail/host_staging_stream_mode.cuh"
#include "detail/host_staging_copy_mode.cuh"
