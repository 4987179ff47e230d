// The GPU half of zipcomm.WeightSync (see weight_sync.hpp): a P2P link per element type over
// include/zipcomm/comm/p2p.cuh, a batch per link per sync, and one wait() per link before returning.
#include <cuda_runtime.h>

#include <string>

#include <zipcomm/comm/p2p.cuh>

#include "weight_sync.hpp"

namespace zipcomm_python {
namespace gpu {
namespace {

using zipcomm::DType;
using zipcomm::Status;
using zipcomm::comm::HostStagingLink;
using zipcomm::comm::P2PMessage;
using zipcomm::comm::PeerLink;

std::string cuda_text(cudaError_t e) { return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")"; }

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw CudaError("zipcomm.WeightSync: " + what + ": " + cuda_text(e));
}

/// Makes `device` current for the scope, restoring the previous one after.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~CurrentDevice() { cudaSetDevice(previous_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

/// A link of either kind and any element type, behind one interface (the links are templates on DType).
struct AnyLink {
  virtual ~AnyLink() = default;
  virtual cudaError_t send(const P2PMessage* msgs, size_t count, bool raw, cudaStream_t send_stream,
                           cudaStream_t recv_stream) = 0;
  virtual Status wait(cudaError_t* cuda_error) = 0;
  virtual cudaError_t reset() = 0;
  virtual const char* mode() const = 0;
};

template <DType D>
struct HostLink final : AnyLink {
  HostStagingLink<D> link;
  explicit HostLink(int device) { check(link.init(device), "HostStagingLink::init"); }
  cudaError_t send(const P2PMessage* msgs, size_t count, bool raw, cudaStream_t stream, cudaStream_t) override {
    return raw ? link.transfer_raw_many(msgs, count, stream) : link.transfer_many(msgs, count, stream);
  }
  Status wait(cudaError_t* cuda_error) override { return link.wait(cuda_error); }
  cudaError_t reset() override { return link.reset(); }
  const char* mode() const override {
    return link.mode() == zipcomm::comm::HostLinkMode::stream ? "stream" : "copy";
  }
};

template <DType D>
struct PeerLinkOf final : AnyLink {
  PeerLink<D> link;
  PeerLinkOf(int send_device, int recv_device) {
    check(link.init(send_device, recv_device), "PeerLink::init");
  }
  cudaError_t send(const P2PMessage* msgs, size_t count, bool raw, cudaStream_t send_stream,
                   cudaStream_t recv_stream) override {
    return raw ? link.transfer_raw_many(msgs, count, send_stream, recv_stream)
               : link.transfer_many(msgs, count, send_stream, recv_stream);
  }
  Status wait(cudaError_t* cuda_error) override { return link.wait(cuda_error); }
  cudaError_t reset() override { return link.reset(); }
  const char* mode() const override { return "peer"; }
};

template <template <DType> class Link, class... Args>
std::unique_ptr<AnyLink> make_link(DType d, Args... args) {
  std::unique_ptr<AnyLink> link;
  zipcomm::visit_comm_dtype(d, false, [&](auto dt) {
    link = std::make_unique<Link<decltype(dt)::value>>(args...);
    return true;
  });
  if (!link)
    throw CudaError(std::string("zipcomm.WeightSync: no P2P link for ") + zipcomm::dtype_name(d) +
                    " (the links move bf16, fp16 and fp32)");
  return link;
}

constexpr int DTYPE_SLOTS = 8;  // indexed by the DType's value

}  // namespace

struct WeightSyncLinks::Impl {
  LinkKind kind;
  int send_device, recv_device;
  std::unique_ptr<AnyLink> links[DTYPE_SLOTS];
  cudaEvent_t start = nullptr, stop = nullptr;  // on the receive device
};

WeightSyncLinks::WeightSyncLinks(LinkKind kind, int send_device, int recv_device, const std::vector<DType>& dtypes)
    : impl_(new Impl{kind, send_device, recv_device, {}, nullptr, nullptr}) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  for (int device : {send_device, recv_device})
    if (device < 0 || device >= count)
      throw CudaError("zipcomm.WeightSync: CUDA device " + std::to_string(device) + ", but only " +
                      std::to_string(count) + " GPU(s) are visible");
  if (kind == LinkKind::host && send_device != recv_device)
    throw CudaError("zipcomm.WeightSync: the host link moves data within one GPU");
  for (DType d : dtypes) {
    auto& slot = impl_->links[int(d) % DTYPE_SLOTS];
    if (slot) continue;
    slot = kind == LinkKind::host ? make_link<HostLink>(d, send_device)
                                  : make_link<PeerLinkOf>(d, send_device, recv_device);
  }
  CurrentDevice scope(recv_device);
  check(cudaEventCreate(&impl_->start), "cudaEventCreate");
  check(cudaEventCreate(&impl_->stop), "cudaEventCreate");
}

WeightSyncLinks::~WeightSyncLinks() {
  if (!impl_) return;
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(impl_->recv_device) == cudaSuccess) {
    if (impl_->start) cudaEventDestroy(impl_->start);
    if (impl_->stop) cudaEventDestroy(impl_->stop);
    cudaSetDevice(previous);
  }
  // The links free their own memory and streams (and wait for their work) in their destructors.
}

const char* WeightSyncLinks::mode(DType dtype) const {
  const auto& link = impl_->links[int(dtype) % DTYPE_SLOTS];
  return link ? link->mode() : "none";
}

SyncTiming WeightSyncLinks::sync(const std::vector<SyncGroup>& groups, bool raw, uintptr_t stream_handle) {
  Impl& s = *impl_;
  const auto caller = reinterpret_cast<cudaStream_t>(stream_handle);
  // The host link's one GPU: the caller's stream both sends and receives. The peer link's receive side runs on
  // the receive device's default stream (sync() waits for it before returning).
  const cudaStream_t recv_stream = s.kind == LinkKind::host ? caller : cudaStream_t(nullptr);
  SyncTiming timing;
  std::vector<std::vector<P2PMessage>> batches(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!s.links[int(groups[g].dtype) % DTYPE_SLOTS])
      throw CudaError(std::string("zipcomm.WeightSync: no link was made for ") + zipcomm::dtype_name(groups[g].dtype));
    for (const SyncMessage& m : groups[g].messages) {
      if (m.n == 0) continue;  // a zero-size tensor may have no address; nothing to move
      batches[g].push_back({m.src, m.dst, m.n});
      timing.bytes += m.n * zipcomm::format::elem_bytes(groups[g].dtype);
    }
  }
  {
    CurrentDevice scope(s.recv_device);
    check(cudaEventRecord(s.start, recv_stream), "cudaEventRecord");
  }
  // Enqueue every batch, then wait for every link that got one: a link refusing its batch still leaves the others
  // to be waited for, so that nothing is in flight when the error is thrown.
  cudaError_t enqueue_error = cudaSuccess;
  std::string enqueue_where;
  std::vector<AnyLink*> used;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (batches[g].empty()) continue;
    AnyLink* link = s.links[int(groups[g].dtype) % DTYPE_SLOTS].get();
    const cudaError_t e = link->send(batches[g].data(), batches[g].size(), raw, caller, recv_stream);
    used.push_back(link);
    if (e != cudaSuccess && enqueue_error == cudaSuccess) {
      enqueue_error = e;
      enqueue_where = std::string(raw ? "transfer_raw_many" : "transfer_many") + " (" +
                      zipcomm::dtype_name(groups[g].dtype) + ")";
    }
  }
  {
    CurrentDevice scope(s.recv_device);
    check(cudaEventRecord(s.stop, recv_stream), "cudaEventRecord");
  }
  Status first = Status::ok;
  std::string status_where;
  for (size_t k = 0; k < used.size(); ++k) {
    cudaError_t cuda_error = cudaSuccess;
    const Status st = used[k]->wait(&cuda_error);
    if (st != Status::ok) {
      used[k]->reset();  // the link refuses transfers after an error until reset
      if (first == Status::ok) {
        first = st;
        status_where = "zipcomm.WeightSync.sync";
        if (cuda_error != cudaSuccess) status_where += " (CUDA: " + cuda_text(cuda_error) + ")";
      }
    }
  }
  if (enqueue_error != cudaSuccess) {
    for (AnyLink* link : used) link->reset();
    throw CudaError("zipcomm.WeightSync.sync: " + enqueue_where + ": " + cuda_text(enqueue_error));
  }
  if (first != Status::ok) throw StatusError(status_where, first);
  CurrentDevice scope(s.recv_device);
  check(cudaEventSynchronize(s.stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, s.start, s.stop), "cudaEventElapsedTime");
  timing.seconds = double(ms) / 1e3;
  return timing;
}

}  // namespace gpu
}  // namespace zipcomm_python
