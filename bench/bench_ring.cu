// zipcomm ring allreduce benchmark: algorithm and bus bandwidth (nccl-tests definitions: algbw = S / t for S
// bytes per rank, busbw = algbw * 2 (R - 1) / R) against message size, for the compressed ring, the same ring
// uncompressed, and the automatic mode. Prints tables, writes JSON.
//
// The automatic switch: each communicator is calibrated first (RingCommunicator::calibrate on the same sample,
// 64 KiB .. --mib per rank; --no-calibrate keeps the untuned default, the raw ring). At every size of the sweep
// the automatic row says which ring it ran, why (calibrated / default), and whether that was the faster of the
// two rings measured at that size in the sweep ("right"; "tie" when they are within the switch's 3% margin).
//
//   one GPU      R simulated ranks share the GPU (its HBM is the "link"): this measures the codec side. For
//                each size it reports how the compressed ring's block time splits between waiting on flags and
//                each kind of fused hop (encode, decode + reduce + encode, decode + forward, decode), and the
//                compressed/raw bytes actually sent.
//   >= 2 GPUs    additionally one rank per GPU through peer access, and ncclAllReduce when built with NCCL.
//
// Every timed call starts from the same inputs (restored by an untimed device copy); the compressed and raw
// results are compared bit for bit on every rank at every size, on the GPUs (exit 1 on a difference);
// ncclAllReduce's result is compared with the ring's (elements that differ, largest distance in ulps: another
// order of the sums, not required to match). Data: a real bf16 gradient sample tiled to the message size and
// rotated differently on every rank. The device copy bandwidth is measured in the same run. A size whose
// buffers (2 per rank, plus the raw result on rank 0's GPU, plus 1 GiB to spare) do not fit in a GPU's free
// memory is skipped with a message; calibration stops at the largest size that fits (2 buffers per rank).
// Usage: zipcomm_bench_ring [--data DIR] [--ranks 8] [--mib 256] [--sim-mib MIB] [--reps 10] [--json FILE]
//                           [--no-calibrate] [--channels 32]
//   --mib: the largest message per rank (sizes go from 16 KiB up by 4x)
//   --ranks: simulated ranks, and the peer ring's ranks (GPUs 0 .. min(ranks, GPUs) - 1)
//   --sim-mib: the largest message of the simulated backend (default --mib; 0: no simulated backend)
//   --channels: RingOptions::max_channels of every communicator (default 32, the library's; up to 128: more of
//                the GPU's SMs for the compressed ring's coding when each rank has a GPU)
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <zipcomm/comm/ring/communicator.cuh>

#include "bench_common.cuh"

#if defined(ZIPCOMM_BENCH_WITH_NCCL)
#include "nccl_check.cuh"
#endif

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

constexpr DType D = DType::bf16;

struct Row {
  std::string backend, what;
  int ranks;
  uint64_t bytes;  // per rank
  double ms, algbw, busbw;
  double sent_ratio;                               // bytes sent / raw ring's bytes sent (rank 0)
  std::array<double, RING_TIMER_SLOTS> share{};    // fraction of block time per timer slot (compressed rows)
  bool compressed;
  RingSwitchSource source = RingSwitchSource::forced;  // automatic rows: why that ring
  std::string verdict;                                 // automatic rows: right / wrong / tie
  double diff_elems = 0, diff_ulp = 0;                 // ncclAllReduce rows: how its result differs from the ring's
};

constexpr uint64_t SPARE_BYTES = uint64_t(1) << 30;  // left free on every GPU for the rings, NCCL, the runtime

/// Free memory of a device, in bytes.
uint64_t free_bytes(int device) {
  CK(cudaSetDevice(device));
  size_t f = 0, t = 0;
  CK(cudaMemGetInfo(&f, &t));
  return f;
}

/// Whether `per_rank` bytes for every rank (rank_device[r]), plus `extra0` on rank 0's device and SPARE_BYTES,
/// fit in each device's free memory; else a message naming the first device short of it.
bool fits(const std::vector<int>& rank_device, uint64_t per_rank, uint64_t extra0, std::string& why) {
  for (size_t r = 0; r < rank_device.size(); ++r) {
    if (r > 0 && rank_device[r] == rank_device[r - 1]) continue;
    const int d = rank_device[r];
    const uint64_t ranks = uint64_t(std::count(rank_device.begin(), rank_device.end(), d));
    const uint64_t need = ranks * per_rank + (d == rank_device[0] ? extra0 : 0) + SPARE_BYTES;
    const uint64_t have = free_bytes(d);
    if (need > have) {
      char m[160];
      std::snprintf(m, sizeof m, "GPU %d needs %.1f GiB (%llu rank(s)), %.1f GiB free", d, double(need) / (1 << 30),
                    (unsigned long long)ranks, double(have) / (1 << 30));
      why = m;
      return false;
    }
  }
  return true;
}

/// Whether the automatic row ran the faster of the raw and compressed rows of its size.
std::string switch_verdict(bool compressed, double raw_ms, double comp_ms) {
  if (std::fabs(comp_ms - raw_ms) <= RING_SWITCH_DEFAULT_MARGIN * raw_ms) return "tie";
  return compressed == (comp_ms < raw_ms) ? "right" : "wrong";
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// R ranks' buffers (the ring works in place), their pristine inputs, on rank_device[r], and `ref` (rank 0's
/// device): the raw ring's result, to compare every other result with, on the GPUs.
struct Buffers {
  std::vector<int> device;
  std::vector<void*> data, pristine;
  void* ref = nullptr;
  std::vector<unsigned long long*> diff;  // per rank, [2] on its device: what compare() counts
  uint64_t bytes = 0;
  Buffers(const std::vector<int>& rank_device, const std::vector<uint8_t>& sample, uint64_t n) : device(rank_device) {
    const uint64_t eb = format::elem_bytes(D), m = sample.size() / eb;
    bytes = n * eb;
    std::vector<uint8_t> rotated(m * eb);
    for (size_t r = 0; r < device.size(); ++r) {
      const uint64_t shift = ((m / 5) * r + r) % m;
      std::memcpy(rotated.data(), sample.data() + shift * eb, (m - shift) * eb);
      std::memcpy(rotated.data() + (m - shift) * eb, sample.data(), shift * eb);
      CK(cudaSetDevice(device[r]));
      void *a, *b;
      CK(cudaMalloc(&a, bytes));
      CK(cudaMalloc(&b, bytes));
      // the rotated sample tiled: one period uploaded, then doubling device copies
      uint8_t* p = static_cast<uint8_t*>(b);
      uint64_t have = std::min<uint64_t>(rotated.size(), bytes);
      CK(cudaMemcpy(p, rotated.data(), have, cudaMemcpyHostToDevice));
      for (; have < bytes;) {
        const uint64_t c = std::min(have, bytes - have);
        CK(cudaMemcpy(p + have, p, c, cudaMemcpyDeviceToDevice));
        have += c;
      }
      CK(cudaDeviceSynchronize());  // the rings' streams do not wait for the legacy stream
      unsigned long long* d;
      CK(cudaMalloc(&d, 2 * sizeof(unsigned long long)));
      data.push_back(a);
      pristine.push_back(b);
      diff.push_back(d);
    }
    CK(cudaSetDevice(device[0]));
    CK(cudaMalloc(&ref, bytes));
  }
  ~Buffers() {
    for (size_t r = 0; r < data.size(); ++r) {
      cudaSetDevice(device[r]);
      cudaFree(data[r]);
      cudaFree(pristine[r]);
      cudaFree(diff[r]);
    }
    cudaSetDevice(device[0]);
    cudaFree(ref);
  }
  /// Restores the inputs, stream-ordered before the next call on each rank's stream.
  void restore(const std::vector<cudaStream_t>& streams) {
    for (size_t r = 0; r < data.size(); ++r) {
      CK(cudaSetDevice(device[r]));
      CK(cudaMemcpyAsync(data[r], pristine[r], bytes, cudaMemcpyDeviceToDevice, streams[r]));
    }
  }
  /// ref = rank 0's current result. Call with every stream idle.
  void keep_reference() {
    CK(cudaSetDevice(device[0]));
    CK(cudaMemcpy(ref, data[0], bytes, cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());
  }
  /// Rank r's current result against ref, on rank r's GPU (ref through peer access when it is another GPU's):
  /// {elements that differ, largest distance in ulps}. Call with every stream idle.
  std::array<unsigned long long, 2> compare(int r) {
    CK(cudaSetDevice(device[r]));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device[r]));
    return examples::diff16(data[r], ref, bytes / format::elem_bytes(D), diff[r], 4 * sms);
  }
};

/// One line per measured row as the bench goes (the tables come at the end).
void progress(const Row& r) {
  std::printf("  measured: %-9s %-17s %2d ranks %10llu bytes/rank %9.3f ms busbw %8.2f GB/s\n", r.backend.c_str(),
              r.what.c_str(), r.ranks, (unsigned long long)r.bytes, r.ms, r.busbw);
  std::fflush(stdout);
}

void sync_streams(const RingCommunicator& comm) {
  for (int g = 0; g < comm.device_groups(); ++g) CK(cudaStreamSynchronize(comm.stream(g)));
}

/// Times `reps` calls of the ring in `mode` on `buf`. Single device: CUDA events on its stream; several:
/// host time around synchronized calls. Fills timers (summed over reps) and bytes sent by rank 0 per call.
double time_ring(RingCommunicator& comm, Buffers& buf, RingMode mode, int reps,
                 std::array<uint64_t, RING_TIMER_SLOTS>& timers, uint64_t& sent) {
  const int R = comm.ranks();
  std::vector<cudaStream_t> streams(R);
  for (int r = 0, g = 0; r < R; ++r) {
    if (r > 0 && buf.device[r] != buf.device[r - 1]) ++g;
    streams[r] = comm.stream(g);
  }
  const uint64_t n = buf.bytes / format::elem_bytes(D);
  auto call = [&] {
    CK(comm.allreduce<D>(buf.data.data(), n, ReduceOp::sum(), mode));
  };
  Status st;
  cudaError_t wait_error = cudaSuccess;  // a CUDA failure while waiting
  for (int i = 0; i < 2; ++i) buf.restore(streams), call();  // warm-up
  st = comm.wait(&wait_error);
  CK(wait_error);
  if (st != Status::ok) std::fprintf(stderr, "ring status %s\n", status_string(st)), std::exit(1);
  CK(comm.reset_counters());
  std::vector<double> t;
  const bool one_device = comm.device_groups() == 1;
  cudaEvent_t a, b;
  CK(cudaSetDevice(buf.device[0]));
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    buf.restore(streams);
    if (one_device) {
      CK(cudaEventRecord(a, streams[0]));
      call();
      CK(cudaSetDevice(buf.device[0]));
      CK(cudaEventRecord(b, streams[0]));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    } else {  // host time from all streams idle to all streams done (wait() would add its status reads)
      sync_streams(comm);
      const double t0 = now_ms();
      call();
      sync_streams(comm);
      t.push_back(now_ms() - t0);
    }
  }
  st = comm.wait(&wait_error);
  CK(wait_error);
  if (st != Status::ok) std::fprintf(stderr, "ring status %s\n", status_string(st)), std::exit(1);
  std::vector<uint64_t> bytes_sent;
  std::vector<std::array<uint64_t, RING_TIMER_SLOTS>> all;
  CK(comm.read_counters(bytes_sent, &all));
  timers = all[0];
  sent = bytes_sent[0] / uint64_t(reps);
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return bench::median(t);
}

void add_ring_rows(const std::string& backend, RingCommunicator& comm, Buffers& buf, int reps, std::vector<Row>& rows) {
  const int R = comm.ranks();
  const double S = double(buf.bytes), bus = R > 1 ? 2.0 * (R - 1) / R : 1.0;
  uint64_t raw_sent = 0;
  double raw_ms = 0, comp_ms = 0;
  for (RingMode mode : {RingMode::raw, RingMode::compressed, RingMode::automatic}) {
    std::array<uint64_t, RING_TIMER_SLOTS> timers{};
    uint64_t sent = 0;
    const double ms = time_ring(comm, buf, mode, reps, timers, sent);
    Row row{backend,
            mode == RingMode::raw ? "uncompressed ring" : mode == RingMode::compressed ? "compressed ring" : "automatic",
            R, buf.bytes, ms, S / ms / 1e6, S / ms / 1e6 * bus, 0.0, {}, comm.last_call().compressed};
    row.source = comm.last_call().source;
    if (mode == RingMode::raw) raw_sent = sent, raw_ms = ms;
    if (mode == RingMode::compressed) comp_ms = ms;
    if (mode == RingMode::automatic) row.verdict = switch_verdict(row.compressed, raw_ms, comp_ms);
    row.sent_ratio = raw_sent ? double(sent) / double(raw_sent) : 0.0;
    const double total = double(timers[RING_TIMER_TOTAL]);
    for (int k = 0; k < RING_TIMER_SLOTS; ++k) row.share[k] = total > 0 ? double(timers[k]) / total : 0.0;
    rows.push_back(row);
    progress(row);
    // every rank's result must be the raw ring's on rank 0, bit for bit (all ran last from the same inputs)
    if (mode == RingMode::raw) buf.keep_reference();
    for (int r = 0; r < R; ++r) {
      const std::array<unsigned long long, 2> d = buf.compare(r);
      if (d[0] != 0) {
        std::fprintf(stderr, "%s, %s, %llu bytes: rank %d's result differs from the raw ring's in %llu elements\n",
                     backend.c_str(), row.what.c_str(), (unsigned long long)buf.bytes, r, d[0]);
        std::exit(1);
      }
    }
  }
}

#if defined(ZIPCOMM_BENCH_WITH_NCCL)
void add_nccl_row(const std::vector<ncclComm_t>& comms, const std::vector<cudaStream_t>& streams, Buffers& buf,
                  int reps, std::vector<Row>& rows) {
  const int R = int(comms.size());
  const uint64_t n = buf.bytes / 2;
  auto call = [&] {
    NK(ncclGroupStart());
    for (int r = 0; r < R; ++r) NK(ncclAllReduce(buf.data[r], buf.data[r], n, ncclBfloat16, ncclSum, comms[r], streams[r]));
    NK(ncclGroupEnd());
  };
  auto sync = [&] {
    for (int r = 0; r < R; ++r) {
      CK(cudaSetDevice(buf.device[r]));
      CK(cudaStreamSynchronize(streams[r]));
    }
  };
  for (int i = 0; i < 2; ++i) buf.restore(streams), call();
  sync();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    buf.restore(streams);
    sync();
    const double t0 = now_ms();
    call();
    sync();
    t.push_back(now_ms() - t0);
  }
  const double ms = bench::median(t), S = double(buf.bytes);
  Row row{"peer", "ncclAllReduce", R, buf.bytes, ms, S / ms / 1e6, S / ms / 1e6 * 2.0 * (R - 1) / R, 0.0, {}, false};
  for (int r = 0; r < R; ++r) {  // against the raw ring's result (ref): the worst rank
    const std::array<unsigned long long, 2> d = buf.compare(r);
    row.diff_elems = std::max(row.diff_elems, double(d[0]));
    row.diff_ulp = std::max(row.diff_ulp, double(d[1]));
  }
  rows.push_back(row);
  progress(row);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string data = "tests/data", json;
  int R = 8, reps = 10;
  uint64_t max_mib = 256, sim_mib = UINT64_MAX;
  bool calibrate = true;
  int channels = RingOptions().max_channels;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--data" && more) data = argv[++i];
    else if (a == "--ranks" && more) R = std::atoi(argv[++i]);
    else if (a == "--mib" && more) max_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--sim-mib" && more) sim_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && more) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && more) json = argv[++i];
    else if (a == "--no-calibrate") calibrate = false;
    else if (a == "--channels" && more) channels = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--data DIR] [--ranks 8] [--mib 256] [--sim-mib MIB] [--reps 10] [--json FILE] "
                   "[--no-calibrate] [--channels 32]\n",
                   argv[0]);
      return 2;
    }
  }
  if (R < 2 || R > RING_MAX_RANKS || max_mib == 0 || channels < 1 || channels > RING_MAX_CHANNELS)
    return std::fprintf(stderr, "--ranks must be 2..%d, --mib positive, --channels 1..%d\n", RING_MAX_RANKS,
                        RING_MAX_CHANNELS), 2;
  const int devices = bench::gpu_count("zipcomm_bench_ring");
  if (devices == 0) return 0;
  const std::vector<uint8_t> sample = bench::read_data_file(data, "llama_grads.bf16");
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double copy_tbps = bench::copy_roofline_tbps(uint64_t(256) << 20, 10);

  if (sim_mib == UINT64_MAX) sim_mib = max_mib;
  std::vector<uint64_t> sizes;
  for (uint64_t s = 16 << 10; s <= (max_mib << 20); s *= 4) sizes.push_back(s);
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  RingOptions opt;
  opt.max_channels = channels;
  RingCalibration cal;
  cal.max_bytes = max_mib << 20;
  cal.min_bytes = std::min<uint64_t>(cal.min_bytes, cal.max_bytes);
  std::vector<std::pair<std::string, std::vector<RingSwitchPoint>>> calibrations;
  // calibrate() holds 2 buffers of its largest size per rank: halve it until that fits every GPU.
  auto calibrate_ring = [&](const std::string& backend, RingCommunicator& comm, const std::vector<int>& dev,
                            uint64_t largest) {
    if (!calibrate) return;
    RingCalibration c = cal;
    c.max_bytes = std::min<uint64_t>(c.max_bytes, largest);
    std::string why;
    while (c.max_bytes > c.min_bytes && !fits(dev, 2 * c.max_bytes + sample.size(), 0, why)) c.max_bytes /= 2;
    c.min_bytes = std::min(c.min_bytes, c.max_bytes);
    if (c.max_bytes < std::min<uint64_t>(cal.max_bytes, largest))
      std::printf("%s: calibration up to %llu bytes per rank only (the next size up does not fit: %s)\n",
                  backend.c_str(), (unsigned long long)c.max_bytes, why.c_str());
    const double t0 = now_ms();
    Status st = Status::ok;
    CK(comm.calibrate<D>(sample.data(), sample.size(), c, &st));
    if (st != Status::ok) {
      std::fprintf(stderr, "%s: calibrate: ring status %s\n", backend.c_str(), status_string(st));
      std::exit(1);
    }
    CK(comm.reset_counters());
    calibrations.emplace_back(backend, comm.calibration(D));
    std::printf("%s: calibrated in %.1f s\n", backend.c_str(), (now_ms() - t0) / 1e3);
  };
  // A size whose buffers do not fit is skipped with a message (and listed in the JSON).
  auto buffers_fit = [&](const std::string& backend, const std::vector<int>& dev, uint64_t bytes) {
    std::string why;
    if (fits(dev, 2 * bytes, bytes, why)) return true;
    char m[256];
    std::snprintf(m, sizeof m, "%s ring, %llu bytes per rank: skipped, buffers do not fit (%s)", backend.c_str(),
                  (unsigned long long)bytes, why.c_str());
    std::printf("%s\n", m);
    skipped.push_back(m);
    return false;
  };
  if (sim_mib > 0) {
    const std::vector<int> dev(R, 0);
    RingCommunicator comm;
    CK(comm.init(dev, opt));
    calibrate_ring("simulated", comm, dev, sim_mib << 20);
    for (uint64_t s : sizes) {
      if (s > (sim_mib << 20) || !buffers_fit("simulated", dev, s)) continue;
      Buffers buf(dev, sample, s / 2);
      add_ring_rows("simulated", comm, buf, reps, rows);
    }
  }
  int peer_ranks = 0;
  if (devices >= 2) {
    peer_ranks = std::min(devices, R);
    std::vector<int> dev(peer_ranks);
    for (int r = 0; r < peer_ranks; ++r) dev[r] = r;
    RingCommunicator comm;
    const cudaError_t e = comm.init(dev, opt);
    if (e != cudaSuccess) {
      std::printf("peer ring not run: %s\n", cudaGetErrorString(e));
      peer_ranks = 0;
    } else {
      calibrate_ring("peer", comm, dev, max_mib << 20);
#if defined(ZIPCOMM_BENCH_WITH_NCCL)
      std::vector<ncclComm_t> comms(peer_ranks);
      NK(ncclCommInitAll(comms.data(), peer_ranks, dev.data()));
      std::vector<cudaStream_t> streams(peer_ranks);
      for (int r = 0; r < peer_ranks; ++r) streams[r] = comm.stream(r);
#endif
      for (uint64_t s : sizes) {
        if (!buffers_fit("peer", dev, s)) continue;
        Buffers buf(dev, sample, s / 2);
        add_ring_rows("peer", comm, buf, reps, rows);
#if defined(ZIPCOMM_BENCH_WITH_NCCL)
        add_nccl_row(comms, streams, buf, reps, rows);
#endif
      }
#if defined(ZIPCOMM_BENCH_WITH_NCCL)
      for (ncclComm_t c : comms) ncclCommDestroy(c);
#endif
    }
  }

  std::printf("\nzipcomm ring allreduce on %s (%d SMs, %d GPU(s)); bf16 gradients, sum; median of %d; at most %d "
              "channels (blocks) per rank\n", prop.name, prop.multiProcessorCount, devices, reps, channels);
  std::printf("device copy: %.2f TB/s (read + write). algbw = S/t, busbw = algbw * 2(R-1)/R, S = bytes per rank.\n",
              copy_tbps);
  if (sim_mib > 0)
    std::printf("simulated: %d ranks on GPU 0 (the ranks share its SMs and HBM), up to %llu MiB per rank\n", R,
                (unsigned long long)sim_mib);
  std::printf("peer: %s\n\n", peer_ranks ? (std::to_string(peer_ranks) + " ranks, one per GPU (GPUs 0.." +
                                            std::to_string(peer_ranks - 1) + "), peer access").c_str()
                                         : "not run (one GPU, or no peer access)");
  std::printf("%-9s %-17s %2s %10s %9s %9s %9s %6s | %6s %6s %6s %6s %6s %6s\n", "backend", "ring", "R", "bytes/rank",
              "ms", "algbw", "busbw", "sent", "wait", "enc", "dre", "dre+f", "fwd", "dec");
  for (const Row& r : rows) {
    std::printf("%-9s %-17s %2d %10llu %9.3f %9.2f %9.2f %6.3f", r.backend.c_str(),
                (r.what + (r.what == "automatic" ? (r.compressed ? ":c" : ":r") : "")).c_str(), r.ranks,
                (unsigned long long)r.bytes, r.ms, r.algbw, r.busbw, r.sent_ratio);
    if (r.what == "ncclAllReduce")
      std::printf(" | differs from the ring in %.0f elements (max %.0f ulp)\n", r.diff_elems, r.diff_ulp);
    else if (r.compressed)
      std::printf(" | %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%% %5.1f%%\n", 100 * r.share[RING_TIMER_WAIT],
                  100 * r.share[ring_timer_of(RingActionKind::send_own)],
                  100 * r.share[ring_timer_of(RingActionKind::reduce_send)],
                  100 * r.share[ring_timer_of(RingActionKind::reduce_keep)],
                  100 * r.share[ring_timer_of(RingActionKind::forward)],
                  100 * r.share[ring_timer_of(RingActionKind::receive)]);
    else
      std::printf(" |\n");
  }
  std::printf("\nGB/s columns are GB/s (1e9 bytes). sent: bytes rank 0 sent / the raw ring's. The right-hand columns\n"
              "split the compressed ring's block time (rank 0, summed over its blocks): waiting on the previous\n"
              "rank's flag, encode of the own slice, decode+reduce+encode hops, the last reduce-scatter hop\n"
              "(decode+reduce+encode, then decode+forward), decode+forward hops, the final decode. Every\n"
              "compressed result was checked bit for bit against the raw ring's.\n");

  for (const auto& c : calibrations) {
    std::printf("\ncalibration of the %s ring (RingCommunicator::calibrate, median of %d; the compressed ring must "
                "win by %.0f%%)\n", c.first.c_str(), cal.reps, 100 * cal.margin);
    std::printf("  %12s %10s %14s  %s\n", "bytes/rank", "raw ms", "compressed ms", "winner");
    for (const RingSwitchPoint& p : c.second)
      std::printf("  %12llu %10.3f %14.3f  %s\n", (unsigned long long)p.bytes, p.raw_ms, p.compressed_ms,
                  ring_point_compresses(p, cal.margin) ? "compressed" : "raw");
  }
  // One line per automatic row: what it ran, why, and whether that was the faster ring at that size.
  struct Switch {
    const Row* row;
    double raw_ms, comp_ms;
  };
  std::vector<Switch> switches;
  for (const Row& r : rows) {
    if (r.what != "automatic") continue;
    Switch w{&r, 0, 0};
    for (const Row& q : rows)
      if (q.backend == r.backend && q.bytes == r.bytes) {
        if (q.what == "uncompressed ring") w.raw_ms = q.ms;
        if (q.what == "compressed ring") w.comp_ms = q.ms;
      }
    switches.push_back(w);
  }
  int wrong = 0;
  std::printf("\nautomatic switch%s: the ring automatic ran at each size, why, and whether it was the faster one\n",
              calibrate ? "" : " (not calibrated: --no-calibrate)");
  std::printf("%-9s %10s %9s %9s %11s %11s %-11s %s\n", "backend", "bytes/rank", "raw ms", "compr ms", "faster",
              "automatic", "why", "verdict");
  for (const Switch& w : switches) {
    const Row& r = *w.row;
    const bool comp_faster = w.comp_ms < w.raw_ms;
    char faster[32];
    std::snprintf(faster, sizeof faster, "%s %.2fx", comp_faster ? "compr" : "raw",
                  comp_faster ? w.raw_ms / w.comp_ms : w.comp_ms / w.raw_ms);
    wrong += r.verdict == "wrong";
    std::printf("%-9s %10llu %9.3f %9.3f %11s %11s %-11s %s\n", r.backend.c_str(), (unsigned long long)r.bytes,
                w.raw_ms, w.comp_ms, faster, r.compressed ? "compressed" : "raw", ring_switch_source_name(r.source),
                r.verdict.c_str());
  }
  std::printf("automatic ran the slower ring at %d of %zu sizes (tie: the two within %.0f%%).\n", wrong,
              switches.size(), 100 * RING_SWITCH_DEFAULT_MARGIN);
  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"gpu\": \"" << prop.name << "\",\n  \"gpus\": " << devices << ",\n  \"peer_ranks\": " << peer_ranks
      << ",\n  \"simulated_ranks\": " << (sim_mib > 0 ? R : 0) << ",\n  \"max_channels\": " << channels
      << ",\n  \"copy_tbps\": " << copy_tbps
      << ",\n  \"dtype\": \"bf16\",\n  \"op\": \"sum\",\n  \"reps\": " << reps << ",\n  \"rows\": [\n";
    bench::write_json_rows(o, rows, [](std::ostream& o, const Row& r) {
      o << "{\"backend\": \"" << r.backend << "\", \"ring\": \"" << r.what << "\", \"ranks\": " << r.ranks
        << ", \"bytes_per_rank\": " << r.bytes << ", \"ms\": " << r.ms << ", \"algbw_gbps\": " << r.algbw
        << ", \"busbw_gbps\": " << r.busbw << ", \"compressed\": " << (r.compressed ? "true" : "false")
        << ", \"source\": \"" << ring_switch_source_name(r.source) << "\"";
      if (!r.verdict.empty()) o << ", \"verdict\": \"" << r.verdict << "\"";
      if (r.what == "ncclAllReduce")
        o << ", \"diff_from_ring_elems\": " << r.diff_elems << ", \"diff_from_ring_max_ulp\": " << r.diff_ulp;
      o << ", \"sent_ratio\": " << r.sent_ratio << ", \"share\": {\"wait\": " << r.share[RING_TIMER_WAIT];
      for (int k = 0; k < RING_ACTION_KINDS; ++k)
        o << ", \"" << ring_action_name(RingActionKind(k)) << "\": " << r.share[1 + k];
      o << "}}";
    });
    o << "  ],\n  \"skipped\": [";
    for (size_t i = 0; i < skipped.size(); ++i) o << (i ? ", " : "") << "\"" << skipped[i] << "\"";
    o << "],\n  \"calibrated\": " << (calibrate ? "true" : "false") << ",\n  \"calibration\": {";
    for (size_t i = 0; i < calibrations.size(); ++i) {
      o << (i ? ",\n" : "\n") << "    \"" << calibrations[i].first << "\": [";
      const auto& pts = calibrations[i].second;
      for (size_t k = 0; k < pts.size(); ++k)
        o << (k ? ", " : "") << "{\"bytes_per_rank\": " << pts[k].bytes << ", \"raw_ms\": " << pts[k].raw_ms
          << ", \"compressed_ms\": " << pts[k].compressed_ms
          << ", \"compressed_wins\": " << (ring_point_compresses(pts[k], cal.margin) ? "true" : "false") << "}";
      o << "]";
    }
    o << (calibrations.empty() ? "" : "\n  ") << "},\n  \"switch\": [\n";
    for (size_t i = 0; i < switches.size(); ++i) {
      const Row& r = *switches[i].row;
      o << "    {\"backend\": \"" << r.backend << "\", \"bytes_per_rank\": " << r.bytes
        << ", \"raw_ms\": " << switches[i].raw_ms << ", \"compressed_ms\": " << switches[i].comp_ms
        << ", \"faster\": \"" << (switches[i].comp_ms < switches[i].raw_ms ? "compressed" : "raw")
        << "\", \"automatic\": \"" << (r.compressed ? "compressed" : "raw") << "\", \"source\": \""
        << ring_switch_source_name(r.source) << "\", \"verdict\": \"" << r.verdict << "\"}"
        << (i + 1 < switches.size() ? ",\n" : "\n");
    }
    o << "  ]\n}\n";
  }
  return 0;
}
