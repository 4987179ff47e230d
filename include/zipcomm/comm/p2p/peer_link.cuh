// P2P pipeline, host side: PeerLink, the link through peer GPU memory.
#pragma once

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
#include "endpoints.cuh"
#include "frame_ring.cuh"
#include "kernels.cuh"
#include "options.cuh"
#include "protocol.cuh"
#include "detail/transfer_status_log.cuh"

namespace zipcomm {
namespace comm {

/// Peer GPU memory: the sender's SMs write frames straight into a ring in the receiver's GPU memory (NVLink
/// or PCIe peer writes), flags included; the receiver decodes them in place and writes its credits back into
/// the sender's GPU memory. Both kernels are persistent: no host involvement. send_device == recv_device
/// works too (one GPU; used by the tests on one-GPU machines). Below bypass_threshold() a transfer is one
/// cudaMemcpyPeerAsync; calibrate() measures where coding pays on the link (over NVLink it may never).
/// \code
/// zipcomm::comm::PeerLink<zipcomm::DType::bf16> link;
/// link.init(0, 1);                                         // GPU 0 sends, GPU 1 receives (peer access)
/// link.transfer(d_src_on_0, d_dst_on_1, n, stream_on_0, stream_on_1);
/// zipcomm::Status s = link.wait();                         // ok once every element arrived intact
/// \endcode
template <DType D, class Code = thread::PairCode>
class PeerLink {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no P2P links");
 public:
  PeerLink() = default;
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;
  ~PeerLink() { destroy(); }

  cudaError_t init(int send_device, int recv_device, const P2POptions& opt = P2POptions());

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
  cudaError_t transfer_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream, cudaStream_t recv_stream);
  /// The raw copies of a batch (transfer_many's bypass, and its baseline): one cudaMemcpyPeerAsync per message.
  cudaError_t transfer_raw_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream,
                                cudaStream_t recv_stream);

  /// \brief Measures coded and raw transfers (transfer_coded, transfer_raw) between this link's devices at 64 KiB,
  /// 128 KiB, ... up to max_bytes, and sets the bypass threshold to the smallest size from which coding is at
  /// least 3% faster at that and every larger measured size (choose_bypass_threshold; UINT64_MAX, "never
  /// code", when coding loses at the largest size). Data: `sample` (sample_elems elements anywhere the GPU can
  /// read: device or host memory) tiled to max_bytes. Time of one transfer: CUDA events on a receive-device
  /// stream, from before the send side starts until the receiver holds every decoded element; median of 5
  /// after a warm-up. Allocates max_bytes on each device for the duration, blocks the host; call with no
  /// transfer in flight. calibration() returns the measurements. A transfer that fails gives cudaErrorUnknown
  /// (the link then needs reset()).
  cudaError_t calibrate(const void* sample, uint64_t sample_elems, uint64_t max_bytes = uint64_t(256) << 20);
  /// The last calibrate()'s measurements, by size (empty before one).
  const std::vector<P2PCalibrationPoint>& calibration() const { return points_; }

  /// Waits for every transfer issued since the last wait(); the first error among them in issue order. After
  /// an error the link refuses transfers until reset(). A CUDA failure while waiting gives
  /// Status::invalid_argument, and *cuda_error (optional) says which.
  Status wait(cudaError_t* cuda_error = nullptr);

  cudaError_t reset();

  void set_bypass_threshold(uint64_t bytes) { bypass_ = bytes; }
  uint64_t bypass_threshold() const { return bypass_; }
  int send_device() const { return send_dev_; }
  int recv_device() const { return recv_dev_; }
  const P2POptions& options() const { return opt_; }

 private:
  cudaError_t check_many(const P2PMessage* msgs, size_t count) const;
  static uint64_t total_bytes(const P2PMessage* msgs, size_t count) {
    uint64_t total = 0;
    for (size_t i = 0; i < count; ++i) total += msgs[i].n * format::elem_bytes(D);
    return total;
  }

  /// Messages, raw (cudaMemcpyPeerAsync) or coded, one after the other on the link's two streams: the link's
  /// streams wait once for the callers' streams and the previous transfer, and the callers' streams once for
  /// the last message. Every call on a stream is made with that stream's device current.
  cudaError_t move_many(const P2PMessage* msgs, size_t count, cudaStream_t send_stream, cudaStream_t recv_stream,
                        bool raw);

  /// Both sides' streams.
  cudaError_t synchronize();

  void destroy();

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

#include "detail/peer_link.cuh"
