// nvCOMP as zipcomm_bench's peer: NVIDIA's closed compression library, through its batched low-level C API (ANS
// and Bitcomp, nvCOMP >= 6), on the same device buffers as zipcomm and timed the same way (CUDA events on the
// stream it runs on, median of --reps after warm-ups). Built when CMake finds nvCOMP (ZIPCOMM_BENCH_WITH_NVCOMP);
// bash scripts/fetch-nvcomp.sh puts it in .deps/nvcomp.
#pragma once

#include <cuda_runtime.h>

#include <nvcomp/ans.h>
#include <nvcomp/bitcomp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench_common.cuh"

namespace bench {
namespace nvcomp_peer {

enum class Algorithm { ans, bitcomp };

/// One nvCOMP configuration: the algorithm and the uncompressed bytes of each chunk of the batch.
struct Config {
  Algorithm algorithm;
  size_t chunk_bytes;
  const char* name;  // operation names are "<name> encode" / "<name> decode"
};

/// What a user would pick: ANS (entropy coder, the closest to zipcomm's exponent coding) at nvCOMP's recommended
/// 64 KiB chunk and at 1 MiB, and Bitcomp's default algorithm.
inline constexpr Config kConfigs[] = {
    {Algorithm::ans, size_t(64) << 10, "nvCOMP ANS 64KiB"},
    {Algorithm::ans, size_t(1) << 20, "nvCOMP ANS 1MiB"},
    {Algorithm::bitcomp, size_t(64) << 10, "nvCOMP Bitcomp 64KiB"},
};

/// Bytes a receiver needs per chunk besides the chunk itself: its compressed size (or offset).
constexpr uint64_t kChunkSizeBytes = 8;

struct Measurement {
  double ratio;      // (sum of compressed chunk sizes + kChunkSizeBytes per chunk) / uncompressed bytes
  double encode_ms;  // median over reps
  double decode_ms;
};

/// Round trips that came back different from the input, over the whole run (the bench exits 1 when nonzero).
inline int& failed_round_trips() {
  static int count = 0;
  return count;
}

/// "6.0.0 (CUDA runtime 13.0)" as the loaded library reports it.
inline std::string version_string() {
  nvcompProperties_t properties{};
  if (nvcompGetProperties(&properties) != nvcompSuccess) return "unknown version";
  char text[96];
  std::snprintf(text, sizeof text, "%u.%u.%u (CUDA runtime %u.%u)", NVCOMP_MAJOR_FROM_SEMVER(properties.version),
                NVCOMP_MINOR_FROM_SEMVER(properties.version), NVCOMP_PATCH_FROM_SEMVER(properties.version),
                properties.cudart_version / 1000, properties.cudart_version % 1000 / 10);
  return text;
}

/// cudaMalloc'd bytes, freed on scope exit (a skipped configuration returns early).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ != 0) CK(cudaMalloc(&ptr_, bytes_));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

/// A batch of chunks in device memory, laid out as nvCOMP's batched API takes it.
struct Batch {
  size_t chunks = 0, max_chunk_bytes = 0, total_bytes = 0;
  const void* const* d_uncompressed_ptrs = nullptr;
  const size_t* d_uncompressed_bytes = nullptr;  // also the decompressed buffers' capacities
  void* const* d_compressed_ptrs = nullptr;
  size_t* d_compressed_bytes = nullptr;
  void* const* d_decompressed_ptrs = nullptr;
  size_t* d_decompressed_bytes = nullptr;
  nvcompStatus_t* d_statuses = nullptr;
  void* d_temp = nullptr;
  size_t temp_bytes = 0;
};

/// One algorithm's batched entry points with its options bound to the element type.
class BatchedCodec {
 public:
  BatchedCodec(Algorithm algorithm, int elem_bytes) : algorithm_(algorithm) {
    // ANS models 16-bit floats (either half format) and fp32 by their bytes' roles, and fp8 as plain bytes;
    // Bitcomp's lossless mode views the data as integers of the element's width.
    ans_compress_.data_type = elem_bytes == 1   ? NVCOMP_TYPE_UCHAR
                              : elem_bytes == 2 ? NVCOMP_TYPE_FLOAT16
                                                : NVCOMP_TYPE_FLOAT32;
    ans_decompress_.data_type = ans_compress_.data_type;
    bitcomp_compress_.data_type = elem_bytes == 1   ? NVCOMP_TYPE_UCHAR
                                  : elem_bytes == 2 ? NVCOMP_TYPE_USHORT
                                                    : NVCOMP_TYPE_UINT;
  }

  nvcompStatus_t alignments(nvcompAlignmentRequirements_t* compress, nvcompAlignmentRequirements_t* decompress) const {
    nvcompStatus_t s = algorithm_ == Algorithm::ans
                           ? nvcompBatchedANSCompressGetRequiredAlignments(ans_compress_, compress)
                           : nvcompBatchedBitcompCompressGetRequiredAlignments(bitcomp_compress_, compress);
    if (s != nvcompSuccess) return s;
    return algorithm_ == Algorithm::ans
               ? nvcompBatchedANSDecompressGetRequiredAlignments(ans_decompress_, decompress)
               : nvcompBatchedBitcompDecompressGetRequiredAlignments(bitcomp_decompress_, decompress);
  }

  nvcompStatus_t max_compressed_chunk_bytes(size_t chunk_bytes, size_t* bytes) const {
    return algorithm_ == Algorithm::ans
               ? nvcompBatchedANSCompressGetMaxOutputChunkSize(chunk_bytes, ans_compress_, bytes)
               : nvcompBatchedBitcompCompressGetMaxOutputChunkSize(chunk_bytes, bitcomp_compress_, bytes);
  }

  nvcompStatus_t compress_temp_bytes(size_t chunks, size_t max_chunk_bytes, size_t total_bytes, size_t* bytes) const {
    return algorithm_ == Algorithm::ans
               ? nvcompBatchedANSCompressGetTempSize(chunks, max_chunk_bytes, ans_compress_, bytes, total_bytes, 0)
               : nvcompBatchedBitcompCompressGetTempSize(chunks, max_chunk_bytes, bitcomp_compress_, bytes,
                                                         total_bytes, 0);
  }

  nvcompStatus_t decompress_temp_bytes(size_t chunks, size_t max_chunk_bytes, size_t total_bytes,
                                       size_t* bytes) const {
    return algorithm_ == Algorithm::ans
               ? nvcompBatchedANSDecompressGetTempSize(chunks, max_chunk_bytes, ans_decompress_, bytes, total_bytes,
                                                       0)
               : nvcompBatchedBitcompDecompressGetTempSize(chunks, max_chunk_bytes, bitcomp_decompress_, bytes,
                                                           total_bytes, 0);
  }

  /// Enqueues the batch's compression on `stream`.
  nvcompStatus_t compress(const Batch& b, cudaStream_t stream) const {
    if (algorithm_ == Algorithm::ans)
      return nvcompBatchedANSCompressAsync(b.d_uncompressed_ptrs, b.d_uncompressed_bytes, b.max_chunk_bytes, b.chunks,
                                           b.d_temp, b.temp_bytes, b.d_compressed_ptrs, b.d_compressed_bytes,
                                           ans_compress_, b.d_statuses, stream);
    return nvcompBatchedBitcompCompressAsync(b.d_uncompressed_ptrs, b.d_uncompressed_bytes, b.max_chunk_bytes,
                                             b.chunks, b.d_temp, b.temp_bytes, b.d_compressed_ptrs,
                                             b.d_compressed_bytes, bitcomp_compress_, b.d_statuses, stream);
  }

  /// Enqueues the batch's decompression on `stream` (Bitcomp's synchronizes it first to read the chunks'
  /// headers: that host wait is part of its cost, so it stays inside the timing).
  nvcompStatus_t decompress(const Batch& b, cudaStream_t stream) const {
    if (algorithm_ == Algorithm::ans)
      return nvcompBatchedANSDecompressAsync(b.d_compressed_ptrs, b.d_compressed_bytes, b.d_uncompressed_bytes,
                                             b.d_decompressed_bytes, b.chunks, b.d_temp, b.temp_bytes,
                                             b.d_decompressed_ptrs, ans_decompress_, b.d_statuses, stream);
    return nvcompBatchedBitcompDecompressAsync(b.d_compressed_ptrs, b.d_compressed_bytes, b.d_uncompressed_bytes,
                                               b.d_decompressed_bytes, b.chunks, b.d_temp, b.temp_bytes,
                                               b.d_decompressed_ptrs, bitcomp_decompress_, b.d_statuses, stream);
  }

 private:
  Algorithm algorithm_;
  nvcompBatchedANSCompressOpts_t ans_compress_ = nvcompBatchedANSCompressDefaultOpts;
  nvcompBatchedANSDecompressOpts_t ans_decompress_ = nvcompBatchedANSDecompressDefaultOpts;
  nvcompBatchedBitcompCompressOpts_t bitcomp_compress_ = nvcompBatchedBitcompCompressDefaultOpts;
  nvcompBatchedBitcompDecompressOpts_t bitcomp_decompress_ = nvcompBatchedBitcompDecompressDefaultOpts;
};

namespace detail {

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/// Prints which nvCOMP step failed for `label`, and that its row is skipped.
inline void report_skip(const std::string& label, const char* step, nvcompStatus_t status) {
  std::fprintf(stderr, "%s: %s returned %s (%d); row skipped\n", label.c_str(), step, nvcompGetStatusString(status),
               int(status));
}

/// First chunk whose status is not nvcompSuccess, or chunks.
inline size_t first_failed_chunk(const nvcompStatus_t* d_statuses, size_t chunks, nvcompStatus_t* status) {
  std::vector<nvcompStatus_t> statuses(chunks);
  CK(cudaMemcpy(statuses.data(), d_statuses, chunks * sizeof(nvcompStatus_t), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < chunks; ++i)
    if (statuses[i] != nvcompSuccess) return *status = statuses[i], i;
  return chunks;
}

}  // namespace detail

/// Compresses the `host.size()` bytes at d_in (elements of elem_bytes, 1, 2 or 4) as a batch of config.chunk_bytes
/// chunks into buffers of its own, decompresses them into d_back, checks the round trip against `host` once, then
/// times each direction over `reps`, all of it on `stream` (an SM partition's, for the --sms rows). Empty, after a
/// line on stderr, when nvCOMP reports an error or the round trip differs (counted in failed_round_trips()).
inline std::optional<Measurement> measure(const Config& config, const void* d_in, void* d_back,
                                          const std::vector<uint8_t>& host, int elem_bytes, int reps,
                                          const std::string& label, cudaStream_t stream = 0) {
  const BatchedCodec codec(config.algorithm, elem_bytes);
  const size_t total = host.size(), chunk = config.chunk_bytes, chunks = (total + chunk - 1) / chunk;
  nvcompStatus_t s;

  nvcompAlignmentRequirements_t calign{}, dalign{};
  if ((s = codec.alignments(&calign, &dalign)) != nvcompSuccess)
    return detail::report_skip(label, "GetRequiredAlignments", s), std::nullopt;
  // Chunks lie back to back in d_in and d_back (cudaMalloc'd: 256-byte aligned), temp is cudaMalloc'd.
  const size_t in_align = std::max(calign.input, dalign.output), temp_align = std::max(calign.temp, dalign.temp);
  if (chunk % in_align != 0 || reinterpret_cast<uintptr_t>(d_in) % in_align != 0 ||
      reinterpret_cast<uintptr_t>(d_back) % in_align != 0 || 256 % temp_align != 0) {
    std::fprintf(stderr, "%s: nvCOMP wants %zu-byte aligned chunks and %zu-byte aligned temp; row skipped\n",
                 label.c_str(), in_align, temp_align);
    return std::nullopt;
  }
  size_t max_compressed = 0, compress_temp = 0, decompress_temp = 0;
  if ((s = codec.max_compressed_chunk_bytes(chunk, &max_compressed)) != nvcompSuccess)
    return detail::report_skip(label, "GetMaxOutputChunkSize", s), std::nullopt;
  if ((s = codec.compress_temp_bytes(chunks, chunk, total, &compress_temp)) != nvcompSuccess)
    return detail::report_skip(label, "CompressGetTempSize", s), std::nullopt;
  if ((s = codec.decompress_temp_bytes(chunks, chunk, total, &decompress_temp)) != nvcompSuccess)
    return detail::report_skip(label, "DecompressGetTempSize", s), std::nullopt;
  // Compressed chunks sit in fixed slots, each aligned for the compressor's output and the decompressor's input.
  const size_t slot = detail::align_up(max_compressed, std::max({calign.output, dalign.input, size_t(16)}));

  DeviceBuffer compressed(slot * chunks), temp(std::max(compress_temp, decompress_temp));
  DeviceBuffer ptrs(3 * chunks * sizeof(void*)), sizes(3 * chunks * sizeof(size_t));
  DeviceBuffer statuses(chunks * sizeof(nvcompStatus_t));
  std::vector<const void*> host_ptrs(3 * chunks);
  std::vector<size_t> host_sizes(3 * chunks, 0);
  for (size_t i = 0; i < chunks; ++i) {
    host_ptrs[i] = static_cast<const uint8_t*>(d_in) + i * chunk;
    host_ptrs[chunks + i] = compressed.get<uint8_t>() + i * slot;
    host_ptrs[2 * chunks + i] = static_cast<uint8_t*>(d_back) + i * chunk;
    host_sizes[i] = std::min(chunk, total - i * chunk);
  }
  CK(cudaMemcpy(ptrs.get(), host_ptrs.data(), ptrs.bytes(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sizes.get(), host_sizes.data(), sizes.bytes(), cudaMemcpyHostToDevice));
  Batch batch;
  batch.chunks = chunks;
  batch.max_chunk_bytes = chunk;
  batch.total_bytes = total;
  batch.d_uncompressed_ptrs = ptrs.get<const void*>();
  batch.d_compressed_ptrs = ptrs.get<void*>() + chunks;
  batch.d_decompressed_ptrs = ptrs.get<void*>() + 2 * chunks;
  batch.d_uncompressed_bytes = sizes.get<size_t>();
  batch.d_compressed_bytes = sizes.get<size_t>() + chunks;
  batch.d_decompressed_bytes = sizes.get<size_t>() + 2 * chunks;
  batch.d_statuses = statuses.get<nvcompStatus_t>();
  batch.d_temp = temp.get();
  batch.temp_bytes = temp.bytes();
  // The pageable copies above may still be in flight on the legacy stream, which a non-blocking `stream` does
  // not wait for.
  CK(cudaDeviceSynchronize());

  // Checks the per-chunk statuses of the last enqueued operation.
  auto chunks_ok = [&](const char* step) {
    nvcompStatus_t failed = nvcompSuccess;
    const size_t i = detail::first_failed_chunk(batch.d_statuses, chunks, &failed);
    if (i == chunks) return true;
    std::fprintf(stderr, "%s: %s: chunk %zu of %zu: %s (%d); row skipped\n", label.c_str(), step, i, chunks,
                 nvcompGetStatusString(failed), int(failed));
    return false;
  };

  // One checked round trip; d_back is overwritten first so that earlier contents cannot pass for nvCOMP's output.
  if ((s = codec.compress(batch, stream)) != nvcompSuccess)
    return detail::report_skip(label, "CompressAsync", s), std::nullopt;
  CK(cudaStreamSynchronize(stream));
  if (!chunks_ok("compress")) return std::nullopt;
  std::vector<size_t> compressed_bytes(chunks);
  CK(cudaMemcpy(compressed_bytes.data(), batch.d_compressed_bytes, chunks * sizeof(size_t), cudaMemcpyDeviceToHost));
  uint64_t receiver_bytes = 0;
  for (size_t b : compressed_bytes) receiver_bytes += b + kChunkSizeBytes;

  CK(cudaMemsetAsync(d_back, 0xA5, total, stream));
  if ((s = codec.decompress(batch, stream)) != nvcompSuccess)
    return detail::report_skip(label, "DecompressAsync", s), std::nullopt;
  CK(cudaStreamSynchronize(stream));
  if (!chunks_ok("decompress")) return std::nullopt;
  std::vector<size_t> decompressed_bytes(chunks);
  CK(cudaMemcpy(decompressed_bytes.data(), batch.d_decompressed_bytes, chunks * sizeof(size_t),
                cudaMemcpyDeviceToHost));
  std::vector<uint8_t> back(total);
  CK(cudaMemcpy(back.data(), d_back, total, cudaMemcpyDeviceToHost));
  const auto differ = std::mismatch(back.begin(), back.end(), host.begin()).first;
  const bool sizes_match = std::equal(decompressed_bytes.begin(), decompressed_bytes.end(), host_sizes.begin());
  if (differ != back.end() || !sizes_match) {
    ++failed_round_trips();
    const std::string what = sizes_match ? "first differing byte at " + std::to_string(differ - back.begin())
                                         : std::string("decompressed chunk sizes differ");
    std::fprintf(stderr, "%s: nvCOMP round trip FAILED (%s); row skipped\n", label.c_str(), what.c_str());
    return std::nullopt;
  }

  // Timed runs: a launch error inside the timing loop is kept and reported after it.
  nvcompStatus_t launch = nvcompSuccess;
  const double encode_ms = median_ms(reps, stream, [&] {
    const nvcompStatus_t r = codec.compress(batch, stream);
    if (r != nvcompSuccess) launch = r;
  });
  if (launch != nvcompSuccess) return detail::report_skip(label, "CompressAsync (timed)", launch), std::nullopt;
  if (!chunks_ok("compress (timed)")) return std::nullopt;
  const double decode_ms = median_ms(reps, stream, [&] {
    const nvcompStatus_t r = codec.decompress(batch, stream);
    if (r != nvcompSuccess) launch = r;
  });
  if (launch != nvcompSuccess) return detail::report_skip(label, "DecompressAsync (timed)", launch), std::nullopt;
  if (!chunks_ok("decompress (timed)")) return std::nullopt;

  return Measurement{double(receiver_bytes) / double(total), encode_ms, decode_ms};
}

}  // namespace nvcomp_peer
}  // namespace bench
