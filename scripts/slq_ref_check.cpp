// Cross-check for scripts/slq_study.py (which compiles and runs it): the study's numpy quantizer must give the
// host reference's bits (include/zipcomm/quant/reference_quant.hpp).
//
//   slq_ref_check FILE GROUP...
// FILE holds tensors as records: uint64 n, then n little-endian fp32 values. For every group size given, both
// modes and b = 2..8, each tensor is quantized (its own message) and dequantized with the host reference, and
// one line is printed:  group mode bits message_bytes checksum
// where message_bytes sums the tensors' message sizes and checksum = sum over the concatenated dequantized
// elements of ((bits_i XOR low32(i * 0x9E3779B1)) * (2i + 1)) mod 2^64, i counting across tensors. The script
// computes the same sum over its own output.
#include <zipcomm/quant/reference_quant.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace zipcomm;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE GROUP...\n", argv[0]);
    return 2;
  }
  std::FILE* f = std::fopen(argv[1], "rb");
  if (!f) {
    std::perror(argv[1]);
    return 2;
  }
  std::vector<std::vector<float>> tensors;
  uint64_t n;
  while (std::fread(&n, 8, 1, f) == 1) {
    std::vector<float> t(n);
    if (std::fread(t.data(), 4, n, f) != n) {
      std::fprintf(stderr, "%s: truncated record\n", argv[1]);
      return 2;
    }
    tensors.push_back(std::move(t));
  }
  std::fclose(f);
  for (int a = 2; a < argc; ++a) {
    const uint32_t group = static_cast<uint32_t>(std::strtoul(argv[a], nullptr, 10));
    for (quant::QuantMode mode : {quant::QuantMode::asymmetric, quant::QuantMode::symmetric})
      for (uint32_t bits = quant::MIN_BITS; bits <= quant::MAX_BITS; ++bits) {
        uint64_t bytes = 0, sum = 0, i = 0;
        std::vector<uint8_t> msg;
        std::vector<float> out;
        for (const std::vector<float>& t : tensors) {
          msg.resize(quant::max_quantized_bytes(mode, bits, group, t.size()));
          out.resize(t.size());
          uint64_t got = 0;
          Status s = quant::host::quantize(DType::fp32, mode, bits, group, t.data(), t.size(), msg.data(),
                                           msg.size(), &got);
          if (s == Status::ok) s = quant::host::dequantize(msg.data(), got, out.data(), 4 * out.size());
          if (s != Status::ok) {
            std::fprintf(stderr, "group %u %s bits %u: %s\n", group, quant::mode_name(mode), bits,
                         status_string(s));
            return 1;
          }
          bytes += got;
          for (float v : out) {
            uint32_t b;
            std::memcpy(&b, &v, 4);
            sum += (uint64_t(b) ^ ((i * 0x9E3779B1ull) & 0xFFFFFFFFull)) * (2 * i + 1);
            ++i;
          }
        }
        std::printf("%u %s %u %llu %llu\n", group, quant::mode_name(mode), bits,
                    static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(sum));
        std::fflush(stdout);
      }
  }
  return 0;
}
