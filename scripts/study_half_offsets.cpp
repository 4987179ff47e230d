// What a chunk would pay to be decodable by two warps (a wire-format design study, bf16).
//
// A warp decodes a chunk's 32 lane streams tile after tile; a second warp could take tiles 32-63 at once if it
// knew where each lane's stream reaches tile 32. This codes every full chunk of each file with the pair code (as
// the host reference does) and prints what those 32 bit offsets cost stored as a 16-bit base plus 32 deltas of
// the fewest bits that hold them, against the lane word counts stored the same way (the format keeps a byte per
// lane). From the repository root:
//   mkdir -p build && g++ -O2 -std=c++17 -Iinclude -o build/study_half_offsets scripts/study_half_offsets.cpp
//   build/study_half_offsets tests/data/llama_grads.bf16 tests/data/llama_acts.bf16 tests/data/llama_weights.bf16
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>
#include <zipcomm/host/reference_codec.hpp>
using namespace zipcomm;
using namespace zipcomm::host::detail;
int main(int argc, char **argv) {
  using Code = thread::PairCode;
  using FB = thread::FloatBits<DType::bf16>;
  for (int a = 1; a < argc; ++a) {
    std::ifstream f(argv[a], std::ios::binary);
    std::vector<uint8_t> raw((std::istreambuf_iterator<char>(f)), {});
    const uint64_t n = raw.size() / 2;
    double cost_delta = 0, cost_counts = 0;
    uint64_t chunks = 0;
    int hist[16] = {0};
    for (uint64_t c = 0; (c + 1) * format::CHUNK_ELEMS <= n; ++c) {
      std::vector<uint32_t> bits(format::CHUNK_ELEMS);
      for (uint32_t i = 0; i < format::CHUNK_ELEMS; ++i)
        bits[i] = raw[2 * (c * format::CHUNK_ELEMS + i)] | raw[2 * (c * format::CHUNK_ELEMS + i) + 1] << 8;
      const uint32_t tiles = 64, elems = format::CHUNK_ELEMS;
      uint8_t anchors[64], fracs[64];
      tile_scales<DType::bf16>(bits.data(), elems, tiles, anchors, fracs);
      uint64_t half[32], total[32];
      for (uint32_t l = 0; l < 32; ++l) {
        uint64_t nb = 0;
        for (uint32_t t = 0; t < tiles; ++t) {
          if (t == 32) half[l] = nb;
          const uint32_t an = anchors[t];
          if (an == 0) continue;
          for (uint32_t p = 0; p < 4; ++p) {
            uint32_t e[2], s[2];
            for (uint32_t j = 0; j < 2; ++j) {
              e[j] = FB::exponent(bits[t * 256 + l * 8 + 2 * p + j]);
              s[j] = Code::symbol_of(e[j], an);
            }
            const uint32_t entry = thread::PAIR_TABLES.encode[fracs[t]][s[0] * Code::NUM_SYMBOLS + s[1]];
            nb += entry >> Code::ENCODE_LEN_SHIFT;
            for (uint32_t j = 0; j < 2; ++j)
              if (s[j] == Code::ESC) nb += FB::EXP_BITS;
          }
        }
        total[l] = nb;
      }
      // half offsets as base + k-bit deltas
      const uint64_t mn = *std::min_element(half, half + 32), mx = *std::max_element(half, half + 32);
      uint32_t k = 0;
      while ((1ull << k) <= mx - mn) ++k;
      hist[std::min<uint32_t>(k, 15)]++;
      cost_delta += 2 + 32.0 * k / 8;
      // word counts as base + deltas
      uint64_t w[32];
      for (int l = 0; l < 32; ++l) w[l] = (total[l] + 31) / 32;
      const uint64_t wn = *std::min_element(w, w + 32), wx = *std::max_element(w, w + 32);
      uint32_t kw = 0;
      while ((1ull << kw) <= wx - wn) ++kw;
      cost_counts += 1 + 32.0 * kw / 8;
      ++chunks;
    }
    std::printf(
        "%s: %llu chunks; half offsets base+deltas %.1f B/chunk, "
        "counts base+deltas %.1f B/chunk (a byte per lane: 32); net %+.1f B/chunk = "
        "%+.5f ratio\n  delta bits:",
        argv[a], (unsigned long long)chunks, cost_delta / chunks, cost_counts / chunks,
        (cost_delta + cost_counts) / chunks - 32, ((cost_delta + cost_counts) / chunks - 32) / 32768);
    for (int k = 0; k < 16; ++k) std::printf(" %d:%d", k, hist[k]);
    std::printf("\n");
  }
}
