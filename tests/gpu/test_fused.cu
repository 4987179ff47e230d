// GPU tests of the fused steps (decode + reduce, decode + reduce + encode, decode + forward) at warp, block
// and device level: bit-exact against the host reference (host/reference_reduce.hpp) for every op and dtype,
// with special values, odd sizes, unaligned arrays, real data, and corrupt or mismatched inputs.
#include <cooperative_groups.h>

#include <zipcomm/block/block_fused.cuh>
#include <zipcomm/device/device_codec.cuh>
#include <zipcomm/device/device_fused.cuh>
#include <zipcomm/host/reference_codec.hpp>
#include <zipcomm/host/reference_reduce.hpp>
#include <zipcomm/warp/warp_chunk_fused.cuh>

#include "gpu_test_util.cuh"

using namespace zipcomm;
using gpu_test::DeviceBuffer;
namespace cg = cooperative_groups;

namespace {

const ReduceOp kOps[] = {ReduceOp::sum(), ReduceOp::prod(), ReduceOp::min(), ReduceOp::max(), ReduceOp::avg(3)};

/// Gaussian data with special values sprinkled in (NaN payloads, infinities, signed zeros, subnormals, max).
std::vector<uint8_t> test_data(DType d, uint64_t n, std::mt19937_64& rng, double specials = 0.01) {
  std::vector<uint8_t> v = gpu_test::gaussian_bytes(d, n, d == DType::fp16 ? 0.5f : 0.02f, rng);
  const uint32_t sp16[] = {0x7FC1u, 0xFFFFu, 0x7F80u, 0xFF80u, 0x8000u, 0x0000u, 0x0001u, 0x807Fu, 0x7F7Fu, 0x7C00u,
                           0xFC00u, 0x7E01u, 0x03FFu, 0x7BFFu};
  const uint32_t sp32[] = {0x7FC00001u, 0xFFFFFFFFu, 0x7F800000u, 0xFF800000u, 0x80000000u, 0u,
                           1u,          0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800001u};
  std::uniform_real_distribution<double> u(0, 1);
  for (uint64_t i = 0; i < n; ++i) {
    if (u(rng) >= specials) continue;
    if (d == DType::fp32) {
      uint32_t x = sp32[rng() % (sizeof sp32 / 4)];
      std::memcpy(&v[4 * i], &x, 4);
    } else {
      uint16_t x = uint16_t(sp16[rng() % (sizeof sp16 / 4)]);
      std::memcpy(&v[2 * i], &x, 2);
    }
  }
  return v;
}

/// The host reference's stream: minimal widths (device::compress), full widths (the fused writers).
std::vector<uint8_t> host_compress(DType d, const std::vector<uint8_t>& raw, uint64_t n,
                                   format::LowWidths widths = format::LowWidths::minimal,
                                   uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO, CodeId code = CodeId::pair) {
  std::vector<uint8_t> s(format::max_compressed_bytes(d, n, format::MIN_CHUNK_LOG2));
  uint64_t bytes = 0;
  REQUIRE(host::compress(d, code, raw.data(), n, s.data(), s.size(), &bytes, widths, chunk_log2) ==
          Status::ok);
  s.resize(bytes);
  return s;
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t bytes, size_t offset = 0) {
  std::vector<T> v(bytes / sizeof(T));
  CUDA_OK(cudaMemcpy(v.data(), b.as(offset), bytes, cudaMemcpyDeviceToHost));
  return v;
}
Status download_status(const DeviceBuffer& s) { return download<Status>(s, sizeof(Status))[0]; }

/// Every device-wide fused step on one (a, b) pair, checked against the host reference; the incoming stream in
/// chunks of 2^chunk_log2 elements (the stream that decode + reduce + encode writes has the same).
template <DType D, class Code = thread::PairCode>
void check_device_steps(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, uint64_t n, size_t offset,
                        uint32_t chunk_log2 = format::CHUNK_LOG2_AUTO) {
  CAPTURE(chunk_log2, code_name(Code::ID));
  const size_t eb = format::elem_bytes(D), raw = n * eb;
  const auto stream = host_compress(D, a, n, format::LowWidths::minimal, chunk_log2, Code::ID);
  DeviceBuffer d_stream(stream.size()), d_local(raw + offset), d_out(raw + offset + 16), d_enc(format::max_compressed_bytes(D, n)),
      d_fwd(stream.size()), d_bytes(8), d_status(sizeof(Status)), d_temp(format::max_compressed_bytes(D, n) / 64 + 4096);
  CUDA_OK(cudaMemcpy(d_stream.ptr, stream.data(), stream.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_local.as(offset), b.data(), raw, cudaMemcpyHostToDevice));
  size_t temp_bytes = d_temp.bytes;
  for (const ReduceOp& op : kOps) {
    CAPTURE(reduce_op_name(op.id));
    std::vector<uint8_t> want(raw);
    REQUIRE(host::reduce(D, op, a.data(), b.data(), want.data(), n) == Status::ok);

    CUDA_OK(cudaMemset(d_out.ptr, 0xEE, d_out.bytes));
    CUDA_OK(device::decompress_reduce<D, Code>(d_temp.ptr, temp_bytes, d_stream.ptr, stream.size(),
                                               d_local.as(offset), d_out.as(offset), n, op, d_status.as<Status>()));
    CUDA_OK(cudaDeviceSynchronize());
    REQUIRE(download_status(d_status) == Status::ok);
    auto got = download<uint8_t>(d_out, d_out.bytes);
    REQUIRE(std::equal(want.begin(), want.end(), got.begin() + offset));
    REQUIRE(got[offset + raw] == 0xEE);  // nothing written past n elements

    const auto want_stream = host_compress(D, want, n, format::LowWidths::full, chunk_log2, Code::ID);
    CUDA_OK(device::decompress_reduce_compress<D, Code>(d_temp.ptr, temp_bytes, d_stream.ptr, stream.size(), d_local.as(offset),
                                                  n, op, d_enc.ptr, d_enc.bytes, d_bytes.as<uint64_t>(),
                                                  d_status.as<Status>()));
    CUDA_OK(cudaDeviceSynchronize());
    REQUIRE(download_status(d_status) == Status::ok);
    REQUIRE(download<uint64_t>(d_bytes, 8)[0] == want_stream.size());
    REQUIRE(download<uint8_t>(d_enc, want_stream.size()) == want_stream);

    // in place: out == local
    DeviceBuffer d_inplace(raw + offset);
    CUDA_OK(cudaMemcpy(d_inplace.as(offset), b.data(), raw, cudaMemcpyHostToDevice));
    CUDA_OK(device::decompress_reduce<D, Code>(d_temp.ptr, temp_bytes, d_stream.ptr, stream.size(),
                                               d_inplace.as(offset), d_inplace.as(offset), n, op, d_status.as<Status>()));
    CUDA_OK(cudaDeviceSynchronize());
    REQUIRE(download_status(d_status) == Status::ok);
    REQUIRE(download<uint8_t>(d_inplace, raw, offset) == want);
  }
  // a rank's first send (avg scales it)
  {
    const ReduceOp avg = ReduceOp::avg(3);
    std::vector<uint8_t> want(format::max_compressed_bytes(D, n));
    uint64_t wb = 0;
    REQUIRE(host::compress_contribution(D, Code::ID, b.data(), n, avg, want.data(), want.size(), &wb) ==
            Status::ok);
    want.resize(wb);
    CUDA_OK(device::compress_contribution<D, Code>(d_temp.ptr, temp_bytes, d_local.as(offset), n, avg, d_enc.ptr,
                                                   d_enc.bytes, d_bytes.as<uint64_t>(), d_status.as<Status>()));
    CUDA_OK(cudaDeviceSynchronize());
    REQUIRE(download_status(d_status) == Status::ok);
    REQUIRE(download<uint8_t>(d_enc, wb) == want);
  }
  // decode + forward
  CUDA_OK(cudaMemset(d_fwd.ptr, 0xEE, d_fwd.bytes));
  CUDA_OK(device::decompress_forward<D, Code>(d_temp.ptr, temp_bytes, d_stream.ptr, stream.size(), d_out.as(offset), n,
                                        d_fwd.ptr, d_fwd.bytes, d_status.as<Status>()));
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download_status(d_status) == Status::ok);
  REQUIRE(download<uint8_t>(d_fwd, stream.size()) == stream);
  REQUIRE(download<uint8_t>(d_out, raw, offset) == std::vector<uint8_t>(a.begin(), a.begin() + raw));
}

template <DType D, class Code = thread::PairCode>
void device_steps_all_sizes() {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed, dtype_name(D));
  std::mt19937_64 rng(seed);
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(7), uint64_t(256), uint64_t(300), uint64_t(16383),
                     uint64_t(16385), uint64_t(100003), uint64_t(1) << 20}) {
    for (size_t offset : {size_t(0), size_t(format::elem_bytes(D))}) {  // aligned, then unaligned arrays
      CAPTURE(n, offset);
      check_device_steps<D, Code>(test_data(D, n, rng), test_data(D, n, rng), n, offset);
    }
    if (n > 4096)  // the other chunk sizes
      for (uint32_t log2 = format::MIN_CHUNK_LOG2; log2 <= format::MAX_CHUNK_LOG2; ++log2)
        if (log2 != format::default_chunk_log2(n))
          check_device_steps<D, Code>(test_data(D, n, rng), test_data(D, n, rng), n, 0, log2);
  }
  // random bits: results that do not compress are stored raw (decode + reduce + encode decodes them twice)
  const uint64_t n = 3 * 16384 + 11;
  std::vector<uint8_t> a(n * format::elem_bytes(D)), b(a.size());
  for (auto& x : a) x = uint8_t(rng());
  for (auto& x : b) x = uint8_t(rng());
  check_device_steps<D, Code>(a, b, n, 0);
}

// ---- exhaustive conversions and per-pair semantics ----------------------------------------------------------
__global__ void conversion_mismatches(unsigned long long* bad) {
  unsigned long long local = 0;
  for (uint64_t u = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; u < (uint64_t(1) << 32);
       u += uint64_t(gridDim.x) * blockDim.x) {
    const float f = __uint_as_float(uint32_t(u));
    local += thread::from_f32<DType::bf16>(f) != thread::bf16_from_f32_bits_reference(uint32_t(u));
    local += thread::from_f32<DType::fp16>(f) != thread::fp16_from_f32_bits_reference(uint32_t(u));
    if (u < 65536) {  // widening is exact; a NaN stays a NaN (the hardware drops its payload: no result shows it)
      const float hw = thread::to_f32<DType::fp16>(uint32_t(u)), ref = thread::f32_from_fp16_bits_reference(uint32_t(u));
      local += isnan(ref) ? !isnan(hw) : __float_as_uint(hw) != __float_as_uint(ref);
    }
  }
  if (local) atomicAdd(bad, local);
}

template <DType D>
__global__ void combine_pairs(const uint32_t* a, const uint32_t* b, uint64_t n, ReduceOp op, uint32_t* out) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    uint32_t acc[1] = {a[i]};
    const uint32_t x[1] = {b[i]};
    thread::reduce_items<D, 1>(op, acc, x);
    out[i] = acc[0];
  }
}

template <DType D>
void check_pairs(std::mt19937_64& rng) {
  const uint32_t mask = D == DType::fp32 ? 0xFFFFFFFFu : 0xFFFFu;
  std::vector<uint32_t> a, b;
  std::vector<uint32_t> sp = D == DType::fp32
                                 ? std::vector<uint32_t>{0u, 0x80000000u, 1u, 0x80000001u, 0x7F7FFFFFu, 0x7F800000u,
                                                         0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFC12345u, 0x3F800000u}
                                 : std::vector<uint32_t>{0u, 0x8000u, 1u, 0x8001u, 0x7F7Fu, 0x7F80u, 0xFF80u, 0x7FC0u,
                                                         0x7F81u, 0x7C00u, 0xFC00u, 0x7BFFu, 0x7E01u, 0x3F80u, 0x3C00u};
  for (uint32_t x : sp)
    for (uint32_t y : sp) a.push_back(x), b.push_back(y);
  for (int i = 0; i < (1 << 20); ++i) a.push_back(uint32_t(rng()) & mask), b.push_back(uint32_t(rng()) & mask);
  const uint64_t n = a.size();
  DeviceBuffer da(4 * n), db(4 * n), dout(4 * n);
  CUDA_OK(cudaMemcpy(da.ptr, a.data(), 4 * n, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.ptr, b.data(), 4 * n, cudaMemcpyHostToDevice));
  for (const ReduceOp& op : kOps) {
    CAPTURE(reduce_op_name(op.id), dtype_name(D));
    combine_pairs<D><<<1024, 256>>>(da.as<uint32_t>(), db.as<uint32_t>(), n, op, dout.as<uint32_t>());
    CUDA_OK(cudaDeviceSynchronize());
    auto got = download<uint32_t>(dout, 4 * n);
    size_t mismatches = 0, first = n;
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t acc[1] = {a[i]};
      const uint32_t x[1] = {b[i]};
      thread::reduce_items<D, 1>(op, acc, x);
      if (acc[0] != got[i]) {
        ++mismatches;
        if (first == n) first = i;
      }
    }
    if (mismatches) INFO("first mismatch: a=" << a[first] << " b=" << b[first] << " device=" << got[first]);
    REQUIRE(mismatches == 0);
  }
}

// ---- block level in a user kernel ---------------------------------------------------------------------------
constexpr int WARPS = 4;

struct BlockJob {
  const uint8_t* in;  // incoming stream
  uint64_t in_bytes;
  const uint8_t* local;
  uint8_t* out;       // elements
  uint8_t* enc;       // re-encoded stream
  uint8_t* fwd;       // forwarded stream
  uint64_t n, enc_capacity, fwd_capacity;
  uint64_t enc_bytes;
  Status status[3];
};

template <DType D>
__global__ void block_steps(BlockJob* jobs, ReduceOp op) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto cta = cg::this_thread_block();
  BlockJob& j = jobs[blockIdx.x];
  using R = block::BlockDecodeReduce<D, WARPS>;
  using RE = block::BlockDecodeReduceEncode<D, WARPS>;
  using F = block::BlockDecodeForward<D, WARPS>;
  uint64_t enc_bytes = 0;
  const Status s1 = RE(*reinterpret_cast<typename RE::TempStorage*>(smem))
                        .DecodeReduceEncode(cta, j.in, j.in_bytes, j.local, j.n, op, j.enc, j.enc_capacity, enc_bytes);
  const Status s2 = F(*reinterpret_cast<typename F::TempStorage*>(smem))
                        .DecodeForward(cta, j.in, j.in_bytes, j.out, j.n, j.fwd, j.fwd_capacity);
  // last: the reduced elements overwrite the forwarded copy in out
  const Status s0 = R(*reinterpret_cast<typename R::TempStorage*>(smem)).DecodeReduce(cta, j.in, j.in_bytes, j.local, j.out, j.n, op);
  if (cta.thread_rank() == 0) {
    j.status[0] = s0, j.status[1] = s1, j.status[2] = s2;
    j.enc_bytes = enc_bytes;
  }
}

template <DType D>
size_t block_smem() {
  return std::max({sizeof(typename block::BlockDecodeReduce<D, WARPS>::TempStorage),
                   sizeof(typename block::BlockDecodeReduceEncode<D, WARPS>::TempStorage),
                   sizeof(typename block::BlockDecodeForward<D, WARPS>::TempStorage)});
}

template <DType D>
void block_level_case(std::mt19937_64& rng, bool corrupt) {
  const uint64_t counts[] = {0, 1, 255, 16384, 16385, 3 * 16384 + 77, 70001};
  const size_t eb = format::elem_bytes(D);
  struct Host {
    std::vector<uint8_t> a, b, stream;
    Status want_status;
  };
  std::vector<Host> hosts;
  std::vector<BlockJob> jobs;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  auto dev = [&](size_t bytes) {
    bufs.push_back(std::make_unique<DeviceBuffer>(bytes + 16));
    return bufs.back()->as<uint8_t>();
  };
  for (uint64_t n : counts) {
    Host h{test_data(D, n, rng), test_data(D, n, rng), {}, Status::ok};
    h.stream = host_compress(D, h.a, n);
    if (corrupt && h.stream.size() > 64) {  // a flipped bit past the header: the host says what status
      h.stream[64 + rng() % (h.stream.size() - 64)] ^= uint8_t(1u << (rng() % 8));
      std::vector<uint8_t> decoded(n * eb + 1);
      h.want_status = host::decompress(h.stream.data(), h.stream.size(), decoded.data(), decoded.size());
      // an undetected flip (a plane bit, say) changes values: the reference reduces what the stream holds
      if (h.want_status == Status::ok) h.a.assign(decoded.begin(), decoded.begin() + n * eb);
    }
    BlockJob j{};
    j.n = n;
    j.in_bytes = h.stream.size();
    uint8_t* in = dev(h.stream.size());
    CUDA_OK(cudaMemcpy(in, h.stream.data(), h.stream.size(), cudaMemcpyHostToDevice));
    j.in = in;
    uint8_t* local = dev(n * eb + 2) + (n % 2 ? eb : 0);  // odd counts: unaligned local/out
    CUDA_OK(cudaMemcpy(local, h.b.data(), n * eb, cudaMemcpyHostToDevice));
    j.local = local;
    j.out = dev(n * eb + 2) + (n % 2 ? eb : 0);
    j.enc_capacity = format::max_compressed_bytes(D, n);
    j.enc = dev(j.enc_capacity);
    j.fwd_capacity = h.stream.size();
    j.fwd = dev(j.fwd_capacity);
    jobs.push_back(j);
    hosts.push_back(std::move(h));
  }
  DeviceBuffer d_jobs(sizeof(BlockJob) * jobs.size());
  for (const ReduceOp& op : kOps) {
    CAPTURE(reduce_op_name(op.id), dtype_name(D), corrupt);
    CUDA_OK(cudaMemcpy(d_jobs.ptr, jobs.data(), d_jobs.bytes, cudaMemcpyHostToDevice));
    const size_t smem = block_smem<D>();
    CUDA_OK(cudaFuncSetAttribute(block_steps<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    block_steps<D><<<unsigned(jobs.size()), WARPS * 32, smem>>>(d_jobs.as<BlockJob>(), op);
    CUDA_OK(cudaDeviceSynchronize());
    auto done = download<BlockJob>(d_jobs, d_jobs.bytes);
    for (size_t k = 0; k < jobs.size(); ++k) {
      const Host& h = hosts[k];
      const uint64_t n = jobs[k].n;
      CAPTURE(n);
      for (int s = 0; s < 3; ++s) REQUIRE(done[k].status[s] == h.want_status);
      if (h.want_status != Status::ok) continue;
      std::vector<uint8_t> want(n * eb), got(n * eb), fwd(h.stream.size());
      REQUIRE(host::reduce(D, op, h.a.data(), h.b.data(), want.data(), n) == Status::ok);
      CUDA_OK(cudaMemcpy(got.data(), jobs[k].out, n * eb, cudaMemcpyDeviceToHost));
      REQUIRE(got == want);
      const auto want_stream = host_compress(D, want, n, format::LowWidths::full);
      REQUIRE(done[k].enc_bytes == want_stream.size());
      std::vector<uint8_t> enc(want_stream.size());
      CUDA_OK(cudaMemcpy(enc.data(), jobs[k].enc, enc.size(), cudaMemcpyDeviceToHost));
      REQUIRE(enc == want_stream);
      CUDA_OK(cudaMemcpy(fwd.data(), jobs[k].fwd, fwd.size(), cudaMemcpyDeviceToHost));
      REQUIRE(fwd == h.stream);
    }
  }
}

// ---- warp level: one warp per chunk, decode + reduce + encode into per-chunk slots ----------------------------
__global__ void warp_reduce_encode(const uint8_t* in, uint64_t in_bytes, const uint8_t* local, ReduceOp op,
                                   uint8_t* out_stream, uint8_t* slots, uint32_t* slot_bytes, uint32_t* checks,
                                   Status* status) {
  using Fused = warp::WarpChunkDecodeReduceEncode<DType::bf16>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto& tables = *reinterpret_cast<warp::PairTables*>(smem);
  Fused::TempStorage& temp = reinterpret_cast<Fused::TempStorage*>(smem + sizeof(warp::PairTables))[threadIdx.x / 32];
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadPairTable(tables, cta);
  format::StreamView view;
  if (view.open(in, in_bytes, DType::bf16, CodeId::pair) != Status::ok) return;
  const uint64_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= view.layout.num_chunks) return;
  const uint8_t* chunk;
  uint32_t bytes;
  view.chunk(DType::bf16, c, chunk, bytes);
  Fused fused(temp, tables, local, op);
  Status s;
  const format::Layout L = view.layout;  // bf16: no low bits
  const warp::ChunkInfo info =
      fused.Encode(chunk, bytes, view.check(c), L.chunk_elems(c), L.chunk_first_tile(c),
                   view.chunk_planes(DType::bf16, c),
                   warp::Planes{out_stream + L.plane0_offset, out_stream + L.widths_offset, out_stream + L.low_offset, true}, s);
  fused.Store(slots + c * format::raw_chunk_bytes(DType::bf16, format::MAX_CHUNK_ELEMS), info);
  if (warp::lane_id() == 0) slot_bytes[c] = info.bytes, checks[c] = info.check, status[c] = s;
}

}  // namespace

TEMPLATE_TEST_CASE("fused device steps equal the host reference: every op, sizes, unaligned", "[gpu][fused]",
                   gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32) {
  device_steps_all_sizes<TestType::value>();
}

TEMPLATE_TEST_CASE("fused device steps in the fixed code equal the host reference", "[gpu][fused][fixed]",
                   gpu_test::Bf16, gpu_test::Fp16, gpu_test::Fp32) {
  device_steps_all_sizes<TestType::value, thread::FixedCode>();
}

TEST_CASE("fp32 -> bf16/fp16 conversions on the GPU equal the host definition for all 2^32 inputs", "[gpu][fused][large]") {
  DeviceBuffer bad(8);
  CUDA_OK(cudaMemset(bad.ptr, 0, 8));
  conversion_mismatches<<<2048, 256>>>(bad.as<unsigned long long>());
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download<unsigned long long>(bad, 8)[0] == 0);
}

TEST_CASE("every op on special and random pairs: device bits equal host bits", "[gpu][fused]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  check_pairs<DType::bf16>(rng);
  check_pairs<DType::fp16>(rng);
  check_pairs<DType::fp32>(rng);
}

TEST_CASE("block-level fused steps in a user kernel equal the host reference", "[gpu][fused][block]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  block_level_case<DType::bf16>(rng, false);
  block_level_case<DType::fp16>(rng, false);
  block_level_case<DType::fp32>(rng, false);
}

TEST_CASE("block-level fused steps on corrupt streams report the host decoder's status", "[gpu][fused][block]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 8; ++round) block_level_case<DType::bf16>(rng, true);
}

TEST_CASE("warp-level decode + reduce + encode: chunk streams and planes equal the host's", "[gpu][fused]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = 5 * 16384 + 999;
  auto a = test_data(DType::bf16, n, rng), b = test_data(DType::bf16, n, rng);
  // one chunk of random bits: its result does not compress, so Store() takes the raw (second decode) path
  for (uint64_t i = 2 * 16384; i < 3 * 16384; ++i) a[2 * i] = uint8_t(rng()), a[2 * i + 1] = uint8_t(rng());
  const auto stream = host_compress(DType::bf16, a, n, format::LowWidths::minimal, 14);
  const format::Layout L = format::layout_for(DType::bf16, n, 14);
  const uint32_t slot = format::raw_chunk_bytes(DType::bf16, format::MAX_CHUNK_ELEMS);
  DeviceBuffer d_in(stream.size()), d_local(2 * n), d_out(format::max_compressed_bytes(DType::bf16, n, 14)),
      d_slots(uint64_t(slot) * L.num_chunks), d_sizes(4 * L.num_chunks), d_checks(4 * L.num_chunks),
      d_status(4 * L.num_chunks);
  CUDA_OK(cudaMemcpy(d_in.ptr, stream.data(), stream.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_local.ptr, b.data(), 2 * n, cudaMemcpyHostToDevice));
  for (const ReduceOp& op : kOps) {
    CAPTURE(reduce_op_name(op.id));
    const size_t smem = sizeof(warp::PairTables) + 2 * sizeof(warp::WarpChunkDecodeReduceEncode<DType::bf16>::TempStorage);
    CUDA_OK(cudaFuncSetAttribute(warp_reduce_encode, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    warp_reduce_encode<<<unsigned((L.num_chunks + 1) / 2), 64, smem>>>(d_in.as(), stream.size(), d_local.as(), op,
                                                                      d_out.as(), d_slots.as(), d_sizes.as<uint32_t>(),
                                                                      d_checks.as<uint32_t>(), d_status.as<Status>());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> want(2 * n);
    REQUIRE(host::reduce(DType::bf16, op, a.data(), b.data(), want.data(), n) == Status::ok);
    const auto want_stream = host_compress(DType::bf16, want, n, format::LowWidths::minimal, 14);
    auto sizes = download<uint32_t>(d_sizes, 4 * L.num_chunks);
    auto checks = download<uint32_t>(d_checks, 4 * L.num_chunks);
    auto statuses = download<Status>(d_status, 4 * L.num_chunks);
    auto slots = download<uint8_t>(d_slots, d_slots.bytes);
    auto planes = download<uint8_t>(d_out, L.table_offset);
    REQUIRE(std::equal(planes.begin() + L.plane0_offset, planes.begin() + L.plane0_offset + L.plane0_bytes,
                       want_stream.begin() + L.plane0_offset));
    uint64_t start = 0;
    for (uint64_t c = 0; c < L.num_chunks; ++c) {
      CAPTURE(c);
      REQUIRE(statuses[c] == Status::ok);
      uint64_t end;
      std::memcpy(&end, &want_stream[L.table_offset + 8 * c], 8);
      REQUIRE(sizes[c] == end - start);
      uint32_t want_check;
      std::memcpy(&want_check, &want_stream[L.check_offset + 4 * c], 4);
      REQUIRE(checks[c] == want_check);
      REQUIRE(std::equal(slots.begin() + c * slot, slots.begin() + c * slot + sizes[c],
                         want_stream.begin() + L.exp_offset + start));
      start = end;
    }
  }
}

TEST_CASE("real training tensors: every op, device == host", "[gpu][fused]") {
  const auto g = gpu_test::read_file(std::string(ZIPCOMM_TEST_DATA_DIR) + "/llama_grads.bf16");
  const auto w = gpu_test::read_file(std::string(ZIPCOMM_TEST_DATA_DIR) + "/llama_weights.bf16");
  REQUIRE(g.size() > 1000);
  REQUIRE(w.size() > 1000);
  const uint64_t n = std::min(g.size(), w.size()) / 2 - 3;  // not a multiple of anything
  check_device_steps<DType::bf16>(g, w, n, 0);
  const auto f = gpu_test::read_file(std::string(ZIPCOMM_TEST_DATA_DIR) + "/llama_grads.f32");
  REQUIRE(f.size() > 1000);
  const uint64_t nf = f.size() / 8;  // the two halves of the file reduce with each other
  check_device_steps<DType::fp32>(std::vector<uint8_t>(f.begin(), f.begin() + 4 * nf),
                                  std::vector<uint8_t>(f.begin() + 4 * nf, f.begin() + 8 * nf), nf, 4);
}

TEST_CASE("fused device steps: mismatched, corrupt and bad arguments give an error status", "[gpu][fused]") {
  const uint64_t seed = gpu_test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const uint64_t n = 3 * 16384 + 100;
  auto a = test_data(DType::bf16, n, rng), b = test_data(DType::bf16, n, rng);
  auto stream = host_compress(DType::bf16, a, n);
  DeviceBuffer d_stream(stream.size()), d_local(2 * n), d_out(2 * n), d_enc(format::max_compressed_bytes(DType::bf16, n)),
      d_bytes(8), d_status(4), d_temp(4096);
  CUDA_OK(cudaMemcpy(d_local.ptr, b.data(), 2 * n, cudaMemcpyHostToDevice));
  size_t tb = d_temp.bytes;
  auto run_all = [&](const std::vector<uint8_t>& s, uint64_t in_bytes, uint64_t count) {
    CUDA_OK(cudaMemcpy(d_stream.ptr, s.data(), std::min<size_t>(s.size(), d_stream.bytes), cudaMemcpyHostToDevice));
    std::vector<Status> out;
    (void)device::decompress_reduce<DType::bf16>(d_temp.ptr, tb, d_stream.ptr, in_bytes, d_local.ptr, d_out.ptr, count,
                                                 ReduceOp::sum(), d_status.as<Status>());
    CUDA_OK(cudaDeviceSynchronize());
    out.push_back(download_status(d_status));
    (void)device::decompress_reduce_compress<DType::bf16>(d_temp.ptr, tb, d_stream.ptr, in_bytes, d_local.ptr, count,
                                                          ReduceOp::sum(), d_enc.ptr, d_enc.bytes,
                                                          d_bytes.as<uint64_t>(), d_status.as<Status>());
    CUDA_OK(cudaDeviceSynchronize());
    out.push_back(download_status(d_status));
    (void)device::decompress_forward<DType::bf16>(d_temp.ptr, tb, d_stream.ptr, in_bytes, d_out.ptr, count, d_enc.ptr,
                                                  d_enc.bytes, d_status.as<Status>());
    CUDA_OK(cudaDeviceSynchronize());
    out.push_back(download_status(d_status));
    return out;
  };
  auto all_are = [](const std::vector<Status>& v, Status s) {
    for (Status x : v)
      if (x != s) return false;
    return true;
  };
  REQUIRE(all_are(run_all(stream, stream.size(), n), Status::ok));
  REQUIRE(all_are(run_all(stream, stream.size(), n - 1), Status::size_mismatch));
  REQUIRE(all_are(run_all(stream, stream.size() - 16, n), Status::corrupt_stream));  // truncated
  {
    std::vector<uint8_t> fp16_stream = host_compress(DType::fp16, a, n);  // same bits, other dtype
    REQUIRE(all_are(run_all(fp16_stream, fp16_stream.size(), n), Status::bad_header));
  }
  {
    auto bad = stream;
    format::Header h;
    std::memcpy(&h, stream.data(), sizeof h);
    bad[format::layout_of(h).table_offset + 8] ^= 0x10;  // chunk 1's end offset
    REQUIRE(all_are(run_all(bad, bad.size(), n), Status::corrupt_stream));
  }
  for (int i = 0; i < 60; ++i) {  // random flips past the header: device status == host status
    auto bad = stream;
    bad[64 + rng() % (bad.size() - 64)] ^= uint8_t(1u << (rng() % 8));
    std::vector<uint8_t> tmp(2 * n);
    const Status want = host::decompress(bad.data(), bad.size(), tmp.data(), tmp.size());
    CAPTURE(i);
    REQUIRE(all_are(run_all(bad, bad.size(), n), want));
  }
  // arguments
  REQUIRE(device::decompress_reduce<DType::bf16>(d_temp.ptr, tb, d_stream.as(1), stream.size(), d_local.ptr,
                                                 d_out.ptr, n, ReduceOp::sum(), d_status.as<Status>()) ==
          cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download_status(d_status) == Status::invalid_argument);
  REQUIRE(device::decompress_reduce<DType::bf16>(d_temp.ptr, tb, d_stream.ptr, stream.size(), d_local.ptr, d_out.ptr,
                                                 n, ReduceOp{ReduceOpId(7), 1.0f}, d_status.as<Status>()) ==
          cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download_status(d_status) == Status::invalid_argument);
  // An output below the bound of the incoming stream's chunk size is refused on the device; the host knows only the
  // smallest bound (16384-element chunks) and refuses below that one at once.
  const cudaError_t e = device::decompress_reduce_compress<DType::bf16>(
      d_temp.ptr, tb, d_stream.ptr, stream.size(), d_local.ptr, n, ReduceOp::sum(), d_enc.ptr, d_enc.bytes - 16,
      d_bytes.as<uint64_t>(), d_status.as<Status>());
  REQUIRE((e == cudaSuccess || e == cudaErrorInvalidValue));
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download_status(d_status) == Status::buffer_too_small);
  REQUIRE(device::decompress_reduce_compress<DType::bf16>(
              d_temp.ptr, tb, d_stream.ptr, stream.size(), d_local.ptr, n, ReduceOp::sum(), d_enc.ptr,
              format::max_compressed_bytes(DType::bf16, n, format::MAX_CHUNK_LOG2) - 16, d_bytes.as<uint64_t>(),
              d_status.as<Status>()) == cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download_status(d_status) == Status::buffer_too_small);
  CUDA_OK(cudaMemcpy(d_stream.ptr, stream.data(), stream.size(), cudaMemcpyHostToDevice));
  CUDA_OK(device::decompress_forward<DType::bf16>(d_temp.ptr, tb, d_stream.ptr, stream.size(), d_out.ptr, n, d_enc.ptr,
                                                  stream.size() - 16, d_status.as<Status>()));
  CUDA_OK(cudaDeviceSynchronize());
  REQUIRE(download_status(d_status) == Status::buffer_too_small);
}
