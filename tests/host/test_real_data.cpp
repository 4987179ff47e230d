// Real tensors (cuts of the LLaMA training run, their fp8 conversions and two small fp32 gradient tensors in
// tests/data, see tests/data/README.md): bit-exact round trip and compression-ratio bounds (stream bytes / raw
// bytes, all metadata included).
//
// Bounds are the measured ratio (pair code: format v5; fixed code: v6) + 0.002. Full-file figures of the pair code
// for reference: grads bf16 0.6642, acts bf16 0.6684, weights bf16 0.6686, fp16 scaled grads 0.6813, fp32 grads
// 0.3276; fp8_e4m3 grads 0.8275, acts 0.8378, weights 0.8355; fp8_e5m2 grads 0.7035, acts 0.7130, weights 0.7105.
#include "test_util.hpp"

#include <fstream>
#include <iterator>

using namespace zipcomm;

namespace {

struct RealCase {
  const char* file;
  DType dtype;
  double measured;  // ratio measured on the file here (the bound is measured + 0.002)
  double fixed;     // the same in the fixed code
};

// clang-format off
const RealCase kCases[] = {
    // file                         dtype        measured  fixed
    {"llama_grads.bf16",           DType::bf16, 0.66931, 0.70422},  // full file 0.6642
    {"llama_acts.bf16",            DType::bf16, 0.66846, 0.70447},  // full file 0.6684
    {"llama_weights.bf16",         DType::bf16, 0.66931, 0.70459},  // full file 0.6686
    {"llama_grads_scaled.f16",     DType::fp16, 0.69128, 0.72620},  // full file 0.6813 (bf16-derived: 3 low bits zero)
    {"llama_grads.f32",            DType::fp32, 0.33569, 0.35303},  // full file 0.3276 (bf16 widened: 16 low bits zero)
    // Genuinely fp32 gradients (whole tensors, not cuts; scripts/make_fp32_samples.py): plain fp32 training, and
    // bf16 autocast (89% of the values bf16 widened to fp32).
    {"tiny_lm_grads_fp32.f32",     DType::fp32, 0.84824, 0.86146},
    {"tiny_lm_grads_autocast.f32", DType::fp32, 0.43085, 0.44396},
    // fp8 with one amax scale per tensor (scripts/make_fp8_samples.py): the sign and mantissa (4 or 3 bits) are
    // stored raw, the exponent (4 or 5 bits) coded.
    {"llama_grads.e4m3",           DType::fp8_e4m3, 0.83813, 0.90869},  // full file 0.8275
    {"llama_acts.e4m3",            DType::fp8_e4m3, 0.83838, 0.90723},  // full file 0.8378
    {"llama_weights.e4m3",         DType::fp8_e4m3, 0.83838, 0.90991},  // full file 0.8355
    {"llama_grads.e5m2",           DType::fp8_e5m2, 0.71362, 0.78369},  // full file 0.7035
    {"llama_acts.e5m2",            DType::fp8_e5m2, 0.71338, 0.78174},  // full file 0.7130
    {"llama_weights.e5m2",         DType::fp8_e5m2, 0.71436, 0.78394},  // full file 0.7105
};
// clang-format on
constexpr double kSlack = 0.002;
constexpr uint64_t kSmallChunkBytes = 200;

zt::Tensor load(const RealCase& rc) {
  const std::string path = std::string(ZIPCOMM_TEST_DATA_DIR) + "/" + rc.file;
  std::ifstream f(path, std::ios::binary);
  INFO("reading " << path);
  REQUIRE(f.good());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() % format::elem_bytes(rc.dtype) == 0);
  REQUIRE(bytes.size() > 0);
  zt::Tensor t(rc.dtype, bytes.size() / format::elem_bytes(rc.dtype));
  t.bytes = std::move(bytes);
  return t;
}

}  // namespace

TEST_CASE("real tensors round trip bit-exactly within ratio bounds", "[real]") {
  for (const RealCase& rc : kCases) {
    const zt::Tensor t = load(rc);
    const auto s = zt::roundtrip(CodeId::pair, t, format::MAX_CHUNK_LOG2);
    const double ratio = double(s.size()) / double(t.bytes.size());
    const double bound = rc.measured + kSlack;
    std::printf("real data: %-26s pair n=%-7llu ratio %.5f (bound %.5f), raw chunks %llu", rc.file,
                static_cast<unsigned long long>(t.n), ratio, bound, static_cast<unsigned long long>(zt::raw_chunks(s)));
    INFO(rc.file << " ratio " << ratio);
    CHECK(ratio <= bound);
    // Smaller chunks cost their chunk headers, table entries and the padding of their lane streams: at most
    // kSmallChunkBytes per extra chunk.
    for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 < format::MAX_CHUNK_LOG2; ++log2) {
      const auto small = zt::roundtrip(CodeId::pair, t, log2);
      const uint64_t extra = zt::chunks_of(small) - zt::chunks_of(s);
      std::printf(", %u-element chunks %.5f", 1u << log2, double(small.size()) / double(t.bytes.size()));
      INFO("chunk_log2 " << log2 << ": " << small.size() << " bytes against " << s.size());
      CHECK(small.size() <= s.size() + extra * kSmallChunkBytes);
    }
    const auto f = zt::roundtrip(CodeId::fixed, t, format::MAX_CHUNK_LOG2);
    const double fixed_ratio = double(f.size()) / double(t.bytes.size());
    std::printf(", fixed code %.5f\n", fixed_ratio);
    CHECK(fixed_ratio <= rc.fixed + kSlack);
    // plane 0 (the sign and the top 7 mantissa bits; fp8: the sign and its mantissa) is stored raw: nothing
    // can go below it
    const double plane0 = format::plane0_bit_planes(rc.dtype) ? format::plane0_planes(rc.dtype) / 8.0
                                                                : 1.0 / format::elem_bytes(rc.dtype);
    CHECK(ratio > plane0);
  }
}
