// Test data of the GPU tests and the stress program: seeds, Gaussian tensors with special values, files. Plain
// C++17 (no Catch2), so programs outside the Catch2 tests share it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <zipcomm/format.hpp>

namespace gpu_test {

/// ZIPCOMM_TEST_SEED when set (reproduces a run), else a fresh random seed.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("ZIPCOMM_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

inline uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline uint16_t to_fp16(float x) {  // round-to-nearest-even conversion, enough for test data
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  float a = std::fabs(x);
  if (!(a < 65520.0f)) return uint16_t(sign | 0x7C00u);
  if (a < 6.103515625e-05f) return uint16_t(sign | uint32_t(std::nearbyint(a / 5.9604644775390625e-08f)));
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = uint32_t(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  uint32_t exp = uint32_t(e - 1 + 15);
  if (mant == 1024) mant = 0, ++exp;
  return uint16_t(sign | (exp << 10) | mant);
}

/// float -> fp8, truncating, enough for test data: e4m3 (bias 7, no infinities, NaN S.1111.111, saturating at
/// 448) or e5m2 (bias 15, as fp16's top byte).
inline uint8_t to_fp8(float x, bool e4m3) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 24) & 0x80u;
  const float a = std::fabs(x);
  const int mant = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  if (std::isnan(a)) return uint8_t(sign | 0x7Fu);
  if (a >= (e4m3 ? 448.0f : 57344.0f)) return uint8_t(sign | (e4m3 ? 0x7Eu : std::isinf(a) ? 0x7Cu : 0x7Bu));
  if (a == 0.0f) return uint8_t(sign);
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int field = e - 1 + bias;
  if (field <= 0) return uint8_t(sign | uint32_t(std::ldexp(a, bias - 1 + mant)));  // subnormal
  return uint8_t(sign | uint32_t(field) << mant | (uint32_t(std::ldexp(a, mant - (e - 1))) & ((1u << mant) - 1u)));
}

/// n elements of N(0, sigma) in dtype d, as raw little-endian bytes (fp16 and fp8 scaled up into their range).
inline std::vector<uint8_t> gaussian_bytes(zipcomm::DType d, uint64_t n, float sigma, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<uint8_t> out(n * zipcomm::format::elem_bytes(d));
  for (uint64_t i = 0; i < n; ++i) {
    float x = nd(rng);
    if (d == zipcomm::DType::fp32) {
      std::memcpy(&out[4 * i], &x, 4);
    } else if (zipcomm::format::elem_bytes(d) == 1) {
      out[i] = to_fp8(x * 64.0f, d == zipcomm::DType::fp8_e4m3);
    } else {
      uint16_t h = d == zipcomm::DType::bf16 ? to_bf16(x) : to_fp16(x * 1024.0f);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

/// fp16, fp32 data whose tiles' low mantissa bits are zero in some tiles (as bf16 values widened or converted
/// are): per 256-element tile at random, fp32 keeps all, the top 8 or none of its 16 low bits, fp16 all or none
/// of its 3. Every width code of the format then appears.
inline void drop_low_bits_in_some_tiles(zipcomm::DType d, std::vector<uint8_t>& raw, std::mt19937_64& rng) {
  if (!zipcomm::format::has_low(d)) return;
  const uint64_t eb = zipcomm::format::elem_bytes(d), n = raw.size() / eb;
  for (uint64_t tile = 0; tile * 256 < n; ++tile) {
    const uint32_t k = uint32_t(rng() % 3);
    const uint32_t keep = d == zipcomm::DType::fp32 ? (k == 0 ? ~0u : k == 1 ? 0xFFFFFF00u : 0xFFFF0000u)
                                                    : (k == 0 ? 0xFFFFu : 0xFFF8u);
    for (uint64_t i = tile * 256; i < n && i < tile * 256 + 256; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, &raw[i * eb], eb);
      v &= keep;
      std::memcpy(&raw[i * eb], &v, eb);
    }
  }
}

/// n bf16 elements for the P2P links: Gaussian with a per-block scale, sprinkled with specials (zeros, -0, inf,
/// NaN payloads, subnormals), so every path of the codec and of the planes is exercised.
inline std::vector<uint8_t> test_bf16(uint64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v = gaussian_bytes(zipcomm::DType::bf16, n, 0.02f, rng);
  const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFA5, 0x0001, 0x8077};
  for (uint64_t i = 0; i < n / 97 + (n > 0); ++i) {
    const uint64_t at = rng() % n;
    std::memcpy(&v[2 * at], &specials[rng() % 8], 2);
  }
  return v;
}

/// n elements of dtype d for the ring allreduce: Gaussian (one scale per vector, as per rank) with special values
/// in about 1% of the elements: NaN payloads, infinities, signed zeros, subnormals.
inline std::vector<uint8_t> ring_data(zipcomm::DType d, uint64_t n, std::mt19937_64& rng) {
  const float sigma = (d == zipcomm::DType::fp16 ? 0.5f : 0.02f) * float(1 + rng() % 8);
  std::vector<uint8_t> v = gaussian_bytes(d, n, sigma, rng);
  const uint32_t sp16[] = {0x7FC1u, 0xFFFFu, 0x7F80u, 0xFF80u, 0x8000u, 0x0000u, 0x0001u, 0x807Fu,
                           0x7F7Fu, 0x7C00u, 0xFC00u, 0x7E01u, 0x03FFu, 0x7BFFu};
  const uint32_t sp32[] = {0x7FC00001u, 0xFFFFFFFFu, 0x7F800000u, 0xFF800000u, 0x80000000u, 0u,
                           1u,          0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800001u};
  for (uint64_t i = 0; i < n; ++i) {
    if (rng() % 100 != 0) continue;
    if (d == zipcomm::DType::fp32) {
      const uint32_t x = sp32[rng() % (sizeof sp32 / 4)];
      std::memcpy(&v[4 * i], &x, 4);
    } else {
      const uint16_t x = uint16_t(sp16[rng() % (sizeof sp16 / 4)]);
      std::memcpy(&v[2 * i], &x, 2);
    }
  }
  return v;
}

/// The whole file; empty when it is missing or unreadable.
inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// Test values of the quantization tier: n floats in runs of 32 of varied kinds (centred and offset Gaussians
/// with a scale per run, uniform, an outlier, constant runs, signed zeros, small integers and halves: exact ties
/// at half steps, one-signed negatives); scales within fp16's range when `fp16_range`.
inline std::vector<float> quant_test_values(uint64_t n, bool fp16_range, std::mt19937_64& rng) {
  std::vector<float> v(n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_real_distribution<double> ue(fp16_range ? -12 : -30, fp16_range ? 8 : 20);
  int kind = 0;
  float s = 1.0f, c = 0.0f;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) {
      kind = int(rng() % 8);
      s = float(std::exp2(ue(rng)));
      c = nd(rng) * s;
    }
    switch (kind) {
      case 0: v[i] = nd(rng) * s; break;
      case 1: v[i] = 3.0f * s + nd(rng) * s * 0.25f; break;
      case 2: v[i] = u(rng) * s; break;
      case 3: v[i] = (i % 32 == 7 ? 40.0f : 1.0f) * nd(rng) * s; break;
      case 4: v[i] = c; break;
      case 5: v[i] = (rng() % 2) ? 0.0f : -0.0f; break;
      case 6: v[i] = float(int(rng() % 33) - 16) * 0.5f; break;
      default: v[i] = -std::fabs(nd(rng)) * s; break;
    }
  }
  return v;
}

}  // namespace gpu_test
