// Ring allreduce, host side: preparing, sizing and launching the kernel's passes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "../allreduce.cuh"

namespace zipcomm {
namespace comm {

namespace detail {
/// Sets `kernel`'s dynamic shared memory limit on `device`, once per stub and device (it is per function and
/// device; cheap, but not free). The stub is the key: nvcc gives each translation unit its own stub, and so its own
/// kernel, for a __global__ template (`-static-global-template-stub`, on by default since CUDA 13), and an
/// attribute set through one stub does not reach another's kernel.
inline cudaError_t prepare_kernel_once(const void* kernel, int device, size_t smem) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device})) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e == cudaSuccess) done.insert({kernel, device});
  return e;
}
}  // namespace detail

/// Blocks of the ring kernel that can be resident at once on the current device (all of a launch must be).
template <DType D, bool COMPRESSED>
inline cudaError_t ring_resident_blocks(int& blocks) {
  blocks = 0;
  const auto kernel = ring_allreduce_kernel<D, COMPRESSED>;  // one stub for the attribute and the query
  int device = 0, per_sm = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = detail::prepare_kernel_once(reinterpret_cast<const void*>(kernel), device, ring_smem_bytes<D, COMPRESSED>());
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, RING_THREADS, ring_smem_bytes<D, COMPRESSED>());
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) blocks = per_sm * sms;
  return e;
}

/// Launches one pass on the current device, cooperatively (so either every block is resident or the launch
/// fails with cudaErrorCooperativeLaunchTooLarge). cudaErrorInvalidValue for inconsistent arguments.
template <DType D, bool COMPRESSED>
inline cudaError_t ring_launch_pass(const RingLaunch& a, cudaStream_t stream) {
  if (!ring_launch_valid(a, D)) return cudaErrorInvalidValue;
  const void* kernel = reinterpret_cast<const void*>(ring_allreduce_kernel<D, COMPRESSED>);  // one stub for both
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = detail::prepare_kernel_once(kernel, device, ring_smem_bytes<D, COMPRESSED>());
  if (e != cudaSuccess) return e;
  RingLaunch args = a;
  void* params[] = {&args};
  return cudaLaunchCooperativeKernel(kernel, dim3(unsigned(a.num_ranks * a.part.channels)), dim3(RING_THREADS), params,
                                     ring_smem_bytes<D, COMPRESSED>(), stream);
}

/// Pass sequencing of one communicator: the epoch of the last pass. Every rank of a ring must issue the same
/// calls, in order on one stream, so that every rank's sequence agrees.
struct RingSequence {
  uint32_t epoch = 0;
};

/// Splits a call into passes (each fits the mailbox) and calls launch(pass) for each: `call` holds everything
/// but epoch, first_round and rounds. Stops at the first error.
template <class LaunchPass>
inline cudaError_t ring_for_each_pass(RingSequence& seq, RingLaunch call, LaunchPass&& launch) {
  const uint64_t per_pass = ring_rounds_per_pass(call.layout, call.part.ranks);
  if (per_pass == 0) return cudaErrorInvalidValue;
  for (uint64_t first = 0; first < call.part.rounds; first += per_pass) {
    call.epoch = seq.epoch + 1;
    call.first_round = first;
    call.rounds = call.part.rounds - first < per_pass ? call.part.rounds - first : per_pass;
    const cudaError_t e = launch(static_cast<const RingLaunch&>(call));
    if (e != cudaSuccess) return e;
    seq.epoch = call.epoch;
  }
  return cudaSuccess;
}

}  // namespace comm
}  // namespace zipcomm
