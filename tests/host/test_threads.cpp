// The host codec on several threads: the same bytes and the same status as on one, for every dtype, both width
// policies and every chunk size; corrupt streams give the one-thread status and write nothing outside the
// destination.
#include "test_util.hpp"

using namespace zipcomm;
using zt::Tensor;

namespace {

/// Thread counts to compare with one: a part per thread up to more threads than parts, and 0 (all of them).
constexpr unsigned kThreads[] = {2, 3, 7, 64, 0};

}  // namespace

TEST_CASE("host codec: any thread count writes the one-thread bytes and reads them back", "[threads]") {
  ZT_RNG("threads-roundtrip");
  for (DType d : zt::kDTypes) {
    for (uint32_t chunk_log2 : zt::kChunkLog2s) {
      // Enough chunks for every thread count to split them, and a short last chunk.
      const uint64_t chunks = 8 * 9 + rng() % 24;
      const uint64_t n = (chunks << chunk_log2) + 1 + rng() % ((1u << chunk_log2) - 1);
      const Tensor t = rng() % 2 ? zt::gaussian(d, n, rng) : zt::random_bits(d, n, rng);
      for (format::LowWidths widths : {format::LowWidths::minimal, format::LowWidths::full}) {
        INFO(dtype_name(d) << " chunk_log2 " << chunk_log2 << " n " << n << " widths " << int(widths));
        const std::vector<uint8_t> one = zt::compress_ok(CodeId::pair, t, widths, chunk_log2);
        for (unsigned threads : kThreads) {
          INFO("threads " << threads);
          REQUIRE(zt::compress_ok(CodeId::pair, t, widths, chunk_log2, threads) == one);
          const zt::Decoded back = zt::decompress_guarded(one.data(), one.size(), t.bytes.size(), 0x5A, threads);
          REQUIRE(back.guards_ok);
          REQUIRE(back.status == Status::ok);
          REQUIRE(back.out == t.bytes);
        }
      }
    }
  }
}

TEST_CASE("host codec: few chunks or none on many threads", "[threads]") {
  ZT_RNG("threads-small");
  for (DType d : zt::kDTypes) {
    for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(4097), uint64_t(9 * 4096 - 3)}) {
      INFO(dtype_name(d) << " n " << n);
      const Tensor t = zt::gaussian(d, n, rng);
      const std::vector<uint8_t> one = zt::compress_ok(CodeId::pair, t, format::LowWidths::minimal, 12);
      for (unsigned threads : kThreads) {
        REQUIRE(zt::compress_ok(CodeId::pair, t, format::LowWidths::minimal, 12, threads) == one);
        const zt::Decoded back = zt::decompress_guarded(one.data(), one.size(), t.bytes.size(), 0, threads);
        REQUIRE(back.status == Status::ok);
        REQUIRE(back.out == t.bytes);
      }
    }
  }
}

TEST_CASE("host codec: a corrupt stream gives the one-thread status on any thread count", "[threads]") {
  ZT_RNG("threads-corrupt");
  for (DType d : zt::kDTypes) {
    const uint64_t n = (uint64_t(40) << 12) + 777;
    const Tensor t = zt::gaussian(d, n, rng);
    const std::vector<uint8_t> good = zt::compress_ok(CodeId::pair, t, format::LowWidths::minimal, 12);
    uint64_t detected = 0;
    const int trials = 100;
    for (int trial = 0; trial < trials; ++trial) {
      std::vector<uint8_t> bad = good;
      // One to three damaged bytes past the header, so that several chunks may fail at once.
      const int hits = 1 + int(rng() % 3);
      for (int k = 0; k < hits; ++k) {
        const uint64_t at = format::HEADER_BYTES + rng() % (bad.size() - format::HEADER_BYTES);
        bad[at] ^= uint8_t(1 + rng() % 255);
      }
      INFO(dtype_name(d) << " trial " << trial);
      const zt::Decoded ref = zt::decompress_guarded(bad.data(), bad.size(), t.bytes.size());
      detected += ref.status != Status::ok;
      for (unsigned threads : kThreads) {
        INFO("threads " << threads);
        const zt::Decoded guarded = zt::decompress_guarded(bad.data(), bad.size(), t.bytes.size(), 0, threads);
        REQUIRE(guarded.guards_ok);
        REQUIRE(guarded.status == ref.status);
        if (ref.status == Status::ok) REQUIRE(guarded.out == ref.out);
      }
    }
    INFO(dtype_name(d));
    CHECK(detected == uint64_t(trials));  // changed bytes escape the checks with probability 2^-32
  }
}
