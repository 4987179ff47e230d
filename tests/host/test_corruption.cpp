// Corrupt input never crashes and never writes outside the destination: truncation at every length, bit and
// byte corruption in each section, with guard bytes around the destination. Also measures how much exponent-
// section corruption the decoder detects (the stream has no payload checksum: planes are raw, and only the
// structure of the exponent section can be checked).
//
// Measured detection of exponent-section corruption (seeded runs on this machine; see the printed summary):
//   single-bit flips (exhaustive over a 2048-element coded stream): detected 21-30% per dtype/code, 26% overall
//     (bf16 gauss 29.9%, bf16 win3 25.7%, fp16 gauss 22.1%, fp16 win3 20.9%, fp32 gauss 30.4%, fp32 win3 28.1%);
//     3.5-8.7% were benign (don't-care bits: word padding past a lane's last codeword), the rest decode
//     silently to a different tensor (a flipped codeword bit is usually another valid codeword).
//   one random byte in a 16384-element coded chunk: detected ~45-66% (window3 lower than gaussian).
// Detection comes from the structure only: tile anchor/fraction re-check, codeword/escape validity, word count
// vs chunk length, zero padding. Callers needing integrity must add a checksum on top.
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
  const format::Layout l = format::layout_for(static_cast<DType>(h.dtype), h.num_elements);
  std::vector<Section> v = {{"header", 0, format::HEADER_BYTES}, {"plane0", l.plane0_offset, l.plane0_offset + l.n}};
  if (l.plane1_bytes) v.push_back({"plane1", l.plane1_offset, l.plane1_offset + l.plane1_bytes});
  v.push_back({"table", l.table_offset, l.table_offset + 8 * l.num_chunks});
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
    REQUIRE((a.status == Status::corrupt_stream || a.status == Status::bad_header));
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
  return t;
}

}  // namespace

TEST_CASE("truncated streams are rejected at every length for small streams and random lengths for large ones", "[corrupt]") {
  ZT_RNG("truncate");
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << zt::code_name(c));
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
      const format::Layout l = format::layout_for(d, t.n);
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
      INFO("dtype " << dtype_name(d) << " code " << zt::code_name(c));
      // 2 coded chunks and a raw one
      Tensor t = mixed_tensor(d, 2 * 16384 + 3000, rng);
      for (uint64_t i = 16384; i < 2 * 16384; ++i) t.set(i, static_cast<uint32_t>(rng()));
      const auto s = zt::compress_ok(c, t);
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
        if (std::string(sec.name) == "header") CHECK(tally.detected == tally.total());  // fully checked
        if (std::string(sec.name) == "table") CHECK(tally.silent == 0);
      }
    }
}

TEST_CASE("detection rate of exponent-section corruption", "[corrupt]") {
  ZT_RNG("detection");
  Tally all_bits, all_bytes;
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes) {
      INFO("dtype " << dtype_name(d) << " code " << zt::code_name(c));
      // exhaustive single-bit flips over the exponent section of one small coded chunk
      const Tensor t = mixed_tensor(d, 2048, rng);
      const auto s = zt::compress_ok(c, t);
      REQUIRE(zt::raw_chunks(s) == 0);
      const uint64_t lo = format::layout_for(d, t.n).exp_offset;
      Tally bits;
      for (uint64_t bit = lo * 8; bit < s.size() * 8; ++bit) {
        std::vector<uint8_t> bad = s;
        bad[bit / 8] ^= uint8_t(1u << (bit % 8));
        bits.add(decode_corrupt(bad, t));
      }
      // random byte values at random positions in a full-size chunk
      const Tensor big = mixed_tensor(d, 16384, rng);
      const auto sb = zt::compress_ok(c, big);
      REQUIRE(zt::raw_chunks(sb) == 0);
      const uint64_t blo = format::layout_for(d, big.n).exp_offset;
      Tally bytes;
      for (int trial = 0; trial < 150; ++trial) {
        std::vector<uint8_t> bad = sb;
        const uint64_t pos = blo + rng() % (sb.size() - blo);
        bad[pos] = static_cast<uint8_t>(bad[pos] ^ (1 + rng() % 255));  // a real change
        bytes.add(decode_corrupt(bad, big));
      }
      std::printf("exp-section corruption %s/%-8s: single-bit flips %llu: detected %.1f%%, benign %.1f%%, "
                  "silent %.1f%% (detected among harmful %.1f%%); random bytes %llu: detected %.1f%%, silent %.1f%%\n",
                  dtype_name(d), zt::code_name(c), static_cast<unsigned long long>(bits.total()),
                  100 * bits.rate(), 100.0 * bits.benign / bits.total(), 100.0 * bits.silent / bits.total(),
                  100 * bits.harmful_rate(), static_cast<unsigned long long>(bytes.total()), 100 * bytes.rate(),
                  100.0 * bytes.silent / bytes.total());
      all_bits.detected += bits.detected, all_bits.benign += bits.benign, all_bits.silent += bits.silent;
      all_bytes.detected += bytes.detected, all_bytes.benign += bytes.benign, all_bytes.silent += bytes.silent;
      // measured 21-30% per dtype/code for single-bit flips, 45-66% for random bytes; loose floors
      CHECK(bits.rate() >= 0.12);
      CHECK(bytes.rate() >= 0.25);
    }
  std::printf("exp-section corruption overall: single-bit %.1f%% detected (%.1f%% of harmful), random bytes %.1f%%\n",
              100 * all_bits.rate(), 100 * all_bits.harmful_rate(), 100 * all_bytes.rate());
}
