// Uses the installed headers the way a host-side user would: compress and decompress with the reference codec.
#include <zipcomm/host/reference_codec.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<uint16_t> x(50000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = uint16_t(0x3C00u + (i * 2654435761u >> 20) % 512);  // bf16 bits
  std::vector<uint8_t> out(zipcomm::format::max_compressed_bytes(zipcomm::DType::bf16, x.size()));
  uint64_t bytes = 0;
  if (zipcomm::host::compress(zipcomm::DType::bf16, zipcomm::CodeId::pair, x.data(), x.size(), out.data(),
                              out.size(), &bytes) != zipcomm::Status::ok)
    return 1;
  std::vector<uint16_t> back(x.size());
  if (zipcomm::host::decompress(out.data(), bytes, back.data(), back.size() * 2) != zipcomm::Status::ok) return 1;
  std::printf("consumer: %zu bytes -> %llu bytes, round trip %s\n", x.size() * 2, (unsigned long long)bytes,
              back == x ? "exact" : "WRONG");
  return back == x ? 0 : 1;
}
