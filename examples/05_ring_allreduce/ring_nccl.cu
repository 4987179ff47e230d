// 05_ring_allreduce/ring_nccl.cu: the same ring kernel (comm/ring_allreduce.cuh) on NCCL's device API, one
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
//                          [--reps 5]
//   --ranks N > 1 forks N processes (rank r on GPU r; ncclCommInitRank with a unique id shared through an
//   anonymous shared mapping). Exit 0: every check passed; 1: a check failed; 77: the device API is not
//   usable here (header/library versions differ, no symmetric memory, ranks not all load/store accessible).
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

#include <zipcomm/comm/ring_allreduce.cuh>
#include <zipcomm/comm/ring_reference.cuh>

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

constexpr int EXIT_SKIP = 77;
int g_rank = 0;

#define CK(call)                                                                                          \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "rank %d %s:%d %s: %s\n", g_rank, __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)
#define NK(call)                                                                                          \
  do {                                                                                                    \
    ncclResult_t r_ = (call);                                                                             \
    if (r_ != ncclSuccess) {                                                                              \
      std::fprintf(stderr, "rank %d %s:%d %s: %s\n", g_rank, __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

struct Shared {  // anonymous shared mapping, created before fork
  std::atomic<int> id_ready;
  ncclUniqueId id;
};

struct Config {
  int ranks = 1, reps = 5;
  uint64_t n = 4000037;
  DType dtype = DType::bf16;
  std::string op_name = "sum";
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

int run_rank(int rank, const Config& cfg, Shared* shared) {
  g_rank = rank;
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
  int channels = std::max(1, std::min(32, resident));
  {
    int* d_ch;
    CK(cudaMalloc(&d_ch, sizeof(int)));
    CK(cudaMemcpy(d_ch, &channels, sizeof(int), cudaMemcpyHostToDevice));
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
  CK(cudaMemset(d_peers, 0, sizeof(RingPeers)));
  ring_nccl_setup<<<1, 32, 0, stream>>>(dev, win, R, d_peers);
  CK(cudaGetLastError());
  RingPeers peers;
  CK(cudaMemcpyAsync(&peers, d_peers, sizeof peers, cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  peers.ranks = R;

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
      CK(cudaMemcpy(buf, inputs[rank].data(), bytes, cudaMemcpyHostToDevice));
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
    else {
      std::fprintf(stderr, "usage: %s [--ranks 1] [--n 4000037] [--dtype bf16|fp16|fp32] [--op sum|prod|min|max|avg] "
                           "[--reps 5]\n", argv[0]);
      return 2;
    }
  }
  cfg.dtype = dtype == "fp16" ? DType::fp16 : dtype == "fp32" ? DType::fp32 : DType::bf16;
  if (dtype != dtype_name(cfg.dtype) || cfg.ranks < 1 || cfg.ranks > RING_MAX_RANKS) {
    std::fprintf(stderr, "bad --dtype or --ranks (1..%d)\n", RING_MAX_RANKS);
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
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
      std::fprintf(stderr, "ranks still running after 600 s were killed\n");
      return 1;
    }
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  munmap(mem, sizeof(Shared));
  return worst;
}
