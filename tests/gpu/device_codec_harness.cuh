// The GPU tests' device codec harness: compress and decompress on the device (poisoned and guarded buffers), and
// the round trip against the host reference (the same bytes, both decoders exact).
#pragma once

#include <cstring>
#include <vector>

#include <zipcomm/device/device_codec.cuh>
#include <zipcomm/host/reference_codec.hpp>

#include "gpu_test_util.cuh"

namespace gpu_test {

using namespace zipcomm;

struct DeviceResult {
  std::vector<uint8_t> stream;
  Status status;
};

/// Compresses on the device into a poisoned buffer; the stream (empty unless ok) and the status.
template <DType D, class Code>
DeviceResult device_compress(const std::vector<uint8_t>& raw, size_t in_offset = 0,
                             uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  const uint64_t n = raw.size() / format::elem_bytes(D);
  const uint32_t log2 = format::resolve_chunk_log2(chunk_log2, n);
  DeviceBuffer in(raw.size() + in_offset + 16), out(format::max_compressed_bytes(D, n, log2)), meta(64);
  CUDA_OK(cudaMemcpy(in.as(in_offset), raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(out.ptr, 0xCD, out.bytes));  // poison: every stream byte must be written
  size_t temp_bytes = 0;
  CUDA_OK(device::compress<D, Code>(nullptr, temp_bytes, in.as(in_offset), n, out.ptr, out.bytes, nullptr, nullptr,
                                    0, chunk_log2));
  DeviceBuffer temp(temp_bytes);
  CUDA_OK(device::compress<D, Code>(temp.ptr, temp_bytes, in.as(in_offset), n, out.ptr, out.bytes,
                                    meta.as<uint64_t>(), meta.as<Status>(8), 0, chunk_log2));
  CUDA_OK(cudaDeviceSynchronize());
  uint64_t bytes = 0;
  Status st;
  CUDA_OK(cudaMemcpy(&bytes, meta.as<uint64_t>(), 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&st, meta.as<Status>(8), sizeof st, cudaMemcpyDeviceToHost));
  DeviceResult r{std::vector<uint8_t>(st == Status::ok ? bytes : 0), st};
  if (st == Status::ok) CUDA_OK(cudaMemcpy(r.stream.data(), out.ptr, bytes, cudaMemcpyDeviceToHost));
  return r;
}

/// Decompresses on the device into a guarded buffer; checks the guards; returns status and output.
template <DType D, class Code>
Status device_decompress(const std::vector<uint8_t>& stream, uint64_t capacity_elems, std::vector<uint8_t>& out,
                         size_t out_offset = 0, size_t in_pad = 16) {
  const size_t eb = format::elem_bytes(D);
  const size_t guard = 64;
  // in_pad = 0 puts the stream's last byte at the end of its allocation: compute-sanitizer's memcheck then
  // reports any read past the stream.
  DeviceBuffer in(stream.size() + in_pad), dst(capacity_elems * eb + out_offset + 2 * guard), meta(16);
  if (!stream.empty()) CUDA_OK(cudaMemcpy(in.ptr, stream.data(), stream.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dst.ptr, 0xA5, dst.bytes));
  size_t temp_bytes = 0;
  CUDA_OK(device::decompress<D, Code>(nullptr, temp_bytes, in.ptr, stream.size(), nullptr, 0, nullptr));
  DeviceBuffer temp(temp_bytes);
  cudaError_t e = device::decompress<D, Code>(temp.ptr, temp_bytes, in.ptr, stream.size(),
                                              dst.as(guard + out_offset), capacity_elems, meta.as<Status>());
  REQUIRE((e == cudaSuccess || e == cudaErrorInvalidValue));
  CUDA_OK(cudaDeviceSynchronize());
  Status st;
  CUDA_OK(cudaMemcpy(&st, meta.ptr, sizeof st, cudaMemcpyDeviceToHost));
  std::vector<uint8_t> all(dst.bytes);
  CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < guard + out_offset; ++i) REQUIRE(all[i] == 0xA5);
  for (size_t i = guard + out_offset + capacity_elems * eb; i < all.size(); ++i) REQUIRE(all[i] == 0xA5);
  out.assign(all.begin() + guard + out_offset, all.begin() + guard + out_offset + capacity_elems * eb);
  return st;
}

/// Device bytes == host reference bytes; both decoders give the input back.
template <DType D, class Code>
void check_round_trip(const std::vector<uint8_t>& raw, size_t in_offset = 0, size_t out_offset = 0,
                      uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  const uint64_t n = raw.size() / format::elem_bytes(D);
  CAPTURE(n, in_offset, out_offset, int(D), int(Code::ID), chunk_log2);
  const uint32_t log2 = format::resolve_chunk_log2(chunk_log2, n);
  std::vector<uint8_t> ref(format::max_compressed_bytes(D, n, log2));
  uint64_t ref_bytes = 0;
  REQUIRE(host::compress(D, Code::ID, raw.data(), n, ref.data(), ref.size(), &ref_bytes, format::LowWidths::minimal,
                         chunk_log2) == Status::ok);
  ref.resize(ref_bytes);

  DeviceResult dev = device_compress<D, Code>(raw, in_offset, chunk_log2);
  REQUIRE(dev.status == Status::ok);
  REQUIRE(dev.stream.size() == ref.size());
  if (dev.stream != ref) {
    size_t i = 0;
    while (dev.stream[i] == ref[i]) ++i;
    FAIL("device stream differs from host reference at byte " << i << " of " << ref.size());
  }
  std::vector<uint8_t> back;
  REQUIRE(device_decompress<D, Code>(dev.stream, n, back, out_offset) == Status::ok);
  REQUIRE(back == raw);
  std::vector<uint8_t> host_back(raw.size());
  REQUIRE(host::decompress(dev.stream.data(), dev.stream.size(), host_back.data(), host_back.size()) == Status::ok);
  REQUIRE(host_back == raw);
}

}  // namespace gpu_test
