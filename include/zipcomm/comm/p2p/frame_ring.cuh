// P2P pipeline, host side: FrameRing, the owner of a ring of frame slots and its flags.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "detail/host_resources.cuh"
#include "kernel_args.cuh"

namespace zipcomm {
namespace comm {

/// A ring of frame slots with its flags in one memory block: pinned host memory (mapped; the host and every
/// GPU can use it) or one GPU's memory. Kernels get its view() by value.
/// \code
/// zipcomm::comm::FrameRing ring;
/// ring.init_device(1, slots, zipcomm::comm::slot_bytes_for(zipcomm::DType::bf16, shape));  // on GPU 1
/// receiver.launch(plan, d_dst, ring.view(), recv_launch, stream);
/// \endcode
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

}  // namespace comm
}  // namespace zipcomm
