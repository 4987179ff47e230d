// GPU tests of the block-level stream encoder/decoder used inside a user's kernel: several blocks, each
// encoding its own message (as a ring step or a pipeline chunk would), synchronizing through the group.
#include <cooperative_groups.h>

#include <zipcomm/block/block_stream_codec.cuh>
#include <zipcomm/host/reference_codec.hpp>

#include "gpu_test_util.cuh"

using namespace zipcomm;
using gpu_test::DeviceBuffer;
namespace cg = cooperative_groups;

namespace {
constexpr int WARPS = 4;
using Enc = block::BlockStreamEncoder<DType::bf16, WARPS>;
using Dec = block::BlockStreamDecoder<DType::bf16, WARPS>;

struct Message {
  uint64_t in_offset;   // bytes into the input
  uint64_t n;           // elements
  uint64_t out_offset;  // bytes into the compressed buffer (16-aligned)
};

__global__ void encode_messages(const uint8_t* in, const Message* msgs, uint8_t* out, uint64_t* sizes) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Enc enc(*reinterpret_cast<Enc::TempStorage*>(smem));
  const Message m = msgs[blockIdx.x];
  uint64_t bytes = enc.Encode(cta, in + m.in_offset, m.n, out + m.out_offset);
  if (cta.thread_rank() == 0) sizes[blockIdx.x] = bytes;
}

__global__ void decode_messages(const uint8_t* comp, const Message* msgs, const uint64_t* sizes, uint8_t* out,
                                Status* status) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  Dec dec(*reinterpret_cast<Dec::TempStorage*>(smem));
  const Message m = msgs[blockIdx.x];
  uint8_t* dst = out + m.in_offset;
  auto sink = [&](uint64_t tile, const uint32_t (&x)[8], uint32_t cnt) {
    const uint64_t first = tile * format::TILE_ELEMS + (threadIdx.x % 32) * 8;
    warp::store_items<DType::bf16, false>(dst, first, cnt, x);
  };
  Status s = dec.Decode(cta, comp + m.out_offset, sizes[blockIdx.x], m.n, sink);
  if (cta.thread_rank() == 0) status[blockIdx.x] = s;
}
}  // namespace

TEST_CASE("block stream encoder/decoder inside a user kernel match the host reference", "[gpu][block]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t counts[] = {0, 1, 257, 16384, 16385, 4 * 16384 + 5, 9 * 16384 + 333, 100000};
  std::vector<Message> msgs;
  uint64_t in_total = 0, out_total = 0;
  for (uint64_t n : counts) {
    msgs.push_back({in_total, n, out_total});
    in_total += 2 * n + 2;  // odd element offsets: unaligned inputs
    out_total += format::align_up(format::max_compressed_bytes(DType::bf16, n), 16);
  }
  auto raw = gpu_test::gaussian_bytes(DType::bf16, in_total / 2 + 1, 0.02f, rng);
  DeviceBuffer d_in(raw.size()), d_out(out_total), d_msgs(msgs.size() * sizeof(Message)), d_sizes(8 * msgs.size()),
      d_back(raw.size()), d_status(4 * msgs.size());
  CUDA_OK(cudaMemcpy(d_in.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_msgs.ptr, msgs.data(), d_msgs.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_back.ptr, 0, d_back.bytes));
  CUDA_OK(cudaFuncSetAttribute(encode_messages, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Enc::TempStorage))));
  CUDA_OK(cudaFuncSetAttribute(decode_messages, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Dec::TempStorage))));
  encode_messages<<<int(msgs.size()), WARPS * 32, sizeof(Enc::TempStorage)>>>(
      d_in.as(), d_msgs.as<Message>(), d_out.as(), d_sizes.as<uint64_t>());
  CUDA_OK(cudaGetLastError());
  decode_messages<<<int(msgs.size()), WARPS * 32, sizeof(Dec::TempStorage)>>>(
      d_out.as(), d_msgs.as<Message>(), d_sizes.as<uint64_t>(), d_back.as(), d_status.as<Status>());
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
    std::vector<uint8_t> ref(format::max_compressed_bytes(DType::bf16, m.n));
    uint64_t ref_bytes = 0;
    REQUIRE(host::compress(DType::bf16, CodeId::pair, raw.data() + m.in_offset, m.n, ref.data(), ref.size(),
                           &ref_bytes) == Status::ok);
    REQUIRE(sizes[i] == ref_bytes);
    REQUIRE(std::equal(ref.begin(), ref.begin() + ref_bytes, comp.begin() + m.out_offset));
    REQUIRE(status[i] == Status::ok);
    REQUIRE(std::equal(raw.begin() + m.in_offset, raw.begin() + m.in_offset + 2 * m.n, back.begin() + m.in_offset));
  }
}
