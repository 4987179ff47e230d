// P2P pipeline, host side: owned CUDA resources (memory, device guard) and the stream memory operations.
#pragma once

#include <cuda.h>  // types of the stream memory operations only; no libcuda link (entry points at run time)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

namespace zipcomm {
namespace comm {

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
    if (reinterpret_cast<AttrFn>(attr)(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) !=
            CUDA_SUCCESS ||
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

/// The median of timings, `if_empty` when there are none.
inline double median_ms(std::vector<float> ms, double if_empty) {
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? if_empty : double(ms[ms.size() / 2]);
}

/// Calibration timing: `timed(float& ms)` runs one transfer and measures it; the first of `runs` runs warms up,
/// the median of the others lands in *out_ms (0 when none ran). Stops at the first error, which it returns.
template <class Timed>
inline cudaError_t median_after_warmup(int runs, Timed&& timed, double* out_ms) {
  std::vector<float> ms;
  cudaError_t e = cudaSuccess;
  for (int run = 0; run < runs && e == cudaSuccess; ++run) {
    float m = 0;
    e = timed(m);
    if (run > 0) ms.push_back(m);
  }
  *out_ms = median_ms(std::move(ms), 0.0);
  return e;
}

}  // namespace p2p_detail

}  // namespace comm
}  // namespace zipcomm
