// P2P pipeline: the small kernels the host side queues between launches (holding a stream, moving a side's
// control words).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_ops.cuh"

namespace zipcomm {
namespace comm {

template <class Word = uint32_t>
__global__ void p2p_hold_stream_kernel(const volatile Word* go, Word* timed_out, uint64_t timeout_ns) {
  zipcomm::detail::WaitBound bound;
  bound.timeout_ns = timeout_ns;
  auto released = [&] { return zipcomm::detail::WaitStep{*go != Word(0), Status::ok}; };
  if (zipcomm::detail::poll_bounded(released, bound, zipcomm::detail::FixedSleep{256}) != Status::ok)
    *timed_out = Word(1);
}

/// Copies `words` 64-bit words from `from` to `to` (`to` may be mapped pinned memory); `from` null: zeroes `to`. What
/// a side's state needs before a launch (zeroed counters and control words) and after it (its status words into the
/// host's record). A kernel rather than cudaMemsetAsync / cudaMemcpyAsync: while a transfer's copy streams keep
/// the copy engines busy back to back, a memset or copy queued on another stream waited until those streams ran
/// dry (~1 ms per message of a batch, bench_p2p --batch-trace, H200), and the next launch behind it with it. One
/// block of 32 threads: it fits beside the persistent sender and receiver. A template only so that the header
/// defines it in every translation unit.
template <class Word = uint64_t>
__global__ void p2p_side_words_kernel(Word* to, const Word* from, uint32_t words) {
  for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) to[i] = from ? from[i] : Word(0);
}

namespace p2p_detail {
/// p2p_side_words_kernel through the one host stub this object holds. nvcc gives each translation unit its own
/// stub, and so its own kernel, for a __global__ template (`-static-global-template-stub`, on by default since
/// CUDA 13): a kernel loaded through one stub is not the one another stub launches.
class SideWordsKernel {
 public:
  /// Loads the kernel now (lazy loading would load it at its first launch, and a load waits for every kernel
  /// running on the GPU, e.g. another program's persistent kernels).
  cudaError_t load() const {
    cudaFuncAttributes fa;
    return cudaFuncGetAttributes(&fa, kernel_);
  }
  /// Enqueues the copy of `bytes` (a multiple of 8; 0: nothing) from `from` (null: zeroes) to `to` on `stream`.
  cudaError_t operator()(void* to, const void* from, size_t bytes, cudaStream_t stream) const {
    if (bytes == 0) return cudaSuccess;
    if (bytes % 8 || bytes / 8 > UINT32_MAX) return cudaErrorInvalidValue;
    kernel_<<<1, 32, 0, stream>>>(static_cast<uint64_t*>(to), static_cast<const uint64_t*>(from),
                                  uint32_t(bytes / 8));
    return cudaGetLastError();
  }

 private:
  void (*kernel_)(uint64_t*, const uint64_t*, uint32_t) = p2p_side_words_kernel<uint64_t>;
};
}  // namespace p2p_detail

}  // namespace comm
}  // namespace zipcomm
