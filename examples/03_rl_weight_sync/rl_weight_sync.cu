// 03_rl_weight_sync: RL weight sync from a trainer to an inference copy through the compressed P2P pipeline.
//
// The trainer holds a model of bf16 tensors with a real model's shapes (Llama-3.2-1B by default: embedding,
// 16 layers of attention and MLP weights, 8 KiB norms, untied LM head), filled from the real LLaMA weights in
// tests/data. Its tensors are views into one flat parameter buffer, as in FSDP-style trainers and in the weight
// buckets of RL frameworks. Each RL step the trainer changes its weights (a deterministic "optimizer step" on
// the low mantissa bits), then streams them, in buckets of whole tensors, over the pinned-host link
// (HostStagingLink: coded when a sync's bytes reach its measured bypass threshold, raw below) into the inference
// copy's spare buffer.
// The inference side double-buffers its weights and publishes a version with a seqlock: the spare buffer
// becomes the live one only after link.wait() returned ok, i.e. after the receiver decoded every element of
// every bucket (wait() reports the first error of all the transfers since the last wait()). A reader kernel
// runs all along on its own stream, as an inference engine's kernels would: it checksums the live weights of
// one tensor again and again; every checksum it takes must be the trainer's checksum of that version (a reader
// never sees partial weights), and every version live during a sync must have been read. Each sync is checked
// bit-exact and timed against the same sync done with the raw pipelined copy. The buckets of a sync go as one
// batch (link.transfer_many: one pipeline, no drain between buckets; the raw reference likewise,
// transfer_raw_many); --batch off sends them one transfer each. A phase that stalls longer than
// --timeout-s ends the run with an error naming it (ZIPCOMM_RL_TRACE=1 prints each phase as it starts).
// With --quantize CHOICE (every matrix, e.g. asym4/g64) or --plan FILE (a layer-wise plan: one line per tensor,
// "NAME asymmetric|symmetric BITS GROUP", as zipcomm.quant.QuantPlan.to_text() writes it), each step also syncs
// through the LOSSY quantization tier (docs/QUANT.md) into a third buffer: the planned tensors are quantized on
// the trainer's side, their messages cross the link raw (bit-exact) with the other tensors coded losslessly in
// the same batch, and the receiver rebuilds them; it reports the bytes, the GB/s and the EAR of the LM head's
// read-out with the weights that arrived.
// Usage: zipcomm_rl_weight_sync [--data DIR] [--model 1b|tiny] [--steps 3] [--bucket-mib 512] [--watch TENSOR]
//                               [--link-mode stream|copy] [--reader on|off] [--batch on|off]
//                               [--timeout-s 120] [--quantize CHOICE | --plan FILE]
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <zipcomm/comm/p2p.cuh>
#include <zipcomm/quant/device_ear.cuh>
#include <zipcomm/quant/device_quant.cuh>

#include "example_common.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

struct TensorSpec {
  std::string name;
  uint64_t elems;
};

/// Llama-style shapes: vocab V, hidden H, MLP I, key/value width KV, L layers.
std::vector<TensorSpec> llama_shapes(uint64_t V, uint64_t H, uint64_t I, uint64_t KV, int L) {
  std::vector<TensorSpec> t{{"embed_tokens", V * H}};
  for (int l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm", H});
    t.push_back({p + "self_attn.q_proj", H * H});
    t.push_back({p + "self_attn.k_proj", KV * H});
    t.push_back({p + "self_attn.v_proj", KV * H});
    t.push_back({p + "self_attn.o_proj", H * H});
    t.push_back({p + "post_attention_layernorm", H});
    t.push_back({p + "mlp.gate_proj", I * H});
    t.push_back({p + "mlp.up_proj", I * H});
    t.push_back({p + "mlp.down_proj", H * I});
  }
  t.push_back({"norm", H});
  t.push_back({"lm_head", V * H});
  return t;
}

/// The trainer's optimizer step, stand-in: flips low mantissa bits by a hash of (step, tensor, index), so
/// every version differs everywhere while keeping the weights' exponent statistics.
__global__ void optimizer_step(uint16_t* w, uint64_t n, uint32_t step, uint32_t tensor) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ (step * 0x85EBCA77u) ^ (tensor * 0xC2B2AE3Du);
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    w[i] ^= uint16_t(h & 0x7u);
  }
}

/// Order-dependent checksum of n bf16 values, by one block (what a reader computes over live weights).
__device__ uint64_t block_checksum(const uint16_t* w, uint64_t n) {
  __shared__ unsigned long long sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  unsigned long long local = 0;
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
    local += (uint64_t(w[i]) + 1) * (i * 0x9E3779B97F4A7C15ull | 1);
  atomicAdd(&sum, local);
  __syncthreads();
  const uint64_t r = sum;
  __syncthreads();
  return r;
}

__global__ void checksum_kernel(const uint16_t* w, uint64_t n, uint64_t* out) {
  const uint64_t s = block_checksum(w, n);
  if (threadIdx.x == 0) *out = s;
}

/// Published weights: a seqlock over (version, live buffer). Even versions are stable; the publisher makes it
/// odd while switching buffers.
struct Published {
  uint64_t version;
  uint32_t live;  // which of the two inference buffers is live
};

__global__ void publish_kernel(Published* p, uint32_t live) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system> v(p->version);
  const uint64_t old = v.load(cuda::memory_order_relaxed);
  v.store(old + 1, cuda::memory_order_relaxed);  // odd: switching
  cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
  p->live = live;
  v.store(old + 2, cuda::memory_order_release);  // even: stable
}

/// The inference side's reader: checksums the live copy of one tensor until the last version (`last`) was read
/// once or it is told to stop (a word in GPU memory the host sets by a copy), keeping every
/// reading whose version did not change while it read (seqlock). Readings are kept as runs: a record is
/// (version, checksum, how many readings in a row gave both), so a reading that differs from the one before,
/// a partial copy among them, starts a record of its own however long the reader runs.
__global__ void reader_kernel(const Published* p, const uint16_t* buf0, const uint16_t* buf1, uint64_t n,
                              const volatile uint32_t* stop, uint64_t last, uint64_t* records, uint32_t max_records,
                              uint32_t* count) {
  __shared__ uint64_t v1;
  __shared__ uint32_t live, k, quit;
  if (threadIdx.x == 0) k = 0;
  for (;;) {
    if (threadIdx.x == 0) {
      quit = *stop || k >= max_records || (k > 0 && records[3 * (k - 1)] == last);
      v1 = cuda::atomic_ref<const uint64_t, cuda::thread_scope_system>(p->version).load(cuda::memory_order_acquire);
      live = *const_cast<volatile const uint32_t*>(&p->live);
    }
    __syncthreads();
    if (quit) break;
    if (v1 % 2) {  // mid-switch: try again
      __syncthreads();
      continue;
    }
    const uint64_t s = block_checksum(live ? buf1 : buf0, n);
    if (threadIdx.x == 0) {
      cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
      const uint64_t v2 =
          cuda::atomic_ref<const uint64_t, cuda::thread_scope_system>(p->version).load(cuda::memory_order_acquire);
      if (v2 == v1) {  // the version did not change while we read: a consistent reading
        if (k > 0 && records[3 * (k - 1)] == v1 && records[3 * (k - 1) + 1] == s) {
          ++records[3 * (k - 1) + 2];
        } else {  // k < max_records here: the loop stops at max_records
          records[3 * k] = v1;
          records[3 * k + 1] = s;
          records[3 * k + 2] = 1;
          ++k;
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *count = k;
}

/// One tensor's entry of a quantization plan; `on` false: the tensor goes losslessly.
struct PlanEntry {
  bool on = false;
  quant::QuantMode mode = quant::QuantMode::asymmetric;
  uint32_t bits = 0, group = 0;
};

/// "asym4/g64", "sym6/g128": a choice for every matrix.
bool parse_choice(const std::string& s, PlanEntry& e) {
  unsigned bits = 0, group = 0;
  char mode[8] = {};
  if (std::sscanf(s.c_str(), "%7[a-z]%u/g%u", mode, &bits, &group) != 3) return false;
  e.mode = std::string(mode) == "sym" ? quant::QuantMode::symmetric : quant::QuantMode::asymmetric;
  e.bits = bits, e.group = group, e.on = true;
  return (std::string(mode) == "sym" || std::string(mode) == "asym") && quant::bits_valid(bits) &&
         quant::group_valid(group);
}

/// A plan file: "NAME asymmetric|symmetric BITS GROUP" per line, '#' comments; unknown names are an error.
bool read_plan(const std::string& path, const std::vector<TensorSpec>& specs, std::vector<PlanEntry>& plan) {
  std::ifstream in(path);
  if (!in) return std::fprintf(stderr, "cannot read the plan %s\n", path.c_str()), false;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name, mode;
    unsigned bits = 0, group = 0;
    if (!(words >> name)) continue;
    if (!(words >> mode >> bits >> group) || (mode != "asymmetric" && mode != "symmetric") ||
        !quant::bits_valid(bits) || !quant::group_valid(group))
      return std::fprintf(stderr, "%s:%d: expected NAME asymmetric|symmetric BITS GROUP\n", path.c_str(), no), false;
    size_t t = 0;
    while (t < specs.size() && specs[t].name != name) ++t;
    if (t == specs.size()) return std::fprintf(stderr, "%s:%d: no tensor %s\n", path.c_str(), no, name.c_str()), false;
    plan[t] = {true, mode == "symmetric" ? quant::QuantMode::symmetric : quant::QuantMode::asymmetric, bits, group};
  }
  return true;
}

constexpr int READOUT_ROWS = 16;  // hidden states read out through the LM head for the EAR

/// logits[r][v] = sum_h x[r][h] * w[v][h] (w bf16, row-major V x H): one warp per vocabulary entry.
__global__ void readout_kernel(const uint16_t* w, const float* x, uint64_t vocab, uint32_t hidden, float* logits) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  for (uint64_t v = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; v < vocab; v += warps) {
    float acc[READOUT_ROWS] = {};
    for (uint32_t h = lane; h < hidden; h += 32) {
      const float wv = __uint_as_float(uint32_t(w[v * hidden + h]) << 16);
#pragma unroll
      for (int r = 0; r < READOUT_ROWS; ++r) acc[r] = fmaf(wv, x[r * hidden + h], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < READOUT_ROWS; ++r) {
      float a = acc[r];
      for (int o = 16; o; o /= 2) a += __shfl_xor_sync(0xFFFFFFFFu, a, o);
      if (lane == 0) logits[r * vocab + v] = a;
    }
  }
}

__global__ void scale_kernel(float* x, uint64_t n, float s) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    x[i] *= s;
}

/// Ends the run with an error when one phase (a sync, a wait, a check) takes longer than a limit: a stalled
/// GPU becomes a message naming the phase, not a hang. A thread of its own watches, so a host call that
/// blocks inside the CUDA runtime is covered too.
class Watchdog {
 public:
  explicit Watchdog(double limit_s, bool trace) : limit_s_(limit_s), trace_(trace) {
    std::thread([this] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const int64_t started = started_ns_.load();
        if (started && now_ns() - started > int64_t(limit_s_ * 1e9)) {
          std::fprintf(stderr, "step %d: %s did not finish within %.0f s: the GPU work it waits for is stalled\n",
                       step_.load(), what_.load(), limit_s_);
          std::fflush(stdout);
          std::_Exit(3);  // not exit(): destructors would synchronize with the stalled work
        }
      }
    }).detach();
  }
  /// Starts the clock for a phase (`what`: a string literal).
  void phase(const char* what, int step) {
    what_ = what, step_ = step, started_ns_ = now_ns();
    if (trace_) std::fprintf(stderr, "[trace] step %d: %s\n", step, what), std::fflush(stderr);
  }
  void idle() { started_ns_ = 0; }

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  double limit_s_;
  bool trace_;
  std::atomic<const char*> what_{""};
  std::atomic<int> step_{0};
  std::atomic<int64_t> started_ns_{0};
};

}  // namespace

int main(int argc, char** argv) {
  std::string data = "tests/data", model = "1b";
  int steps = 3;
  uint64_t bucket_mib = 512;
  std::string watch;  // the tensor the reader checksums (default: a mid-model k_proj)
  std::string link_mode = "stream", reader = "on", batch = "on";
  double timeout_s = 120;  // a sync or a wait that takes longer is reported as a hang, not waited for forever
  std::string quantize_choice, plan_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (a == "--bucket-mib" && i + 1 < argc)
      bucket_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--watch" && i + 1 < argc)
      watch = argv[++i];
    else if (a == "--link-mode" && i + 1 < argc)
      link_mode = argv[++i];
    else if (a == "--reader" && i + 1 < argc)
      reader = argv[++i];
    else if (a == "--batch" && i + 1 < argc)
      batch = argv[++i];
    else if (a == "--timeout-s" && i + 1 < argc)
      timeout_s = std::atof(argv[++i]);
    else if (a == "--quantize" && i + 1 < argc)
      quantize_choice = argv[++i];
    else if (a == "--plan" && i + 1 < argc)
      plan_file = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--model 1b|tiny] [--steps 3] [--bucket-mib 512] [--watch TENSOR]"
                   " [--link-mode stream|copy] [--reader on|off] [--batch on|off] [--timeout-s 120]"
                   " [--quantize asym4/g64 | --plan FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  if ((link_mode != "stream" && link_mode != "copy") ||
      (reader != "on" && reader != "off") || (batch != "on" && batch != "off") || !(timeout_s > 0))
    return std::fprintf(stderr, "bad --link-mode, --reader, --batch or --timeout-s (see the usage)\n"), 2;
  // ZIPCOMM_RL_TRACE=1: each phase on stderr as it starts (where a run stalls)
  Watchdog watchdog(timeout_s, std::getenv("ZIPCOMM_RL_TRACE") && std::getenv("ZIPCOMM_RL_TRACE")[0] == '1');
  watchdog.phase("setup", 0);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("zipcomm_rl_weight_sync: no GPU here; nothing to show.\n");
    return 0;
  }
  const std::vector<TensorSpec> specs =
      model == "tiny" ? llama_shapes(4096, 256, 1024, 64, 2) : llama_shapes(128256, 2048, 8192, 512, 16);
  // The quantization plan: --quantize gives every matrix (not the norms) one choice, --plan one per tensor.
  std::vector<PlanEntry> plan(specs.size());
  if (!quantize_choice.empty() && !plan_file.empty())
    return std::fprintf(stderr, "--quantize and --plan exclude each other\n"), 2;
  if (!quantize_choice.empty()) {
    PlanEntry e;
    if (!parse_choice(quantize_choice, e))
      return std::fprintf(stderr, "--quantize takes asymB/gG or symB/gG (B 2..8, G 32, 64 or 128)\n"), 2;
    for (size_t t = 0; t < specs.size(); ++t)
      if (specs[t].name.find("norm") == std::string::npos) plan[t] = e;
  }
  if (!plan_file.empty() && !read_plan(plan_file, specs, plan)) return 2;
  const bool quantized = std::any_of(plan.begin(), plan.end(), [](const PlanEntry& e) { return e.on; });
  const std::vector<uint8_t> sample = examples::read_file(data + "/llama_weights.bf16");
  if (sample.size() < 2) return std::fprintf(stderr, "missing %s/llama_weights.bf16\n", data.c_str()), 1;

  // Flat parameter buffers: tensor t is a view at offset[t] (256-byte aligned).
  std::vector<uint64_t> offset(specs.size() + 1, 0);
  for (size_t t = 0; t < specs.size(); ++t) offset[t + 1] = (offset[t] + 2 * specs[t].elems + 255) / 256 * 256;
  const uint64_t total = offset.back();
  CK(cudaSetDevice(0));
  uint8_t *trainer, *infer[2];
  unsigned long long* diff;
  CK(cudaMalloc(&trainer, total));
  CK(cudaMalloc(&infer[0], total));
  CK(cudaMalloc(&infer[1], total));
  CK(cudaMalloc(&diff, 8));
  CK(cudaMemset(trainer, 0, total));
  auto view = [&](uint8_t* base, size_t t) { return reinterpret_cast<uint16_t*>(base + offset[t]); };
  uint64_t params = 0, smallest = UINT64_MAX, largest = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    const uint64_t bytes = 2 * specs[t].elems;
    params += specs[t].elems;
    smallest = std::min(smallest, specs[t].elems);
    largest = std::max(largest, specs[t].elems);
    std::vector<uint8_t> host(bytes);  // real weights, rotated per tensor so no two tensors share bytes
    const uint64_t rot = ((t * 7919 * 2) % sample.size()) & ~uint64_t(1);
    for (uint64_t off = 0; off < bytes;) {
      const uint64_t from = (off + rot) % sample.size(), len = std::min(sample.size() - from, bytes - off);
      std::memcpy(&host[off], &sample[from], len);
      off += len;
    }
    CK(cudaMemcpy(view(trainer, t), host.data(), bytes, cudaMemcpyHostToDevice));
  }
  std::printf("model %s: %zu bf16 tensors, %.1f M parameters (%.2f GiB), %llu to %llu elements per tensor\n",
              model.c_str(), specs.size(), params / 1e6, total / 1073741824.0, (unsigned long long)smallest,
              (unsigned long long)largest);
  // Buckets: runs of whole tensors up to bucket_mib (one tensor larger than that is a bucket of its own).
  std::vector<std::pair<uint64_t, uint64_t>> buckets;  // [begin, end) byte offsets
  for (size_t t = 0; t < specs.size();) {
    size_t u = t + 1;
    while (u < specs.size() && offset[u + 1] - offset[t] <= (bucket_mib << 20)) ++u;
    buckets.push_back({offset[t], offset[u]});
    t = u;
  }

  cudaStream_t sync_stream, reader_stream;
  CK(cudaStreamCreateWithFlags(&sync_stream, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&reader_stream, cudaStreamNonBlocking));
  // Stream mode: the GPU schedules the whole pipeline (no host thread); the link falls back to copy mode where
  // the driver lacks the stream memory operations it needs.
  HostStagingLink<DType::bf16> link;
  CK(link.init(0, P2POptions(), link_mode == "copy" ? HostLinkMode::copy : HostLinkMode::stream));
  std::printf("pinned host link, %s mode\n", link.mode() == HostLinkMode::stream ? "stream" : "copy");
  CK(link.calibrate(view(trainer, 2), specs[2].elems));  // a q_proj: what most of the bytes look like
  std::printf("%zu buckets of up to %llu MiB, %s; bypass threshold (measured): %s\n", buckets.size(),
              (unsigned long long)bucket_mib, batch == "on" ? "one batch per sync" : "one transfer each",
              link.bypass_threshold() == UINT64_MAX ? "never code"
                                                    : (std::to_string(link.bypass_threshold() >> 10) + " KiB").c_str());

  // The quantized sync's buffers: messages on each side (256-byte aligned), the rebuilt weights, the read-out.
  std::vector<uint64_t> msg_offset(specs.size() + 1, 0);
  for (size_t t = 0; t < specs.size(); ++t) {
    const uint64_t bytes = plan[t].on ? quant::max_quantized_bytes(plan[t].mode, plan[t].bits, plan[t].group,
                                                                   specs[t].elems)
                                      : 0;
    msg_offset[t + 1] = (msg_offset[t] + bytes + 255) / 256 * 256;
  }
  uint8_t *msg_send = nullptr, *msg_recv = nullptr, *infer_q = nullptr;
  float *hidden_x = nullptr, *logits_ref = nullptr, *logits_got = nullptr;
  double* ear_rows = nullptr;
  Status* quant_status = nullptr;
  const size_t head = specs.size() - 1;  // lm_head: V x H
  const uint32_t hidden = model == "tiny" ? 256 : 2048;
  const uint64_t vocab = specs[head].elems / hidden;
  if (quantized) {
    CK(cudaMalloc(&msg_send, std::max<uint64_t>(msg_offset.back(), 256)));
    CK(cudaMalloc(&msg_recv, std::max<uint64_t>(msg_offset.back(), 256)));
    CK(cudaMalloc(&infer_q, total));
    CK(cudaMalloc(&hidden_x, sizeof(float) * READOUT_ROWS * hidden));
    CK(cudaMalloc(&logits_ref, sizeof(float) * READOUT_ROWS * vocab));
    CK(cudaMalloc(&logits_got, sizeof(float) * READOUT_ROWS * vocab));
    CK(cudaMalloc(&ear_rows, sizeof(double) * READOUT_ROWS));
    CK(cudaMalloc(&quant_status, sizeof(Status)));
    std::vector<float> x(READOUT_ROWS * size_t(hidden));
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (float& v : x) {  // Gaussian hidden states (Box-Muller over a 64-bit LCG)
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const double u1 = ((state >> 11) + 1.0) / 9007199254740993.0;
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const double u2 = (state >> 11) / 9007199254740992.0;
      v = float(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    CK(cudaMemcpy(hidden_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    uint64_t planned = 0, message_bytes = 0;
    for (size_t t = 0; t < specs.size(); ++t)
      if (plan[t].on)
        planned += specs[t].elems,
            message_bytes += quant::max_quantized_bytes(plan[t].mode, plan[t].bits, plan[t].group, specs[t].elems);
    std::printf("quantization plan: %llu of %llu parameters quantized into %.3f GiB of messages (%.2f bits per "
                "quantized parameter); the rest coded losslessly\n",
                (unsigned long long)planned, (unsigned long long)params, message_bytes / 1073741824.0,
                planned ? 8.0 * message_bytes / planned : 0.0);
  }

  // Inference side state: published version, the reader's records.
  Published* pub;
  uint32_t *stop, *count;
  uint64_t *records, *sum;
  constexpr uint32_t MAX_RECORDS = 1 << 16;
  CK(cudaMalloc(&pub, sizeof(Published)));
  CK(cudaMemset(pub, 0, sizeof(Published)));
  CK(cudaMalloc(&stop, 4));
  CK(cudaMalloc(&count, 4));
  CK(cudaMalloc(&records, 3 * 8 * uint64_t(MAX_RECORDS)));
  CK(cudaMalloc(&sum, 8));
  // The watched tensor: a mid-model k_proj (1M elements in the 1b model), large enough that a sync landing in
  // the live copy would be caught half-way, small enough for one block to checksum it every ~0.1 ms.
  size_t watched = 0;
  for (size_t t = 0, seen_kproj = 0, layers = (specs.size() - 3) / 9; t < specs.size(); ++t)
    if (watch.empty() ? specs[t].name.find("self_attn.k_proj") != std::string::npos && seen_kproj++ == layers / 2
                      : specs[t].name == watch)
      watched = t;
  CK(cudaMemcpy(infer[0], trainer, total, cudaMemcpyDeviceToDevice));  // version 0: the initial weights
  std::vector<uint64_t> expected;  // expected[v / 2]: the trainer's checksum of the watched tensor at version v
  checksum_kernel<<<1, 1024>>>(view(trainer, watched), specs[watched].elems, sum);
  uint64_t s0;
  CK(cudaMemcpy(&s0, sum, 8, cudaMemcpyDeviceToHost));
  expected.push_back(s0);
  // On the reader's stream: a legacy-stream memset does not order against it, and could land after the reader
  // started (it would read a stale stop word, or have its count overwritten).
  CK(cudaMemsetAsync(stop, 0, 4, reader_stream));
  CK(cudaMemsetAsync(count, 0, 4, reader_stream));
  // Lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) loads a kernel at its first launch, and
  // loading one waits for the kernels running on the GPU: with the reader running all along, the first
  // optimizer_step would wait for it forever (bench/probe_concurrent.cu measures which calls wait). So every
  // kernel this program launches is loaded before the reader starts; the link loaded its kernels in init().
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, optimizer_step));
  CK(cudaFuncGetAttributes(&fa, checksum_kernel));
  CK(cudaFuncGetAttributes(&fa, publish_kernel));
  CK(cudaFuncGetAttributes(&fa, reader_kernel));
  CK(cudaFuncGetAttributes(&fa, readout_kernel));
  CK(cudaFuncGetAttributes(&fa, scale_kernel));
  CK(cudaFuncGetAttributes(&fa, quant::device::detail::ear_rows_kernel));
  CK(cudaFuncGetAttributes(&fa, quant::device::detail::quantize_kernel<DType::bf16>));
  using quant::device::detail::ReceiveStep;
  CK(cudaFuncGetAttributes(&fa, quant::device::detail::dequantize_kernel<DType::bf16, ReceiveStep::dequantize>));
  CK(examples::load_kernels());
  watchdog.phase("step 1 (reader running)", 0);
  const bool with_reader = reader != "off";
  if (with_reader) {
    reader_kernel<<<1, 1024, 0, reader_stream>>>(pub, view(infer[0], watched), view(infer[1], watched),
                                                 specs[watched].elems, stop, uint64_t(2 * steps), records, MAX_RECORDS,
                                                 count);
    CK(cudaGetLastError());
  }

  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto sync_all = [&](uint32_t into, bool raw, int step) {
    watchdog.phase(raw ? "raw sync: enqueue" : "coded sync: enqueue", step);
    CK(cudaEventRecord(a, sync_stream));
    if (batch == "on") {
      std::vector<P2PMessage> msgs;
      for (const auto& bk : buckets)
        msgs.push_back({trainer + bk.first, infer[into] + bk.first, (bk.second - bk.first) / 2});
      if (raw)
        CK(link.transfer_raw_many(msgs.data(), msgs.size(), sync_stream));
      else
        CK(link.transfer_many(msgs.data(), msgs.size(), sync_stream));
    } else {
      for (const auto& bk : buckets) {
        const uint64_t n = (bk.second - bk.first) / 2;
        if (raw)
          CK(link.transfer_raw(trainer + bk.first, infer[into] + bk.first, n, sync_stream));
        else
          CK(link.transfer(trainer + bk.first, infer[into] + bk.first, n, sync_stream));
      }
    }
    CK(cudaEventRecord(b, sync_stream));
    watchdog.phase(raw ? "raw sync" : "coded sync", step);
    CK(cudaStreamSynchronize(sync_stream));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return double(ms);
  };
  // The quantized sync: quantize the planned tensors into messages, send messages raw and the other tensors
  // coded in one batch, wait, rebuild the planned tensors; then the EAR of the LM head's read-out.
  auto quantized_sync = [&](int step) {
    watchdog.phase("quantized sync", step);
    CK(cudaEventRecord(a, sync_stream));
    std::vector<P2PMessage> raw_msgs, coded_msgs;
    uint64_t message_bytes = 0, lossless = 0;
    for (size_t t = 0; t < specs.size(); ++t) {
      if (plan[t].on) {
        const uint64_t bytes = quant::max_quantized_bytes(plan[t].mode, plan[t].bits, plan[t].group, specs[t].elems);
        message_bytes += bytes;
        CK(quant::device::quantize(view(trainer, t), specs[t].elems, DType::bf16, plan[t].mode, plan[t].bits,
                                   plan[t].group, msg_send + msg_offset[t], bytes, quant_status, sync_stream));
        raw_msgs.push_back({msg_send + msg_offset[t], msg_recv + msg_offset[t], bytes / 2});
      } else {
        coded_msgs.push_back({view(trainer, t), view(infer_q, t), specs[t].elems});
        lossless += 2 * specs[t].elems;
      }
    }
    if (!raw_msgs.empty()) CK(link.transfer_raw_many(raw_msgs.data(), raw_msgs.size(), sync_stream));
    if (!coded_msgs.empty()) CK(link.transfer_many(coded_msgs.data(), coded_msgs.size(), sync_stream));
    // The link's receiver writes on its own streams; the rebuild waits for wait() below, so it is enqueued after.
    CK(cudaStreamSynchronize(sync_stream));
    if (link.wait() != Status::ok) return std::fprintf(stderr, "step %d: quantized sync failed\n", step), -1.0;
    for (size_t t = 0; t < specs.size(); ++t)
      if (plan[t].on)
        CK(quant::device::dequantize(msg_recv + msg_offset[t],
                                     quant::max_quantized_bytes(plan[t].mode, plan[t].bits, plan[t].group,
                                                                specs[t].elems),
                                     DType::bf16,
                                     view(infer_q, t), 2 * specs[t].elems, quant_status, sync_stream));
    CK(cudaEventRecord(b, sync_stream));
    CK(cudaStreamSynchronize(sync_stream));
    Status qs = Status::ok;
    CK(cudaMemcpy(&qs, quant_status, sizeof qs, cudaMemcpyDeviceToHost));
    if (qs != Status::ok)
      return std::fprintf(stderr, "step %d: quantize / dequantize: %s\n", step, status_string(qs)), -1.0;
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    // EAR: the trainer's LM head against the one that arrived, logits scaled to a standard deviation of 4.
    watchdog.phase("EAR of the read-out", step);
    readout_kernel<<<1024, 256, 0, sync_stream>>>(view(trainer, head), hidden_x, vocab, hidden, logits_ref);
    readout_kernel<<<1024, 256, 0, sync_stream>>>(view(infer_q, head), hidden_x, vocab, hidden, logits_got);
    std::vector<float> ref(READOUT_ROWS * vocab);
    CK(cudaMemcpyAsync(ref.data(), logits_ref, ref.size() * sizeof(float), cudaMemcpyDeviceToHost, sync_stream));
    CK(cudaStreamSynchronize(sync_stream));
    double sum = 0, sq = 0;
    for (float v : ref) sum += v, sq += double(v) * v;
    const double mean = sum / ref.size(), sd = std::sqrt(std::max(sq / ref.size() - mean * mean, 1e-30));
    for (float* l : {logits_ref, logits_got}) scale_kernel<<<264, 256, 0, sync_stream>>>(l, ref.size(), float(4 / sd));
    CK(quant::device::ear_rows(logits_ref, logits_got, READOUT_ROWS, vocab, ear_rows, sync_stream));
    std::vector<double> rows(READOUT_ROWS);
    CK(cudaMemcpyAsync(rows.data(), ear_rows, rows.size() * sizeof(double), cudaMemcpyDeviceToHost, sync_stream));
    CK(cudaStreamSynchronize(sync_stream));
    quant::CompensatedSum ear;
    for (double r : rows) ear.add(r);
    std::printf("step %d: quantized sync %.2f GiB of weights as %.3f GiB of messages + %.3f GiB lossless: %.2f ms "
                "(%.1f GB/s of weights); EAR of the LM head's read-out %.6f\n",
                step, total / 1073741824.0, message_bytes / 1073741824.0, lossless / 1073741824.0, ms,
                total / ms / 1e6, ear.value() / READOUT_ROWS);
    return double(ms);
  };

  int rc = 0;
  uint32_t live = 0;
  double coded_sum = 0, raw_sum = 0;
  for (int step = 1; step <= steps; ++step) {
    watchdog.phase("optimizer step", step);
    for (size_t t = 0; t < specs.size(); ++t)
      optimizer_step<<<264, 256, 0, sync_stream>>>(view(trainer, t), specs[t].elems, uint32_t(step), uint32_t(t));
    checksum_kernel<<<1, 1024, 0, sync_stream>>>(view(trainer, watched), specs[watched].elems, sum);
    uint64_t s;
    CK(cudaMemcpyAsync(&s, sum, 8, cudaMemcpyDeviceToHost, sync_stream));
    CK(cudaStreamSynchronize(sync_stream));
    expected.push_back(s);
    const uint32_t spare = 1 - live;
    // Raw first (the timing reference), then the coded sync whose result goes live.
    const double raw_ms = sync_all(spare, true, step);
    watchdog.phase("link.wait after the raw sync", step);
    if (link.wait() != Status::ok) return std::fprintf(stderr, "raw sync failed\n"), 1;
    CK(cudaMemsetAsync(infer[spare], 0, total, sync_stream));
    const double coded_ms = sync_all(spare, false, step);
    watchdog.phase("link.wait after the coded sync", step);
    const Status st = link.wait();  // every bucket decoded and checked
    watchdog.phase("bit-exact check", step);
    const unsigned long long d = examples::count_diff_words(trainer, infer[spare], total, diff, 264, sync_stream);
    if (st != Status::ok || d != 0) {
      std::fprintf(stderr, "step %d: sync failed (%s, %llu differing words)\n", step, status_string(st), d);
      rc = 1;
      break;
    }
    watchdog.phase("publish", step);
    publish_kernel<<<1, 1, 0, sync_stream>>>(pub, spare);  // only now does the new version go live
    CK(cudaStreamSynchronize(sync_stream));
    live = spare;
    coded_sum += coded_ms;
    raw_sum += raw_ms;
    std::printf(
        "step %d: sync %.2f GiB coded %.2f ms (%.1f GB/s), raw %.2f ms (%.1f GB/s): %.2fx; bit-exact; "
        "version %d live\n",
        step, total / 1073741824.0, coded_ms, total / coded_ms / 1e6, raw_ms, total / raw_ms / 1e6, raw_ms / coded_ms,
        2 * step);
    std::fflush(stdout);
    if (quantized && quantized_sync(step) < 0) {
      rc = 1;
      break;
    }
  }
  watchdog.phase("stop the reader", steps);
  const uint32_t one = 1;  // the reader quits by itself after the last version; this ends it early on a failure
  CK(cudaMemcpyAsync(stop, &one, 4, cudaMemcpyHostToDevice, sync_stream));
  CK(cudaStreamSynchronize(sync_stream));
  CK(cudaStreamSynchronize(reader_stream));
  watchdog.idle();
  uint32_t k = 0;
  CK(cudaMemcpy(&k, count, 4, cudaMemcpyDeviceToHost));
  std::vector<uint64_t> rec(3 * uint64_t(k));
  if (k) CK(cudaMemcpy(rec.data(), records, rec.size() * 8, cudaMemcpyDeviceToHost));
  uint64_t bad = 0, readings = 0;
  std::vector<uint64_t> seen(expected.size(), 0);
  for (uint32_t i = 0; i < k; ++i) {
    const uint64_t v = rec[3 * i] / 2, times = rec[3 * i + 2];
    readings += times;
    if (v >= expected.size() || rec[3 * i + 1] != expected[v])
      bad += times;
    else
      seen[v] += times;
  }
  if (with_reader) {
    std::printf("reader: %llu consistent readings of the live %s (%llu elements) while syncing, %u runs; per "
                "version:", (unsigned long long)readings, specs[watched].name.c_str(),
                (unsigned long long)specs[watched].elems, k);
    for (size_t v = 0; v < seen.size(); ++v) std::printf(" v%zu=%llu", 2 * v, (unsigned long long)seen[v]);
    std::printf("; readings of partial or wrong weights: %llu\n", (unsigned long long)bad);
  }
  if (bad) rc = 1;
  if (!with_reader) std::printf("reader: off (--reader off), the readers' check did not run\n");
  // Every version live during a sync must have been read, or the check above saw nothing of it (the last
  // version goes live after the last sync; the reader stops once it has read it).
  for (size_t v = 0; with_reader && v + 1 < seen.size() && rc == 0; ++v)
    if (seen[v] == 0) {
      std::fprintf(stderr, "reader: no reading of version %zu, live during sync %zu: the check did not run\n", 2 * v,
                   v + 1);
      rc = 1;
    }
  if (k == MAX_RECORDS) {
    std::fprintf(stderr, "reader: its record buffer filled up; readings after that were not checked\n");
    rc = 1;
  }
  if (rc == 0 && steps > 0)
    std::printf("weight sync over the pinned-host link: coded %.1f GB/s vs raw %.1f GB/s on average (%.2fx)\nOK\n",
                steps * total / coded_sum / 1e6, steps * total / raw_sum / 1e6, raw_sum / coded_sum);
  return rc;
}
