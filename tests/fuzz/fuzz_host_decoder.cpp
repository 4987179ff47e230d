// libFuzzer target for the host reference codec (build: clang++ -fsanitize=fuzzer,address,undefined).
//
// Input starting with the stream magic "ZPCM": decoder mode. The input is a compressed stream; it is decoded
// into a destination of exactly the size the header asks for (inputs asking for more than 4 MiB are skipped),
// so ASan sees any write outside it. A stream that decodes is re-encoded and decoded again (must agree).
// Any other input: encoder mode. Byte 0 selects dtype (b % 5) and how the remaining bytes become elements
// (bits 3-4: as-is / Gaussian-like exponents / Gaussian-like with per-tile scale / repeated past a chunk
// boundary; bit 2 is unused: the pair code is the only code); the elements are compressed with the pair code,
// decompressed and compared bit-exactly.
//
// Compiled with ZIPCOMM_FUZZ_SEED_MAIN, the same file is the seed-corpus generator: `prog DIR` writes valid
// streams (every dtype, small sizes, coded and raw chunks) and encoder-mode inputs into DIR, and runs
// each through the harness once.
#include <zipcomm/host/reference_codec.hpp>

#include "fuzz_check.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace zipcomm;

namespace {

constexpr uint64_t kMaxOutBytes = 4u << 20;
constexpr DType kDTypes[5] = {DType::bf16, DType::fp16, DType::fp32, DType::fp8_e4m3, DType::fp8_e5m2};

void decoder_mode(const uint8_t* data, size_t size) {
  format::Header h;
  Status st = host::read_header(data, size, &h);
  if (st != Status::ok) {
    uint8_t small[64];
    FUZZ_CHECK(host::decompress(data, size, small, sizeof small) == st);
    return;
  }
  const DType d = static_cast<DType>(h.dtype);
  const uint64_t out_bytes = h.num_elements * format::elem_bytes(d);
  if (out_bytes > kMaxOutBytes) return;
  std::vector<uint8_t> out(out_bytes);  // exact size: ASan flags any write past it
  uint8_t* dst = out_bytes ? out.data() : reinterpret_cast<uint8_t*>(&h);  // non-null even when empty
  st = host::decompress(data, size, dst, out_bytes);
  FUZZ_CHECK(st == Status::ok || st == Status::corrupt_stream || st == Status::checksum_mismatch);
  if (out_bytes) FUZZ_CHECK(host::decompress(data, size, dst, out_bytes - 1) == Status::buffer_too_small);
  if (st != Status::ok) return;
  // Whatever decoded must survive a fresh round trip.
  const uint64_t bound = format::max_compressed_bytes(d, h.num_elements);
  std::vector<uint8_t> again(bound ? bound : 1);
  uint64_t again_bytes = 0;
  FUZZ_CHECK(host::compress(d, static_cast<CodeId>(h.code), out.data(), h.num_elements, again.data(), bound,
                            &again_bytes) == Status::ok);
  FUZZ_CHECK(again_bytes <= bound);
  std::vector<uint8_t> out2(out_bytes);
  FUZZ_CHECK(host::decompress(again.data(), again_bytes, out_bytes ? out2.data() : dst, out_bytes) == Status::ok);
  FUZZ_CHECK(out == out2);
}

/// Exponent near `base`, geometric-ish below it, from the low bits of `r`; sometimes 0 or all ones.
uint32_t shaped_exponent(uint32_t r, uint32_t base, uint32_t max_exp) {
  uint32_t k = 0;
  while (k < 20 && ((r >> k) & 1u)) ++k;  // P(k) = 2^-(k+1)
  if ((r >> 24) == 0xFF) return max_exp;    // inf/NaN now and then
  if ((r >> 24) == 0xFE) return 0;          // zero/subnormal
  return k >= base ? 0 : base - k;
}

void encoder_mode(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t sel = data[0];
  const DType d = kDTypes[sel % 5];
  const CodeId code = CodeId::pair;
  const uint32_t shape = (sel >> 3) & 3;
  const uint32_t chunk_log2 = format::MIN_CHUNK_LOG2 + (sel >> 5) % 3;
  const uint32_t eb = format::elem_bytes(d);
  const uint32_t max_exp = (1u << format::exp_bits(d)) - 1;
  const uint32_t mant_bits = 8 * eb - 1 - uint32_t(format::exp_bits(d));
  ++data;
  --size;
  uint64_t n = size / eb;
  if (shape == 3) n = n ? 16384 + 1 + n % 512 : 0;  // repeat past a chunk boundary
  if (n > 20000) n = 20000;
  std::vector<uint8_t> in(n * eb);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t b = 0;
    std::memcpy(&b, data + (i % (size / eb)) * eb, eb);
    if (shape != 0) {
      // keep sign and mantissa; exponent anchored per tile (from the tile's first element) or fixed
      uint32_t first = 0;
      std::memcpy(&first, data + ((i / 256 * 256) % (size / eb)) * eb, eb);
      uint32_t base = shape == 1 ? (max_exp == 255 ? 120 : max_exp / 2) : 1 + (first >> 3) % (max_exp - 1);
      uint32_t r = b * 2654435761u;
      const uint32_t e = shaped_exponent(r ^ (r >> 15), base, max_exp);
      const uint32_t exp_mask = max_exp << mant_bits;
      b = (b & ~exp_mask & (0xFFFFFFFFu >> (32 - 8 * eb))) | (e << mant_bits);
    }
    std::memcpy(&in[i * eb], &b, eb);
  }
  const uint64_t bound = format::max_compressed_bytes(d, n, chunk_log2);
  std::vector<uint8_t> stream(bound);  // exact bound: ASan flags any write past it
  uint64_t bytes = 0;
  const format::LowWidths w = format::LowWidths::minimal;
  FUZZ_CHECK(host::compress(d, code, in.data(), n, stream.data(), bound, &bytes, w, chunk_log2) == Status::ok);
  FUZZ_CHECK(bytes <= bound && bytes >= format::layout_for(d, n, chunk_log2, 0).exp_offset);
  FUZZ_CHECK(host::compress(d, code, in.data(), n, stream.data(), bound - 1, &bytes, w, chunk_log2) ==
             Status::buffer_too_small);
  FUZZ_CHECK(host::compress(d, code, in.data(), n, stream.data(), bound, &bytes, w, chunk_log2) == Status::ok);
  std::vector<uint8_t> out(n * eb);
  uint8_t dummy = 0;
  FUZZ_CHECK(host::decompress(stream.data(), bytes, n ? out.data() : &dummy, out.size()) == Status::ok);
  FUZZ_CHECK(out == in);
  // truncation is always detected
  if (bytes > 64) FUZZ_CHECK(host::decompress(stream.data(), bytes - 1 - sel % 64, n ? out.data() : &dummy,
                                              out.size()) != Status::ok);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "ZPCM", 4) == 0)
    decoder_mode(data, size);
  else
    encoder_mode(data, size);
  return 0;
}

#ifdef ZIPCOMM_FUZZ_SEED_MAIN
#include <cmath>
#include <random>
#include <string>

namespace {

int g_written = 0;
void write_file(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());  // smoke test of the harness on its own seeds
  ++g_written;
}

uint16_t to_half(float x) {  // truncating float -> half (test data only)
  uint32_t b;
  std::memcpy(&b, &x, 4);
  uint32_t s = (b >> 16) & 0x8000u, E = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
  int e = int(E) - 112;
  if (E == 0xFF || e >= 31) return uint16_t(s | 0x7C00u | (E == 0xFF && m ? 0x200u : 0u));
  if (e <= 0) return e < -10 ? uint16_t(s) : uint16_t(s | ((m | 0x800000u) >> (14 - e)));
  return uint16_t(s | (uint32_t(e) << 10) | (m >> 13));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::mt19937_64 rng(20240601);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const char* dnames[5] = {"bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2"};
  const uint64_t sizes[] = {0, 1, 33, 256, 300, 1000, 16385};
  for (int di = 0; di < 5; ++di)
    for (uint64_t n : sizes)
      for (int kind = 0; kind < 5; ++kind) {  // gaussian, random bits, zeros+specials, half raw, escape-heavy
        if (n == 0 && kind) continue;
        const DType d = kDTypes[di];
        const uint32_t eb = format::elem_bytes(d);
        std::vector<uint8_t> in(n * eb);
        for (uint64_t i = 0; i < n; ++i) {
          float x = nd(rng) * std::ldexp(1.0f, int(i / 256 % 5) - (eb == 1 ? 2 : d == DType::fp16 ? 6 : 10));
          if (kind == 4 && i % 3 == 0) x = std::ldexp(x, -int(16 + rng() % 8));  // 16+ binades below: ESC
          uint32_t b;
          std::memcpy(&b, &x, 4);
          if (d == DType::bf16) b >>= 16;
          if (d == DType::fp16) b = to_half(x);
          if (d == DType::fp8_e5m2) b = to_half(x) >> 8;  // e5m2 is fp16's top byte (truncated)
          // e4m3: fp16 of x / 2^8 has e4m3's exponent bias (7); its bits 13..7 are e4m3's exponent and mantissa
          if (d == DType::fp8_e4m3) b = ((to_half(x * (1.0f / 256)) >> 7) & 0x7Fu) | ((to_half(x) >> 8) & 0x80u);
          if (kind == 1 || (kind == 3 && i >= n / 2)) b = uint32_t(rng());
          if (kind == 2) b = i % 97 == 0 ? (d == DType::fp32 ? 0x7FC00001u : 0x7E01u) : i % 5 == 0 ? b : 0;
          if (eb < 4) b &= 0xFFFFFFFFu >> (32 - 8 * eb);
          std::memcpy(&in[i * eb], &b, eb);
        }
        const uint64_t bound = format::max_compressed_bytes(d, n);
        std::vector<uint8_t> s(bound);
        uint64_t bytes = 0;
        if (host::compress(d, CodeId::pair, in.data(), n, s.data(), bound, &bytes) != Status::ok) return 1;
        s.resize(bytes);
        write_file(dir, std::string("stream_") + dnames[di] + "_" + std::to_string(n) + "_k" + std::to_string(kind), s);
      }
  // encoder-mode inputs: every selector value with random payload bytes
  for (int sel = 0; sel < 32; ++sel) {
    std::vector<uint8_t> in(1 + 512 + 64 * sel);
    for (auto& b : in) b = uint8_t(rng());
    in[0] = uint8_t(sel == 'Z' ? sel + 1 : sel);
    write_file(dir, "encode_sel" + std::to_string(sel), in);
  }
  std::printf("wrote %d seeds to %s\n", g_written, dir.c_str());
  return 0;
}
#endif
