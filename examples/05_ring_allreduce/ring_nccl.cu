// 05_ring_allreduce/ring_nccl.cu: the same ring kernel (comm/ring/allreduce.cuh) on NCCL's device API, one
// process per GPU, compared with ncclAllReduce.
//
// Every rank allocates its ring window with ncclMemAlloc and registers it with ncclCommWindowRegister
// (NCCL_WIN_COLL_SYMMETRIC); a setup kernel turns the window into every peer's address with ncclGetLsaPointer
// (the kernel then pushes its messages into the next rank's window with plain stores and raises that rank's
// flags), and an ncclLsaBarrierSession makes sure every rank has cleared its window before any rank writes
// into it. The ring's own waits are bounded (Status::timeout); NCCL's barrier wait is not (setup only).
// Each rank then runs the uncompressed ring, the compressed ring and ncclAllReduce on the same inputs and
// checks: compressed == uncompressed bit for bit, both == the host reference of the ring's order (every
// process regenerates all ranks' inputs from the seed), and reports how ncclAllReduce's result differs.
//
// Usage: zipcomm_ring_nccl [--ranks 1] [--n 4000037] [--dtype bf16|fp16|fp32] [--op sum|prod|min|max|avg]
//                          [--reps 5] [--sweep MIB [--data DIR] [--json FILE]] [--deadline 600] [--channels 32]
//   --ranks N > 1 forks N processes (rank r on GPU r; ncclCommInitRank with a unique id shared through an
//   anonymous shared mapping). Exit 0: every check passed; 1: a check failed; 77: the device API is not
//   usable here (header/library versions differ, no symmetric memory, ranks not all load/store accessible).
//   --sweep MIB: instead of one size, per-rank sizes 1 MiB, 4 MiB, ... up to MIB MiB (capped by what fits three
//   buffers of that size on every GPU), bf16 real gradients (DIR/llama_grads.bf16, default tests/data, tiled and
//   rotated differently per rank). Per size: the uncompressed ring, the compressed ring and ncclAllReduce on the
//   same buffers, each restored from a pristine copy before every call and started after a 1-element
//   ncclAllReduce that lines the ranks up; CUDA events around the call, median of --reps after a warm-up, the
//   slowest rank's median; algbw = S/t, busbw = algbw * 2(R-1)/R (nccl-tests). Checks on the GPU at every size:
//   compressed == uncompressed bit for bit on every rank, and how ncclAllReduce's result differs from the
//   ring's (elements that differ, largest distance in ulps). Rank 0 prints the table and writes --json.
//   --deadline S: ranks still running after S seconds are killed (exit 1).
//   --channels N: at most N channels (blocks) per rank (default 32; up to 128), fewer if fewer stay resident.
//
// Symmetric memory (which ncclDevCommCreate requires) is decided once, in ncclCommInitRank. NCCL 2.28.3 grants
// it only when all of: every pair of the node's ranks is directly P2P-connected ("isAllDirectP2p", which
// obeys NCCL_P2P_LEVEL), the communicator spans one node, NCCL_WIN_ENABLE is not 0, and cuMem is usable
// (NCCL_CUMEM_ENABLE). A communicator with a single local rank has no pair and NCCL counts it as NOT all
// direct P2P, so `--ranks 1` cannot use the device API on that release, and no environment variable or
// ncclConfig_t field changes that: this example then says so and exits 77. docs/RING.md, "Backends".
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <zipcomm/comm/ring/allreduce.cuh>
#include <zipcomm/comm/ring/reference.cuh>

#include "nccl_check.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

constexpr int EXIT_SKIP = 77;

struct Shared {  // anonymous shared mapping, created before fork
  std::atomic<int> id_ready;
  ncclUniqueId id;
};

struct Config {
  int ranks = 1, reps = 5, deadline_s = 600, max_channels = 32;
  uint64_t n = 4000037;
  DType dtype = DType::bf16;
  std::string op_name = "sum";
  uint64_t sweep_mib = 0;  // > 0: the size sweep
  std::string data = "tests/data", json;
};

/// Every rank's window as this process addresses it, then every rank clears its own window before the
/// barrier: after it, no rank can write into a window that is still being cleared.
__global__ void ring_nccl_setup(ncclDevComm dev, ncclWindow_t win, int ranks, RingPeers* peers) {
  for (int p = threadIdx.x; p < ranks; p += blockDim.x)
    peers->window[p] = static_cast<uint8_t*>(ncclGetLsaPointer(win, 0, p));
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dev, ncclTeamTagLsa(), 0};
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}

std::vector<uint8_t> rank_input(DType d, uint64_t n, int rank) {
  const uint64_t eb = format::elem_bytes(d);
  std::vector<uint8_t> v(n * eb);
  std::mt19937_64 rng(0xA11ED00Du + uint64_t(rank));
  std::normal_distribution<float> nd(0.0f, (d == DType::fp16 ? 0.5f : 0.02f) * float(1 + rank % 4));
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t u;
    const float x = nd(rng);
    std::memcpy(&u, &x, 4);
    const uint32_t e = d == DType::fp32   ? u
                       : d == DType::bf16 ? thread::bf16_from_f32_bits_reference(u)
                                          : thread::fp16_from_f32_bits_reference(u);
    std::memcpy(&v[i * eb], &e, eb);
  }
  return v;
}

template <DType D>
cudaError_t launch_pass(const RingLaunch& a, bool compressed, cudaStream_t s) {
  return compressed ? ring_launch_pass<D, true>(a, s) : ring_launch_pass<D, false>(a, s);
}

double ulp_distance(DType d, uint32_t a, uint32_t b) {
  auto key = [&](uint32_t x) -> int64_t {  // monotone integer order of the values
    const uint32_t sign = d == DType::fp32 ? 0x80000000u : 0x8000u;
    return (x & sign) ? -int64_t(x & ~sign) : int64_t(x);
  };
  return std::fabs(double(key(a) - key(b)));
}

/// --sweep: the three allreduces at per-rank sizes 1 MiB .. cfg.sweep_mib MiB (see the usage above). Every rank
/// runs it with the same sizes and the same calls (the ring's epochs advance alike); returns the exit code.
int run_sweep(int rank, const Config& cfg, ncclComm_t comm, cudaStream_t stream, RingPeers peers,
              const RingWindowLayout& layout, int channels, uint8_t* win_mem, int version) {
  constexpr DType D = DType::bf16;
  const int R = cfg.ranks;
  const uint64_t eb = 2;
  std::vector<uint8_t> sample;
  {
    const std::string path = cfg.data + "/llama_grads.bf16";
    sample = examples::read_file(path);
    if (sample.size() < 2 * eb) {
      std::fprintf(stderr, "rank %d: missing or empty %s (--data DIR)\n", rank, path.c_str());
      return 1;  // every rank reads the same file: every rank stops here
    }
  }
  const uint64_t m = sample.size() / eb;
  // Sizes: three buffers (pristine input, working buffer, the raw ring's result) per rank and 1 GiB to spare;
  // the ranks agree on the smallest cap.
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  const uint64_t spare = uint64_t(1) << 30;
  uint64_t want = cfg.sweep_mib << 20, cap = free_b > spare ? (free_b - spare) / 3 : 0;
  uint64_t* d_u64;
  double* d_f64;
  float* d_bar;
  unsigned long long* d_diff;
  CK(cudaMalloc(&d_u64, 8));
  CK(cudaMalloc(&d_f64, 8 * sizeof(double)));
  CK(cudaMalloc(&d_bar, sizeof(float)));
  CK(cudaMalloc(&d_diff, 2 * sizeof(unsigned long long)));
  CK(cudaMemsetAsync(d_bar, 0, sizeof(float), stream));
  CK(cudaMemcpyAsync(d_u64, &cap, 8, cudaMemcpyHostToDevice, stream));
  NK(ncclAllReduce(d_u64, d_u64, 1, ncclUint64, ncclMin, comm, stream));
  CK(cudaMemcpyAsync(&cap, d_u64, 8, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  std::vector<uint64_t> sizes;
  for (uint64_t b = uint64_t(1) << 20; b <= std::min(want, cap); b *= 4) sizes.push_back(b);
  if (rank == 0 && cap < want)
    std::printf("sweep: sizes above %llu MiB per rank do not fit three buffers on every GPU (%llu MiB free on this "
                "one): skipped\n",
                (unsigned long long)(cap >> 20), (unsigned long long)(free_b >> 20));
  if (sizes.empty()) {
    if (rank == 0) std::fprintf(stderr, "sweep: no size fits (or --sweep below 1 MiB)\n");
    return EXIT_SKIP;
  }
  const uint64_t max_bytes = sizes.back();
  void *pristine, *buf, *ref;
  CK(cudaMalloc(&pristine, max_bytes));
  CK(cudaMalloc(&buf, max_bytes));
  CK(cudaMalloc(&ref, max_bytes));
  {  // pristine: the sample rotated by a per-rank shift, tiled (one period uploaded, then doubling copies)
    const uint64_t shift = ((m / 5) * uint64_t(rank) + uint64_t(rank)) % m;
    std::vector<uint8_t> rotated(m * eb);
    std::memcpy(rotated.data(), sample.data() + shift * eb, (m - shift) * eb);
    std::memcpy(rotated.data() + (m - shift) * eb, sample.data(), shift * eb);
    uint8_t* p = static_cast<uint8_t*>(pristine);
    uint64_t have = std::min<uint64_t>(rotated.size(), max_bytes);
    CK(cudaMemcpy(p, rotated.data(), have, cudaMemcpyHostToDevice));
    for (; have < max_bytes;) {
      const uint64_t c = std::min(have, max_bytes - have);
      CK(cudaMemcpy(p + have, p, c, cudaMemcpyDeviceToDevice));
      have += c;
    }
    CK(cudaDeviceSynchronize());  // the ring runs on a non-blocking stream
  }
  peers.data[rank] = buf;
  const ReduceOp op = cfg.op_name == "prod" ? ReduceOp::prod()
                      : cfg.op_name == "min" ? ReduceOp::min()
                      : cfg.op_name == "max" ? ReduceOp::max()
                      : cfg.op_name == "avg" ? ReduceOp::avg(R)
                                             : ReduceOp::sum();
  const ncclRedOp_t nccl_op = op.id == ReduceOpId::prod  ? ncclProd
                              : op.id == ReduceOpId::min ? ncclMin
                              : op.id == ReduceOpId::max ? ncclMax
                              : op.id == ReduceOpId::avg ? ncclAvg
                                                         : ncclSum;
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  RingSequence seq;
  const uint64_t chunk = ring_chunk_elems(D, layout.slot_bytes);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, rank));
  if (rank == 0)
    std::printf("zipcomm_ring_nccl --sweep: %d ranks (one per GPU, %s), NCCL %d device API, up to %d channels, bf16 "
                "real gradients, %s, median of %d; sizes %llu MiB .. %llu MiB per rank\n",
                R, prop.name, version, channels, cfg.op_name.c_str(), cfg.reps,
                (unsigned long long)(sizes.front() >> 20), (unsigned long long)(max_bytes >> 20));

  // One method (0 raw ring, 1 compressed ring, 2 ncclAllReduce) at n elements: median ms and the ring's status.
  auto timed = [&](int what, uint64_t n, double& ms, Status& st) {
    const uint64_t bytes = n * eb;
    const uint64_t wanted = format::div_up(format::div_up(n, uint64_t(R)), RING_MIN_CHANNEL_ELEMS);
    const int ch = int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(channels), wanted)));
    std::vector<float> times;
    st = Status::ok;
    for (int rep = -1; rep < cfg.reps && st == Status::ok; ++rep) {  // rep -1: warm-up
      CK(cudaMemcpyAsync(buf, pristine, bytes, cudaMemcpyDeviceToDevice, stream));
      NK(ncclAllReduce(d_bar, d_bar, 1, ncclFloat32, ncclSum, comm, stream));  // the ranks start together
      CK(cudaEventRecord(t0, stream));
      if (what == 2) {
        NK(ncclAllReduce(buf, buf, n, ncclBfloat16, nccl_op, comm, stream));
      } else {
        RingLaunch call{};
        call.peers = peers;
        call.part = make_ring_partition(n, R, ch, chunk);
        call.layout = layout;
        call.op = op;
        call.first_rank = rank;
        call.num_ranks = 1;
        call.timeout_ns = 10000000000ull;
        CK(ring_for_each_pass(seq, call, [&](const RingLaunch& a) { return launch_pass<D>(a, what == 1, stream); }));
      }
      CK(cudaEventRecord(t1, stream));
      CK(cudaStreamSynchronize(stream));
      float t = 0;
      CK(cudaEventElapsedTime(&t, t0, t1));
      if (rep >= 0) times.push_back(t);
      // The ranks agree on the worst status after every call, so that all of them take the same path (a rank
      // that stopped alone would leave the others waiting in NCCL's next collective).
      CK(cudaMemcpyAsync(d_u64, ring_error_word(win_mem), 4, cudaMemcpyDeviceToDevice, stream));
      CK(cudaMemsetAsync(reinterpret_cast<uint8_t*>(d_u64) + 4, 0, 4, stream));
      NK(ncclAllReduce(d_u64, d_u64, 1, ncclUint64, ncclMax, comm, stream));
      uint64_t word = 0;
      CK(cudaMemcpyAsync(&word, d_u64, 8, cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      st = static_cast<Status>(uint32_t(word));
    }
    std::sort(times.begin(), times.end());
    ms = times.empty() ? 0.0 : times[times.size() / 2];
  };
  auto diff = [&](uint64_t n) {  // buf against ref (the raw ring's result)
    return examples::diff16(buf, ref, n, d_diff, 4 * prop.multiProcessorCount, stream);
  };
  struct Row {
    uint64_t bytes;
    double ms[3];
    double comp_diff, nccl_diff, nccl_ulp, status;
  };
  std::vector<Row> rows;
  bool ok = true;
  const double bus = 2.0 * (R - 1) / R;
  if (rank == 0)
    std::printf("\n%10s | %9s %8s %8s | %9s %8s %8s | %9s %8s %8s | %7s %11s %6s %s\n", "bytes/rank", "raw ms",
                "algbw", "busbw", "compr ms", "algbw", "busbw", "nccl ms", "algbw", "busbw", "c == r", "nccl diff",
                "ulp", "faster ring");
  for (uint64_t bytes : sizes) {
    const uint64_t n = bytes / eb;
    double ms[3] = {0, 0, 0};
    Status st[3];
    std::array<unsigned long long, 2> cdiff{}, ndiff{};
    timed(0, n, ms[0], st[0]);
    CK(cudaMemcpyAsync(ref, buf, bytes, cudaMemcpyDeviceToDevice, stream));
    if (st[0] == Status::ok) timed(1, n, ms[1], st[1]);
    if (st[0] == Status::ok && st[1] == Status::ok) cdiff = diff(n);
    if (st[0] == Status::ok && st[1] == Status::ok) timed(2, n, ms[2], st[2]), ndiff = diff(n);
    // the slowest rank's medians, the worst rank's differences and status
    const double mine[8] = {ms[0], ms[1], ms[2], double(cdiff[0]), double(ndiff[0]), double(ndiff[1]),
                            double(std::max({uint32_t(st[0]), uint32_t(st[1]), uint32_t(st[2])})), 0.0};
    double all[8];
    CK(cudaMemcpyAsync(d_f64, mine, sizeof mine, cudaMemcpyHostToDevice, stream));
    NK(ncclAllReduce(d_f64, d_f64, 8, ncclFloat64, ncclMax, comm, stream));
    CK(cudaMemcpyAsync(all, d_f64, sizeof all, cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    Row row{bytes, {all[0], all[1], all[2]}, all[3], all[4], all[5], all[6]};
    rows.push_back(row);
    const bool good = row.status == 0.0 && row.comp_diff == 0.0;
    ok = ok && good;
    if (rank == 0) {
      auto gbs = [&](double t) { return t > 0 ? double(bytes) / t / 1e6 : 0.0; };
      char faster[48];
      std::snprintf(faster, sizeof faster, "%s %.2fx", row.ms[1] < row.ms[0] ? "compressed" : "raw",
                    row.ms[1] < row.ms[0] ? row.ms[0] / row.ms[1] : row.ms[1] / std::max(row.ms[0], 1e-9));
      std::printf("%10llu | %9.3f %8.2f %8.2f | %9.3f %8.2f %8.2f | %9.3f %8.2f %8.2f | %7s %11.0f %6.0f %s%s\n",
                  (unsigned long long)bytes, row.ms[0], gbs(row.ms[0]), gbs(row.ms[0]) * bus, row.ms[1],
                  gbs(row.ms[1]), gbs(row.ms[1]) * bus, row.ms[2], gbs(row.ms[2]), gbs(row.ms[2]) * bus,
                  row.status != 0.0 ? "ERROR" : row.comp_diff == 0.0 ? "yes" : "NO", row.nccl_diff, row.nccl_ulp,
                  faster, row.status != 0.0 ? (std::string(" (ring status ") + status_string(Status(uint32_t(row.status))) + ")").c_str() : "");
      std::fflush(stdout);
    }
    if (!good) break;  // every rank saw the same row: all stop together
  }
  if (rank == 0) {
    std::printf("\nGB/s = 1e9 bytes/s; algbw = S/t, busbw = algbw * 2(R-1)/R, S = bytes per rank, t = the slowest "
                "rank's median. c == r: the compressed ring's result equals the uncompressed ring's bit for bit on "
                "every rank. nccl diff / ulp: elements where ncclAllReduce differs from the ring (another order of "
                "the sums) and the largest distance, worst rank. %s\n",
                ok ? "All sizes OK." : "FAILED.");
    if (!cfg.json.empty()) {
      FILE* f = std::fopen(cfg.json.c_str(), "w");
      if (!f) {
        std::fprintf(stderr, "cannot write %s\n", cfg.json.c_str());
      } else {
        std::fprintf(f, "{\n  \"gpu\": \"%s\",\n  \"ranks\": %d,\n  \"nccl_version\": %d,\n  \"backend\": \"nccl "
                        "device API\",\n  \"dtype\": \"bf16\",\n  \"data\": \"llama_grads.bf16 tiled, rotated per "
                        "rank\",\n  \"op\": \"%s\",\n  \"reps\": %d,\n  \"channels\": %d,\n  \"ok\": %s,\n  \"rows\": [\n",
                     prop.name, R, version, cfg.op_name.c_str(), cfg.reps, channels, ok ? "true" : "false");
        for (size_t i = 0; i < rows.size(); ++i) {
          const Row& r = rows[i];
          auto gbs = [&](double t) { return t > 0 ? double(r.bytes) / t / 1e6 : 0.0; };
          std::fprintf(f,
                       "    {\"bytes_per_rank\": %llu, \"raw_ms\": %.6f, \"raw_algbw_gbps\": %.3f, \"raw_busbw_gbps\": "
                       "%.3f, \"compressed_ms\": %.6f, \"compressed_algbw_gbps\": %.3f, \"compressed_busbw_gbps\": "
                       "%.3f, \"nccl_ms\": %.6f, \"nccl_algbw_gbps\": %.3f, \"nccl_busbw_gbps\": %.3f, "
                       "\"compressed_equals_raw\": %s, \"nccl_diff_elems\": %.0f, \"nccl_max_ulp\": %.0f, "
                       "\"status\": \"%s\", \"faster\": \"%s\"}%s\n",
                       (unsigned long long)r.bytes, r.ms[0], gbs(r.ms[0]), gbs(r.ms[0]) * bus, r.ms[1], gbs(r.ms[1]),
                       gbs(r.ms[1]) * bus, r.ms[2], gbs(r.ms[2]), gbs(r.ms[2]) * bus,
                       r.comp_diff == 0.0 && r.status == 0.0 ? "true" : "false", r.nccl_diff, r.nccl_ulp,
                       status_string(Status(uint32_t(r.status))), r.ms[1] < r.ms[0] ? "compressed" : "raw",
                       i + 1 < rows.size() ? "," : "");
        }
        std::fprintf(f, "  ]\n}\n");
        std::fclose(f);
      }
    }
  }
  CK(cudaEventDestroy(t0));
  CK(cudaEventDestroy(t1));
  CK(cudaFree(pristine));
  CK(cudaFree(buf));
  CK(cudaFree(ref));
  CK(cudaFree(d_u64));
  CK(cudaFree(d_f64));
  CK(cudaFree(d_bar));
  CK(cudaFree(d_diff));
  return ok ? 0 : 1;
}

int run_rank(int rank, const Config& cfg, Shared* shared) {
  examples::error_rank() = rank;
  const int R = cfg.ranks;
  const DType d = cfg.dtype;
  const uint64_t n = cfg.n, eb = format::elem_bytes(d), bytes = n * eb;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("zipcomm_ring_nccl: no GPU on this machine; nothing to run.\n");
    return EXIT_SKIP;
  }
  if (devices < R) {
    std::fprintf(stderr, "rank %d: %d ranks need %d GPUs, %d present\n", rank, R, R, devices);
    return EXIT_SKIP;
  }
  CK(cudaSetDevice(rank));
  int version = 0;
  NK(ncclGetVersion(&version));
  if (version != NCCL_VERSION_CODE) {
    // ncclDevComm's layout changes between releases: the device code must be built with the library's headers.
    std::fprintf(stderr, "rank %d: NCCL library %d, headers %d: device API not usable\n", rank, version,
                 NCCL_VERSION_CODE);
    return EXIT_SKIP;
  }
  ncclUniqueId id;
  if (rank == 0) {
    NK(ncclGetUniqueId(&id));
    if (shared) {
      shared->id = id;
      shared->id_ready.store(1, std::memory_order_release);
    }
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!shared->id_ready.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "rank %d: no unique id from rank 0 within 60 s\n", rank);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    id = shared->id;
  }
  ncclComm_t comm;
  NK(ncclCommInitRank(&comm, R, id, rank));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Channels: what every GPU keeps resident (the ranks agree on the minimum).
  int resident = 0;
  CK((d == DType::bf16   ? ring_resident_blocks<DType::bf16, true>(resident)
      : d == DType::fp16 ? ring_resident_blocks<DType::fp16, true>(resident)
                         : ring_resident_blocks<DType::fp32, true>(resident)));
  int channels = std::max(1, std::min(cfg.max_channels, resident));
  {
    int* d_ch;
    CK(cudaMalloc(&d_ch, sizeof(int)));
    CK(cudaMemcpyAsync(d_ch, &channels, sizeof(int), cudaMemcpyHostToDevice, stream));  // `stream` is non-blocking
    NK(ncclAllReduce(d_ch, d_ch, 1, ncclInt32, ncclMin, comm, stream));
    CK(cudaMemcpyAsync(&channels, d_ch, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    CK(cudaFree(d_ch));
  }
  const RingWindowLayout layout =
      make_ring_window_layout(channels, 2 * uint32_t(std::max(1, ring_slots_per_round(R))), ring_default_slot_bytes());
  void* win_mem = nullptr;
  ncclWindow_t win;
  NK(ncclMemAlloc(&win_mem, layout.total_bytes));
  CK(cudaMemset(win_mem, 0, layout.mailbox_offset));
  CK(cudaDeviceSynchronize());
  if (ncclCommWindowRegister(comm, win_mem, layout.total_bytes, &win, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclCommWindowRegister failed (no symmetric memory here)\n", rank);
    return EXIT_SKIP;
  }
  ncclDevComm dev;
#if defined(NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER)
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;  // later releases check a magic field
#else
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);  // 2.28 has no initializer macro
#endif
  reqs.lsaBarrierCount = 1;
  if (const ncclResult_t r = ncclDevCommCreate(comm, &reqs, &dev); r != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclDevCommCreate failed: %s (%s)\n", rank, ncclGetErrorString(r),
                 ncclGetLastError(comm));
    if (R == 1 && version <= NCCL_VERSION(2, 28, 3))
      std::fprintf(stderr,
                   "rank 0: skipped: NCCL %d grants symmetric memory (needed by ncclDevCommCreate) only if every pair "
                   "of a node's ranks is directly P2P-connected; a 1-rank communicator has no pair and counts as not "
                   "(ncclTransportCheckP2pType: isAllDirectP2p = 0 when localRanks == 1; NCCL_DEBUG=INFO prints "
                   "\"Check P2P Type isAllDirectP2p 0\"). No environment variable or config field changes that: run "
                   "--ranks 2 or more on GPUs with P2P (NVLink) between them.\n",
                   version);
    else
      std::fprintf(stderr,
                   "rank %d: skipped (NCCL's warning above names the cause). ncclDevCommCreate needs symmetric "
                   "memory, which NCCL grants at ncclCommInitRank only if the ranks are on one node, every pair of "
                   "them is directly P2P-connected (within NCCL_P2P_LEVEL up to 2.28.3), NCCL_WIN_ENABLE is not 0 "
                   "and cuMem works (NCCL_CUMEM_ENABLE); NCCL_DEBUG=INFO shows the inputs (\"Check P2P Type\").\n",
                   rank);
    return EXIT_SKIP;
  }
  if (dev.lsaSize != R || dev.lsaRank != rank) {
    std::fprintf(stderr, "rank %d: the ring needs every rank load/store accessible (lsaSize %d of %d)\n", rank,
                 dev.lsaSize, R);
    return EXIT_SKIP;
  }
  RingPeers* d_peers;
  CK(cudaMalloc(&d_peers, sizeof(RingPeers)));
  CK(cudaMemsetAsync(d_peers, 0, sizeof(RingPeers), stream));  // before the setup kernel, on its stream
  ring_nccl_setup<<<1, 32, 0, stream>>>(dev, win, R, d_peers);
  CK(cudaGetLastError());
  RingPeers peers;
  CK(cudaMemcpyAsync(&peers, d_peers, sizeof peers, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  peers.ranks = R;
  if (cfg.sweep_mib > 0) {
    const int rc = run_sweep(rank, cfg, comm, stream, peers, layout, channels, static_cast<uint8_t*>(win_mem), version);
    CK(cudaFree(d_peers));
    NK(ncclDevCommDestroy(comm, &dev));
    NK(ncclCommWindowDeregister(comm, win));
    NK(ncclMemFree(win_mem));
    NK(ncclCommDestroy(comm));
    return rc;
  }

  // Inputs of every rank (so every process can compute the reference), own buffer on the GPU.
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<const void*> in_ptrs;
  for (int r = 0; r < R; ++r) inputs.push_back(rank_input(d, n, r));
  for (const auto& v : inputs) in_ptrs.push_back(v.data());
  const ReduceOp op = cfg.op_name == "prod" ? ReduceOp::prod()
                      : cfg.op_name == "min" ? ReduceOp::min()
                      : cfg.op_name == "max" ? ReduceOp::max()
                      : cfg.op_name == "avg" ? ReduceOp::avg(R)
                                             : ReduceOp::sum();
  const ncclRedOp_t nccl_op = op.id == ReduceOpId::prod  ? ncclProd
                              : op.id == ReduceOpId::min ? ncclMin
                              : op.id == ReduceOpId::max ? ncclMax
                              : op.id == ReduceOpId::avg ? ncclAvg
                                                         : ncclSum;
  const ncclDataType_t nccl_type = d == DType::bf16 ? ncclBfloat16 : d == DType::fp16 ? ncclFloat16 : ncclFloat32;
  void* buf;
  CK(cudaMalloc(&buf, bytes + 16));
  peers.data[rank] = buf;
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  RingSequence seq;
  const uint64_t chunk = ring_chunk_elems(d, layout.slot_bytes);

  // what: 0 raw ring, 1 compressed ring, 2 ncclAllReduce
  auto run = [&](int what, std::vector<uint8_t>& out, double& ms, Status& st) {
    std::vector<float> times;
    st = Status::ok;
    for (int rep = 0; rep < cfg.reps && st == Status::ok; ++rep) {
      // On the ring's stream (non-blocking): a legacy-stream copy could still be landing when the ring reads buf.
      CK(cudaMemcpyAsync(buf, inputs[rank].data(), bytes, cudaMemcpyHostToDevice, stream));
      CK(cudaEventRecord(t0, stream));
      if (what == 2) {
        NK(ncclAllReduce(buf, buf, n, nccl_type, nccl_op, comm, stream));
      } else {
        RingLaunch call{};
        call.peers = peers;
        call.part = make_ring_partition(n, R, channels, chunk);
        call.layout = layout;
        call.op = op;
        call.first_rank = rank;
        call.num_ranks = 1;
        call.timeout_ns = 10000000000ull;
        CK(ring_for_each_pass(seq, call, [&](const RingLaunch& a) {
          return d == DType::bf16   ? launch_pass<DType::bf16>(a, what == 1, stream)
                 : d == DType::fp16 ? launch_pass<DType::fp16>(a, what == 1, stream)
                                    : launch_pass<DType::fp32>(a, what == 1, stream);
        }));
      }
      CK(cudaEventRecord(t1, stream));
      CK(cudaStreamSynchronize(stream));
      float t = 0;
      CK(cudaEventElapsedTime(&t, t0, t1));
      times.push_back(t);
      uint32_t word = 0;
      CK(cudaMemcpy(&word, ring_error_word(static_cast<uint8_t*>(win_mem)), 4, cudaMemcpyDeviceToHost));
      st = static_cast<Status>(word);
    }
    std::sort(times.begin(), times.end());
    ms = times[times.size() / 2];
    out.resize(bytes);
    CK(cudaMemcpy(out.data(), buf, bytes, cudaMemcpyDeviceToHost));
  };
  std::vector<uint8_t> raw, comp, nccl, want(bytes);
  double raw_ms = 0, comp_ms = 0, nccl_ms = 0;
  Status raw_st, comp_st, nccl_st;
  run(0, raw, raw_ms, raw_st);
  run(1, comp, comp_ms, comp_st);
  run(2, nccl, nccl_ms, nccl_st);
  if (ring_reference(d, op, in_ptrs, n, want.data()) != Status::ok) return 1;

  uint64_t nccl_diff = 0;
  double max_ulp = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &nccl[i * eb], eb);
    std::memcpy(&b, &raw[i * eb], eb);
    if (a != b) ++nccl_diff, max_ulp = std::max(max_ulp, ulp_distance(d, a, b));
  }
  const bool ok = raw_st == Status::ok && comp_st == Status::ok && comp == raw && raw == want;
  const double bus = R > 1 ? 2.0 * (R - 1) / R : 1.0;
  auto gbs = [&](double ms) { return ms > 0 ? double(bytes) / ms / 1e6 : 0.0; };
  std::printf("rank %d/%d (NCCL %d, device API, %d channels, %s %s, %llu elements): raw ring %s %.3f ms (algbw "
              "%.1f GB/s, busbw %.1f), compressed ring %s %.3f ms (%.1f, %.1f), ncclAllReduce %.3f ms (%.1f, %.1f); "
              "compressed == raw: %s; raw == host reference of the ring order: %s; ncclAllReduce differs from the "
              "ring in %llu of %llu elements (max %.0f ulp) -> %s\n",
              rank, R, version, channels, dtype_name(d), cfg.op_name.c_str(), (unsigned long long)n,
              status_string(raw_st), raw_ms, gbs(raw_ms), gbs(raw_ms) * bus, status_string(comp_st), comp_ms,
              gbs(comp_ms), gbs(comp_ms) * bus, nccl_ms, gbs(nccl_ms), gbs(nccl_ms) * bus, comp == raw ? "yes" : "NO",
              raw == want ? "yes" : "NO", (unsigned long long)nccl_diff, (unsigned long long)n, max_ulp,
              ok ? "OK" : "FAILED");
  (void)nccl_st;
  CK(cudaFree(buf));
  CK(cudaFree(d_peers));
  NK(ncclDevCommDestroy(comm, &dev));
  NK(ncclCommWindowDeregister(comm, win));
  NK(ncclMemFree(win_mem));
  NK(ncclCommDestroy(comm));
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string dtype = "bf16";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--ranks" && more) cfg.ranks = std::atoi(argv[++i]);
    else if (a == "--n" && more) cfg.n = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--dtype" && more) dtype = argv[++i];
    else if (a == "--op" && more) cfg.op_name = argv[++i];
    else if (a == "--reps" && more) cfg.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sweep" && more) cfg.sweep_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--data" && more) cfg.data = argv[++i];
    else if (a == "--json" && more) cfg.json = argv[++i];
    else if (a == "--deadline" && more) cfg.deadline_s = std::max(1, std::atoi(argv[++i]));
    else if (a == "--channels" && more) cfg.max_channels = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--ranks 1] [--n 4000037] [--dtype bf16|fp16|fp32] [--op sum|prod|min|max|avg] "
                           "[--reps 5] [--sweep MIB [--data DIR] [--json FILE]] [--deadline 600] [--channels 32]\n",
                   argv[0]);
      return 2;
    }
  }
  cfg.dtype = dtype == "fp16" ? DType::fp16 : dtype == "fp32" ? DType::fp32 : DType::bf16;
  if (dtype != dtype_name(cfg.dtype) || cfg.ranks < 1 || cfg.ranks > RING_MAX_RANKS || cfg.max_channels < 1 ||
      cfg.max_channels > RING_MAX_CHANNELS) {
    std::fprintf(stderr, "bad --dtype, --ranks (1..%d) or --channels (1..%d)\n", RING_MAX_RANKS, RING_MAX_CHANNELS);
    return 2;
  }
  if (cfg.sweep_mib > 0 && cfg.dtype != DType::bf16) {
    std::fprintf(stderr, "--sweep measures bf16 real gradients: --dtype must be bf16\n");
    return 2;
  }
  if (cfg.ranks == 1) return run_rank(0, cfg, nullptr);

  // No CUDA or NCCL call in the parent: children must not inherit an initialized driver.
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return std::perror("mmap"), 1;
  Shared* shared = new (mem) Shared();
  shared->id_ready.store(0);
  std::vector<pid_t> children;
  for (int r = 0; r < cfg.ranks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) return std::perror("fork"), 1;
    if (pid == 0) {
      const int rc = run_rank(r, cfg, shared);
      std::fflush(stdout);  // _Exit does not flush stdio
      std::fflush(stderr);
      std::_Exit(rc);
    }
    children.push_back(pid);
  }
  // Bounded wait: a rank stuck past the deadline is killed (by its pid) and counts as a failure.
  int worst = 0;
  std::vector<bool> done(children.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.deadline_s);
  for (size_t left = children.size(); left > 0;) {
    for (size_t i = 0; i < children.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(children[i], &status, WNOHANG) == children[i]) {
        done[i] = true, --left;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        worst = code == 1 || worst == 1 ? 1 : std::max(worst, code);
      }
    }
    if (left && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < children.size(); ++i)
        if (!done[i]) kill(children[i], SIGKILL), waitpid(children[i], nullptr, 0), done[i] = true;
      std::fprintf(stderr, "ranks still running after %d s were killed\n", cfg.deadline_s);
      return 1;
    }
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  munmap(mem, sizeof(Shared));
  return worst;
}
