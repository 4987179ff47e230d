// Probe: a fixed-width exponent code for bf16 against the library's pair code, on the same data in the same run.
// Each exponent is stored as its distance below its 256-element tile's largest one in 3 bits; distances of 7 and
// more (zeros among them) are marked 7 and their exponent byte goes to a per-chunk exception list. Decoding reads
// fixed places (no bit stream walked), so it costs a few instructions per element; the price is ratio (0.70 against
// 0.67). Prints ratio and GB/s of encode and decode on the whole GPU and on SM partitions (--sms), every round trip
// checked (every bf16 pattern among the data), and writes JSON (--json). Usage: zipcomm_probe_fixed_width [--data
// DIR] [--mib 256] [--reps 20] [--sms 16] [--json FILE]
//
// Probe stream (bf16, n a multiple of 8192): chunk table (chunks + 1 32-bit offsets into the exception list),
// then per 8192-element chunk 32 tiles' planes (one sign/mantissa byte per element, lane-major: lane l's 8
// bytes at 8 l), 32 tiles' codes (lane l's 24 bits at bit 24 l: its even elements' codes in bits 0-11, odd ones'
// in 12-23, 3 bits each) and 32 anchor bytes; then the exception bytes, per tile lane by lane (a lane's odd
// elements, last first, then its even ones).
#include <cub/warp/warp_scan.cuh>
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "device_codec_timing.cuh"
#include "sm_partition.cuh"
#include "zipcomm/zipcomm.cuh"

namespace {
using namespace zipcomm;

constexpr uint32_t TILE = 256, CHUNK_TILES = 32, CHUNK = TILE * CHUNK_TILES;
constexpr uint32_t PLANES_BYTES = CHUNK;                       // one byte per element
constexpr uint32_t CODE_TILE_BYTES = TILE * 3 / 8;             // 96: 3 bits per element
constexpr uint32_t CODES_BYTES = CHUNK_TILES * CODE_TILE_BYTES;
constexpr uint32_t CHUNK_BYTES = PLANES_BYTES + CODES_BYTES + CHUNK_TILES;  // + one anchor byte per tile
constexpr uint32_t HEADER_BYTES = 16;  // what a real stream would add: format, dtype, element count
constexpr uint32_t FULL = 0xFFFFFFFFu;
constexpr int ENCODE_WARPS = 8, DECODE_WARPS = 8;

struct Layout {
  uint64_t chunks;
  uint64_t table, fixed, exceptions;  // byte offsets in the stream
};
__host__ __device__ inline Layout layout_of(uint64_t n) {
  Layout L;
  L.chunks = n / CHUNK;
  L.table = 0;
  L.fixed = (4 * (L.chunks + 1) + 15) / 16 * 16;
  L.exceptions = L.fixed + L.chunks * CHUNK_BYTES;
  return L;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) { return __byte_perm(a, b, sel); }

using WarpScan = cub::WarpScan<uint32_t>;

// The chunks' exception counts are placed by the device encoder's look-back (its flags and wait).
using device::detail::FLAG_AGGREGATE;
using device::detail::FLAG_INCLUSIVE;

__device__ __forceinline__ void publish(uint64_t* state, uint64_t c, uint64_t word) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(state[c]).store(word, cuda::memory_order_relaxed);
}

// Per lane, the 24-bit field of its codes: word lo and lo + 1 of a tile's 24 code words, shifted right by off.
struct CodeField {
  uint32_t lo, off;
  __device__ explicit CodeField(uint32_t lane) : lo((3 * lane) >> 2), off((24 * lane) & 31) {}
};

// The lane's code bits with exceptions (code 7: bits 3k and 16 + 3k all set).
__device__ __forceinline__ uint32_t exception_flags(uint32_t C) { return C & (C >> 1) & (C >> 2) & 0x02490249u; }

// A lane's exceptions, highest flag bit first: its odd elements' (pairs 3 to 0), then its even ones'.
__device__ __forceinline__ uint32_t top_bit(uint32_t F) { return 31 - __clz(F); }

template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32) fw_encode(const uint4* in, uint64_t n, uint8_t* out, uint8_t* scratch,
                                                       uint64_t* state, unsigned long long* counter,
                                                       Status* status) {
  __shared__ typename WarpScan::TempStorage scan[WARPS];
  const uint32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const Layout L = layout_of(n);
  uint8_t* const slot = scratch + (uint64_t(blockIdx.x) * WARPS + w) * CHUNK;
  uint32_t* table = reinterpret_cast<uint32_t*>(out + L.table);
  // Code word j (lanes 0-23) = bits 32 j .. 32 j + 31 of the lanes' 24-bit fields: fields lo and lo + 1.
  const uint32_t src_lo = (4 * lane) / 3, src_hi = min(src_lo + 1, 31u), src_off = 32 * lane - 24 * src_lo;
  for (;;) {
    unsigned long long c = 0;
    if (lane == 0) c = atomicAdd(counter, 1ull);
    c = __shfl_sync(FULL, c, 0);
    if (c >= L.chunks) break;
    const uint4* src = in + c * (CHUNK / 8) + lane;
    uint8_t* const fixed = out + L.fixed + c * CHUNK_BYTES;
    uint2* planes = reinterpret_cast<uint2*>(fixed) + lane;
    uint32_t* codes = reinterpret_cast<uint32_t*>(fixed + PLANES_BYTES) + min(lane, 23u);
    uint32_t anchor_of_lane = 0, xcount = 0;
    uint4 v = __ldg(src), v1 = __ldg(src + 32), v2 = __ldg(src + 64);
#pragma unroll 1
    for (uint32_t t = 0; t < CHUNK_TILES; ++t) {
      const uint4 next = __ldg(src + min(t + 3, CHUNK_TILES - 1) * 32);
      const uint32_t word[4] = {v.x, v.y, v.z, v.w};
      uint32_t E[4], m = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        E[k] = (word[k] >> 7) & 0x00FF00FFu;
        m = __vmaxu2(m, E[k]);
      }
      const uint32_t a = __reduce_max_sync(FULL, max(m & 0xFFFFu, m >> 16));
      anchor_of_lane = lane == t ? a : anchor_of_lane;
      const uint32_t A2 = a * 0x00010001u;
      uint32_t C = 0, P[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        C |= __vminu2(A2 - E[k], 0x00070007u) << (3 * k);
        P[k] = ((word[k] >> 8) & 0x00800080u) | (word[k] & 0x007F007Fu);
      }
      const uint32_t C24 = (C & 0xFFFu) | ((C >> 4) & 0xFFF000u);
      planes[t * (TILE / 8)] = make_uint2(prmt(P[0], P[1], 0x6420), prmt(P[2], P[3], 0x6420));
      const uint32_t f0 = __shfl_sync(FULL, C24, src_lo & 31), f1 = __shfl_sync(FULL, C24, src_hi);
      if (lane < 24) codes[t * (CODE_TILE_BYTES / 4)] = (f0 >> src_off) | (f1 << (24 - src_off));
      uint32_t F = exception_flags(C);
      if (__any_sync(FULL, F)) {
        uint32_t at, total;
        WarpScan(scan[w]).ExclusiveSum(uint32_t(__popc(F)), at, total);
        at += xcount;
        for (; F; F &= ~(1u << top_bit(F))) {
          const uint32_t b = top_bit(F), k = (b & 15) / 3;
          const uint32_t Ek = k == 0 ? E[0] : k == 1 ? E[1] : k == 2 ? E[2] : E[3];
          slot[at++] = uint8_t(Ek >> (b & 16));
        }
        xcount += total;
      }
      v = v1;
      v1 = v2;
      v2 = next;
    }
    fixed[PLANES_BYTES + CODES_BYTES + lane] = uint8_t(anchor_of_lane);
    // The chunk's place in the exception list: decoupled look-back over the chunks' counts.
    if (lane == 0) publish(state, c, (c == 0 ? FLAG_INCLUSIVE : FLAG_AGGREGATE) | xcount);
    bool timed_out = false;
    const uint64_t exclusive = device::detail::look_back(state, c, timed_out);
    if (timed_out && lane == 0) *status = Status::timeout;
    if (lane == 0) {
      if (c != 0) publish(state, c, FLAG_INCLUSIVE | (exclusive + xcount));
      table[c] = uint32_t(exclusive);
      if (c + 1 == L.chunks) table[c + 1] = uint32_t(exclusive + xcount);
    }
    __syncwarp();
    uint8_t* dst = out + L.exceptions + exclusive;
#pragma unroll 4
    for (uint32_t i = lane; i < xcount; i += 32) dst[i] = slot[i];
    __syncwarp();
  }
}

template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32) fw_decode(const uint8_t* in, uint64_t n, uint4* out) {
  __shared__ typename WarpScan::TempStorage scan[WARPS];
  const uint32_t lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const Layout L = layout_of(n);
  const uint32_t* table = reinterpret_cast<const uint32_t*>(in + L.table);
  const uint64_t warps = uint64_t(gridDim.x) * WARPS;
  const CodeField field(lane);
  for (uint64_t c = uint64_t(blockIdx.x) * WARPS + w; c < L.chunks; c += warps) {
    const uint8_t* fixed = in + L.fixed + c * CHUNK_BYTES;
    const uint32_t* codes = reinterpret_cast<const uint32_t*>(fixed + PLANES_BYTES) + min(lane, 23u);
    const uint2* planes = reinterpret_cast<const uint2*>(fixed) + lane;
    const uint8_t* exc = in + L.exceptions + __ldg(table + c);
    const uint32_t anchors = __ldg(fixed + PLANES_BYTES + CODES_BYTES + lane);
    uint4* dst = out + c * (CHUNK / 8) + lane;
    uint2 q = __ldg(planes), q1 = __ldg(planes + TILE / 8);
    uint32_t cw = __ldg(codes), cw1 = __ldg(codes + CODE_TILE_BYTES / 4), xbase = 0;
#pragma unroll 1
    for (uint32_t t = 0; t < CHUNK_TILES; ++t) {
      const uint32_t tn = min(t + 2, CHUNK_TILES - 1);
      const uint2 qn = __ldg(planes + tn * (TILE / 8));
      const uint32_t cwn = __ldg(codes + tn * (CODE_TILE_BYTES / 4));
      const uint32_t w0 = __shfl_sync(FULL, cw, field.lo), w1 = __shfl_sync(FULL, cw, field.lo + 1);
      const uint32_t C24 = __funnelshift_r(w0, w1, field.off);
      const uint32_t C = (C24 & 0xFFFu) | ((C24 << 4) & 0x0FFF0000u);
      const uint32_t a = __shfl_sync(FULL, anchors, t), A7 = a * 0x00800080u;
      const uint32_t P[4] = {prmt(q.x, 0, 0x4140), prmt(q.x, 0, 0x4342), prmt(q.y, 0, 0x4140), prmt(q.y, 0, 0x4342)};
      const uint32_t D7[4] = {(C << 7) & 0x03800380u, (C << 4) & 0x03800380u, (C << 1) & 0x03800380u,
                              (C >> 2) & 0x03800380u};
      uint32_t W[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) W[k] = (P[k] & 0x00800080u) * 0xFFu + (P[k] + A7 - D7[k]);
      uint32_t F = exception_flags(C);
      if (__any_sync(FULL, F)) {
        uint32_t at, total;
        WarpScan(scan[w]).ExclusiveSum(uint32_t(__popc(F)), at, total);
        at += xbase;
        // An exception decoded as a - 7; its byte e is smaller: subtract (a - 7 - e) from its field.
        const uint32_t decoded = a - 7;
        for (; F; F &= ~(1u << top_bit(F))) {
          const uint32_t b = top_bit(F), k = (b & 15) / 3;
          const uint32_t delta = (decoded - __ldg(exc + at++)) << ((b & 16) + 7);
          W[0] -= k == 0 ? delta : 0;
          W[1] -= k == 1 ? delta : 0;
          W[2] -= k == 2 ? delta : 0;
          W[3] -= k == 3 ? delta : 0;
        }
        xbase += total;
      }
      dst[t * 32] = make_uint4(W[0], W[1], W[2], W[3]);
      q = q1;
      q1 = qn;
      cw = cw1;
      cw1 = cwn;
    }
  }
}

struct Row {
  std::string data, op;
  double ratio, gbps, roof_pct;
  int sms;
  bool partition;
};

void bench_data(const std::string& name, const std::vector<uint8_t>& sample, uint64_t mib, int reps,
                const std::vector<bench::SmTarget>& targets, std::vector<Row>& rows) {
  const uint64_t n = mib * 1024 * 1024 / 2;
  if (n % CHUNK || n >> 32)  // the chunk table's offsets are 32-bit
    std::fprintf(stderr, "--mib must give a multiple of %u elements below 2^32\n", CHUNK), std::exit(2);
  const std::vector<uint8_t> host = bench::tiled_sample(sample, n * 2, 2);
  const Layout L = layout_of(n);
  const uint64_t cap = L.exceptions + n;
  int dev_sms = 0;
  CK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
  int per_sm_e = 0, per_sm_d = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_e, fw_encode<ENCODE_WARPS>, ENCODE_WARPS * 32, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_d, fw_decode<DECODE_WARPS>, DECODE_WARPS * 32, 0));
  void *d_in, *d_out, *d_back, *d_scratch, *d_state;
  CK(cudaMalloc(&d_in, n * 2));
  CK(cudaMalloc(&d_back, n * 2));
  CK(cudaMalloc(&d_out, cap));
  CK(cudaMalloc(&d_scratch, uint64_t(dev_sms) * per_sm_e * ENCODE_WARPS * CHUNK));
  CK(cudaMalloc(&d_state, 8 * L.chunks + 64));
  auto* d_counter = reinterpret_cast<unsigned long long*>(static_cast<uint8_t*>(d_state) + 8 * L.chunks);
  auto* d_status = reinterpret_cast<Status*>(d_counter + 1);
  CK(cudaMemcpy(d_in, host.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(d_status, 0, 4));
  CK(cudaDeviceSynchronize());

  // The pair code (the library's device codec) on the same input.
  const uint32_t chunk_log2 = format::resolve_chunk_log2(0, n);
  const uint64_t pcap = format::max_compressed_bytes(DType::bf16, n, chunk_log2);
  void *d_pout, *d_temp;
  uint64_t* d_pbytes;
  size_t temp_bytes = 0, dtemp_bytes = 0;
  CK(cudaMalloc(&d_pout, pcap));
  CK(cudaMalloc(&d_pbytes, 64));
  auto* d_pstatus = reinterpret_cast<Status*>(d_pbytes + 1);
  CK(device::compress<DType::bf16>(nullptr, temp_bytes, d_in, n, d_pout, pcap, d_pbytes, d_pstatus, 0, chunk_log2));
  CK(device::decompress<DType::bf16>(nullptr, dtemp_bytes, d_pout, pcap, d_back, n, d_pstatus));
  CK(cudaMalloc(&d_temp, std::max(temp_bytes, dtemp_bytes)));
  CK(cudaDeviceSynchronize());

  std::vector<uint8_t> back(n * 2), first_stream;
  for (const bench::SmTarget& t : targets) {
    auto add = [&](const std::string& op, double ratio, double ms) {
      const double gbps = n * 2 / ms / 1e6, roof = t.copy_tbps * 1e3 / (1.0 + ratio);
      rows.push_back({name, op + t.suffix(), ratio, gbps, 100.0 * gbps / roof, t.sms, t.partition});
    };
    // Fixed-width code.
    const int grid_e = t.sms * per_sm_e, grid_d = int(std::min<uint64_t>(uint64_t(t.sms) * per_sm_d,
                                                                         (L.chunks + DECODE_WARPS - 1) / DECODE_WARPS));
    const double enc_ms = bench::median_ms(reps, t.stream, [&] {
      CK(cudaMemsetAsync(d_state, 0, 8 * L.chunks + 8, t.stream));
      fw_encode<ENCODE_WARPS><<<grid_e, ENCODE_WARPS * 32, 0, t.stream>>>(
          static_cast<const uint4*>(d_in), n, static_cast<uint8_t*>(d_out), static_cast<uint8_t*>(d_scratch),
          static_cast<uint64_t*>(d_state), d_counter, d_status);
    });
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    Status st;
    CK(cudaMemcpy(&st, d_status, 4, cudaMemcpyDeviceToHost));
    if (st != Status::ok) std::fprintf(stderr, "%s: encode status %s\n", name.c_str(), status_string(st)), std::exit(1);
    uint32_t total_exc = 0;
    CK(cudaMemcpy(&total_exc, static_cast<uint8_t*>(d_out) + L.table + 4 * L.chunks, 4, cudaMemcpyDeviceToHost));
    const uint64_t bytes = HEADER_BYTES + L.exceptions + total_exc;
    // Every grid must write the same stream.
    std::vector<uint8_t> stream(bytes - HEADER_BYTES);
    CK(cudaMemcpy(stream.data(), d_out, stream.size(), cudaMemcpyDeviceToHost));
    if (first_stream.empty()) first_stream = stream;
    else if (stream != first_stream)
      std::fprintf(stderr, "%s%s: the stream differs from the whole GPU's\n", name.c_str(), t.suffix().c_str()),
          std::exit(1);
    CK(cudaMemset(d_back, 0xA5, n * 2));
    CK(cudaDeviceSynchronize());
    const double dec_ms = bench::median_ms(reps, t.stream, [&] {
      fw_decode<DECODE_WARPS><<<grid_d, DECODE_WARPS * 32, 0, t.stream>>>(static_cast<const uint8_t*>(d_out), n,
                                                                          static_cast<uint4*>(d_back));
    });
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(back.data(), d_back, n * 2, cudaMemcpyDeviceToHost));
    if (back != host)
      std::fprintf(stderr, "%s%s: round trip FAILED\n", name.c_str(), t.suffix().c_str()), std::exit(1);
    const double ratio = double(bytes) / double(n * 2);
    add("fixed-width encode", ratio, enc_ms);
    add("fixed-width decode", ratio, dec_ms);

    // Pair code.
    const bench::DeviceTiming pair = bench::time_device_codec<DType::bf16, thread::PairCode>(
        name + t.suffix(), host, d_in, n, d_pout, pcap, d_back, d_temp, temp_bytes, dtemp_bytes, d_pbytes, d_pstatus,
        chunk_log2, reps, t.stream);
    const double pratio = double(pair.bytes) / double(n * 2);
    add("pair code encode", pratio, pair.enc_ms);
    add("pair code decode", pratio, pair.dec_ms);
  }
  for (void* p : {d_in, d_back, d_out, d_scratch, d_state, d_pout, d_temp, static_cast<void*>(d_pbytes)})
    CK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options opt = bench::parse_options(argc, argv, /*codec=*/true);
  if (!bench::gpu_count("zipcomm_probe_fixed_width")) return 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double copy_tbps = bench::copy_roofline_tbps(opt.mib << 20, opt.reps);
  std::vector<std::unique_ptr<bench::SmPartition>> partitions;
  std::vector<double> partition_copy_tbps;
  const std::vector<bench::SmTarget> targets =
      bench::sm_targets("zipcomm_probe_fixed_width", opt.sms, prop.multiProcessorCount, copy_tbps, opt.mib << 20,
                        opt.reps, partitions, partition_copy_tbps);
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<uint8_t> gauss = bench::gaussian_bf16_sample(rng);
  std::vector<Row> rows;
  for (const char* f : {"llama_grads", "llama_acts", "llama_weights"})
    bench_data(f, bench::read_data_file(opt.data, (std::string(f) + ".bf16").c_str()), opt.mib, opt.reps, targets,
               rows);
  bench_data("gaussian_0.02", gauss, opt.mib, opt.reps, targets, rows);
  // Every bf16 pattern (zeros, subnormals, Inf, NaN), shuffled: most tiles full of exceptions.
  std::vector<uint16_t> patterns(1u << 16);
  for (uint32_t i = 0; i < patterns.size(); ++i) patterns[i] = uint16_t(i);
  std::shuffle(patterns.begin(), patterns.end(), rng);
  std::vector<uint8_t> all(2 * patterns.size());
  std::memcpy(all.data(), patterns.data(), all.size());
  bench_data("all_patterns", all, opt.mib, opt.reps, targets, rows);

  std::printf("%s, %d SMs, %llu MiB bf16, median of %d; copy roofline %.2f TB/s (whole GPU)\n", prop.name,
              prop.multiProcessorCount, (unsigned long long)opt.mib, opt.reps, copy_tbps);
  std::printf("%-16s %-32s %8s %9s %9s %7s\n", "data", "operation", "ratio", "GB/s", "GB/s/SM", "%roof");
  for (const Row& r : rows)
    std::printf("%-16s %-32s %8.4f %9.1f %9.2f %6.1f%%\n", r.data.c_str(), r.op.c_str(), r.ratio, r.gbps,
                r.gbps / r.sms, r.roof_pct);
  if (!opt.json.empty()) {
    std::ofstream o(opt.json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"sm_count\": " << prop.multiProcessorCount
      << ",\n  \"copy_tbps\": " << copy_tbps << ",\n  \"reps\": " << opt.reps << ",\n  \"rows\": [\n";
    bench::write_json_rows(o, rows, [](std::ostream& s, const Row& r) {
      s << "{\"data\": \"" << r.data << "\", \"operation\": \"" << r.op << "\", \"sms\": " << r.sms
        << ", \"ratio\": " << r.ratio << ", \"gbps\": " << r.gbps << ", \"roof_pct\": " << r.roof_pct << "}";
    });
    o << "  ]\n}\n";
  }
  return 0;
}
