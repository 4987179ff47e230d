// Host tests of the fixed code (code 4): round trips over every pattern, dtype, size and chunk size; a coded chunk
// restated from the format's words and compared with the reference encoder's bytes; corrupt streams refused.
#include <algorithm>
#include <numeric>

#include "test_util.hpp"

using namespace zt;

namespace {


/// Every pattern of a 16- or 8-bit dtype (`copies` times), shuffled.
Tensor all_patterns(DType d, uint32_t copies, std::mt19937_64& rng) {
  const uint32_t patterns = 1u << (8 * format::elem_bytes(d));
  std::vector<uint32_t> v(uint64_t(patterns) * copies);
  for (uint64_t i = 0; i < v.size(); ++i) v[i] = uint32_t(i % patterns);
  std::shuffle(v.begin(), v.end(), rng);
  Tensor t(d, v.size());
  for (uint64_t i = 0; i < v.size(); ++i) t.set(i, v[i]);
  return t;
}

/// Chunk c's exponent section (from the chunk table).
std::vector<uint8_t> chunk_section(const std::vector<uint8_t>& s, uint64_t c) {
  format::Header h;
  REQUIRE(host::read_header(s.data(), s.size(), &h) == Status::ok);
  const format::Layout l = format::layout_of(h);
  uint64_t start = 0, end = 0;
  if (c) std::memcpy(&start, &s[l.table_offset + 8 * (c - 1)], 8);
  std::memcpy(&end, &s[l.table_offset + 8 * c], 8);
  return std::vector<uint8_t>(s.begin() + l.exp_offset + start, s.begin() + l.exp_offset + end);
}

}  // namespace

TEST_CASE("fixed code: every 16-bit and 8-bit pattern round trips, in each chunk size", "[fixed]") {
  auto rng = make_rng("fixed patterns");
  for (const DType d : {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2})
    for (const uint32_t chunk_log2 : kChunkLog2s)
      roundtrip(CodeId::fixed, all_patterns(d, format::elem_bytes(d) == 2 ? 1 : 64, rng), chunk_log2);
}

TEST_CASE("fixed code: Gaussian and random data of odd sizes round trip in every dtype and chunk size", "[fixed]") {
  auto rng = make_rng("fixed sizes");
  for (const DType d : kDTypes)
    for (const uint64_t n : {0ull, 1ull, 7ull, 255ull, 256ull, 257ull, 4095ull, 4097ull, 12345ull, 70001ull})
      for (const uint32_t chunk_log2 : kChunkLog2s) {
        roundtrip(CodeId::fixed, gaussian(d, n, rng), chunk_log2);
        if (n < 20000) roundtrip(CodeId::fixed, random_bits(d, n, rng), chunk_log2);
      }
}

TEST_CASE("fixed code: a coded chunk is its codes, anchors and exceptions as the format words them", "[fixed]") {
  auto rng = make_rng("fixed layout");
  for (const DType d : {DType::bf16, DType::fp16, DType::fp32}) {
    const uint64_t n = 3 * 16384 + 1000;
    const Tensor t = gaussian(d, n, rng);
    const std::vector<uint8_t> s = compress_ok(CodeId::fixed, t, format::LowWidths::minimal, 14);
    for (uint64_t c = 0; c < 4; ++c) {
      const uint32_t elems = uint32_t(std::min<uint64_t>(16384, n - 16384 * c)), tiles = (elems + 255) / 256;
      // Restated: item k = 256 t + 8 l + i; anchor = the tile's largest exponent; code min(a - e, 7) at bit
      // (i odd) 12 + 3 (i / 2) of lane l's 24 bits at byte 3 l of the tile's 96; exceptions per tile, lane by
      // lane, items 7, 5, 3, 1, 6, 4, 2, 0; then zeros to 16 bytes.
      std::vector<uint8_t> want(97 * tiles);
      std::vector<uint8_t> exceptions;
      for (uint32_t tile = 0; tile < tiles; ++tile) {
        uint32_t a = 0;
        for (uint32_t k = 256 * tile; k < std::min(elems, 256 * tile + 256); ++k)
          a = std::max(a, exponent_of(d, t.get(16384 * c + k)));
        want[96 * tiles + tile] = uint8_t(a);
        for (uint32_t l = 0; l < 32; ++l) {
          uint32_t field = 0;
          for (const uint32_t i : {7u, 5u, 3u, 1u, 6u, 4u, 2u, 0u}) {
            const uint32_t k = 256 * tile + 8 * l + i;
            if (k >= elems) continue;
            const uint32_t e = exponent_of(d, t.get(16384 * c + k)), dist = a - e;
            field |= std::min(dist, 7u) << ((i % 2) * 12 + (i / 2) * 3);
            if (dist >= 7) exceptions.push_back(uint8_t(e));
          }
          for (uint32_t j = 0; j < 3; ++j) want[96 * tile + 3 * l + j] = uint8_t(field >> 8 * j);
        }
      }
      want.insert(want.end(), exceptions.begin(), exceptions.end());
      want.resize((want.size() + 15) / 16 * 16, 0);
      INFO("dtype " << dtype_name(d) << " chunk " << c);
      REQUIRE(want.size() < format::raw_chunk_bytes(d, elems));
      REQUIRE(chunk_section(s, c) == want);
    }
  }
}

TEST_CASE("fixed code: chunks it cannot make smaller are stored raw", "[fixed]") {
  auto rng = make_rng("fixed raw");
  // Random bits: most exponents far below their tile's largest, so nearly every one is an exception.
  const Tensor t = random_bits(DType::bf16, 16384, rng);
  const std::vector<uint8_t> s = roundtrip(CodeId::fixed, t, 14);
  REQUIRE(chunk_section(s, 0).size() == format::raw_chunk_bytes(DType::bf16, 16384));
}

TEST_CASE("fixed code: a chunk with more exceptions than one item in eight is stored raw", "[fixed]") {
  auto rng = make_rng("fixed limit");
  // One element in five zero: each zero is an exception. Coded, the chunk would still be about 0.6 of raw.
  Tensor t = gaussian(DType::bf16, 16384, rng);
  for (uint64_t k = 0; k < t.n; k += 5) t.set(k, 0);
  const std::vector<uint8_t> s = roundtrip(CodeId::fixed, t, 14);
  REQUIRE(thread::FixedCode::chunk_bytes(64, 16384 / 5) < format::raw_chunk_bytes(DType::bf16, 16384));
  REQUIRE(chunk_section(s, 0).size() == format::raw_chunk_bytes(DType::bf16, 16384));
  // One in twenty (with the Gaussian's own 3%): within the limit, coded.
  Tensor u = gaussian(DType::bf16, 16384, rng);
  for (uint64_t k = 0; k < u.n; k += 20) u.set(k, 0);
  REQUIRE(chunk_section(roundtrip(CodeId::fixed, u, 14), 0).size() < format::raw_chunk_bytes(DType::bf16, 16384));
}

TEST_CASE("fixed code: every single-bit change of a stream is refused", "[fixed]") {
  auto rng = make_rng("fixed flips");
  for (const DType d : kDTypes) {
    const Tensor t = gaussian(d, 700, rng);
    const std::vector<uint8_t> s = compress_ok(CodeId::fixed, t, format::LowWidths::minimal, 12);
    uint64_t accepted = 0;
    for (uint64_t bit = 0; bit < 8 * s.size(); ++bit) {
      std::vector<uint8_t> bad = s;
      bad[bit / 8] ^= uint8_t(1u << (bit % 8));
      const Decoded r = decompress_guarded(bad.data(), bad.size(), t.bytes.size());
      REQUIRE(r.guards_ok);
      if (r.status == Status::ok) {
        ++accepted;
        REQUIRE(r.out == t.bytes);  // never wrong data with ok
      }
    }
    INFO("dtype " << dtype_name(d) << ", " << 8 * s.size() << " bits");
    CHECK(accepted == 0);
  }
}

TEST_CASE("fixed code: truncated streams and short buffers are refused", "[fixed]") {
  auto rng = make_rng("fixed truncated");
  const Tensor t = gaussian(DType::bf16, 5000, rng);
  const std::vector<uint8_t> s = compress_ok(CodeId::fixed, t);
  for (uint64_t len = 0; len < s.size(); len += 7) {
    const Decoded r = decompress_guarded(s.data(), len, t.bytes.size());
    REQUIRE(r.status != Status::ok);
    REQUIRE(r.guards_ok);
  }
  REQUIRE(decompress_guarded(s.data(), s.size(), t.bytes.size() - 1).status == Status::buffer_too_small);
}

TEST_CASE("fixed code: the same bytes on any number of threads", "[fixed][threads]") {
  auto rng = make_rng("fixed threads");
  const Tensor t = gaussian(DType::bf16, 40 * 4096 + 17, rng);
  const std::vector<uint8_t> one = compress_ok(CodeId::fixed, t, format::LowWidths::minimal, 12, 1);
  for (const unsigned threads : {2u, 3u, 0u}) {
    REQUIRE(compress_ok(CodeId::fixed, t, format::LowWidths::minimal, 12, threads) == one);
    const Decoded r = decompress_guarded(one.data(), one.size(), t.bytes.size(), 0, threads);
    REQUIRE(r.status == Status::ok);
    REQUIRE(r.out == t.bytes);
  }
}
