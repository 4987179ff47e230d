// 02_p2p_pipeline/p2p_nccl.cu: the P2P pipeline with NCCL as the transport (one process per GPU).
//
// The sending rank runs zipcomm::comm::P2PSender into a ring in its own GPU memory, with the ring's flags in
// pinned host memory so its host thread sees each frame's planes, then its section B, as they are published.
// The host moves every frame with ncclSend in three steps (split-send): the planes section (its size is
// known to both ranks from the plan), the 64-byte frame header, then the rest of section B (its size is in
// that header). The receiving rank ncclRecv's each piece into the same slot of its own ring, and after the
// last one launches the frame's decode (P2PReceiver, in place) on a decode stream while the next frame moves.
// Slots come back to the sender (credits) once NCCL has sent them; a receive slot is reused only after its
// frame was decoded. Every host wait is bounded: a silent peer ends with a timeout (and ncclCommAbort).
//
// Usage: zipcomm_p2p_nccl [--ranks N] [--data DIR] [--mib 64]
//   --ranks 1 (default): one process, one rank, sending to itself (runs on one GPU).
//   --ranks N: N processes (fork), rank r on GPU r; rank 0 sends to rank N-1 (needs N GPUs).
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <zipcomm/comm/p2p.cuh>

#include "nccl_check.cuh"

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

constexpr uint32_t SLOTS = 8;
constexpr uint64_t TIMEOUT_NS = 10000000000ull;

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

/// Waits for `s` with a deadline; false on timeout.
bool stream_done(cudaStream_t s) {
  const uint64_t start = now_ns();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) CK(e);
    if (now_ns() - start > TIMEOUT_NS) return false;
  }
}

int run_rank(int rank, int nranks, ncclUniqueId id, const std::vector<uint8_t>& message) {
  examples::error_rank() = rank;
  CK(cudaSetDevice(rank));
  ncclComm_t comm;
  NK(ncclCommInitRank(&comm, nranks, id, rank));
  const bool sender = rank == 0, receiver = rank == nranks - 1;
  const int peer_dst = nranks - 1, peer_src = 0;
  const uint64_t n = message.size() / 2;
  const PipelineShape shape;
  const FramePlan plan = make_plan(DType::bf16, FrameKind::coded, n, shape);
  const uint64_t slot_bytes = slot_bytes_for(DType::bf16, shape);
  cudaStream_t s_send, s_nccl;
  CK(cudaStreamCreateWithFlags(&s_send, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s_nccl, cudaStreamNonBlocking));

  // Sender: ring slots in GPU memory, flags in pinned host memory (its host thread reads them).
  P2PSender<DType::bf16> tx;
  uint8_t *send_slots = nullptr, *src = nullptr;
  uint64_t* flags = nullptr;  // ready_planes, ready_exps, credits; then exps_bytes (u32)
  FrameRingView send_ring;
  std::vector<cudaEvent_t> sent(SLOTS);
  if (sender) {
    CK(cudaMalloc(&src, message.size()));
    CK(cudaMemcpy(src, message.data(), message.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&send_slots, SLOTS * slot_bytes));
    CK(cudaHostAlloc(&flags, SLOTS * 28, cudaHostAllocMapped));
    std::memset(flags, 0, SLOTS * 28);
    send_ring.slots = send_slots;
    send_ring.slot_bytes = slot_bytes;
    send_ring.num_slots = SLOTS;
    send_ring.ready_planes = flags;  // UVA: mapped pinned memory has one address for host and device
    send_ring.ready_exps = flags + SLOTS;
    send_ring.credits = flags + 2 * SLOTS;
    send_ring.exps_bytes = reinterpret_cast<uint32_t*>(flags + 3 * SLOTS);
    CK(tx.init(rank, SLOTS, shape));
    for (auto& e : sent) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  // Receiver: ring slots in GPU memory, decoded in place, one decode stream per in-flight frame parity.
  P2PReceiver<DType::bf16> rx;
  uint8_t *recv_slots = nullptr, *out = nullptr;
  FrameRingView recv_ring;
  cudaStream_t s_dec[2];
  std::vector<cudaEvent_t> landed(SLOTS), decoded(SLOTS);
  if (receiver) {
    CK(cudaMalloc(&out, message.size()));
    CK(cudaMemset(out, 0, message.size()));
    CK(cudaMalloc(&recv_slots, SLOTS * slot_bytes));
    recv_ring.slots = recv_slots;
    recv_ring.slot_bytes = slot_bytes;
    recv_ring.num_slots = SLOTS;
    CK(rx.init(rank, SLOTS, 0, 2));  // two launches at once: one per decode stream
    CK(cudaMemset(rx.control(), 0, sizeof(SideControl)));
    for (auto& s : s_dec) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (auto& e : landed) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (auto& e : decoded) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  CK(cudaDeviceSynchronize());
  const uint64_t t0 = now_ns();
  if (sender) {
    SendLaunch launch;
    launch.frames = {0, plan.num_frames};
    launch.timeout_ns = TIMEOUT_NS;
    CK(tx.launch(plan, src, send_ring, launch, s_send));
  }

  uint64_t credited = 0;  // sender: frames whose slot went back
  auto give_credits = [&](uint64_t upto) {
    while (credited < upto && cudaEventQuery(sent[slot_of(credited, SLOTS)]) == cudaSuccess) {
      __atomic_store_n(&send_ring.credits[slot_of(credited, SLOTS)], flag_value(credited), __ATOMIC_RELEASE);
      ++credited;
    }
  };
  auto wait_flag = [&](uint64_t* word, uint64_t q, uint64_t sent_frames) {
    const uint64_t start = now_ns();
    for (;;) {
      const FlagState st = ready_state(__atomic_load_n(word, __ATOMIC_ACQUIRE), q);
      if (st == FlagState::ready) return Status::ok;
      if (st == FlagState::broken) return Status::corrupt_stream;
      give_credits(sent_frames);
      if (now_ns() - start > TIMEOUT_NS) return Status::timeout;
    }
  };

  Status status = Status::ok;
  for (uint64_t f = 0; f < plan.num_frames && status == Status::ok; ++f) {
    const FrameInfo fi = plan.frame(f);
    const uint32_t slot = slot_of(f, SLOTS);
    uint8_t* sframe = sender ? send_slots + slot * slot_bytes : nullptr;
    uint8_t* rframe = receiver ? recv_slots + slot * slot_bytes : nullptr;
    // 1. planes (size known to both ranks from the plan)
    if (sender) status = wait_flag(&send_ring.ready_planes[slot], f, f);
    if (status != Status::ok) break;
    if (receiver && f >= SLOTS) CK(cudaStreamWaitEvent(s_nccl, decoded[slot], 0));  // slot decoded
    NK(ncclGroupStart());
    if (sender) NK(ncclSend(sframe, fi.planes_bytes, ncclUint8, peer_dst, comm, s_nccl));
    if (receiver) NK(ncclRecv(rframe, fi.planes_bytes, ncclUint8, peer_src, comm, s_nccl));
    NK(ncclGroupEnd());
    // 2. the frame header: the receiver learns section B's length from it
    uint64_t exps_bytes = 0;
    if (sender) {
      status = wait_flag(&send_ring.ready_exps[slot], f, f);
      if (status != Status::ok) break;
      exps_bytes = __atomic_load_n(&send_ring.exps_bytes[slot], __ATOMIC_ACQUIRE);
    }
    NK(ncclGroupStart());
    if (sender) NK(ncclSend(sframe + fi.planes_bytes, FRAME_HEADER_BYTES, ncclUint8, peer_dst, comm, s_nccl));
    if (receiver) NK(ncclRecv(rframe + fi.planes_bytes, FRAME_HEADER_BYTES, ncclUint8, peer_src, comm, s_nccl));
    NK(ncclGroupEnd());
    uint64_t recv_bytes = 0;
    if (receiver) {
      if (!stream_done(s_nccl)) {
        status = Status::timeout;
        break;
      }
      FrameHeader h;
      CK(cudaMemcpy(&h, rframe + fi.planes_bytes, sizeof h, cudaMemcpyDeviceToHost));
      status = validate_frame_header(h, plan, fi, CodeId::pair, f);
      if (status != Status::ok) break;
      recv_bytes = h.exps_bytes;
    }
    // 3. the rest of section B: item table and chunks
    NK(ncclGroupStart());
    if (sender)
      NK(ncclSend(sframe + fi.planes_bytes + FRAME_HEADER_BYTES, exps_bytes - FRAME_HEADER_BYTES, ncclUint8, peer_dst,
                  comm, s_nccl));
    if (receiver)
      NK(ncclRecv(rframe + fi.planes_bytes + FRAME_HEADER_BYTES, recv_bytes - FRAME_HEADER_BYTES, ncclUint8, peer_src,
                  comm, s_nccl));
    NK(ncclGroupEnd());
    if (sender) CK(cudaEventRecord(sent[slot], s_nccl));
    if (receiver) {  // decode the frame while the next one moves
      cudaStream_t d = s_dec[f % 2];
      CK(cudaEventRecord(landed[slot], s_nccl));
      CK(cudaStreamWaitEvent(d, landed[slot], 0));
      RecvLaunch launch;
      launch.frames = {f, f + 1};
      launch.wait_flags = false;    // the frame landed before this stream got here
      launch.give_credits = false;  // the sender frees its slots itself, once NCCL has sent them
      launch.timeout_ns = TIMEOUT_NS;
      launch.lane = uint32_t(f % 2);
      launch.reset_control = false;
      launch.max_blocks = int(std::max<uint64_t>(1, format::div_up(fi.items, P2PPolicy::WARPS)));
      CK(rx.launch(plan, out, recv_ring, launch, d));
      CK(cudaEventRecord(decoded[slot], d));
    }
  }
  bool ok = status == Status::ok;
  if (ok) ok = stream_done(s_nccl) && (!receiver || (stream_done(s_dec[0]) && stream_done(s_dec[1])));
  if (ok && sender) {
    give_credits(plan.num_frames);
    ok = stream_done(s_send);
  }
  const double ms = (now_ns() - t0) / 1e6;
  if (!ok) {
    std::fprintf(stderr, "rank %d: transfer failed (%s): aborting the communicator\n", rank,
                 status_string(status == Status::ok ? Status::timeout : status));
    ncclCommAbort(comm);
    return 1;
  }
  int rc = 0;
  if (sender) {
    SideControl c;
    CK(cudaMemcpy(&c, tx.control(), sizeof c, cudaMemcpyDeviceToHost));
    if (c.status) std::fprintf(stderr, "rank %d: sender %s\n", rank, status_string(Status(c.status))), rc = 1;
  }
  if (receiver) {
    SideControl c;
    CK(cudaMemcpy(&c, rx.control(), sizeof c, cudaMemcpyDeviceToHost));
    std::vector<uint8_t> back(message.size());
    CK(cudaMemcpy(back.data(), out, back.size(), cudaMemcpyDeviceToHost));
    if (c.status) std::fprintf(stderr, "rank %d: receiver %s\n", rank, status_string(Status(c.status))), rc = 1;
    if (back != message) std::fprintf(stderr, "rank %d: received data differs\n", rank), rc = 1;
    if (rc == 0)
      std::printf(
          "rank %d received %.1f MiB of bf16 gradients from rank %d over NCCL in %llu frames, %.2f ms "
          "(%.1f GB/s incl. host steps), bit-exact\n",
          rank, message.size() / 1048576.0, peer_src, (unsigned long long)plan.num_frames, ms,
          message.size() / ms / 1e6);
  }
  NK(ncclCommDestroy(comm));
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  examples::error_rank() = 0;  // failures before the fork name rank 0
  int nranks = 1;
  std::string data = "tests/data";
  uint64_t mib = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc)
      nranks = std::atoi(argv[++i]);
    else if (a == "--data" && i + 1 < argc)
      data = argv[++i];
    else if (a == "--mib" && i + 1 < argc)
      mib = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: %s [--ranks N] [--data DIR] [--mib 64]\n", argv[0]);
      return 2;
    }
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // no NVLink multicast
  const std::vector<uint8_t> sample = examples::read_file(data + "/llama_grads.bf16");
  if (sample.size() < 2) return std::fprintf(stderr, "missing %s/llama_grads.bf16\n", data.c_str()), 1;
  std::vector<uint8_t> message((mib << 20) + 2 * 777);  // not a whole number of items
  for (uint64_t off = 0; off < message.size(); off += sample.size())
    std::memcpy(&message[off], sample.data(), std::min<uint64_t>(sample.size(), message.size() - off));

  ncclUniqueId id;
  if (nranks == 1) {
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
      std::printf("zipcomm_p2p_nccl: no GPU here; nothing to show.\n");
      return 0;
    }
    NK(ncclGetUniqueId(&id));
    return run_rank(0, 1, id, message);
  }
  // Several ranks: the id is made before fork, and no CUDA call happens in the parent.
  NK(ncclGetUniqueId(&id));
  std::vector<pid_t> kids;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int gpus = 0;
      if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < nranks) {
        std::fprintf(stderr, "rank %d: %d ranks need %d GPUs, found %d\n", r, nranks, nranks, gpus);
        _exit(1);
      }
      _exit(run_rank(r, nranks, id, message));
    }
    kids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : kids) {
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
