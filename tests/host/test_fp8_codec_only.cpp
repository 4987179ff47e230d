// The fp8 dtypes are codec only: the host references of the fused steps, the ring and the P2P frames refuse
// them with invalid_argument (never a crash, never a result). The device entry points of those steps do not
// compile for fp8 (static_assert); tests/gpu checks the ring's run-time dtype call and launch check.
#include "test_util.hpp"

#include <zipcomm/comm/p2p/protocol.cuh>
#include <zipcomm/comm/p2p/reference.cuh>
#include <zipcomm/comm/ring/reference.cuh>
#include <zipcomm/host/reference_reduce.hpp>

using namespace zipcomm;

TEST_CASE("fp8: the host fused steps refuse it, with a valid fp8 stream", "[fp8][reduce]") {
  ZT_RNG("fp8 fused refused");
  for (DType d : zt::kFp8DTypes) {
    INFO("dtype " << dtype_name(d));
    const uint64_t n = 3000;
    const zt::Tensor a = zt::gaussian(d, n, rng), b = zt::gaussian(d, n, rng);
    const auto stream = zt::compress_ok(CodeId::pair, a);
    std::vector<uint8_t> out(n, 0xEE), enc(format::max_compressed_bytes(d, n), 0xEE), fwd(stream.size(), 0xEE);
    uint64_t bytes = 777;
    for (ReduceOp op : {ReduceOp::sum(), ReduceOp::max(), ReduceOp::avg(2)}) {
      CHECK(host::reduce_pre(d, op, a.bytes.data(), out.data(), n) == Status::invalid_argument);
      CHECK(host::reduce(d, op, a.bytes.data(), b.bytes.data(), out.data(), n) == Status::invalid_argument);
      CHECK(host::decompress_reduce(stream.data(), stream.size(), d, CodeId::pair, b.bytes.data(), out.data(), n,
                                    op) == Status::invalid_argument);
      CHECK(host::decompress_reduce_compress(stream.data(), stream.size(), d, CodeId::pair, b.bytes.data(), n, op,
                                             enc.data(), enc.size(), &bytes) == Status::invalid_argument);
      CHECK(bytes == 0);
      CHECK(host::compress_contribution(d, CodeId::pair, a.bytes.data(), n, op, enc.data(), enc.size(), &bytes) ==
            Status::invalid_argument);
    }
    CHECK(host::decompress_forward(stream.data(), stream.size(), d, CodeId::pair, out.data(), n, fwd.data(),
                                   fwd.size()) == Status::invalid_argument);
    for (uint8_t x : out) CHECK(x == 0xEE);  // nothing written
    for (uint8_t x : fwd) CHECK(x == 0xEE);
    // The codec itself takes it.
    zt::roundtrip(CodeId::pair, a);
  }
}

TEST_CASE("fp8: the ring's reference refuses it", "[fp8][ring]") {
  ZT_RNG("fp8 ring refused");
  for (DType d : zt::kFp8DTypes) {
    INFO("dtype " << dtype_name(d));
    const zt::Tensor a = zt::gaussian(d, 1000, rng), b = zt::gaussian(d, 1000, rng);
    std::vector<uint8_t> out(1000, 0xEE);
    CHECK(comm::ring_reference(d, ReduceOp::sum(), {a.bytes.data(), b.bytes.data()}, 1000, out.data()) ==
          Status::invalid_argument);
    for (uint8_t x : out) CHECK(x == 0xEE);
  }
}

TEST_CASE("fp8: the P2P host frames refuse it", "[fp8][p2p]") {
  ZT_RNG("fp8 p2p refused");
  for (DType d : zt::kFp8DTypes)
    for (comm::FrameKind kind : {comm::FrameKind::coded, comm::FrameKind::raw}) {
      INFO("dtype " << dtype_name(d) << " kind " << int(kind));
      const uint64_t n = 5000;
      const zt::Tensor a = zt::gaussian(d, n, rng);
      const comm::PipelineShape shape;
      const comm::FramePlan plan = comm::make_plan(d, kind, n, shape);
      REQUIRE(plan.num_frames >= 1);
      const comm::FrameInfo fi = plan.frame(0);
      std::vector<uint8_t> frame;
      CHECK(comm::host_encode_frame(plan, fi, CodeId::pair, 1, a.bytes.data(), frame) == Status::invalid_argument);
      // A frame made for bf16 of the same size does not decode as fp8 either.
      const comm::FramePlan bf = comm::make_plan(DType::bf16, kind, n, shape);
      const zt::Tensor x = zt::gaussian(DType::bf16, n, rng);
      REQUIRE(comm::host_encode_frame(bf, bf.frame(0), CodeId::pair, 1, x.bytes.data(), frame) == Status::ok);
      std::vector<uint8_t> message(n, 0xEE);
      CHECK(comm::host_decode_frame(plan, fi, CodeId::pair, 1, frame.data(), frame.size(), message.data()) ==
            Status::invalid_argument);
      for (uint8_t v : message) CHECK(v == 0xEE);
    }
}
