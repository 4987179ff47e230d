// The per-chunk check of the wire format (thread::ChunkCheck): what it always catches, and that it is the
// value the encoder stores.
#include "test_util.hpp"

#include <zipcomm/thread/chunk_check.hpp>

#include <algorithm>

using namespace zipcomm;

namespace {

std::vector<uint32_t> random_elements(DType d, uint32_t n, std::mt19937_64& rng) {
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = uint32_t(rng()) & zt::elem_mask(d);
  return v;
}

}  // namespace

TEST_CASE("chunk check: a round is a bijection of the word and of the running value", "[check]") {
  ZT_RNG("check round");
  // Exhaustive over the 16-bit words (low or high half) for random running values: the round is injective in
  // the word. Then random pairs of running values: injective in those too, and so is the final mix.
  for (int trial = 0; trial < 8; ++trial) {
    const uint32_t acc = uint32_t(rng()), shift = trial % 2 ? 16 : 0;  // low or high half of the word
    std::vector<uint32_t> out(1u << 16);
    for (uint32_t w = 0; w < (1u << 16); ++w) out[w] = thread::ChunkCheck::round(acc, w << shift);
    std::sort(out.begin(), out.end());
    REQUIRE(std::adjacent_find(out.begin(), out.end()) == out.end());
  }
  for (int trial = 0; trial < 100000; ++trial) {
    const uint32_t a = uint32_t(rng()), b = uint32_t(rng()), w = uint32_t(rng());
    if (a != b) REQUIRE(thread::ChunkCheck::round(a, w) != thread::ChunkCheck::round(b, w));
    if (a != b) REQUIRE(thread::ChunkCheck::lane_final(a) != thread::ChunkCheck::lane_final(b));
  }
}

TEST_CASE("chunk check: every change confined to one lane's elements changes it", "[check]") {
  ZT_RNG("check lane");
  for (DType d : zt::kDTypes) {
    INFO("dtype " << dtype_name(d));
    const uint32_t mask = zt::elem_mask(d);
    for (int trial = 0; trial < 3000; ++trial) {
      const uint32_t n = 1 + uint32_t(rng() % format::MAX_CHUNK_ELEMS);
      const auto orig = random_elements(d, n, rng);
      auto v = orig;
      // 1..4 changes among the elements of one lane (lane l owns elements 256 t + 8 l .. + 7 of tile t)
      const uint32_t lane = (uint32_t(rng() % n) % format::TILE_ELEMS) / format::ITEMS_PER_LANE;
      const int changes = 1 + int(rng() % 4);
      for (int c = 0; c < changes; ++c) {
        const uint32_t at = uint32_t(rng() % format::chunk_tiles(n)) * format::TILE_ELEMS +
                            lane * format::ITEMS_PER_LANE + uint32_t(rng() % format::ITEMS_PER_LANE);
        if (at < n) v[at] ^= (c % 2 ? 1u << (rng() % 16) : uint32_t(rng())) & mask;
      }
      if (v == orig) continue;
      REQUIRE(thread::chunk_check(d, v.data(), n) != thread::chunk_check(d, orig.data(), n));
    }
  }
}

TEST_CASE("chunk check: swapped or shifted elements change it, and random changes across lanes are caught", "[check]") {
  ZT_RNG("check spread");
  for (DType d : zt::kDTypes) {
    INFO("dtype " << dtype_name(d));
    uint64_t caught = 0, tried = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      const uint32_t n = 2 + uint32_t(rng() % (format::MAX_CHUNK_ELEMS - 1));
      const auto orig = random_elements(d, n, rng);
      auto v = orig;
      const uint32_t i = uint32_t(rng() % n), j = uint32_t(rng() % n);
      std::swap(v[i], v[j]);
      if (v != orig) REQUIRE(thread::chunk_check(d, v.data(), n) != thread::chunk_check(d, orig.data(), n));
      // a shift by one element (a misplaced copy)
      std::vector<uint32_t> s(orig.begin() + 1, orig.end());
      s.push_back(orig[0]);
      if (s != orig) REQUIRE(thread::chunk_check(d, s.data(), n) != thread::chunk_check(d, orig.data(), n));
      // many elements changed anywhere: missed with probability ~2^-32
      auto m = orig;
      for (int c = 0; c < 64; ++c) m[rng() % n] = uint32_t(rng()) & zt::elem_mask(d);
      if (m == orig) continue;
      ++tried;
      caught += thread::chunk_check(d, m.data(), n) != thread::chunk_check(d, orig.data(), n);
    }
    REQUIRE(caught == tried);
  }
}

TEST_CASE("chunk check: the encoder stores each chunk's check of its elements", "[check]") {
  ZT_RNG("check stored");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes)
      for (uint32_t log2 : zt::kChunkLog2s) {
        INFO("dtype " << dtype_name(d) << " code " << code_name(c) << " chunk_log2 " << log2);
        const uint64_t n = 2 * format::MAX_CHUNK_ELEMS + 1 + rng() % 5000;
        const zt::Tensor t = zt::gaussian(d, n, rng);
        const auto s = zt::compress_ok(c, t, format::LowWidths::minimal, log2);
        const format::Layout l = format::layout_for(d, n, log2);
        for (uint64_t ch = 0; ch < l.num_chunks; ++ch) {
          const uint32_t elems = l.chunk_elems(ch);
          std::vector<uint32_t> bits(elems);
          for (uint32_t k = 0; k < elems; ++k) bits[k] = t.get((ch << log2) + k);
          uint32_t stored;
          std::memcpy(&stored, s.data() + l.check_offset + 4 * ch, 4);
          REQUIRE(stored == thread::chunk_check(d, bits.data(), elems));
        }
      }
}

TEST_CASE("chunk check: fp8 elements are folded four to a word, the first in the low byte", "[check][fp8]") {
  ZT_RNG("check fp8");
  for (DType d : zt::kFp8DTypes)
    for (uint32_t n : {1u, 3u, 4u, 5u, 8u, 255u, 256u, 300u, 16384u, 1u + uint32_t(rng() % 16384)}) {
      INFO("dtype " << dtype_name(d) << " n " << n);
      const auto v = random_elements(d, n, rng);
      // Restated: lane l folds its items of each tile in order, four to a word (missing ones zero).
      uint32_t want = 0;
      for (uint32_t lane = 0; lane < 32; ++lane) {
        uint32_t acc = thread::ChunkCheck::lane_seed(lane);
        for (uint32_t t = 0; t * 256 < n; ++t)
          for (uint32_t q = 0; q < 2; ++q) {
            const uint32_t first = t * 256 + lane * 8 + 4 * q;
            if (first >= n) continue;
            uint32_t word = 0;
            for (uint32_t k = 0; k < 4; ++k)
              if (first + k < n) word |= v[first + k] << (8 * k);
            acc = thread::ChunkCheck::round(acc, word);
          }
        want += thread::ChunkCheck::lane_final(acc);
      }
      REQUIRE(thread::chunk_check(d, v.data(), n) == want);
    }
}
