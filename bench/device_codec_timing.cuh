// The library's device codec timed on one input in one code: compress and decompress medians, the stream's size, and
// the round trip checked (zipcomm_bench's device rows).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <zipcomm/device/device_codec.cuh>

#include "bench_common.cuh"

namespace bench {

/// Median times of a device compress and decompress of d_in[0, n) in chunks of 2^chunk_log2, and the stream's
/// size; exits unless the status is ok and the round trip gives `host` back.
struct DeviceTiming {
  double enc_ms, dec_ms;
  uint64_t bytes;
};
template <zipcomm::DType D, class Code>
DeviceTiming time_device_codec(const std::string& name, const std::vector<uint8_t>& host, const void* d_in, uint64_t n,
                               void* d_out, uint64_t cap, void* d_back, void* d_temp, size_t temp_bytes,
                               size_t dtemp_bytes, uint64_t* d_bytes, zipcomm::Status* d_status, uint32_t chunk_log2,
                               int reps, cudaStream_t stream) {
  using namespace zipcomm;
  const uint64_t eb = format::elem_bytes(D);
  DeviceTiming r{};
  r.enc_ms = median_ms(reps, stream, [&] {
    CK(device::compress<D, Code>(d_temp, temp_bytes, d_in, n, d_out, cap, d_bytes, d_status, stream, chunk_log2));
  });
  Status st;
  CK(cudaMemcpy(&r.bytes, d_bytes, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
  if (st != Status::ok) std::fprintf(stderr, "%s: compress status %s\n", name.c_str(), status_string(st)), std::exit(1);
  // Overwritten first, so that an earlier run's output cannot pass for this one's.
  CK(cudaMemsetAsync(d_back, 0xA5, n * eb, stream));
  r.dec_ms = median_ms(reps, stream, [&] {
    CK(device::decompress<D, Code>(d_temp, dtemp_bytes, d_out, r.bytes, d_back, n, d_status, stream));
  });
  std::vector<uint8_t> back(n * eb);
  CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(back.data(), d_back, n * eb, cudaMemcpyDeviceToHost));
  if (st != Status::ok || back != host) std::fprintf(stderr, "%s: round trip FAILED\n", name.c_str()), std::exit(1);
  return r;
}

}  // namespace bench
