// Corrupt input never crashes and never writes outside the destination: truncation at every length, bit and
// byte corruption in each section, with guard bytes around the destination. And nothing changes unnoticed:
// every single-bit flip anywhere in a stream (header, planes, gaps, chunk table, checks, chunks) gives an
// error status. The structure checks catch what decodes to the same elements (padding, unread bits); the
// chunk checks catch what decodes to other elements (always when one lane's elements change, else with
// probability 1 - 2^-32, thread/chunk_check.hpp).
#include "test_util.hpp"

#include <algorithm>

using namespace zipcomm;
using zt::Tensor;

namespace {

struct Section {
  const char* name;
  uint64_t lo, hi;  // byte range [lo, hi) of the stream
};

std::vector<Section> sections_of(const std::vector<uint8_t>& s) {
  format::Header h;
  std::memcpy(&h, s.data(), sizeof h);
  const format::Layout l = format::layout_of(h);
  std::vector<Section> v = {{"header", 0, format::HEADER_BYTES},
                            {"plane0", l.plane0_offset, l.plane0_offset + l.plane0_bytes}};
  if (l.widths_bytes) v.push_back({"widths", l.widths_offset, l.widths_offset + l.widths_bytes});
  v.push_back({"table", l.table_offset, l.table_offset + 8 * l.num_chunks});
  if (l.widths_bytes) v.push_back({"low table", l.low_table_offset, l.low_table_offset + 8 * l.num_chunks});
  v.push_back({"checks", l.check_offset, l.check_offset + 4 * l.num_chunks});
  if (l.low_bytes) v.push_back({"low", l.low_offset, l.low_offset + l.low_bytes});
  v.push_back({"exponents", l.exp_offset, s.size()});
  return v;
}

/// Outcome of decoding one corrupted stream.
enum class Outcome { detected, benign, silent };  // non-ok / ok and output unchanged / ok and output changed

/// Decodes `bad` twice into guarded destinations pre-filled differently. Requires: guards intact, same status
/// both times, and on ok the same output both times (i.e. every destination byte was written).
Outcome decode_corrupt(const std::vector<uint8_t>& bad, const Tensor& orig) {
  auto a = zt::decompress_guarded(bad.data(), bad.size(), orig.bytes.size(), 0x00);
  REQUIRE(a.guards_ok);
  if (a.status != Status::ok) {
    REQUIRE((a.status == Status::corrupt_stream || a.status == Status::bad_header ||
             a.status == Status::checksum_mismatch || a.status == Status::unsupported_version));
    return Outcome::detected;
  }
  auto b = zt::decompress_guarded(bad.data(), bad.size(), orig.bytes.size(), 0xFF);
  REQUIRE(b.guards_ok);
  REQUIRE(b.status == Status::ok);
  REQUIRE(a.out == b.out);  // fully written
  return a.out == orig.bytes ? Outcome::benign : Outcome::silent;
}

struct Tally {
  uint64_t detected = 0, benign = 0, silent = 0;
  void add(Outcome o) { (o == Outcome::detected ? detected : o == Outcome::benign ? benign : silent)++; }
  uint64_t total() const { return detected + benign + silent; }
  double rate() const { return total() ? double(detected) / double(total()) : 1.0; }
  double harmful_rate() const { return detected + silent ? double(detected) / double(detected + silent) : 1.0; }
};

Tensor mixed_tensor(DType d, uint64_t n, std::mt19937_64& rng) {
  Tensor t = zt::gaussian(d, n, rng);
  // a few escapes and zeros, so every symbol kind appears
  for (uint64_t i = 0; i < n; i += 1 + rng() % 64) t.set(i, rng() % 2 ? 0u : t.get(i) >> 3);
  // fp16, fp32: tiles whose low bits are zero (stored at width code 1 or 2) among full ones
  const uint32_t drop[3] = {~0u, d == DType::fp32 ? 0xFFFFFF00u : 0xFFF8u, d == DType::fp32 ? 0xFFFF0000u : 0xFFF8u};
  for (uint64_t tile = 0; format::has_low(d) && tile * format::TILE_ELEMS < n; ++tile) {
    const uint32_t keep = drop[rng() % 3];
    for (uint64_t i = tile * format::TILE_ELEMS; i < n && i < (tile + 1) * format::TILE_ELEMS; ++i) t.set(i, t.get(i) & keep);
  }
  return t;
}

}  // namespace

TEST_CASE("truncated streams are rejected at every length for small streams and random lengths for large ones", "[corrupt]") {
  ZT_RNG("truncate");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << code_name(c));
      for (int kind = 0; kind < 2; ++kind) {
        const Tensor t = kind == 0 ? mixed_tensor(d, 300, rng) : zt::random_bits(d, 300, rng);
        const auto s = zt::compress_ok(c, t);
        for (uint64_t len = 0; len < s.size(); ++len) {
          INFO("length " << len << " of " << s.size());
          auto r = zt::decompress_guarded(s.data(), len, t.bytes.size());
          REQUIRE(r.status != Status::ok);
          REQUIRE(r.guards_ok);
        }
      }
      const Tensor t = mixed_tensor(d, 3 * 16384 + 77, rng);
      const auto s = zt::compress_ok(c, t);
      format::Header h;
      std::memcpy(&h, s.data(), sizeof h);
      const format::Layout l = format::layout_of(h);
      std::vector<uint64_t> lens = {0, 63, 64, l.exp_offset - 1, l.exp_offset, s.size() - 1, s.size() - 16};
      for (int i = 0; i < 40; ++i) lens.push_back(rng() % s.size());
      for (uint64_t len : lens) {
        INFO("length " << len << " of " << s.size());
        auto r = zt::decompress_guarded(s.data(), len, t.bytes.size());
        REQUIRE(r.status != Status::ok);
        REQUIRE(r.guards_ok);
      }
    }
}

TEST_CASE("random bit/byte corruption in every section never crashes or writes outside and ok means fully written",
          "[corrupt]") {
  ZT_RNG("sections");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << code_name(c));
      // 2 coded chunks and a raw one
      Tensor t = mixed_tensor(d, 2 * 16384 + 3000, rng);
      for (uint64_t i = 16384; i < 2 * 16384; ++i) t.set(i, static_cast<uint32_t>(rng()));
      const auto s = zt::compress_ok(c, t, format::LowWidths::minimal, 14);
      REQUIRE(zt::raw_chunks(s) == 1);
      for (const Section& sec : sections_of(s)) {
        INFO("section " << sec.name << " [" << sec.lo << ", " << sec.hi << ")");
        if (sec.hi <= sec.lo) continue;
        Tally tally;
        for (int trial = 0; trial < 60; ++trial) {
          std::vector<uint8_t> bad = s;
          const int nmods = 1 + int(rng() % 3);
          for (int m = 0; m < nmods; ++m) {
            const uint64_t pos = sec.lo + rng() % (sec.hi - sec.lo);
            if (trial % 2) bad[pos] ^= uint8_t(1u << (rng() % 8));  // bit flip
            else bad[pos] ^= static_cast<uint8_t>(1 + rng() % 255);  // random different byte
          }
          if (bad == s) continue;  // modifications cancelled out
          tally.add(decode_corrupt(bad, t));
        }
        CHECK(tally.detected == tally.total());
      }
    }
}

TEST_CASE("every single-bit flip anywhere in a stream gives an error status", "[corrupt]") {
  ZT_RNG("every flip");
  Tally all;
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << code_name(c));
      // Exhaustive over small streams: a coded chunk ending in a short tile, and a raw one.
      const Tensor coded = mixed_tensor(d, 2048 + 1 + rng() % 255, rng);
      const Tensor raw = zt::random_bits(d, 300 + rng() % 500, rng);
      // At full width (the fused steps' streams), a last tile of at most 8 elements whose low bits are zero:
      // its 16-bit and 8-bit widths take the same 16 zero bytes, so only the format's rule on the 8-bit width
      // catches a flip of its code.
      Tensor short_tail = mixed_tensor(d, 2048 + 1 + rng() % 8, rng);
      if (format::has_low(d))
        for (uint64_t i = 2048; i < short_tail.n; ++i)
          short_tail.set(i, short_tail.get(i) & (d == DType::fp32 ? 0xFFFF0000u : 0xFFF8u));
      for (const Tensor* t : {&coded, &raw, static_cast<const Tensor*>(&short_tail)}) {
        const auto s = zt::compress_ok(c, *t, t == &short_tail ? format::LowWidths::full : format::LowWidths::minimal);
        REQUIRE(zt::raw_chunks(s) == (t == &raw ? 1u : 0u));
        Tally tally;
        for (uint64_t bit = 0; bit < s.size() * 8; ++bit) {
          std::vector<uint8_t> bad = s;
          bad[bit / 8] ^= uint8_t(1u << (bit % 8));
          const Outcome o = decode_corrupt(bad, *t);
          INFO("flipped bit " << bit % 8 << " of byte " << bit / 8 << " of " << s.size());
          REQUIRE(o == Outcome::detected);
          tally.add(o);
        }
        all.detected += tally.detected, all.benign += tally.benign, all.silent += tally.silent;
      }
      // A sample over a stream of several full chunks.
      const Tensor big = mixed_tensor(d, 2 * format::MAX_CHUNK_ELEMS + 1000, rng);
      const auto sb = zt::compress_ok(c, big);
      for (int trial = 0; trial < 400; ++trial) {
        std::vector<uint8_t> bad = sb;
        const uint64_t bit = rng() % (sb.size() * 8);
        bad[bit / 8] ^= uint8_t(1u << (bit % 8));
        INFO("flipped bit " << bit % 8 << " of byte " << bit / 8 << " of " << sb.size());
        REQUIRE(decode_corrupt(bad, big) == Outcome::detected);
        all.detected++;
      }
    }
  std::printf("single-bit flips: %llu tried, %llu detected\n", static_cast<unsigned long long>(all.total()),
              static_cast<unsigned long long>(all.detected));
}
