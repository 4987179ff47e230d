// P2P pipeline, device side: the sender and receiver kernels of the slot-ring protocol (p2p_protocol.cuh).
//
// Sender: warps take items in order; each waits until its frame's slot is free (credit), splits the item's
// sign/mantissa planes straight into the slot and counts them (the last one publishes the frame's planes
// flag: split-send), codes the exponents (warp::WarpChunkEncoder), places its chunk with a look-back over the
// earlier items of the frame, writes it, and counts the item done; the frame's last item writes the item
// table and header and publishes the exponents flag.
// Receiver: warps take items in order; the warp holding a frame's first item (the leader) waits for the
// frame's flags on the ring, checks the header once, and mirrors what it saw into device memory; every warp then
// checks its item-table entry, decodes its item from the ring (GPU memory) into the output, and counts it done;
// the frame's last item hands the slot back (credit). A transfer is complete once every frame was decoded, never
// earlier.
// Every wait is bounded (Status::timeout) and gives up when the transfer was aborted.
#pragma once

#include <cuda/atomic>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/chunk_check.hpp"
#include "../thread/pair_code.hpp"
#include "../warp/lane_io.cuh"
#include "../warp/pair_tables.cuh"
#include "../warp/warp_chunk_decoder.cuh"
#include "../warp/warp_chunk_encoder.cuh"
#include "p2p_protocol.cuh"

namespace zipcomm {
namespace comm {

/// Device handle of one ring of frame slots and its sequence flags. `slots` and the flags may live in pinned
/// host memory (a host relay's flags), in the receiver's GPU memory (peer link) or in local GPU memory; the
/// kernels only need them addressable and use system-scope atomics on the flags. The receiver decodes from
/// `slots` in place, so its slots are GPU memory.
struct FrameRingView {
  uint8_t* slots = nullptr;  // num_slots * slot_bytes, 128-byte aligned
  uint64_t slot_bytes = 0;
  uint32_t num_slots = 0;
  uint64_t* ready_planes = nullptr;  // [num_slots] producer -> consumer: planes section of frame q is there
  uint64_t* ready_exps = nullptr;    // [num_slots] producer -> consumer: the whole frame q is there
  uint64_t* credits = nullptr;       // [num_slots] consumer -> producer: slot free again after frame q
  uint32_t* exps_bytes = nullptr;    // [num_slots] optional: section B length, for a host-side relay

  ZIPCOMM_HOST_DEVICE uint8_t* slot_at(uint32_t s) const { return slots + s * slot_bytes; }
};

/// Tuning: 8 warps per block, one item per warp at a time. With <= 69 KB of shared memory per block, two
/// blocks (a sender's and a receiver's) fit on every SM together.
struct P2PPolicy {
  static constexpr int WARPS = 8;
  static constexpr int THREADS = WARPS * 32;
};

/// Per-transfer control words of one side (device memory). The host zeroes `status` and `abort` before a
/// transfer; counters are tagged, so nothing else needs resetting between launches.
struct SideControl {
  uint32_t status;       // first error of the transfer (Status), 0 = ok
  uint32_t abort;        // nonzero: stop waiting (timeout, or peers out of step)
  uint64_t error_frame;  // frame index (in its message) of the first error
};
static_assert(sizeof(SideControl) % 8 == 0, "side state is cleared and copied in 64-bit words");

namespace p2p_detail {

ZIPCOMM_DEVICE uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <class T>
ZIPCOMM_DEVICE T load_acquire_sys(T* p) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(*p).load(cuda::memory_order_acquire);
}
template <class T>
ZIPCOMM_DEVICE void store_release_sys(T* p, T v) {
  cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
}
template <class T>
ZIPCOMM_DEVICE void store_relaxed_sys(T* p, T v) {
  cuda::atomic_ref<T, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_relaxed);
}
ZIPCOMM_DEVICE void fence_acq_rel_sys() {
  cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_system);
}
template <class T>
ZIPCOMM_DEVICE T load_acquire_gpu(T* p) {
  return cuda::atomic_ref<T, cuda::thread_scope_device>(*p).load(cuda::memory_order_acquire);
}
template <class T>
ZIPCOMM_DEVICE void store_release_gpu(T* p, T v) {
  cuda::atomic_ref<T, cuda::thread_scope_device>(*p).store(v, cuda::memory_order_release);
}

/// Flags that copy-engine streams wait on (cuStreamWaitValue64, GEQ); an aborting side sets them far ahead so
/// those streams drain instead of hanging. The link is then broken until reset().
struct PoisonList {
  uint64_t* flags = nullptr;
  uint32_t count = 0;
};
constexpr uint64_t POISON_FLAG = uint64_t(1) << 62;

/// First error wins, except that a size mismatch (a header that passed its check and describes another
/// message) replaces any other: peers that disagree on the message also cut it differently, so the receiver
/// looks for later headers in the wrong places (bad_header), or for frames that never come (corrupt_stream,
/// timeout), and which frame is checked first is a matter of timing. The mismatch is the cause to report.
ZIPCOMM_DEVICE void report(SideControl* ctl, Status s, uint64_t frame, bool stop, PoisonList poison = {}) {
  uint32_t old = atomicCAS(&ctl->status, 0u, uint32_t(s));
  bool mine = old == 0u;
  while (!mine && s == Status::size_mismatch && old != uint32_t(Status::size_mismatch)) {
    const uint32_t seen = atomicCAS(&ctl->status, old, uint32_t(s));
    mine = seen == old;
    old = seen;
  }
  if (mine) ctl->error_frame = frame;
  if (stop && atomicExch(&ctl->abort, 1u) == 0u) {
    for (uint32_t i = 0; i < poison.count; ++i) store_release_sys(&poison.flags[i], POISON_FLAG);
  }
}

/// Lane 0 polls `flag` until `state(value)` is not waiting, the wait outlives timeout_ns, or the transfer was
/// aborted; the outcome goes to every lane. System scope: the flag may be written by another GPU or the host.
template <bool SYSTEM, class State>
ZIPCOMM_DEVICE Status warp_wait(uint64_t* flag, State state, const SideControl* ctl, uint64_t timeout_ns) {
  uint32_t result = 0;
  if (warp::lane_id() == 0) {
    const uint64_t start = global_ns();
    uint32_t sleep = 32;
    for (;;) {
      const uint64_t v = SYSTEM ? load_acquire_sys(flag) : load_acquire_gpu(flag);
      const FlagState s = state(v);
      if (s == FlagState::ready) break;
      if (s == FlagState::broken) {
        result = uint32_t(Status::corrupt_stream);
        break;
      }
      if (*const_cast<volatile const uint32_t*>(&ctl->abort)) {
        result = uint32_t(Status::timeout);
        break;
      }
      if (global_ns() - start > timeout_ns) {
        result = uint32_t(Status::timeout);
        break;
      }
      __nanosleep(sleep);
      sleep = sleep < 1024 ? sleep * 2 : sleep;
    }
  }
  result = __shfl_sync(warp::FULL_MASK, result, 0);
  __syncwarp();  // orders the other lanes' later reads after lane 0's acquire
  return Status(result);
}

/// Whether the transfer was aborted (read by lane 0, the same answer in every lane).
ZIPCOMM_DEVICE bool aborted(const SideControl* ctl) {
  uint32_t v = 0;
  if (warp::lane_id() == 0) v = *const_cast<volatile const uint32_t*>(&ctl->abort);
  return __shfl_sync(warp::FULL_MASK, v, 0) != 0;
}

/// Counters shared by the warps of one frame (or launch): the upper half tags the use, so a word left by an
/// older or aborted use restarts at zero. Returns the count after this increment.
ZIPCOMM_DEVICE uint32_t tagged_increment(unsigned long long* word, uint32_t tag) {
  unsigned long long old = *const_cast<volatile unsigned long long*>(word);
  for (;;) {
    const unsigned long long next = uint32_t(old >> 32) == tag ? old + 1 : (uint64_t(tag) << 32) | 1u;
    const unsigned long long seen = atomicCAS(word, old, next);
    if (seen == old) return uint32_t(next);
    old = seen;
  }
}

/// The next item for this warp, in increasing order. One atomicAdd: every warp of the grid takes items from
/// this word, and a compare-and-swap loop there serializes into one L2 round trip per retry (it made frames
/// of small items take hundreds of microseconds). The host zeroes the word before each launch, in stream order.
ZIPCOMM_DEVICE uint64_t take_item(unsigned long long* counter) {
  unsigned long long c = 0;
  if (warp::lane_id() == 0) c = atomicAdd(counter, 1ull);
  return __shfl_sync(warp::FULL_MASK, c, 0);
}

/// Counts one item of a frame into a per-slot word; true for the frame's last item, which also clears the
/// word for the slot's next frame. That reuse is safe: the next frame in the slot starts only after this one
/// was published (credits or stream order), and every item counted before the last one did.
ZIPCOMM_DEVICE bool count_frame_item(unsigned long long* word, uint32_t items) {
  if (atomicAdd(word, 1ull) + 1 != items) return false;
  atomicExch(word, 0ull);
  return true;
}

// Look-back entries: [tag:30][flag:2][bytes:32]; tag = low 30 bits of (seq + 1).
constexpr uint64_t LB_AGGREGATE = 1, LB_INCLUSIVE = 2;
ZIPCOMM_DEVICE uint64_t lb_pack(uint64_t seq, uint64_t flag, uint32_t bytes) {
  return (((seq + 1) & 0x3FFFFFFFull) << 34) | (flag << 32) | bytes;
}

ZIPCOMM_DEVICE uint64_t warp_sum(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(warp::FULL_MASK, v, o);
  return v;
}

/// Chunk placement inside a frame: the byte offset of item j's chunk = the sum of the chunk sizes of items
/// 0..j-1 (decoupled look-back, 32 predecessors per round). Items of a frame are taken in order, so every
/// item waited for is held by a running warp.
ZIPCOMM_DEVICE Status look_back(uint64_t* entries, uint32_t j, uint64_t seq, uint32_t bytes, const SideControl* ctl,
                                uint64_t timeout_ns, uint32_t& exclusive_out) {
  const uint32_t lane = warp::lane_id();
  const uint64_t tag = (seq + 1) & 0x3FFFFFFFull;
  if (lane == 0)
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(entries[j])
        .store(lb_pack(seq, j == 0 ? LB_INCLUSIVE : LB_AGGREGATE, bytes), cuda::memory_order_relaxed);
  uint64_t exclusive = 0;
  int64_t window_end = j;
  uint32_t failed = 0;
  while (window_end > 0 && !failed) {
    const int64_t idx = window_end - 1 - int64_t(lane);
    uint64_t e = lb_pack(seq, LB_INCLUSIVE, 0);  // before item 0: an inclusive sum of 0
    if (idx >= 0) {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_device> ref(entries[idx]);
      const uint64_t start = global_ns();
      for (;;) {
        e = ref.load(cuda::memory_order_relaxed);
        if ((e >> 34) == tag && ((e >> 32) & 3u) != 0) break;
        if (*const_cast<volatile const uint32_t*>(&ctl->abort) || global_ns() - start > timeout_ns) {
          failed = 1;
          e = lb_pack(seq, LB_INCLUSIVE, 0);
          break;
        }
        __nanosleep(64);
      }
    }
    failed = __any_sync(warp::FULL_MASK, failed);
    const uint32_t inclusive = __ballot_sync(warp::FULL_MASK, ((e >> 32) & 3u) == LB_INCLUSIVE);
    if (inclusive) {
      const uint32_t k = __ffs(inclusive) - 1;  // nearest predecessor that knows its full prefix
      exclusive += warp_sum(lane <= k ? (e & 0xFFFFFFFFu) : 0);
      break;
    }
    exclusive += warp_sum(e & 0xFFFFFFFFu);
    window_end -= 32;
  }
  if (lane == 0 && !failed && j > 0)
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(entries[j])
        .store(lb_pack(seq, LB_INCLUSIVE, uint32_t(exclusive + bytes)), cuda::memory_order_relaxed);
  exclusive_out = uint32_t(exclusive);
  return failed ? Status::timeout : Status::ok;
}

/// Copies `bytes` bytes with the warp; 16-byte accesses when both ends allow. VOLATILE_SRC: the source is
/// written by another agent during the kernel (host memory, a peer GPU), so every load goes to memory.
template <bool VOLATILE_SRC>
ZIPCOMM_DEVICE void warp_copy(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  const uint32_t lane = warp::lane_id();
  if (reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const uint64_t vecs = bytes / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    constexpr int UNROLL = 8;  // 4 KiB in flight per warp: a remote read takes microseconds
    uint64_t i = lane;
    for (; i + (UNROLL - 1) * 32 < vecs; i += UNROLL * 32) {
      uint4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) v[u] = VOLATILE_SRC ? __ldcv(s + i + u * 32) : s[i + u * 32];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) d[i + u * 32] = v[u];
    }
    for (; i < vecs; i += 32) d[i] = VOLATILE_SRC ? __ldcv(s + i) : s[i];
    for (uint64_t b = vecs * 16 + lane; b < bytes; b += 32) dst[b] = VOLATILE_SRC ? __ldcv(src + b) : src[b];
  } else {
    for (uint64_t b = lane; b < bytes; b += 32) dst[b] = VOLATILE_SRC ? __ldcv(src + b) : src[b];
  }
}

ZIPCOMM_DEVICE void warp_zero(uint8_t* dst, uint64_t from, uint64_t to) {
  for (uint64_t b = from + warp::lane_id(); b < to; b += 32) dst[b] = 0;
}

/// The item check of a warp's tiles, folded lane by lane in tile order (thread::ChunkCheck).
template <DType D>
struct WarpItemCheck {
  uint32_t acc = thread::ChunkCheck::lane_seed(warp::lane_id());
  ZIPCOMM_DEVICE void add(const uint32_t (&x)[warp::ITEMS], uint32_t cnt) {
    acc = thread::ChunkCheck::add_items<D>(acc, x, cnt);
  }
  ZIPCOMM_DEVICE uint32_t result() const {
    return __reduce_add_sync(warp::FULL_MASK, thread::ChunkCheck::lane_final(acc));
  }
};

/// Where an item's raw bits go in its planes section (p2p_protocol.cuh item_plane_bytes): plane 0 at the
/// start, its width codes (all full) and its low part at full width, as a one-chunk stream lays them out.
template <DType D>
ZIPCOMM_DEVICE warp::Planes item_planes(uint8_t* planes_section, uint32_t elems) {
  const format::Layout L = format::layout_for(D, elems);
  return warp::Planes{planes_section, planes_section + (L.widths_offset - format::HEADER_BYTES),
                      planes_section + (L.table_offset - format::HEADER_BYTES), true};
}

/// Writes the planes section of one item. The item's check comes from the encoder, which reads the same
/// elements.
template <DType D>
ZIPCOMM_DEVICE void split_item_planes(uint8_t* dst, const void* in, bool vector, uint64_t elem0, uint32_t elems) {
  const warp::Planes planes = item_planes<D>(dst, elems);
  constexpr uint32_t TILE_LOW = format::low_tile_bytes(D, 0, format::TILE_ELEMS);  // every tile at full width
  const uint32_t lane = warp::lane_id();
  const uint32_t tiles = format::chunk_tiles(elems);
  // Whole tiles of an aligned input: SPLIT_TILES tiles' loads in flight before any is used. One tile at a time
  // the split is a chain of memory round trips (bench/probe_split.cu on the H200, 1056 warps of 16384 elements:
  // 54 us, 24 us with 4 tiles in flight; the first frame's planes wait for it). The loads are unconditional
  // (count known), so nothing orders them behind the previous tile's stores.
  constexpr uint32_t SPLIT_TILES = 4;
  const uint32_t whole = vector ? elems / format::TILE_ELEMS / SPLIT_TILES * SPLIT_TILES : 0;
  for (uint32_t t0 = 0; t0 < whole; t0 += SPLIT_TILES) {
    uint32_t x[SPLIT_TILES][warp::ITEMS];
#pragma unroll
    for (uint32_t u = 0; u < SPLIT_TILES; ++u)
      warp::load_items<D, true>(in, elem0 + uint64_t(t0 + u) * format::TILE_ELEMS + lane * warp::ITEMS, warp::ITEMS,
                                x[u]);
#pragma unroll
    for (uint32_t u = 0; u < SPLIT_TILES; ++u) {
      const uint64_t at = uint64_t(t0 + u) * format::TILE_ELEMS + lane * warp::ITEMS;
      warp::write_planes<D>(planes.plane0, planes.low + (t0 + u) * TILE_LOW, 0, format::TILE_ELEMS, at, warp::ITEMS,
                            x[u]);
    }
  }
  for (uint32_t t = whole; t < tiles; ++t) {  // the rest: partial tiles, or any alignment
    const uint32_t cnt = format::lane_valid_count(elems, t, lane);
    uint32_t x[warp::ITEMS];
    const uint64_t at = uint64_t(t) * format::TILE_ELEMS + lane * warp::ITEMS;
    if (vector)
      warp::load_items<D, true>(in, elem0 + at, cnt, x);
    else
      warp::load_items<D, false>(in, elem0 + at, cnt, x);
    warp::write_planes<D>(planes.plane0, planes.low + t * TILE_LOW, 0, format::tile_valid_count(elems, t), at, cnt, x);
  }
  warp_zero(dst, elems, planes.low - dst);  // the stream's gap, the width codes (full) and their gap are zero
}

/// Check of an item read from the (read-only) input.
template <DType D>
ZIPCOMM_DEVICE uint32_t input_item_check(const void* in, bool vector, uint64_t elem0, uint32_t elems) {
  const uint32_t lane = warp::lane_id();
  WarpItemCheck<D> check;
  for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
    const uint32_t cnt = format::lane_valid_count(elems, t, lane);
    uint32_t x[warp::ITEMS];
    const uint64_t at = elem0 + uint64_t(t) * format::TILE_ELEMS + lane * warp::ITEMS;
    if (vector)
      warp::load_items<D, true>(in, at, cnt, x);
    else
      warp::load_items<D, false>(in, at, cnt, x);
    check.add(x, cnt);
  }
  return check.result();
}

/// Check of `elems` elements this warp just wrote at p (plain byte loads: coherent with its own stores).
template <DType D>
ZIPCOMM_DEVICE uint32_t written_item_check(const uint8_t* p, uint32_t elems) {
  const uint32_t lane = warp::lane_id();
  WarpItemCheck<D> check;
  for (uint32_t t = 0; t < format::chunk_tiles(elems); ++t) {
    const uint32_t cnt = format::lane_valid_count(elems, t, lane);
    uint32_t x[warp::ITEMS];
    warp::load_items<D, false>(p, uint64_t(t) * format::TILE_ELEMS + lane * warp::ITEMS, cnt, x);
    check.add(x, cnt);
  }
  return check.result();
}

}  // namespace p2p_detail

/// Words per frame in a side's optional trace (SendArgs::trace, RecvArgs::trace).
constexpr uint32_t TRACE_STAMPS = 4;
constexpr uint32_t ITEM_TRACE_STAMPS = 4;

/// Arguments of the sender kernel (by value).
struct SendArgs {
  FramePlan plan;
  const void* in = nullptr;                    // the message: plan.n elements, any alignment
  uint64_t seq_base = 0;                       // ring sequence number of the message's frame 0
  uint64_t frame_begin = 0, frame_end = 0;     // frames this launch sends
  FrameRingView ring;                          // where frames are written
  bool wait_credits = true;                    // false: the caller guarantees the slots are free (stream order)
  uint32_t launch_tag = 1;                     // nonzero, different from the previous launch (per-launch tags)
  unsigned long long* item_counter = nullptr;  // zero at launch; distinct per concurrently running launch
  unsigned long long* counters = nullptr;      // [2 * num_slots] planes split / items done per slot (zero when idle)
  uint64_t* lookback = nullptr;                // [num_slots * MAX_FRAME_ITEMS]
  uint64_t* credit_seen = nullptr;             // [num_slots] credits as last seen by a frame's first warp
  uint8_t* scratch = nullptr;                  // per warp: the encoder's planes output (already sent by the split)
  uint64_t scratch_bytes = 0;
  SideControl* control = nullptr;
  uint64_t timeout_ns = 0;
  uint64_t* trace = nullptr;  // optional, for tuning: [TRACE_STAMPS * frames of the launch] %globaltimer when the
                              // frame's first item was taken, its planes published, the whole frame published,
                              // and its first warp found the slot free
  p2p_detail::PoisonList poison;  // optional: flags set far ahead when this side aborts
  // Optional (stream mode): section B beyond exps_budget_bytes(frame, exps_budget) is also written to the
  // same offsets of slot s at overflow_slots + s * slot_bytes (the part fixed-size copies do not move).
  uint8_t* overflow_slots = nullptr;
  ExpsBudget exps_budget;
  uint32_t* exps_need = nullptr;  // optional [EXPS_BUDGET_CLASSES]: atomicMax of exps_need_per_kelem per class
  // Optional: warps holding items of later frames split them only once the launch's first frame's planes are
  // published (its ready_planes flag; best where that flag is in GPU memory). Every warp starts at once, so
  // otherwise the first frame's split shares the memory system with the next frames' and the first copy of
  // the transfer starts later.
  bool first_frame_planes_first = false;
};

/// Arguments of the receiver kernel (by value).
struct RecvArgs {
  FramePlan plan;
  void* out = nullptr;  // plan.n elements, any alignment
  uint64_t seq_base = 0;
  uint64_t frame_begin = 0, frame_end = 0;
  FrameRingView ring;      // where frames arrive (slots in GPU memory: decoded in place)
  bool wait_flags = true;  // false: every frame of the launch is known to be in the ring
  bool give_credits = true;
  uint32_t launch_tag = 1;
  unsigned long long* item_counter = nullptr;
  unsigned long long* frames_done = nullptr;  // tagged, per launch
  unsigned long long* counters = nullptr;     // [num_slots] items done per slot (zero when idle)
  uint64_t* mirror = nullptr;                 // [2 * num_slots] frame flags as seen by the frame's leader (device)
  uint32_t* frame_status = nullptr;           // [2 * num_slots] the leader's verdict on the header, and
                                              // the header's section B length
  uint64_t* done_word = nullptr;              // optional: set to done_value once every frame of the launch is decoded
  uint64_t done_value = 0;
  SideControl* control = nullptr;
  uint64_t timeout_ns = 0;
  uint64_t* trace = nullptr;  // optional, for tuning: [TRACE_STAMPS * frames of the launch] %globaltimer when
                              // the frame's leader started waiting, found the frame checked, its last item was
                              // decoded, and the leader saw the planes' flag
  uint64_t* item_trace = nullptr;  // optional, for tuning: [ITEM_TRACE_STAMPS * items of the plan] %globaltimer
                                   // when a warp took the item, saw its frame ready, had decoded it, had counted it
  p2p_detail::PoisonList poison;  // optional: flags set far ahead when this side aborts
  // Optional (stream mode): section B beyond exps_budget_bytes(frame, exps_budget) is read from the same
  // offsets of slot s at overflow_slots + s * slot_bytes; each warp copies its chunk's share in first.
  const uint8_t* overflow_slots = nullptr;
  ExpsBudget exps_budget;
};

/// Shared memory of p2p_send_kernel: the encode table and each warp's lane words.
template <DType D, class Code>
struct P2PSendSmem {
  warp::PairEncodeTable table;
  typename warp::WarpChunkEncoder<D, Code>::TempStorage warp[P2PPolicy::WARPS];
};

template <DType D, class Code = thread::PairCode>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_send_kernel(SendArgs a) {
  using Enc = warp::WarpChunkEncoder<D, Code>;
  extern __shared__ __align__(16) unsigned char p2p_smem[];
  auto& smem = *reinterpret_cast<P2PSendSmem<D, Code>*>(p2p_smem);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadPairTable(smem.table, cta);
  Enc enc(smem.warp[threadIdx.x / 32], smem.table);
  const uint32_t lane = warp::lane_id();
  const uint64_t warp_index = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  uint8_t* scratch = a.scratch + warp_index * a.scratch_bytes;
  const bool coded = a.plan.kind == FrameKind::coded;
  const bool vector = reinterpret_cast<uintptr_t>(a.in) % 16 == 0;
  const uint32_t eb = format::elem_bytes(D);
  const uint32_t S = a.ring.num_slots;
  if (a.frame_begin >= a.frame_end) return;
  const uint64_t item_begin = a.plan.frame(a.frame_begin).first_item;
  const uint64_t item_stop = a.frame_end < a.plan.num_frames ? a.plan.frame(a.frame_end).first_item : a.plan.num_items;

  for (;;) {
    const uint64_t g = item_begin + p2p_detail::take_item(a.item_counter);
    if (g >= item_stop) break;
    if (p2p_detail::aborted(a.control)) break;
    uint32_t j = 0;
    const uint64_t f = a.plan.frame_of_item(g, j);
    const FrameInfo fi = a.plan.frame(f);
    const uint64_t q = a.seq_base + f;
    const uint32_t slot = slot_of(q, S);
    uint8_t* frame = a.ring.slots + slot * a.ring.slot_bytes;
    uint64_t* trace = a.trace ? a.trace + TRACE_STAMPS * (f - a.frame_begin) : nullptr;
    if (trace && j == 0 && lane == 0) trace[0] = p2p_detail::global_ns();

    // 1. The slot is ours once the consumer handed back frame q - S. The frame's first warp polls the
    //    (possibly remote) credit word; the others watch its device-local mirror.
    if (a.wait_credits) {
      Status s = Status::ok;
      if (j == 0) {
        s = p2p_detail::warp_wait<true>(
            &a.ring.credits[slot], [&](uint64_t v) { return credit_state(v, q, S); }, a.control, a.timeout_ns);
        if (s == Status::ok && lane == 0) p2p_detail::store_release_gpu(&a.credit_seen[slot], flag_value(q));
        if (trace && lane == 0) trace[3] = p2p_detail::global_ns();
      } else {
        s = p2p_detail::warp_wait<false>(
            &a.credit_seen[slot], [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
      }
      if (s != Status::ok) {
        if (lane == 0) p2p_detail::report(a.control, s, f, true, a.poison);
        break;
      }
    }

    if (a.first_frame_planes_first && f != a.frame_begin) {
      const uint64_t q0 = a.seq_base + a.frame_begin;
      const Status s = p2p_detail::warp_wait<true>(
          &a.ring.ready_planes[slot_of(q0, S)],
          [&](uint64_t v) { return v >= flag_value(q0) ? FlagState::ready : FlagState::waiting; }, a.control,
          a.timeout_ns);
      if (s != Status::ok) {
        if (lane == 0) p2p_detail::report(a.control, s, f, true, a.poison);
        break;
      }
    }

    // 2. Split-send: the item's planes (or raw bytes) go straight into the slot.
    const uint32_t elems = fi.item_elems_at(j);
    const uint64_t elem0 = fi.first_elem + uint64_t(j) * fi.item_elems;
    uint8_t* planes = frame + item_planes_offset(a.plan, fi, j);
    uint32_t check = 0;
    if (coded) {
      p2p_detail::split_item_planes<D>(planes, a.in, vector, elem0, elems);
    } else {
      p2p_detail::warp_copy<false>(planes, static_cast<const uint8_t*>(a.in) + elem0 * eb, uint64_t(elems) * eb);
      if (j + 1 == fi.items) p2p_detail::warp_zero(frame, fi.elems * eb, fi.planes_bytes);
      check = p2p_detail::input_item_check<D>(a.in, vector, elem0, elems);
    }
    // GPU scope before the count, system scope once, in the release that publishes the frame: release is
    // cumulative, so what the counted warps wrote is ordered before the flag (the receiver's step 4 says more).
    __threadfence();
    __syncwarp();
    if (lane == 0 && p2p_detail::count_frame_item(&a.counters[2 * slot], fi.items)) {
      p2p_detail::store_release_sys(&a.ring.ready_planes[slot], flag_value(q));
      if (trace) trace[1] = p2p_detail::global_ns();
    }

    // 3. Exponents: code the item, place its chunk after those of the frame's earlier items, write it.
    uint8_t* section_b = frame + fi.planes_bytes;
    uint32_t* entry = reinterpret_cast<uint32_t*>(section_b + FRAME_HEADER_BYTES + uint64_t(ITEM_ENTRY_BYTES) * j);
    const uint64_t table_bytes = item_table_bytes(fi.items);
    if (!coded && lane == 0) *reinterpret_cast<uint2*>(entry) = make_uint2(0u, check);
    if (coded) {
      warp::ArrayTileSource<D> load(static_cast<const uint8_t*>(a.in) + elem0 * eb, ReduceOp::sum());
      load.begin(0, elems, 0);
      const warp::ChunkInfo info = enc.Encode(elems, 0, load, p2p_detail::item_planes<D>(scratch, elems));
      uint32_t exclusive = 0;
      const Status s = p2p_detail::look_back(a.lookback + uint64_t(slot) * MAX_FRAME_ITEMS, j, q, info.bytes, a.control,
                                             a.timeout_ns, exclusive);
      if (s != Status::ok) {
        if (lane == 0) p2p_detail::report(a.control, s, f, true, a.poison);
        break;
      }
      enc.Store(section_b + FRAME_HEADER_BYTES + table_bytes + exclusive, elems, info, load);
      if (lane == 0) *reinterpret_cast<uint2*>(entry) = make_uint2(exclusive + info.bytes, info.check);
    }

    // 4. The frame's last item closes it: table padding, header, exponents flag.
    __threadfence();
    __syncwarp();
    uint32_t done = 0;
    if (lane == 0) done = p2p_detail::count_frame_item(&a.counters[2 * slot + 1], fi.items);
    done = __shfl_sync(warp::FULL_MASK, done, 0);
    if (done) {
      __threadfence();  // acquire the frame's items (their look-back entries, chunks and table entries)
      uint32_t exps_bytes = uint32_t(FRAME_HEADER_BYTES + table_bytes);
      if (coded) {
        const uint64_t last = cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(
                                  a.lookback[uint64_t(slot) * MAX_FRAME_ITEMS + fi.items - 1])
                                  .load(cuda::memory_order_relaxed);
        exps_bytes += uint32_t(last & 0xFFFFFFFFu);
      }
      p2p_detail::warp_zero(section_b + FRAME_HEADER_BYTES, uint64_t(ITEM_ENTRY_BYTES) * fi.items, table_bytes);
      if (a.exps_need && lane == 0)
        atomicMax(&a.exps_need[a.exps_budget.tier_of(fi.item_elems)], exps_need_per_kelem(fi, exps_bytes));
      if (a.overflow_slots) {  // what the fixed-size copy of section B leaves behind goes by SM stores
        const uint64_t budget = exps_budget_bytes(fi, a.exps_budget);
        if (exps_bytes > budget)
          p2p_detail::warp_copy<true>(a.overflow_slots + slot * a.ring.slot_bytes + fi.planes_bytes + budget,
                                      section_b + budget, exps_bytes - budget);
      }
      if (lane == 0) {
        alignas(16) const FrameHeader h = make_frame_header(a.plan, fi, Code::ID, q, exps_bytes);
        const uint4* hv = reinterpret_cast<const uint4*>(&h);
        uint4* dst = reinterpret_cast<uint4*>(section_b);
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[i] = hv[i];
        // Read only after ready_exps (acquire), whose release below publishes it.
        if (a.ring.exps_bytes) p2p_detail::store_relaxed_sys(&a.ring.exps_bytes[slot], exps_bytes);
      }
      __threadfence();
      __syncwarp();
      if (lane == 0) p2p_detail::store_release_sys(&a.ring.ready_exps[slot], flag_value(q));
      if (trace && lane == 0) trace[2] = p2p_detail::global_ns();
    }
  }
}

namespace p2p_detail {

/// item_entry_share_valid for the warp decoding item j (lane 0 reads the table, every lane gets the answer).
ZIPCOMM_DEVICE bool warp_item_entry_valid(const uint8_t* table, const FrameInfo& fi, DType dtype, FrameKind kind,
                                          uint32_t exps_bytes, uint32_t j) {
  uint32_t ok = 0;
  if (warp::lane_id() == 0) ok = item_entry_share_valid(table, fi, dtype, kind, exps_bytes, j) ? 1u : 0u;
  return __shfl_sync(warp::FULL_MASK, ok, 0) != 0;
}

}  // namespace p2p_detail

template <DType D, class Code = thread::PairCode>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_recv_kernel(RecvArgs a) {
  using Dec = warp::WarpChunkDecoder<D, Code>;
  extern __shared__ __align__(16) unsigned char p2p_smem[];
  auto& table = *reinterpret_cast<warp::PairDecodeTable*>(p2p_smem);
  auto cta = cooperative_groups::this_thread_block();
  warp::LoadPairTable(table, cta);
  Dec dec(table);
  const uint32_t lane = warp::lane_id();
  const bool coded = a.plan.kind == FrameKind::coded;
  const bool vector = reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  const uint32_t eb = format::elem_bytes(D);
  const uint32_t S = a.ring.num_slots;
  if (a.frame_begin >= a.frame_end) return;
  const uint64_t item_begin = a.plan.frame(a.frame_begin).first_item;
  const uint64_t item_stop = a.frame_end < a.plan.num_frames ? a.plan.frame(a.frame_end).first_item : a.plan.num_items;
  const uint64_t launch_frames = a.frame_end - a.frame_begin;

  for (;;) {
    const uint64_t g = item_begin + p2p_detail::take_item(a.item_counter);
    if (g >= item_stop) break;
    uint64_t* item_trace = a.item_trace && lane == 0 ? a.item_trace + ITEM_TRACE_STAMPS * g : nullptr;
    if (item_trace) item_trace[0] = p2p_detail::global_ns();
    if (p2p_detail::aborted(a.control)) break;
    uint32_t j = 0;
    const uint64_t f = a.plan.frame_of_item(g, j);
    const FrameInfo fi = a.plan.frame(f);
    const uint64_t q = a.seq_base + f;
    const uint32_t slot = slot_of(q, S);
    const uint8_t* base = a.ring.slot_at(slot);  // the frame, decoded where it is
    uint64_t* trace = a.trace ? a.trace + TRACE_STAMPS * (f - a.frame_begin) : nullptr;
    if (trace && j == 0 && lane == 0) trace[0] = p2p_detail::global_ns();
    uint64_t* mirror_planes = &a.mirror[2 * slot];
    uint64_t* mirror_exps = &a.mirror[2 * slot + 1];
    auto fail = [&](Status s, bool stop) {
      if (lane == 0) p2p_detail::report(a.control, s, f, stop, a.poison);
    };

    // 1. Leader: wait for the frame on the ring, check it once, tell the frame's other warps.
    if (j == 0) {
      Status s = Status::ok;
      if (a.wait_flags)
        s = p2p_detail::warp_wait<true>(
            &a.ring.ready_planes[slot], [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
      if (s != Status::ok) {
        fail(s, true);
        break;
      }
      if (lane == 0) p2p_detail::store_release_gpu(mirror_planes, flag_value(q));
      if (trace && lane == 0) trace[3] = p2p_detail::global_ns();
      if (a.wait_flags)
        s = p2p_detail::warp_wait<true>(
            &a.ring.ready_exps[slot], [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
      if (s != Status::ok) {
        fail(s, true);
        break;
      }
      // The header is checked here once; the item table's entries by the warps that use them (step 3): a
      // whole-table check here sat on the path from a frame's landing to its first decode (5-11 us of the
      // transfer's tail).
      alignas(16) FrameHeader h;
      {
        const uint4* hv = reinterpret_cast<const uint4*>(base + fi.planes_bytes);
        uint4* hd = reinterpret_cast<uint4*>(&h);
#pragma unroll
        for (int i = 0; i < 4; ++i) hd[i] = __ldcv(hv + i);
      }
      const Status hs = validate_frame_header(h, a.plan, fi, Code::ID, q);
      if (lane == 0) {
        a.frame_status[2 * slot] = uint32_t(hs);
        a.frame_status[2 * slot + 1] = h.exps_bytes;
        p2p_detail::store_release_gpu(mirror_exps, flag_value(q));
        if (trace) trace[1] = p2p_detail::global_ns();
      }
      // Out-of-step peers (another message size or sequence) cannot recover: stop the transfer.
      if (hs != Status::ok) fail(hs, hs == Status::size_mismatch || hs == Status::bad_header);
    }

    // 2. The item's planes (or raw bytes).
    const uint32_t elems = fi.item_elems_at(j);
    const uint64_t elem0 = fi.first_elem + uint64_t(j) * fi.item_elems;
    const uint64_t planes_at = item_planes_offset(a.plan, fi, j);
    Status s = p2p_detail::warp_wait<false>(
        mirror_planes, [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
    if (s != Status::ok) {
      fail(s, true);
      break;
    }
    s = p2p_detail::warp_wait<false>(
        mirror_exps, [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
    if (s != Status::ok) {
      fail(s, true);
      break;
    }
    const Status frame_ok = Status(*const_cast<volatile uint32_t*>(&a.frame_status[2 * slot]));
    if (item_trace) item_trace[1] = p2p_detail::global_ns();

    // 3. Decode into the output (raw frames: copy).
    if (frame_ok == Status::ok) {
      uint8_t* out_bytes = static_cast<uint8_t*>(a.out) + elem0 * eb;
      const uint8_t* table = base + fi.planes_bytes + FRAME_HEADER_BYTES;
      const uint32_t exps_bytes = *const_cast<volatile uint32_t*>(&a.frame_status[2 * slot + 1]);
      const uint32_t expected = item_check(table, j);
      if (!p2p_detail::warp_item_entry_valid(table, fi, D, a.plan.kind, exps_bytes, j)) {
        fail(Status::corrupt_stream, false);
      } else if (!coded) {
        p2p_detail::warp_copy<true>(out_bytes, base + planes_at, uint64_t(elems) * eb);
        __syncwarp();
        if (p2p_detail::written_item_check<D>(out_bytes, elems) != expected) fail(Status::checksum_mismatch, false);
      } else {
        const uint32_t start = j ? item_end(table, j - 1) : 0u;
        const uint32_t end = item_end(table, j);
        const uint64_t chunk_at = fi.planes_bytes + FRAME_HEADER_BYTES + item_table_bytes(fi.items) + start;
        if (a.overflow_slots) {  // the chunk's bytes past the fixed-size copy: from the overflow area
          const uint64_t overflow_at = fi.planes_bytes + exps_budget_bytes(fi, a.exps_budget);
          const uint64_t from = chunk_at > overflow_at ? chunk_at : overflow_at;
          const uint64_t to = chunk_at + (end - start);
          if (to > from)
            p2p_detail::warp_copy<true>(const_cast<uint8_t*>(base) + from,
                                        a.overflow_slots + slot * a.ring.slot_bytes + from, to - from);
        }
        __syncwarp();
        __threadfence();  // the warp's own overflow writes, before the decoder's loads
        const warp::Planes at = p2p_detail::item_planes<D>(const_cast<uint8_t*>(base + planes_at), elems);
        const warp::ConstPlanes planes{at.plane0, at.widths, at.low,
                                       uint32_t(format::layout_for(D, elems).low_max_bytes)};
        auto sink = [&](uint32_t t, const uint32_t(&x)[warp::ITEMS], uint32_t cnt) {
          const uint64_t at = uint64_t(t) * format::TILE_ELEMS + lane * warp::ITEMS;
          if (vector)
            warp::store_items<D, true>(out_bytes, at, cnt, x);
          else
            warp::store_items<D, false>(out_bytes, at, cnt, x);
        };
        const Status ds = dec.Decode(base + chunk_at, end - start, elems, 0, planes, expected, sink);
        if (ds != Status::ok) fail(ds, false);
      }
    }

    // 4. Count the item; the frame's last one hands the slot back, the launch's last frame completes it.
    // Fences: GPU scope before the counts (every counter lives on this GPU), one system-scope release per frame
    // for the observers off the SMs (copy streams, the sender's GPU, the host). Release is cumulative: what
    // the counting warps wrote and read is ordered before the credit and the done word through the counters.
    // (A system fence per item cost its warp ~4-8 us while the copy engines streamed, and the transfer's last
    // item paid it on the critical path: bench_p2p --trace-light, H200.)
    if (item_trace) item_trace[2] = p2p_detail::global_ns();
    __threadfence();
    __syncwarp();
    const bool last_of_frame = lane == 0 && p2p_detail::count_frame_item(&a.counters[slot], fi.items);
    if (item_trace) item_trace[3] = p2p_detail::global_ns();
    if (last_of_frame) {
      __threadfence();  // acquire the frame's items before the launch count passes them on
      const bool last_of_launch = p2p_detail::tagged_increment(a.frames_done, a.launch_tag) == launch_frames;
      // One system fence releases the frame's items (the launch's last frame: every frame's, acquired through
      // frames_done) to both the credit and the done word.
      p2p_detail::fence_acq_rel_sys();
      if (a.give_credits) p2p_detail::store_relaxed_sys(&a.ring.credits[slot], flag_value(q));
      if (trace) trace[2] = p2p_detail::global_ns();
      if (last_of_launch && a.done_word != nullptr) p2p_detail::store_relaxed_sys(a.done_word, a.done_value);
    }
  }
}

/// Holds a stream until the host sets *go, or for timeout_ns (then *timed_out = 1): the work queued behind it
/// then runs back to back, so a timing of it measures the GPU's work, not how fast the host issued the calls
/// (HostStagingLink::calibrate()). A template only so that the header defines it in every translation unit.
template <class Word = uint32_t>
__global__ void p2p_hold_stream_kernel(const volatile Word* go, Word* timed_out, uint64_t timeout_ns) {
  const uint64_t t0 = p2p_detail::global_ns();
  while (*go == Word(0)) {
    if (p2p_detail::global_ns() - t0 > timeout_ns) {
      *timed_out = Word(1);
      return;
    }
    __nanosleep(256);
  }
}

/// Copies `words` 64-bit words from `from` to `to` (`to` may be mapped pinned memory); `from` null: zeroes `to`. What
/// a side's state needs before a launch (zeroed counters and control words) and after it (its status words into the
/// host's record). A kernel rather than cudaMemsetAsync / cudaMemcpyAsync: while a transfer's copy streams keep
/// the copy engines busy back to back, a memset or copy queued on another stream waited until those streams ran
/// dry (~1 ms per message of a batch, bench_p2p --batch-trace, H200), and the next launch behind it with it. One
/// block of 32 threads: it fits beside the persistent sender and receiver. A template only so that the header
/// defines it in every translation unit.
template <class Word = uint64_t>
__global__ void p2p_side_words_kernel(Word* to, const Word* from, uint32_t words) {
  for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) to[i] = from ? from[i] : Word(0);
}

namespace p2p_detail {
/// Enqueues p2p_side_words_kernel on `stream` (words == 0: nothing).
inline cudaError_t side_words(void* to, const void* from, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (bytes % 8 || bytes / 8 > UINT32_MAX) return cudaErrorInvalidValue;
  p2p_side_words_kernel<uint64_t>
      <<<1, 32, 0, stream>>>(static_cast<uint64_t*>(to), static_cast<const uint64_t*>(from), uint32_t(bytes / 8));
  return cudaGetLastError();
}
/// Loads p2p_side_words_kernel now (lazy loading would load it at its first launch, and a load waits for every
/// kernel running on the GPU, e.g. another program's persistent kernels).
inline cudaError_t load_side_words_kernel() {
  cudaFuncAttributes fa;
  return cudaFuncGetAttributes(&fa, p2p_side_words_kernel<uint64_t>);
}
}  // namespace p2p_detail

}  // namespace comm
}  // namespace zipcomm
