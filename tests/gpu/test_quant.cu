// GPU tests of the quantization tier ("ZPQT", LOSSY): the device quantizer writes the host reference's bytes and
// the device dequantizer reconstructs the host reference's elements, for every dtype, bit width, group size and
// mode, odd sizes, constant groups, ties, extreme ranges and real tensors; NaN and infinity are refused; bad
// arguments and corrupt or truncated messages give the host reference's status without a write outside the
// destination.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <zipcomm/host/reference_codec.hpp>
#include <zipcomm/quant/device_quant.cuh>
#include <zipcomm/quant/reference_quant.hpp>

#include "gpu_test_util.cuh"

using namespace zipcomm;
using gpu_test::DeviceBuffer;
using quant::QuantMode;

namespace {

constexpr DType kDTypes[] = {DType::bf16, DType::fp16, DType::fp32};
constexpr QuantMode kModes[] = {QuantMode::asymmetric, QuantMode::symmetric};
constexpr uint32_t kGroups[] = {32, 64, 128};
constexpr size_t kGuard = 64;  // guard bytes around every device output (a multiple of 16: alignment is kept)
constexpr uint8_t kGuardByte = 0xA5;

uint32_t f32_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

void set_elem(DType d, std::vector<uint8_t>& raw, uint64_t i, uint32_t bits) {
  std::memcpy(&raw[i * format::elem_bytes(d)], &bits, format::elem_bytes(d));
}
/// x in dtype d, rounded to nearest even (fp16: x must lie within its range).
uint32_t from_float(DType d, float x) {
  return d == DType::fp32 ? f32_bits(x) : d == DType::bf16 ? gpu_test::to_bf16(x) : gpu_test::to_fp16(x);
}

/// n elements of dtype d: gpu_test::quant_test_values, rounded to nearest even.
std::vector<uint8_t> quant_data(DType d, uint64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> raw(n * format::elem_bytes(d));
  const std::vector<float> v = gpu_test::quant_test_values(n, d == DType::fp16, rng);
  for (uint64_t i = 0; i < n; ++i) set_elem(d, raw, i, from_float(d, v[i]));
  return raw;
}

struct Quantized {
  Status status;
  std::vector<uint8_t> msg;
};

/// Quantizes on the device into a guarded, poisoned buffer (every byte of the message must be written); checks
/// the guards and the return code.
Quantized device_quantize(const std::vector<uint8_t>& raw, DType d, QuantMode mode, uint32_t bits, uint32_t group,
                          size_t in_offset = 0) {
  const uint64_t n = raw.size() / format::elem_bytes(d);
  const uint64_t size = quant::max_quantized_bytes(mode, bits, group, n);
  DeviceBuffer in(raw.size() + in_offset + 16), out(size + 2 * kGuard), meta(16);
  if (!raw.empty()) CUDA_OK(cudaMemcpy(in.as(in_offset), raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(out.ptr, kGuardByte, out.bytes));
  CUDA_OK(quant::device::quantize(in.as(in_offset), n, d, mode, bits, group, out.as(kGuard), size, meta.as<Status>()));
  CUDA_OK(cudaDeviceSynchronize());
  Quantized r;
  CUDA_OK(cudaMemcpy(&r.status, meta.ptr, sizeof(Status), cudaMemcpyDeviceToHost));
  std::vector<uint8_t> all(out.bytes);
  CUDA_OK(cudaMemcpy(all.data(), out.ptr, out.bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < kGuard; ++i) {
    REQUIRE(all[i] == kGuardByte);
    REQUIRE(all[kGuard + size + i] == kGuardByte);
  }
  r.msg.assign(all.begin() + kGuard, all.begin() + kGuard + size);
  return r;
}

std::vector<uint8_t> host_quantize_ok(const std::vector<uint8_t>& raw, DType d, QuantMode mode, uint32_t bits,
                                      uint32_t group) {
  const uint64_t n = raw.size() / format::elem_bytes(d);
  std::vector<uint8_t> msg(quant::max_quantized_bytes(mode, bits, group, n));
  uint64_t bytes = 0;
  REQUIRE(quant::host::quantize(d, mode, bits, group, raw.data(), n, msg.data(), msg.size(), &bytes) == Status::ok);
  REQUIRE(bytes == msg.size());
  return msg;
}

struct Dequantized {
  Status status;
  std::vector<uint8_t> out;
  bool untouched;  // every byte of the destination still holds the poison
};

/// Dequantizes on the device into a guarded destination of `capacity` bytes at `out_offset` past a 16-byte
/// boundary, poisoned first; the message lies at the very end of its allocation when in_pad = 0 (a read past it
/// is then a memcheck error). Checks that nothing outside the destination was written.
Dequantized device_dequantize(const std::vector<uint8_t>& msg, DType out_dtype, uint64_t capacity,
                              size_t out_offset = 0, size_t in_pad = 16) {
  DeviceBuffer in(msg.size() + in_pad), dst(capacity + out_offset + 2 * kGuard), meta(16);
  if (!msg.empty()) CUDA_OK(cudaMemcpy(in.ptr, msg.data(), msg.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dst.ptr, kGuardByte, dst.bytes));
  const cudaError_t e = quant::device::dequantize(in.ptr, msg.size(), out_dtype, dst.as(kGuard + out_offset),
                                                  capacity, meta.as<Status>());
  REQUIRE((e == cudaSuccess || e == cudaErrorInvalidValue));
  CUDA_OK(cudaDeviceSynchronize());
  Dequantized r;
  CUDA_OK(cudaMemcpy(&r.status, meta.ptr, sizeof(Status), cudaMemcpyDeviceToHost));
  REQUIRE((e == cudaSuccess) == (msg.size() >= quant::HEADER_BYTES));  // a shorter one is refused on the host
  std::vector<uint8_t> all(dst.bytes);
  CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < kGuard + out_offset; ++i) REQUIRE(all[i] == kGuardByte);
  for (size_t i = kGuard + out_offset + capacity; i < all.size(); ++i) REQUIRE(all[i] == kGuardByte);
  r.out.assign(all.begin() + kGuard + out_offset, all.begin() + kGuard + out_offset + capacity);
  r.untouched = std::all_of(r.out.begin(), r.out.end(), [](uint8_t b) { return b == kGuardByte; });
  return r;
}

/// The host reference's dequantization into out_dtype (status and output). An empty message is passed as a
/// valid pointer and 0 bytes, as the device gets it.
Status host_dequantize(const std::vector<uint8_t>& msg, DType out_dtype, uint64_t capacity, std::vector<uint8_t>& out) {
  out.assign(capacity + 1, 0);  // + 1: a valid pointer when the capacity is 0
  const uint8_t none = 0;
  const Status s = quant::host::dequantize(msg.empty() ? &none : msg.data(), msg.size(), out.data(), capacity,
                                           out_dtype);
  out.resize(capacity);
  return s;
}

void require_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  if (got != want) {
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    FAIL(what << " differs from the host reference at byte " << i << " of " << want.size() << ": 0x" << std::hex
              << int(got[i]) << ", host 0x" << int(want[i]));
  }
}

/// Device message == host message; device dequantization into every dtype == host dequantization.
void check_against_host(const std::vector<uint8_t>& raw, DType d, QuantMode mode, uint32_t bits, uint32_t group,
                        size_t in_offset = 0, size_t out_offset = 0) {
  const uint64_t n = raw.size() / format::elem_bytes(d);
  INFO("dtype " << dtype_name(d) << " mode " << quant::mode_name(mode) << " bits " << bits << " group " << group
                << " n " << n << " in_offset " << in_offset << " out_offset " << out_offset);
  const std::vector<uint8_t> want = host_quantize_ok(raw, d, mode, bits, group);
  const Quantized got = device_quantize(raw, d, mode, bits, group, in_offset);
  REQUIRE(got.status == Status::ok);
  require_same_bytes(got.msg, want, "device message");
  for (DType o : kDTypes) {
    INFO("into " << dtype_name(o));
    const uint64_t capacity = n * format::elem_bytes(o);
    std::vector<uint8_t> host_out;
    REQUIRE(host_dequantize(want, o, capacity, host_out) == Status::ok);
    const Dequantized dev = device_dequantize(want, o, capacity, out_offset);
    REQUIRE(dev.status == Status::ok);
    require_same_bytes(dev.out, host_out, "device dequantization");
  }
}

}  // namespace

TEST_CASE("quant: device messages and reconstructions equal the host reference's, every dtype x b x G x mode",
          "[gpu][quant][configs]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (DType d : kDTypes)
    for (QuantMode mode : kModes)
      for (uint32_t bits = quant::MIN_BITS; bits <= quant::MAX_BITS; ++bits)
        for (uint32_t group : kGroups) {
          // empty, short, one element past a group, a lane or a tile, odd sizes, and a few thousand groups
          const uint64_t sizes[] = {0,    1,    31,   33,   group - 1,         group + 1,
                                    511,  513,  1023, 1025, 1 + rng() % 5000, 20000 + rng() % 40000};
          for (uint64_t n : sizes) check_against_host(quant_data(d, n, rng), d, mode, bits, group);
        }
}

TEST_CASE("quant: constant and all-zero groups, ties, signed zeros, subnormal and huge ranges", "[gpu][quant]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType d : kDTypes) {
    const uint32_t big = d == DType::fp16 ? 0x7BFFu : d == DType::bf16 ? 0x7F7Fu : 0x7F7FFFFFu;
    const uint32_t sign = d == DType::fp32 ? 0x80000000u : 0x8000u;
    for (uint32_t group : kGroups) {
      // one kind per group: constant values (zero, -0, ordinary, the largest finite of both signs), -0 and +0
      // mixed, integer ties, subnormals only, a subnormal range on a normal value, huge values (fp32: the scale
      // leaves [2^-64, 2^64] and the device takes the reference's division), tiny ordinary ranges
      const uint64_t n = 13 * uint64_t(group) + 5;
      std::vector<uint8_t> raw(n * format::elem_bytes(d));
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t g = i / group;
        uint32_t v = 0;
        switch (g % 13) {
          case 0: v = 0; break;
          case 1: v = sign; break;
          case 2: v = from_float(d, 0.75f); break;
          case 3: v = big; break;
          case 4: v = big | sign; break;
          case 5: v = rng() % 2 ? 0 : sign; break;
          case 6: v = from_float(d, float(int(rng() % 8)) - 3.5f); break;       // x.5 steps: ties in most b
          case 7: v = uint32_t(rng() % 3) | (rng() % 2 ? sign : 0u); break;    // subnormals and zeros
          case 8: v = from_float(d, 1.0f) + uint32_t(rng() % 2); break;         // a one-ulp range
          case 9:  // fp16: near its largest values; bf16, fp32: a scale above 2^64
            v = from_float(d, d == DType::fp16 ? std::clamp(1e4f * nd(rng), -6e4f, 6e4f) : 1e30f * nd(rng));
            break;
          case 10: v = from_float(d, d == DType::fp16 ? 1e-3f * nd(rng) : 1e-25f * nd(rng)); break;
          case 11: v = from_float(d, float(int(rng() % 16))); break;            // integers: every code exact
          default: v = from_float(d, nd(rng)); break;
        }
        set_elem(d, raw, i, v);
      }
      for (QuantMode mode : kModes)
        for (uint32_t bits = quant::MIN_BITS; bits <= quant::MAX_BITS; ++bits)
          check_against_host(raw, d, mode, bits, group);
    }
  }
}

TEST_CASE("quant: NaN and infinity are refused with not_finite, as are ranges that overflow; no reader takes the "
          "message",
          "[gpu][quant]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (DType d : kDTypes) {
    const uint32_t inf = d == DType::fp32 ? 0x7F800000u : d == DType::bf16 ? 0x7F80u : 0x7C00u;
    const uint32_t sign = d == DType::fp32 ? 0x80000000u : 0x8000u;
    const uint32_t payload = d == DType::fp32 ? 0x00400001u : d == DType::bf16 ? 0x41u : 0x201u;
    for (uint32_t bad : {inf, inf | sign, inf | payload, inf | sign | 1u}) {
      for (QuantMode mode : kModes)
        for (uint32_t group : kGroups) {
          const uint64_t n = 1 + rng() % 20000;
          std::vector<uint8_t> raw = quant_data(d, n, rng);
          const uint64_t at = rng() % n;
          set_elem(d, raw, at, bad);
          const uint32_t bits = quant::MIN_BITS + uint32_t(rng() % 7);
          INFO("dtype " << dtype_name(d) << " bad 0x" << std::hex << bad << std::dec << " at " << at << " of " << n
                        << " mode " << quant::mode_name(mode) << " bits " << bits << " group " << group);
          std::vector<uint8_t> host_msg(quant::max_quantized_bytes(mode, bits, group, n));
          uint64_t bytes = 0;
          REQUIRE(quant::host::quantize(d, mode, bits, group, raw.data(), n, host_msg.data(), host_msg.size(),
                                        &bytes) == Status::not_finite);
          const Quantized q = device_quantize(raw, d, mode, bits, group);
          REQUIRE(q.status == Status::not_finite);
          // the message a refused quantization leaves is refused by both readers
          std::vector<uint8_t> host_out;
          REQUIRE(host_dequantize(q.msg, d, n * format::elem_bytes(d), host_out) == Status::corrupt_stream);
          REQUIRE(device_dequantize(q.msg, d, n * format::elem_bytes(d)).status == Status::corrupt_stream);
        }
    }
  }
  // The largest finite values of both signs in one group: hi - lo overflows fp32 (asymmetric only).
  for (DType d : {DType::bf16, DType::fp32}) {
    const uint32_t big = d == DType::bf16 ? 0x7F7Fu : 0x7F7FFFFFu, sign = d == DType::bf16 ? 0x8000u : 0x80000000u;
    std::vector<uint8_t> raw = quant_data(d, 1000, rng);
    for (uint64_t i = 256; i < 320; ++i) set_elem(d, raw, i, i % 2 ? big : big | sign);
    REQUIRE(device_quantize(raw, d, QuantMode::asymmetric, 4, 64).status == Status::not_finite);
    check_against_host(raw, d, QuantMode::symmetric, 4, 64);
  }
  // fp16 groups whose reconstruction would round past 65504
  {
    std::vector<uint8_t> raw(64 * 2);
    for (uint64_t i = 0; i < 64; ++i) set_elem(DType::fp16, raw, i, i % 2 ? 0x7BFFu : 0xFBFFu);
    std::vector<uint8_t> host_msg(quant::max_quantized_bytes(QuantMode::asymmetric, 3, 64, 64));
    uint64_t bytes = 0;
    const Status hs = quant::host::quantize(DType::fp16, QuantMode::asymmetric, 3, 64, raw.data(), 64,
                                            host_msg.data(), host_msg.size(), &bytes);
    if (hs == Status::ok)
      check_against_host(raw, DType::fp16, QuantMode::asymmetric, 3, 64);
    else
      REQUIRE(device_quantize(raw, DType::fp16, QuantMode::asymmetric, 3, 64).status == hs);
  }
}

TEST_CASE("quant: unaligned input and output pointers give the same bytes and elements", "[gpu][quant]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (DType d : kDTypes) {
    const std::vector<uint8_t> raw = quant_data(d, 30000 + rng() % 1000, rng);
    for (size_t off : {size_t(1), size_t(2), size_t(4), size_t(8), size_t(15)})
      check_against_host(raw, d, kModes[off % 2], 2 + uint32_t(off % 7), kGroups[off % 3], off, 16 - off);
  }
}

TEST_CASE("quant: real tensors (tests/data) quantize to the host reference's bytes", "[gpu][quant]") {
  const std::string dir = ZIPCOMM_TEST_DATA_DIR;
  struct File {
    const char* name;
    DType dtype;
  };
  const File files[] = {{"llama_grads.bf16", DType::bf16},       {"llama_acts.bf16", DType::bf16},
                        {"llama_weights.bf16", DType::bf16},     {"llama_grads_scaled.f16", DType::fp16},
                        {"llama_grads.f32", DType::fp32},        {"tiny_lm_grads_fp32.f32", DType::fp32}};
  for (const File& f : files) {
    const std::vector<uint8_t> raw = gpu_test::read_file(dir + "/" + f.name);
    REQUIRE(!raw.empty());
    INFO(f.name);
    for (QuantMode mode : kModes)
      for (uint32_t bits : {2u, 4u, 5u, 8u})
        for (uint32_t group : kGroups) check_against_host(raw, f.dtype, mode, bits, group);
  }
}

TEST_CASE("quant: corrupt and truncated messages give the host reference's status, nothing written outside",
          "[gpu][quant]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (DType d : kDTypes)
    for (QuantMode mode : kModes) {
      const uint32_t bits = 3 + uint32_t(rng() % 6), group = kGroups[rng() % 3];
      const uint64_t n = 3 * 1024 + 37 + 32 * (rng() % 30);  // a short last block, group and tile
      std::vector<uint8_t> raw = quant_data(d, n, rng);
      for (uint64_t i = 0; i < group; ++i) set_elem(d, raw, group + i, from_float(d, 2.0f));  // a constant group
      const std::vector<uint8_t> msg = host_quantize_ok(raw, d, mode, bits, group);
      const quant::Layout l = quant::layout_for(mode, bits, group, n);
      const uint64_t capacity = n * format::elem_bytes(d);
      INFO("dtype " << dtype_name(d) << " mode " << quant::mode_name(mode) << " bits " << bits << " group "
                    << group << " n " << n);
      auto same_as_host = [&](const std::vector<uint8_t>& m, uint64_t cap, size_t in_pad = 16) {
        std::vector<uint8_t> host_out;
        const Status hs = host_dequantize(m, d, cap, host_out);
        const Dequantized dev = device_dequantize(m, d, cap, 0, in_pad);
        REQUIRE(dev.status == hs);
        if (hs == Status::ok) require_same_bytes(dev.out, host_out, "device dequantization");
        // header errors stop every warp before it writes
        if (hs == Status::bad_header || hs == Status::unsupported_version || hs == Status::buffer_too_small)
          REQUIRE(dev.untouched);
        return hs;
      };
      REQUIRE(same_as_host(msg, capacity) == Status::ok);
      REQUIRE(same_as_host(msg, capacity, /*in_pad=*/0) == Status::ok);
      // every single-bit flip of the header
      for (uint32_t bit = 0; bit < 8 * quant::HEADER_BYTES; ++bit) {
        std::vector<uint8_t> c = msg;
        c[bit / 8] ^= uint8_t(1u << (bit % 8));
        CAPTURE(bit);
        const Status s = same_as_host(c, capacity);
        REQUIRE((s == Status::bad_header || s == Status::unsupported_version));
      }
      // truncation, the message at the very end of its allocation
      for (uint64_t len : {uint64_t(0), uint64_t(1), uint64_t(63), uint64_t(64), uint64_t(65), l.codes_offset,
                           l.total_bytes - 16, l.total_bytes - 1}) {
        CAPTURE(len);
        const std::vector<uint8_t> t(msg.begin(), msg.begin() + len);
        REQUIRE(same_as_host(t, capacity, /*in_pad=*/0) == Status::corrupt_stream);
      }
      // a destination one element short
      REQUIRE(same_as_host(msg, capacity - format::elem_bytes(d)) == Status::buffer_too_small);
      // random bit flips all over the body: padding, parameters (NaN, negative, huge), codes (a changed code
      // decodes to another value: same status and elements as the host), unused code bits of the last block
      for (int k = 0; k < 300; ++k) {
        std::vector<uint8_t> c = msg;
        const uint64_t pos = quant::HEADER_BYTES + rng() % (msg.size() - quant::HEADER_BYTES);
        c[pos] ^= uint8_t(1u << (rng() % 8));
        if (k % 3 == 0) c[l.params_offset + (rng() % l.params_bytes) / 4 * 4 + 3] ^= 0x7F;  // an exponent
        CAPTURE(k, pos);
        same_as_host(c, capacity);
      }
      // every padding byte
      for (int gap = 0; gap < quant::SECTION_GAPS; ++gap) {
        uint64_t b = 0, e = 0;
        quant::section_gap(l, gap, b, e);
        for (uint64_t k = b; k < e; ++k) {
          std::vector<uint8_t> c = msg;
          c[k] = 1;
          REQUIRE(same_as_host(c, capacity) == Status::corrupt_stream);
        }
      }
      // the first unused code bit of the last block
      {
        std::vector<uint8_t> c = msg;
        const quant::CodePos p = quant::code_pos(n, bits);
        c[l.codes_offset + 4 * p.word + p.shift / 8] |= uint8_t(1u << (p.shift % 8));
        REQUIRE(same_as_host(c, capacity) == Status::corrupt_stream);
      }
      // a code 1 in the constant group (asymmetric: scale 0; symmetric: codes 0)
      {
        std::vector<uint8_t> c = msg;
        c[l.codes_offset + (uint64_t(group) * bits) / 8] |= 1u;
        REQUIRE(same_as_host(c, capacity) == Status::corrupt_stream);
      }
    }
  // the two formats refuse each other's messages
  std::vector<uint8_t> raw = quant_data(DType::bf16, 5000, rng);
  std::vector<uint8_t> lossless(format::max_compressed_bytes(DType::bf16, 5000));
  uint64_t bytes = 0;
  REQUIRE(host::compress(DType::bf16, CodeId::pair, raw.data(), 5000, lossless.data(), lossless.size(), &bytes) ==
          Status::ok);
  lossless.resize(bytes);
  REQUIRE(device_dequantize(lossless, DType::bf16, raw.size()).status == Status::bad_header);
}

TEST_CASE("quant: dequantize + reduce and dequantize + forward equal the host reference's fused steps",
          "[gpu][quant]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const ReduceOp ops[] = {ReduceOp::sum(), ReduceOp::avg(4), ReduceOp::min(), ReduceOp::prod()};
  for (DType d : kDTypes) {
    // whole tiles (the warp-contiguous path) and a ragged last tile; local and out aligned or not
    for (uint64_t n : {uint64_t(1) << 14, uint64_t(1 + rng() % 40000)}) {
      for (size_t offset : {size_t(0), size_t(2 * format::elem_bytes(d))}) {
        CAPTURE(dtype_name(d), n, offset);
        const std::vector<uint8_t> raw = quant_data(d, n, rng), local = quant_data(d, n, rng);
        const QuantMode mode = kModes[rng() % 2];
        const std::vector<uint8_t> msg = host_quantize_ok(raw, d, mode, 2 + rng() % 7, kGroups[rng() % 3]);
        const uint64_t bytes = n * format::elem_bytes(d);
        DeviceBuffer in(msg.size()), loc(bytes + offset + 16), dst(bytes + offset + 2 * kGuard),
            fwd(msg.size() + kGuard), meta(16);
        CUDA_OK(cudaMemcpy(in.ptr, msg.data(), msg.size(), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(loc.as(offset), local.data(), bytes, cudaMemcpyHostToDevice));
        for (const ReduceOp& op : ops) {
          CAPTURE(reduce_op_name(op.id));
          std::vector<uint8_t> want(bytes);
          REQUIRE(quant::host::dequantize_reduce(msg.data(), msg.size(), d, local.data(), want.data(), n, op) ==
                  Status::ok);
          CUDA_OK(cudaMemset(dst.ptr, kGuardByte, dst.bytes));
          CUDA_OK(quant::device::dequantize_reduce(in.ptr, msg.size(), d, loc.as(offset), dst.as(kGuard + offset), n,
                                                   op, meta.as<Status>()));
          std::vector<uint8_t> all(dst.bytes);
          CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
          Status st;
          CUDA_OK(cudaMemcpy(&st, meta.ptr, sizeof st, cudaMemcpyDeviceToHost));
          REQUIRE(st == Status::ok);
          require_same_bytes(std::vector<uint8_t>(all.begin() + kGuard + offset, all.begin() + kGuard + offset + bytes),
                             want, "dequantize + reduce");
          REQUIRE(all[kGuard + offset - 1] == kGuardByte);
          REQUIRE(all[kGuard + offset + bytes] == kGuardByte);
        }
        // another element count: size_mismatch, nothing written
        CUDA_OK(cudaMemset(dst.ptr, kGuardByte, dst.bytes));
        CUDA_OK(quant::device::dequantize_reduce(in.ptr, msg.size(), d, loc.as(offset), dst.as(kGuard + offset), n + 1,
                                                 ReduceOp::sum(), meta.as<Status>()));
        Status st;
        CUDA_OK(cudaMemcpy(&st, meta.ptr, sizeof st, cudaMemcpyDeviceToHost));
        REQUIRE(st == Status::size_mismatch);
        std::vector<uint8_t> all(dst.bytes);
        CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
        REQUIRE(std::all_of(all.begin(), all.end(), [](uint8_t b) { return b == kGuardByte; }));
        // forward: dequantize()'s elements, the message byte for byte; a short forward buffer is refused
        std::vector<uint8_t> want(bytes), fwd_want(msg.size());
        REQUIRE(quant::host::dequantize_forward(msg.data(), msg.size(), want.data(), bytes, d, fwd_want.data(),
                                                fwd_want.size()) == Status::ok);
        CUDA_OK(cudaMemset(fwd.ptr, kGuardByte, fwd.bytes));
        CUDA_OK(quant::device::dequantize_forward(in.ptr, msg.size(), d, dst.as(kGuard + offset), bytes, fwd.ptr,
                                                  msg.size() - 1, meta.as<Status>()));
        CUDA_OK(cudaMemcpy(&st, meta.ptr, sizeof st, cudaMemcpyDeviceToHost));
        REQUIRE(st == Status::buffer_too_small);
        CUDA_OK(quant::device::dequantize_forward(in.ptr, msg.size(), d, dst.as(kGuard + offset), bytes, fwd.ptr,
                                                  fwd.bytes, meta.as<Status>()));
        CUDA_OK(cudaMemcpy(&st, meta.ptr, sizeof st, cudaMemcpyDeviceToHost));
        REQUIRE(st == Status::ok);
        CUDA_OK(cudaMemcpy(all.data(), dst.ptr, dst.bytes, cudaMemcpyDeviceToHost));
        require_same_bytes(std::vector<uint8_t>(all.begin() + kGuard + offset, all.begin() + kGuard + offset + bytes),
                           want, "dequantize + forward (elements)");
        std::vector<uint8_t> fwd_got(fwd.bytes);
        CUDA_OK(cudaMemcpy(fwd_got.data(), fwd.ptr, fwd.bytes, cudaMemcpyDeviceToHost));
        require_same_bytes(std::vector<uint8_t>(fwd_got.begin(), fwd_got.begin() + msg.size()), fwd_want,
                           "dequantize + forward (message)");
        REQUIRE(fwd_got[msg.size()] == kGuardByte);
      }
    }
  }
}

TEST_CASE("quant: argument errors give a status and cudaErrorInvalidValue", "[gpu][quant]") {
  const uint64_t n = 1000;
  DeviceBuffer in(4 * n), out(quant::max_quantized_bytes(QuantMode::asymmetric, 8, 32, n) + 32), meta(16);
  CUDA_OK(cudaMemset(in.ptr, 0, in.bytes));
  Status* st = meta.as<Status>();
  const uint64_t cap = out.bytes - 32;
  auto status = [&] {
    Status s;
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(&s, st, sizeof s, cudaMemcpyDeviceToHost));
    return s;
  };
  auto q = [&](const void* i, uint64_t count, DType d, QuantMode m, uint32_t b, uint32_t g, void* o, uint64_t c) {
    return quant::device::quantize(i, count, d, m, b, g, o, c, st);
  };
  const QuantMode asym = QuantMode::asymmetric;
  REQUIRE(quant::device::quantize(in.ptr, n, DType::bf16, asym, 4, 32, out.ptr, cap, nullptr) ==
          cudaErrorInvalidValue);
  const uint64_t exact = quant::max_quantized_bytes(asym, 4, 32, n);
  // each call, then its own status
  REQUIRE(q(in.ptr, n, DType::bf16, asym, 1, 32, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, n, DType::bf16, asym, 9, 32, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, n, DType::bf16, asym, 4, 48, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, n, DType(0), asym, 4, 32, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  for (DType fp8 : {DType::fp8_e4m3, DType::fp8_e5m2}) {  // lossless codec dtypes, not quantized further
    REQUIRE(q(in.ptr, n, fp8, asym, 4, 32, out.ptr, cap) == cudaErrorInvalidValue);
    REQUIRE(status() == Status::invalid_argument);
  }
  REQUIRE(q(in.ptr, n, DType::bf16, QuantMode(3), 4, 32, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(nullptr, n, DType::bf16, asym, 4, 32, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, n, DType::bf16, asym, 4, 32, nullptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, n, DType::bf16, asym, 4, 32, out.as(8), cap) == cudaErrorInvalidValue);  // unaligned message
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, (uint64_t(1) << 50) + 1, DType::bf16, asym, 4, 32, out.ptr, cap) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(q(in.ptr, n, DType::bf16, asym, 4, 32, out.ptr, exact - 1) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::buffer_too_small);
  // an empty tensor: a 64-byte message, null input allowed; read back into a null destination
  CUDA_OK(q(nullptr, 0, DType::fp16, QuantMode::symmetric, 8, 128, out.ptr, 64));
  REQUIRE(status() == Status::ok);
  CUDA_OK(quant::device::dequantize(out.ptr, 64, DType::fp16, nullptr, 0, st));
  REQUIRE(status() == Status::ok);
  // dequantize: a good message, then bad arguments
  CUDA_OK(q(in.ptr, n, DType::bf16, asym, 4, 32, out.ptr, cap));
  REQUIRE(status() == Status::ok);
  const uint64_t msg_bytes = quant::max_quantized_bytes(asym, 4, 32, n);
  REQUIRE(quant::device::dequantize(out.ptr, msg_bytes, DType::bf16, in.ptr, 2 * n, nullptr) == cudaErrorInvalidValue);
  REQUIRE(quant::device::dequantize(out.as(4), msg_bytes, DType::bf16, in.ptr, 2 * n, st) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(quant::device::dequantize(nullptr, msg_bytes, DType::bf16, in.ptr, 2 * n, st) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(quant::device::dequantize(out.ptr, msg_bytes, DType(4), in.ptr, 2 * n, st) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(quant::device::dequantize(out.ptr, msg_bytes, DType::bf16, nullptr, 2 * n, st) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::invalid_argument);
  REQUIRE(quant::device::dequantize(out.ptr, 63, DType::bf16, in.ptr, 2 * n, st) == cudaErrorInvalidValue);
  REQUIRE(status() == Status::corrupt_stream);
  CUDA_OK(quant::device::dequantize(out.ptr, msg_bytes, DType::bf16, in.ptr, 2 * n - 1, st));
  REQUIRE(status() == Status::buffer_too_small);
  CUDA_OK(quant::device::dequantize(out.ptr, msg_bytes, DType::fp32, in.ptr, 4 * n - 1, st));
  REQUIRE(status() == Status::buffer_too_small);
  CUDA_OK(quant::device::dequantize(out.ptr, msg_bytes, DType::fp32, in.ptr, 4 * n, st));
  REQUIRE(status() == Status::ok);
}

namespace {
__global__ void fill_bf16(uint16_t* x, uint64_t n, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (i + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    const float s = float(h & 0xFFFF) + float((h >> 16) & 0xFFFF) - 65535.0f;
    const float v = s * (1e-6f * float(1 + ((i >> 20) % 7)));
    const uint32_t u = __float_as_uint(v);
    x[i] = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}
}  // namespace

TEST_CASE("quant: more than 2^31 elements: sampled groups equal the host reference's", "[gpu][quant][large]") {
  // Each group of a message is the message of its own elements alone (a group is whole code blocks), so the
  // host reference checks sampled groups of a message too large to quantize on the host.
  const uint64_t n = (uint64_t(1) << 31) + 77;
  const QuantMode mode = QuantMode::symmetric;
  const uint32_t bits = 5, group = 64;
  const quant::Layout l = quant::layout_for(mode, bits, group, n);
  DeviceBuffer in(2 * n), out(l.total_bytes), back(2 * n), meta(16);
  fill_bf16<<<4096, 256>>>(in.as<uint16_t>(), n, 11);
  CUDA_OK(quant::device::quantize(in.ptr, n, DType::bf16, mode, bits, group, out.ptr, l.total_bytes,
                                  meta.as<Status>()));
  CUDA_OK(quant::device::dequantize(out.ptr, l.total_bytes, DType::bf16, back.ptr, 2 * n, meta.as<Status>(4)));
  CUDA_OK(cudaDeviceSynchronize());
  Status st[2];
  CUDA_OK(cudaMemcpy(st, meta.ptr, sizeof st, cudaMemcpyDeviceToHost));
  REQUIRE(st[0] == Status::ok);
  REQUIRE(st[1] == Status::ok);
  quant::Header h;
  CUDA_OK(cudaMemcpy(&h, out.ptr, sizeof h, cudaMemcpyDeviceToHost));
  REQUIRE(quant::validate_header(h, l.total_bytes) == Status::ok);
  REQUIRE(h.num_elements == n);
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> groups = {0, l.num_groups / 2, l.num_groups - 2, l.num_groups - 1};
  for (int i = 0; i < 60; ++i) groups.push_back(rng() % l.num_groups);
  for (uint64_t g : groups) {
    CAPTURE(g);
    const uint32_t count = quant::group_elems(n, group, g);
    std::vector<uint8_t> raw(2 * count), dev_back(2 * count);
    CUDA_OK(cudaMemcpy(raw.data(), in.as(2 * g * group), raw.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(dev_back.data(), back.as(2 * g * group), raw.size(), cudaMemcpyDeviceToHost));
    const std::vector<uint8_t> one = host_quantize_ok(raw, DType::bf16, mode, bits, group);
    const quant::Layout l1 = quant::layout_for(mode, bits, group, count);
    float scale = 0;
    CUDA_OK(cudaMemcpy(&scale, out.as(l.params_offset + 4 * g), 4, cudaMemcpyDeviceToHost));
    REQUIRE(std::memcmp(&scale, one.data() + l1.params_offset, 4) == 0);
    std::vector<uint8_t> codes(l1.codes_bytes);
    CUDA_OK(cudaMemcpy(codes.data(), out.as(l.codes_offset + g * (group / 8) * bits), codes.size(),
                       cudaMemcpyDeviceToHost));
    REQUIRE(std::memcmp(codes.data(), one.data() + l1.codes_offset, codes.size()) == 0);
    std::vector<uint8_t> host_back(raw.size());
    REQUIRE(quant::host::dequantize(one.data(), one.size(), host_back.data(), host_back.size()) == Status::ok);
    REQUIRE(dev_back == host_back);
  }
}
