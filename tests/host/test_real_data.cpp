// Real tensors (cuts of the LLaMA training run and two small fp32 gradient tensors in tests/data, see
// tests/data/README.md): bit-exact round trip and compression-ratio bounds (stream bytes / raw bytes, all
// metadata included).
//
// Bounds are measured ratio (format v2) + 0.003. Full-file Gaussian-code figures for reference: grads bf16
// 0.6647, acts bf16 0.6701, weights bf16 0.6676, fp16 scaled grads 0.8520, fp32 grads 0.8277.
#include "test_util.hpp"

#include <fstream>
#include <iterator>

using namespace zipcomm;

namespace {

struct RealCase {
  const char* file;
  DType dtype;
  double gaussian_bound, window3_bound;  // measured + 0.003 (measured values in the comments)
};

// clang-format off
const RealCase kCases[] = {
    // file                     dtype        gaussian          window3           measured on the cuts (gaussian, window3)
    {"llama_grads.bf16",       DType::bf16, 0.67114 + 0.003, 0.71985 + 0.003},  // 0.67114, 0.71985 (full file 0.6647)
    {"llama_acts.bf16",        DType::bf16, 0.67041 + 0.003, 0.72021 + 0.003},  // 0.67041, 0.72021 (full file 0.6701)
    {"llama_weights.bf16",     DType::bf16, 0.66821 + 0.003, 0.72021 + 0.003},  // 0.66821, 0.72021 (full file 0.6676)
    {"llama_grads_scaled.f16", DType::fp16, 0.85815 + 0.003, 0.89722 + 0.003},  // 0.85815, 0.89722 (full file 0.8520)
    {"llama_grads.f32",        DType::fp32, 0.83606 + 0.003, 0.86108 + 0.003},  // 0.83606, 0.86108 (full file 0.8277)
    // Genuinely fp32 gradients (whole tensors, not cuts; scripts/make_fp32_samples.py): plain fp32 training, and
    // bf16 autocast (89% of the values bf16 widened to fp32). window3 stores some of their chunks raw.
    {"tiny_lm_grads_fp32.f32",     DType::fp32, 0.84629 + 0.003, 0.90814 + 0.003},  // 0.84629, 0.90814
    {"tiny_lm_grads_autocast.f32", DType::fp32, 0.85062 + 0.003, 0.94238 + 0.003},  // 0.85062, 0.94238
};
// clang-format on

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
    for (CodeId c : zt::kCodes) {
      const auto s = zt::roundtrip(c, t);
      const double ratio = double(s.size()) / double(t.bytes.size());
      const double bound = c == CodeId::gaussian ? rc.gaussian_bound : rc.window3_bound;
      std::printf("real data: %-26s %-8s n=%-7llu ratio %.5f (bound %.5f), raw chunks %llu\n", rc.file,
                  zt::code_name(c), static_cast<unsigned long long>(t.n), ratio, bound,
                  static_cast<unsigned long long>(zt::raw_chunks(s)));
      INFO(rc.file << " " << zt::code_name(c) << " ratio " << ratio);
      CHECK(ratio <= bound);
      CHECK(ratio > 0.5);  // sign + mantissa are stored raw: nothing can go below this
    }
  }
}
