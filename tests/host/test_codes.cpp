// The exponent codes: GaussianCode and Window3Code tables, codewords, prefix property, symbol mapping.
#include "test_util.hpp"

using namespace zipcomm;
using thread::GaussianCode;
using thread::Window3Code;

namespace {

/// Codeword length the Gaussian code assigns to rank r (the specification in exponent_code.hpp).
uint32_t gaussian_len_of_rank(uint32_t r) { return r < 2 ? 2 : r < 4 ? 3 : r - 1; }

struct Word {
  uint32_t sym, bits, len;
};

/// Every codeword of a code for fraction bucket f, with the symbols it must cover.
template <class Code>
std::vector<Word> codewords(uint32_t f, uint32_t num_symbols) {
  std::vector<Word> ws;
  auto t = Code::table(f);
  for (uint32_t s = 0; s < num_symbols; ++s) {
    Word w{s, 0, 0};
    Code::encode(t, s, w.bits, w.len);
    ws.push_back(w);
  }
  return ws;
}

/// Prefix-free + Kraft sum (as an exact dyadic fraction: sum of 2^(32-len)).
void check_prefix_free_and_kraft(const std::vector<Word>& ws, uint64_t want_kraft_2p32) {
  uint64_t kraft = 0;
  for (const Word& a : ws) {
    REQUIRE(a.len >= 1);
    REQUIRE(a.len <= 31);
    REQUIRE((a.bits >> a.len) == 0);
    kraft += uint64_t(1) << (32 - a.len);
    for (const Word& b : ws) {
      if (a.sym == b.sym) continue;
      INFO("symbols " << a.sym << " and " << b.sym);
      const uint32_t m = a.len < b.len ? a.len : b.len;
      REQUIRE((a.bits >> (a.len - m)) != (b.bits >> (b.len - m)));  // neither is a prefix of the other
    }
  }
  REQUIRE(kraft == want_kraft_2p32);
}

/// encode then decode with arbitrary bits after the codeword returns the symbol and its length.
template <class Code>
void check_encode_decode(const std::vector<Word>& ws, uint32_t f, std::mt19937_64& rng) {
  auto t = Code::table(f);
  for (const Word& w : ws) {
    std::vector<uint32_t> tails = {0u, ~0u, 0x55555555u, 0xAAAAAAAAu};
    for (int i = 0; i < 2000; ++i) tails.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t tail : tails) {
      const uint32_t peek = (w.bits << (32 - w.len)) | (tail >> w.len);
      uint32_t len = 0;
      const uint32_t s = Code::decode(t, peek, len);
      INFO("f " << f << " symbol " << w.sym << " peek 0x" << std::hex << peek);
      REQUIRE(s == w.sym);
      REQUIRE(len == w.len);
    }
  }
}

/// Completeness seen from the decoder: every 32-bit window decodes to a codeword that is its prefix.
template <class Code>
void check_every_window_decodes(uint32_t f, uint32_t num_symbols, std::mt19937_64& rng) {
  auto t = Code::table(f);
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    const uint32_t peek = (hi << 16) | static_cast<uint32_t>(rng() & 0xFFFF);
    uint32_t len = 0;
    const uint32_t s = Code::decode(t, peek, len);
    REQUIRE(s < num_symbols);
    uint32_t bits = 0, elen = 0;
    Code::encode(t, s, bits, elen);
    REQUIRE(elen == len);
    REQUIRE((peek >> (32 - len)) == bits);
  }
}

}  // namespace

TEST_CASE("GaussianCode ORDER tables are permutations and rank/symbol maps agree with ORDER", "[codes]") {
  for (uint32_t f = 0; f < 4; ++f) {
    INFO("f " << f);
    auto t = GaussianCode::table(f);
    REQUIRE(t.f == f);
    std::vector<int> seen(GaussianCode::NUM_RANKS, 0);
    for (uint32_t r = 0; r < GaussianCode::NUM_RANKS; ++r) {
      const uint32_t s = GaussianCode::ORDER[f][r];
      INFO("rank " << r);
      REQUIRE(s < GaussianCode::NUM_RANKS);  // symbols 0..15 and ZERO; never ESC
      REQUIRE(s != GaussianCode::ESC);
      seen[s]++;
      REQUIRE(GaussianCode::rank_to_symbol(t, r) == s);
      REQUIRE(GaussianCode::symbol_to_rank(t, s) == r);
      REQUIRE(GaussianCode::symbol_to_rank(t, GaussianCode::rank_to_symbol(t, r)) == r);
    }
    for (int c : seen) REQUIRE(c == 1);
    for (uint32_t s = 0; s < GaussianCode::NUM_RANKS; ++s)
      REQUIRE(GaussianCode::rank_to_symbol(t, GaussianCode::symbol_to_rank(t, s)) == s);
  }
}

TEST_CASE("GaussianCode codeword lengths follow the rank and encode/decode round trip with any trailing bits",
          "[codes]") {
  ZT_RNG("gaussian_code");
  for (uint32_t f = 0; f < 4; ++f) {
    auto t = GaussianCode::table(f);
    auto ws = codewords<GaussianCode>(f, GaussianCode::ESC + 1);
    for (const Word& w : ws) {
      INFO("f " << f << " symbol " << w.sym);
      REQUIRE(w.len <= GaussianCode::MAX_LEN);
      if (w.sym == GaussianCode::ESC) {
        REQUIRE(w.len == GaussianCode::ESC_LEN);
        REQUIRE(w.bits == (1u << GaussianCode::ESC_LEN) - 1);
      } else {
        REQUIRE(w.len == gaussian_len_of_rank(GaussianCode::symbol_to_rank(t, w.sym)));
      }
    }
    check_encode_decode<GaussianCode>(ws, f, rng);
    // complete: Kraft sum exactly 1 (2^32 in units of 2^-32)
    check_prefix_free_and_kraft(ws, uint64_t(1) << 32);
    check_every_window_decodes<GaussianCode>(f, GaussianCode::ESC + 1, rng);
  }
}

TEST_CASE("Window3Code has fixed 3-bit words that round trip and form a complete code", "[codes]") {
  ZT_RNG("window3_code");
  REQUIRE(Window3Code::ESC == 7);
  REQUIRE(Window3Code::ZERO == 6);
  REQUIRE(Window3Code::NUM_D == 6);
  for (uint32_t f = 0; f < 4; ++f) {
    auto ws = codewords<Window3Code>(f, 8);
    for (const Word& w : ws) {
      REQUIRE(w.len == 3);
      REQUIRE(w.bits == w.sym);
    }
    check_encode_decode<Window3Code>(ws, f, rng);
    check_prefix_free_and_kraft(ws, uint64_t(1) << 32);
    check_every_window_decodes<Window3Code>(f, 8, rng);
  }
}

namespace {
template <class Code>
void check_symbol_mapping(uint32_t max_exp) {
  for (uint32_t a = 1; a <= max_exp; ++a) {
    std::vector<int> hit(Code::ESC + 1, 0);
    for (uint32_t e = 0; e <= max_exp; ++e) {
      INFO("a " << a << " e " << e);
      if (e > a) {  // cannot occur (a is the tile maximum); escape must not accept it
        REQUIRE_FALSE(thread::escape_valid<Code>(e, a));
        continue;
      }
      const uint32_t s = thread::symbol_of<Code>(e, a);
      REQUIRE(s <= Code::ESC);
      if (s == Code::ESC) {
        REQUIRE(e != 0);
        REQUIRE(a - e >= Code::NUM_D);
        REQUIRE(thread::escape_valid<Code>(e, a));
      } else {
        hit[s]++;
        REQUIRE_FALSE(thread::escape_valid<Code>(e, a));  // a regular symbol carries it: escape would be non-canonical
        uint32_t back = 12345;
        REQUIRE(thread::exponent_of<Code>(s, a, back));
        REQUIRE(back == e);
      }
    }
    // each regular symbol stands for at most one exponent; symbols that cannot occur are rejected
    for (uint32_t s = 0; s < Code::ESC; ++s) {
      INFO("a " << a << " s " << s);
      REQUIRE(hit[s] <= 1);
      uint32_t e = 0;
      const bool ok = thread::exponent_of<Code>(s, a, e);
      REQUIRE(ok == (hit[s] == 1));
      if (ok) REQUIRE(thread::symbol_of<Code>(e, a) == s);
    }
  }
}
}  // namespace

TEST_CASE("symbol_of and exponent_of and escape_valid agree for all exponent/anchor pairs", "[codes]") {
  check_symbol_mapping<GaussianCode>(255);
  check_symbol_mapping<Window3Code>(255);
  check_symbol_mapping<GaussianCode>(31);  // fp16 range, same functions
  check_symbol_mapping<Window3Code>(31);
}

namespace {
/// decode_rank (the branch-free form the device hot loop uses) must agree with decode for every prefix.
template <class Code>
void check_decode_rank(std::mt19937_64& rng) {
  for (uint32_t top = 0; top < (1u << 16); ++top) {
    const uint32_t peek = (top << 16) | uint32_t(rng() & 0xFFFFu);
    for (uint32_t f = 0; f < 4; ++f) {
      const typename Code::Table tab = Code::table(f);
      uint32_t len_a = 0, len_b = 0;
      const uint32_t sym = Code::decode(tab, peek, len_a);
      const uint32_t rank = Code::decode_rank(peek, len_b);
      INFO("peek " << peek << " f " << f);
      REQUIRE(len_a == len_b);
      if (sym == Code::ESC) {
        REQUIRE(rank == Code::ESC_RANK);
      } else {
        REQUIRE(rank < Code::NUM_RANKS);
        REQUIRE(Code::rank_to_symbol(tab, rank) == sym);
      }
    }
  }
}
}  // namespace

TEST_CASE("decode_rank agrees with decode for every 16-bit prefix", "[codes]") {
  ZT_RNG("decode_rank");
  check_decode_rank<GaussianCode>(rng);
  check_decode_rank<Window3Code>(rng);
}
