// Bit-exact round trips: every 16-bit and fp8 pattern, fp32 specials, boundary sizes, raw/coded chunk mixes.
#include "test_util.hpp"

#include <algorithm>
#include <cfloat>
#include <iterator>
#include <limits>

using namespace zipcomm;
using zt::Tensor;

namespace {

Tensor all_patterns(DType d) {
  Tensor t(d, 65536);
  for (uint32_t i = 0; i < 65536; ++i) t.set(i, i);
  return t;
}

int exponent_of_bits(DType d, uint32_t b) { return int(zt::exponent_of(d, b)); }

int exponent_bias(DType d) {
  return d == DType::bf16 || d == DType::fp32 ? 127 : d == DType::fp8_e4m3 ? 7 : 15;
}

/// Elements [lo, hi) of t: Gaussian with a scale picked so the tile maximum sits 0..4 binades above the
/// exponent of `pattern` (or the pattern is itself the maximum), and `pattern` at a random position among them:
/// realistic anchors around every symbol, including escapes.
void embed_pattern(Tensor& t, uint64_t lo, uint64_t hi, uint32_t pattern, const std::vector<float>& pool,
                   std::mt19937_64& rng) {
  const DType d = t.dtype;
  int e = exponent_of_bits(d, pattern);
  if (e == 0) e = 1;
  if (e == int(zt::max_exponent(d))) e -= 1 + int(rng() % 8);  // inf/NaN (fp8_e4m3: its top binade): make it the anchor
  // max of 256 N(0,1) is ~2^1.5; aim the tile max at e + shift
  const int shift = int(rng() % 7) - 2;  // -2..4: sometimes the pattern is the max, sometimes d = 0..4
  const float s = std::ldexp(1.0f, e - exponent_bias(d) + shift - 2);
  const size_t base = rng() % pool.size();
  for (uint64_t k = lo; k < hi; ++k) t.set_float(k, pool[(base + (k - lo) * 7919) % pool.size()] * s);
  t.set(lo + rng() % (hi - lo), pattern);
}

std::vector<float> normal_pool(std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> pool(1 << 16);
  for (float& x : pool) x = nd(rng);
  return pool;
}

/// Every pattern of the dtype (16-bit or fp8) placed at a random position of its own 256-element tile of
/// Gaussian values (embed_pattern), `copies` times.
Tensor embedded_patterns(DType d, std::mt19937_64& rng, uint32_t copies = 1) {
  const uint32_t patterns = zt::elem_mask(d) + 1;
  Tensor t(d, uint64_t(patterns) * copies * 256);
  const std::vector<float> pool = normal_pool(rng);
  for (uint64_t k = 0; k < uint64_t(patterns) * copies; ++k)
    embed_pattern(t, k * 256, k * 256 + 256, uint32_t(k % patterns), pool, rng);
  return t;
}

int max_exponent(DType d) { return int(zt::max_exponent(d)); }

}  // namespace

TEST_CASE("all 65536 bf16 and fp16 patterns round trip in order and shuffled and embedded in Gaussian tiles",
          "[roundtrip]") {
  ZT_RNG("all_patterns");
  for (DType d : {DType::bf16, DType::fp16}) {
    Tensor t = all_patterns(d);
    for (CodeId c : zt::kCodes)
      for (uint32_t log2 : zt::kChunkLog2s) zt::roundtrip(c, t, log2);
    std::vector<uint32_t> perm(65536);
    for (uint32_t i = 0; i < 65536; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (uint32_t i = 0; i < 65536; ++i) t.set(i, perm[i]);
    for (CodeId c : zt::kCodes)
      for (uint32_t log2 : zt::kChunkLog2s) zt::roundtrip(c, t, log2);
    Tensor e = embedded_patterns(d, rng);
    for (CodeId c : zt::kCodes)
      for (uint32_t log2 : zt::kChunkLog2s) {
        auto s = zt::roundtrip(c, e, log2);
        // the embedding must exercise the coder, not only raw fallback
        CHECK(zt::raw_chunks(s) < zt::chunks_of(s));
      }
  }
}

namespace {
/// The 256 fp8 patterns in a random order.
std::vector<uint32_t> fp8_permutation(std::mt19937_64& rng) {
  std::vector<uint32_t> p(256);
  for (uint32_t i = 0; i < 256; ++i) p[i] = i;
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}
}  // namespace

TEST_CASE("all 256 fp8 patterns round trip in full tiles, short tiles, raw chunks and coded Gaussian tiles",
          "[roundtrip][fp8]") {
  ZT_RNG("fp8 patterns");
  const std::vector<float> pool = normal_pool(rng);
  for (DType d : zt::kFp8DTypes) {
    INFO("dtype " << dtype_name(d));
    // In order (one full tile), then a full chunk of 64 tiles, each a fresh permutation: every pattern at 64
    // positions.
    Tensor all(d, 256);
    for (uint32_t i = 0; i < 256; ++i) all.set(i, i);
    zt::roundtrip(CodeId::pair, all);
    Tensor chunk(d, format::MAX_CHUNK_ELEMS);
    for (uint32_t t = 0; t < format::MAX_CHUNK_TILES; ++t) {
      const auto p = fp8_permutation(rng);
      for (uint32_t i = 0; i < 256; ++i) chunk.set(t * 256 + i, p[i]);
    }
    for (uint32_t log2 : zt::kChunkLog2s) zt::roundtrip(CodeId::pair, chunk, log2);
    // A stream that is one short tile, of every length: the first n of a permutation.
    const auto perm = fp8_permutation(rng);
    for (uint32_t n = 1; n < 256; ++n) {
      Tensor t(d, n);
      for (uint32_t i = 0; i < n; ++i) t.set(i, perm[(i + 7 * n) % 256]);
      zt::roundtrip(CodeId::pair, t);
    }
    // Three full tiles and a short last tile of 77; four rotations put every pattern in the short tile.
    for (uint32_t rot = 0; rot < 4; ++rot) {
      Tensor t(d, 3 * 256 + 77);
      for (uint32_t i = 0; i < 3 * 256; ++i) t.set(i, perm[(i + rot) % 256]);
      for (uint32_t k = 0; k < 77; ++k) t.set(3 * 256 + k, (rot * 77 + k) % 256);
      zt::roundtrip(CodeId::pair, t);
    }
    // Raw chunks: a chunk of random bits holding every pattern between two coded Gaussian chunks, and a
    // stream whose last chunk (ending in a short tile) is raw and holds every pattern.
    for (uint32_t log2 : zt::kChunkLog2s) {
      const uint32_t size = 1u << log2;
      Tensor mixed = zt::gaussian(d, 3 * size, rng, 2.0);
      for (uint64_t i = size; i < 2 * size; ++i) mixed.set(i, uint32_t(rng()));
      for (uint32_t p = 0; p < 256; ++p) mixed.set(size + rng() % size, p);
      CHECK(zt::raw_chunk_map(zt::roundtrip(CodeId::pair, mixed, log2)) == std::vector<bool>{false, true, false});
      Tensor tail = zt::gaussian(d, size + 1000 + 77, rng, 2.0);
      for (uint32_t k = 0; k < 1077; ++k) tail.set(size + k, k < 256 ? k : uint32_t(rng()));
      CHECK(zt::raw_chunk_map(zt::roundtrip(CodeId::pair, tail, log2)) == std::vector<bool>{false, true});
    }
    // Coded: each pattern in its own Gaussian tile whose maximum sits 0..4 binades above it (every exponent as
    // each symbol its anchor allows), 32 times; and each pattern in the short last tile of a coded chunk. In
    // 16384-element chunks: a chunk of 4096 fp8 elements pays its header and lane padding on half the bytes.
    const Tensor e = embedded_patterns(d, rng, 32);
    const auto se = zt::roundtrip(CodeId::pair, e, 14);
    // fp8_e4m3 codes 4-bit exponents, little below raw: a few of these chunks go raw (about 1 in 8)
    CHECK(zt::raw_chunks(se) < zt::chunks_of(se) / 4);
    uint64_t coded_tails = 0;
    for (uint32_t p = 0; p < 256; ++p) {
      Tensor t = zt::gaussian(d, 16 * 256 + 100, rng, 2.0);
      embed_pattern(t, 16 * 256, t.n, p, pool, rng);
      coded_tails += zt::raw_chunks(zt::roundtrip(CodeId::pair, t, 14)) == 0;
    }
    CHECK(coded_tails >= 250);
  }
}

namespace {
std::vector<uint32_t> fp32_specials(std::mt19937_64& rng) {
  std::vector<uint32_t> v = {
      0x00000000u, 0x80000000u,                                        // +-0
      0x7F800000u, 0xFF800000u,                                        // +-inf
      zt::f32_bits(FLT_MAX), zt::f32_bits(-FLT_MAX),                   // +-max
      zt::f32_bits(FLT_MIN), zt::f32_bits(-FLT_MIN),                   // smallest normals
      0x00000001u, 0x80000001u, 0x007FFFFFu, 0x807FFFFFu,              // subnormal extremes
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, // NaNs (quiet, signalling)
  };
  for (int i = 0; i < 32; ++i) {
    const uint32_t payload = static_cast<uint32_t>(rng());
    v.push_back(0x7FC00000u | (payload & 0x3FFFFFu) | (payload & 0x80000000u));           // quiet NaN
    v.push_back(0x7F800000u | ((payload & 0x3FFFFFu) | 1u) | (payload & 0x80000000u));     // signalling NaN
    v.push_back((payload & 0x807FFFFFu) | 1u);                                             // subnormal
  }
  return v;
}
}  // namespace

TEST_CASE("fp32 random bits and Gaussian values and special values mixed into normal data round trip", "[roundtrip]") {
  ZT_RNG("fp32");
  const uint64_t n = 3 * 16384 + 77;
  for (CodeId c : zt::kCodes) {
    INFO("code " << code_name(c));
    auto raw = zt::roundtrip(c, zt::random_bits(DType::fp32, n, rng), 14);
    CHECK(zt::raw_chunks(raw) == 4);
    Tensor g = zt::gaussian(DType::fp32, n, rng);
    auto coded = zt::roundtrip(c, g, 14);
    // The 3 full chunks are coded; the 77-element tail is raw: 10 lanes own items there, each stream at least
    // one word, so 48 header bytes + 40 exceed its 80 raw bytes.
    CHECK(zt::raw_chunk_map(coded) == std::vector<bool>{false, false, false, true});
    // sprinkle specials: sparse everywhere, dense in a few tiles
    const auto sp = fp32_specials(rng);
    for (uint64_t i = 0; i < n; ++i)
      if (rng() % 100 == 0) g.set(i, sp[rng() % sp.size()]);
    for (int k = 0; k < 3; ++k) {
      const uint64_t tile = rng() % (n / 256);
      for (uint64_t i = tile * 256; i < tile * 256 + 256; ++i)
        if (rng() % 2) g.set(i, sp[rng() % sp.size()]);
    }
    zt::roundtrip(c, g);
    // every special value once, in order, alone and in a small stream
    Tensor s(DType::fp32, sp.size());
    for (size_t i = 0; i < sp.size(); ++i) s.set(i, sp[i]);
    zt::roundtrip(c, s);
  }
}

TEST_CASE("boundary sizes for every dtype and code", "[roundtrip]") {
  ZT_RNG("sizes");
  const uint64_t sizes[] = {0, 1, 31, 32, 33, 255, 256, 257, 16383, 16384, 16385, 3 * 16384 + 77};
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes)
      for (uint64_t n : sizes) {
        INFO("dtype " << dtype_name(d) << " code " << code_name(c) << " n " << n);
        auto s = zt::roundtrip(c, zt::gaussian(d, n, rng));
        if (n == 0) CHECK(s.size() == format::HEADER_BYTES);
        zt::roundtrip(c, zt::random_bits(d, n, rng));
        zt::roundtrip(c, Tensor(d, n));  // all +0
        Tensor neg(d, n);
        for (uint64_t i = 0; i < n; ++i) neg.set(i, zt::sign_bit(d));
        zt::roundtrip(c, neg);
      }
}

TEST_CASE("zero or subnormal-only tiles and tiles holding a single NaN or inf round trip", "[roundtrip]") {
  ZT_RNG("special_tiles");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << code_name(c));
      const uint64_t n = 2 * 16384 + 1000;
      Tensor t = zt::gaussian(d, n, rng);
      const uint32_t mant_mask = zt::mant_mask(d), sign = zt::sign_bit(d), exp_all = zt::exp_all_ones(d);
      const uint64_t tiles = (n + 255) / 256;
      for (uint64_t tile = 0; tile < tiles; ++tile) {
        const uint64_t lo = tile * 256, hi = std::min<uint64_t>(n, lo + 256);
        switch (tile % 8) {
          case 1:  // all zero, mixed signs: anchor 0, no codes
            for (uint64_t i = lo; i < hi; ++i) t.set(i, rng() % 2 ? sign : 0);
            break;
          case 2:  // subnormals only: anchor 0, fraction from the largest mantissa
            for (uint64_t i = lo; i < hi; ++i) t.set(i, (static_cast<uint32_t>(rng()) & (mant_mask | sign)));
            break;
          case 3:  // one NaN with a random payload (fp8_e4m3: its top binade)
            t.set(lo + rng() % (hi - lo), exp_all | ((static_cast<uint32_t>(rng()) & mant_mask) | 1u));
            break;
          case 4:  // one +-inf (fp8_e4m3: its largest magnitude's binade)
            t.set(lo + rng() % (hi - lo), exp_all | (rng() % 2 ? sign : 0));
            break;
          case 5:  // zeros in a normal tile (ZERO symbol)
            for (uint64_t i = lo; i < hi; ++i)
              if (rng() % 4 == 0) t.set(i, rng() % 2 ? sign : 0);
            break;
          default:
            break;
        }
      }
      zt::roundtrip(c, t);
      // a chunk that is nothing but zero tiles, and one that is a single NaN among zeros
      Tensor z(d, 16384 + 300);
      z.set(rng() % z.n, exp_all | 1u);
      zt::roundtrip(c, z);
    }
}

TEST_CASE("all chunks raw (random bits) and mixed raw/coded chunks", "[roundtrip]") {
  ZT_RNG("raw_mix");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes)
      for (uint32_t log2 : zt::kChunkLog2s) {
        INFO("dtype " << dtype_name(d) << " code " << code_name(c));
        const uint64_t size = uint64_t(1) << log2, n = 6 * size + 999, chunks = 7;
        auto s = zt::roundtrip(c, zt::random_bits(d, n, rng), log2);
        CHECK(zt::raw_chunks(s) == chunks);
        Tensor g = zt::gaussian(d, n, rng);
        Tensor r = zt::random_bits(d, n, rng);
        std::vector<bool> is_raw(chunks);
        uint64_t want_raw = 0;
        for (uint64_t k = 0; k < chunks; ++k) {
          is_raw[k] = k == 0 || k == chunks - 1 ? k == 0 : rng() % 2;
          want_raw += is_raw[k];
          const uint64_t hi = std::min(n, (k + 1) * size);
          if (is_raw[k])
            for (uint64_t i = k * size; i < hi; ++i) g.set(i, r.get(i));
        }
        s = zt::roundtrip(c, g, log2);
        CHECK(zt::raw_chunks(s) == want_raw);
      }
}

namespace {

/// Gaussian data where a fraction `rate` of the elements sit 16 or more binades below their tile's maximum:
/// ESC symbols, often in pairs that have no codeword of their own (escaped pairs). Tiles whose maximum is too
/// small for that are scaled up first (fp16, fp8_e5m2). fp8_e4m3 has no escapes (exponents 0..15): plain
/// Gaussian data.
Tensor escape_heavy(DType d, uint64_t n, double rate, std::mt19937_64& rng) {
  Tensor t = zt::gaussian(d, n, rng);
  if (max_exponent(d) < 17) return t;
  const int mant = int(zt::mant_bits(d)), top = max_exponent(d);
  const uint32_t exp_mask = uint32_t(top) << mant;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (uint64_t lo = 0; lo < n; lo += 256) {
    const uint64_t hi = std::min<uint64_t>(n, lo + 256);
    int a = 0;
    for (uint64_t i = lo; i < hi; ++i) a = std::max(a, exponent_of_bits(d, t.get(i)));
    if (a <= 16) {
      const int shift = 17 + int(rng() % uint64_t(top - 17)) - a;  // new maximum 17 .. top - 1
      for (uint64_t i = lo; i < hi; ++i) {
        const int e = exponent_of_bits(d, t.get(i));
        if (e) t.set(i, (t.get(i) & ~exp_mask) | uint32_t(e + shift) << mant);
      }
      a += shift;
    }
    for (uint64_t i = lo; i < hi; ++i)
      if (u(rng) < rate && exponent_of_bits(d, t.get(i)) != a)
        t.set(i, (t.get(i) & ~exp_mask) | uint32_t(1 + rng() % uint64_t(a - 16)) << mant);
  }
  return t;
}

}  // namespace

TEST_CASE("escape-heavy data round trips, and chunks go raw once escapes make them too large", "[roundtrip]") {
  ZT_RNG("escapes");
  for (DType d : zt::kDTypes) {
    if (d == DType::fp8_e4m3) continue;  // no escapes: exponents 0..15
    for (double rate : {0.005, 0.02, 0.1, 0.5, 1.0}) {
      INFO("dtype " << dtype_name(d) << " escape rate " << rate);
      const uint64_t n = 4 * 16384 + 1 + uint64_t(rng() % 3000);
      const Tensor t = escape_heavy(d, n, rate, rng);
      const auto s = zt::roundtrip(CodeId::pair, t, 14);
      const uint64_t raw = zt::raw_chunks(s);
      std::printf("escape-heavy: %s rate %.3f: ratio %.4f, %llu of 5 chunks raw\n", dtype_name(d), rate,
                  double(s.size()) / double(t.bytes.size()), static_cast<unsigned long long>(raw));
      const std::vector<bool> map = zt::raw_chunk_map(s);
      if (rate <= 0.005) CHECK(std::count(map.begin(), map.begin() + 4, true) == 0);  // full chunks coded
      if (rate >= 0.5) CHECK(raw == 5);
    }
  }
}

TEST_CASE("random sizes and data kinds round trip (partial tiles and chunks)", "[roundtrip]") {
  ZT_RNG("random sizes");
  std::printf("random sizes: seed %llu\n", static_cast<unsigned long long>(zipcomm_test_seed));
  for (int it = 0; it < 100; ++it) {
    const DType d = zt::kDTypes[it % std::size(zt::kDTypes)];
    const uint64_t n = rng() % 3 == 0 ? rng() % 700 : rng() % (4 * 16384 + 1);
    const int kind = int(rng() % 4);
    INFO("iteration " << it << " dtype " << dtype_name(d) << " n " << n << " kind " << kind);
    Tensor t = kind == 0 ? zt::gaussian(d, n, rng)
               : kind == 1 ? escape_heavy(d, n, 0.03, rng)
               : kind == 2 ? zt::random_bits(d, n, rng)
                           : zt::gaussian(d, n, rng);
    if (kind == 3)  // zero tiles and zeros in tiles
      for (uint64_t i = 0; i < n; ++i)
        if ((i / 256) % 3 == 0 || rng() % 5 == 0) t.set(i, 0);
    zt::roundtrip(CodeId::pair, t);
  }
}
