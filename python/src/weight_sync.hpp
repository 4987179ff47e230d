// The GPU half of zipcomm.WeightSync: one P2P link per element type (HostStagingLink or PeerLink,
// include/zipcomm/comm/p2p.cuh), created once, each sync one transfer_many per link, then wait(). Compiled by
// nvcc in weight_sync.cu; only plain C++ types cross this boundary (nvcc never sees nanobind).
// Throws CudaError for CUDA failures and refused arguments, StatusError when a link's wait() reports a Status.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <zipcomm/format.hpp>

#include "codec_errors.hpp"

namespace zipcomm_python {
namespace gpu {

enum class LinkKind { host, peer };

/// One tensor of a sync: n elements from src (send device) to dst (receive device).
struct SyncMessage {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t n = 0;
};

/// The tensors of one element type: they go as one batch (transfer_many) over that type's link.
struct SyncGroup {
  zipcomm::DType dtype = zipcomm::DType::bf16;
  std::vector<SyncMessage> messages;
};

struct SyncTiming {
  uint64_t bytes = 0;  // payload bytes moved (the tensors' sizes, not the coded bytes)
  double seconds = 0;  // GPU time on the receiving side's stream, from the sync's start until all decoded
};

/// The links of one WeightSync: for host, send_device == recv_device (the pinned-host link has one GPU).
class WeightSyncLinks {
 public:
  /// Creates (init) one link per element type in `dtypes` (bf16, fp16, fp32 only).
  WeightSyncLinks(LinkKind kind, int send_device, int recv_device, const std::vector<zipcomm::DType>& dtypes);
  ~WeightSyncLinks();
  WeightSyncLinks(const WeightSyncLinks&) = delete;
  WeightSyncLinks& operator=(const WeightSyncLinks&) = delete;

  /// Enqueues every group (one transfer_many, or transfer_raw_many when `raw`, per group) ordered after prior
  /// work on `stream` (a cudaStream_t of the send device; 0 the legacy default stream), then waits until every
  /// link's receiver decoded and checked everything. On an error the links are reset (usable again) and the
  /// first error is thrown.
  SyncTiming sync(const std::vector<SyncGroup>& groups, bool raw, uintptr_t stream);

  /// The host link's mode per group dtype ("stream" or "copy"); "peer" for peer links.
  const char* mode(zipcomm::DType dtype) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpu
}  // namespace zipcomm_python
