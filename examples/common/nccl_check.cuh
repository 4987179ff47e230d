// NCCL counterpart of CK (example_common.cuh), for the examples and benchmarks that use NCCL.
#pragma once

#include <nccl.h>

#include "example_common.cuh"

namespace examples {

/// Function form of NK.
inline void check_nccl(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r != ncclSuccess) fail_call(file, line, expr, ncclGetErrorString(r));
}

}  // namespace examples

/// Exits 1 with the call, its place and the NCCL error unless the call returned ncclSuccess.
#define NK(...) ::examples::check_nccl((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)
