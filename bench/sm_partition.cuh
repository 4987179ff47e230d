// SM partitions for the codec bench's --sms rows: a CUDA green context (driver API) holding N of the
// GPU's SMs, and a stream of it on which the runtime API (the library's cudaMemsetAsync and kernel launches) runs
// unchanged. A communication kernel gets a share of the SMs; this measures the codec on such a share without
// changing the library's API. The driver's entry points come through the runtime's lookup, as in the library
// (comm/p2p/detail/host_resources.cuh): nothing links libcuda, so the bench still starts, and says so, where no driver is installed.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_common.cuh"

namespace bench {

/// The driver entry points an SmPartition uses, at this header's CUDA version.
struct GreenContextApi {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetDevResource) device_get_dev_resource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) dev_sm_resource_split_by_count = nullptr;
  decltype(&::cuDevResourceGenerateDesc) dev_resource_generate_desc = nullptr;
  decltype(&::cuGreenCtxCreate) green_ctx_create = nullptr;
  decltype(&::cuGreenCtxDestroy) green_ctx_destroy = nullptr;
  decltype(&::cuGreenCtxStreamCreate) green_ctx_stream_create = nullptr;
  decltype(&::cuGreenCtxGetDevResource) green_ctx_get_dev_resource = nullptr;
  decltype(&::cuCtxFromGreenCtx) ctx_from_green_ctx = nullptr;
  decltype(&::cuCtxPushCurrent) ctx_push_current = nullptr;
  decltype(&::cuCtxPopCurrent) ctx_pop_current = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;
  std::string missing;  // why an entry point was not found; empty when all were
};

/// Looked up once through cudaGetDriverEntryPointByVersion.
inline const GreenContextApi& green_context_api() {
  static const GreenContextApi api = [] {
    GreenContextApi a;
    auto get = [&](const char* symbol, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found{};
      const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, CUDA_VERSION, cudaEnableDefault, &found);
      if (e == cudaSuccess && found == cudaDriverEntryPointSuccess && p != nullptr) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      } else if (a.missing.empty()) {
        const std::string version =
            std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
        a.missing = "cudaGetDriverEntryPointByVersion(" + std::string(symbol) + ", " + version + "): " +
                    (e != cudaSuccess ? std::string(cudaGetErrorString(e))
                                      : "query result " + std::to_string(int(found)) + " (symbol not found or "
                                        "the driver is older than CUDA " + version + ")");
      }
      cudaGetLastError();  // a failed lookup leaves no error for the library's cudaGetLastError to find
    };
    get("cuGetErrorName", a.get_error_name);
    get("cuGetErrorString", a.get_error_string);
    get("cuDeviceGet", a.device_get);
    get("cuDeviceGetDevResource", a.device_get_dev_resource);
    get("cuDevSmResourceSplitByCount", a.dev_sm_resource_split_by_count);
    get("cuDevResourceGenerateDesc", a.dev_resource_generate_desc);
    get("cuGreenCtxCreate", a.green_ctx_create);
    get("cuGreenCtxDestroy", a.green_ctx_destroy);
    get("cuGreenCtxStreamCreate", a.green_ctx_stream_create);
    get("cuGreenCtxGetDevResource", a.green_ctx_get_dev_resource);
    get("cuCtxFromGreenCtx", a.ctx_from_green_ctx);
    get("cuCtxPushCurrent", a.ctx_push_current);
    get("cuCtxPopCurrent", a.ctx_pop_current);
    get("cuStreamDestroy", a.stream_destroy);
    return a;
  }();
  return api;
}

/// "CUDA_ERROR_NOT_SUPPORTED (operation not supported) [801]".
inline std::string driver_error_text(CUresult r) {
  const GreenContextApi& cu = green_context_api();
  const char* name = nullptr;
  const char* text = nullptr;
  if (cu.get_error_name == nullptr || cu.get_error_name(r, &name) != CUDA_SUCCESS) name = "CUresult";
  if (cu.get_error_string == nullptr || cu.get_error_string(r, &text) != CUDA_SUCCESS) text = "no description";
  return std::string(name) + " (" + text + ") [" + std::to_string(int(r)) + "]";
}

/// Marks the SM each block ran on, then holds that SM for a while so that later blocks spread over every SM the
/// stream may use.
static __global__ void mark_sm_kernel(unsigned* seen, unsigned slots) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (threadIdx.x == 0 && sm < slots) seen[sm] = 1;
  const long long start = clock64();
  while (clock64() - start < 100000) {
  }
}

/// Streaming 16-byte copy, grid-stride: the copy roofline of a set of SMs (cudaMemcpyAsync may use copy engines,
/// which no SM partition confines).
static __global__ void copy16_kernel(const uint4* __restrict__ in, uint4* __restrict__ out, uint64_t n16) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n16; i += stride) out[i] = in[i];
}

/// A green context of `requested` SMs of the current device and a non-blocking stream in it. Kernels launched on
/// stream() run on those SMs only, whichever context is current (the primary one stays current here). On failure
/// ok() is false and why() says which step failed; nothing is left allocated.
class SmPartition {
 public:
  explicit SmPartition(int requested) : requested_(requested) {
    if (!create()) release();
  }
  ~SmPartition() { release(); }
  SmPartition(const SmPartition&) = delete;
  SmPartition& operator=(const SmPartition&) = delete;

  bool ok() const { return stream_ != nullptr; }
  const std::string& why() const { return why_; }
  int requested() const { return requested_; }
  /// SMs the green context holds (the split may round the request up to its granularity).
  int sms() const { return sms_; }
  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(stream_); }
  /// "default" or "ignoring SM co-scheduling" (the finer split, used when the default one cannot give exactly N).
  const char* split() const { return split_; }
  /// cudaDevAttrMultiProcessorCount read with the green context current, or -1 when the runtime refused: what a
  /// library sizing its grid from the runtime sees inside the partition.
  int runtime_reported_sms() const { return runtime_reported_sms_; }
  /// Distinct SMs a probe kernel on stream() ran on (the driver may give more than provisioned, never fewer).
  int observed_sms() const { return observed_sms_; }

 private:
  bool fail(const std::string& step, CUresult r) {
    why_ = step + ": " + driver_error_text(r);
    return false;
  }
  bool fail(const std::string& step, cudaError_t e) {
    why_ = step + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();  // leaves no error behind for the library's cudaGetLastError after its launches
    return false;
  }

  bool create() {
    const GreenContextApi& cu = green_context_api();
    if (!cu.missing.empty()) {
      why_ = cu.missing;
      return false;
    }
    CUresult r;
    cudaError_t e;
    int ordinal = 0;
    if ((e = cudaGetDevice(&ordinal)) != cudaSuccess) return fail("cudaGetDevice", e);
    // The green context retains the primary context: have it initialized first.
    if ((e = cudaFree(nullptr)) != cudaSuccess) return fail("cudaFree(nullptr)", e);
    CUdevice device;
    if ((r = cu.device_get(&device, ordinal)) != CUDA_SUCCESS) return fail("cuDeviceGet", r);
    CUdevResource all{};
    if ((r = cu.device_get_dev_resource(device, &all, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS)
      return fail("cuDeviceGetDevResource(CU_DEV_RESOURCE_TYPE_SM)", r);
    if (requested_ <= 0 || unsigned(requested_) > all.sm.smCount) {
      why_ = "the GPU has " + std::to_string(all.sm.smCount) + " SMs";
      return false;
    }

    // The default split rounds up to its granularity (8 SMs from sm_90 on); the co-scheduling-free split is finer.
    auto split = [&](unsigned flags, CUdevResource& group) {
      unsigned groups = 1;
      const CUresult rs =
          cu.dev_sm_resource_split_by_count(&group, &groups, &all, nullptr, flags, unsigned(requested_));
      return rs == CUDA_SUCCESS && groups != 1 ? CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION : rs;
    };
    CUdevResource group{};
    r = split(0, group);
    if (r != CUDA_SUCCESS || group.sm.smCount != unsigned(requested_)) {
      CUdevResource fine{};
      if (split(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, fine) == CUDA_SUCCESS &&
          (r != CUDA_SUCCESS || fine.sm.smCount == unsigned(requested_))) {
        group = fine;
        r = CUDA_SUCCESS;
        split_ = "ignoring SM co-scheduling";
      }
    }
    if (r != CUDA_SUCCESS) return fail("cuDevSmResourceSplitByCount(" + std::to_string(requested_) + ")", r);

    CUdevResourceDesc desc;
    if ((r = cu.dev_resource_generate_desc(&desc, &group, 1)) != CUDA_SUCCESS)
      return fail("cuDevResourceGenerateDesc", r);
    if ((r = cu.green_ctx_create(&green_, desc, device, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS) {
      green_ = nullptr;
      return fail("cuGreenCtxCreate", r);
    }
    if ((r = cu.green_ctx_stream_create(&stream_, green_, CU_STREAM_NON_BLOCKING, 0)) != CUDA_SUCCESS) {
      stream_ = nullptr;
      return fail("cuGreenCtxStreamCreate", r);
    }
    CUdevResource held{};
    if ((r = cu.green_ctx_get_dev_resource(green_, &held, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS)
      return fail("cuGreenCtxGetDevResource", r);
    sms_ = int(held.sm.smCount);

    // What the runtime reports inside the partition (the library sizes its persistent grid from this).
    CUcontext as_context;
    if ((r = cu.ctx_from_green_ctx(&as_context, green_)) != CUDA_SUCCESS) return fail("cuCtxFromGreenCtx", r);
    if ((r = cu.ctx_push_current(as_context)) != CUDA_SUCCESS) return fail("cuCtxPushCurrent", r);
    int reported = -1;
    if (cudaDeviceGetAttribute(&reported, cudaDevAttrMultiProcessorCount, ordinal) != cudaSuccess) reported = -1;
    cudaGetLastError();
    CUcontext popped;
    if ((r = cu.ctx_pop_current(&popped)) != CUDA_SUCCESS) return fail("cuCtxPopCurrent", r);
    runtime_reported_sms_ = reported;

    // A runtime launch on the stream, which also shows on how many SMs its blocks ran.
    int all_sms = 0;
    if ((e = cudaDeviceGetAttribute(&all_sms, cudaDevAttrMultiProcessorCount, ordinal)) != cudaSuccess)
      return fail("cudaDeviceGetAttribute", e);
    constexpr unsigned SLOTS = 1024;
    unsigned* d_seen = nullptr;
    if ((e = cudaMalloc(&d_seen, SLOTS * sizeof(unsigned))) != cudaSuccess) return fail("cudaMalloc", e);
    std::vector<unsigned> seen(SLOTS, 0);
    e = cudaMemsetAsync(d_seen, 0, SLOTS * sizeof(unsigned), stream());
    if (e == cudaSuccess) {
      mark_sm_kernel<<<8 * all_sms, 128, 0, stream()>>>(d_seen, SLOTS);
      e = cudaGetLastError();
    }
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(seen.data(), d_seen, SLOTS * sizeof(unsigned), cudaMemcpyDeviceToHost, stream());
    const cudaError_t synced = cudaStreamSynchronize(stream());  // before the free, whatever failed
    if (e == cudaSuccess) e = synced;
    cudaFree(d_seen);
    if (e != cudaSuccess) return fail("runtime API on the green context's stream", e);
    observed_sms_ = int(std::count(seen.begin(), seen.end(), 1u));
    return true;
  }

  void release() {
    // Streams first: destroying the context leaves its streams behind.
    if (stream_ != nullptr) green_context_api().stream_destroy(stream_);
    if (green_ != nullptr) green_context_api().green_ctx_destroy(green_);
    stream_ = nullptr;
    green_ = nullptr;
  }

  int requested_;
  int sms_ = 0, runtime_reported_sms_ = -1, observed_sms_ = 0;
  const char* split_ = "default";
  std::string why_;
  CUgreenCtx green_ = nullptr;
  CUstream stream_ = nullptr;
};

/// Copy bandwidth of copy16_kernel on `sms` SMs (grid: sms x its occupancy) on `stream`, bytes read + written per
/// second, in TB/s.
inline double copy_kernel_tbps(uint64_t bytes, int reps, cudaStream_t stream, int sms) {
  constexpr int THREADS = 256;
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, copy16_kernel, THREADS, 0));
  const int grid = sms * std::max(per_sm, 1);
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemsetAsync(a, 1, bytes, stream));
  const uint64_t n16 = bytes / 16;
  const double ms = median_ms(reps, stream, [&] {
    copy16_kernel<<<grid, THREADS, 0, stream>>>(static_cast<const uint4*>(a), static_cast<uint4*>(b), n16);
  });
  CK(cudaGetLastError());
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * double(n16 * 16) / ms / 1e9;
}

/// Where timed operations run: the whole GPU (the legacy stream) or an SM partition's stream, with the copy
/// roofline (read + write) of those SMs.
struct SmTarget {
  cudaStream_t stream;
  int sms;
  bool partition;
  double copy_tbps;
  std::string suffix() const { return partition ? ", " + std::to_string(sms) + " SMs" : ""; }
};

/// The whole GPU, then a partition of each `requested` SM count (--sms) that could be made, each with its copy
/// roofline over `bytes`. `partitions` keeps them (a failed one too, with its reason; `bench` names it on stderr)
/// and `partition_copy_tbps` their rooflines (0 for a failed one).
inline std::vector<SmTarget> sm_targets(const char* bench, const std::vector<int>& requested, int all_sms,
                                        double copy_tbps, uint64_t bytes, int reps,
                                        std::vector<std::unique_ptr<SmPartition>>& partitions,
                                        std::vector<double>& partition_copy_tbps) {
  std::vector<SmTarget> targets{{0, all_sms, false, copy_tbps}};
  for (int count : requested) {
    partitions.push_back(std::make_unique<SmPartition>(count));
    const SmPartition& p = *partitions.back();
    double tbps = 0;
    if (p.ok()) {
      tbps = copy_kernel_tbps(bytes, reps, p.stream(), p.sms());
      targets.push_back({p.stream(), p.sms(), true, tbps});
    } else {
      std::fprintf(stderr, "%s: --sms %d skipped: %s\n", bench, count, p.why().c_str());
    }
    partition_copy_tbps.push_back(tbps);
  }
  return targets;
}

}  // namespace bench
