// 05_ring_allreduce: a compressed ring allreduce (reduce-scatter whose hops decode + reduce + encode, then an
// all-gather whose hops decode + forward), chunked and pipelined inside one persistent kernel per device, next
// to the same ring without compression. comm::RingCommunicator drives both:
//   --backend sim   R ranks' buffers on one GPU, one cooperative kernel runs every rank's blocks; the ranks
//                   talk through mailboxes and flags in device memory
//   --backend peer  rank r on GPU r % (number of GPUs), peer access between the GPUs, one kernel per GPU (on
//                   one GPU every rank lands on device 0: the same code path as sim)
// The NCCL device-API backend is ring_nccl.cu. Checks that the compressed ring's result equals the raw ring's
// bit for bit on every rank, and both equal the host reference of the ring's order; then runs the automatic
// mode (RingMode::automatic) and reports which ring it chose and why, with the same check; exits 1 otherwise.
//
// Usage: zipcomm_ring_allreduce [--ranks 4] [--n 4000037] [--dtype bf16|fp16|fp32] [--op sum|prod|min|max|avg]
//                               [--backend sim|peer] [--data FILE] [--reps 5] [--calibrate]
//   --data FILE: raw elements of --dtype (e.g. tests/data/llama_grads.bf16), tiled to n and rotated per rank;
//   default: Gaussian data with a different scale and seed per rank.
//   --calibrate: RingCommunicator::calibrate on rank 0's input (64 KiB .. n elements per rank) before the
//   automatic run; without it the automatic mode runs the raw ring (its default).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zipcomm/comm/ring/communicator.cuh>
#include <zipcomm/comm/ring/reference.cuh>

#include "example_common.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

uint32_t to_elem(DType d, float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (d == DType::fp32) return u;
  return d == DType::bf16 ? thread::bf16_from_f32_bits_reference(u) : thread::fp16_from_f32_bits_reference(u);
}

std::vector<uint8_t> rank_input(DType d, uint64_t n, int rank, const std::vector<uint8_t>& sample) {
  const uint64_t eb = format::elem_bytes(d);
  std::vector<uint8_t> v(n * eb);
  if (!sample.empty()) {  // the sample tiled, rotated by a different amount on every rank
    const uint64_t m = sample.size() / eb, shift = (m / 7) * uint64_t(rank);
    for (uint64_t i = 0; i < n; ++i) std::memcpy(&v[i * eb], &sample[((i + shift) % m) * eb], eb);
    return v;
  }
  std::mt19937_64 rng(0x5EED0000u + uint64_t(rank));
  std::normal_distribution<float> nd(0.0f, (d == DType::fp16 ? 0.5f : 0.02f) * float(1 + rank % 4));
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t x = to_elem(d, nd(rng));
    std::memcpy(&v[i * eb], &x, eb);
  }
  return v;
}

struct RunResult {
  std::vector<std::vector<uint8_t>> out;
  double ms = 0;  // median over reps (each rep restores the inputs first; the copy is not timed)
  uint64_t bytes_sent = 0;
  std::array<uint64_t, RING_TIMER_SLOTS> timers{};  // rank 0, summed over its blocks, last rep
  RingCallInfo info;
  Status status = Status::ok;
};

RunResult run(RingCommunicator& comm, const std::vector<int>& rank_device, DType d, uint64_t n, const ReduceOp& op,
              RingMode mode, const std::vector<std::vector<uint8_t>>& inputs, int reps) {
  const int R = int(inputs.size());
  const uint64_t bytes = n * format::elem_bytes(d);
  std::vector<void*> buf(R);
  for (int r = 0; r < R; ++r) {
    CK(cudaSetDevice(rank_device[r]));
    CK(cudaMalloc(&buf[r], bytes));
  }
  RunResult res;
  std::vector<double> times;
  for (int rep = 0; rep < reps && res.status == Status::ok; ++rep) {
    for (int r = 0; r < R; ++r) {
      CK(cudaSetDevice(rank_device[r]));
      CK(cudaMemcpy(buf[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice));
      CK(cudaDeviceSynchronize());  // the inputs must be there before allreduce(): the ring's streams are non-blocking
    }
    CK(comm.reset_counters());
    const auto t0 = std::chrono::steady_clock::now();
    CK(comm.allreduce(d, buf.data(), n, op, mode));
    {
      cudaError_t wait_error = cudaSuccess;
      res.status = comm.wait(&wait_error);
      CK(wait_error);
    }
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  res.ms = times[times.size() / 2];
  res.info = comm.last_call();
  std::vector<uint64_t> sent;
  std::vector<std::array<uint64_t, RING_TIMER_SLOTS>> timers;
  CK(comm.read_counters(sent, &timers));
  res.bytes_sent = sent[0];
  res.timers = timers[0];
  for (int r = 0; r < R; ++r) {
    res.out.emplace_back(bytes);
    CK(cudaMemcpy(res.out.back().data(), buf[r], bytes, cudaMemcpyDefault));
    CK(cudaFree(buf[r]));
  }
  return res;
}

uint64_t count_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, uint64_t eb) {
  uint64_t diff = 0;
  for (uint64_t i = 0; i < a.size(); i += eb) diff += std::memcmp(&a[i], &b[i], eb) != 0;
  return diff;
}

}  // namespace

int main(int argc, char** argv) {
  int R = 4, reps = 5;
  uint64_t n = 4000037;
  std::string dtype = "bf16", op_name = "sum", backend = "sim", data_file;
  bool calibrate = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--ranks" && more) R = std::atoi(argv[++i]);
    else if (a == "--n" && more) n = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--dtype" && more) dtype = argv[++i];
    else if (a == "--op" && more) op_name = argv[++i];
    else if (a == "--backend" && more) backend = argv[++i];
    else if (a == "--data" && more) data_file = argv[++i];
    else if (a == "--reps" && more) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--calibrate") calibrate = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--ranks 4] [--n 4000037] [--dtype bf16|fp16|fp32] [--op sum|prod|min|max|avg]\n"
                   "          [--backend sim|peer] [--data FILE] [--reps 5] [--calibrate]\n",
                   argv[0]);
      return 2;
    }
  }
  const DType d = dtype == "fp16" ? DType::fp16 : dtype == "fp32" ? DType::fp32 : DType::bf16;
  if (dtype != dtype_name(d) || R < 1 || R > RING_MAX_RANKS || (backend != "sim" && backend != "peer")) {
    std::fprintf(stderr, "bad --dtype, --ranks (1..%d) or --backend\n", RING_MAX_RANKS);
    return 2;
  }
  const ReduceOp op = op_name == "prod" ? ReduceOp::prod()
                      : op_name == "min" ? ReduceOp::min()
                      : op_name == "max" ? ReduceOp::max()
                      : op_name == "avg" ? ReduceOp::avg(R)
                                         : ReduceOp::sum();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("zipcomm_ring_allreduce: no GPU on this machine; nothing to run.\n");
    return 0;
  }
  std::vector<int> rank_device(R, 0);
  if (backend == "peer")
    for (int r = 0; r < R; ++r) rank_device[r] = r % devices;
  std::sort(rank_device.begin(), rank_device.end());  // a device's ranks must be contiguous

  std::vector<uint8_t> sample;
  if (!data_file.empty()) {
    sample = examples::read_file(data_file);
    if (sample.size() < format::elem_bytes(d)) return std::fprintf(stderr, "cannot read %s\n", data_file.c_str()), 2;
  }
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<const void*> in_ptrs;
  for (int r = 0; r < R; ++r) inputs.push_back(rank_input(d, n, r, sample));
  for (const auto& v : inputs) in_ptrs.push_back(v.data());

  RingCommunicator comm;
  CK(comm.init(rank_device));
  const RunResult raw = run(comm, rank_device, d, n, op, RingMode::raw, inputs, reps);
  const RunResult comp = run(comm, rank_device, d, n, op, RingMode::compressed, inputs, reps);
  if (calibrate) {
    RingCalibration c;
    c.max_bytes = n * format::elem_bytes(d);
    c.min_bytes = std::min(c.min_bytes, c.max_bytes);
    Status st = Status::ok;
    const void* sample = inputs[0].data();
    CK((d == DType::bf16   ? comm.calibrate<DType::bf16>(sample, c.max_bytes, c, &st)
        : d == DType::fp16 ? comm.calibrate<DType::fp16>(sample, c.max_bytes, c, &st)
                           : comm.calibrate<DType::fp32>(sample, c.max_bytes, c, &st)));
    if (st != Status::ok) return std::fprintf(stderr, "calibrate: ring status %s\n", status_string(st)), 1;
    std::printf("calibration (per-rank bytes: raw ms / compressed ms):");
    for (const RingSwitchPoint& p : comm.calibration(d))
      std::printf(" %llu: %.3f / %.3f%s", (unsigned long long)p.bytes, p.raw_ms, p.compressed_ms,
                  ring_point_compresses(p, c.margin) ? " (compressed)" : "");
    std::printf("\n");
  }
  const RunResult autom = run(comm, rank_device, d, n, op, RingMode::automatic, inputs, reps);

  std::vector<uint8_t> want(n * format::elem_bytes(d));
  if (ring_reference(d, op, in_ptrs, n, want.data()) != Status::ok) return std::fprintf(stderr, "reference failed\n"), 1;
  const uint64_t eb = format::elem_bytes(d);
  int comp_eq_raw = 0, raw_eq_ref = 0, auto_eq_raw = 0;
  uint64_t diff = 0;
  for (int r = 0; r < R; ++r) {
    comp_eq_raw += comp.out[r] == raw.out[r];
    auto_eq_raw += autom.out[r] == raw.out[r];
    raw_eq_ref += raw.out[r] == want;
    diff += count_diff(comp.out[r], raw.out[r], eb);
  }

  std::printf("ring allreduce, %s backend: %d ranks on %d device group(s), %llu %s elements per rank, op %s\n",
              backend.c_str(), R, comm.device_groups(), (unsigned long long)n, dtype_name(d), op_name.c_str());
  std::printf("  %-11s status %-8s channels %2d, chunk %7llu elements, %llu round(s), %u pass(es), %.3f ms "
              "(median of %d, host-timed), rank 0 sent %.1f MB\n",
              "raw", status_string(raw.status), raw.info.channels, (unsigned long long)raw.info.chunk_elems,
              (unsigned long long)raw.info.rounds, raw.info.passes, raw.ms, reps, raw.bytes_sent / 1e6);
  std::printf("  %-11s status %-8s channels %2d, chunk %7llu elements, %llu round(s), %u pass(es), %.3f ms "
              "(median of %d, host-timed), rank 0 sent %.1f MB (%.4f of raw)\n",
              "compressed", status_string(comp.status), comp.info.channels, (unsigned long long)comp.info.chunk_elems,
              (unsigned long long)comp.info.rounds, comp.info.passes, comp.ms, reps, comp.bytes_sent / 1e6,
              raw.bytes_sent ? double(comp.bytes_sent) / double(raw.bytes_sent) : 0.0);
  std::printf("  compressed == raw, bit for bit: %d of %d ranks (%llu elements differ); raw == host reference of "
              "the ring order: %d of %d ranks\n",
              comp_eq_raw, R, (unsigned long long)diff, raw_eq_ref, R);
  std::printf("  automatic   status %-8s ran the %s ring (%s), %.3f ms; == raw ring: %d of %d ranks\n",
              status_string(autom.status), autom.info.compressed ? "compressed" : "raw",
              ring_switch_source_name(autom.info.source), autom.ms, auto_eq_raw, R);
  // Where the compressed ring's time goes (rank 0's blocks, summed): waiting on flags vs each kind of hop.
  const double total = double(comp.timers[RING_TIMER_TOTAL]);
  if (total > 0) {
    std::printf("  compressed ring, rank 0 block time: wait %.1f%%", 100.0 * comp.timers[RING_TIMER_WAIT] / total);
    for (int k = 0; k < RING_ACTION_KINDS; ++k)
      if (comp.timers[1 + k])
        std::printf(", %s %.1f%%", ring_action_name(RingActionKind(k)), 100.0 * comp.timers[1 + k] / total);
    std::printf("\n");
  }
  const bool ok = raw.status == Status::ok && comp.status == Status::ok && autom.status == Status::ok &&
                  comp_eq_raw == R && raw_eq_ref == R && auto_eq_raw == R;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
