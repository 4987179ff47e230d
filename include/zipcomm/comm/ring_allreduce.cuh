// Ring allreduce inside a persistent kernel: one thread block per (rank, channel) runs that rank's share of a
// reduce-scatter + all-gather ring, pushing each message into the next rank's mailbox and raising a flag.
// COMPRESSED = true: the hops are zipcomm's fused steps (encode, decode + reduce + encode, decode + forward,
// decode); false: the same ring, same chunks and order, moving raw elements (thread::reduce_items on the
// hops). The two give the same bits (docs/RING.md).
//
// A launch is given a RingLaunch (plain struct, by value): every rank's window (control words + mailbox, as
// this process addresses it: same device, a peer device after cudaDeviceEnablePeerAccess, or an NCCL
// ncclGetLsaPointer result) and the data buffers of the ranks it runs. It runs ranks [first_rank,
// first_rank + num_ranks) x channels blocks; ranks simulated on one GPU are all in one launch, one GPU per
// rank launches its own. Every wait on a peer is bounded (Status::timeout) and any error is written to every
// rank's error word, so the other blocks stop waiting at once.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cuda/atomic>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "../block/block_fused.cuh"
#include "../block/block_stream_codec.cuh"
#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/reduce_op.hpp"
#include "../warp/lane_io.cuh"
#include "ring_schedule.cuh"

namespace zipcomm {
namespace comm {

constexpr int RING_WARPS = 8;
constexpr int RING_THREADS = RING_WARPS * 32;
/// Blocks per SM the kernel is compiled for. 1: the compressed kernel keeps its ~230 registers per thread
/// (no spills; one 8-warp block per SM). 2 caps it at 128 registers, with ~600 bytes of spills (nvcc 13.0,
/// sm_90). Not measured yet: define ZIPCOMM_RING_MIN_BLOCKS_PER_SM to try.
#ifndef ZIPCOMM_RING_MIN_BLOCKS_PER_SM
#define ZIPCOMM_RING_MIN_BLOCKS_PER_SM 1
#endif

/// Timer slots per rank (nanoseconds, summed over the rank's blocks): waiting on flags, one per action kind,
/// then the whole block.
constexpr int RING_TIMER_WAIT = 0;
constexpr int RING_TIMER_TOTAL = 1 + RING_ACTION_KINDS;
constexpr int RING_TIMER_SLOTS = RING_TIMER_TOTAL + 1;
ZIPCOMM_HOST_DEVICE int ring_timer_of(RingActionKind k) { return 1 + int(k); }

/// Every rank's window, and the data buffer of each rank this process runs (others may be null).
struct RingPeers {
  int ranks;
  uint8_t* window[RING_MAX_RANKS];
  void* data[RING_MAX_RANKS];  // n elements, in place: the rank's input, then the result
};

/// Arguments of one pass (one kernel launch).
struct RingLaunch {
  RingPeers peers;
  RingPartition part;
  RingWindowLayout layout;
  ReduceOp op;
  uint32_t epoch;              // this pass's flag value (passes count up from 1 after a reset)
  uint64_t first_round;        // pipeline rounds [first_round, first_round + rounds) of every channel
  uint64_t rounds;
  int first_rank, num_ranks;   // ranks whose blocks this launch runs
  uint64_t timeout_ns;         // bound of every wait on a peer
  unsigned long long* timers;  // optional: [num_ranks][RING_TIMER_SLOTS] nanoseconds, added to
};

/// Host-side check of a launch's arguments for elements of dtype d (what the kernel relies on).
inline bool ring_launch_valid(const RingLaunch& a, DType d) {
  const RingPartition& p = a.part;
  if (!ring_partition_valid(p) || !ring_window_layout_valid(a.layout) || !reduce_op_valid(a.op)) return false;
  if (!comm_dtype_supported(d) || ring_slot_need(d, p.chunk_elems) > a.layout.slot_bytes) return false;
  if (a.peers.ranks != p.ranks || p.channels > a.layout.channels || a.timeout_ns == 0) return false;
  if (a.first_rank < 0 || a.num_ranks < 1 || a.first_rank + a.num_ranks > p.ranks) return false;
  if (p.ranks > 1 && (a.rounds > ring_rounds_per_pass(a.layout, p.ranks) || a.epoch == 0)) return false;
  if (a.first_round + a.rounds > p.rounds || a.rounds == 0) return false;
  for (int r = 0; r < p.ranks; ++r)
    if (!a.peers.window[r] || reinterpret_cast<uintptr_t>(a.peers.window[r]) % RING_SLOT_ALIGN) return false;
  for (int r = a.first_rank; r < a.first_rank + a.num_ranks; ++r)
    if (!a.peers.data[r]) return false;
  return true;
}

namespace detail {

ZIPCOMM_DEVICE uint64_t ring_now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

using SysFlag = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;

/// Waits (thread 0 spins, the group sleeps at the barrier) until *flag reaches `target` (wrap-safe), an error
/// appears in the own window's error word, or timeout_ns pass. The same Status in every thread. The acquire
/// load orders the slot reads that follow it; the barrier passes that on to the group.
template <class Group>
ZIPCOMM_DEVICE Status ring_wait(Group& g, uint32_t* flag, uint32_t target, uint32_t* error_word,
                                uint64_t timeout_ns, uint32_t& shared, uint64_t& wait_ns) {
  g.sync();  // every thread is past its last use of `shared`
  if (g.thread_rank() == 0) {
    SysFlag f(*flag), err(*error_word);
    const uint64_t start = ring_now_ns();
    uint32_t s = 0;
    for (uint32_t spin = 0;; ++spin) {
      if (int32_t(f.load(cuda::memory_order_acquire) - target) >= 0) break;
      if ((s = err.load(cuda::memory_order_relaxed)) != 0) break;
      if (ring_now_ns() - start > timeout_ns) {
        s = uint32_t(Status::timeout);
        break;
      }
      if (spin >= 64) __nanosleep(spin < 4096 ? 64 : 512);
    }
    shared = s;
    wait_ns += ring_now_ns() - start;
  }
  g.sync();
  return static_cast<Status>(shared);
}

/// Raises *flag to `value` once every thread of the group has written what the flag announces.
template <class Group>
ZIPCOMM_DEVICE void ring_publish(Group& g, uint32_t* flag, uint32_t value) {
  g.sync();
  if (g.thread_rank() == 0) {
    __threadfence_system();  // the group's writes (ordered before this thread by the barrier) reach the peer first
    SysFlag(*flag).store(value, cuda::memory_order_release);
  }
}

/// The uncompressed hop on `count` elements, 8 per thread per step:
///   in && local:  out = op(in, pre(local))     in only: out = in     local only: out = pre(local)
/// out0 may be local (in place: each thread reads its elements before writing them); out1 (a slot) optional.
/// in and out1 are slot payloads (16-byte aligned); local and out0 may have any alignment.
template <DType D, class Group>
ZIPCOMM_DEVICE void ring_raw_pass(Group& g, const uint8_t* in, const uint8_t* local, uint64_t count,
                                  const ReduceOp& op, uint8_t* out0, uint8_t* out1) {
  const bool local_vec = warp::aligned16(local), out0_vec = warp::aligned16(out0);
  for (uint64_t first = uint64_t(g.thread_rank()) * warp::ITEMS; first < count;
       first += uint64_t(g.size()) * warp::ITEMS) {
    const uint32_t cnt = count - first < uint64_t(warp::ITEMS) ? uint32_t(count - first) : uint32_t(warp::ITEMS);
    uint32_t x[warp::ITEMS];
    if (in) {
      warp::load_items<D, true>(in, first, cnt, x);
      if (local) {
        uint32_t y[warp::ITEMS];
        warp::load_items_any<D>(local, local_vec, first, cnt, y);
        thread::reduce_items<D>(op, x, y);
      }
    } else {
      warp::load_items_any<D>(local, local_vec, first, cnt, x);
      thread::pre_items<D>(op, x);
    }
    if (out0) warp::store_items_any<D>(out0, out0_vec, first, cnt, x);
    if (out1) warp::store_items<D, true>(out1, first, cnt, x);
  }
}

/// Checks a raw message's header.
template <DType D>
ZIPCOMM_DEVICE Status ring_raw_check(const uint8_t* slot, uint64_t count) {
  const RingRawHeader h = *reinterpret_cast<const RingRawHeader*>(slot);
  if (h.magic != RING_RAW_MAGIC || h.dtype != uint8_t(D)) return Status::bad_header;
  return h.count == count ? Status::ok : Status::size_mismatch;
}

/// Thread 0's status, in every thread (a group must take one branch even if a broken peer rewrites a header
/// while it is read).
template <class Group>
ZIPCOMM_DEVICE Status ring_broadcast(Group& g, Status s, uint32_t& shared) {
  g.sync();
  if (g.thread_rank() == 0) shared = uint32_t(s);
  g.sync();
  return static_cast<Status>(shared);
}

}  // namespace detail

/// \brief One rank's share of a ring allreduce for one channel, run by a group of RING_THREADS threads (a
/// thread block, or NCCL's ncclCoopCta). Inside a persistent kernel: every block of every rank of the
/// ring must be resident at once (they wait on each other), which a cooperative launch guarantees.
///
/// \tparam COMPRESSED  true: messages are zipcomm streams; false: raw elements (the baseline)
/// \code
/// using Ring = zipcomm::comm::BlockRingAllreduce<zipcomm::DType::bf16, true>;
/// extern __shared__ Ring::TempStorage temp;   // ~133 KB (the reduce-scatter hop's): dynamic shared memory
/// zipcomm::Status s = Ring(temp).Run(cta, launch, rank, channel);
/// \endcode
template <DType D, bool COMPRESSED>
class BlockRingAllreduce {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no ring allreduce");
  using Encoder = block::BlockStreamEncoder<D, RING_WARPS>;
  using ReduceEncode = block::BlockDecodeReduceEncode<D, RING_WARPS>;
  using Forward = block::BlockDecodeForward<D, RING_WARPS>;
  using Decoder = block::BlockStreamDecoder<D, RING_WARPS>;
  static constexpr uint64_t EB = format::Traits<D>::ELEM_BYTES;

  union CodecStorage {
    typename Encoder::TempStorage enc;
    typename ReduceEncode::TempStorage reduce_encode;
    typename Forward::TempStorage forward;
    typename Decoder::TempStorage dec;
  };
  struct NoCodecStorage {};

 public:
  struct TempStorage {
    std::conditional_t<COMPRESSED, CodecStorage, NoCodecStorage> codec;
    uint32_t status;
  };

  ZIPCOMM_DEVICE explicit BlockRingAllreduce(TempStorage& temp) : temp_(temp) {}

  /// Runs pass `a` for (rank, channel). Returns the same Status in every thread: ok, the first error this
  /// block met, or one another block reported (every rank's error word then holds an error).
  template <class Group>
  ZIPCOMM_DEVICE Status Run(Group& g, const RingLaunch& a, int rank, int channel) {
    const RingPartition& P = a.part;
    const RingWindowLayout& L = a.layout;
    const int R = P.ranks;
    uint8_t* const own = a.peers.window[rank];
    uint8_t* const next = a.peers.window[(rank + 1) % R];
    uint8_t* const data = static_cast<uint8_t*>(a.peers.data[rank]);
    const bool leader = g.thread_rank() == 0;
    uint64_t timer[RING_TIMER_SLOTS] = {};  // thread 0's
    const uint64_t block_start = leader ? detail::ring_now_ns() : 0;
    unsigned long long sent = 0;

    Status st = Status::ok;
    for (uint64_t j = 0; j < a.rounds && st == Status::ok; ++j) {
      for (int step = 0; step < ring_steps(R) && st == Status::ok; ++step) {
        const RingAction act = ring_action(R, rank, step);
        const RingRange e = ring_chunk(P, act.slice, channel, a.first_round + j);
        uint8_t* const elems = data + e.first * EB;
        const uint8_t* in = nullptr;
        if (act.in_msg >= 0) {
          const uint32_t slot = ring_slot_index(R, j, act.in_msg);
          st = detail::ring_wait(g, ring_ready_flag(L, own, channel, slot), a.epoch, ring_error_word(own),
                                 a.timeout_ns, temp_.status, timer[RING_TIMER_WAIT]);
          if (st != Status::ok) break;
          in = ring_slot(L, own, channel, slot);
        }
        const uint32_t out_slot = act.out_msg >= 0 ? ring_slot_index(R, j, act.out_msg) : 0;
        uint8_t* const out = act.out_msg >= 0 ? ring_slot(L, next, channel, out_slot) : nullptr;
        uint8_t* const self = ring_slot(L, own, channel, ring_self_slot_index(R, j));
        const uint64_t t = leader ? detail::ring_now_ns() : 0;
        uint64_t out_bytes = 0;
        if constexpr (COMPRESSED) {
          st = Compressed(g, act.kind, L.slot_bytes, in, elems, e.count, a.op, out, self, out_bytes);
        } else {
          st = Raw(g, act.kind, in, elems, e.count, a.op, out, out_bytes);
        }
        if (leader) timer[ring_timer_of(act.kind)] += detail::ring_now_ns() - t;
        if (st == Status::ok && out) {
          detail::ring_publish(g, ring_ready_flag(L, next, channel, out_slot), a.epoch);
          sent += out_bytes;
        }
      }
    }
    if (leader) {
      if (st != Status::ok) {
        for (int q = 0; q < R; ++q) {
          uint32_t expected = 0;
          detail::SysFlag(*ring_error_word(a.peers.window[q])).compare_exchange_strong(expected, uint32_t(st));
        }
      }
      if (sent) atomicAdd(ring_bytes_sent(own), sent);
      if (a.timers) {
        timer[RING_TIMER_TOTAL] = detail::ring_now_ns() - block_start;
        unsigned long long* tr = a.timers + uint64_t(rank - a.first_rank) * RING_TIMER_SLOTS;
        for (int k = 0; k < RING_TIMER_SLOTS; ++k)
          if (timer[k]) atomicAdd(tr + k, static_cast<unsigned long long>(timer[k]));
      }
    }
    g.sync();
    return st;
  }

 private:
  template <class Group>
  ZIPCOMM_DEVICE Status Compressed(Group& g, RingActionKind kind, uint64_t slot_bytes, const uint8_t* in,
                                   uint8_t* elems, uint64_t count, const ReduceOp& op, uint8_t* out, uint8_t* self,
                                   uint64_t& out_bytes) {
    if constexpr (COMPRESSED) {
      switch (kind) {
        case RingActionKind::send_own:
          out_bytes = Encoder(temp_.codec.enc).Encode(g, elems, count, out, op);
          return Status::ok;
        case RingActionKind::reduce_send:
          return ReduceEncode(temp_.codec.reduce_encode)
              .DecodeReduceEncode(g, in, slot_bytes, elems, count, op, out, slot_bytes, out_bytes);
        case RingActionKind::reduce_keep: {
          // The finished slice goes to the own self slot, then is decoded into the buffer and forwarded in
          // one pass (writing it straight to the peer would need reading it back over the link).
          uint64_t kept = 0;
          Status s = ReduceEncode(temp_.codec.reduce_encode)
                         .DecodeReduceEncode(g, in, slot_bytes, elems, count, op, self, slot_bytes, kept);
          if (s == Status::ok) s = Forward(temp_.codec.forward).DecodeForward(g, self, kept, elems, count, out, slot_bytes);
          out_bytes = kept;
          return s;
        }
        case RingActionKind::forward: {
          const Status s = Forward(temp_.codec.forward).DecodeForward(g, in, slot_bytes, elems, count, out, slot_bytes);
          if (s == Status::ok) out_bytes = reinterpret_cast<const format::Header*>(in)->total_bytes;
          return s;
        }
        case RingActionKind::receive: {
          Status s = Status::ok;
          if (g.thread_rank() == 0) {
            uint64_t stream_n = 0;
            s = Decoder::ReadHeader(in, slot_bytes, count, stream_n);
            if (s == Status::ok && stream_n != count) s = Status::size_mismatch;
          }
          s = detail::ring_broadcast(g, s, temp_.status);
          if (s != Status::ok) return s;
          const bool vec = warp::aligned16(elems);
          auto sink = [&](uint64_t tile, const uint32_t (&x)[warp::ITEMS], uint32_t cnt) {
            warp::store_items_any<D>(elems, vec, tile * format::TILE_ELEMS + warp::lane_id() * warp::ITEMS, cnt, x);
          };
          return Decoder(temp_.codec.dec).Decode(g, in, slot_bytes, count, sink);
        }
        case RingActionKind::local_only:
          detail::ring_raw_pass<D>(g, nullptr, elems, count, op, elems, nullptr);
          return Status::ok;
      }
    }
    return Status::invalid_argument;
  }

  template <class Group>
  ZIPCOMM_DEVICE Status Raw(Group& g, RingActionKind kind, const uint8_t* in, uint8_t* elems, uint64_t count,
                            const ReduceOp& op, uint8_t* out, uint64_t& out_bytes) {
    if (in) {
      const Status s = detail::ring_broadcast(
          g, g.thread_rank() == 0 ? detail::ring_raw_check<D>(in, count) : Status::ok, temp_.status);
      if (s != Status::ok) return s;
    }
    const uint8_t* in_elems = in ? in + RING_RAW_HEADER_BYTES : nullptr;
    uint8_t* out_elems = out ? out + RING_RAW_HEADER_BYTES : nullptr;
    switch (kind) {
      case RingActionKind::send_own:
      case RingActionKind::reduce_send:
        detail::ring_raw_pass<D>(g, in_elems, elems, count, op, nullptr, out_elems);
        break;
      case RingActionKind::reduce_keep:
        detail::ring_raw_pass<D>(g, in_elems, elems, count, op, elems, out_elems);
        break;
      case RingActionKind::forward:
      case RingActionKind::receive:
        detail::ring_raw_pass<D>(g, in_elems, nullptr, count, op, elems, out_elems);
        break;
      case RingActionKind::local_only:
        detail::ring_raw_pass<D>(g, nullptr, elems, count, op, elems, nullptr);
        break;
    }
    if (out && g.thread_rank() == 0) {
      RingRawHeader h{RING_RAW_MAGIC, uint8_t(D), {0, 0, 0}, count};
      *reinterpret_cast<RingRawHeader*>(out) = h;
    }
    out_bytes = RING_RAW_HEADER_BYTES + count * EB;
    return Status::ok;
  }

  TempStorage& temp_;
};

/// The persistent kernel: block b runs rank first_rank + b / channels, channel b % channels.
template <DType D, bool COMPRESSED>
__global__ void __launch_bounds__(RING_THREADS, ZIPCOMM_RING_MIN_BLOCKS_PER_SM) ring_allreduce_kernel(const RingLaunch a) {
  extern __shared__ __align__(16) unsigned char ring_smem[];
  using Ring = BlockRingAllreduce<D, COMPRESSED>;
  auto cta = cooperative_groups::this_thread_block();
  const int rank = a.first_rank + int(blockIdx.x) / a.part.channels;
  const int channel = int(blockIdx.x) % a.part.channels;
  (void)Ring(*reinterpret_cast<typename Ring::TempStorage*>(ring_smem)).Run(cta, a, rank, channel);
}

template <DType D, bool COMPRESSED>
constexpr size_t ring_smem_bytes() {
  return sizeof(typename BlockRingAllreduce<D, COMPRESSED>::TempStorage);
}

namespace detail {
/// cudaFuncSetAttribute once per device and kernel (it is per function and device; cheap, but not free).
template <DType D, bool COMPRESSED>
inline cudaError_t ring_prepare_kernel(int device) {
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit && (done.load() & bit)) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(ring_allreduce_kernel<D, COMPRESSED>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem_bytes<D, COMPRESSED>()));
  if (e == cudaSuccess && bit) done.fetch_or(bit);
  return e;
}
}  // namespace detail

/// Blocks of the ring kernel that can be resident at once on the current device (all of a launch must be).
template <DType D, bool COMPRESSED>
inline cudaError_t ring_resident_blocks(int& blocks) {
  blocks = 0;
  int device = 0, per_sm = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = detail::ring_prepare_kernel<D, COMPRESSED>(device);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_allreduce_kernel<D, COMPRESSED>, RING_THREADS,
                                                      ring_smem_bytes<D, COMPRESSED>());
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) blocks = per_sm * sms;
  return e;
}

/// Launches one pass on the current device, cooperatively (so either every block is resident or the launch
/// fails with cudaErrorCooperativeLaunchTooLarge). cudaErrorInvalidValue for inconsistent arguments.
template <DType D, bool COMPRESSED>
inline cudaError_t ring_launch_pass(const RingLaunch& a, cudaStream_t stream) {
  if (!ring_launch_valid(a, D)) return cudaErrorInvalidValue;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = detail::ring_prepare_kernel<D, COMPRESSED>(device);
  if (e != cudaSuccess) return e;
  RingLaunch args = a;
  void* params[] = {&args};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&ring_allreduce_kernel<D, COMPRESSED>),
                                     dim3(unsigned(a.num_ranks * a.part.channels)), dim3(RING_THREADS), params,
                                     ring_smem_bytes<D, COMPRESSED>(), stream);
}

/// Pass sequencing of one communicator: the epoch of the last pass. Every rank of a ring must issue the same
/// calls, in order on one stream, so that every rank's sequence agrees.
struct RingSequence {
  uint32_t epoch = 0;
};

/// Splits a call into passes (each fits the mailbox) and calls launch(pass) for each: `call` holds everything
/// but epoch, first_round and rounds. Stops at the first error.
template <class LaunchPass>
inline cudaError_t ring_for_each_pass(RingSequence& seq, RingLaunch call, LaunchPass&& launch) {
  const uint64_t per_pass = ring_rounds_per_pass(call.layout, call.part.ranks);
  if (per_pass == 0) return cudaErrorInvalidValue;
  for (uint64_t first = 0; first < call.part.rounds; first += per_pass) {
    call.epoch = seq.epoch + 1;
    call.first_round = first;
    call.rounds = call.part.rounds - first < per_pass ? call.part.rounds - first : per_pass;
    const cudaError_t e = launch(static_cast<const RingLaunch&>(call));
    if (e != cudaSuccess) return e;
    seq.epoch = call.epoch;
  }
  return cudaSuccess;
}

}  // namespace comm
}  // namespace zipcomm
