// zipcomm: lossless exponent compression for GPU communication.
// config.hpp - portability macros, version and the status codes shared by host and device code.
#pragma once

#include <cstdint>

#define ZIPCOMM_VERSION_MAJOR 0
#define ZIPCOMM_VERSION_MINOR 1
#define ZIPCOMM_VERSION_PATCH 0

#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
#define ZIPCOMM_HOST_DEVICE __host__ __device__ __forceinline__
#define ZIPCOMM_DEVICE __device__ __forceinline__
#define ZIPCOMM_UNROLL _Pragma("unroll")
#else
#define ZIPCOMM_HOST_DEVICE inline
#define ZIPCOMM_DEVICE inline
#define ZIPCOMM_UNROLL
#endif

namespace zipcomm {

/// Result of every zipcomm operation that can fail. Device entry points write it to device memory.
enum class Status : uint32_t {
  ok = 0,
  invalid_argument = 1,   ///< null pointer with a non-zero size, unknown dtype/code, bad alignment
  buffer_too_small = 2,   ///< destination capacity below what the operation needs
  bad_header = 3,         ///< magic, version, dtype, code or sizes in the header are wrong
  corrupt_stream = 4,     ///< chunk table or a chunk stream is inconsistent (includes truncation)
  size_mismatch = 5,      ///< element counts of the operands disagree
  timeout = 6,            ///< a bounded wait on a peer expired
  checksum_mismatch = 7,  ///< a chunk decoded to elements whose check differs from the stored one
  unsupported_version = 8,  ///< a stream of a format version not read (v1 to v4; v5 and v6 are read)
  not_finite = 9,         ///< lossy quantization tier: a NaN or infinity in the input, or a group whose range
                          ///< or reconstruction is not finite (include/zipcomm/quant/)
};

ZIPCOMM_HOST_DEVICE const char* status_string(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::invalid_argument: return "invalid argument";
    case Status::buffer_too_small: return "buffer too small";
    case Status::bad_header: return "bad header";
    case Status::corrupt_stream: return "corrupt stream";
    case Status::size_mismatch: return "size mismatch";
    case Status::timeout: return "timeout";
    case Status::checksum_mismatch: return "checksum mismatch";
    case Status::unsupported_version: return "unsupported format version";
    case Status::not_finite: return "not finite (NaN, infinity or a range that overflows)";
  }
  return "unknown status";
}

}  // namespace zipcomm
