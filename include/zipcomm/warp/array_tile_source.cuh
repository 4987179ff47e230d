// Warp level: an encoder's loader over an element array in memory, each tile's load started while the previous
// one is coded.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "../format.hpp"
#include "../thread/reduce_op.hpp"
#include "lane_io.cuh"

namespace zipcomm {
namespace warp {

/// Whether an encoder's loader also gives a full tile of 16-bit items as four words, two items each, the first
/// in the low half (words(tile, w)): the encoder then codes them without splitting them into items.
template <class Loader, class = void>
struct LoadsWords : std::false_type {};
template <class Loader>
struct LoadsWords<Loader,
                  std::void_t<decltype(std::declval<Loader&>().words(0u, std::declval<uint32_t (&)[ITEMS / 2]>()))>>
    : std::true_type {};

/// The tiles of an element array in memory, as an encoder's loader wants them (any alignment), each tile's
/// load started while the previous one is coded. With an avg `pre_op` each element is scaled first: a
/// rank's own contribution entering a reduction.
template <DType D>
struct ArrayTileSource {
  const void* in;
  ReduceOp pre_op = ReduceOp::sum();
  bool vector = false;
  uint64_t first_tile = 0;
  uint32_t elems = 0;
  uint32_t issued = 0;  // tiles [issued - 2, issued) are in flight: tile t in ahead[t % 2]
  uint32_t full_tiles = 0;            // tiles loaded as whole vectors (none when the array is unaligned)
  const uint8_t* lane_at = nullptr;   // the lane's first item in the chunk
  LaneItemsPrefetch<D> ahead[2];
  static constexpr uint32_t L1_AHEAD = 4;  // bf16 encode 935 -> 1,052 GB/s (H100); 8 ahead: 958
  static constexpr uint32_t TILE_BYTES = format::TILE_ELEMS * format::Traits<D>::ELEM_BYTES;

  ZIPCOMM_DEVICE ArrayTileSource(const void* array, const ReduceOp& op)
      : in(array), pre_op(op), vector(reinterpret_cast<uintptr_t>(array) % 16 == 0) {}
  ZIPCOMM_DEVICE void begin(uint64_t /*chunk*/, uint32_t chunk_elems, uint64_t chunk_first_tile) {
    elems = chunk_elems;
    first_tile = chunk_first_tile;
    full_tiles = vector ? elems / format::TILE_ELEMS : 0u;
    lane_at = static_cast<const uint8_t*>(in) +
              (first_tile * format::TILE_ELEMS + lane_id() * ITEMS) * format::Traits<D>::ELEM_BYTES;
    issued = 0;
    Issue(0);
    Issue(1);
  }
  /// Two tiles ahead, each in its own registers: a register copy of a load in flight would wait for it.
  ZIPCOMM_DEVICE void operator()(uint32_t t, uint32_t (&x)[ITEMS]) {
    if (!TakeSteady(t, [&](const LaneItemsPrefetch<D>& tile) { tile.TakeFull(x); })) TakeSlow(t, x);
    thread::pre_items<D>(pre_op, x);
  }
  /// operator() of a full tile of a 16-bit dtype, as four words.
  ZIPCOMM_DEVICE void words(uint32_t t, uint32_t (&w)[ITEMS / 2]) {
    static_assert(format::Traits<D>::ELEM_BYTES == 2, "two items per word: 16-bit dtypes");
    if (pre_op.id != ReduceOpId::avg && TakeSteady(t, [&](const LaneItemsPrefetch<D>& tile) { tile.TakeWords(w); }))
      return;
    uint32_t x[ITEMS];
    (*this)(t, x);
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) w[p] = x[2 * p] | x[2 * p + 1] << 16;
  }
  ZIPCOMM_DEVICE Status status() const { return Status::ok; }

 private:
  // The steady state, whole vectors in order: tile t taken from its prefetch by take(prefetch), tile t + 2's load
  // started into the same registers. False (nothing done) elsewhere.
  template <class Take>
  ZIPCOMM_DEVICE bool TakeSteady(uint32_t t, Take take) {
    if (t + 2 != issued || t + 2 >= full_tiles) return false;
    const uint8_t* at = lane_at + (t + 2) * TILE_BYTES;
    // Tile t + 4 to L1: the loads wait for the latest load of their scoreboard (at a merge with the synchronous
    // partial-tile loads too), so the two tiles in registers alone arrive late.
    if (t + L1_AHEAD < full_tiles) prefetch_l1(at + (L1_AHEAD - 2) * TILE_BYTES);
    if (t % 2 == 0) {  // constant indices: the prefetches stay in registers
      take(ahead[0]);
      ahead[0].IssueFull(at);
    } else {
      take(ahead[1]);
      ahead[1].IssueFull(at);
    }
    issued = t + 3;
    return true;
  }
  ZIPCOMM_DEVICE void TakeSlow(uint32_t t, uint32_t (&x)[ITEMS]) {
    if (t + 2 != issued) {  // out of order (a raw chunk's second pass starts again at 0)
      issued = t;
      Issue(t);
      Issue(t + 1);
    }
    if (t % 2 == 0)
      ahead[0].Take(x);
    else
      ahead[1].Take(x);
    Issue(t + 2);
  }
  ZIPCOMM_DEVICE void Issue(uint32_t t) {  // tiles past the chunk load nothing (count 0)
    if (t < full_tiles) {
      const uint8_t* at = lane_at + t * TILE_BYTES;
      if (t % 2 == 0)  // constant indices: the prefetches stay in registers
        ahead[0].IssueFull(at);
      else
        ahead[1].IssueFull(at);
      issued = t + 1;
      return;
    }
    const uint32_t lane = lane_id();
    const uint32_t count = t < format::chunk_tiles(elems) ? format::lane_valid_count(elems, t, lane) : 0u;
    const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * ITEMS;
    if (t % 2 == 0)
      ahead[0].Issue(in, vector, first, count);
    else
      ahead[1].Issue(in, vector, first, count);
    issued = t + 1;
  }
};

}  // namespace warp
}  // namespace zipcomm
