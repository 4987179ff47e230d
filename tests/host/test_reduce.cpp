// Reduction semantics (thread/reduce_op.hpp) against an independent oracle, and the host reference of the
// fused steps (host/reference_reduce.hpp): statuses and composition.
#include "test_util.hpp"

#include <zipcomm/host/reference_reduce.hpp>
#include <zipcomm/thread/reduce_op.hpp>

#include <cfenv>
#include <cmath>
#include <limits>

using namespace zipcomm;
using zt::Tensor;

namespace {

// ---- independent oracle: exact arithmetic in double, one correct rounding to the element type ---------------
struct Fmt {
  int mant_bits;   // stored mantissa bits
  int min_exp;     // exponent of the smallest normal
  double max_val;  // largest finite value
};
Fmt fmt(DType d) {
  return d == DType::bf16 ? Fmt{7, -126, 3.3895313892515355e38} : Fmt{10, -14, 65504.0};
}

/// Round a double to the nearest representable bf16/fp16 value, ties to even (the CPU's default mode).
double round_to(DType d, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const Fmt f = fmt(d);
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int unit_exp = std::max(e - 1, f.min_exp) - f.mant_bits;  // exponent of one ulp at x
  const double q = std::ldexp(std::nearbyint(std::ldexp(x, -unit_exp)), unit_exp);
  // Overflow: beyond max + half an ulp of max goes to infinity (max itself rounds to max).
  const double half_ulp_max = std::ldexp(1.0, int(std::log2(f.max_val)) - f.mant_bits - 1);
  if (std::fabs(x) >= f.max_val + half_ulp_max) return std::copysign(INFINITY, x);
  return q;
}

uint32_t bits_of(DType d, double v) {  // v exactly representable in d (or inf)
  const uint32_t u = zt::f32_bits(float(v));
  if (d == DType::bf16) return u >> 16;
  return thread::fp16_from_f32_bits_reference(u);  // exact for representable values (checked separately)
}

double value_of(DType d, uint32_t b) {
  return d == DType::bf16 ? double(thread::to_f32<DType::bf16>(b)) : double(thread::to_f32<DType::fp16>(b));
}

uint32_t oracle(DType d, ReduceOpId op, uint32_t a, uint32_t b) {
  const double x = value_of(d, a), y = value_of(d, b);
  const double r = op == ReduceOpId::prod ? x * y : x + y;  // exact in double for 8/11-bit significands
  if (std::isnan(r)) return 0x7FFFu;
  return bits_of(d, round_to(d, r));
}

template <DType D>
uint32_t device_semantics(ReduceOpId op, uint32_t a, uint32_t b) {
  uint32_t acc[1] = {a};
  const uint32_t loc[1] = {b};
  ReduceOp o{op, 1.0f};
  thread::reduce_items<D, 1>(o, acc, loc);
  return acc[0];
}

std::vector<uint32_t> special_16(DType d) {
  std::vector<uint32_t> v;
  const uint32_t inf = d == DType::bf16 ? 0x7F80u : 0x7C00u;
  const uint32_t exp_lsb = d == DType::bf16 ? 0x80u : 0x400u;
  for (uint32_t s : {0u, 0x8000u}) {
    for (uint32_t m : {0u, 1u, 2u, 3u, exp_lsb - 1, exp_lsb, exp_lsb + 1, inf - 1, inf, inf + 1, 0x7FFFu})
      v.push_back(s | m);
    for (uint32_t e = 1; e < (inf / exp_lsb); e += 7) v.push_back(s | (e * exp_lsb) | (e % 3));
    v.push_back(s | (inf - exp_lsb));   // largest binade
    v.push_back(s | (d == DType::bf16 ? 0x3F80u : 0x3C00u));  // 1.0
  }
  return v;
}

}  // namespace

TEST_CASE("fp16 reference conversions: every pattern round-trips, roundings match the oracle", "[reduce]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = thread::f32_from_fp16_bits_reference(h);
    const bool nan = (h & 0x7FFFu) > 0x7C00u;
    REQUIRE(std::isnan(f) == nan);
    REQUIRE(thread::fp16_from_f32_bits_reference(zt::f32_bits(f)) == (nan ? 0x7FFFu : h));
  }
  ZT_RNG("fp16 conversion");
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = any(rng);
    if (i % 2) u = (u & 0x807FFFFFu) | (uint32_t(100 + (u >> 24) % 45) << 23);  // near the fp16 range
    const float f = zt::bits_f32(u);
    if (std::isnan(f)) continue;
    CAPTURE(u);
    REQUIRE(thread::fp16_from_f32_bits_reference(u) == bits_of(DType::fp16, round_to(DType::fp16, double(f))));
    REQUIRE(thread::bf16_from_f32_bits_reference(u) == (zt::f32_bits(float(round_to(DType::bf16, double(f)))) >> 16));
  }
}

TEST_CASE("sum and prod of bf16/fp16 are the correctly rounded results (per-hop rounding, as a native add)",
          "[reduce]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  ZT_RNG("sum prod oracle");
  for (DType d : {DType::bf16, DType::fp16}) {
    CAPTURE(dtype_name(d));
    const auto sp = special_16(d);
    std::uniform_int_distribution<uint32_t> any(0, 0xFFFF);
    std::vector<std::pair<uint32_t, uint32_t>> pairs;
    for (uint32_t a : sp)
      for (uint32_t b : sp) pairs.push_back({a, b});
    for (int i = 0; i < 1000000; ++i) pairs.push_back({any(rng), any(rng)});
    // close magnitudes: cancellation and carries
    for (int i = 0; i < 200000; ++i) {
      uint32_t a = any(rng);
      pairs.push_back({a, (a ^ 0x8000u) + (any(rng) % 64) - 32});
    }
    for (ReduceOpId op : {ReduceOpId::sum, ReduceOpId::prod}) {
      CAPTURE(reduce_op_name(op));
      for (auto [a, b] : pairs) {
        a &= 0xFFFFu, b &= 0xFFFFu;
        CAPTURE(a, b);
        const uint32_t got = d == DType::bf16 ? device_semantics<DType::bf16>(op, a, b)
                                              : device_semantics<DType::fp16>(op, a, b);
        REQUIRE(got == oracle(d, op, a, b));
        const uint32_t swapped = d == DType::bf16 ? device_semantics<DType::bf16>(op, b, a)
                                                  : device_semantics<DType::fp16>(op, b, a);
        REQUIRE(swapped == got);  // commutative bit for bit: the ring's order cannot change the bits
      }
    }
  }
}

TEST_CASE("fp32 sum and prod are IEEE single operations, and NaN results are canonical", "[reduce]") {
  ZT_RNG("fp32 oracle");
  std::uniform_int_distribution<uint32_t> any;
  const uint32_t specials[] = {0u, 0x80000000u, 1u, 0x807FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,
                               0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFC12345u, 0x3F800000u, 0xBF800000u};
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t a : specials)
    for (uint32_t b : specials) pairs.push_back({a, b});
  for (int i = 0; i < 1000000; ++i) pairs.push_back({any(rng), any(rng)});
  for (auto [a, b] : pairs) {
    CAPTURE(a, b);
    const double x = zt::bits_f32(a), y = zt::bits_f32(b);
    for (ReduceOpId op : {ReduceOpId::sum, ReduceOpId::prod}) {
      const float r = float(op == ReduceOpId::sum ? x + y : x * y);
      const uint32_t want = std::isnan(r) ? 0x7FFFFFFFu : zt::f32_bits(r);
      REQUIRE(device_semantics<DType::fp32>(op, a, b) == want);
    }
  }
}

TEST_CASE("min and max: NaN operands ignored (fminf/fmaxf), two NaNs canonical, -0 below +0", "[reduce]") {
  using thread::min_max_bits;
  // bf16
  REQUIRE(min_max_bits<DType::bf16, false>(0x7FC1u, 0x3F80u) == 0x3F80u);
  REQUIRE(min_max_bits<DType::bf16, true>(0x3F80u, 0xFFC1u) == 0x3F80u);
  REQUIRE(min_max_bits<DType::bf16, true>(0x7FC1u, 0xFF81u) == 0x7FFFu);
  REQUIRE(min_max_bits<DType::bf16, false>(0x8000u, 0x0000u) == 0x8000u);
  REQUIRE(min_max_bits<DType::bf16, false>(0x0000u, 0x8000u) == 0x8000u);
  REQUIRE(min_max_bits<DType::bf16, true>(0x8000u, 0x0000u) == 0x0000u);
  REQUIRE(min_max_bits<DType::bf16, true>(0xFF80u, 0x7F80u) == 0x7F80u);
  REQUIRE(min_max_bits<DType::bf16, false>(0xFF80u, 0x7F80u) == 0xFF80u);
  REQUIRE(min_max_bits<DType::bf16, false>(0xBF80u, 0xC000u) == 0xC000u);  // -1 vs -2
  // fp32 and fp16, against fminf/fmaxf on every pair of a value set (no NaN: those are fixed above)
  ZT_RNG("min max");
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    uint32_t a = any(rng), b = i % 3 ? any(rng) : a ^ 0x80000000u;
    if (std::isnan(zt::bits_f32(a)) || std::isnan(zt::bits_f32(b))) continue;
    const float fa = zt::bits_f32(a), fb = zt::bits_f32(b);
    CAPTURE(a, b);
    if (fa != fb) {
      REQUIRE(min_max_bits<DType::fp32, false>(a, b) == zt::f32_bits(std::fmin(fa, fb)));
      REQUIRE(min_max_bits<DType::fp32, true>(a, b) == zt::f32_bits(std::fmax(fa, fb)));
    }
    const uint32_t h = a & 0xFFFFu, k = b & 0xFFFFu;
    if ((h & 0x7FFFu) <= 0x7C00u && (k & 0x7FFFu) <= 0x7C00u) {
      const float x = thread::f32_from_fp16_bits_reference(h), y = thread::f32_from_fp16_bits_reference(k);
      if (x != y) REQUIRE(min_max_bits<DType::fp16, false>(h, k) == (x < y ? h : k));
    }
  }
}

TEST_CASE("avg scales each contribution once, then adds", "[reduce]") {
  const ReduceOp avg = ReduceOp::avg(4);
  REQUIRE(avg.scale == 0.25f);
  REQUIRE(thread::reduce_pre<DType::bf16>(avg, 0x4080u) == 0x3F80u);  // 4 -> 1
  REQUIRE(thread::reduce_pre<DType::fp32>(avg, 0x40800000u) == 0x3F800000u);
  REQUIRE(thread::reduce_pre<DType::fp16>(avg, 0x4400u) == 0x3C00u);
  REQUIRE(thread::reduce_pre<DType::fp16>(avg, 0x0001u) == 0x0000u);  // 2^-24 / 4: below half the smallest subnormal
  REQUIRE(thread::reduce_pre<DType::bf16>(ReduceOp::sum(), 0x4080u) == 0x4080u);
  uint32_t acc[1] = {0x3F80u};
  const uint32_t x[1] = {0x4080u};
  thread::reduce_items<DType::bf16, 1>(avg, acc, x);  // 1 + 4/4
  REQUIRE(acc[0] == 0x4000u);
}

TEST_CASE("host fused reference: statuses and composition", "[reduce]") {
  ZT_RNG("host fused");
  for (DType d : zt::kArithmeticDTypes) {
    CAPTURE(dtype_name(d));
    for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(300), uint64_t(16385), uint64_t(40000)}) {
      CAPTURE(n);
      Tensor a = zt::gaussian(d, n, rng), b = zt::gaussian(d, n, rng);
      const auto stream = zt::compress_ok(CodeId::pair, a);
      std::vector<uint8_t> out(n * format::elem_bytes(d) + 1), want(out.size());
      for (ReduceOp op : {ReduceOp::sum(), ReduceOp::prod(), ReduceOp::min(), ReduceOp::max(), ReduceOp::avg(3)}) {
        CAPTURE(reduce_op_name(op.id));
        REQUIRE(host::decompress_reduce(stream.data(), stream.size(), d, CodeId::pair, b.bytes.data(),
                                        out.data(), n, op) == Status::ok);
        REQUIRE(host::reduce(d, op, a.bytes.data(), b.bytes.data(), want.data(), n) == Status::ok);
        REQUIRE(out == want);
        std::vector<uint8_t> enc(format::max_compressed_bytes(d, n)), enc_want(enc.size());
        uint64_t eb = 0, wb = 0;
        REQUIRE(host::decompress_reduce_compress(stream.data(), stream.size(), d, CodeId::pair, b.bytes.data(),
                                                 n, op, enc.data(), enc.size(), &eb) == Status::ok);
        // the fused step writes every tile's low bits at full width (its output size is known up front)
        REQUIRE(host::compress(d, CodeId::pair, want.data(), n, enc_want.data(), enc_want.size(), &wb,
                               format::LowWidths::full) == Status::ok);
        REQUIRE(eb == wb);
        REQUIRE(std::equal(enc.begin(), enc.begin() + eb, enc_want.begin()));
      }
      // errors (out doubles as a non-null local: nothing is read once a check fails)
      REQUIRE(host::decompress_reduce(stream.data(), stream.size(), d, CodeId::pair, out.data(), out.data(),
                                      n + 1, ReduceOp::sum()) == Status::size_mismatch);
      const CodeId other_code = static_cast<CodeId>(2);  // not the stream's code (v2's window3)
      REQUIRE(host::decompress_reduce(stream.data(), stream.size(), d, other_code, out.data(), out.data(), n,
                                      ReduceOp::sum()) == Status::bad_header);
      REQUIRE(host::decompress_reduce(stream.data(), stream.size() - 1, d, CodeId::pair, out.data(), out.data(),
                                      n, ReduceOp::sum()) == Status::corrupt_stream);
      REQUIRE(host::decompress_reduce(stream.data(), stream.size(), d, CodeId::pair, out.data(), out.data(), n,
                                      ReduceOp{ReduceOpId(9), 1.0f}) == Status::invalid_argument);
      std::vector<uint8_t> fwd(stream.size());
      REQUIRE(host::decompress_forward(stream.data(), stream.size(), d, CodeId::pair, out.data(), n, fwd.data(),
                                       fwd.size()) == Status::ok);
      REQUIRE(fwd == stream);
      REQUIRE(std::equal(a.bytes.begin(), a.bytes.end(), out.begin()));
      REQUIRE(host::decompress_forward(stream.data(), stream.size(), d, CodeId::pair, out.data(), n, fwd.data(),
                                       fwd.size() - 16) == Status::buffer_too_small);
    }
  }
}
