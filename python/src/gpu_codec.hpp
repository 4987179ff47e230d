// The GPU half of the extension: synchronous wrappers of zipcomm::device::compress / decompress
// (device_codec_dispatch.cuh) and of the quantization tier's device entry points, compiled by nvcc in gpu_codec.cu. Only plain C++ types cross this boundary.
// Every function throws CudaError when no GPU is usable, StatusError when the codec reports a Status.
#pragma once

#include <cstdint>
#include <string>

#include <zipcomm/format.hpp>
#include <zipcomm/quant/quant_format.hpp>

#include "codec_errors.hpp"

namespace zipcomm_python {
namespace gpu {

/// Usable CUDA devices; 0 when there are none, with the CUDA runtime's reason in *why.
int device_count(std::string* why);

/// Frees what compress/alloc returned (never throws; for DLPack owners).
void free_device_memory(int device, void* ptr) noexcept;

/// Allocates bytes on `device` (at least 256-byte aligned).
void* alloc(int device, uint64_t bytes);

/// Copies bytes from device memory to the host (ordered after earlier work on the legacy default stream).
void copy_to_host(int device, void* dst, const void* src, uint64_t bytes);

/// Compresses n elements at d_in (device memory of `device`, any alignment) into a new allocation of
/// exactly the stream's size (*out_bytes), to be freed with free_device_memory.
void* compress(int device, zipcomm::DType dtype, zipcomm::CodeId code, const void* d_in, uint64_t n,
               uint64_t* out_bytes);

/// Decompresses the stream at d_in (16-byte aligned, in_bytes long; its header already checked on the host
/// as `header`) into d_out (room for out_capacity_elems elements).
void decompress(int device, const zipcomm::format::Header& header, const void* d_in, uint64_t in_bytes,
                void* d_out, uint64_t out_capacity_elems);

/// Quantizes n elements at d_in (any alignment) into the message at d_msg (16-byte aligned, capacity bytes >= the
/// message's exact size, quant::max_quantized_bytes).
void quantize_into(int device, zipcomm::DType dtype, zipcomm::quant::QuantMode mode, uint32_t bits, uint32_t group,
                   const void* d_in, uint64_t n, void* d_msg, uint64_t capacity);

/// Dequantizes the message at d_msg (16-byte aligned) into d_out as elements of out_dtype.
void dequantize(int device, const void* d_msg, uint64_t msg_bytes, zipcomm::DType out_dtype, void* d_out,
                uint64_t out_capacity_bytes);

/// Per-row EAR of rows x vocab fp32 logits in device memory, into h_out (host, rows doubles).
void ear_rows(int device, const float* d_p, const float* d_q, uint64_t rows, uint64_t vocab, double* h_out);

}  // namespace gpu
}  // namespace zipcomm_python
