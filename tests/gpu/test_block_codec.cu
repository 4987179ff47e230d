// GPU tests of the block-level stream encoder/decoder used inside a user's kernel: several blocks, each
// encoding its own message (as a ring step or a pipeline chunk would), synchronizing through the group.
// bf16, and the fp8 dtypes (one-byte elements, plane 0 as bit-planes).
#include <cooperative_groups.h>

#include <algorithm>
#include <numeric>

#include <zipcomm/block/block_stream_codec.cuh>
#include <zipcomm/host/reference_codec.hpp>

#include "gpu_test_util.cuh"

using namespace zipcomm;
using gpu_test::DeviceBuffer;
namespace cg = cooperative_groups;

namespace {
constexpr int WARPS = 4;
template <DType D, class Code = thread::PairCode>
using Enc = block::BlockStreamEncoder<D, WARPS, Code>;
template <DType D, class Code = thread::PairCode>
using Dec = block::BlockStreamDecoder<D, WARPS, Code>;

struct Message {
  uint64_t in_offset;   // bytes into the input
  uint64_t n;           // elements
  uint64_t out_offset;  // bytes into the compressed buffer (16-aligned)
};

template <DType D, class Code>
__global__ void encode_messages(const uint8_t* in, const Message* msgs, uint8_t* out, uint64_t* sizes,
                                uint32_t chunk_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Enc<D, Code> enc(*reinterpret_cast<typename Enc<D, Code>::TempStorage*>(smem), chunk_log2);
  const Message m = msgs[blockIdx.x];
  uint64_t bytes = enc.Encode(cta, in + m.in_offset, m.n, out + m.out_offset);
  if (cta.thread_rank() == 0) sizes[blockIdx.x] = bytes;
}

template <DType D, class Code>
__global__ void decode_messages(const uint8_t* comp, const Message* msgs, const uint64_t* sizes, uint8_t* out,
                                Status* status) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Dec<D, Code> dec(*reinterpret_cast<typename Dec<D, Code>::TempStorage*>(smem));
  const Message m = msgs[blockIdx.x];
  uint8_t* dst = out + m.in_offset;
  auto sink = [&](uint64_t tile, const uint32_t (&x)[8], uint32_t cnt) {
    const uint64_t first = tile * format::TILE_ELEMS + (threadIdx.x % 32) * 8;
    warp::store_items<D, false>(dst, first, cnt, x);
  };
  Status s = dec.Decode(cta, comp + m.out_offset, sizes[blockIdx.x], m.n, sink);
  if (cta.thread_rank() == 0) status[blockIdx.x] = s;
}

/// Encodes every message in its own block in chunks of 2^chunk_log2 elements, decodes them again, and checks the
/// bytes against the host reference (the block encoder writes every tile's low bits at full width: for bf16 and
/// fp8, which have none, that is the default) and the round trip. `shape(n, rng)` makes each message's elements.
template <DType D, class Code, class Shape>
void block_round_trip(std::mt19937_64& rng, Shape shape, uint32_t chunk_log2 = format::MAX_CHUNK_LOG2) {
  CAPTURE(dtype_name(D), code_name(Code::ID), chunk_log2);
  const uint64_t eb = format::elem_bytes(D);
  const uint64_t counts[] = {0, 1, 257, 16384, 16385, 4 * 16384 + 5, 9 * 16384 + 333, 100000};
  std::vector<Message> msgs;
  std::vector<uint8_t> raw;
  uint64_t out_total = 0;
  for (uint64_t n : counts) {
    msgs.push_back({raw.size(), n, out_total});
    const std::vector<uint8_t> m = shape(n, rng);
    raw.insert(raw.end(), m.begin(), m.end());
    raw.resize(raw.size() + eb);  // odd element offsets: unaligned inputs
    out_total += format::align_up(format::max_compressed_bytes(D, n, chunk_log2), 16);
  }
  DeviceBuffer d_in(raw.size()), d_out(out_total), d_msgs(msgs.size() * sizeof(Message)), d_sizes(8 * msgs.size()),
      d_back(raw.size()), d_status(4 * msgs.size());
  CUDA_OK(cudaMemcpy(d_in.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_msgs.ptr, msgs.data(), d_msgs.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_back.ptr, 0, d_back.bytes));
  const int enc_smem = int(sizeof(typename Enc<D, Code>::TempStorage));
  const int dec_smem = int(sizeof(typename Dec<D, Code>::TempStorage));
  CUDA_OK(cudaFuncSetAttribute(encode_messages<D, Code>, cudaFuncAttributeMaxDynamicSharedMemorySize, enc_smem));
  CUDA_OK(cudaFuncSetAttribute(decode_messages<D, Code>, cudaFuncAttributeMaxDynamicSharedMemorySize, dec_smem));
  encode_messages<D, Code><<<int(msgs.size()), WARPS * 32, enc_smem>>>(d_in.as(), d_msgs.as<Message>(), d_out.as(),
                                                                        d_sizes.as<uint64_t>(), chunk_log2);
  CUDA_OK(cudaGetLastError());
  decode_messages<D, Code><<<int(msgs.size()), WARPS * 32, dec_smem>>>(d_out.as(), d_msgs.as<Message>(),
                                                                        d_sizes.as<uint64_t>(), d_back.as(),
                                                                        d_status.as<Status>());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint64_t> sizes(msgs.size());
  std::vector<Status> status(msgs.size());
  std::vector<uint8_t> comp(out_total), back(raw.size());
  CUDA_OK(cudaMemcpy(sizes.data(), d_sizes.ptr, d_sizes.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(status.data(), d_status.ptr, d_status.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(comp.data(), d_out.ptr, out_total, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(back.data(), d_back.ptr, back.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Message& m = msgs[i];
    CAPTURE(i, m.n);
    std::vector<uint8_t> ref(format::max_compressed_bytes(D, m.n, chunk_log2));
    uint64_t ref_bytes = 0;
    REQUIRE(host::compress(D, Code::ID, raw.data() + m.in_offset, m.n, ref.data(), ref.size(), &ref_bytes,
                           format::LowWidths::full, chunk_log2) == Status::ok);
    REQUIRE(sizes[i] == ref_bytes);
    REQUIRE(std::equal(ref.begin(), ref.begin() + ref_bytes, comp.begin() + m.out_offset));
    REQUIRE(status[i] == Status::ok);
    REQUIRE(std::equal(raw.begin() + m.in_offset, raw.begin() + m.in_offset + eb * m.n, back.begin() + m.in_offset));
  }
}

}  // namespace

// Gaussian data; fp8 also with a random-bits chunk (stored raw) where there is room and every pattern among the
// first tiles.
TEMPLATE_TEST_CASE("block stream encoder/decoder inside a user kernel match the host reference", "[gpu][block]",
                   gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32, gpu_test::Fp8E4M3, gpu_test::Fp8E5M2) {
  constexpr DType D = TestType::value;
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  auto shape = [](uint64_t n, std::mt19937_64& r) {
    std::vector<uint8_t> v = gpu_test::gaussian_bytes(D, n, 0.02f, r);
    if (format::elem_bytes(D) == 1) {
      if (n > 2 * 16384)
        for (uint64_t i = 16384; i < 2 * 16384; ++i) v[i] = uint8_t(r());
      std::vector<uint8_t> p(256);
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), r);
      for (uint64_t i = 0; i < n && i < 256; ++i) v[(i * 67) % n] = p[i];
    }
    return v;
  };
  for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2)
    block_round_trip<D, thread::PairCode>(rng, shape, log2);
}

TEMPLATE_TEST_CASE("block stream encoder/decoder in the fixed code match the host reference", "[gpu][block][fixed]",
                   gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32, gpu_test::Fp8E4M3, gpu_test::Fp8E5M2) {
  constexpr DType D = TestType::value;
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  auto shape = [](uint64_t n, std::mt19937_64& r) {
    std::vector<uint8_t> v = gpu_test::gaussian_bytes(D, n, 0.02f, r);
    const uint64_t eb = format::elem_bytes(D);
    if (n > 2 * 16384)  // a chunk of random bits: stored raw
      for (uint64_t i = 16384 * eb; i < 2 * 16384 * eb; ++i) v[i] = uint8_t(r());
    return v;
  };
  for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2)
    block_round_trip<D, thread::FixedCode>(rng, shape, log2);
}

namespace {
/// One block and one decoder object decode `count` streams in turn (the table is loaded by the first Decode only),
/// each into out + i * out_stride; status[i] is what Decode returned.
__global__ void decode_in_turn(const uint8_t* const* streams, const uint64_t* bytes, int count, uint64_t max_elems,
                               uint8_t* out, uint64_t out_stride, Status* status) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Dec<DType::bf16> dec(*reinterpret_cast<Dec<DType::bf16>::TempStorage*>(smem));
  for (int i = 0; i < count; ++i) {
    uint8_t* dst = out + i * out_stride;
    auto sink = [&](uint64_t tile, const uint32_t (&x)[8], uint32_t cnt) {
      warp::store_items<DType::bf16, false>(dst, tile * format::TILE_ELEMS + (threadIdx.x % 32) * 8, cnt, x);
    };
    const Status s = dec.Decode(cta, streams[i], bytes[i], max_elems, sink);
    if (cta.thread_rank() == 0) status[i] = s;
  }
}
}  // namespace

// A decoder object keeps the table and the stream's view across Decode calls: a stream that fails (corrupt words,
// a wrong check, truncated, a foreign header, too many elements) must leave nothing behind for the next one.
TEST_CASE("block stream decoder decodes good streams after bad ones with one object", "[gpu][block]") {
  constexpr DType D = DType::bf16;
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = 3 * format::MAX_CHUNK_ELEMS + 77;
  auto compress = [](const std::vector<uint8_t>& raw, uint64_t elems) {
    std::vector<uint8_t> c(format::max_compressed_bytes(D, elems));
    uint64_t bytes = 0;
    REQUIRE(host::compress(D, CodeId::pair, raw.data(), elems, c.data(), c.size(), &bytes) == Status::ok);
    c.resize(bytes);
    return c;
  };
  const std::vector<uint8_t> raw_a = gpu_test::gaussian_bytes(D, n, 0.02f, rng);
  const std::vector<uint8_t> raw_b = gpu_test::gaussian_bytes(D, n, 1.0f, rng);
  const std::vector<uint8_t> a = compress(raw_a, n), b = compress(raw_b, n);
  const std::vector<uint8_t> larger = compress(gpu_test::gaussian_bytes(D, n + 1000, 0.02f, rng), n + 1000);
  format::StreamView view;
  REQUIRE(view.open(a.data(), a.size(), D, CodeId::pair) == Status::ok);

  std::vector<uint8_t> words = a;  // a bit of chunk 0's first lane word
  words[view.layout.exp_offset + format::chunk_header_bytes(format::chunk_tiles(view.layout.chunk_elems(0)))] ^= 0x10;
  std::vector<uint8_t> check = a;  // chunk 1's stored check
  check[view.layout.check_offset + 4] ^= 0x01;
  const std::vector<uint8_t> foreign(a.size(), 0);
  struct Case {
    const std::vector<uint8_t>* stream;
    uint64_t bytes;
    const std::vector<uint8_t>* expect;  // decoded bytes when the status must be ok
    Status status;                       // the status Decode must return, unless any_error
    bool any_error;                      // any status but ok will do
  };
  const std::vector<Case> cases = {
      {&a, a.size(), &raw_a, Status::ok, false},
      {&words, words.size(), nullptr, Status::ok, true},
      {&b, b.size(), &raw_b, Status::ok, false},
      {&check, check.size(), nullptr, Status::checksum_mismatch, false},
      {&a, a.size() - 1, nullptr, Status::ok, true},
      {&a, a.size(), &raw_a, Status::ok, false},
      {&foreign, foreign.size(), nullptr, Status::ok, true},
      {&larger, larger.size(), nullptr, Status::buffer_too_small, false},
      {&b, b.size(), &raw_b, Status::ok, false},
  };
  const int count = int(cases.size());
  uint64_t total = 0;
  std::vector<uint64_t> offsets, bytes;
  for (const Case& c : cases) {
    offsets.push_back(total);
    bytes.push_back(c.bytes);
    total += format::align_up(c.stream->size(), 16);
  }
  const uint64_t stride = 2 * n;
  DeviceBuffer d_streams(total), d_ptrs(8 * count), d_bytes(8 * count), d_out(stride * count), d_status(4 * count);
  std::vector<const uint8_t*> ptrs;
  for (int i = 0; i < count; ++i) {
    CUDA_OK(cudaMemcpy(d_streams.as(offsets[i]), cases[i].stream->data(), cases[i].stream->size(),
                       cudaMemcpyHostToDevice));
    ptrs.push_back(d_streams.as(offsets[i]));
  }
  CUDA_OK(cudaMemcpy(d_ptrs.ptr, ptrs.data(), d_ptrs.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_bytes.ptr, bytes.data(), d_bytes.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_out.ptr, 0xA5, d_out.bytes));
  const int smem = int(sizeof(Dec<D>::TempStorage));
  CUDA_OK(cudaFuncSetAttribute(decode_in_turn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  decode_in_turn<<<1, WARPS * 32, smem>>>(d_ptrs.as<const uint8_t*>(), d_bytes.as<uint64_t>(), count, n, d_out.as(),
                                          stride, d_status.as<Status>());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<Status> status(count);
  std::vector<uint8_t> out(d_out.bytes);
  CUDA_OK(cudaMemcpy(status.data(), d_status.ptr, d_status.bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out.data(), d_out.ptr, out.size(), cudaMemcpyDeviceToHost));
  for (int i = 0; i < count; ++i) {
    CAPTURE(i, status_string(status[i]));
    if (cases[i].any_error) {
      CHECK(status[i] != Status::ok);
    } else {
      CHECK(status[i] == cases[i].status);
    }
    if (cases[i].expect)
      CHECK(std::equal(cases[i].expect->begin(), cases[i].expect->end(), out.begin() + i * stride));
  }
}
