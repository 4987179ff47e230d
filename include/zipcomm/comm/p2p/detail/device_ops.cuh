// P2P pipeline, device side: the pieces both kernels use (flag waits, error reports, look-back, warp copies,
// item checks).
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cstdint>

#include "../../../config.hpp"
#include "../../../format.hpp"
#include "../../../thread/chunk_check.hpp"
#include "../../../warp/lane_io.cuh"
#include "../../../warp/warp_chunk_decoder.cuh"
#include "../../../detail/bounded_wait.cuh"
#include "../../../detail/look_back.cuh"
#include "../kernel_args.cuh"
#include "../protocol.cuh"

namespace zipcomm {
namespace comm {

namespace p2p_detail {

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
  zipcomm::detail::WarpGroup warp_group;
  zipcomm::detail::WaitBound bound;
  bound.timeout_ns = timeout_ns;
  bound.abort = &ctl->abort;
  auto check = [&] {
    const FlagState s = state(SYSTEM ? load_acquire_sys(flag) : load_acquire_gpu(flag));
    const Status outcome = s == FlagState::broken ? Status::corrupt_stream : Status::ok;
    return zipcomm::detail::WaitStep{s != FlagState::waiting, outcome};
  };
  // 32 ns doubling to 1 us: a frame on the pinned-host link takes tens of microseconds
  return zipcomm::detail::bounded_wait(warp_group, check, bound, zipcomm::detail::DoublingSleep{32, 1024});
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

/// Chunk placement inside a frame: the byte offset of item j's chunk = the sum of the chunk sizes of items
/// 0..j-1 (the library's decoupled look-back over the frame's entries). Items of a frame are taken in order, so
/// every item waited for is held by a running warp.
ZIPCOMM_DEVICE Status look_back(uint64_t* entries, uint32_t j, uint64_t seq, uint32_t bytes, const SideControl* ctl,
                                uint64_t timeout_ns, uint32_t& exclusive_out) {
  const uint64_t tag = (seq + 1) & 0x3FFFFFFFull;
  zipcomm::detail::WaitBound bound;
  bound.timeout_ns = timeout_ns;
  bound.abort = &ctl->abort;
  if (warp::lane_id() == 0)
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(entries[j])
        .store(lb_pack(seq, j == 0 ? LB_INCLUSIVE : LB_AGGREGATE, bytes), cuda::memory_order_relaxed);
  auto read = [&](uint64_t i) {  // an entry of an earlier frame in this slot reads as not published
    const uint64_t e =
        cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(entries[i]).load(cuda::memory_order_relaxed);
    const uint32_t flag = (e >> 34) == tag ? uint32_t((e >> 32) & 3u) : 0u;
    return zipcomm::detail::LookBackEntry{zipcomm::detail::LookBackFlag(flag), e & 0xFFFFFFFFu};
  };
  uint64_t exclusive = 0;
  const Status s = zipcomm::detail::warp_look_back(j, read, bound, zipcomm::detail::FixedSleep{64}, exclusive);
  if (warp::lane_id() == 0 && s == Status::ok && j > 0)
    cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(entries[j])
        .store(lb_pack(seq, LB_INCLUSIVE, uint32_t(exclusive + bytes)), cuda::memory_order_relaxed);
  exclusive_out = uint32_t(exclusive);
  return s == Status::ok ? Status::ok : Status::timeout;
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

/// Where an item's raw bits go in its planes section (p2p/protocol.cuh item_plane_bytes): plane 0 at the
/// start, its width codes (all full) and its low part at full width, as a one-chunk stream lays them out.
template <DType D>
ZIPCOMM_DEVICE warp::Planes item_planes(uint8_t* planes_section, uint32_t elems) {
  const format::Layout L = format::layout_for(D, elems, format::MAX_CHUNK_LOG2);
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

namespace p2p_detail {

/// item_entry_share_valid for the warp decoding item j (lane 0 reads the table, every lane gets the answer).
ZIPCOMM_DEVICE bool warp_item_entry_valid(const uint8_t* table, const FrameInfo& fi, DType dtype, FrameKind kind,
                                          uint32_t exps_bytes, uint32_t j) {
  uint32_t ok = 0;
  if (warp::lane_id() == 0) ok = item_entry_share_valid(table, fi, dtype, kind, exps_bytes, j) ? 1u : 0u;
  return __shfl_sync(warp::FULL_MASK, ok, 0) != 0;
}

}  // namespace p2p_detail

}  // namespace comm
}  // namespace zipcomm
