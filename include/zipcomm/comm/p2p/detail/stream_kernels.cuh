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
/// Enqueues p2p_side_words_kernel on `stream` (words == 0: nothing).
inline cudaError_t side_words(void* to, const void* from, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (bytes % 8 || bytes / 8 > UINT32_MAX) return cudaErrorInvalidValue;
  p2p_side_words_kernel<uint64_t>
      <<<1, 32, 0, stream>>>(static_cast<uint64_t*>(to), static_cast<const uint64_t*>(from), uint32_t(bytes / 8));
  return cudaGetLastError();
}
/// Loads p2p_side_words_kernel now (lazy loading would load it at its first launch, and a load waits for every
/// kernel running on the GPU, e.g. another program's persistent kernels).
inline cudaError_t load_side_words_kernel() {
  cudaFuncAttributes fa;
  return cudaFuncGetAttributes(&fa, p2p_side_words_kernel<uint64_t>);
}
}  // namespace p2p_detail

}  // namespace comm
}  // namespace zipcomm
