// P2P pipeline, host side: the pipelined raw copy through pinned host buffers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace zipcomm {
namespace comm {

/// Pipelined raw copy through pinned host buffers: chunk i goes device -> host on the caller's stream while
/// chunk i - 1 goes host -> device on a second stream; a message of one chunk is just the two copies on the
/// caller's stream. The bypass of HostStagingLink, and the raw baseline of bench/p2p/p2p_curve.cu.
/// \code
/// // 4 pinned buffers of 8 MiB at host_buffers; events: 2 * 4 + 2 cudaEvent_t
/// zipcomm::comm::StagedRawCopy::run(d_src, d_dst, bytes, 8 << 20, host_buffers, 4, events, stream, h2d_stream);
/// \endcode
struct StagedRawCopy {
  /// A stretch of bytes to copy (run_segments).
  struct Segment {
    const void* src;
    void* dst;
    uint64_t bytes;
  };
  /// `buffers` chunks of `chunk_bytes` each at `host` (pinned); `events`: 2 * buffers + 2 events. Later work
  /// on `stream` sees dst complete.
  static cudaError_t run(const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes, uint8_t* host,
                         uint32_t buffers, cudaEvent_t* events, cudaStream_t stream, cudaStream_t h2d) {
    const Segment one = {src, dst, bytes};
    return run_segments(&one, 1, chunk_bytes, host, buffers, events, stream, h2d);
  }
  /// Many stretches as one pipeline: the chunks of every segment in turn share the host buffers, so the host ->
  /// device side of one segment overlaps the device -> host side of the next (no drain between segments). A
  /// chunk never spans two segments. Empty segments are skipped; a null pointer in a non-empty one is refused
  /// before anything is enqueued.
  static cudaError_t run_segments(const Segment* segs, size_t count, uint64_t chunk_bytes, uint8_t* host,
                                  uint32_t buffers, cudaEvent_t* events, cudaStream_t stream, cudaStream_t h2d) {
    if (count && !segs) return cudaErrorInvalidValue;
    uint64_t total = 0;
    size_t nonempty = 0, only = 0;
    for (size_t s = 0; s < count; ++s) {
      if (segs[s].bytes == 0) continue;
      if (!segs[s].src || !segs[s].dst) return cudaErrorInvalidValue;
      total += segs[s].bytes, ++nonempty, only = s;
    }
    if (total == 0) return cudaSuccess;
    if (!host || buffers == 0 || chunk_bytes == 0) return cudaErrorInvalidValue;
    if (nonempty == 1 && total <= chunk_bytes) {
      cudaError_t e = cudaMemcpyAsync(host, segs[only].src, total, cudaMemcpyDeviceToHost, stream);
      return e != cudaSuccess ? e : cudaMemcpyAsync(segs[only].dst, host, total, cudaMemcpyHostToDevice, stream);
    }
    cudaEvent_t* copied_out = events;           // chunk in the host buffer
    cudaEvent_t* copied_in = events + buffers;  // host buffer free again
    cudaEvent_t start = events[2 * buffers], done = events[2 * buffers + 1];
    cudaError_t e = cudaEventRecord(start, stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(h2d, start, 0);
    const cudaStream_t d2h = stream;
    uint64_t i = 0;  // chunks issued, over all segments
    for (size_t s = 0; s < count && e == cudaSuccess; ++s) {
      const uint8_t* src = static_cast<const uint8_t*>(segs[s].src);
      uint8_t* dst = static_cast<uint8_t*>(segs[s].dst);
      for (uint64_t off = 0; off < segs[s].bytes && e == cudaSuccess; off += chunk_bytes, ++i) {
        const uint32_t b = uint32_t(i % buffers);
        const uint64_t len = std::min(chunk_bytes, segs[s].bytes - off);
        uint8_t* hb = host + size_t(b) * chunk_bytes;
        if (i >= buffers) e = cudaStreamWaitEvent(d2h, copied_in[b], 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(hb, src + off, len, cudaMemcpyDeviceToHost, d2h);
        if (e == cudaSuccess) e = cudaEventRecord(copied_out[b], d2h);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(h2d, copied_out[b], 0);
        if (e == cudaSuccess) e = cudaMemcpyAsync(dst + off, hb, len, cudaMemcpyHostToDevice, h2d);
        if (e == cudaSuccess) e = cudaEventRecord(copied_in[b], h2d);
      }
    }
    if (e == cudaSuccess) e = cudaEventRecord(done, h2d);
    return e != cudaSuccess ? e : cudaStreamWaitEvent(stream, done, 0);
  }
};

}  // namespace comm
}  // namespace zipcomm
