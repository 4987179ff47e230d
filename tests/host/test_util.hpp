// Shared helpers for the host tests: reproducible fresh seeds, data generators, round-trip checks.
#pragma once

#include <catch2/catch.hpp>

#include <zipcomm/host/reference_codec.hpp>

#include "../gpu/gpu_test_data.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace zt {

using namespace zipcomm;

/// One seed per process: ZIPCOMM_TEST_SEED if set, else fresh from std::random_device. main() prints it.
inline uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("ZIPCOMM_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 0));
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  return seed;
}

/// Per-test generator: base seed mixed with a tag, so test cases draw independent streams whatever runs.
inline std::mt19937_64 make_rng(const char* tag) {
  uint64_t h = base_seed() ^ 0x9E3779B97F4A7C15ull;
  for (const char* p = tag; *p; ++p) h = (h ^ uint8_t(*p)) * 0x100000001B3ull;
  return std::mt19937_64(h);
}

/// Declares `rng` and records the seed in every assertion message of the enclosing scope.
#define ZT_RNG(tag)                                          \
  const uint64_t zipcomm_test_seed = ::zt::base_seed();      \
  CAPTURE(zipcomm_test_seed);                                \
  auto rng = ::zt::make_rng(tag)

/// Every dtype of the codec; the generic codec tests run on all of them.
constexpr DType kDTypes[5] = {DType::bf16, DType::fp16, DType::fp32, DType::fp8_e4m3, DType::fp8_e5m2};
/// The dtypes with reduction arithmetic: the fused steps, P2P, the ring and the quantization tier take these.
constexpr DType kArithmeticDTypes[3] = {DType::bf16, DType::fp16, DType::fp32};
constexpr DType kFp8DTypes[2] = {DType::fp8_e4m3, DType::fp8_e5m2};

// ---- bit fields of each dtype ----------------------------------------------------------------------------------
inline uint32_t mant_bits(DType d) {
  return d == DType::fp32 ? 23 : d == DType::fp16 ? 10 : d == DType::bf16 ? 7 : d == DType::fp8_e4m3 ? 3 : 2;
}
inline uint32_t exp_field_bits(DType d) { return uint32_t(format::exp_bits(d)); }
inline uint32_t max_exponent(DType d) { return (1u << exp_field_bits(d)) - 1; }
inline uint32_t elem_mask(DType d) { return 0xFFFFFFFFu >> (32 - 8 * format::elem_bytes(d)); }
inline uint32_t sign_bit(DType d) { return 1u << (8 * format::elem_bytes(d) - 1); }
inline uint32_t mant_mask(DType d) { return (1u << mant_bits(d)) - 1; }
/// The exponent field all ones (bf16/fp16/fp32: infinities and NaNs; fp8_e5m2 too; fp8_e4m3: the top binade,
/// whose mantissa 7 is NaN).
inline uint32_t exp_all_ones(DType d) { return max_exponent(d) << mant_bits(d); }
inline uint32_t exponent_of(DType d, uint32_t b) { return (b >> mant_bits(d)) & max_exponent(d); }
constexpr CodeId kCodes[2] = {CodeId::pair, CodeId::fixed};  // the format's codes

// ---- element conversion -------------------------------------------------------------------------------------
inline uint32_t f32_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
inline float bits_f32(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
inline uint16_t f32_to_bf16(float x) { return static_cast<uint16_t>(f32_bits(x) >> 16); }  // truncation
/// float -> fp8, truncating (test data; the GPU tests' conversion).
inline uint8_t f32_to_fp8(float x, bool e4m3) { return gpu_test::to_fp8(x, e4m3); }

/// float -> half, truncating; good enough for test data (keeps inf/NaN, produces subnormals).
inline uint16_t f32_to_f16(float x) {
  uint32_t b = f32_bits(x);
  uint32_t sign = (b >> 16) & 0x8000u, E = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
  if (E == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (m ? 0x200u : 0u));
  int e = int(E) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    return static_cast<uint16_t>(sign | ((m | 0x800000u) >> (14 - e)));
  }
  return static_cast<uint16_t>(sign | (uint32_t(e) << 10) | (m >> 13));
}

/// A tensor of n elements of dtype d as raw little-endian bytes.
struct Tensor {
  DType dtype;
  uint64_t n;
  std::vector<uint8_t> bytes;
  Tensor(DType d, uint64_t count) : dtype(d), n(count), bytes(count * format::elem_bytes(d)) {}
  uint32_t get(uint64_t i) const {
    if (format::elem_bytes(dtype) == 1) return bytes[i];
    if (dtype == DType::fp32) {
      uint32_t v;
      std::memcpy(&v, &bytes[4 * i], 4);
      return v;
    }
    uint16_t v;
    std::memcpy(&v, &bytes[2 * i], 2);
    return v;
  }
  void set(uint64_t i, uint32_t v) {
    if (format::elem_bytes(dtype) == 1) {
      bytes[i] = static_cast<uint8_t>(v);
    } else if (dtype == DType::fp32) {
      std::memcpy(&bytes[4 * i], &v, 4);
    } else {
      uint16_t h = static_cast<uint16_t>(v);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  void set_float(uint64_t i, float x) {
    set(i, dtype == DType::fp32       ? f32_bits(x)
           : dtype == DType::bf16     ? f32_to_bf16(x)
           : dtype == DType::fp16     ? f32_to_f16(x)
           : dtype == DType::fp8_e4m3 ? f32_to_fp8(x, true)
                                      : f32_to_fp8(x, false));
  }
};

/// Gaussian-like data: N(0, s^2) with s changing per 1024-element block (log-uniform over `octaves` binades
/// around a dtype-appropriate centre), like layers of a gradient tensor.
inline Tensor gaussian(DType d, uint64_t n, std::mt19937_64& rng, double octaves = 6.0) {
  Tensor t(d, n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<double> u(-octaves / 2, octaves / 2);
  const double centre = d == DType::fp8_e4m3 ? 0.0 : d == DType::fp8_e5m2 ? -2.0 : d == DType::fp16 ? -4.0 : -12.0;
  float s = 1.0f;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 1024 == 0) s = static_cast<float>(std::exp2(centre + u(rng)));
    t.set_float(i, nd(rng) * s);
  }
  return t;
}

inline Tensor random_bits(DType d, uint64_t n, std::mt19937_64& rng) {
  Tensor t(d, n);
  for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
  return t;
}

// ---- codec wrappers -------------------------------------------------------------------------------------------
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

/// The chunk sizes a stream can have (chunk_log2), for tests that cover each.
constexpr uint32_t kChunkLog2s[] = {12, 13, 14};

inline std::vector<uint8_t> compress_ok(CodeId code, const Tensor& t,
                                        format::LowWidths widths = format::LowWidths::minimal,
                                        uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO, unsigned threads = 1) {
  chunk_log2 = format::resolve_chunk_log2(chunk_log2, t.n);
  const uint64_t bound = format::max_compressed_bytes(t.dtype, t.n, chunk_log2);
  std::vector<uint8_t> buf(bound + 2 * kGuard, kGuardByte);
  uint64_t out = ~0ull;
  Status s =
      host::compress(t.dtype, code, t.bytes.data(), t.n, buf.data() + kGuard, bound, &out, widths, chunk_log2, threads);
  REQUIRE(s == Status::ok);
  REQUIRE(out <= bound);
  for (size_t i = 0; i < kGuard; ++i) REQUIRE(buf[i] == kGuardByte);
  for (size_t i = kGuard + bound; i < buf.size(); ++i) REQUIRE(buf[i] == kGuardByte);
  return std::vector<uint8_t>(buf.begin() + kGuard, buf.begin() + kGuard + out);
}

/// Decompresses `stream` into a guarded buffer of exactly n * elem_bytes; returns status and output.
/// Checks that nothing outside the destination was written (both guard regions). Decodes on `threads` threads.
struct Decoded {
  Status status;
  std::vector<uint8_t> out;
  bool guards_ok;
};
inline Decoded decompress_guarded(const uint8_t* stream, uint64_t bytes, uint64_t out_bytes, uint8_t fill = 0,
                                  unsigned threads = 1) {
  std::vector<uint8_t> buf(out_bytes + 2 * kGuard, kGuardByte);
  std::memset(buf.data() + kGuard, fill, out_bytes);
  Decoded d;
  d.status = host::decompress(stream, bytes, buf.data() + kGuard, out_bytes, threads);
  d.guards_ok = true;
  for (size_t i = 0; i < kGuard; ++i) d.guards_ok &= buf[i] == kGuardByte && buf[kGuard + out_bytes + i] == kGuardByte;
  d.out.assign(buf.begin() + kGuard, buf.begin() + kGuard + out_bytes);
  return d;
}

/// Compresses (in chunks of 2^chunk_log2), validates the header, decompresses, compares bit-exactly. Returns the
/// stream.
inline std::vector<uint8_t> roundtrip(CodeId code, const Tensor& t, uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  INFO("dtype " << dtype_name(t.dtype) << " code " << code_name(code) << " n " << t.n << " chunk_log2 " << chunk_log2);
  std::vector<uint8_t> s = compress_ok(code, t, format::LowWidths::minimal, chunk_log2);
  format::Header h;
  REQUIRE(host::read_header(s.data(), s.size(), &h) == Status::ok);
  REQUIRE(h.chunk_log2 == format::resolve_chunk_log2(chunk_log2, t.n));
  REQUIRE(h.num_elements == t.n);
  REQUIRE(h.total_bytes == s.size());
  REQUIRE(h.dtype == uint8_t(t.dtype));
  REQUIRE(h.code == uint8_t(code));
  Decoded d = decompress_guarded(s.data(), s.size(), t.bytes.size());
  REQUIRE(d.status == Status::ok);
  REQUIRE(d.guards_ok);
  if (d.out != t.bytes) {
    uint64_t i = 0;
    const uint32_t eb = format::elem_bytes(t.dtype);
    while (std::memcmp(&d.out[i * eb], &t.bytes[i * eb], eb) == 0) ++i;
    uint32_t got = 0, want = t.get(i);
    std::memcpy(&got, &d.out[i * eb], eb);
    FAIL("first mismatch at element " << i << ": want 0x" << std::hex << want << " got 0x" << got);
  }
  return s;
}

/// Which chunks of a valid stream are stored raw (chunk length == raw_chunk_bytes).
inline std::vector<bool> raw_chunk_map(const std::vector<uint8_t>& s) {
  format::Header h;
  std::memcpy(&h, s.data(), sizeof h);
  const DType d = static_cast<DType>(h.dtype);
  const format::Layout l = format::layout_of(h);
  std::vector<bool> raw(l.num_chunks);
  uint64_t start = 0;
  for (uint64_t c = 0; c < l.num_chunks; ++c) {
    uint64_t end;
    std::memcpy(&end, &s[l.table_offset + 8 * c], 8);
    raw[c] = end - start == format::raw_chunk_bytes(d, l.chunk_elems(c));
    start = end;
  }
  return raw;
}
/// Number of chunks of a valid stream.
inline uint64_t chunks_of(const std::vector<uint8_t>& s) {
  format::Header h;
  std::memcpy(&h, s.data(), sizeof h);
  return format::layout_of(h).num_chunks;
}
/// Number of chunks of a valid stream stored raw.
inline uint64_t raw_chunks(const std::vector<uint8_t>& s) {
  uint64_t raw = 0;
  for (bool r : raw_chunk_map(s)) raw += r;
  return raw;
}

}  // namespace zt
