// zipcomm_stress_links: the P2P links and the ring allreduce checked byte for byte while the GPU is busy. For
// --seconds it sends random data of random sizes and alignments through HostStagingLink in both modes (stream, and
// copy, its fallback; each with the default options and with a ring of 4 slots that wraps many times), the
// PeerLink from GPU 0 to itself and the ring allreduce with every rank on GPU 0 (RingCommunicator); single
// transfers (as used, coded, raw) and batches (transfer_many, transfer_raw_many). scripts/stress.sh runs it while
// zipcomm_stress_load loads the GPU from another process.
//
// Every transfer is set up on the caller's stream, as the API asks: the source uploaded, the destination and the
// guard bytes around each message filled. Its destination is read back twice: by a copy on the same stream right
// after the transfer is enqueued (what later work on that stream sees; the ring: after its stream's last work) and
// again after wait(). Each message must equal its source and each guard byte must be intact (the ring: every rank
// equals the host reference of the ring's order). Outcomes are counted apart:
//   ok, wrong bytes   wait() said ok and the data differ: the failure this program exists for (exit status 1)
//   error status      a timeout, a corrupt frame, a refused transfer: reported (exit status 3 under --strict)
// A CUDA error ends the program with its place (exit status 1).
// Usage: zipcomm_stress_links [--seconds 60] [--data DIR] [--max-mib 24] [--ring-max-elems 1048576]
//                             [--only SUBSTRING] [--strict] [--reports 20]
// The seed is printed first; ZIPCOMM_TEST_SEED=N repeats a run's choices (sizes, offsets, data, targets).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>
#include <zipcomm/comm/ring/communicator.cuh>
#include <zipcomm/comm/ring/reference.cuh>

#include "example_common.cuh"
#include "gpu_test_data.hpp"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

constexpr DType kLinkType = DType::bf16;
constexpr uint64_t kGuard = 64;   // guard bytes before and after each destination
constexpr uint8_t kFill = 0x5A;   // destinations and guards before a transfer
constexpr uint64_t kMiB = uint64_t(1) << 20;

/// Pinned host bytes (the sources' pools and the read-back buffers: copies from and to them are asynchronous).
class PinnedBytes {
 public:
  explicit PinnedBytes(uint64_t bytes) : size_(bytes) {
    CK(cudaHostAlloc(&p_, bytes ? bytes : 1, cudaHostAllocDefault));
  }
  PinnedBytes(const std::vector<uint8_t>& v) : PinnedBytes(v.size()) { std::memcpy(p_, v.data(), v.size()); }
  ~PinnedBytes() { cudaFreeHost(p_); }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  uint8_t* get() const { return p_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* p_ = nullptr;
  uint64_t size_ = 0;
};

/// Host data a transfer's source is cut from.
struct Pool {
  std::string name;
  std::unique_ptr<PinnedBytes> bytes;
};

/// Bytes of a read-back that differ from what they must be.
struct Diff {
  uint64_t bytes = 0, first = 0;
  uint8_t got = 0, want = 0;
  void add(const uint8_t* got_p, const uint8_t* want_p, uint64_t n, uint64_t at) {
    if (std::memcmp(got_p, want_p, n) == 0) return;
    for (uint64_t i = 0; i < n; ++i) note(got_p[i], want_p[i], at + i);
  }
  void add_fill(const uint8_t* got_p, uint64_t n, uint64_t at) {
    for (uint64_t i = 0; i < n; ++i) note(got_p[i], kFill, at + i);
  }
  std::string str() const {
    if (!bytes) return "exact";
    char b[160];
    std::snprintf(b, sizeof b, "%llu bytes differ, the first at byte %llu (0x%02x, want 0x%02x)",
                  (unsigned long long)bytes, (unsigned long long)first, got, want);
    return b;
  }

 private:
  void note(uint8_t g, uint8_t w, uint64_t at) {
    if (g == w) return;
    if (bytes++ == 0) first = at, got = g, want = w;
  }
};

/// What one target (a link, or a ring) did.
struct Tally {
  uint64_t transfers = 0, bytes = 0, exact = 0, wrong = 0;
  std::map<std::string, uint64_t> errors;  // by status (or refusal)
  uint64_t error_count() const {
    uint64_t e = 0;
    for (const auto& kv : errors) e += kv.second;
    return e;
  }
};

/// What a round of one target sends and checks; state shared by every target.
struct Bench {
  std::mt19937_64 rng;
  uint64_t seed = 0, round = 0;
  cudaStream_t stream = nullptr;
  uint64_t max_bytes = 0, ring_max_elems = 0;
  uint8_t *src = nullptr, *dst = nullptr;  // device: sources, destinations (and the ring's rank buffers)
  std::unique_ptr<PinnedBytes> seen, after;  // read-backs: before and after wait()
  std::vector<Pool> pools;                    // bf16 link data
  std::vector<std::vector<uint8_t>> ring_pools;  // ring data per dtype (bf16, fp16, fp32)
  cudaEvent_t ready = nullptr, ring_done = nullptr;
  int reports_left = 20;
};

/// An element count up to `most`: empty and tiny messages, sizes across the links' tiers and frames, large ones.
uint64_t pick_elems(std::mt19937_64& rng, uint64_t most) {
  uint64_t n;
  const uint32_t k = uint32_t(rng() % 20);
  if (k == 0) n = rng() % 3;
  else if (k < 5) n = 1 + rng() % 4096;
  else if (k < 11) n = 4096 + rng() % (uint64_t(256) << 10);
  else if (k < 17) n = (uint64_t(256) << 10) + rng() % (uint64_t(4) << 20);
  else n = (uint64_t(4) << 20) + rng() % std::max<uint64_t>(1, most);
  return std::min(n, most);
}

enum class Api { transfer, coded, raw, many, many_coded, raw_many };
const char* api_name(Api a) {
  switch (a) {
    case Api::transfer: return "transfer";
    case Api::coded: return "transfer_coded";
    case Api::raw: return "transfer_raw";
    case Api::many: return "transfer_many";
    case Api::many_coded: return "transfer_many (bypass 0: coded)";
    case Api::raw_many: return "transfer_raw_many";
  }
  return "?";
}

/// `api` on a link; the caller's stream is also a peer link's receive stream (GPU 0 to itself).
cudaError_t send_with(HostStagingLink<kLinkType>& link, Api api, const std::vector<P2PMessage>& m, cudaStream_t s) {
  switch (api) {
    case Api::transfer: return link.transfer(m[0].src, m[0].dst, m[0].n, s);
    case Api::coded: return link.transfer_coded(m[0].src, m[0].dst, m[0].n, s);
    case Api::raw: return link.transfer_raw(m[0].src, m[0].dst, m[0].n, s);
    case Api::many:
    case Api::many_coded: return link.transfer_many(m.data(), m.size(), s);
    case Api::raw_many: return link.transfer_raw_many(m.data(), m.size(), s);
  }
  return cudaErrorInvalidValue;
}
cudaError_t send_with(PeerLink<kLinkType>& link, Api api, const std::vector<P2PMessage>& m, cudaStream_t s) {
  switch (api) {
    case Api::transfer: return link.transfer(m[0].src, m[0].dst, m[0].n, s, s);
    case Api::coded: return link.transfer_coded(m[0].src, m[0].dst, m[0].n, s, s);
    case Api::raw: return link.transfer_raw(m[0].src, m[0].dst, m[0].n, s, s);
    case Api::many:
    case Api::many_coded: return link.transfer_many(m.data(), m.size(), s, s);
    case Api::raw_many: return link.transfer_raw_many(m.data(), m.size(), s, s);
  }
  return cudaErrorInvalidValue;
}

/// Prints one outcome that must not happen, with what reproduces its choices.
void report_wrong(Bench& b, const std::string& target, const std::string& what, const Diff& seen, const Diff& after) {
  if (b.reports_left-- <= 0) return;
  std::printf("stress: OK WITH WRONG BYTES: %s, round %llu (seed %llu): %s\n"
              "        read on the stream before wait(): %s\n        read after wait(): %s\n",
              target.c_str(), (unsigned long long)b.round, (unsigned long long)b.seed, what.c_str(),
              seen.str().c_str(), after.str().c_str());
  std::fflush(stdout);
}

void report_error(Bench& b, const std::string& target, const std::string& status, const std::string& what,
                  const Tally& t) {
  if (t.error_count() > 3) return;  // the first few per target; the summary counts them all
  std::printf("stress: error status %s: %s, round %llu: %s\n", status.c_str(), target.c_str(),
              (unsigned long long)b.round, what.c_str());
  std::fflush(stdout);
}

/// One round of a link: 1 message, or a batch of up to 8, from random pools at random even offsets.
template <class Link>
void link_round(Bench& b, const std::string& name, Link& link, uint64_t bypass, Tally& t) {
  static const Api apis[] = {Api::transfer, Api::transfer, Api::coded, Api::coded, Api::raw,
                             Api::many,     Api::many_coded, Api::raw_many};
  const Api api = apis[b.rng() % (sizeof apis / sizeof apis[0])];
  const bool batch = api == Api::many || api == Api::many_coded || api == Api::raw_many;
  const size_t count = batch ? 1 + b.rng() % 8 : 1;
  struct Message {
    uint64_t n, src_at, dst_at;
    const Pool* pool;
    uint64_t pool_at;
  };
  std::vector<Message> msgs(count);
  std::vector<P2PMessage> p2p(count);
  uint64_t src_end = 0, dst_end = kGuard, total = 0;
  for (size_t k = 0; k < count; ++k) {
    Message& m = msgs[k];
    m.n = pick_elems(b.rng, b.max_bytes / 2 / count);
    m.src_at = format::align_up(src_end, 16) + 2 * (b.rng() % 16);  // any element alignment
    m.dst_at = dst_end + 2 * (b.rng() % 16);
    src_end = m.src_at + 2 * m.n;
    dst_end = m.dst_at + 2 * m.n + kGuard;
    m.pool = &b.pools[b.rng() % b.pools.size()];
    m.pool_at = 2 * (b.rng() % ((m.pool->bytes->size() - 2 * m.n) / 2 + 1));
    p2p[k] = {b.src + m.src_at, b.dst + m.dst_at, m.n};
    total += 2 * m.n;
  }
  // Set up on the transfer's stream, in order before it.
  for (const Message& m : msgs)
    if (m.n)
      CK(cudaMemcpyAsync(b.src + m.src_at, m.pool->bytes->get() + m.pool_at, 2 * m.n, cudaMemcpyHostToDevice,
                         b.stream));
  CK(cudaMemsetAsync(b.dst, kFill, dst_end, b.stream));
  link.set_bypass_threshold(api == Api::many_coded ? 0 : bypass);
  const cudaError_t e = send_with(link, api, p2p, b.stream);
  CK(cudaMemcpyAsync(b.seen->get(), b.dst, dst_end, cudaMemcpyDeviceToHost, b.stream));
  const Status st = link.wait();
  CK(cudaMemcpyAsync(b.after->get(), b.dst, dst_end, cudaMemcpyDeviceToHost, b.stream));
  CK(cudaStreamSynchronize(b.stream));
  ++t.transfers;
  t.bytes += total;
  std::string what = std::string(api_name(api)) + ", " + std::to_string(count) + " message(s):";
  for (const Message& m : msgs)
    what += " [n " + std::to_string(m.n) + ", src +" + std::to_string(m.src_at) + ", dst +" +
            std::to_string(m.dst_at) + ", " + m.pool->name + " @" + std::to_string(m.pool_at) + "]";
  if (e != cudaSuccess || st != Status::ok) {
    const std::string status = e != cudaSuccess ? std::string("refused (") + cudaGetErrorName(e) + ")"
                                                : std::string(status_string(st));
    ++t.errors[status];
    report_error(b, name, status, what, t);
    (void)cudaGetLastError();  // a refusal's error is not sticky; a sticky one fails the next CK
    CK(link.reset());
    return;
  }
  Diff diff[2];
  const uint8_t* got[2] = {b.seen->get(), b.after->get()};
  for (int w = 0; w < 2; ++w) {
    uint64_t at = 0;  // every byte outside the messages is a guard byte
    for (const Message& m : msgs) {
      diff[w].add_fill(got[w] + at, m.dst_at - at, at);
      diff[w].add(got[w] + m.dst_at, m.pool->bytes->get() + m.pool_at, 2 * m.n, m.dst_at);
      at = m.dst_at + 2 * m.n;
    }
    diff[w].add_fill(got[w] + at, dst_end - at, at);
  }
  if (diff[0].bytes || diff[1].bytes) {
    ++t.wrong;
    report_wrong(b, name, what, diff[0], diff[1]);
  } else {
    ++t.exact;
  }
}

/// One round of a ring: every rank's input cut from the dtype's pool at its own place, in a buffer at any byte
/// offset with guard bytes around it; every rank's result against the host reference of the ring's order.
void ring_round(Bench& b, const std::string& name, RingCommunicator& comm, Tally& t) {
  const int R = comm.ranks();
  const DType dtypes[] = {DType::bf16, DType::fp16, DType::fp32};
  const int di = int(b.rng() % 3);
  const DType d = dtypes[di];
  const uint64_t eb = format::elem_bytes(d);
  const ReduceOp ops[] = {ReduceOp::sum(), ReduceOp::prod(), ReduceOp::min(), ReduceOp::max(), ReduceOp::avg(R)};
  const ReduceOp op = ops[b.rng() % 5];
  const RingMode modes[] = {RingMode::raw, RingMode::compressed, RingMode::compressed, RingMode::automatic};
  const RingMode mode = modes[b.rng() % 4];
  const uint32_t k = uint32_t(b.rng() % 10);
  const uint64_t n = std::min(b.ring_max_elems, k < 3   ? 1 + b.rng() % 1000
                                                : k < 7 ? 1000 + b.rng() % 200000
                                                        : 200000 + b.rng() % b.ring_max_elems);
  const std::vector<uint8_t>& pool = b.ring_pools[di];
  const uint64_t pool_elems = pool.size() / eb;
  const uint64_t stride = format::align_up(b.ring_max_elems * 4 + 2 * kGuard + 16, 256);  // per rank, bytes
  std::vector<void*> data(R);
  std::vector<const void*> inputs(R);
  std::vector<uint64_t> at(R), from(R);
  for (int r = 0; r < R; ++r) {
    at[r] = uint64_t(r) * stride + kGuard + b.rng() % 4;  // any byte alignment
    from[r] = b.rng() % (pool_elems - n + 1);
    data[r] = b.dst + at[r];
    inputs[r] = pool.data() + from[r] * eb;
  }
  // The inputs on our stream, and the ring's stream after them (allreduce reads them on its own stream).
  CK(cudaMemsetAsync(b.dst, kFill, uint64_t(R) * stride, b.stream));
  for (int r = 0; r < R; ++r)
    CK(cudaMemcpyAsync(data[r], inputs[r], n * eb, cudaMemcpyHostToDevice, b.stream));
  CK(cudaEventRecord(b.ready, b.stream));
  CK(cudaStreamWaitEvent(comm.stream(0), b.ready, 0));
  const cudaError_t e = comm.allreduce(d, data.data(), n, op, mode);
  CK(cudaEventRecord(b.ring_done, comm.stream(0)));
  CK(cudaStreamWaitEvent(b.stream, b.ring_done, 0));
  CK(cudaMemcpyAsync(b.seen->get(), b.dst, uint64_t(R) * stride, cudaMemcpyDeviceToHost, b.stream));
  Status st = Status::ok;
  {
    cudaError_t wait_error = cudaSuccess;
    st = comm.wait(&wait_error);
    CK(wait_error);
  }
  CK(cudaMemcpyAsync(b.after->get(), b.dst, uint64_t(R) * stride, cudaMemcpyDeviceToHost, b.stream));
  CK(cudaStreamSynchronize(b.stream));
  ++t.transfers;
  t.bytes += uint64_t(R) * n * eb;
  const char* mode_name = mode == RingMode::raw ? "raw" : mode == RingMode::compressed ? "compressed" : "automatic";
  std::string what = std::string(mode_name) + " ring, " + dtype_name(d) + " " + reduce_op_name(op.id) + ", n " +
                     std::to_string(n) + ", ranks at +";
  for (int r = 0; r < R; ++r) what += std::to_string(at[r] - uint64_t(r) * stride) + (r + 1 < R ? "/" : "");
  if (e != cudaSuccess || st != Status::ok) {
    const std::string status = e != cudaSuccess ? std::string("refused (") + cudaGetErrorName(e) + ")"
                                                : std::string(status_string(st));
    ++t.errors[status];
    report_error(b, name, status, what, t);
    (void)cudaGetLastError();
    return;  // wait() cleared the windows after an error status
  }
  std::vector<uint8_t> want(n * eb);
  if (ring_reference(d, op, inputs, n, want.data()) != Status::ok) {
    std::fprintf(stderr, "stress: ring_reference refused %s\n", what.c_str());
    std::exit(1);
  }
  Diff diff[2];
  const uint8_t* got[2] = {b.seen->get(), b.after->get()};
  for (int w = 0; w < 2; ++w)
    for (int r = 0; r < R; ++r) {
      const uint64_t base = uint64_t(r) * stride, end = base + stride;
      diff[w].add_fill(got[w] + base, at[r] - base, base);
      diff[w].add(got[w] + at[r], want.data(), n * eb, at[r]);
      diff[w].add_fill(got[w] + at[r] + n * eb, end - at[r] - n * eb, at[r] + n * eb);
    }
  if (diff[0].bytes || diff[1].bytes) {
    ++t.wrong;
    report_wrong(b, name, what, diff[0], diff[1]);
  } else {
    ++t.exact;
  }
}

/// Small items and frames through 4 slots: a message wraps the ring many times.
P2POptions wrapping_options() {
  P2POptions o;
  o.slots = 4;
  o.shape.tier[0] = {16384, 8, 0};
  o.shape.tier[1] = {2048, 16, 65536};
  o.shape.tier[2] = {256, 32, 4096};
  o.sender_blocks = 8;
  o.receiver_blocks = 8;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  std::string data, only;
  uint64_t max_mib = 24, ring_max_elems = uint64_t(1) << 20;
  bool strict = false;
  int reports = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--seconds" && more) seconds = std::atof(argv[++i]);
    else if (a == "--data" && more) data = argv[++i];
    else if (a == "--max-mib" && more) max_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--ring-max-elems" && more) ring_max_elems = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--only" && more) only = argv[++i];
    else if (a == "--reports" && more) reports = std::atoi(argv[++i]);
    else if (a == "--strict") strict = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--seconds 60] [--data DIR] [--max-mib 24] [--ring-max-elems 1048576] "
                   "[--only SUBSTRING] [--strict] [--reports 20]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0) || max_mib < 1 || ring_max_elems < 1)
    return std::fprintf(stderr, "bad --seconds, --max-mib or --ring-max-elems\n"), 2;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("zipcomm_stress_links: no GPU here; nothing to stress.\n");
    return 0;
  }
  CK(cudaSetDevice(0));
  Bench b;
  b.seed = gpu_test::fresh_seed();
  b.rng.seed(b.seed);
  b.reports_left = reports;
  b.max_bytes = max_mib * kMiB;
  b.ring_max_elems = ring_max_elems;
  std::printf("stress: seed %llu (ZIPCOMM_TEST_SEED=%llu repeats the choices), %.0f s, messages up to %llu MiB\n",
              (unsigned long long)b.seed, (unsigned long long)b.seed, seconds, (unsigned long long)max_mib);
  std::fflush(stdout);

  // Sources: Gaussian bf16 with specials, real gradients (or a narrower Gaussian without --data), random bits
  // (incompressible: raw chunks), and mostly zeros (tiny coded frames).
  const uint64_t pool_elems = b.max_bytes / 2 + 4096;
  std::mt19937_64 data_rng(b.seed ^ 0xDA7Aull);
  b.pools.push_back({"gaussian", std::make_unique<PinnedBytes>(gpu_test::test_bf16(pool_elems, data_rng))});
  const std::vector<uint8_t> grads =
      data.empty() ? std::vector<uint8_t>() : gpu_test::read_file(data + "/llama_grads.bf16");
  if (grads.size() >= 2) {
    auto p = std::make_unique<PinnedBytes>(2 * pool_elems);
    for (uint64_t off = 0; off < p->size(); off += grads.size() & ~uint64_t(1))
      std::memcpy(p->get() + off, grads.data(), std::min<uint64_t>(grads.size() & ~uint64_t(1), p->size() - off));
    b.pools.push_back({"llama_grads", std::move(p)});
  } else {
    const std::vector<uint8_t> narrow = gpu_test::gaussian_bytes(kLinkType, pool_elems, 1e-4f, data_rng);
    b.pools.push_back({"narrow gaussian", std::make_unique<PinnedBytes>(narrow)});
  }
  {
    auto p = std::make_unique<PinnedBytes>(2 * pool_elems);
    for (uint64_t i = 0; i < p->size(); i += 8) {
      const uint64_t x = data_rng();
      std::memcpy(p->get() + i, &x, std::min<uint64_t>(8, p->size() - i));
    }
    b.pools.push_back({"random bits", std::move(p)});
    auto z = std::make_unique<PinnedBytes>(2 * pool_elems);
    std::memset(z->get(), 0, z->size());
    const std::vector<uint8_t> some = gpu_test::test_bf16(pool_elems / 64, data_rng);
    for (uint64_t i = 0; i < some.size() / 2; ++i)
      std::memcpy(z->get() + 2 * (data_rng() % pool_elems), &some[2 * i], 2);
    b.pools.push_back({"mostly zeros", std::move(z)});
  }
  for (DType d : {DType::bf16, DType::fp16, DType::fp32})
    b.ring_pools.push_back(gpu_test::ring_data(d, 2 * ring_max_elems, data_rng));

  const uint64_t ring_bytes = RING_MAX_RANKS * format::align_up(ring_max_elems * 4 + 2 * kGuard + 16, 256);
  const uint64_t dst_cap = std::max(b.max_bytes + 8 * (2 * kGuard + 64), ring_bytes);
  CK(cudaMalloc(&b.src, b.max_bytes + 8 * 64 + 256));
  CK(cudaMalloc(&b.dst, dst_cap));
  b.seen = std::make_unique<PinnedBytes>(dst_cap);
  b.after = std::make_unique<PinnedBytes>(dst_cap);
  CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&b.ready, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&b.ring_done, cudaEventDisableTiming));

  // The targets.
  struct Target {
    std::string name;
    std::function<void(Tally&)> round;
    Tally tally;
  };
  std::vector<Target> targets;
  auto wanted = [&](const std::string& name) { return only.empty() || name.find(only) != std::string::npos; };
  std::vector<std::unique_ptr<HostStagingLink<kLinkType>>> host_links;
  const struct {
    const char* name;
    HostLinkMode mode;
    P2POptions opt;
  } host_configs[] = {{"host/stream", HostLinkMode::stream, P2POptions()},
                      {"host/copy", HostLinkMode::copy, P2POptions()},
                      {"host/stream, 4 slots", HostLinkMode::stream, wrapping_options()},
                      {"host/copy, 4 slots", HostLinkMode::copy, wrapping_options()}};
  for (const auto& c : host_configs) {
    if (!wanted(c.name)) continue;
    auto link = std::make_unique<HostStagingLink<kLinkType>>();
    CK(link->init(0, c.opt, c.mode));
    if (link->mode() != c.mode) {  // no 64-bit stream memory operations: copy mode, run by the copy targets
      std::printf("stress: %s: stream mode not supported on this GPU/driver, skipped\n", c.name);
      continue;
    }
    HostStagingLink<kLinkType>* l = link.get();
    const std::string name = c.name;
    const uint64_t bypass = c.opt.bypass_bytes;
    targets.push_back({name, [&b, l, name, bypass](Tally& t) { link_round(b, name, *l, bypass, t); }, {}});
    host_links.push_back(std::move(link));
  }
  std::vector<std::unique_ptr<PeerLink<kLinkType>>> peer_links;
  const struct {
    const char* name;
    P2POptions opt;
  } peer_configs[] = {{"peer/GPU 0 to itself", P2POptions()}, {"peer/GPU 0 to itself, 4 slots", wrapping_options()}};
  for (const auto& c : peer_configs) {
    if (!wanted(c.name)) continue;
    auto link = std::make_unique<PeerLink<kLinkType>>();
    CK(link->init(0, 0, c.opt));
    PeerLink<kLinkType>* l = link.get();
    const std::string name = c.name;
    const uint64_t bypass = c.opt.bypass_bytes;
    targets.push_back({name, [&b, l, name, bypass](Tally& t) { link_round(b, name, *l, bypass, t); }, {}});
    peer_links.push_back(std::move(link));
  }
  std::vector<std::unique_ptr<RingCommunicator>> rings;
  RingOptions small_slots;  // several rounds and passes at moderate sizes (as tests/gpu/test_ring.cu)
  small_slots.max_channels = 3;
  small_slots.rounds_per_pass = 2;
  small_slots.slot_bytes = format::align_up(ring_slot_need(DType::fp32, 16384), RING_SLOT_ALIGN);
  const struct {
    const char* name;
    int ranks;
    RingOptions opt;
  } ring_configs[] = {{"ring/4 ranks on GPU 0", 4, RingOptions()},
                      {"ring/3 ranks on GPU 0, small slots", 3, small_slots},
                      {"ring/8 ranks on GPU 0, small slots", 8, small_slots}};
  for (const auto& c : ring_configs) {
    if (!wanted(c.name)) continue;
    auto comm = std::make_unique<RingCommunicator>();
    CK(comm->init(std::vector<int>(c.ranks, 0), c.opt));
    RingCommunicator* r = comm.get();
    const std::string name = c.name;
    targets.push_back({name, [&b, r, name](Tally& t) { ring_round(b, name, *r, t); }, {}});
    rings.push_back(std::move(comm));
  }
  if (targets.empty()) return std::fprintf(stderr, "stress: no target matches --only %s\n", only.c_str()), 2;

  // Rounds until the time is up, each on a target picked at random.
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  double next_progress = 10;
  auto totals = [&] {
    Tally all;
    for (const Target& t : targets) {
      all.transfers += t.tally.transfers, all.bytes += t.tally.bytes;
      all.exact += t.tally.exact, all.wrong += t.tally.wrong;
      for (const auto& kv : t.tally.errors) all.errors[kv.first] += kv.second;
    }
    return all;
  };
  while (elapsed() < seconds) {
    Target& t = targets[b.rng() % targets.size()];
    t.round(t.tally);
    ++b.round;
    if (elapsed() >= next_progress) {
      const Tally all = totals();
      std::printf("stress: %.0f s: %llu transfers, %llu ok exact, %llu ok with wrong bytes, %llu error statuses\n",
                  elapsed(), (unsigned long long)all.transfers, (unsigned long long)all.exact,
                  (unsigned long long)all.wrong, (unsigned long long)all.error_count());
      std::fflush(stdout);
      next_progress += 10;
    }
  }

  std::printf("\n%-40s %9s %10s %9s %12s  %s\n", "target", "transfers", "MiB", "ok exact", "ok WRONG",
              "error statuses");
  for (const Target& t : targets) {
    std::string errs;
    for (const auto& kv : t.tally.errors)
      errs += (errs.empty() ? "" : ", ") + kv.first + " x" + std::to_string(kv.second);
    std::printf("%-40s %9llu %10.1f %9llu %12llu  %s\n", t.name.c_str(), (unsigned long long)t.tally.transfers,
                t.tally.bytes / double(kMiB), (unsigned long long)t.tally.exact, (unsigned long long)t.tally.wrong,
                errs.empty() ? "-" : errs.c_str());
  }
  const Tally all = totals();
  std::printf("stress summary: seed %llu, %.1f s, %llu transfers: ok exact %llu, ok with wrong bytes %llu, "
              "error statuses %llu\n",
              (unsigned long long)b.seed, elapsed(), (unsigned long long)all.transfers, (unsigned long long)all.exact,
              (unsigned long long)all.wrong, (unsigned long long)all.error_count());
  int rc = 0;
  if (all.wrong) {
    std::printf("stress: FAILED: %llu transfers reported ok and delivered wrong bytes\n",
                (unsigned long long)all.wrong);
    rc = 1;
  } else if (strict && all.error_count()) {
    std::printf("stress: FAILED (--strict): %llu error statuses\n", (unsigned long long)all.error_count());
    rc = 3;
  } else {
    std::printf("stress: PASSED: every transfer that reported ok was exact%s\n",
                all.error_count() ? " (error statuses above were reported, not failed: --strict fails them)" : "");
  }
  CK(cudaStreamDestroy(b.stream));
  CK(cudaFree(b.src));
  CK(cudaFree(b.dst));
  return rc;
}
