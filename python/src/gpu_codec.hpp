// The GPU half of the extension: stream-ordered calls of zipcomm::device::compress / decompress
// (device_codec_dispatch.cuh) and of the quantization tier's device entry points, their outcomes read on request;
// compiled by nvcc in gpu_codec.cu. Only plain C++ types cross this boundary.
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

/// Stream-ordered compress of n elements at d_in (any alignment) into d_out (16-byte aligned, capacity bytes) in
/// chunks of 2^chunk_log2 elements (format::CHUNK_LOG2_AUTO: the default for n) on `stream` (a cudaStream_t of
/// `device`; 0: the legacy default stream): nothing waits for the GPU. Temp storage comes from the stream-ordered
/// allocator. Returns the call's id for wait(); an argument the entry point refuses becomes that call's Status.
uint64_t compress_async(int device, zipcomm::DType dtype, zipcomm::CodeId code, const void* d_in, uint64_t n,
                        void* d_out, uint64_t capacity, uint32_t chunk_log2, uintptr_t stream);

/// Stream-ordered decompress of the stream at d_in (16-byte aligned, in_bytes) into d_out (room for
/// out_capacity_elems elements of dtype; the stream's header must say dtype, else bad_header is its Status).
uint64_t decompress_async(int device, zipcomm::DType dtype, const void* d_in, uint64_t in_bytes,
                          void* d_out, uint64_t out_capacity_elems, uintptr_t stream);

/// Waits for call `id` and throws StatusError (its Status) or CudaError; returns its compressed size (0 for a
/// decompress, or for a call synchronize() already waited for).
uint64_t wait(uint64_t id);

/// Waits for every call not yet waited for; throws the first error among them.
void synchronize();

/// Copies bytes from device memory to the host after the work on `stream`, and waits for it.
void copy_to_host_on_stream(int device, void* dst, const void* src, uint64_t bytes, uintptr_t stream);

/// Stream-ordered quantize of n elements at d_in (any alignment) into the message at d_msg (16-byte aligned,
/// capacity >= its exact size, quant::max_quantized_bytes); an id for wait().
uint64_t quantize_async(int device, zipcomm::DType dtype, zipcomm::quant::QuantMode mode, uint32_t bits,
                        uint32_t group, const void* d_in, uint64_t n, void* d_msg, uint64_t capacity, uintptr_t stream);

/// Stream-ordered dequantize of the message at d_msg (16-byte aligned) into d_out as elements of out_dtype.
uint64_t dequantize_async(int device, const void* d_msg, uint64_t msg_bytes, zipcomm::DType out_dtype, void* d_out,
                          uint64_t out_capacity_bytes, uintptr_t stream);

/// Per-row EAR of rows x vocab fp32 logits in device memory, into h_out (host, rows doubles), after the work on
/// `stream` (waits for it).
void ear_rows(int device, const float* d_p, const float* d_q, uint64_t rows, uint64_t vocab, double* h_out,
              uintptr_t stream);

}  // namespace gpu
}  // namespace zipcomm_python
