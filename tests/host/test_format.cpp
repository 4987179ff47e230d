// Wire format v6: layout arithmetic, chunk layout helpers, header make/validate, header integrity, older
// versions refused.
#include "test_util.hpp"

#include <iterator>

using namespace zipcomm;
using format::Header;
using format::Layout;

namespace {

uint64_t au16(uint64_t x) { return (x + 15) / 16 * 16; }

/// Independent restatement of the layout, used as the expected value.
void check_layout(DType d, uint64_t n, uint32_t log2) {
  INFO("dtype " << dtype_name(d) << " n " << n << " chunk_log2 " << log2);
  const Layout l = format::layout_for(d, n, log2);
  const uint64_t size = uint64_t(1) << log2;
  const uint64_t chunks = (n + size - 1) / size, tiles = (n + 255) / 256;
  REQUIRE(l.n == n);
  REQUIRE(l.chunk_log2 == log2);
  REQUIRE(l.num_chunks == chunks);
  REQUIRE(l.num_tiles == tiles);
  REQUIRE(l.plane0_offset == 64);
  // fp8: 1 + mantissa bits bit-planes of 32 bytes per tile; the others a byte per element
  const uint64_t planes = d == DType::fp8_e4m3 ? 4 : d == DType::fp8_e5m2 ? 3 : 0;
  const uint64_t plane0 = planes ? tiles * planes * 32 : n;
  REQUIRE(l.plane0_bytes == plane0);
  const bool low = d == DType::fp16 || d == DType::fp32;
  REQUIRE(l.widths_offset == au16(64 + plane0));
  REQUIRE(l.widths_bytes == (low ? (tiles + 3) / 4 : 0));
  REQUIRE(l.table_offset == au16(l.widths_offset + l.widths_bytes));
  REQUIRE(l.low_table_offset == l.table_offset + 8 * chunks);
  REQUIRE(l.check_offset == l.low_table_offset + (low ? 8 * chunks : 0));
  REQUIRE(l.low_offset == au16(l.check_offset + 4 * chunks));
  // full width: fp32 two bytes per element, each tile padded to 16; fp16 96 bytes per tile
  const uint64_t full_low = d == DType::fp32 ? (n / 256) * 512 + au16(2 * (n % 256)) : d == DType::fp16 ? 96 * tiles : 0;
  REQUIRE(l.low_max_bytes == full_low);
  REQUIRE(l.low_bytes == full_low);
  REQUIRE(l.exp_offset == l.low_offset + full_low);
  const Layout lz = format::layout_for(d, n, log2, 0);  // every tile's low bits dropped
  REQUIRE(lz.exp_offset == lz.low_offset);
  REQUIRE(lz.table_offset == l.table_offset);
  // alignment, order, disjointness, no gap of a whole alignment unit
  for (uint64_t off : {l.plane0_offset, l.widths_offset, l.table_offset, l.low_offset, l.exp_offset})
    REQUIRE(off % 16 == 0);
  REQUIRE(l.plane0_offset >= format::HEADER_BYTES);
  REQUIRE(l.plane0_offset + l.plane0_bytes <= l.widths_offset);
  REQUIRE(l.widths_offset - (l.plane0_offset + l.plane0_bytes) < 16);
  REQUIRE(l.widths_offset + l.widths_bytes <= l.table_offset);
  REQUIRE(l.table_offset - (l.widths_offset + l.widths_bytes) < 16);
  REQUIRE(l.check_offset + 4 * l.num_chunks <= l.low_offset);
  REQUIRE(l.low_offset - (l.check_offset + 4 * l.num_chunks) < 16);
  // chunk sizes sum to n; raw bound
  const uint32_t eb = d == DType::fp16 || d == DType::fp8_e5m2 ? 5 : d == DType::fp8_e4m3 ? 4 : 8;
  const uint64_t full = n / size, tail = n % size;
  REQUIRE(l.chunk_elems(0) == (n < size ? n : size));
  if (chunks) {
    REQUIRE(l.chunk_elems(chunks - 1) == (tail ? tail : size));
    REQUIRE(l.chunk_elems(chunks) == 0);
    REQUIRE(l.chunk_first_tile(chunks - 1) == (chunks - 1) * (size / 256));
  }
  const uint64_t raw_full = size * eb / 8;  // already 16-aligned
  REQUIRE(format::raw_chunk_bytes(d, uint32_t(size)) == raw_full);
  const uint64_t raw_tail = tail ? au16((tail * eb + 7) / 8) : 0;
  const uint64_t bound = format::max_compressed_bytes(d, n, log2);
  REQUIRE(bound == l.exp_offset + full * raw_full + raw_tail);
  // the bound also covers every chunk that stays coded: coded < raw per chunk
  REQUIRE(bound >= l.exp_offset);
  // smaller chunks only add table entries: a bound for them covers the larger ones'
  if (log2 < format::MAX_CHUNK_LOG2) REQUIRE(bound >= format::max_compressed_bytes(d, n, log2 + 1));
  if (log2 == format::default_chunk_log2(n)) REQUIRE(format::max_compressed_bytes(d, n) == bound);
}

void check_layout(DType d, uint64_t n) {
  for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2) check_layout(d, n, log2);
}

}  // namespace

TEST_CASE("layout invariants for small and boundary and random sizes", "[format]") {
  ZT_RNG("layout");
  std::vector<uint64_t> ns = {0, 1, 2, 15, 16, 17, 31, 32, 33, 255, 256, 257, 16383, 16384, 16385, 3 * 16384 + 77};
  for (int i = 0; i < 2000; ++i) ns.push_back(rng() % (1u << 22));
  for (int i = 0; i < 2000; ++i) ns.push_back(rng() % (uint64_t(1) << 50));
  for (DType d : zt::kDTypes)
    for (uint64_t n : ns) check_layout(d, n);
}

TEST_CASE("layout sizes are exact past 2^32 elements (arithmetic only)", "[format]") {
  ZT_RNG("layout_big");
  const uint64_t two32 = uint64_t(1) << 32;
  std::vector<uint64_t> ns = {two32 - 1, two32, two32 + 1, two32 + 16383, two32 + 16385, 5 * two32 + 77,
                              (uint64_t(1) << 40) + 3, uint64_t(1) << 50};
  for (int i = 0; i < 500; ++i) ns.push_back(two32 + rng() % (uint64_t(1) << 40));
  for (DType d : zt::kDTypes)
    for (uint64_t n : ns) check_layout(d, n);
  // spot values, written out
  const uint64_t n = two32 + 1;  // 262145 chunks, 16777217 tiles
  const Layout l = format::layout_for(DType::fp32, n, 14);
  CHECK(l.num_chunks == 262145);
  CHECK(format::layout_for(DType::fp32, n, 12).num_chunks == 1048577);
  CHECK(l.widths_offset == au16(64 + n));
  CHECK(l.widths_bytes == (16777217ull + 3) / 4);
  CHECK(l.low_max_bytes == 2 * (n - 1) + 16);
  CHECK(format::max_compressed_bytes(DType::fp32, n) == l.exp_offset + 262144ull * 16384 + 16);
  const Layout h = format::layout_for(DType::fp16, n, 14);
  CHECK(h.low_max_bytes == 16777217ull * 96);
  CHECK(format::max_compressed_bytes(DType::fp16, n) == h.exp_offset + 262144ull * 10240 + 16);
}

TEST_CASE("chunk layout helpers: anchors, fractions, lane word counts, padding, lane streams", "[format]") {
  REQUIRE(format::LANES == 32);
  REQUIRE(format::LANE_WORD_LIMIT == 64);  // 4 bits per item of a full lane (512 items)
  REQUIRE(format::CODED_WORD_LIMIT == 32 * 64);
  for (uint32_t tiles = 1; tiles <= 64; ++tiles) {
    INFO("tiles " << tiles);
    const uint32_t counts = format::lane_counts_offset(tiles);
    CHECK(counts == tiles + (tiles + 3) / 4);  // anchors, then 2-bit fractions four per byte
    const uint32_t hb = format::chunk_header_bytes(tiles);
    CHECK(hb == au16(counts + 32));  // 32 lane word counts, zero padding to 16 bytes
    for (uint32_t w : {0u, 1u, 3u, 4u, 5u, 64u, 100u, 2048u})
      CHECK(format::coded_chunk_bytes(tiles, w) == au16(hb + 4 * w));
  }
  CHECK(format::chunk_header_bytes(1) == 48);    // 1 + 1 + 32 = 34
  CHECK(format::chunk_header_bytes(8) == 48);    // 8 + 2 + 32 = 42
  CHECK(format::chunk_header_bytes(9) == 48);    // 9 + 3 + 32 = 44
  CHECK(format::chunk_header_bytes(13) == 64);   // 13 + 4 + 32 = 49
  CHECK(format::chunk_header_bytes(64) == 112);  // 64 + 16 + 32 = 112
  for (DType d : zt::kDTypes)
    for (uint32_t e = 1; e <= 16384; ++e) {
      const uint32_t t = format::chunk_tiles(e);
      CHECK(t == (e + 255) / 256);
      // coded iff every lane fits 64 words and the chunk is strictly smaller than raw
      for (uint32_t w : {0u, 1u, 100u, 1000u, 2048u, 2049u, 4000u})
        for (uint32_t lane_max : {0u, 1u, 63u, 64u, 65u, 255u}) {
          if (lane_max > w || w > 32 * lane_max) continue;  // not a possible (total, largest lane) pair
          const bool want = lane_max <= 64 && format::coded_chunk_bytes(t, w) < format::raw_chunk_bytes(d, e);
          CHECK(format::chunk_stays_coded(d, e, w, lane_max) == want);
        }
    }
  // A full chunk with every lane at its limit is still smaller than raw for every dtype with exponents of 5 or
  // more bits: the lane limit, not the size, decides for their full chunks. fp8_e4m3's raw chunk (4 bits per
  // exponent, 8192 bytes) is smaller than 2048 words and the chunk header: its size decides first.
  for (DType d : zt::kDTypes) CHECK(format::chunk_stays_coded(d, 16384, 2048, 64) == (d != DType::fp8_e4m3));
  CHECK(format::chunk_stays_coded(DType::fp8_e4m3, 16384, 2016, 64));  // 112 + 4 * 2016 = 8176 bytes
  CHECK_FALSE(format::chunk_stays_coded(DType::fp8_e4m3, 16384, 2017, 64));  // 8180: 8192 with padding
}

TEST_CASE("lane_valid_count: a lane's first items in a tile, the rest of a tile past the end", "[format]") {
  for (uint32_t elems = 0; elems <= 16384; ++elems) {
    uint64_t total = 0;
    for (uint32_t t = 0; t < 64; ++t)
      for (uint32_t l = 0; l < 32; ++l) {
        const uint32_t c = format::lane_valid_count(elems, t, l);
        const uint32_t first = t * 256 + l * 8;  // the lane's items are elements first .. first + 7
        const uint32_t want = elems <= first ? 0 : elems - first >= 8 ? 8 : elems - first;
        if (c != want) FAIL("elems " << elems << " tile " << t << " lane " << l << ": " << c << " != " << want);
        total += c;
      }
    if (total != elems) FAIL("elems " << elems << ": counts sum to " << total);
  }
}

TEST_CASE("header make/validate", "[format]") {
  ZT_RNG("header");
  for (int it = 0; it < 3000; ++it) {
    const DType d = zt::kDTypes[rng() % std::size(zt::kDTypes)];
    const CodeId c = rng() % 2 ? CodeId::pair : CodeId::fixed;  // the header does not depend on the code
    const uint64_t n = it % 2 ? rng() % 100000 : rng() % (uint64_t(1) << 50);
    const uint32_t log2 = format::MIN_CHUNK_LOG2 + uint32_t(rng() % 3);
    const Layout l = format::layout_for(d, n, log2);
    const uint64_t mx = format::max_compressed_bytes(d, n, log2);
    const uint64_t low = rng() % 4 == 0 ? l.low_max_bytes : rng() % (l.low_max_bytes / 16 + 1) * 16;
    const Layout lv = format::layout_for(d, n, log2, low);
    const uint64_t total = lv.exp_offset + rng() % (mx - lv.exp_offset + 1);
    INFO("dtype " << dtype_name(d) << " n " << n << " chunk_log2 " << log2 << " low " << low << " total " << total);
    Header h = format::make_header(d, c, n, log2, total, low);
    REQUIRE(h.magic == format::MAGIC);
    REQUIRE(std::memcmp(&h.magic, "ZPCM", 4) == 0);
    REQUIRE(h.version == 6);
    REQUIRE(h.code == uint8_t(c));
    REQUIRE(h.chunk_log2 == log2);
    REQUIRE(h.num_elements == n);
    REQUIRE(h.total_bytes == total);
    REQUIRE(h.table_offset == l.table_offset);
    REQUIRE(h.low_offset == l.low_offset);
    REQUIRE(h.exp_offset == lv.exp_offset);
    REQUIRE(h.reserved0 == 0);
    REQUIRE(h.reserved1 == 0);
    REQUIRE(h.reserved2 == 0);
    REQUIRE(format::validate_header(h, total) == Status::ok);
    REQUIRE(format::validate_header(h, total + rng() % 1000) == Status::ok);
    REQUIRE(format::validate_header(h, total - 1) == Status::corrupt_stream);  // truncated
    REQUIRE(format::validate_header(h, 0) == Status::corrupt_stream);

    // out-of-range sizes, with a valid check value so only the semantic test can reject them
    REQUIRE(format::validate_header(format::make_header(d, c, n, log2, lv.exp_offset - 1 - rng() % 64, low),
                                    ~0ull) == Status::bad_header);
    REQUIRE(format::validate_header(format::make_header(d, c, n, log2, mx + 1 + rng() % 64, low), ~0ull) ==
            Status::bad_header);
    // a low section longer than every tile at full width, or not a multiple of 16
    REQUIRE(format::validate_header(format::make_header(d, c, n, log2, mx, l.low_max_bytes + 16 * (1 + rng() % 8)),
                                    ~0ull) == Status::bad_header);
    if (low) REQUIRE(format::validate_header(format::make_header(d, c, n, log2, mx, low - 1 - rng() % 15), ~0ull) ==
                     Status::bad_header);
    auto resigned = [](Header x) {
      x.header_check = format::fnv1a(reinterpret_cast<const uint8_t*>(&x), 48);
      return x;
    };
    Header b = h;
    b.magic ^= 1u << (rng() % 32);
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.version = uint8_t(h.version + 1 + rng() % 250);  // v1 to v4 among them
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::unsupported_version);
    for (uint8_t v : {0, 1, 2, 3, 4, 7, 255}) {
      b.version = v;
      REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::unsupported_version);
    }
    // version 5 is read: the same layout, 16384-element chunks and the pair code only
    b = h;
    b.version = 5;
    REQUIRE(format::validate_header(resigned(b), ~0ull) ==
            (log2 == 14 && c == CodeId::pair ? Status::ok : Status::bad_header));
    b.code = uint8_t(CodeId::fixed);
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.dtype = uint8_t(rng() % 2 ? 0 : 6 + rng() % 250);
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.code = uint8_t(rng() % 2 ? rng() % 3 : 5 + rng() % 251);  // 1 and 2 were v1/v2 codes: not in v3
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    for (uint8_t code : {0, 1, 2, 5, 255}) {
      b.code = code;
      REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    }
    for (uint8_t bad_log2 : {0, 8, 11, 15, 16, 255}) {
      b = h;
      b.chunk_log2 = bad_log2;
      REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    }
    // another valid chunk size does not match the header's offsets once there are chunk tables
    b = h;
    b.chunk_log2 = uint8_t(log2 == 14 ? 12 : log2 + 1);
    if (format::layout_for(d, n, b.chunk_log2).table_offset != l.table_offset ||
        format::layout_for(d, n, b.chunk_log2).low_offset != l.low_offset)
      REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.num_elements = (uint64_t(1) << 50) + 1 + rng() % 1000;
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.low_offset += 16;
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.table_offset -= 16;
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.exp_offset = l.exp_offset + 16;
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b.exp_offset = l.low_offset - 16;
    REQUIRE(format::validate_header(resigned(b), ~0ull) == Status::bad_header);
    b = h;
    b.header_check ^= 1u << (rng() % 32);
    REQUIRE(format::validate_header(b, ~0ull) == Status::bad_header);
  }
}

TEST_CASE("read_header rejects short buffers and null pointers", "[format]") {
  Header h = format::make_header(DType::bf16, CodeId::pair, 0, 14, 64, 0);
  Header out;
  REQUIRE(host::read_header(&h, 64, &out) == Status::ok);
  for (uint64_t b = 0; b < 64; ++b) REQUIRE(host::read_header(&h, b, &out) != Status::ok);
  REQUIRE(host::read_header(nullptr, 64, &out) == Status::invalid_argument);
  REQUIRE(host::read_header(&h, 64, nullptr) == Status::invalid_argument);
}

namespace {
std::vector<Header> sample_headers(std::mt19937_64& rng) {
  std::vector<Header> hs;
  for (DType d : zt::kDTypes)
    for (CodeId c : zt::kCodes)
      for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(16385), uint64_t(rng() % 10000000),
                         uint64_t(1) << 33}) {
        const uint32_t log2 = format::MIN_CHUNK_LOG2 + uint32_t(rng() % 3);
        const Layout l = format::layout_for(d, n, log2);
        const uint64_t low = rng() % (l.low_max_bytes / 16 + 1) * 16;
        const uint64_t lo = format::layout_for(d, n, log2, low).exp_offset;
        const uint64_t hi = format::max_compressed_bytes(d, n, log2);
        hs.push_back(format::make_header(d, c, n, log2, lo + rng() % (hi - lo + 1), low));
        hs.push_back(format::make_header(d, c, n, log2, hi, l.low_max_bytes));
      }
  return hs;
}
}  // namespace

TEST_CASE("every single-bit flip in a valid header is rejected", "[format]") {
  ZT_RNG("header_flip");
  // bytes [0, 48) are covered by the FNV check, [48, 52) is the check, [52, 64) the reserved words (must be 0)
  for (const Header& h : sample_headers(rng)) {
    REQUIRE(format::validate_header(h, ~0ull) == Status::ok);
    for (int bit = 0; bit < 64 * 8; ++bit) {
      Header b = h;
      reinterpret_cast<uint8_t*>(&b)[bit / 8] ^= uint8_t(1u << (bit % 8));
      INFO("header bit " << bit << " dtype " << int(h.dtype) << " n " << h.num_elements);
      REQUIRE(format::validate_header(b, ~0ull) == Status::bad_header);
    }
  }
}

TEST_CASE("streams of format v1 to v4 are refused as unsupported_version", "[format]") {
  ZT_RNG("old versions refused");
  for (DType d : zt::kDTypes) {
    const zt::Tensor t = zt::gaussian(d, 40000, rng);
    const auto s = zt::compress_ok(CodeId::pair, t);
    // v1 to v3 had the same magic and header check; v1 and v2 streams carried code 1 (gaussian) or 2 (window3).
    for (uint8_t version : {1, 2, 3, 4})
      for (uint8_t code : {1, 2, 3}) {
        INFO("dtype " << dtype_name(d) << " version " << int(version) << " code " << int(code));
        std::vector<uint8_t> old = s;
        Header h;
        std::memcpy(&h, old.data(), sizeof h);
        h.version = version;
        h.code = code;
        h.header_check = format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
        std::memcpy(old.data(), &h, sizeof h);
        Header back;
        REQUIRE(host::read_header(old.data(), old.size(), &back) == Status::unsupported_version);
        std::vector<uint8_t> out(t.bytes.size());
        REQUIRE(host::decompress(old.data(), old.size(), out.data(), out.size()) == Status::unsupported_version);
      }
  }
  REQUIRE(std::string(status_string(Status::unsupported_version)) == "unsupported format version");
}

TEST_CASE("streams of format v5 (16384-element chunks) are still read", "[format]") {
  ZT_RNG("v5 read");
  for (DType d : zt::kDTypes)
    for (uint64_t n : {uint64_t(0), uint64_t(1 + rng() % 16384), uint64_t(40000 + rng() % 40000)}) {
      INFO("dtype " << dtype_name(d) << " n " << n);
      const zt::Tensor t = zt::gaussian(d, n, rng);
      std::vector<uint8_t> s(format::max_compressed_bytes(d, n, 14));
      uint64_t bytes = 0;
      REQUIRE(host::compress(d, CodeId::pair, t.bytes.data(), n, s.data(), s.size(), &bytes, format::LowWidths::minimal,
                             14) == Status::ok);
      s.resize(bytes);
      Header h;
      std::memcpy(&h, s.data(), sizeof h);
      REQUIRE(h.version == 6);
      h.version = 5;  // a v5 writer's stream: the same bytes but for the version and the check
      h.header_check = format::fnv1a(reinterpret_cast<const uint8_t*>(&h), 48);
      std::memcpy(s.data(), &h, sizeof h);
      std::vector<uint8_t> out(t.bytes.size() + 1);
      REQUIRE(host::decompress(s.data(), s.size(), out.data(), out.size()) == Status::ok);
      REQUIRE(std::equal(t.bytes.begin(), t.bytes.end(), out.begin()));
    }
}

TEST_CASE("fp8 dtypes: ids, names, sizes, and the element bits of all 256 patterns", "[format][fp8]") {
  CHECK(uint8_t(DType::fp8_e4m3) == 4);
  CHECK(uint8_t(DType::fp8_e5m2) == 5);
  CHECK(std::string(dtype_name(DType::fp8_e4m3)) == "fp8_e4m3");
  CHECK(std::string(dtype_name(DType::fp8_e5m2)) == "fp8_e5m2");
  for (uint32_t id = 0; id < 256; ++id) CHECK(dtype_valid(uint8_t(id)) == (id >= 1 && id <= 5));
  for (DType d : zt::kFp8DTypes) {
    INFO("dtype " << dtype_name(d));
    const bool e4m3 = d == DType::fp8_e4m3;
    const uint32_t mant = e4m3 ? 3 : 2, planes = 1 + mant;
    CHECK(format::elem_bytes(d) == 1);
    CHECK(format::exp_bits(d) == (e4m3 ? 4 : 5));
    CHECK(format::low_bits(d) == 0);
    CHECK_FALSE(format::has_low(d));
    CHECK(format::plane0_planes(d) == planes);
    CHECK_FALSE(comm_dtype_supported(d));
    CHECK(format::raw_chunk_bytes(d, 16384) == 16384 * (e4m3 ? 4 : 5) / 8);
    CHECK(format::raw_chunk_bytes(d, 1) == 16);
    CHECK(format::raw_chunk_bytes(d, 33) == 32);  // 132 or 165 bits, padded to 16 bytes
    for (uint32_t b = 0; b < 256; ++b) {
      INFO("pattern 0x" << std::hex << b);
      const uint32_t sign = b >> 7, e = (b >> mant) & ((1u << (7 - mant)) - 1), m = b & ((1u << mant) - 1);
      uint32_t exp, mag, p0, back, frac;
      if (e4m3) {
        using FB = thread::FloatBits<DType::fp8_e4m3>;
        exp = FB::exponent(b), mag = FB::magnitude(b), p0 = FB::plane0(b), back = FB::assemble(exp, p0, 0);
        frac = thread::fraction_of<DType::fp8_e4m3>(mag);
      } else {
        using FB = thread::FloatBits<DType::fp8_e5m2>;
        exp = FB::exponent(b), mag = FB::magnitude(b), p0 = FB::plane0(b), back = FB::assemble(exp, p0, 0);
        frac = thread::fraction_of<DType::fp8_e5m2>(mag);
      }
      CHECK(exp == e);
      CHECK(mag == (b & 0x7Fu));
      CHECK(p0 == (sign << mant | m));  // the sign-mantissa value that plane 0's bit-planes hold
      CHECK(back == b);
      CHECK(frac == (m >> (mant - 2)));  // the top two mantissa bits (e5m2: its whole mantissa)
    }
  }
}

TEST_CASE("fp8 plane 0: bit-planes per tile, plane 0 the sign, byte = lane, bit = item", "[format][fp8]") {
  ZT_RNG("fp8 planes");
  for (DType d : zt::kFp8DTypes)
    for (uint64_t n : {uint64_t(1), uint64_t(255), uint64_t(256), uint64_t(256 + 100), uint64_t(16384 + 77)}) {
      INFO("dtype " << dtype_name(d) << " n " << n);
      const uint32_t mant = d == DType::fp8_e4m3 ? 3 : 2, planes = 1 + mant;
      const zt::Tensor t = zt::random_bits(d, n, rng);
      const auto s = zt::compress_ok(CodeId::pair, t);
      const Layout l = format::layout_for(d, n, format::default_chunk_log2(n));
      REQUIRE(l.plane0_bytes == (n + 255) / 256 * planes * 32);
      // Written from the description: element tile * 256 + lane * 8 + item, value v = sign << mant | mantissa;
      // plane j (32 bytes) holds bit planes - 1 - j of v; bits of a short tile that no element owns are zero.
      std::vector<uint8_t> want(l.plane0_bytes, 0);
      for (uint64_t i = 0; i < n; ++i) {
        const uint32_t b = t.get(i), v = (b >> 7) << mant | (b & ((1u << mant) - 1));
        const uint64_t tile = i / 256, lane = i % 256 / 8, item = i % 8;
        for (uint32_t j = 0; j < planes; ++j)
          if ((v >> (planes - 1 - j)) & 1u) want[tile * planes * 32 + j * 32 + lane] |= uint8_t(1u << item);
      }
      REQUIRE(std::equal(want.begin(), want.end(), s.begin() + l.plane0_offset));
      REQUIRE(l.widths_offset == l.plane0_offset + l.plane0_bytes);  // a multiple of 16: no gap
      // A set bit that no element of the short last tile owns is refused.
      if (n % 256) {
        const uint64_t last = l.plane0_offset + (n / 256) * planes * 32;
        for (uint32_t pos = uint32_t(n % 256); pos < 256; pos += 1 + uint32_t(rng() % 13)) {
          std::vector<uint8_t> bad = s;
          bad[last + (rng() % planes) * 32 + pos / 8] |= uint8_t(1u << (pos % 8));
          std::vector<uint8_t> out(n);
          REQUIRE(host::decompress(bad.data(), bad.size(), out.data(), n) == Status::corrupt_stream);
        }
      }
    }
}
