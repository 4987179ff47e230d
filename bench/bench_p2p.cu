// zipcomm P2P benchmark: effective bandwidth of a GPU -> pinned host -> GPU transfer against message size: the
// HostStagingLink (stream mode, and copy mode, its fallback; --modes) coded always and as used after calibrate()
// (raw below the measured bypass threshold), against the raw pipelined copy-engine transfer (best chunk of a sweep,
// and timed in pairs with the link), measured in the same run on real bf16 gradients. Prints a table and writes
// JSON (bench/plot_p2p.py draws the curve). The parts live in bench/p2p/, one file per subject; this file parses
// the command line and runs them in order.
//
// Effective GB/s = message bytes / time from the start of the transfer until the receiver holds every element
// (decoded), CUDA events on the caller's stream; median of reps after warm-ups. Every measured configuration is
// checked bit-exact once per size.
// --sweep first times variants of the link's knobs (ring depth, frames, copy pieces, budget margin, grids, copy
// mode) at 64 and 256 MiB (--sweep-mib A,B: other sizes; --sweep-only TEXT: the variants whose name contains it;
// --variant NAME:KEY=VALUE,...: any combination of options, see parse_variant; --curve-variant: one on the curve
// too). --trace prints per-frame timelines of the default link at 64 MiB: the kernels' stamps and each copy's start
// and end (--trace-mib M: another size; --trace-variant SPEC: trace that option set too; --trace-light: the
// kernels' stamps only, no copy events, and the transfer queued behind a hold so that it runs in GPU time as the
// sweep times it). --chain-probe times stream mode's copy chain with coding free.
// --batch COUNTxMIB[,...] measures messages sent back to back (transfer_many against one transfer each; see
// run_batch) instead of the curve.
// --peer measures PeerLink from GPU 0 to GPU 1 instead (the pinned-host part does not run; skipped with a message
// when there are fewer than two GPUs with peer access): raw cudaMemcpyPeerAsync, SM copies over the link (push
// from GPU 0, pull from GPU 1), the link coded always and as used after calibrate(), per size; bit-exact once per
// size (checked on GPU 1 against a copy of the source made there); whether calibrate()'s switch picked the faster
// of coded and raw at every size; a few knob variants at 64 and 256 MiB.
// Usage: zipcomm_bench_p2p [--data DIR] [--max-mib 1024] [--min-kib 1] [--json FILE] [--reps-scale X] [--sweep]
//        [--sweep-only TEXT] [--sweep-mib A,B] [--variant SPEC] [--curve-variant SPEC] [--chain-probe] [--trace]
//        [--trace-light] [--trace-mib M] [--trace-variant SPEC] [--no-curve] [--modes stream,copy] [--peer]
//        [--batch COUNTxMIB[,...]] [--batch-trace]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {

HostBench::HostBench(const std::string& data, uint64_t max_mib) : max_bytes(max_mib << 20) {
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaSetDevice(0));
  sample = read_gradients(data);
  std::printf("data: %s/llama_grads.bf16 (%zu bf16 elements), tiled over each message\n", data.c_str(),
              sample.size() / 2);
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  CK(cudaMalloc(&diff, 8));
  fill_tiled(src, max_bytes, sample);
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  for (cudaEvent_t& e : window_events) CK(cudaEventCreate(&e));
  CK(cudaHostAlloc(&block_go, 8, cudaHostAllocMapped));
  block_go[0] = block_go[1] = 0;
}

HostBench::~HostBench() {
  CK(cudaFreeHost(block_go));
  for (cudaEvent_t& e : window_events) CK(cudaEventDestroy(e));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaStreamDestroy(stream));
  CK(cudaStreamDestroy(side));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  CK(cudaFree(diff));
}

void HostBench::hold() {
  *const_cast<volatile uint32_t*>(block_go) = 0u;
  p2p_hold_stream_kernel<<<1, 1, 0, stream>>>(block_go, block_go + 1, 50000000ull);  // gives up after 50 ms
  CK(cudaGetLastError());
}

void HostBench::verify(uint64_t bytes, const char* what) {
  CK(cudaMemset(diff, 0, 8));
  count_diff<<<264, 256>>>(reinterpret_cast<const uint4*>(src), reinterpret_cast<const uint4*>(dst), bytes / 16,
                           diff);
  unsigned long long d = 1;
  CK(cudaMemcpy(&d, diff, 8, cudaMemcpyDeviceToHost));
  if (d != 0) {
    std::fprintf(stderr, "%s at %llu bytes: %llu differing 16-byte words: NOT bit-exact\n", what,
                 (unsigned long long)bytes, d);
    std::exit(1);
  }
}

}  // namespace p2p_bench

int main(int argc, char** argv) {
  p2p_bench::Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc)
      opt.data = argv[++i];
    else if (a == "--max-mib" && i + 1 < argc)
      opt.max_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--min-kib" && i + 1 < argc)
      opt.min_kib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc)
      opt.json = argv[++i];
    else if (a == "--reps-scale" && i + 1 < argc)
      opt.reps_scale = std::atof(argv[++i]);
    else if (a == "--sweep")
      opt.sweep = true;
    else if (a == "--sweep-only" && i + 1 < argc)  // sweep variants whose name contains this
      opt.sweep = true, opt.sweep_only = argv[++i];
    else if (a == "--variant" && i + 1 < argc)  // NAME:KEY=VALUE,... (parse_variant); the built-in variants
      opt.sweep = true, opt.variants.push_back(argv[++i]);  // then run only where --sweep-only names them
    else if (a == "--sweep-mib" && i + 1 < argc) {  // A,B: the sweep's two message sizes (MiB)
      unsigned long long x = 0, y = 0;
      if (std::sscanf(argv[++i], "%llu,%llu", &x, &y) != 2 || !x || !y)
        return std::fprintf(stderr, "--sweep-mib wants A,B (MiB)\n"), 2;
      opt.sweep_mib[0] = x, opt.sweep_mib[1] = y;
    } else if (a == "--curve-variant" && i + 1 < argc)  // NAME:KEY=VALUE,...: one more link on the curve
      opt.curve_variants.push_back(argv[++i]);
    else if (a == "--chain-probe")  // stream mode's copy chain without coding: events, flag waits
      opt.chain_probe = true;
    else if (a == "--trace")  // per-frame timelines (kernels' stamps, copies' events) of the default link at 64 MiB
      opt.trace = true;
    else if (a == "--trace-variant" && i + 1 < argc)  // NAME:KEY=VALUE,...: trace this option set too
      opt.trace = true, opt.trace_variants.push_back(argv[++i]);
    else if (a == "--trace-light")  // no copy events; the traced transfer runs in GPU time, as the sweep times it
      opt.trace = true, opt.trace_light = true;
    else if (a == "--trace-mib" && i + 1 < argc)  // size of the traced transfers (MiB)
      opt.trace = true, opt.trace_mib = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    else if (a == "--no-curve")
      opt.curve = false;
    else if (a == "--modes" && i + 1 < argc)  // links of the curve: stream, copy or both
      opt.modes = argv[++i];
    else if (a == "--batch" && i + 1 < argc)  // COUNTxMIB[,...]: messages back to back, one batch against one each
      opt.batch_specs = argv[++i];
    else if (a == "--batch-trace")  // with --batch: trace one coded batch per case
      opt.batch_trace = true;
    else if (a == "--peer")  // PeerLink GPU 0 -> GPU 1 instead of the pinned-host link
      opt.peer = true;
    else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--max-mib 1024] [--min-kib 1] [--json FILE] [--reps-scale X] "
                   "[--sweep] [--sweep-only NAME] [--variant NAME:K=V,...] [--sweep-mib A,B] [--chain-probe] "
                   "[--curve-variant NAME:K=V,...] [--trace] [--trace-light] [--trace-mib M] "
                   "[--trace-variant NAME:K=V,...] [--no-curve] [--modes stream,copy] [--peer] "
                   "[--batch COUNTxMIB,...] [--batch-trace]\n", argv[0]);
      return 2;
    }
  }
  if (!opt.batch_specs.empty()) return p2p_bench::run_batch(opt);
  if (opt.peer) {
    if (opt.max_mib == 0) return std::fprintf(stderr, "--max-mib must be positive\n"), 2;
    return p2p_bench::run_peer(opt);
  }
  if (!bench::gpu_count("zipcomm_bench_p2p")) return 0;
  p2p_bench::HostBench hb(opt.data, opt.max_mib);
  p2p_bench::probe_copy_engines(hb);
  if (opt.chain_probe) p2p_bench::probe_copy_chain(hb);
  if (opt.sweep && p2p_bench::run_sweep(hb, opt) != 0) return 2;
  if (opt.trace && p2p_bench::run_trace(hb, opt) != 0) return 2;
  if (!opt.curve) return 0;
  return p2p_bench::run_curve(hb, opt);
}
