// Warp level: decode one chunk stream back into elements, tile by tile, handing each lane's 8 items to a
// caller-supplied sink (store, reduce, forward: the fused primitives are sinks).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/chunk_schedule.hpp"
#include "../thread/exponent_code.hpp"
#include "../thread/float_bits.hpp"
#include "lane_io.cuh"

namespace zipcomm {
namespace warp {

/// \brief Decodes one chunk; all 32 lanes of the warp call Decode together.
///
/// The lane words of the chunk are first copied into the caller's TempStorage with coalesced loads (the
/// lanes then read them in an order only known while decoding). Every tile is checked against its anchor
/// and fraction, every escape for canonical form, and the word count against the stream size, so a corrupt
/// or truncated stream yields Status::corrupt_stream; nothing is read outside [stream, stream + bytes).
///
/// \code
/// using Dec = zipcomm::warp::WarpChunkDecoder<zipcomm::DType::bf16>;
/// __shared__ Dec::TempStorage temp[WARPS];
/// auto sink = [&](uint32_t tile, const uint32_t (&x)[8], uint32_t count) { /* lane's items */ };
/// zipcomm::Status s = Dec(temp[warp]).Decode(chunk, chunk_bytes, elems, first_tile, planes, sink);
/// \endcode
/// The sink sees every tile in order, in every lane (count = 0 for lanes with no item in the tile), even
/// after an error was found (then with unspecified values), so the warp stays converged.
template <DType D, class Code = thread::GaussianCode>
class WarpChunkDecoder {
  using FB = thread::FloatBits<D>;
  static constexpr uint32_t EXP_BITS = FB::EXP_BITS;

 public:
  struct TempStorage {
    uint32_t words[format::CODED_WORD_LIMIT];
  };

  ZIPCOMM_DEVICE explicit WarpChunkDecoder(TempStorage& temp) : temp_(temp) {}

  template <class Sink>
  ZIPCOMM_DEVICE Status Decode(const uint8_t* stream, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                               const ConstPlanes& planes, Sink& sink) {
    const uint32_t lane = lane_id();
    const uint32_t tiles = format::chunk_tiles(elems);
    const uint32_t raw_bytes = format::raw_chunk_bytes(D, elems);
    if (bytes == raw_bytes) {
      bool bad = false;
      for (uint32_t t = 0; t < tiles; ++t) {
        const uint32_t cnt = thread::lane_valid_count(elems, t, lane);
        const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * ITEMS;
        uint32_t x[ITEMS];
        read_planes<D>(planes, first_tile + t, first, cnt, x);
        const uint32_t at = (t * format::TILE_ELEMS + lane * ITEMS) * EXP_BITS / 8;
        uint64_t packed = 0;
        if (EXP_BITS == 8) {
          if (at < bytes) {
            uint2 v = *reinterpret_cast<const uint2*>(stream + at);
            packed = uint64_t(v.x) | uint64_t(v.y) << 32;
          }
        } else {
#pragma unroll
          for (uint32_t k = 0; k < EXP_BITS; ++k)
            if (at + k < bytes) packed |= uint64_t(stream[at + k]) << (8 * k);
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
          uint32_t e = uint32_t(packed >> (EXP_BITS * i)) & ((1u << EXP_BITS) - 1u);
          if (uint32_t(i) < cnt)
            x[i] |= FB::assemble(e, 0, 0);
          else
            bad |= e != 0;  // padding must be zero
        }
        sink(t, x, cnt);
      }
      return __any_sync(FULL_MASK, bad) ? Status::corrupt_stream : Status::ok;
    }

    const uint32_t hdr = format::chunk_header_bytes(tiles);
    // Warp-uniform: control flow below must not diverge around the ballots.
    const bool size_bad = bytes > raw_bytes || bytes < hdr || bytes % format::ALIGN ||
                          bytes > format::coded_chunk_bytes(tiles, format::CODED_WORD_LIMIT);
    uint32_t bad = size_bad;  // a mask of lane-local failures, folded once at the end
    // Words past CODED_WORD_LIMIT can only be padding (checked through the exact size at the end).
    const uint32_t max_words = size_bad ? 0u : min((bytes - hdr) / 4, format::CODED_WORD_LIMIT);
    const uint32_t* gw = reinterpret_cast<const uint32_t*>(stream + hdr);
    for (uint32_t i = lane; i < max_words; i += 32) temp_.words[i] = __ldg(gw + i);
    const uint32_t used_hdr = tiles + (tiles + 3) / 4;
    if (!bad)
      for (uint32_t b = used_hdr + lane; b < hdr; b += 32) bad |= stream[b] != 0;
    if (!bad && tiles % 4 && lane == 0) bad |= (stream[tiles + tiles / 4] >> (2 * (tiles % 4))) != 0 ? 1u : 0u;
    __syncwarp();

    const int32_t final_pair = thread::lane_final_pair(elems, lane);
    const uint32_t lt = lanemask_lt();
    // Tile anchors and fraction bytes live in lanes; each tile fetches its own with a shuffle.
    const uint32_t frac_bytes = (tiles + 3) / 4;
    const uint32_t anchor_lo = !size_bad && lane < tiles ? stream[lane] : 0u;
    const uint32_t anchor_hi = !size_bad && lane + 32 < tiles ? stream[lane + 32] : 0u;
    const uint32_t frac_byte = !size_bad && lane < frac_bytes ? stream[tiles + lane] : 0u;

    const uint32_t* words = temp_.words;
    uint32_t base = 0;
    uint32_t hi = 0, lo = 0;  // bit buffer, MSB first: `avail` valid bits
    uint32_t avail = 0;
    auto refill = [&](bool need) -> bool {
      const uint32_t mask = __ballot_sync(FULL_MASK, need);
      if (mask) {
        if (need) {
          // An index past the chunk's words reads a stale word; the exact-size check at the end rejects
          // such a stream (base > words), so the hot loop needs no bounds branch.
          const uint32_t pos = min(base + __popc(mask & lt), format::CODED_WORD_LIMIT - 1);
          const uint32_t w = words[pos];
          // avail < 32 here: the word lands right after the valid bits.
          hi |= w >> avail;
          lo |= __funnelshift_r(0u, w, avail);
          avail += 32;
        }
        base += __popc(mask);
      }
      return mask != 0;
    };
    auto consume = [&](uint32_t n) {  // n <= 31
      hi = __funnelshift_l(lo, hi, n);
      lo <<= n;
      avail -= min(n, avail);
    };

    uint32_t impossible = 0;
    // Symbol of each rank under each of the 4 orders, one rank per lane, one order per byte: the per-tile
    // rank -> exponent table is then two byte operations away.
    uint32_t rank_syms = 0xFFFFFFFFu;
    if (lane < Code::NUM_RANKS) {
      rank_syms = 0;
#pragma unroll
      for (uint32_t fo = 0; fo < 4; ++fo) rank_syms |= Code::rank_to_symbol(Code::table(fo), lane) << (8 * fo);
    }
    const uint32_t full_tiles = elems / format::TILE_ELEMS;  // tiles where every lane owns 8 items
    auto lane_count = [&](uint32_t tile) {
      return tile < full_tiles ? uint32_t(ITEMS) : thread::lane_valid_count(elems, tile, lane);
    };
    uint32_t x[ITEMS], next[ITEMS];
    const uint64_t lane_first = first_tile * format::TILE_ELEMS + lane * ITEMS;
    read_planes<D>(planes, first_tile, lane_first, lane_count(0), next);
    for (uint32_t t = 0; t < tiles; ++t) {
      const uint32_t cnt = lane_count(t);
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) x[i] = next[i];
      if (t + 1 < tiles)  // prefetch: the next tile's planes load while this one decodes
        read_planes<D>(planes, first_tile + t + 1, lane_first + (t + 1) * format::TILE_ELEMS, lane_count(t + 1), next);
      const uint32_t a = __shfl_sync(FULL_MASK, t < 32 ? anchor_lo : anchor_hi, t & 31);
      const uint32_t f = (__shfl_sync(FULL_MASK, frac_byte, t >> 2) >> (2 * (t & 3))) & 3u;

      if (a != 0) {
        // Exponent of each rank for this tile, one rank per lane; 0x100 marks a rank that cannot occur.
        const uint32_t sym = (rank_syms >> (8 * f)) & 0xFFu;
        const uint32_t rank_exp = sym == Code::ZERO ? 0u : sym < a ? a - sym : 0x100u;
        const bool tile_lazy =
            __any_sync(FULL_MASK, cnt > 0 && thread::pair_is_lazy(final_pair, int32_t(4 * t + 3)));
        // Full tiles outside the lazy tail (all but the last two of a chunk) take the fast path: refill
        // greedily, then decode both codewords of a pair from one peek. A pair with an escape falls back
        // to the general per-codeword path, which replays the same refill points.
        const bool fast = !tile_lazy && __all_sync(FULL_MASK, cnt == ITEMS);
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          bool general = !fast;
          if (fast) {
            refill(avail < 32);
            uint32_t len0, len1;
            const uint32_t r0 = Code::decode_rank(hi, len0);
            const uint32_t r1 = Code::decode_rank(__funnelshift_l(lo, hi, len0), len1);
            const uint32_t e0 = __shfl_sync(FULL_MASK, rank_exp, r0 & 31);
            const uint32_t e1 = __shfl_sync(FULL_MASK, rank_exp, r1 & 31);
            if (__any_sync(FULL_MASK, r0 == Code::ESC_RANK || r1 == Code::ESC_RANK)) {
              general = true;  // nothing consumed yet: the general path redoes this pair
            } else {
              consume(len0 + len1);  // <= 30 bits, and avail >= 32 after the refill
              impossible |= e0 | e1;  // bit 8 marks a rank that cannot occur in this tile
              x[2 * p] |= FB::assemble(e0 & 0xFFu, 0, 0);
              x[2 * p + 1] |= FB::assemble(e1 & 0xFFu, 0, 0);
            }
          }
          if (general) {
            const bool pair_refilled = fast;  // the fast path already made this pair's greedy refill
            const bool lazy = thread::pair_is_lazy(final_pair, int32_t(4 * t + p));
            if (!pair_refilled) refill(thread::need_before_pair(cnt > uint32_t(2 * p), lazy, avail));
  #pragma unroll
            for (int j = 0; j < 2; ++j) {
              const int v = 2 * p + j;
              const bool valid = cnt > uint32_t(v);
              uint32_t len;
              uint32_t rank = Code::decode_rank(hi, len);
              if (tile_lazy) {
                const bool need = thread::need_before_code(valid, lazy, len, avail);
                if (refill(need) && need) rank = Code::decode_rank(hi, len);
              }
              const bool esc = valid && rank == Code::ESC_RANK;
              uint32_t e = __shfl_sync(FULL_MASK, rank_exp, rank & 31);
              if (valid) {
                bad |= len > avail;
                consume(len);
              }
              if (__any_sync(FULL_MASK, esc)) {
                refill(thread::need_for_escape(esc, lazy, avail, EXP_BITS));
                if (esc) {
                  bad |= avail < EXP_BITS;
                  e = hi >> (32 - EXP_BITS);
                  consume(EXP_BITS);
                  bad |= !thread::escape_valid<Code>(e, a);
                }
              }
              if (!valid) e = 0;
              bad |= e > 0xFFu;
              x[v] |= FB::assemble(e & ((1u << EXP_BITS) - 1u), 0, 0);
            }
          }
        }
      }
      // The stored anchor and fraction must describe the decoded tile.
      uint32_t mag = 0;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < cnt) mag = max(mag, FB::magnitude(x[i]));
      mag = __reduce_max_sync(FULL_MASK, mag);
      if ((mag >> FB::MANT_BITS) != a || thread::fraction_of<D>(mag) != f) bad = 1u;
      sink(t, x, cnt);
    }
    bad |= impossible > 0xFFu;
    if (!bad && (base > max_words || format::coded_chunk_bytes(tiles, base) != bytes)) bad = 1u;
    for (uint32_t i = base + lane; !bad && i < max_words; i += 32) bad |= temp_.words[i] != 0;
    __syncwarp();
    return __any_sync(FULL_MASK, bad) ? Status::corrupt_stream : Status::ok;
  }

 private:
  TempStorage& temp_;
};

}  // namespace warp
}  // namespace zipcomm
