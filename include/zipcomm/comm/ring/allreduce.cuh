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
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cuda/atomic>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "../../block/block_fused.cuh"
#include "../../block/block_stream_codec.cuh"
#include "../../config.hpp"
#include "../../detail/dynamic_smem.cuh"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "../../thread/reduce_op.hpp"
#include "../../warp/lane_io.cuh"
#include "schedule.cuh"
#include "detail/device_ops.cuh"
#include "launch_args.cuh"

namespace zipcomm {
namespace comm {

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
    const uint64_t block_start = leader ? zipcomm::detail::global_timer_ns() : 0;
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
        const uint64_t t = leader ? zipcomm::detail::global_timer_ns() : 0;
        uint64_t out_bytes = 0;
        if constexpr (COMPRESSED) {
          st = Compressed(g, act.kind, L.slot_bytes, in, elems, e.count, a.op, out, self, out_bytes);
        } else {
          st = Raw(g, act.kind, in, elems, e.count, a.op, out, out_bytes);
        }
        if (leader) timer[ring_timer_of(act.kind)] += zipcomm::detail::global_timer_ns() - t;
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
        timer[RING_TIMER_TOTAL] = zipcomm::detail::global_timer_ns() - block_start;
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
          if (s == Status::ok)
            s = Forward(temp_.codec.forward).DecodeForward(g, self, kept, elems, count, out, slot_bytes);
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
__global__ void __launch_bounds__(RING_THREADS, ZIPCOMM_RING_MIN_BLOCKS_PER_SM)
    ring_allreduce_kernel(const RingLaunch a) {
  using Ring = BlockRingAllreduce<D, COMPRESSED>;
  auto cta = cooperative_groups::this_thread_block();
  const int rank = a.first_rank + int(blockIdx.x) / a.part.channels;
  const int channel = int(blockIdx.x) % a.part.channels;
  auto& temp = *reinterpret_cast<typename Ring::TempStorage*>(zipcomm::detail::dynamic_smem_bytes);
  (void)Ring(temp).Run(cta, a, rank, channel);
}

template <DType D, bool COMPRESSED>
constexpr size_t ring_smem_bytes() {
  return sizeof(typename BlockRingAllreduce<D, COMPRESSED>::TempStorage);
}

}  // namespace comm
}  // namespace zipcomm

#include "detail/launch.cuh"
