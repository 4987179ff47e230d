// GPU tests of the device-wide codec (bf16, fp16, fp32, fp8): device bytes == host reference bytes, bit-exact
// round trips, unaligned pointers, > 2^31 elements, argument errors and corrupt streams.
#include <algorithm>
#include <cstring>
#include <numeric>

#include <zipcomm/device/device_codec.cuh>
#include <zipcomm/host/reference_codec.hpp>

#include "device_codec_harness.cuh"

using namespace zipcomm;
using gpu_test::DeviceBuffer;
using gpu_test::DeviceResult;
using gpu_test::check_round_trip;
using gpu_test::device_compress;
using gpu_test::device_decompress;

namespace {

/// Device bytes = host bytes and both decode, in the default chunk size and in each other one.
template <DType D>
void round_trip(const std::vector<uint8_t>& raw) {
  check_round_trip<D, thread::PairCode>(raw);
  const uint64_t n = raw.size() / format::elem_bytes(D);
  for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2)
    if (log2 != format::default_chunk_log2(n) && n > (uint64_t(1) << format::MIN_CHUNK_LOG2))
      check_round_trip<D, thread::PairCode>(raw, 0, 0, log2);
}

const uint64_t kSizes[] = {0, 1, 31, 32, 33, 255, 256, 257, 16383, 16384, 16385, 3 * 16384 + 77, 1000003};

}  // namespace

TEMPLATE_TEST_CASE("device bytes equal host bytes and round trip, Gaussian data, all sizes", "[gpu][codec]",
                   gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32, gpu_test::Fp8E4M3, gpu_test::Fp8E5M2) {
  constexpr DType D = TestType::value;
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t n : kSizes) round_trip<D>(gpu_test::gaussian_bytes(D, n, 0.02f, rng));
}

TEST_CASE("device bytes equal host bytes: tiles whose low mantissa bits are zero, every width code", "[gpu][codec]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t n : kSizes) {
    auto h = gpu_test::gaussian_bytes(DType::fp16, n, 0.02f, rng);
    gpu_test::drop_low_bits_in_some_tiles(DType::fp16, h, rng);
    round_trip<DType::fp16>(h);
    auto f = gpu_test::gaussian_bytes(DType::fp32, n, 0.02f, rng);
    gpu_test::drop_low_bits_in_some_tiles(DType::fp32, f, rng);
    round_trip<DType::fp32>(f);
  }
}

TEST_CASE("all 65536 bf16 and fp16 patterns, in order and shuffled", "[gpu][codec]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> pat(65536);
  std::iota(pat.begin(), pat.end(), 0);
  for (int shuffled = 0; shuffled < 2; ++shuffled) {
    if (shuffled) std::shuffle(pat.begin(), pat.end(), rng);
    std::vector<uint8_t> raw(pat.size() * 2);
    std::memcpy(raw.data(), pat.data(), raw.size());
    round_trip<DType::bf16>(raw);
    round_trip<DType::fp16>(raw);
  }
  // Each pattern inside realistic tiles: one pattern per 256-element Gaussian tile, at a random slot.
  std::vector<uint8_t> tiles = gpu_test::gaussian_bytes(DType::bf16, 65536 * 4, 0.02f, rng);
  for (uint32_t p = 0; p < 65536; ++p) {
    const uint64_t slot = uint64_t(p % 1024) * 256 + rng() % 256;
    uint16_t v = uint16_t(p);
    std::memcpy(&tiles[2 * slot], &v, 2);
    if (p % 1024 == 1023) round_trip<DType::bf16>(tiles);
  }
}

TEST_CASE("sparse tensors, outliers (escapes) and all-zero tiles give the host's bytes", "[gpu][codec]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = 5 * 16384 + 333;
  for (DType d : {DType::bf16, DType::fp16}) {
    CAPTURE(dtype_name(d));
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(kind);
      std::vector<uint8_t> raw = gpu_test::gaussian_bytes(d, n, 0.02f, rng);
      uint16_t* v = reinterpret_cast<uint16_t*>(raw.data());
      for (uint64_t i = 0; i < n; ++i) {
        if (kind == 0 && rng() % 2) v[i] = 0;                                 // half the values exactly zero
        if (kind == 1 && rng() % 64 == 0) v[i] = uint16_t(v[i] ^ 0x3000);     // outliers far from their tile
        if (kind == 2 && (i / 256) % 3 == 0) v[i] = uint16_t(v[i] & 0x807F);  // tiles of zero exponents
      }
      if (d == DType::bf16) round_trip<DType::bf16>(raw);
      else round_trip<DType::fp16>(raw);
    }
  }
}

TEST_CASE("fp32 special values: NaN payloads, infinities, subnormals, signed zeros", "[gpu][codec]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> raw = gpu_test::gaussian_bytes(DType::fp32, 200000, 1.0f, rng);
  const uint32_t specials[] = {0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u, 0x7F7FFFFFu, 0x00800000u,
                               0x00000001u, 0x807FFFFFu, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7FBFFFFFu};
  for (size_t k = 0; k < 20000; ++k) {
    uint32_t v = specials[rng() % 12];
    if (k % 3 == 0) v = (rng() & 0x807FFFFFu) | ((rng() & 1) ? 0x7F800001u : 0u);  // NaN payload or subnormal
    const size_t i = rng() % 200000;
    std::memcpy(&raw[4 * i], &v, 4);
  }
  round_trip<DType::fp32>(raw);
  std::vector<uint8_t> rnd(4 * 100000);
  for (auto& b : rnd) b = uint8_t(rng());
  round_trip<DType::fp32>(rnd);  // incompressible: every chunk raw
}

TEST_CASE("unaligned input and output pointers give the same bytes", "[gpu][codec]") {
  std::mt19937_64 rng(gpu_test::fresh_seed());
  auto raw = gpu_test::gaussian_bytes(DType::bf16, 40000, 0.02f, rng);
  for (size_t off : {1u, 2u, 3u, 8u, 15u}) check_round_trip<DType::bf16, thread::PairCode>(raw, off, off);
  auto raw32 = gpu_test::gaussian_bytes(DType::fp32, 40000, 0.02f, rng);
  for (size_t off : {1u, 4u, 12u}) check_round_trip<DType::fp32, thread::PairCode>(raw32, off, 16 - off);
}

TEST_CASE("real training tensors", "[gpu][codec]") {
  const std::string dir = ZIPCOMM_TEST_DATA_DIR;
  auto grads = gpu_test::read_file(dir + "/llama_grads.bf16");
  REQUIRE(!grads.empty());
  round_trip<DType::bf16>(grads);
  round_trip<DType::bf16>(gpu_test::read_file(dir + "/llama_acts.bf16"));
  round_trip<DType::bf16>(gpu_test::read_file(dir + "/llama_weights.bf16"));
  round_trip<DType::fp16>(gpu_test::read_file(dir + "/llama_grads_scaled.f16"));
  round_trip<DType::fp32>(gpu_test::read_file(dir + "/llama_grads.f32"));
  round_trip<DType::fp32>(gpu_test::read_file(dir + "/tiny_lm_grads_fp32.f32"));
  round_trip<DType::fp32>(gpu_test::read_file(dir + "/tiny_lm_grads_autocast.f32"));
}

TEST_CASE("argument errors give a status and an error code", "[gpu][codec]") {
  std::mt19937_64 rng(gpu_test::fresh_seed());
  auto raw = gpu_test::gaussian_bytes(DType::bf16, 5000, 0.02f, rng);
  const uint64_t n = 5000;
  DeviceBuffer in(raw.size()), out(format::max_compressed_bytes(DType::bf16, n) + 32), meta(16);
  CUDA_OK(cudaMemcpy(in.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  size_t temp_bytes = 0;
  CUDA_OK(device::compress<DType::bf16>(nullptr, temp_bytes, in.ptr, n, out.ptr, out.bytes, nullptr, nullptr));
  DeviceBuffer temp(temp_bytes);
  Status st;
  // capacity below the bound
  REQUIRE(device::compress<DType::bf16>(temp.ptr, temp_bytes, in.ptr, n, out.ptr, 100, meta.as<uint64_t>(),
                                        meta.as<Status>(8)) == cudaErrorInvalidValue);
  CUDA_OK(cudaMemcpy(&st, meta.as<Status>(8), sizeof st, cudaMemcpyDeviceToHost));
  REQUIRE(st == Status::buffer_too_small);
  // unaligned compressed buffer
  REQUIRE(device::compress<DType::bf16>(temp.ptr, temp_bytes, in.ptr, n, out.as(4), out.bytes - 16,
                                        meta.as<uint64_t>(), meta.as<Status>(8)) == cudaErrorInvalidValue);
  CUDA_OK(cudaMemcpy(&st, meta.as<Status>(8), sizeof st, cudaMemcpyDeviceToHost));
  REQUIRE(st == Status::invalid_argument);
  // chunks of other than 4096, 8192 or 16384 elements
  for (uint32_t bad_log2 : {1u, 11u, 15u, 40u}) {
    REQUIRE(device::compress<DType::bf16>(temp.ptr, temp_bytes, in.ptr, n, out.ptr, out.bytes, meta.as<uint64_t>(),
                                          meta.as<Status>(8), 0, bad_log2) == cudaErrorInvalidValue);
    CUDA_OK(cudaMemcpy(&st, meta.as<Status>(8), sizeof st, cudaMemcpyDeviceToHost));
    REQUIRE(st == Status::invalid_argument);
  }

  DeviceResult dev = device_compress<DType::bf16, thread::PairCode>(raw);
  REQUIRE(dev.status == Status::ok);
  std::vector<uint8_t> back;
  REQUIRE(device_decompress<DType::bf16, thread::PairCode>(dev.stream, n - 1, back) == Status::buffer_too_small);
  REQUIRE(device_decompress<DType::fp16, thread::PairCode>(dev.stream, n, back) == Status::bad_header);
  std::vector<uint8_t> tiny(dev.stream.begin(), dev.stream.begin() + 40);
  REQUIRE(device_decompress<DType::bf16, thread::PairCode>(tiny, n, back) == Status::corrupt_stream);
}

namespace {
/// Single-bit flips all over a stream (every section, the gaps between them included): the device decoder
/// gives an error status for every one, as the host decoder does; then truncations.
template <DType D>
void every_flip_detected(std::mt19937_64& rng) {
  const uint64_t n = 3 * 16384 + 1000;  // a short last tile: fp16's unused plane bits are there
  auto raw = gpu_test::gaussian_bytes(D, n, 0.02f, rng);
  for (uint64_t i = 0; i < 64; ++i) raw[2 * 16384 * format::elem_bytes(D) + i] = uint8_t(rng());  // escapes
  gpu_test::drop_low_bits_in_some_tiles(D, raw, rng);
  DeviceResult dev = device_compress<D, thread::PairCode>(raw);
  REQUIRE(dev.status == Status::ok);
  format::Header h;
  std::memcpy(&h, dev.stream.data(), sizeof h);
  const format::Layout L = format::layout_of(h);
  const uint64_t sections[][2] = {{0, format::HEADER_BYTES},
                                  {L.plane0_offset, L.table_offset},  // plane 0, width codes, the gaps after them
                                  {L.table_offset, L.low_offset},     // chunk tables, checks, gap
                                  {L.low_offset, dev.stream.size()}};  // low bits, exponents
  for (int k = 0; k < 400; ++k) {
    std::vector<uint8_t> bad = dev.stream;
    const auto& sec = sections[k % 4];
    const uint64_t pos = sec[0] + rng() % (sec[1] - sec[0]);
    bad[pos] ^= uint8_t(1u << (rng() % 8));
    std::vector<uint8_t> host_out(raw.size()), dev_out;
    const Status hs = host::decompress(bad.data(), bad.size(), host_out.data(), host_out.size());
    const Status ds = device_decompress<D, thread::PairCode>(bad, n, dev_out);
    CAPTURE(k, pos, status_string(hs), status_string(ds));
    REQUIRE(hs != Status::ok);
    REQUIRE(ds != Status::ok);
  }
  for (size_t cut : {size_t(0), size_t(63), size_t(64), size_t(L.exp_offset), dev.stream.size() - 16,
                     dev.stream.size() - 1}) {
    std::vector<uint8_t> t(dev.stream.begin(), dev.stream.begin() + cut), out;
    CAPTURE(cut);
    REQUIRE(device_decompress<D, thread::PairCode>(t, n, out) != Status::ok);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("every single-bit flip and every truncation gives an error status on the device", "[gpu][codec]",
                   gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32) {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  every_flip_detected<TestType::value>(rng);
}

TEST_CASE("a short last chunk at the very end of its allocation is rejected without reading past it",
          "[gpu][codec]") {
  // A valid header whose table gives the last chunk fewer bytes than its own chunk header (down to none), so
  // the header would lie past the stream's end. Run under memcheck, this catches loads past the allocation.
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t tail_elems : {uint64_t(1), uint64_t(300), uint64_t(777), uint64_t(16383)}) {
    const uint64_t n = 2 * 16384 + tail_elems;
    auto raw = gpu_test::gaussian_bytes(DType::bf16, n, 0.02f, rng);
    DeviceResult dev = device_compress<DType::bf16, thread::PairCode>(raw, 0, 14);
    REQUIRE(dev.status == Status::ok);
    const format::Layout L = format::layout_for(DType::bf16, n, 14);
    REQUIRE(L.num_chunks == 3);
    uint64_t ends[3];
    std::memcpy(ends, dev.stream.data() + L.table_offset, sizeof ends);
    for (uint64_t last_bytes : {uint64_t(0), uint64_t(16)}) {
      CAPTURE(tail_elems, last_bytes);
      if (ends[1] + last_bytes >= ends[2]) continue;  // not a shortened chunk
      std::vector<uint8_t> bad(dev.stream.begin(), dev.stream.begin() + L.exp_offset + ends[1] + last_bytes);
      const uint64_t new_end = ends[1] + last_bytes;
      std::memcpy(bad.data() + L.table_offset + 16, &new_end, 8);
      format::Header h;
      std::memcpy(&h, bad.data(), sizeof h);
      h.total_bytes = bad.size();
      h.header_check = format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
      std::memcpy(bad.data(), &h, sizeof h);
      std::vector<uint8_t> host_out(raw.size()), dev_out;
      const Status hs = host::decompress(bad.data(), bad.size(), host_out.data(), host_out.size());
      const Status ds = device_decompress<DType::bf16, thread::PairCode>(bad, n, dev_out, 0, /*in_pad=*/0);
      REQUIRE(hs != Status::ok);
      REQUIRE(ds == hs);
    }
  }
}

namespace {
__global__ void fill_gaussianish(uint16_t* x, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (i + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    // Sum of 4 uniforms ~ Gaussian; scale varies by 1 MiB block like layers do.
    float s = float(h & 0xFFFF) + float((h >> 16) & 0xFFFF) + float((h >> 32) & 0xFFFF) + float(h >> 48) - 131070.0f;
    float v = s * (1e-7f * float(1 + ((i >> 20) % 7)));
    uint32_t u = __float_as_uint(v);
    x[i] = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}
__global__ void count_mismatch(const uint16_t* a, const uint16_t* b, uint64_t n, unsigned long long* bad) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(bad, local);
}
}  // namespace

TEST_CASE("more than 2^31 elements round trip on the device", "[gpu][codec][large]") {
  const uint64_t n = (uint64_t(1) << 31) + 12345;
  DeviceBuffer in(n * 2), back(n * 2), out(format::max_compressed_bytes(DType::bf16, n)), meta(32);
  fill_gaussianish<<<4096, 256>>>(in.as<uint16_t>(), n, 7);
  size_t temp_bytes = 0;
  CUDA_OK(device::compress<DType::bf16>(nullptr, temp_bytes, in.ptr, n, out.ptr, out.bytes, nullptr, nullptr));
  DeviceBuffer temp(temp_bytes);
  CUDA_OK(device::compress<DType::bf16>(temp.ptr, temp_bytes, in.ptr, n, out.ptr, out.bytes, meta.as<uint64_t>(),
                                        meta.as<Status>(8)));
  uint64_t bytes = 0;
  Status st;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(&bytes, meta.ptr, 8, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&st, meta.as(8), 4, cudaMemcpyDeviceToHost));
  REQUIRE(st == Status::ok);
  REQUIRE(bytes < n * 2);
  WARN("2^31+12345 bf16 elements: ratio " << double(bytes) / double(n * 2));
  // The header as the host reads it.
  format::Header h;
  CUDA_OK(cudaMemcpy(&h, out.ptr, sizeof h, cudaMemcpyDeviceToHost));
  REQUIRE(format::validate_header(h, bytes) == Status::ok);
  REQUIRE(h.num_elements == n);
  CUDA_OK(device::decompress<DType::bf16>(temp.ptr, temp_bytes, out.ptr, bytes, back.ptr, n, meta.as<Status>(8)));
  CUDA_OK(cudaMemset(meta.as(16), 0, 8));
  count_mismatch<<<4096, 256>>>(in.as<uint16_t>(), back.as<uint16_t>(), n, meta.as<unsigned long long>(16));
  CUDA_OK(cudaDeviceSynchronize());
  unsigned long long mism = 1;
  CUDA_OK(cudaMemcpy(&st, meta.as(8), 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&mism, meta.as(16), 8, cudaMemcpyDeviceToHost));
  REQUIRE(st == Status::ok);
  REQUIRE(mism == 0);
}

// ---- fp8 (fp8_e4m3, fp8_e5m2): one-byte elements, plane 0 as bit-planes per tile ----------------------------
namespace {

std::vector<uint8_t> fp8_permutation(std::mt19937_64& rng) {
  std::vector<uint8_t> p(256);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

/// Every fp8 pattern in every position class: in order (a full tile), a full chunk of permuted tiles, a stream
/// that is one short tile (every length), a short last tile after full ones, a raw chunk between coded ones,
/// a raw last chunk ending in a short tile, and each pattern in its own coded Gaussian tile.
template <DType D>
void fp8_patterns(std::mt19937_64& rng) {
  CAPTURE(dtype_name(D));
  std::vector<uint8_t> all(256);
  std::iota(all.begin(), all.end(), 0);
  round_trip<D>(all);
  std::vector<uint8_t> chunk;
  for (int t = 0; t < 64; ++t) {
    const auto p = fp8_permutation(rng);
    chunk.insert(chunk.end(), p.begin(), p.end());
  }
  round_trip<D>(chunk);
  const auto perm = fp8_permutation(rng);
  for (uint32_t n = 1; n < 256; n += 1 + n / 32) round_trip<D>(std::vector<uint8_t>(perm.begin(), perm.begin() + n));
  for (uint32_t rot = 0; rot < 4; ++rot) {
    std::vector<uint8_t> t(3 * 256 + 77);
    for (uint32_t i = 0; i < t.size(); ++i) t[i] = i < 768 ? perm[(i + rot) % 256] : uint8_t(rot * 77 + i - 768);
    round_trip<D>(t);
  }
  auto mixed = gpu_test::gaussian_bytes(D, 3 * 16384, 0.02f, rng);
  for (uint64_t i = 16384; i < 2 * 16384; ++i) mixed[i] = uint8_t(rng());
  for (uint32_t p = 0; p < 256; ++p) mixed[16384 + rng() % 16384] = uint8_t(p);
  round_trip<D>(mixed);
  auto tail = gpu_test::gaussian_bytes(D, 16384 + 1077, 0.02f, rng);
  for (uint32_t k = 0; k < 1077; ++k) tail[16384 + k] = k < 256 ? uint8_t(k) : uint8_t(rng());
  round_trip<D>(tail);
  // Each pattern at a random slot of its own Gaussian tile, the tiles' scales spread over the dtype's range.
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> tiles(4 * 256 * 256);
  for (uint32_t k = 0; k < tiles.size() / 256; ++k) {
    const float scale = std::ldexp(1.0f, int(rng() % 14) - 6);
    for (uint32_t i = 0; i < 256; ++i) tiles[k * 256 + i] = gpu_test::to_fp8(scale * nd(rng), D == DType::fp8_e4m3);
    tiles[k * 256 + rng() % 256] = uint8_t(k);
  }
  round_trip<D>(tiles);
}

/// Single-bit flips all over an fp8 stream: the device decoder gives the host decoder's status, except for a
/// flip in the chunk table, which changes two chunks whose errors may differ (either may be reported first).
template <DType D>
void fp8_flips_match_host(std::mt19937_64& rng) {
  CAPTURE(dtype_name(D));
  const uint64_t n = 3 * 16384 + 1000;  // a short last tile: its bit-planes' unused bits are checked
  auto raw = gpu_test::gaussian_bytes(D, n, 0.02f, rng);
  for (uint64_t i = 0; i < 16384; ++i) raw[16384 + i] = uint8_t(rng());  // a raw chunk
  DeviceResult dev = device_compress<D, thread::PairCode>(raw, 0, 14);
  REQUIRE(dev.status == Status::ok);
  const format::Layout L = format::layout_for(D, n, 14);
  for (int k = 0; k < 600; ++k) {
    std::vector<uint8_t> bad = dev.stream;
    const uint64_t pos = k % 3 == 0 ? L.plane0_offset + rng() % L.plane0_bytes : rng() % bad.size();
    bad[pos] ^= uint8_t(1u << (rng() % 8));
    std::vector<uint8_t> host_out(raw.size()), dev_out;
    const Status hs = host::decompress(bad.data(), bad.size(), host_out.data(), host_out.size());
    const Status ds = device_decompress<D, thread::PairCode>(bad, n, dev_out);
    CAPTURE(k, pos, status_string(hs), status_string(ds));
    REQUIRE(hs != Status::ok);
    if (pos >= L.table_offset && pos < L.table_offset + 8 * L.num_chunks)
      REQUIRE(ds != Status::ok);
    else
      REQUIRE(ds == hs);
  }
  for (size_t cut : {size_t(1), size_t(63), size_t(64), size_t(L.exp_offset), dev.stream.size() - 16,
                     dev.stream.size() - 1}) {
    std::vector<uint8_t> t(dev.stream.begin(), dev.stream.begin() + cut), out, host_out(raw.size());
    CAPTURE(cut);
    const Status ds = device_decompress<D, thread::PairCode>(t, n, out);
    REQUIRE(ds == host::decompress(t.data(), t.size(), host_out.data(), host_out.size()));
    REQUIRE(ds == Status::corrupt_stream);
  }
  std::vector<uint8_t> empty, out;  // no stream at all (the host's null pointer is invalid_argument)
  REQUIRE(device_decompress<D, thread::PairCode>(empty, n, out) == Status::corrupt_stream);
}

}  // namespace

TEMPLATE_TEST_CASE("fp8: every pattern in every position class gives the host's bytes and round trips",
                   "[gpu][codec][fp8]", gpu_test::Fp8E4M3, gpu_test::Fp8E5M2) {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  fp8_patterns<TestType::value>(rng);
}

TEST_CASE("fp8: random data of all sizes, unaligned pointers", "[gpu][codec][fp8]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t n : kSizes) {
    std::vector<uint8_t> rnd(n);
    for (auto& b : rnd) b = uint8_t(rng());
    round_trip<DType::fp8_e4m3>(rnd);  // incompressible: every chunk raw
    round_trip<DType::fp8_e5m2>(rnd);
  }
  auto raw = gpu_test::gaussian_bytes(DType::fp8_e4m3, 40000, 0.02f, rng);
  for (size_t off : {1u, 3u, 7u, 8u, 15u}) check_round_trip<DType::fp8_e4m3, thread::PairCode>(raw, off, 16 - off);
  auto raw5 = gpu_test::gaussian_bytes(DType::fp8_e5m2, 40000, 0.02f, rng);
  for (size_t off : {1u, 8u, 9u}) check_round_trip<DType::fp8_e5m2, thread::PairCode>(raw5, off, off);
}

TEST_CASE("fp8: real training tensors (amax-scaled cuts)", "[gpu][codec][fp8]") {
  const std::string dir = ZIPCOMM_TEST_DATA_DIR;
  for (const char* name : {"llama_grads", "llama_acts", "llama_weights"}) {
    CAPTURE(name);
    const auto e4 = gpu_test::read_file(dir + "/" + name + ".e4m3");
    const auto e5 = gpu_test::read_file(dir + "/" + name + ".e5m2");
    REQUIRE(!e4.empty());
    REQUIRE(!e5.empty());
    round_trip<DType::fp8_e4m3>(e4);
    round_trip<DType::fp8_e5m2>(e5);
  }
}

TEST_CASE("fp8: single-bit flips and truncations give the host decoder's status on the device", "[gpu][codec][fp8]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  fp8_flips_match_host<DType::fp8_e4m3>(rng);
  fp8_flips_match_host<DType::fp8_e5m2>(rng);
}

TEST_CASE("fp8: device decode of host streams; the other fp8 dtype is a bad header", "[gpu][codec][fp8]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = 2 * 16384 + 999;
  auto raw = gpu_test::gaussian_bytes(DType::fp8_e5m2, n, 0.02f, rng);
  std::vector<uint8_t> stream(format::max_compressed_bytes(DType::fp8_e5m2, n));
  uint64_t bytes = 0;
  REQUIRE(host::compress(DType::fp8_e5m2, CodeId::pair, raw.data(), n, stream.data(), stream.size(), &bytes) ==
          Status::ok);
  stream.resize(bytes);
  std::vector<uint8_t> back;
  REQUIRE(device_decompress<DType::fp8_e5m2, thread::PairCode>(stream, n, back) == Status::ok);
  REQUIRE(back == raw);
  // A stream of the other fp8 dtype is a bad header.
  REQUIRE(device_decompress<DType::fp8_e4m3, thread::PairCode>(stream, n, back) == Status::bad_header);
}
