// P2P pipeline, host side: the status records of the transfers a link issued since its last wait().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "../../../config.hpp"
#include "../kernel_args.cuh"
#include "../options.cuh"
#include "host_resources.cuh"

namespace zipcomm {
namespace comm {

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

}  // namespace comm
}  // namespace zipcomm
