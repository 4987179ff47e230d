// Quantization tier ("ZPQT" v1, LOSSY): layout arithmetic, bit packing, the exact arithmetic of every dtype x bit
// width x group size x mode against an independent restatement, constant and all-zero groups, non-finite input,
// header and body validation, and the Expected Acceptance Rate.
//
// The restatement computes every fp32 operation in double and rounds the result to float: for +, -, *, / of two
// floats that is the correctly rounded fp32 result (double has 53 >= 2 * 24 + 2 bits, so the double rounding is
// innocuous), and std::nearbyint in the default rounding mode is round-half-to-even. It shares nothing with
// group_quantizer.hpp but the final narrowing to bf16/fp16 (thread::from_f32, tested in test_reduce.cpp).
#include "test_util.hpp"

#include <zipcomm/quant/reference_quant.hpp>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>

using namespace zipcomm;
using quant::QuantMode;

namespace {

constexpr uint32_t kBits[] = {2, 3, 4, 5, 6, 7, 8};
constexpr uint32_t kGroups[] = {32, 64, 128};
constexpr QuantMode kModes[] = {QuantMode::asymmetric, QuantMode::symmetric};

uint64_t au16(uint64_t x) { return (x + 15) / 16 * 16; }

// ---- independent restatement ----------------------------------------------------------------------------------
float f_add(float a, float b) { return static_cast<float>(double(a) + double(b)); }
float f_sub(float a, float b) { return static_cast<float>(double(a) - double(b)); }
float f_mul(float a, float b) { return static_cast<float>(double(a) * double(b)); }
float f_div(float a, float b) { return static_cast<float>(double(a) / double(b)); }
int32_t f_rne(float v) { return static_cast<int32_t>(std::nearbyint(double(v))); }

float elem_f32(DType d, uint32_t b) {
  if (d == DType::bf16) return zt::bits_f32(b << 16);
  if (d == DType::fp32) return zt::bits_f32(b);
  return thread::f32_from_fp16_bits_reference(b);
}
uint32_t narrow(DType d, float x) {
  return d == DType::bf16 ? thread::from_f32<DType::bf16>(x)
       : d == DType::fp16 ? thread::from_f32<DType::fp16>(x)
                          : thread::from_f32<DType::fp32>(x);
}

struct Expected {
  std::vector<float> scale, lo;
  std::vector<uint32_t> codes;
  std::vector<float> value32;  // fp32 reconstruction
  std::vector<uint32_t> out;   // reconstruction in the original dtype
};

Expected restate(const zt::Tensor& t, QuantMode mode, uint32_t bits, uint32_t group) {
  Expected e;
  const uint64_t n = t.n, groups = (n + group - 1) / group;
  const float L = float((1u << bits) - 1), q = float((1u << (bits - 1)) - 1);
  const int32_t mid = int32_t(1u << (bits - 1));
  e.codes.resize(n);
  e.value32.resize(n);
  e.out.resize(n);
  for (uint64_t g = 0; g < groups; ++g) {
    const uint64_t first = g * group, last = std::min<uint64_t>(n, first + group);
    float lo = elem_f32(t.dtype, t.get(first)), hi = lo;
    for (uint64_t i = first; i < last; ++i) {
      lo = std::min(lo, elem_f32(t.dtype, t.get(i)));
      hi = std::max(hi, elem_f32(t.dtype, t.get(i)));
    }
    if (lo == 0.0f) lo = 0.0f;  // canonical +0
    if (hi == 0.0f) hi = 0.0f;
    const bool constant = lo == hi;
    float scale;
    if (mode == QuantMode::asymmetric)
      scale = constant ? 0.0f : f_div(f_sub(hi, lo), L);
    else
      scale = constant ? lo : f_div(std::max(std::fabs(lo), std::fabs(hi)), q);
    e.scale.push_back(scale);
    e.lo.push_back(mode == QuantMode::asymmetric ? lo : 0.0f);
    for (uint64_t i = first; i < last; ++i) {
      const float x = elem_f32(t.dtype, t.get(i));
      uint32_t code;
      float v;
      if (mode == QuantMode::asymmetric) {
        code = scale == 0.0f ? 0u : uint32_t(f_rne(std::clamp(f_div(f_sub(x, lo), scale), 0.0f, L)));
        v = f_add(lo, f_mul(float(code), scale));
      } else if (constant) {
        code = 0;
        v = scale;
      } else {
        code = scale == 0.0f ? uint32_t(mid) : uint32_t(f_rne(std::clamp(f_div(x, scale), -q, q)) + mid);
        v = f_mul(float(int32_t(code) - mid), scale);
      }
      e.codes[i] = code;
      e.value32[i] = v;
      e.out[i] = narrow(t.dtype, v);
    }
  }
  return e;
}

// ---- data -------------------------------------------------------------------------------------------------------
/// gpu_test::quant_test_values as a tensor of dtype d.
zt::Tensor quant_data(DType d, uint64_t n, std::mt19937_64& rng) {
  zt::Tensor t(d, n);
  const std::vector<float> v = gpu_test::quant_test_values(n, d == DType::fp16, rng);
  for (uint64_t i = 0; i < n; ++i) t.set_float(i, v[i]);
  return t;
}

// ---- wrappers ---------------------------------------------------------------------------------------------------
std::vector<uint8_t> quantize_ok(const zt::Tensor& t, QuantMode mode, uint32_t bits, uint32_t group) {
  const uint64_t size = quant::max_quantized_bytes(mode, bits, group, t.n);
  std::vector<uint8_t> buf(size + 2 * zt::kGuard, zt::kGuardByte);
  uint64_t out = ~0ull;
  const Status s = quant::host::quantize(t.dtype, mode, bits, group, t.bytes.data(), t.n, buf.data() + zt::kGuard,
                                         size, &out);
  REQUIRE(s == Status::ok);
  REQUIRE(out == size);
  for (size_t i = 0; i < zt::kGuard; ++i) REQUIRE(buf[i] == zt::kGuardByte);
  for (size_t i = zt::kGuard + size; i < buf.size(); ++i) REQUIRE(buf[i] == zt::kGuardByte);
  return std::vector<uint8_t>(buf.begin() + zt::kGuard, buf.begin() + zt::kGuard + size);
}

/// Dequantizes into a guarded buffer pre-filled with `fill`; checks the guards.
zt::Decoded dequantize_guarded(const std::vector<uint8_t>& m, uint64_t out_bytes, uint8_t fill = 0x5C) {
  std::vector<uint8_t> buf(out_bytes + 2 * zt::kGuard, zt::kGuardByte);
  std::memset(buf.data() + zt::kGuard, fill, out_bytes);
  zt::Decoded d;
  d.status = quant::host::dequantize(m.data(), m.size(), buf.data() + zt::kGuard, out_bytes);
  d.guards_ok = true;
  for (size_t i = 0; i < zt::kGuard; ++i)
    d.guards_ok &= buf[i] == zt::kGuardByte && buf[zt::kGuard + out_bytes + i] == zt::kGuardByte;
  d.out.assign(buf.begin() + zt::kGuard, buf.begin() + zt::kGuard + out_bytes);
  return d;
}

uint32_t out_elem(DType d, const std::vector<uint8_t>& out, uint64_t i) {
  uint32_t v = 0;
  std::memcpy(&v, &out[i * format::elem_bytes(d)], format::elem_bytes(d));
  return v;
}

/// Quantizes t, checks header, parameters, codes and output against the restatement, and the error bound.
/// Returns the message.
std::vector<uint8_t> check_roundtrip(const zt::Tensor& t, QuantMode mode, uint32_t bits, uint32_t group) {
  INFO("dtype " << dtype_name(t.dtype) << " mode " << quant::mode_name(mode) << " bits " << bits << " group "
                << group << " n " << t.n);
  const std::vector<uint8_t> m = quantize_ok(t, mode, bits, group);
  quant::host::MessageView v;
  REQUIRE(v.open(m.data(), m.size()) == Status::ok);
  REQUIRE(v.header.dtype == uint8_t(t.dtype));
  REQUIRE(v.header.bits == bits);
  REQUIRE(v.header.group_size == group);
  REQUIRE(v.header.mode == uint8_t(mode));
  REQUIRE(v.header.num_elements == t.n);
  REQUIRE(v.header.total_bytes == m.size());
  const Expected e = restate(t, mode, bits, group);
  for (uint64_t g = 0; g < e.scale.size(); ++g) {
    INFO("group " << g);
    REQUIRE(zt::f32_bits(v.scale(g)) == zt::f32_bits(e.scale[g]));
    REQUIRE(zt::f32_bits(v.lo(g)) == zt::f32_bits(e.lo[g]));
  }
  for (uint64_t i = 0; i < t.n; ++i) {
    if (v.code(i) != e.codes[i]) FAIL("element " << i << ": code " << v.code(i) << ", restated " << e.codes[i]);
  }
  const zt::Decoded d = dequantize_guarded(m, t.bytes.size());
  REQUIRE(d.status == Status::ok);
  REQUIRE(d.guards_ok);
  // into every dtype: the fp32 reconstruction narrowed to it
  for (DType o : zt::kArithmeticDTypes) {
    std::vector<uint8_t> out(t.n * format::elem_bytes(o));
    REQUIRE(quant::host::dequantize(m.data(), m.size(), out.data(), out.size(), o) == Status::ok);
    for (uint64_t i = 0; i < t.n; ++i)
      if (out_elem(o, out, i) != narrow(o, e.value32[i]))
        FAIL("element " << i << " into " << dtype_name(o) << ": 0x" << std::hex << out_elem(o, out, i)
                        << ", restated 0x" << narrow(o, e.value32[i]));
  }
  const double p_dtype = t.dtype == DType::bf16 ? 8 : t.dtype == DType::fp16 ? 11 : 24;
  const double min_sub = t.dtype == DType::fp16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -149);
  for (uint64_t i = 0; i < t.n; ++i) {
    const uint32_t got = out_elem(t.dtype, d.out, i);
    if (got != e.out[i]) FAIL("element " << i << ": output 0x" << std::hex << got << ", restated 0x" << e.out[i]);
    // Error bound: half a step, plus fp32 rounding of the few operations, plus narrowing to the dtype.
    const uint64_t g = i / group;
    const double x = elem_f32(t.dtype, t.get(i));
    const double first = elem_f32(t.dtype, t.get(g * group));
    double range = 0, amax = 0;
    for (uint64_t k = g * group; k < std::min<uint64_t>(t.n, (g + 1) * group); ++k) {
      const double y = elem_f32(t.dtype, t.get(k));
      range = std::max(range, std::fabs(y - first));
      amax = std::max(amax, std::fabs(y));
    }
    const double step = mode == QuantMode::asymmetric ? e.scale[g] : (range == 0 ? 0.0 : double(e.scale[g]));
    const double slack32 = 8 * std::ldexp(2 * range + amax, -24) + std::ldexp(1.0, -146);
    const double slack_d = std::fabs(double(e.value32[i])) * std::ldexp(1.0, -int(p_dtype)) + min_sub;
    const double err = std::fabs(x - double(elem_f32(t.dtype, got)));
    if (!(err <= step / 2 + slack32 + slack_d))
      FAIL("element " << i << ": |x - x'| = " << err << " > scale/2 = " << step / 2 << " + slack");
  }
  return m;
}

Status quantize_status(const zt::Tensor& t, QuantMode mode, uint32_t bits, uint32_t group) {
  std::vector<uint8_t> buf(quant::max_quantized_bytes(mode, bits, group, t.n));
  uint64_t out = 0;
  return quant::host::quantize(t.dtype, mode, bits, group, t.bytes.data(), t.n, buf.data(), buf.size(), &out);
}

}  // namespace

// ---- format -----------------------------------------------------------------------------------------------------
TEST_CASE("quant: layout arithmetic for every mode, bit width and group size", "[quant]") {
  ZT_RNG("quant layout");
  std::vector<uint64_t> ns = {0, 1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4097};
  for (int i = 0; i < 300; ++i) ns.push_back(rng() % (1u << 20));
  for (int i = 0; i < 50; ++i) ns.push_back(rng() % (uint64_t(1) << 50));
  ns.push_back(uint64_t(1) << 50);
  for (QuantMode mode : kModes)
    for (uint32_t bits : kBits)
      for (uint32_t group : kGroups)
        for (uint64_t n : ns) {
          INFO("mode " << quant::mode_name(mode) << " bits " << bits << " group " << group << " n " << n);
          const quant::Layout l = quant::layout_for(mode, bits, group, n);
          const uint64_t groups = (n + group - 1) / group, blocks = (n + 31) / 32;
          const uint64_t pb = mode == QuantMode::asymmetric ? 8 : 4;
          REQUIRE(l.num_groups == groups);
          REQUIRE(l.num_blocks == blocks);
          REQUIRE(l.params_offset == 64);
          REQUIRE(l.params_bytes == groups * pb);
          REQUIRE(l.codes_offset == au16(64 + groups * pb));
          REQUIRE(l.codes_bytes == blocks * 4 * bits);
          REQUIRE(l.codes_bytes * 8 >= n * bits);
          REQUIRE(l.total_bytes == au16(l.codes_offset + blocks * 4 * bits));
          REQUIRE(quant::max_quantized_bytes(mode, bits, group, n) == l.total_bytes);
          REQUIRE(l.codes_offset % 16 == 0);
          REQUIRE(l.total_bytes % 16 == 0);
          // groups are whole blocks: a group's codes start on a 32-bit word boundary
          if (groups > 1) REQUIRE(quant::code_pos((groups - 1) * group, bits).shift == 0);
          if (n) {
            REQUIRE(quant::group_elems(n, group, groups - 1) == (n % group ? n % group : group));
            REQUIRE(quant::group_elems(n, group, groups) == 0);
          }
        }
  // invalid parameters have no size
  REQUIRE(quant::max_quantized_bytes(QuantMode::asymmetric, 1, 64, 10) == 0);
  REQUIRE(quant::max_quantized_bytes(QuantMode::asymmetric, 9, 64, 10) == 0);
  REQUIRE(quant::max_quantized_bytes(QuantMode::asymmetric, 4, 48, 10) == 0);
  REQUIRE(quant::max_quantized_bytes(QuantMode::asymmetric, 4, 256, 10) == 0);
  REQUIRE(quant::max_quantized_bytes(static_cast<QuantMode>(3), 4, 64, 10) == 0);
  REQUIRE(quant::max_quantized_bytes(QuantMode::symmetric, 4, 64, (uint64_t(1) << 50) + 1) == 0);
  REQUIRE(quant::bits_per_element(QuantMode::asymmetric, 4, 64) == 5.0);
  REQUIRE(quant::bits_per_element(QuantMode::symmetric, 4, 64) == 4.5);
  // the magic differs from the lossless stream's
  REQUIRE(quant::MAGIC != format::MAGIC);
  REQUIRE(std::memcmp(&quant::MAGIC, "ZPQT", 4) == 0);
}

TEST_CASE("quant: codes are an LSB-first bit string, b bits each, and pack_block and unpack_code agree", "[quant]") {
  ZT_RNG("quant pack");
  for (uint32_t bits : kBits)
    for (int rep = 0; rep < 200; ++rep) {
      uint32_t codes[32], words[8];
      for (uint32_t &c : codes) c = uint32_t(rng()) & ((1u << bits) - 1u);
      quant::pack_block(codes, bits, words);
      // naive bit string: bit k of the block is bit k % 8 of byte k / 8 (little-endian words)
      uint8_t bytes[32];
      std::memcpy(bytes, words, 4 * bits);
      for (uint32_t l = 0; l < 32; ++l) {
        uint32_t c = 0;
        for (uint32_t j = 0; j < bits; ++j) {
          const uint32_t k = l * bits + j;
          c |= uint32_t((bytes[k / 8] >> (k % 8)) & 1u) << j;
        }
        REQUIRE(c == codes[l]);
        REQUIRE(quant::unpack_code(words, l, bits) == codes[l]);
      }
    }
}

// ---- exact arithmetic -----------------------------------------------------------------------------------------------
TEST_CASE("quant: every dtype x bit width x group size x mode matches the restated arithmetic, within scale/2",
          "[quant]") {
  ZT_RNG("quant roundtrip");
  for (DType d : zt::kArithmeticDTypes)
    for (QuantMode mode : kModes)
      for (uint32_t bits : kBits)
        for (uint32_t group : kGroups) {
          std::vector<uint64_t> ns = {1, 31, 33, group - 1, group + 1, 3 * uint64_t(group) + 17,
                                      uint64_t(rng() % 3000) + 1};
          for (uint64_t n : ns) {
            const zt::Tensor t = quant_data(d, n, rng);
            check_roundtrip(t, mode, bits, group);
          }
        }
}

TEST_CASE("quant: Gaussian data of every dtype at every bit width: errors within scale/2, MSE shrinks with each bit",
          "[quant]") {
  ZT_RNG("quant gaussian");
  for (DType d : zt::kArithmeticDTypes)
    for (QuantMode mode : kModes) {
      const zt::Tensor t = zt::gaussian(d, 64 * 97 + 5, rng, 4.0);
      double prev = 0;
      for (uint32_t bits : kBits) {
        const std::vector<uint8_t> m = check_roundtrip(t, mode, bits, 64);
        const zt::Decoded dq = dequantize_guarded(m, t.bytes.size());
        // relative MSE: sum (x - x')^2 / sum x^2
        double num = 0, den = 0;
        for (uint64_t i = 0; i < t.n; ++i) {
          const double x = elem_f32(d, t.get(i)), y = elem_f32(d, out_elem(d, dq.out, i));
          num += (x - y) * (x - y);
          den += x * x;
        }
        const double mse = num / den;
        INFO("dtype " << dtype_name(d) << " mode " << quant::mode_name(mode) << " bits " << bits << " rel mse "
                      << mse << " previous " << prev);
        if (bits > 2) REQUIRE(mse < prev);
        prev = mse;
      }
    }
}

TEST_CASE("quant: ties round half to even, codes clamp, symmetric codes stay in 1 .. 2^b - 1", "[quant]") {
  // Asymmetric, b = 3: lo = 0, hi = 7, scale = 1; x = k + 0.5 lies exactly half-way between codes.
  zt::Tensor t(DType::fp32, 32);
  const float xs[] = {0.0f, 7.0f, 0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 1.0f, 2.0f};
  for (uint64_t i = 0; i < 32; ++i) t.set_float(i, xs[i % 11]);
  std::vector<uint8_t> m = check_roundtrip(t, QuantMode::asymmetric, 3, 32);
  quant::host::MessageView v;
  REQUIRE(v.open(m.data(), m.size()) == Status::ok);
  REQUIRE(v.scale(0) == 1.0f);
  const uint32_t want[] = {0, 7, 0, 2, 2, 4, 4, 6, 6, 1, 2};
  for (uint64_t i = 0; i < 32; ++i) REQUIRE(v.code(i) == want[i % 11]);
  // Symmetric, b = 3: q = 3, max|x| = 3 -> scale 1; +-k.5 ties to even levels; codes = level + 4.
  const float ys[] = {-3.0f, 3.0f, -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 0.0f, -0.0f};
  for (uint64_t i = 0; i < 32; ++i) t.set_float(i, ys[i % 10]);
  m = check_roundtrip(t, QuantMode::symmetric, 3, 32);
  REQUIRE(v.open(m.data(), m.size()) == Status::ok);
  REQUIRE(v.scale(0) == 1.0f);
  const uint32_t want_s[] = {1, 7, 2, 2, 4, 4, 6, 6, 4, 4};
  for (uint64_t i = 0; i < 32; ++i) REQUIRE(v.code(i) == want_s[i % 10]);
  // Every symmetric code of random data is in 1 .. 2^b - 1 (0 is reserved for constant groups).
  ZT_RNG("quant sym codes");
  for (uint32_t bits : kBits) {
    const zt::Tensor r = zt::gaussian(DType::bf16, 4096, rng);
    m = quantize_ok(r, QuantMode::symmetric, bits, 64);
    REQUIRE(v.open(m.data(), m.size()) == Status::ok);
    for (uint64_t i = 0; i < r.n; ++i) {
      REQUIRE(v.code(i) >= 1);
      REQUIRE(v.code(i) <= (1u << bits) - 1);
    }
  }
}

TEST_CASE("quant: constant and all-zero groups reconstruct exactly (scale 0 / the value, every code 0)", "[quant]") {
  ZT_RNG("quant constant");
  for (DType d : zt::kArithmeticDTypes)
    for (QuantMode mode : kModes)
      for (uint32_t group : kGroups) {
        const uint64_t n = 5 * uint64_t(group) + 7;  // the partial last group is constant too
        zt::Tensor t(d, n);
        std::vector<float> value(6);
        const float big = d == DType::fp16 ? 65504.0f : d == DType::bf16 ? zt::bits_f32(0x7F7F0000u) : 3.0e38f;
        // all-zero, all -0, two ordinary values, the largest finite of both signs
        value = {0.0f, -0.0f, std::normal_distribution<float>(0.0f, 1.0f)(rng), -3.25e-3f, big, -big};
        for (uint64_t i = 0; i < n; ++i) t.set_float(i, value[std::min<uint64_t>(i / group, 5)]);
        INFO("dtype " << dtype_name(d) << " mode " << quant::mode_name(mode) << " group " << group);
        for (uint32_t bits : kBits) {
          const std::vector<uint8_t> m = check_roundtrip(t, mode, bits, group);
          quant::host::MessageView v;
          REQUIRE(v.open(m.data(), m.size()) == Status::ok);
          for (uint64_t g = 0; g < 6; ++g) {
            const float c = elem_f32(d, t.get(g * group));
            if (mode == QuantMode::asymmetric) {
              REQUIRE(zt::f32_bits(v.scale(g)) == 0u);
              REQUIRE(v.lo(g) == c);
            } else {
              REQUIRE(v.scale(g) == c);  // 0 for the all-zero groups
            }
            if (c == 0.0f) REQUIRE(zt::f32_bits(v.scale(g)) == 0u);  // all-zero (either sign): scale +0
          }
          for (uint64_t i = 0; i < n; ++i) REQUIRE(v.code(i) == 0u);
          const zt::Decoded dq = dequantize_guarded(m, t.bytes.size());
          REQUIRE(dq.status == Status::ok);
          for (uint64_t i = 0; i < n; ++i) {
            const uint32_t want = t.get(i);
            const uint32_t sign = d == DType::fp32 ? 0x80000000u : 0x8000u;
            // exact value; a -0 comes back as +0
            REQUIRE(out_elem(d, dq.out, i) == (want == sign ? 0u : want));
          }
        }
      }
  // A range that underflows the step: every code 0, x' = lo (documented; errors below 2^-141).
  zt::Tensor tiny(DType::fp32, 32);
  for (uint64_t i = 0; i < 32; ++i) tiny.set(i, i % 2);  // 0 and the smallest subnormal
  for (QuantMode mode : kModes) {
    const std::vector<uint8_t> m = quantize_ok(tiny, mode, 8, 32);
    quant::host::MessageView v;
    REQUIRE(v.open(m.data(), m.size()) == Status::ok);
    REQUIRE(zt::f32_bits(v.scale(0)) == 0u);
    const zt::Decoded dq = dequantize_guarded(m, tiny.bytes.size());
    REQUIRE(dq.status == Status::ok);
    for (uint64_t i = 0; i < 32; ++i) REQUIRE(out_elem(DType::fp32, dq.out, i) == 0u);
  }
}

TEST_CASE("quant: NaN and infinity are refused with not_finite, and so are ranges that overflow", "[quant]") {
  ZT_RNG("quant nonfinite");
  REQUIRE(std::string(status_string(Status::not_finite)).find("not finite") == 0);
  REQUIRE(static_cast<uint32_t>(Status::not_finite) == 9);  // existing values unchanged
  REQUIRE(static_cast<uint32_t>(Status::unsupported_version) == 8);
  for (DType d : zt::kArithmeticDTypes) {
    const uint32_t inf = d == DType::fp32 ? 0x7F800000u : d == DType::bf16 ? 0x7F80u : 0x7C00u;
    const uint32_t sign = d == DType::fp32 ? 0x80000000u : 0x8000u;
    const uint32_t nan_payload = d == DType::fp32 ? 0x00400001u : d == DType::bf16 ? 0x41u : 0x201u;
    for (uint32_t bad : {inf, inf | sign, inf | nan_payload, inf | sign | 1u}) {
      for (QuantMode mode : kModes)
        for (uint32_t group : kGroups) {
          zt::Tensor t = quant_data(d, 1000, rng);
          t.set(rng() % t.n, bad);
          INFO("dtype " << dtype_name(d) << " bad 0x" << std::hex << bad);
          REQUIRE(quantize_status(t, mode, 2 + uint32_t(rng() % 7), group) == Status::not_finite);
        }
    }
  }
  // Largest finite values of both signs in one group: hi - lo overflows fp32 (asymmetric only).
  for (DType d : {DType::bf16, DType::fp32}) {
    zt::Tensor t(d, 64);
    const float big = d == DType::bf16 ? zt::bits_f32(0x7F7F0000u) : std::numeric_limits<float>::max();
    for (uint64_t i = 0; i < 64; ++i) t.set_float(i, i % 2 ? big : -big);
    REQUIRE(quantize_status(t, QuantMode::asymmetric, 4, 64) == Status::not_finite);
    check_roundtrip(t, QuantMode::symmetric, 4, 64);
  }
}

// ---- helpers of the device quantizer ---------------------------------------------------------------------------
TEST_CASE("quant: params_surely_valid never accepts parameters that params_valid refuses", "[quant]") {
  ZT_RNG("quant surely valid");
  // exponents around each limit (2^(E - b), 2^(E + 1 - b), 2^E with E = 14 or 126), random mantissas and signs,
  // and the special values
  auto pick = [&](uint32_t centre_exp) {
    const uint32_t r = uint32_t(rng() % 16);
    if (r == 0) return zt::bits_f32(0x7F800000u | uint32_t(rng() % 2) << 31);  // infinity
    if (r == 1) return zt::bits_f32(0x7FC00000u);                                // NaN
    if (r == 2) return zt::bits_f32(uint32_t(rng() % 2) << 31);                  // a zero
    int e = int(centre_exp) + int(rng() % 9) - 4;
    e = std::max(1, std::min(254, e));
    const uint32_t sign = rng() % 8 == 0 ? 0x80000000u : 0u;
    const uint32_t mant = rng() % 4 == 0 ? (rng() % 2 ? 0u : 0x7FFFFFu) : uint32_t(rng()) & 0x7FFFFFu;
    return zt::bits_f32(sign | uint32_t(e) << 23 | mant);
  };
  uint64_t accepted = 0, refused_by_both = 0;
  for (DType d : zt::kArithmeticDTypes)
    for (QuantMode mode : kModes)
      for (uint32_t bits : kBits)
        for (int constant = 0; constant < 2; ++constant) {
          if (constant && mode == QuantMode::asymmetric) continue;
          const uint32_t e = d == DType::fp16 ? 14u : 126u;
          for (int i = 0; i < 4000; ++i) {
            const uint32_t centre = 127u + (i % 3 == 0 ? e - bits : i % 3 == 1 ? e + 1u - bits : e);
            const float scale = pick(centre), lo = pick(127u + e);
            const bool sure = quant::params_surely_valid(d, mode, bits, scale, lo, constant != 0);
            bool valid = false;
            if (d == DType::bf16) valid = quant::params_valid<DType::bf16>(mode, bits, scale, lo, constant != 0);
            if (d == DType::fp16) valid = quant::params_valid<DType::fp16>(mode, bits, scale, lo, constant != 0);
            if (d == DType::fp32) valid = quant::params_valid<DType::fp32>(mode, bits, scale, lo, constant != 0);
            INFO("dtype " << dtype_name(d) << " mode " << quant::mode_name(mode) << " bits " << bits << " scale "
                          << scale << " lo " << lo << " constant " << constant);
            if (sure) REQUIRE(valid);
            accepted += sure;
            refused_by_both += !sure && !valid;
          }
        }
  REQUIRE(accepted > 10000);  // the condition holds for ordinary parameters
  REQUIRE(refused_by_both > 10000);
  REQUIRE(quant::params_surely_valid(DType::bf16, QuantMode::asymmetric, 8, 0.01f, -1.0f, false));
  REQUIRE(quant::params_surely_valid(DType::fp16, QuantMode::symmetric, 2, 3000.0f, 0.0f, false));
  REQUIRE_FALSE(quant::params_surely_valid(DType::fp16, QuantMode::symmetric, 2, 9000.0f, 0.0f, false));
}

TEST_CASE("quant: div_by_reciprocal gives the correctly rounded quotient for the scales and quotients it covers",
          "[quant]") {
  ZT_RNG("quant reciprocal division");
  std::uniform_int_distribution<int> scale_exp(-64, 63), quot_exp(-32, 31);
  uint64_t cases = 0;
  auto check = [&](float d, float s) {
    const float r = quant::div_rn(1.0f, s);
    const float got = quant::div_by_reciprocal(d, s, r), want = f_div(d, s);
    const double q = std::fabs(double(d) / double(s));
    INFO("d " << d << " (0x" << std::hex << zt::f32_bits(d) << ") s " << s << " (0x" << zt::f32_bits(s) << ")");
    if (d == 0.0f)
      REQUIRE(got == 0.0f);  // either sign
    else if (q >= std::ldexp(1.0, -32) && q <= std::ldexp(1.0, 32))
      REQUIRE(zt::f32_bits(got) == zt::f32_bits(want));
    else if (q < std::ldexp(1.0, -32))
      REQUIRE(std::fabs(got) < std::ldexp(1.0f, -31));
    ++cases;
  };
  for (int i = 0; i < 600000; ++i) {
    const uint32_t mant = i % 5 == 0 ? 0x7FFFFFu : i % 5 == 1 ? 0u : uint32_t(rng()) & 0x7FFFFFu;
    const float s = zt::bits_f32(uint32_t(127 + scale_exp(rng)) << 23 | mant);
    float d;
    switch (i % 4) {
      case 0: {  // near a half-integer quotient (k + 1/2) * s, and its neighbours: ties and near-ties
        const double k = double(rng() % 512) + 0.5;
        d = float(k * double(s));
        const int step = int(rng() % 5) - 2;
        for (int j = 0; j < std::abs(step); ++j) d = std::nextafter(d, step > 0 ? INFINITY : -INFINITY);
        break;
      }
      case 1: d = float(double(rng() % 512) * double(s)); break;  // integer quotients
      default: d = float(std::ldexp(1.0 + double(rng() % (1u << 23)) / double(1u << 23), quot_exp(rng)) *
                         double(s));
    }
    if (rng() % 2) d = -d;
    if (std::isfinite(d)) check(d, s);
  }
  check(0.0f, 1.0f);
  check(-0.0f, 3.0f);
  check(std::ldexp(1.0f, -140), 1.0f);  // a quotient far below 2^-32
  REQUIRE(cases > 500000);
}

// ---- validation -------------------------------------------------------------------------------------------------------
TEST_CASE("quant: headers: foreign magic, check, version, fields, reserved words and truncation are refused",
          "[quant]") {
  ZT_RNG("quant header");
  const zt::Tensor t = quant_data(DType::bf16, 300, rng);
  const std::vector<uint8_t> m = quantize_ok(t, QuantMode::asymmetric, 4, 64);
  quant::Header h;
  REQUIRE(quant::host::read_header(m.data(), m.size(), &h) == Status::ok);
  REQUIRE(quant::validate_header(h, m.size() + 100) == Status::ok);
  auto status_with = [&](auto change) {
    quant::Header x = h;
    change(x);
    return quant::validate_header(quant::seal_header(x), ~0ull);
  };
  REQUIRE(status_with([](quant::Header& x) { x.magic = format::MAGIC; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.version = 2; }) == Status::unsupported_version);
  REQUIRE(status_with([](quant::Header& x) { x.version = 0; }) == Status::unsupported_version);
  REQUIRE(status_with([](quant::Header& x) { x.dtype = 0; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.dtype = 4; }) == Status::bad_header);  // fp8: not quantized
  REQUIRE(status_with([](quant::Header& x) { x.dtype = 5; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.bits = 1; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.bits = 9; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.mode = 0; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.mode = 3; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.group_size = 16; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.group_size = 96; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.reserved0 = 1; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.reserved3 = 1; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.num_elements = (uint64_t(1) << 50) + 1; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.num_elements += 1000; }) == Status::bad_header);  // sizes disagree
  REQUIRE(status_with([](quant::Header& x) { x.total_bytes += 16; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.params_offset += 16; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.codes_offset -= 16; }) == Status::bad_header);
  REQUIRE(status_with([](quant::Header& x) { x.bits = 5; }) == Status::bad_header);  // size no longer matches
  // every single-bit flip of the header
  for (uint32_t bit = 0; bit < 8 * quant::HEADER_BYTES; ++bit) {
    std::vector<uint8_t> c = m;
    c[bit / 8] ^= uint8_t(1u << (bit % 8));
    const zt::Decoded dq = dequantize_guarded(c, t.bytes.size());
    INFO("bit " << bit);
    REQUIRE((dq.status == Status::bad_header || dq.status == Status::unsupported_version));
    REQUIRE(dq.guards_ok);
    REQUIRE(std::all_of(dq.out.begin(), dq.out.end(), [](uint8_t b) { return b == 0x5C; }));  // untouched
  }
  // truncation at every length
  for (uint64_t len = 0; len < m.size(); ++len) {
    quant::Header x;
    REQUIRE(quant::host::read_header(m.data(), len, &x) == Status::corrupt_stream);
    std::vector<uint8_t> out(t.bytes.size());
    REQUIRE(quant::host::dequantize(m.data(), len, out.data(), out.size()) == Status::corrupt_stream);
  }
  // the two formats refuse each other's messages
  const std::vector<uint8_t> lossless = zt::compress_ok(CodeId::pair, t);
  std::vector<uint8_t> out(t.bytes.size());
  REQUIRE(quant::host::dequantize(lossless.data(), lossless.size(), out.data(), out.size()) == Status::bad_header);
  REQUIRE(host::decompress(m.data(), m.size(), out.data(), out.size()) == Status::bad_header);
  // arguments
  quant::Header x;
  REQUIRE(quant::host::read_header(nullptr, 64, &x) == Status::invalid_argument);
  REQUIRE(quant::host::read_header(m.data(), m.size(), nullptr) == Status::invalid_argument);
  REQUIRE(quant::host::dequantize(m.data(), m.size(), out.data(), out.size() - 1) == Status::buffer_too_small);
  REQUIRE(quant::host::dequantize(m.data(), m.size(), nullptr, out.size()) == Status::invalid_argument);
}

TEST_CASE("quant: body checks: padding, unused code bits, parameters no writer produces, contradicting codes",
          "[quant]") {
  ZT_RNG("quant body");
  for (DType d : zt::kArithmeticDTypes)
    for (QuantMode mode : kModes) {
      const uint64_t n = 3 * 64 + 5;  // partial last block and group; params need padding for symmetric
      zt::Tensor t = quant_data(d, n, rng);
      for (uint64_t i = 0; i < 64; ++i) t.set_float(i, 0.25f * float(i % 7) - 0.5f);  // group 0: ordinary
      for (uint64_t i = 64; i < 128; ++i) t.set_float(i, 2.0f);                      // group 1: constant
      const std::vector<uint8_t> m = quantize_ok(t, mode, 5, 64);
      const quant::Layout l = quant::layout_for(mode, 5, 64, n);
      INFO("dtype " << dtype_name(d) << " mode " << quant::mode_name(mode));
      auto expect_corrupt = [&](std::vector<uint8_t> c) {
        const zt::Decoded dq = dequantize_guarded(c, t.bytes.size());
        REQUIRE(dq.status == Status::corrupt_stream);
        REQUIRE(dq.guards_ok);
        REQUIRE(std::all_of(dq.out.begin(), dq.out.end(), [](uint8_t b) { return b == 0x5C; }));
      };
      auto with_f32 = [&](uint64_t off, float v) {
        std::vector<uint8_t> c = m;
        uint8_t b4[4];
        std::memcpy(b4, &v, 4);
        for (uint64_t k = 0; k < 4; ++k) c.at(off + k) = b4[k];
        return c;
      };
      // padding after the parameters and after the codes, and unused code bits of the last block
      for (int gap = 0; gap < quant::SECTION_GAPS; ++gap) {
        uint64_t b, e;
        quant::section_gap(l, gap, b, e);
        for (uint64_t k = b; k < e; ++k) {
          std::vector<uint8_t> c = m;
          c[k] = 1;
          expect_corrupt(c);
        }
      }
      {
        std::vector<uint8_t> c = m;
        const quant::CodePos p = quant::code_pos(n, 5);  // first unused code of the last block
        c[l.codes_offset + 4 * p.word + p.shift / 8] |= uint8_t(1u << (p.shift % 8));
        expect_corrupt(c);
      }
      // non-finite or negative parameters
      const float inf = std::numeric_limits<float>::infinity();
      expect_corrupt(with_f32(l.params_offset, inf));
      expect_corrupt(with_f32(l.params_offset, std::numeric_limits<float>::quiet_NaN()));
      expect_corrupt(with_f32(l.params_offset, -1.0f));
      expect_corrupt(with_f32(l.params_offset, 1e38f));  // the largest code decodes past fp32's range
      if (mode == QuantMode::asymmetric) expect_corrupt(with_f32(l.params_offset + 4, -inf));
      // codes contradicting their group: constant group 1 (asymmetric: scale 0; symmetric: codes 0) with one
      // non-zero code
      {
        std::vector<uint8_t> c = m;
        c[l.codes_offset + (64 * 5) / 8] |= 1u;  // element 64 (first of group 1), code bit 0
        expect_corrupt(c);
      }
      // symmetric: a code 0 inside an ordinary group
      if (mode == QuantMode::symmetric) {
        std::vector<uint8_t> c = m;
        quant::host::MessageView v;
        REQUIRE(v.open(c.data(), c.size()) == Status::ok);
        const uint32_t code = v.code(3);
        // clear element 3's code bits (bits 15..19 of word 0)
        uint32_t w0;
        std::memcpy(&w0, &c[l.codes_offset], 4);
        w0 &= ~(31u << 15);
        std::memcpy(&c[l.codes_offset], &w0, 4);
        REQUIRE(code != 0);
        expect_corrupt(c);
      }
    }
}

TEST_CASE("quant: argument checks and capacities", "[quant]") {
  ZT_RNG("quant args");
  const zt::Tensor t = quant_data(DType::fp16, 200, rng);
  const uint64_t size = quant::max_quantized_bytes(QuantMode::symmetric, 4, 32, t.n);
  std::vector<uint8_t> buf(size, 0xEE);
  uint64_t out = 7;
  auto q = [&](DType d, QuantMode mode, uint32_t bits, uint32_t group, const void* src, uint64_t n, void* dst,
               uint64_t cap, uint64_t* o) { return quant::host::quantize(d, mode, bits, group, src, n, dst, cap, o); };
  const void* s = t.bytes.data();
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 4, 32, s, t.n, buf.data(), size - 1, &out) == Status::buffer_too_small);
  REQUIRE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xEE; }));  // nothing written
  REQUIRE(out == 7);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 1, 32, s, t.n, buf.data(), size, &out) == Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 9, 32, s, t.n, buf.data(), size, &out) == Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 4, 100, s, t.n, buf.data(), size, &out) == Status::invalid_argument);
  REQUIRE(q(DType(0), QuantMode::symmetric, 4, 32, s, t.n, buf.data(), size, &out) == Status::invalid_argument);
  for (DType fp8 : zt::kFp8DTypes)  // the lossless codec's fp8 dtypes are not quantized further
    REQUIRE(q(fp8, QuantMode::symmetric, 4, 32, s, t.n, buf.data(), size, &out) == Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode(0), 4, 32, s, t.n, buf.data(), size, &out) == Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 4, 32, nullptr, t.n, buf.data(), size, &out) ==
          Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 4, 32, s, t.n, nullptr, size, &out) == Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 4, 32, s, t.n, buf.data(), size, nullptr) == Status::invalid_argument);
  REQUIRE(q(DType::fp16, QuantMode::symmetric, 4, 32, s, t.n, buf.data(), size, &out) == Status::ok);
  REQUIRE(out == size);
  // an empty tensor is a 64-byte message
  uint8_t hdr[64];
  REQUIRE(q(DType::bf16, QuantMode::asymmetric, 8, 128, nullptr, 0, hdr, 64, &out) == Status::ok);
  REQUIRE(out == 64);
  REQUIRE(quant::host::dequantize(hdr, 64, nullptr, 0) == Status::ok);
}

TEST_CASE("quant: the symmetric/asymmetric noise ratio follows the ratio of mean squared steps at b = 6", "[quant]") {
  // Uniform-noise law: MSE = E[step^2] / 12 per mode, so MSE_sym / MSE_asym = E[s_sym^2] / E[s_asym^2].
  ZT_RNG("quant gamma law");
  const uint64_t n = 64 * 2048;
  zt::Tensor t(DType::fp32, n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (uint64_t i = 0; i < n; ++i) t.set_float(i, 0.3f + nd(rng));  // off-centre: gamma > 1
  double mse[2], s2[2];
  for (int k = 0; k < 2; ++k) {
    const QuantMode mode = kModes[k];
    const std::vector<uint8_t> m = quantize_ok(t, mode, 6, 64);
    quant::host::MessageView v;
    REQUIRE(v.open(m.data(), m.size()) == Status::ok);
    const zt::Decoded dq = dequantize_guarded(m, t.bytes.size());
    REQUIRE(dq.status == Status::ok);
    mse[k] = s2[k] = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const double e = double(zt::bits_f32(t.get(i))) - double(zt::bits_f32(out_elem(DType::fp32, dq.out, i)));
      mse[k] += e * e;
    }
    for (uint64_t g = 0; g < n / 64; ++g) s2[k] += double(v.scale(g)) * double(v.scale(g));
  }
  const double measured = mse[1] / mse[0], predicted = s2[1] / s2[0];
  INFO("measured " << measured << " predicted " << predicted);
  REQUIRE(predicted > 1.1);
  REQUIRE(std::fabs(measured / predicted - 1) < 0.08);
}

// ---- EAR --------------------------------------------------------------------------------------------------------------
TEST_CASE("quant: EAR is exactly 1 for identical inputs, symmetric, between 0 and 1, and 0 for disjoint one-hot rows", "[quant]") {
  ZT_RNG("quant ear");
  using quant::host::ear;
  using quant::host::ear_row;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (uint64_t vocab : {1ull, 2ull, 7ull, 1000ull, 30522ull}) {
    const uint64_t rows = 1 + rng() % 9;
    std::vector<float> p(rows * vocab), q(rows * vocab);
    const float temp = float(std::exp2(std::uniform_real_distribution<double>(-3, 4)(rng)));
    for (float& x : p) x = nd(rng) * temp;
    for (uint64_t i = 0; i < p.size(); ++i) q[i] = p[i] + 0.3f * nd(rng);
    INFO("vocab " << vocab << " rows " << rows << " temperature " << temp);
    REQUIRE(ear(p.data(), p.data(), rows, vocab) == 1.0);
    std::vector<float> copy = p;
    REQUIRE(ear(p.data(), copy.data(), rows, vocab) == 1.0);
    const double a = ear(p.data(), q.data(), rows, vocab), b = ear(q.data(), p.data(), rows, vocab);
    REQUIRE(a == b);  // bit for bit
    REQUIRE(a > 0.0);
    REQUIRE(a <= 1.0);
    if (vocab > 1) REQUIRE(a < 1.0);
    // the same distributions written with shifted logits: 1 up to rounding
    std::vector<float> shifted = p;
    for (float& x : shifted) x += 3.0f;
    REQUIRE(ear(p.data(), shifted.data(), rows, vocab) > 1.0 - 1e-4);
  }
  // disjoint one-hot rows: probability 0 elsewhere (-inf logits, or a gap of 1000 nats: exp underflows to 0)
  const float ninf = -std::numeric_limits<float>::infinity();
  const float p1[4] = {0.0f, ninf, ninf, ninf}, q1[4] = {ninf, 0.0f, ninf, ninf};
  REQUIRE(ear_row(p1, q1, 4) == 0.0);
  const float p2[3] = {1000.0f, 0.0f, 0.0f}, q2[3] = {0.0f, 1000.0f, 0.0f};
  REQUIRE(ear_row(p2, q2, 3) == 0.0);
  REQUIRE(ear_row(p1, p1, 4) == 1.0);
  // a known value: p = (1/2, 1/2), q = (1/4, 3/4) -> 1/4 + 1/2
  const float p3[2] = {0.0f, 0.0f}, q3[2] = {0.0f, float(std::log(3.0))};
  REQUIRE(ear_row(p3, q3, 2) == Approx(0.75).epsilon(1e-7));
  // a mean over rows
  const float pp[4] = {0.0f, 0.0f, 0.0f, 0.0f}, qq[4] = {0.0f, 0.0f, 0.0f, float(std::log(3.0))};
  REQUIRE(ear(pp, qq, 2, 2) == Approx(0.875).epsilon(1e-7));
  // bad rows
  const float bad[2] = {std::numeric_limits<float>::quiet_NaN(), 0.0f}, all_ninf[2] = {ninf, ninf};
  REQUIRE(std::isnan(ear_row(bad, p3, 2)));
  REQUIRE(std::isnan(ear_row(all_ninf, all_ninf, 2)));
  REQUIRE(std::isnan(ear(p3, p3, 0, 2)));
  REQUIRE(std::isnan(ear_row(p3, p3, 0)));
}

TEST_CASE("quant: dequantize + reduce and dequantize + forward are the unfused steps; errors write nothing",
          "[quant]") {
  ZT_RNG("quant fused");
  for (DType d : {DType::bf16, DType::fp16, DType::fp32}) {
    CAPTURE(zipcomm::dtype_name(d));
    const uint64_t n = 1 + rng() % 5000;
    const zt::Tensor t = quant_data(d, n, rng), local = quant_data(d, n, rng);
    const uint64_t size = quant::max_quantized_bytes(QuantMode::asymmetric, 5, 64, n);
    std::vector<uint8_t> msg(size);
    uint64_t written = 0;
    REQUIRE(quant::host::quantize(d, QuantMode::asymmetric, 5, 64, t.bytes.data(), n, msg.data(), size, &written) ==
            Status::ok);
    zt::Tensor x(d, n);
    REQUIRE(quant::host::dequantize(msg.data(), size, x.bytes.data(), x.bytes.size()) == Status::ok);
    // sum, restated: the reconstruction and the local element widened to fp32, added once, narrowed (RNE)
    zt::Tensor out(d, n);
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size, d, local.bytes.data(), out.bytes.data(), n,
                                           ReduceOp::sum()) == Status::ok);
    for (uint64_t i = 0; i < n; ++i) {
      const uint32_t want = narrow(d, f_add(elem_f32(d, x.get(i)), elem_f32(d, local.get(i))));
      if (out.get(i) != want) FAIL("element " << i << ": " << out.get(i) << " != " << want);
    }
    // max: one of the operands, the larger
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size, d, local.bytes.data(), out.bytes.data(), n,
                                           ReduceOp::max()) == Status::ok);
    for (uint64_t i = 0; i < n; ++i) {
      const float a = elem_f32(d, x.get(i)), b = elem_f32(d, local.get(i));
      REQUIRE(elem_f32(d, out.get(i)) == std::max(a, b));
    }
    // in place (dst == local)
    zt::Tensor acc = local;
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size, d, acc.bytes.data(), acc.bytes.data(), n,
                                           ReduceOp::sum()) == Status::ok);
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size, d, local.bytes.data(), out.bytes.data(), n,
                                           ReduceOp::sum()) == Status::ok);
    REQUIRE(acc.bytes == out.bytes);
    // another element count, a bad operator, a truncated message: refused, nothing written
    std::fill(out.bytes.begin(), out.bytes.end(), uint8_t(0xEE));
    const auto untouched = [&] { return std::all_of(out.bytes.begin(), out.bytes.end(), [](uint8_t b) { return b == 0xEE; }); };
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size, d, local.bytes.data(), out.bytes.data(), n - 1,
                                           ReduceOp::sum()) == Status::size_mismatch);
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size, d, local.bytes.data(), out.bytes.data(), n,
                                           ReduceOp{ReduceOpId(9), 1.0f}) == Status::invalid_argument);
    REQUIRE(quant::host::dequantize_reduce(msg.data(), size - 16, d, local.bytes.data(), out.bytes.data(), n,
                                           ReduceOp::sum()) == Status::corrupt_stream);
    REQUIRE(untouched());
    // forward: the elements of dequantize(), the message byte for byte
    std::vector<uint8_t> fwd(size + 16, 0xEE);
    REQUIRE(quant::host::dequantize_forward(msg.data(), size, out.bytes.data(), out.bytes.size(), d, fwd.data(),
                                            size - 1) == Status::buffer_too_small);
    REQUIRE(untouched());
    REQUIRE(quant::host::dequantize_forward(msg.data(), size, out.bytes.data(), out.bytes.size(), d, fwd.data(),
                                            fwd.size()) == Status::ok);
    REQUIRE(out.bytes == x.bytes);
    REQUIRE(std::equal(msg.begin(), msg.end(), fwd.begin()));
    REQUIRE(fwd[size] == 0xEE);
  }
}
