// Low mantissa bits (docs/FORMAT.md section 6): each tile of fp16 and fp32 stores them at the narrowest width whose
// dropped bits are zero in all its elements (minimal), or always at full width (full); the low table and the
// width codes agree with an independent restatement; both round-trip bit-exactly.
#include "test_util.hpp"

using namespace zipcomm;

namespace {

/// Which low bits a tile's elements keep: all random, fp32's low byte zero, all low bits zero.
enum class Kind { full, high_byte, none };

/// Gaussian data whose tiles each get a random Kind (fp16 has no high_byte: it becomes full).
zt::Tensor tiles_of_kinds(DType d, uint64_t n, std::mt19937_64& rng, std::vector<Kind>& kinds) {
  zt::Tensor t = zt::gaussian(d, n, rng);
  kinds.assign(format::div_up(n, format::TILE_ELEMS), Kind::full);
  for (uint64_t tile = 0; tile < kinds.size(); ++tile) {
    Kind k = Kind(rng() % 3);
    if (d == DType::fp16 && k == Kind::high_byte) k = Kind::full;
    kinds[tile] = k;
    const uint32_t keep = d == DType::fp32 ? (k == Kind::none ? 0xFFFF0000u : k == Kind::high_byte ? 0xFFFFFF00u : ~0u)
                                           : (k == Kind::none ? 0xFFF8u : 0xFFFFu);
    for (uint64_t i = tile * format::TILE_ELEMS; i < n && i < (tile + 1) * format::TILE_ELEMS; ++i) {
      uint32_t b = t.get(i) & keep;
      // a full tile keeps at least one element with its lowest stored bit set, so minimal cannot drop it
      if (i == tile * format::TILE_ELEMS && k == Kind::full) b |= 1u;
      if (i == tile * format::TILE_ELEMS && k == Kind::high_byte) b |= 0x100u;
      t.set(i, b);
    }
  }
  return t;
}

/// The width code minimal must choose for a tile of kind k, restated from docs/FORMAT.md section 6.
uint32_t expected_code(DType d, Kind k) {
  if (d == DType::fp32) return k == Kind::none ? 2 : k == Kind::high_byte ? 1 : 0;
  return k == Kind::none ? 1 : 0;
}

/// Bytes of a tile's low part, restated: fp32 2/1/0 bytes per element padded to 16, fp16 3 planes of 32 bytes.
uint64_t expected_tile_bytes(DType d, uint32_t code, uint64_t valid) {
  if (d == DType::fp32) return (valid * (2 - code) + 15) / 16 * 16;
  return code == 0 ? 96 : 0;
}

}  // namespace

TEST_CASE("low widths: codes, low table and low section follow the tiles' zero low bits", "[format][low]") {
  ZT_RNG("low widths");
  for (DType d : {DType::fp16, DType::fp32})
    for (int it = 0; it < 40; ++it) {
      const uint64_t n = it < 4 ? uint64_t(1 + it * 100) : 1 + rng() % (3 * format::MAX_CHUNK_ELEMS);
      const uint32_t log2 = format::MIN_CHUNK_LOG2 + uint32_t(it % 3);
      std::vector<Kind> kinds;
      const zt::Tensor t = tiles_of_kinds(d, n, rng, kinds);
      for (format::LowWidths w : {format::LowWidths::minimal, format::LowWidths::full}) {
        INFO("dtype " << dtype_name(d) << " n " << n << " chunk_log2 " << log2
                      << (w == format::LowWidths::full ? " full" : " minimal"));
        std::vector<uint8_t> s(format::max_compressed_bytes(d, n, log2));
        uint64_t bytes = 0;
        REQUIRE(host::compress(d, CodeId::pair, t.bytes.data(), n, s.data(), s.size(), &bytes, w, log2) ==
                Status::ok);
        s.resize(bytes);
        format::Header h;
        std::memcpy(&h, s.data(), sizeof h);
        REQUIRE(format::validate_header(h, bytes) == Status::ok);
        const format::Layout l = format::layout_of(h);
        uint64_t low_end = 0;
        for (uint64_t c = 0; c < l.num_chunks; ++c) {
          const uint64_t chunk_tiles = (uint64_t(1) << log2) / 256;
          for (uint64_t tile = c * chunk_tiles; tile < l.num_tiles && tile < (c + 1) * chunk_tiles; ++tile) {
            const uint32_t code = (s[l.widths_offset + tile / 4] >> (2 * (tile % 4))) & 3u;
            const uint32_t want = w == format::LowWidths::full ? 0 : expected_code(d, kinds[tile]);
            if (code != want) FAIL("tile " << tile << " code " << code << " want " << want);
            const uint64_t valid = std::min<uint64_t>(256, n - tile * 256);
            low_end += expected_tile_bytes(d, code, valid);
          }
          uint64_t stored;
          std::memcpy(&stored, &s[l.low_table_offset + 8 * c], 8);
          REQUIRE(stored == low_end);
        }
        REQUIRE(l.low_bytes == low_end);
        if (w == format::LowWidths::full) REQUIRE(l.low_bytes == l.low_max_bytes);
        // fp32 code 0 tiles hold the low halves in element order
        if (d == DType::fp32 && w == format::LowWidths::full) {
          for (uint64_t i = 0; i < n; i += 1 + rng() % 97) {
            const uint64_t at = l.low_offset + (i / 256) * 512 + 2 * (i % 256);
            REQUIRE((uint32_t(s[at]) | uint32_t(s[at + 1]) << 8) == (t.get(i) & 0xFFFFu));
          }
        }
        auto r = zt::decompress_guarded(s.data(), s.size(), t.bytes.size());
        REQUIRE(r.guards_ok);
        REQUIRE(r.status == Status::ok);
        REQUIRE(r.out == t.bytes);
      }
    }
}

TEST_CASE("low widths: bf16 widened to fp32 and converted to fp16 drop every low bit", "[format][low]") {
  ZT_RNG("low widened");
  const uint64_t n = 5 * format::MAX_CHUNK_ELEMS + 1234;
  const zt::Tensor b = zt::gaussian(DType::bf16, n, rng);
  zt::Tensor f32(DType::fp32, n), f16(DType::fp16, n);
  for (uint64_t i = 0; i < n; ++i) {
    f32.set(i, b.get(i) << 16);
    f16.set(i, zt::f32_to_f16(zt::bits_f32(b.get(i) << 16) * 1024.0f) & 0xFFF8u);  // as bf16 gradients scaled
  }
  const auto sb = zt::roundtrip(CodeId::pair, b);
  const auto s32 = zt::roundtrip(CodeId::pair, f32);
  // the same exponents and plane 0 as the bf16 stream; the rest is the width codes and the low table
  const uint32_t log2 = format::default_chunk_log2(n);
  const format::Layout l32 = format::layout_for(DType::fp32, n, log2, 0), lb = format::layout_for(DType::bf16, n, log2);
  REQUIRE(s32.size() == sb.size() + (l32.low_offset - lb.low_offset));
  const auto s16 = zt::roundtrip(CodeId::pair, f16);
  format::Header h;
  std::memcpy(&h, s16.data(), sizeof h);
  REQUIRE(h.exp_offset == h.low_offset);
}

TEST_CASE("low widths: every fp16 pattern with its low bits zero round-trips at code 1", "[format][low]") {
  for (uint32_t tiles : {1u, 3u}) {
    zt::Tensor t(DType::fp16, 8192 * tiles);
    for (uint64_t i = 0; i < t.n; ++i) t.set(i, uint32_t(i % 8192) << 3);
    const auto s = zt::roundtrip(CodeId::pair, t);
    format::Header h;
    std::memcpy(&h, s.data(), sizeof h);
    REQUIRE(h.exp_offset == h.low_offset);
  }
}
