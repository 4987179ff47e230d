// Pointer alignment, size bounds, capacity and argument checks.
#include "test_util.hpp"

using namespace zipcomm;
using zt::Tensor;

TEST_CASE("unaligned input and output pointers give identical streams and identical output", "[bounds]") {
  ZT_RNG("unaligned");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << code_name(c));
      const uint64_t n = 16384 + 16385 % 4096 + rng() % 300;  // two chunks, ragged tail
      Tensor t = zt::gaussian(d, n, rng);
      for (uint64_t i = 0; i < n; i += 37) t.set(i, static_cast<uint32_t>(rng()));  // some escapes
      const std::vector<uint8_t> ref = zt::roundtrip(c, t);
      const uint64_t bound = format::max_compressed_bytes(d, n);
      const size_t ob = t.bytes.size();
      std::vector<uint8_t> src(ob + 32), dst(bound + 32), out(ob + 32), sin(ref.size() + 32);
      for (int off = 0; off < 16; ++off) {
        const int off2 = (off * 7 + 3) % 16;  // a different misalignment for the other buffer
        INFO("offsets " << off << ", " << off2);
        std::memcpy(src.data() + off, t.bytes.data(), ob);
        uint64_t bytes = 0;
        REQUIRE(host::compress(d, c, src.data() + off, n, dst.data() + off2, bound, &bytes) == Status::ok);
        REQUIRE(bytes == ref.size());
        REQUIRE(std::memcmp(dst.data() + off2, ref.data(), bytes) == 0);
        std::memcpy(sin.data() + off2, ref.data(), ref.size());
        REQUIRE(host::decompress(sin.data() + off2, ref.size(), out.data() + off, ob) == Status::ok);
        REQUIRE(std::memcmp(out.data() + off, t.bytes.data(), ob) == 0);
      }
    }
}

TEST_CASE("random bits stay within 1% plus a few hundred bytes of raw and within max_compressed_bytes",
          "[bounds]") {
  ZT_RNG("size_bounds");
  const uint64_t sizes[] = {1, 100, 256, 16384, 16385, 3 * 16384 + 77, 200000};
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes)
      for (uint64_t n : sizes)
        for (uint32_t log2 : zt::kChunkLog2s) {
          INFO("dtype " << dtype_name(d) << " code " << code_name(c) << " n " << n << " chunk_log2 " << log2);
          Tensor t = zt::random_bits(d, n, rng);
          const auto s = zt::compress_ok(c, t, format::LowWidths::minimal, log2);
          const double raw = double(t.bytes.size());
          CHECK(double(s.size()) <= raw * 1.01 + 300);
          CHECK(s.size() <= format::max_compressed_bytes(d, n, log2));
          CHECK(zt::raw_chunks(s) == format::layout_for(d, n, log2).num_chunks);
          // the bound itself is tight for random bits: every chunk raw and every tile at full width means the stream
          // is exactly the bound (a short last tile's few low bits can all be zero by chance)
          format::Header h;
          std::memcpy(&h, s.data(), sizeof h);
          const format::Layout l = format::layout_of(h);
          CHECK(s.size() + (l.low_max_bytes - l.low_bytes) == format::max_compressed_bytes(d, n, log2));
          if (n % format::TILE_ELEMS == 0 || n % format::TILE_ELEMS > 64) CHECK(l.low_bytes == l.low_max_bytes);
        }
}

TEST_CASE("compress with capacity below the bound returns buffer_too_small and writes nothing", "[bounds]") {
  ZT_RNG("capacity");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes)
      for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(300), uint64_t(16385)}) {
        INFO("dtype " << dtype_name(d) << " code " << code_name(c) << " n " << n);
        Tensor t = zt::gaussian(d, n, rng);
        const uint64_t bound = format::max_compressed_bytes(d, n);
        std::vector<uint8_t> dst(bound + 16, 0x5A);
        // even when the actual stream would fit, the encoder asks for the full bound (documented contract)
        for (uint64_t cap : {uint64_t(0), bound / 2, bound - 1}) {
          uint64_t out = 777;
          REQUIRE(host::compress(d, c, t.bytes.data(), n, dst.data(), cap, &out) == Status::buffer_too_small);
          REQUIRE(out == 777);
          for (uint8_t b : dst) REQUIRE(b == 0x5A);
        }
        uint64_t out = 0;
        REQUIRE(host::compress(d, c, t.bytes.data(), n, dst.data(), bound, &out) == Status::ok);
      }
}

TEST_CASE("decompress and compress reject small capacity and null pointers and bad arguments", "[bounds]") {
  ZT_RNG("args");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << code_name(c));
      const uint64_t n = 1000 + rng() % 1000;
      Tensor t = zt::gaussian(d, n, rng);
      const auto s = zt::compress_ok(c, t);
      const uint64_t ob = t.bytes.size();
      for (uint64_t cap : {uint64_t(0), uint64_t(1), ob / 2, ob - 1}) {
        auto r = zt::decompress_guarded(s.data(), s.size(), cap, 0xEE);
        REQUIRE(r.status == Status::buffer_too_small);
        REQUIRE(r.guards_ok);
        for (uint8_t b : r.out) REQUIRE(b == 0xEE);
      }
      std::vector<uint8_t> out(ob);
      CHECK(host::decompress(nullptr, s.size(), out.data(), ob) == Status::invalid_argument);
      CHECK(host::decompress(s.data(), s.size(), nullptr, ob) == Status::invalid_argument);
      uint64_t bytes = 0;
      std::vector<uint8_t> dst(format::max_compressed_bytes(d, n));
      CHECK(host::compress(d, c, nullptr, n, dst.data(), dst.size(), &bytes) == Status::invalid_argument);
      CHECK(host::compress(d, c, t.bytes.data(), n, nullptr, dst.size(), &bytes) == Status::invalid_argument);
      CHECK(host::compress(d, c, t.bytes.data(), n, dst.data(), dst.size(), nullptr) == Status::invalid_argument);
      CHECK(host::compress(static_cast<DType>(0), c, t.bytes.data(), n, dst.data(), dst.size(), &bytes) ==
            Status::invalid_argument);
      for (uint8_t bad_dtype : {6, 7, 255})
        CHECK(host::compress(static_cast<DType>(bad_dtype), c, t.bytes.data(), n, dst.data(), dst.size(), &bytes) ==
              Status::invalid_argument);
      for (uint8_t code : {0, 1, 2, 5, 255})  // 1 and 2 were the codes of format v1/v2; 3 pair, 4 fixed
        CHECK(host::compress(d, static_cast<CodeId>(code), t.bytes.data(), n, dst.data(), dst.size(), &bytes) ==
              Status::invalid_argument);
      for (uint32_t log2 : {1u, 11u, 15u, 16u, 64u})  // chunks of 4096, 8192 or 16384 elements only
        CHECK(host::compress(d, c, t.bytes.data(), n, dst.data(), dst.size(), &bytes, format::LowWidths::minimal,
                             log2) == Status::invalid_argument);
      // n == 0: a null source is fine, and the stream is a bare header
      REQUIRE(host::compress(d, c, nullptr, 0, dst.data(), dst.size(), &bytes) == Status::ok);
      REQUIRE(bytes == format::HEADER_BYTES);
      uint8_t one = 0;
      CHECK(host::decompress(dst.data(), bytes, &one, 0) == Status::ok);
    }
}
