// A lane's bit-planes by words (thread::bytes_to_bit_planes / bit_planes_to_bytes: fp8 plane 0, fp16 low bits)
// against the format's layout as the host reference writes it (host::detail::put_bit_planes).
#include "test_util.hpp"

#include <zipcomm/host/reference_codec.hpp>
#include <zipcomm/thread/bit_planes.hpp>

using namespace zipcomm;

namespace {

// Lane `lane`'s 8 values v (each below 2^planes) through the reference writer: its plane bytes as one word.
uint32_t reference_planes(const uint32_t (&v)[8], uint32_t planes, uint32_t lane) {
  uint32_t values[format::TILE_ELEMS] = {};
  for (uint32_t i = 0; i < 8; ++i) values[lane * 8 + i] = v[i];
  uint8_t out[4 * format::LANES] = {};
  host::detail::put_bit_planes(values, format::TILE_ELEMS, planes, out);
  uint32_t w = 0;
  for (uint32_t j = 0; j < planes; ++j) w |= uint32_t(out[j * format::LANES + lane]) << (8 * j);
  return w;
}

template <uint32_t P>
void check_lane(const uint32_t (&v)[8], uint32_t lane) {
  uint32_t lo = 0, hi = 0;
  for (uint32_t i = 0; i < 4; ++i) lo |= v[i] << (8 * i), hi |= v[4 + i] << (8 * i);
  const uint32_t planes = thread::bytes_to_bit_planes<P>(lo, hi);
  REQUIRE(planes == reference_planes(v, P, lane));
  uint32_t lo2 = ~0u, hi2 = ~0u;
  thread::bit_planes_to_bytes<P>(planes, lo2, hi2);
  REQUIRE(lo2 == lo);
  REQUIRE(hi2 == hi);
}

}  // namespace

TEST_CASE("fp8 plane 0 by words: every e5m2 lane (3 planes) both ways", "[fp8][planes]") {
  // 2^24 plane words: each one to values and back, and a sample of them against the reference writer.
  ZT_RNG("planes e5m2");
  uint32_t mismatches = 0;
  for (uint32_t w = 0; w < (1u << 24); ++w) {
    uint32_t lo, hi;
    thread::bit_planes_to_bytes<3>(w, lo, hi);
    mismatches += ((lo | hi) & 0xF8F8F8F8u) != 0 || thread::bytes_to_bit_planes<3>(lo, hi) != w;
  }
  REQUIRE(mismatches == 0);
  for (int trial = 0; trial < 20000; ++trial) {
    uint32_t v[8];
    for (auto& x : v) x = uint32_t(rng()) & 7u;
    check_lane<3>(v, uint32_t(rng()) % format::LANES);
  }
}

TEST_CASE("fp8 plane 0 by words: e4m3 lanes (4 planes), random and every single value", "[fp8][planes]") {
  ZT_RNG("planes e4m3");
  for (uint32_t i = 0; i < 8; ++i)
    for (uint32_t x = 0; x < 16; ++x) {
      uint32_t v[8] = {};
      v[i] = x;
      check_lane<4>(v, i);
    }
  for (int trial = 0; trial < 50000; ++trial) {
    uint32_t v[8];
    for (auto& x : v) x = uint32_t(rng()) & 15u;
    check_lane<4>(v, uint32_t(rng()) % format::LANES);
  }
}
