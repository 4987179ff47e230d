// GPU tests of the device-wide codec in the fixed code (code 4), every dtype: device bytes == host reference bytes
// and exact round trips (every pattern, every size and chunk size, real tensors, unaligned pointers, the exception
// limit, small anchors), and every corrupt or truncated stream refused.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "device_codec_harness.cuh"

using namespace zipcomm;
using gpu_test::check_round_trip;
using gpu_test::device_compress;
using gpu_test::device_decompress;
using gpu_test::DeviceResult;
using Fixed = thread::FixedCode;

namespace {

/// Device bytes = host bytes and both decode, in every chunk size.
template <DType D>
void fixed_round_trip(const std::vector<uint8_t>& raw) {
  check_round_trip<D, Fixed>(raw);
  const uint64_t n = raw.size() / format::elem_bytes(D);
  for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2)
    if (log2 != format::default_chunk_log2(n) && n > (uint64_t(1) << format::MIN_CHUNK_LOG2))
      check_round_trip<D, Fixed>(raw, 0, 0, log2);
}

/// Every bit pattern of a 1- or 2-byte dtype, in order and shuffled, each 4 times.
template <DType D>
std::vector<uint8_t> all_patterns(std::mt19937_64& rng) {
  const uint32_t eb = format::elem_bytes(D), count = 1u << (8 * eb);
  std::vector<uint32_t> v(4 * count);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = i % count;
  std::shuffle(v.begin() + count, v.end(), rng);
  std::vector<uint8_t> raw(v.size() * eb);
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(&raw[i * eb], &v[i], eb);
  return raw;
}

/// Sets every `every`-th element to zero (an exception whenever its tile's anchor is 7 or more).
std::vector<uint8_t> with_zeros(std::vector<uint8_t> raw, size_t eb, uint64_t every) {
  for (size_t i = 0; i < raw.size() / eb; i += every) std::memset(&raw[i * eb], 0, eb);
  return raw;
}

/// Bytes of chunk c's exponent stream in a stream of one dtype.
uint64_t chunk_stream_bytes(const std::vector<uint8_t>& stream, uint64_t c) {
  format::Header h;
  std::memcpy(&h, stream.data(), sizeof h);
  const format::Layout L = format::layout_of(h);
  uint64_t end = 0, start = 0;
  std::memcpy(&end, &stream[L.table_offset + 8 * c], 8);
  if (c) std::memcpy(&start, &stream[L.table_offset + 8 * (c - 1)], 8);
  return end - start;
}

const uint64_t kSizes[] = {0, 1, 7, 31, 32, 33, 255, 256, 257, 4095, 16383, 16384, 16385, 3 * 16384 + 77, 1000003};

}  // namespace

TEMPLATE_TEST_CASE("fixed code: device bytes equal host bytes and round trip, Gaussian data, all sizes",
                   "[gpu][codec][fixed]", gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32, gpu_test::Fp8E4M3,
                   gpu_test::Fp8E5M2) {
  constexpr DType D = TestType::value;
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (uint64_t n : kSizes) fixed_round_trip<D>(gpu_test::gaussian_bytes(D, n, 0.02f, rng));
  auto lows = gpu_test::gaussian_bytes(D, 3 * 16384 + 1000, 0.02f, rng);
  gpu_test::drop_low_bits_in_some_tiles(D, lows, rng);
  fixed_round_trip<D>(lows);
}

TEMPLATE_TEST_CASE("fixed code: every bit pattern, in order and shuffled", "[gpu][codec][fixed]", gpu_test::Bf16,
                   gpu_test::Fp16, gpu_test::Fp8E4M3, gpu_test::Fp8E5M2) {
  std::mt19937_64 rng(gpu_test::fresh_seed());
  fixed_round_trip<TestType::value>(all_patterns<TestType::value>(rng));
}

TEST_CASE("fixed code: the exception limit, zeros, small anchors and special values", "[gpu][codec][fixed]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = 4 * 16384;
  const auto g = gpu_test::gaussian_bytes(DType::bf16, n, 0.02f, rng);
  // One element in five zero: past one exception in eight, every chunk raw. One in twenty: every chunk coded.
  const auto many = with_zeros(g, 2, 5), few = with_zeros(g, 2, 20);
  check_round_trip<DType::bf16, Fixed>(many, 0, 0, 14);
  check_round_trip<DType::bf16, Fixed>(few, 0, 0, 14);
  const DeviceResult raw_chunks = device_compress<DType::bf16, Fixed>(many, 0, 14);
  const DeviceResult coded_chunks = device_compress<DType::bf16, Fixed>(few, 0, 14);
  for (uint64_t c = 0; c < 4; ++c) {
    REQUIRE(chunk_stream_bytes(raw_chunks.stream, c) == format::raw_chunk_bytes(DType::bf16, 16384));
    REQUIRE(chunk_stream_bytes(coded_chunks.stream, c) < format::raw_chunk_bytes(DType::bf16, 16384));
  }
  // Tiles of tiny magnitudes (anchors 0 to 8: subnormals and the smallest normals), all-zero tiles, and tiles whose
  // exceptions sit in every item position.
  std::vector<uint8_t> tiny(2 * n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t tile = uint32_t(i / 256);
    const uint32_t a = tile % 10, e = a ? uint32_t(rng() % (a + 1)) : 0u;
    const uint16_t v = tile % 10 == 9 ? 0 : uint16_t((rng() & 0x807Fu) | (e << 7));
    std::memcpy(&tiny[2 * i], &v, 2);
  }
  fixed_round_trip<DType::bf16>(tiny);
  // fp32 specials: NaN payloads, infinities, subnormals, signed zeros among Gaussian values.
  auto f = gpu_test::gaussian_bytes(DType::fp32, 100000, 0.02f, rng);
  const uint32_t specials[] = {0x7F800000u, 0xFF800000u, 0x7FC00001u, 0x00000001u, 0x80000000u, 0x007FFFFFu};
  for (int k = 0; k < 3000; ++k) std::memcpy(&f[4 * (rng() % 100000)], &specials[rng() % 6], 4);
  fixed_round_trip<DType::fp32>(f);
  std::vector<uint8_t> noise(2 * 50000);
  for (auto& b : noise) b = uint8_t(rng());
  fixed_round_trip<DType::bf16>(noise);  // incompressible: every chunk raw
}

TEST_CASE("fixed code: real training tensors", "[gpu][codec][fixed]") {
  const std::string dir = ZIPCOMM_TEST_DATA_DIR;
  auto grads = gpu_test::read_file(dir + "/llama_grads.bf16");
  REQUIRE(!grads.empty());
  fixed_round_trip<DType::bf16>(grads);
  fixed_round_trip<DType::bf16>(gpu_test::read_file(dir + "/llama_acts.bf16"));
  fixed_round_trip<DType::bf16>(gpu_test::read_file(dir + "/llama_weights.bf16"));
  fixed_round_trip<DType::fp16>(gpu_test::read_file(dir + "/llama_grads_scaled.f16"));
  fixed_round_trip<DType::fp32>(gpu_test::read_file(dir + "/llama_grads.f32"));
  fixed_round_trip<DType::fp32>(gpu_test::read_file(dir + "/tiny_lm_grads_fp32.f32"));
  fixed_round_trip<DType::fp8_e4m3>(gpu_test::read_file(dir + "/llama_acts.e4m3"));
  fixed_round_trip<DType::fp8_e5m2>(gpu_test::read_file(dir + "/llama_grads.e5m2"));
}

TEST_CASE("fixed code: unaligned input and output pointers give the same bytes", "[gpu][codec][fixed]") {
  std::mt19937_64 rng(gpu_test::fresh_seed());
  auto raw = gpu_test::gaussian_bytes(DType::bf16, 40000, 0.02f, rng);
  for (size_t off : {1u, 2u, 3u, 8u, 15u}) check_round_trip<DType::bf16, Fixed>(raw, off, off);
  auto raw8 = gpu_test::gaussian_bytes(DType::fp8_e4m3, 40000, 0.02f, rng);
  for (size_t off : {1u, 7u}) check_round_trip<DType::fp8_e4m3, Fixed>(raw8, off, 16 - off);
}

TEST_CASE("fixed code: streams of the other code or dtype are refused by their header", "[gpu][codec][fixed]") {
  std::mt19937_64 rng(gpu_test::fresh_seed());
  const uint64_t n = 20000;
  auto raw = gpu_test::gaussian_bytes(DType::bf16, n, 0.02f, rng);
  const DeviceResult fixed = device_compress<DType::bf16, Fixed>(raw);
  const DeviceResult pair = device_compress<DType::bf16, thread::PairCode>(raw);
  REQUIRE(fixed.status == Status::ok);
  REQUIRE(pair.status == Status::ok);
  std::vector<uint8_t> back;
  REQUIRE(device_decompress<DType::bf16, thread::PairCode>(fixed.stream, n, back) == Status::bad_header);
  REQUIRE(device_decompress<DType::bf16, Fixed>(pair.stream, n, back) == Status::bad_header);
  REQUIRE(device_decompress<DType::fp16, Fixed>(fixed.stream, n, back) == Status::bad_header);
  REQUIRE(device_decompress<DType::bf16, Fixed>(fixed.stream, n, back) == Status::ok);
  REQUIRE(back == raw);
}

namespace {
/// Every single-bit flip of a small stream (all sections) and random flips in a larger one: the device decoder
/// refuses each, as the host decoder does, and never returns ok; then truncations.
template <DType D>
void fixed_flips_refused(std::mt19937_64& rng) {
  {
    const uint64_t n = 300;  // two tiles, the last one short
    auto raw = gpu_test::gaussian_bytes(D, n, 0.02f, rng);
    const DeviceResult dev = device_compress<D, Fixed>(raw, 0, 12);
    REQUIRE(dev.status == Status::ok);
    for (uint64_t bit = 0; bit < 8 * dev.stream.size(); ++bit) {
      std::vector<uint8_t> bad = dev.stream, out;
      bad[bit / 8] ^= uint8_t(1u << (bit % 8));
      CAPTURE(bit);
      REQUIRE(device_decompress<D, Fixed>(bad, n, out) != Status::ok);
    }
  }
  const uint64_t n = 3 * 16384 + 1000;
  auto raw = with_zeros(gpu_test::gaussian_bytes(D, n, 0.02f, rng), format::elem_bytes(D), 37);
  gpu_test::drop_low_bits_in_some_tiles(D, raw, rng);
  const DeviceResult dev = device_compress<D, Fixed>(raw);
  REQUIRE(dev.status == Status::ok);
  format::Header h;
  std::memcpy(&h, dev.stream.data(), sizeof h);
  const format::Layout L = format::layout_of(h);
  for (int k = 0; k < 300; ++k) {
    std::vector<uint8_t> bad = dev.stream, host_out(raw.size()), dev_out;
    // Half of the flips in the exponent section: codes, anchors, exceptions.
    const uint64_t pos = k % 2 ? L.exp_offset + rng() % (dev.stream.size() - L.exp_offset) : rng() % dev.stream.size();
    bad[pos] ^= uint8_t(1u << (rng() % 8));
    const Status hs = host::decompress(bad.data(), bad.size(), host_out.data(), host_out.size());
    const Status ds = device_decompress<D, Fixed>(bad, n, dev_out);
    CAPTURE(k, pos, status_string(hs), status_string(ds));
    REQUIRE(hs != Status::ok);
    REQUIRE(ds != Status::ok);
  }
  for (size_t cut : {size_t(0), size_t(64), size_t(L.exp_offset), dev.stream.size() - 16, dev.stream.size() - 1}) {
    std::vector<uint8_t> t(dev.stream.begin(), dev.stream.begin() + cut), out;
    CAPTURE(cut);
    REQUIRE(device_decompress<D, Fixed>(t, n, out) != Status::ok);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("fixed code: single-bit flips and truncations give an error status on the device",
                   "[gpu][codec][fixed]", gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32, gpu_test::Fp8E4M3,
                   gpu_test::Fp8E5M2) {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  fixed_flips_refused<TestType::value>(rng);
}
