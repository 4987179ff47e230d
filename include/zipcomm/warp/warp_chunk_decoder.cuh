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

/// Where decode + forward copies a chunk: its exponent stream (16-byte aligned; nullptr: not copied) and
/// the planes of the forward stream (plane0 nullptr: not copied).
struct ChunkForward {
  uint8_t* chunk = nullptr;
  Planes planes{nullptr, nullptr};
};

/// \brief Decodes one chunk; all 32 lanes of the warp call every member together.
///
/// The lane words of the chunk are first copied into the caller's TempStorage with coalesced loads (the
/// lanes then read them in an order only known while decoding). Every tile is checked against its anchor
/// and fraction, every escape for canonical form, and the word count against the stream size, so a corrupt
/// or truncated stream yields Status::corrupt_stream; nothing is read outside [stream, stream + bytes).
///
/// Two ways to drive it:
/// \code
/// using Dec = zipcomm::warp::WarpChunkDecoder<zipcomm::DType::bf16>;
/// __shared__ Dec::TempStorage temp[WARPS];
/// // push: the decoder hands every tile to a sink
/// auto sink = [&](uint32_t tile, const uint32_t (&x)[8], uint32_t count) { /* lane's items */ };
/// zipcomm::Status s = Dec(temp[warp]).Decode(chunk, chunk_bytes, elems, first_tile, planes, sink);
/// // pull: the caller asks for tiles in order (what an encoder's loader does in decode + reduce + encode)
/// Dec dec(temp[warp]);
/// dec.Begin(chunk, chunk_bytes, elems, first_tile, planes);
/// for (uint32_t t = 0; t < dec.tiles(); ++t) { uint32_t x[8]; uint32_t count = dec.DecodeTile(t, x); ... }
/// zipcomm::Status s = dec.Finish();
/// \endcode
/// Every lane sees every tile in order (count = 0 for lanes with no item in the tile), even after an error
/// was found (then with unspecified values), so the warp stays converged. Begin(..., forward) also copies the
/// chunk's exponent stream and its share of the planes unchanged to `forward` (decode + forward), with
/// 16-byte vectors; DRAM sees those bytes once, the decoder's own reads of them hit L1/L2.
///
/// \tparam STAGE_WORDS  true (default): lane words are staged in TempStorage (8 KB), the fastest decoder
///   alone. false: lanes read them from global memory through L1 and TempStorage is 16 bytes, which leaves
///   shared memory to whatever runs beside the decoder (decode + reduce + encode uses it for occupancy).
template <DType D, class Code = thread::GaussianCode, bool STAGE_WORDS = true>
class WarpChunkDecoder {
  using FB = thread::FloatBits<D>;
  static constexpr uint32_t EXP_BITS = FB::EXP_BITS;

 public:
  struct TempStorage {
    uint32_t words[STAGE_WORDS ? format::CODED_WORD_LIMIT : 4];
  };

  ZIPCOMM_DEVICE explicit WarpChunkDecoder(TempStorage& temp) : temp_(temp) {}

  template <class Sink>
  ZIPCOMM_DEVICE Status Decode(const uint8_t* stream, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                               const ConstPlanes& planes, Sink& sink) {
    Begin(stream, bytes, elems, first_tile, planes);
    for (uint32_t t = 0; t < tiles_; ++t) {
      uint32_t x[ITEMS];
      const uint32_t cnt = DecodeTile(t, x);
      sink(t, x, cnt);
    }
    return Finish();
  }

  /// Starts chunk `stream` (16-byte aligned, `bytes` long) of `elems` elements whose first tile has global
  /// index first_tile. With `forward`, the chunk's exponent stream and its share of the planes are also
  /// copied, unchanged, to the forward stream (decode + forward).
  ZIPCOMM_DEVICE void Begin(const uint8_t* stream, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                            const ConstPlanes& planes, const ChunkForward* forward = nullptr) {
    const uint32_t lane = lane_id();
    stream_ = stream;
    bytes_ = bytes;
    elems_ = elems;
    tiles_ = format::chunk_tiles(elems);
    first_tile_ = first_tile;
    planes_ = planes;
    full_tiles_ = elems / format::TILE_ELEMS;
    lane_first_ = first_tile * format::TILE_ELEMS + lane * ITEMS;
    const uint32_t raw_bytes = format::raw_chunk_bytes(D, elems);
    raw_ = bytes == raw_bytes;
    bad_ = 0;
    if (forward != nullptr) {
      if (forward->chunk != nullptr && bytes % 16 == 0) copy_bytes(forward->chunk, stream, bytes);
      const uint64_t first_elem = first_tile * format::TILE_ELEMS;
      if (forward->planes.plane0 != nullptr) {
        copy_bytes(forward->planes.plane0 + first_elem, planes.plane0 + first_elem, elems);
        if constexpr (D == DType::fp16)
          copy_bytes(forward->planes.plane1 + first_tile * 96, planes.plane1 + first_tile * 96, tiles_ * 96);
        if constexpr (D == DType::fp32)
          copy_bytes(forward->planes.plane1 + 2 * first_elem, planes.plane1 + 2 * first_elem, 2 * elems);
      }
    }
    if (raw_) {
      max_words_ = 0;
      return;
    }

    const uint32_t hdr = format::chunk_header_bytes(tiles_);
    // Warp-uniform: control flow below must not diverge around the ballots.
    const bool size_bad = bytes > raw_bytes || bytes < hdr || bytes % format::ALIGN ||
                          bytes > format::coded_chunk_bytes(tiles_, format::CODED_WORD_LIMIT);
    bad_ = size_bad;  // a mask of lane-local failures, folded once in Finish()
    // Words past CODED_WORD_LIMIT can only be padding (checked through the exact size in Finish()).
    max_words_ = size_bad ? 0u : min((bytes - hdr) / 4, format::CODED_WORD_LIMIT);
    const uint32_t* gw = reinterpret_cast<const uint32_t*>(stream + hdr);
    global_words_ = gw;
    if constexpr (STAGE_WORDS)
      for (uint32_t i = lane; i < max_words_; i += 32) temp_.words[i] = __ldg(gw + i);
    const uint32_t used_hdr = tiles_ + (tiles_ + 3) / 4;
    if (!bad_)
      for (uint32_t b = used_hdr + lane; b < hdr; b += 32) bad_ |= stream[b] != 0;
    if (!bad_ && tiles_ % 4 && lane == 0) bad_ |= (stream[tiles_ + tiles_ / 4] >> (2 * (tiles_ % 4))) != 0 ? 1u : 0u;
    __syncwarp();

    final_pair_ = thread::lane_final_pair(elems, lane);
    // Tile anchors and fraction bytes live in lanes; each tile fetches its own with a shuffle.
    const uint32_t frac_bytes = (tiles_ + 3) / 4;
    anchor_lo_ = !size_bad && lane < tiles_ ? stream[lane] : 0u;
    anchor_hi_ = !size_bad && lane + 32 < tiles_ ? stream[lane + 32] : 0u;
    frac_byte_ = !size_bad && lane < frac_bytes ? stream[tiles_ + lane] : 0u;
    base_ = 0;
    hi_ = lo_ = avail_ = 0;
    impossible_ = 0;
    // Symbol of each rank under each of the 4 orders, one rank per lane, one order per byte: the per-tile
    // rank -> exponent table is then two byte operations away.
    rank_syms_ = 0xFFFFFFFFu;
    if (lane < Code::NUM_RANKS) {
      rank_syms_ = 0;
#pragma unroll
      for (uint32_t fo = 0; fo < 4; ++fo) rank_syms_ |= Code::rank_to_symbol(Code::table(fo), lane) << (8 * fo);
    }
    read_planes<D>(planes_, first_tile_, lane_first_, lane_count(0), next_);
  }

  /// Tiles in the chunk begun last.
  ZIPCOMM_DEVICE uint32_t tiles() const { return tiles_; }

  /// Decodes tile t (tiles come in order, 0 first) into x (raw element bits); returns the lane's item count.
  ZIPCOMM_DEVICE uint32_t DecodeTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    return raw_ ? RawTile(t, x) : CodedTile(t, x);
  }

  /// Outcome of the chunk, once every tile was decoded.
  ZIPCOMM_DEVICE Status Finish() {
    const uint32_t lane = lane_id();
    if (!raw_) {
      bad_ |= impossible_ > 0xFFu;
      if (!bad_ && (base_ > max_words_ || format::coded_chunk_bytes(tiles_, base_) != bytes_)) bad_ = 1u;
      for (uint32_t i = base_ + lane; !bad_ && i < max_words_; i += 32) bad_ |= word(i) != 0;
    }
    __syncwarp();
    return __any_sync(FULL_MASK, bad_) ? Status::corrupt_stream : Status::ok;
  }

 private:
  // Warp-wide copy of len bytes between 16-byte aligned addresses: 16-byte vectors, then the byte tail.
  // Four loads in flight per lane before the stores: the copy is latency-bound otherwise.
  ZIPCOMM_DEVICE static void copy_bytes(uint8_t* dst, const uint8_t* src, uint32_t len) {
    const uint32_t lane = lane_id(), vecs = len / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    uint32_t i = lane;
    for (; i + 96 < vecs; i += 128) {
      const uint4 a = __ldg(s + i), b = __ldg(s + i + 32), c = __ldg(s + i + 64), e = __ldg(s + i + 96);
      d[i] = a, d[i + 32] = b, d[i + 64] = c, d[i + 96] = e;
    }
    for (; i < vecs; i += 32) d[i] = __ldg(s + i);
    for (uint32_t b = vecs * 16 + lane; b < len; b += 32) dst[b] = src[b];
  }

  ZIPCOMM_DEVICE uint32_t lane_count(uint32_t tile) const {
    return tile < full_tiles_ ? uint32_t(ITEMS) : thread::lane_valid_count(elems_, tile, lane_id());
  }

  ZIPCOMM_DEVICE uint32_t RawTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t lane = lane_id();
    const uint32_t cnt = thread::lane_valid_count(elems_, t, lane);
    read_planes<D>(planes_, first_tile_ + t, lane_first_ + uint64_t(t) * format::TILE_ELEMS, cnt, x);
    const uint32_t at = (t * format::TILE_ELEMS + lane * ITEMS) * EXP_BITS / 8;
    uint64_t packed = 0;
    if (EXP_BITS == 8) {
      if (at < bytes_) {
        uint2 v = *reinterpret_cast<const uint2*>(stream_ + at);
        packed = uint64_t(v.x) | uint64_t(v.y) << 32;
      }
    } else {
#pragma unroll
      for (uint32_t k = 0; k < EXP_BITS; ++k)
        if (at + k < bytes_) packed |= uint64_t(stream_[at + k]) << (8 * k);
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      uint32_t e = uint32_t(packed >> (EXP_BITS * i)) & ((1u << EXP_BITS) - 1u);
      if (uint32_t(i) < cnt)
        x[i] |= FB::assemble(e, 0, 0);
      else
        bad_ |= e != 0;  // padding must be zero
    }
    return cnt;
  }

  // Lane word i of the chunk: from the staged copy, or from global memory (0 past the chunk's words).
  ZIPCOMM_DEVICE uint32_t word(uint32_t i) const {
    if constexpr (STAGE_WORDS) {
      return temp_.words[min(i, format::CODED_WORD_LIMIT - 1)];
    } else {
      return i < max_words_ ? __ldg(global_words_ + i) : 0u;
    }
  }

  ZIPCOMM_DEVICE bool refill(bool need) {
    const uint32_t mask = __ballot_sync(FULL_MASK, need);
    if (mask) {
      if (need) {
        // An index past the chunk's words reads a stale word; the exact-size check in Finish() rejects
        // such a stream (base > words), so the hot loop needs no bounds branch.
        const uint32_t pos = base_ + __popc(mask & lanemask_lt());
        const uint32_t w = word(pos);
        // avail < 32 here: the word lands right after the valid bits.
        hi_ |= w >> avail_;
        lo_ |= __funnelshift_r(0u, w, avail_);
        avail_ += 32;
      }
      base_ += __popc(mask);
    }
    return mask != 0;
  }
  ZIPCOMM_DEVICE void consume(uint32_t n) {  // n <= 31
    hi_ = __funnelshift_l(lo_, hi_, n);
    lo_ <<= n;
    avail_ -= min(n, avail_);
  }

  ZIPCOMM_DEVICE uint32_t CodedTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t cnt = lane_count(t);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) x[i] = next_[i];
    if (t + 1 < tiles_)  // prefetch: the next tile's planes load while this one decodes
      read_planes<D>(planes_, first_tile_ + t + 1, lane_first_ + uint64_t(t + 1) * format::TILE_ELEMS,
                     lane_count(t + 1), next_);
    const uint32_t a = __shfl_sync(FULL_MASK, t < 32 ? anchor_lo_ : anchor_hi_, t & 31);
    const uint32_t f = (__shfl_sync(FULL_MASK, frac_byte_, t >> 2) >> (2 * (t & 3))) & 3u;

    if (a != 0) {
      // Exponent of each rank for this tile, one rank per lane; 0x100 marks a rank that cannot occur.
      const uint32_t sym = (rank_syms_ >> (8 * f)) & 0xFFu;
      const uint32_t rank_exp = sym == Code::ZERO ? 0u : sym < a ? a - sym : 0x100u;
      const bool tile_lazy =
          __any_sync(FULL_MASK, cnt > 0 && thread::pair_is_lazy(final_pair_, int32_t(4 * t + 3)));
      // Full tiles outside the lazy tail (all but the last two of a chunk) take the fast path: refill
      // greedily, then decode both codewords of a pair from one peek. A pair with an escape falls back
      // to the general per-codeword path, which replays the same refill points.
      const bool fast = !tile_lazy && __all_sync(FULL_MASK, cnt == ITEMS);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        bool general = !fast;
        if (fast) {
          refill(avail_ < 32);
          uint32_t len0, len1;
          const uint32_t r0 = Code::decode_rank(hi_, len0);
          const uint32_t r1 = Code::decode_rank(__funnelshift_l(lo_, hi_, len0), len1);
          const uint32_t e0 = __shfl_sync(FULL_MASK, rank_exp, r0 & 31);
          const uint32_t e1 = __shfl_sync(FULL_MASK, rank_exp, r1 & 31);
          if (__any_sync(FULL_MASK, r0 == Code::ESC_RANK || r1 == Code::ESC_RANK)) {
            general = true;  // nothing consumed yet: the general path redoes this pair
          } else {
            consume(len0 + len1);  // <= 30 bits, and avail >= 32 after the refill
            impossible_ |= e0 | e1;  // bit 8 marks a rank that cannot occur in this tile
            x[2 * p] |= FB::assemble(e0 & 0xFFu, 0, 0);
            x[2 * p + 1] |= FB::assemble(e1 & 0xFFu, 0, 0);
          }
        }
        if (general) {
          const bool pair_refilled = fast;  // the fast path already made this pair's greedy refill
          const bool lazy = thread::pair_is_lazy(final_pair_, int32_t(4 * t + p));
          if (!pair_refilled) refill(thread::need_before_pair(cnt > uint32_t(2 * p), lazy, avail_));
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int v = 2 * p + j;
            const bool valid = cnt > uint32_t(v);
            uint32_t len;
            uint32_t rank = Code::decode_rank(hi_, len);
            if (tile_lazy) {
              const bool need = thread::need_before_code(valid, lazy, len, avail_);
              if (refill(need) && need) rank = Code::decode_rank(hi_, len);
            }
            const bool esc = valid && rank == Code::ESC_RANK;
            uint32_t e = __shfl_sync(FULL_MASK, rank_exp, rank & 31);
            if (valid) {
              bad_ |= len > avail_;
              consume(len);
            }
            if (__any_sync(FULL_MASK, esc)) {
              refill(thread::need_for_escape(esc, lazy, avail_, EXP_BITS));
              if (esc) {
                bad_ |= avail_ < EXP_BITS;
                e = hi_ >> (32 - EXP_BITS);
                consume(EXP_BITS);
                bad_ |= !thread::escape_valid<Code>(e, a);
              }
            }
            if (!valid) e = 0;
            bad_ |= e > 0xFFu;
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
    if ((mag >> FB::MANT_BITS) != a || thread::fraction_of<D>(mag) != f) bad_ = 1u;
    return cnt;
  }

 private:
  TempStorage& temp_;
  const uint8_t* stream_ = nullptr;
  const uint32_t* global_words_ = nullptr;
  ConstPlanes planes_{};
  uint64_t first_tile_ = 0, lane_first_ = 0;
  uint32_t bytes_ = 0, elems_ = 0, tiles_ = 0, full_tiles_ = 0, max_words_ = 0;
  bool raw_ = false;
  uint32_t bad_ = 0, impossible_ = 0;
  int32_t final_pair_ = 0;
  uint32_t anchor_lo_ = 0, anchor_hi_ = 0, frac_byte_ = 0, rank_syms_ = 0;
  uint32_t base_ = 0, hi_ = 0, lo_ = 0, avail_ = 0;  // bit buffer, MSB first: avail_ valid bits
  uint32_t next_[ITEMS] = {};                        // the next tile's planes (prefetched)
};

}  // namespace warp
}  // namespace zipcomm
