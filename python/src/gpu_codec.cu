// The GPU half of the extension (see gpu_codec.hpp): the device-wide codec and the quantization tier,
// stream-ordered on the caller's stream; each call's Status (and compressed size) lands in a slot of device memory,
// read when the caller waits for the call.
#include <cuda_runtime.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <zipcomm/device/device_codec_dispatch.cuh>
#include <zipcomm/quant/device_ear.cuh>
#include <zipcomm/quant/device_quant.cuh>

#include "gpu_codec.hpp"

namespace zipcomm_python {
namespace gpu {
namespace {

[[noreturn]] void throw_cuda(cudaError_t e, const std::string& what) {
  throw CudaError("zipcomm: " + what + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw_cuda(e, what);
}

/// Makes `device` current for the scope and checks that it exists, restoring the previously current device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    std::string why;
    const int count = device_count(&why);
    if (count == 0)
      throw CudaError("zipcomm: the array is on CUDA device " + std::to_string(device) +
                      ", but no GPU is usable here (" + why + ")");
    if (device < 0 || device >= count)
      throw CudaError("zipcomm: the array is on CUDA device " + std::to_string(device) + ", but only " +
                      std::to_string(count) + " GPU(s) are visible");
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

/// One cudaMalloc, freed on scope exit unless released.
class DeviceAllocation {
 public:
  explicit DeviceAllocation(uint64_t bytes) {
    // cudaMalloc(0) gives nullptr; a stream of any size is at least a header, and temp storage is never 0.
    check(cudaMalloc(&ptr_, bytes ? bytes : 1), "cudaMalloc");
  }
  ~DeviceAllocation() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  void* get() const { return ptr_; }
  void* release() {
    void* p = ptr_;
    ptr_ = nullptr;
    return p;
  }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

int device_count(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
    cudaGetLastError();  // not sticky: clear it so that later CUDA work starts clean
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount: 0 devices";
  return count;
}

void free_device_memory(int device, void* ptr) noexcept {
  if (!ptr) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device &&
                        cudaSetDevice(device) == cudaSuccess;
  cudaFree(ptr);
  if (switched) cudaSetDevice(previous);
}

void* alloc(int device, uint64_t bytes) {
  DeviceScope scope(device);
  return DeviceAllocation(bytes).release();
}

// ---- stream-ordered codec calls

namespace {

/// Where a call leaves its outcome: the compressed size and the Status, written by the device.
struct OutcomeSlot {
  uint64_t bytes;
  zipcomm::Status status;
  uint32_t reserved;
};

/// Calls not yet waited for, in issue order, each with a slot for its outcome in a block of device memory of its
/// device (read back, on a private stream, once the call's event has completed).
class PendingCalls {
 public:
  static constexpr uint32_t SLOTS = 4096;  // calls in flight; one more waits for the oldest first

  struct Call {
    uint64_t id;
    int device;
    uint32_t slot;
    cudaEvent_t done;
    const char* where;
  };

  static PendingCalls& instance() {
    static PendingCalls calls;
    return calls;
  }

  /// A free slot for a new call on the current device (the entry point sets its Status); waits for the oldest
  /// call when all are taken (its error, if any, is kept for the next synchronize()).
  uint32_t take_slot(int device, OutcomeSlot** device_slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!initialized_) {
      for (uint32_t i = SLOTS; i-- > 0;) free_.push_back(i);
      initialized_ = true;
    }
    PerDevice& d = per_device_locked(device);
    if (free_.empty()) retire_front_locked();
    const uint32_t slot = free_.back();
    free_.pop_back();
    *device_slot = d.slots + slot;
    return slot;
  }

  /// Records the call (after its work was enqueued on `stream`); returns its id.
  uint64_t add(int device, uint32_t slot, cudaStream_t stream, const char* where) {
    cudaEvent_t done;
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done, stream), "cudaEventRecord");
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back({++last_id_, device, slot, done, where});
    return last_id_;
  }

  /// Gives a slot back when the call could not be enqueued.
  void release(uint32_t slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }

  /// Waits for call `id`; throws its error. Returns its compressed size (0 for other calls). A call already
  /// waited for (by synchronize) returns 0 without error.
  uint64_t wait(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);  // held while waiting: slots change hands only under it
    for (auto it = calls_.begin(); it != calls_.end(); ++it) {
      if (it->id != id) continue;
      const Call call = *it;
      calls_.erase(it);
      const Outcome o = finish_call(call);
      free_.push_back(call.slot);
      if (o.cuda != cudaSuccess) throw_cuda(o.cuda, call.where);
      if (o.error) throw StatusError(call.where, o.status);
      return o.bytes;
    }
    // Retired already (slots ran out, or synchronize()): its outcome was kept.
    const auto r = retired_.find(id);
    if (r == retired_.end()) return 0;
    const Outcome o = r->second.outcome;
    const char* where = r->second.where;
    retired_.erase(r);
    if (o.cuda != cudaSuccess) throw_cuda(o.cuda, where);
    if (o.error) throw StatusError(where, o.status);
    return o.bytes;
  }

  /// Waits for every call not yet waited for; throws the first error among them (or one kept from a call
  /// retired early).
  void synchronize() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!calls_.empty()) retire_front_locked();
    if (kept_) {
      const Kept k = *kept_;
      kept_.reset();
      if (k.cuda != cudaSuccess) throw_cuda(k.cuda, k.where);
      throw StatusError(k.where, k.status);
    }
  }

 private:
  struct Outcome {
    bool error;
    zipcomm::Status status;
    cudaError_t cuda;
    uint64_t bytes;
  };
  struct Kept {
    const char* where;
    zipcomm::Status status;
    cudaError_t cuda;
  };

  struct PerDevice {
    OutcomeSlot* slots = nullptr;
    cudaStream_t reader = nullptr;  // reads slots back without ordering against the legacy stream
  };

  PerDevice& per_device_locked(int device) {
    PerDevice& d = devices_[device];
    if (!d.slots) {
      void* p = nullptr;
      check(cudaMalloc(&p, SLOTS * sizeof(OutcomeSlot)), "cudaMalloc (status slots)");
      d.slots = static_cast<OutcomeSlot*>(p);
      check(cudaStreamCreateWithFlags(&d.reader, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    return d;
  }

  Outcome finish_call(const Call& call) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(call.device);
    OutcomeSlot o{0, zipcomm::Status::ok, 0};
    cudaError_t e = cudaEventSynchronize(call.done);
    cudaEventDestroy(call.done);
    if (e == cudaSuccess) {
      const PerDevice& d = devices_.at(call.device);
      e = cudaMemcpyAsync(&o, d.slots + call.slot, sizeof o, cudaMemcpyDeviceToHost, d.reader);
      if (e == cudaSuccess) e = cudaStreamSynchronize(d.reader);
    }
    cudaSetDevice(previous);
    if (e == cudaSuccess && uint32_t(o.status) == ~0u) e = cudaErrorLaunchFailure;  // the call never ran
    return {e == cudaSuccess && o.status != zipcomm::Status::ok, o.status, e, o.bytes};
  }

  // The oldest call: waited for, its first error kept for synchronize(), its outcome for a later wait(id) (the
  // last SLOTS of them).
  void retire_front_locked() {
    const Call call = calls_.front();
    calls_.pop_front();
    const Outcome o = finish_call(call);
    free_.push_back(call.slot);
    if (!kept_ && (o.error || o.cuda != cudaSuccess)) kept_ = Kept{call.where, o.status, o.cuda};
    retired_[call.id] = {o, call.where};
    while (retired_.size() > SLOTS) retired_.erase(retired_.begin());  // ids grow: the oldest first
  }

  std::mutex mutex_;
  std::map<int, PerDevice> devices_;
  bool initialized_ = false;
  std::vector<uint32_t> free_;
  std::deque<Call> calls_;
  struct Retired {
    Outcome outcome;
    const char* where;
  };
  std::map<uint64_t, Retired> retired_;
  uint64_t last_id_ = 0;
  std::optional<Kept> kept_;
};

/// Enqueues one call on `stream` with its outcome to a pending slot: `launch(slot)` runs the entry point.
template <class Launch>
uint64_t enqueue(int device, uintptr_t stream_handle, const char* where, Launch&& launch) {
  DeviceScope scope(device);
  const auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
  PendingCalls& calls = PendingCalls::instance();
  OutcomeSlot* slot = nullptr;
  const uint32_t index = calls.take_slot(device, &slot);
  // All ones: no Status. Every entry point writes one (ok, or what it refused) in stream order; a slot still all
  // ones after the call means it never ran, which wait() reports as an error, never as ok.
  cudaError_t e = cudaMemsetAsync(slot, 0xFF, sizeof(OutcomeSlot), stream);
  if (e == cudaSuccess) e = launch(slot, stream);
  // cudaErrorInvalidValue: the entry point refused an argument on the host and wrote the Status to the slot in
  // stream order; the call reports it like any other.
  if (e != cudaSuccess && e != cudaErrorInvalidValue) {
    calls.release(index);
    throw_cuda(e, where);
  }
  return calls.add(device, index, stream, where);
}

/// A codec call: temp storage from the stream-ordered allocator, freed in stream order after it.
/// `launch(temp, temp_bytes, slot, stream)` runs the entry point.
template <class Query, class Launch>
uint64_t enqueue_with_temp(int device, uintptr_t stream_handle, const char* where, Query&& query, Launch&& launch) {
  DeviceScope scope(device);
  size_t temp_bytes = 0;
  check(query(temp_bytes), where);
  return enqueue(device, stream_handle, where, [&](OutcomeSlot* slot, cudaStream_t stream) {
    void* temp = nullptr;
    cudaError_t e = cudaMallocAsync(&temp, temp_bytes ? temp_bytes : 16, stream);
    if (e != cudaSuccess) return e;
    e = launch(temp, temp_bytes, slot, stream);
    const cudaError_t f = cudaFreeAsync(temp, stream);
    return e != cudaSuccess ? e : f;
  });
}

}  // namespace

uint64_t compress_async(int device, zipcomm::DType dtype, zipcomm::CodeId code, const void* d_in, uint64_t n,
                        void* d_out, uint64_t capacity, uint32_t chunk_log2, uintptr_t stream) {
  return enqueue_with_temp(
      device, stream, "zipcomm.compress (GPU)",
      [&](size_t& temp_bytes) {
        return zipcomm::device::compress(dtype, code, nullptr, temp_bytes, d_in, n, nullptr, capacity, nullptr,
                                         nullptr, 0, chunk_log2);
      },
      [&](void* temp, size_t temp_bytes, OutcomeSlot* slot, cudaStream_t s) {
        return zipcomm::device::compress(dtype, code, temp, temp_bytes, d_in, n, d_out, capacity, &slot->bytes,
                                         &slot->status, s, chunk_log2);
      });
}

uint64_t decompress_async(int device, zipcomm::DType dtype, const void* d_in, uint64_t in_bytes,
                          void* d_out, uint64_t out_capacity_elems, uintptr_t stream) {
  return enqueue_with_temp(
      device, stream, "zipcomm.decompress (GPU)",
      [&](size_t& temp_bytes) {
        return zipcomm::device::decompress(dtype, nullptr, temp_bytes, d_in, in_bytes, d_out, out_capacity_elems,
                                           nullptr);
      },
      [&](void* temp, size_t temp_bytes, OutcomeSlot* slot, cudaStream_t s) {
        return zipcomm::device::decompress(dtype, temp, temp_bytes, d_in, in_bytes, d_out, out_capacity_elems,
                                           &slot->status, s);
      });
}

uint64_t wait(uint64_t id) { return PendingCalls::instance().wait(id); }

void synchronize() { PendingCalls::instance().synchronize(); }

void copy_to_host_on_stream(int device, void* dst, const void* src, uint64_t bytes, uintptr_t stream) {
  DeviceScope scope(device);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (device to host)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

uint64_t quantize_async(int device, zipcomm::DType dtype, zipcomm::quant::QuantMode mode, uint32_t bits,
                        uint32_t group, const void* d_in, uint64_t n, void* d_msg, uint64_t capacity, uintptr_t stream) {
  return enqueue(device, stream, "zipcomm.quant.quantize (GPU)", [&](OutcomeSlot* slot, cudaStream_t s) {
    return zipcomm::quant::device::quantize(d_in, n, dtype, mode, bits, group, d_msg, capacity, &slot->status, s);
  });
}

uint64_t dequantize_async(int device, const void* d_msg, uint64_t msg_bytes, zipcomm::DType out_dtype, void* d_out,
                          uint64_t out_capacity_bytes, uintptr_t stream) {
  return enqueue(device, stream, "zipcomm.quant.dequantize (GPU)", [&](OutcomeSlot* slot, cudaStream_t s) {
    return zipcomm::quant::device::dequantize(d_msg, msg_bytes, out_dtype, d_out, out_capacity_bytes, &slot->status,
                                              s);
  });
}

void ear_rows(int device, const float* d_p, const float* d_q, uint64_t rows, uint64_t vocab, double* h_out,
              uintptr_t stream) {
  DeviceScope scope(device);
  const auto st = reinterpret_cast<cudaStream_t>(stream);
  void* out = nullptr;
  check(cudaMallocAsync(&out, rows ? rows * sizeof(double) : 16, st), "cudaMallocAsync");
  cudaError_t e = zipcomm::quant::device::ear_rows(d_p, d_q, rows, vocab, static_cast<double*>(out), st);
  if (e == cudaSuccess && rows) e = cudaMemcpyAsync(h_out, out, rows * sizeof(double), cudaMemcpyDeviceToHost, st);
  const cudaError_t f = cudaFreeAsync(out, st);
  if (e == cudaSuccess) e = f;
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  check(e, "zipcomm.quant.ear (GPU)");
}

}  // namespace gpu
}  // namespace zipcomm_python
