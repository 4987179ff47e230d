// The GPU half of the extension (see gpu_codec.hpp): the device-wide codec and the quantization tier, run on
// the legacy default stream and waited for, because the stream's size (or its Status) is needed on the host.
#include <cuda_runtime.h>

#include <cstring>

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

/// Device scratch: the compressed size and the Status the codec writes, then its temp storage.
struct Scratch {
  static constexpr size_t TEMP_OFFSET = 32;
  DeviceAllocation memory;
  explicit Scratch(size_t temp_bytes) : memory(TEMP_OFFSET + temp_bytes) {
    check(cudaMemset(memory.get(), 0, TEMP_OFFSET), "cudaMemset");  // Status::ok until the codec says otherwise
  }
  uint64_t* out_bytes() const { return static_cast<uint64_t*>(memory.get()); }
  zipcomm::Status* status() const {
    return reinterpret_cast<zipcomm::Status*>(static_cast<uint8_t*>(memory.get()) + 8);
  }
  void* temp() const { return static_cast<uint8_t*>(memory.get()) + TEMP_OFFSET; }
};

/// After a launch: a Status the codec reported wins over the launch's cudaErrorInvalidValue (the entry
/// points return that, with the Status in device memory, for arguments they refuse on the host).
void finish(cudaError_t launch, const Scratch& scratch, const char* what, uint64_t* out_bytes) {
  cudaError_t sync = cudaStreamSynchronize(0);
  if (sync != cudaSuccess) throw_cuda(sync, std::string(what) + " (kernel)");
  zipcomm::Status s = zipcomm::Status::ok;
  uint64_t sizes[2] = {0, 0};
  check(cudaMemcpy(sizes, scratch.memory.get(), 16, cudaMemcpyDeviceToHost), "cudaMemcpy (status)");
  std::memcpy(&s, reinterpret_cast<const uint8_t*>(sizes) + 8, sizeof s);
  if (s != zipcomm::Status::ok) throw StatusError(what, s);
  if (launch != cudaSuccess) throw_cuda(launch, what);
  if (out_bytes) *out_bytes = sizes[0];
}

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

void copy_to_host(int device, void* dst, const void* src, uint64_t bytes) {
  DeviceScope scope(device);
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
}

void* compress(int device, zipcomm::DType dtype, zipcomm::CodeId code, const void* d_in, uint64_t n,
               uint64_t* out_bytes) {
  DeviceScope scope(device);
  const uint64_t capacity = zipcomm::format::max_compressed_bytes(dtype, n);
  size_t temp_bytes = 0;
  check(zipcomm::device::compress(dtype, code, nullptr, temp_bytes, d_in, n, nullptr, capacity, nullptr, nullptr),
        "device::compress (temp size)");
  Scratch scratch(temp_bytes);
  DeviceAllocation bound(capacity);
  cudaError_t launch = zipcomm::device::compress(dtype, code, scratch.temp(), temp_bytes, d_in, n, bound.get(),
                                                 capacity, scratch.out_bytes(), scratch.status());
  uint64_t bytes = 0;
  finish(launch, scratch, "zipcomm.compress (GPU)", &bytes);
  // Hand back exactly the stream's bytes: the bound can be half again as large as the stream.
  DeviceAllocation exact(bytes);
  check(cudaMemcpy(exact.get(), bound.get(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy (device to device)");
  *out_bytes = bytes;
  return exact.release();
}

void decompress(int device, const zipcomm::format::Header& header, const void* d_in, uint64_t in_bytes,
                void* d_out, uint64_t out_capacity_elems) {
  DeviceScope scope(device);
  const auto dtype = static_cast<zipcomm::DType>(header.dtype);
  const auto code = static_cast<zipcomm::CodeId>(header.code);
  size_t temp_bytes = 0;
  check(zipcomm::device::decompress(dtype, code, nullptr, temp_bytes, d_in, in_bytes, d_out, out_capacity_elems,
                                    nullptr),
        "device::decompress (temp size)");
  Scratch scratch(temp_bytes);
  cudaError_t launch = zipcomm::device::decompress(dtype, code, scratch.temp(), temp_bytes, d_in, in_bytes, d_out,
                                                   out_capacity_elems, scratch.status());
  finish(launch, scratch, "zipcomm.decompress (GPU)", nullptr);
}

void quantize_into(int device, zipcomm::DType dtype, zipcomm::quant::QuantMode mode, uint32_t bits, uint32_t group,
                   const void* d_in, uint64_t n, void* d_msg, uint64_t capacity) {
  DeviceScope scope(device);
  Scratch scratch(0);
  cudaError_t launch =
      zipcomm::quant::device::quantize(d_in, n, dtype, mode, bits, group, d_msg, capacity, scratch.status());
  finish(launch, scratch, "zipcomm.quant.quantize (GPU)", nullptr);
}

void dequantize(int device, const void* d_msg, uint64_t msg_bytes, zipcomm::DType out_dtype, void* d_out,
                uint64_t out_capacity_bytes) {
  DeviceScope scope(device);
  Scratch scratch(0);
  cudaError_t launch = zipcomm::quant::device::dequantize(d_msg, msg_bytes, out_dtype, d_out, out_capacity_bytes,
                                                          scratch.status());
  finish(launch, scratch, "zipcomm.quant.dequantize (GPU)", nullptr);
}

void ear_rows(int device, const float* d_p, const float* d_q, uint64_t rows, uint64_t vocab, double* h_out) {
  DeviceScope scope(device);
  DeviceAllocation out(rows * sizeof(double));
  check(zipcomm::quant::device::ear_rows(d_p, d_q, rows, vocab, static_cast<double*>(out.get())),
        "zipcomm.quant.ear (GPU)");
  check(cudaStreamSynchronize(0), "zipcomm.quant.ear (GPU kernel)");
  if (rows) check(cudaMemcpy(h_out, out.get(), rows * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy (EAR)");
}

}  // namespace gpu
}  // namespace zipcomm_python
