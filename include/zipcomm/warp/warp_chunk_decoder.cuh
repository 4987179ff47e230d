// Warp level: decode one chunk stream back into elements, tile by tile, handing each lane's 8 items to a
// caller-supplied sink (store, reduce, forward: the fused primitives are sinks).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/chunk_check.hpp"
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
/// and fraction, every escape for canonical form, the word count against the stream size and every bit a lane
/// fetched and did not read for zero, so a corrupt or truncated stream yields Status::corrupt_stream; the
/// elements decoded are then checked against the chunk's stored check (thread::ChunkCheck), which gives
/// Status::checksum_mismatch. Nothing is read outside [stream, stream + bytes).
///
/// Two ways to drive it:
/// \code
/// using Dec = zipcomm::warp::WarpChunkDecoder<zipcomm::DType::bf16>;
/// __shared__ Dec::TempStorage temp[WARPS];
/// // push: the decoder hands every tile to a sink
/// auto sink = [&](uint32_t tile, const uint32_t (&x)[8], uint32_t count) { /* lane's items */ };
/// zipcomm::Status s = Dec(temp[warp]).Decode(chunk, chunk_bytes, elems, first_tile, planes, check, sink);
/// // pull: the caller asks for tiles in order (what an encoder's loader does in decode + reduce + encode)
/// Dec dec(temp[warp]);
/// dec.Begin(chunk, chunk_bytes, elems, first_tile, planes, check);
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
  // The Gaussian code has a branch-free fast path for whole tiles (FastTile).
  static constexpr bool FAST_TILES = std::is_same<Code, thread::GaussianCode>::value;
  // Lane of the per-tile exponent table that holds rank r. The fast path indexes the table by a value it gets
  // in fewer instructions than the rank: '0s' -> 0,1; '10s' -> 4,5; o >= 2 ones then '0' -> o + 4 (= rank
  // + 2); o >= 15 ones (the escape) -> lane 19. Lanes 2, 3 and 20.. are never indexed.
  static constexpr uint32_t ESC_LANE = 19;
  // The per-tile table holds each rank's exponent already in place (FB::assemble), so a lane ORs it into its
  // element; two flag bits outside the exponent field mark a rank that cannot occur and the escape lane.
  static constexpr uint32_t EXP_FIELD = FB::assemble((1u << EXP_BITS) - 1u, 0, 0);
  static constexpr uint32_t FLAG_IMPOSSIBLE = (EXP_FIELD >> 16) != 0 ? 1u : 1u << 16;
  static constexpr uint32_t FLAG_ESC = FLAG_IMPOSSIBLE << 1;
  static_assert((EXP_FIELD & (FLAG_IMPOSSIBLE | FLAG_ESC)) == 0, "flags must lie outside the exponent field");
  ZIPCOMM_DEVICE static uint32_t lane_of_rank(uint32_t r) { return FAST_TILES && r >= 2 ? r + 2 : r; }

 public:
  struct TempStorage {
    uint32_t words[STAGE_WORDS ? format::CODED_WORD_LIMIT : 4];
  };

  ZIPCOMM_DEVICE explicit WarpChunkDecoder(TempStorage& temp) : temp_(temp) {}

  template <class Sink>
  ZIPCOMM_DEVICE Status Decode(const uint8_t* stream, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                               const ConstPlanes& planes, uint32_t check, Sink& sink) {
    Begin(stream, bytes, elems, first_tile, planes, check);
    for (uint32_t t = 0; t < tiles_; ++t) {
      uint32_t x[ITEMS];
      const uint32_t cnt = DecodeTile(t, x);
      sink(t, x, cnt);
    }
    return Finish();
  }

  /// Starts chunk `stream` (16-byte aligned, `bytes` long) of `elems` elements whose first tile has global
  /// index first_tile; `check` is the chunk's stored check. With `forward`, the chunk's exponent stream and
  /// its share of the planes are also copied, unchanged, to the forward stream (decode + forward).
  ZIPCOMM_DEVICE void Begin(const uint8_t* stream, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                            const ConstPlanes& planes, uint32_t check, const ChunkForward* forward = nullptr) {
    const uint32_t lane = lane_id();
    expected_check_ = check;
    check_acc_ = thread::ChunkCheck::lane_seed(lane);
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
    if constexpr (STAGE_WORDS) {
      smem_words_ = static_cast<uint32_t>(__cvta_generic_to_shared(temp_.words));
      if (reinterpret_cast<uintptr_t>(stream) % 16 == 0) {
        // 16-byte loads of the chunk from its (aligned) start, two in flight per lane: the staging is a chain of
        // memory round trips, and this cuts their number 4x against 4-byte loads (deeper costs registers that
        // the decode loop's occupancy needs). Bytes of the header and past the words are dropped.
        constexpr uint32_t DEPTH = 2;
        const uint4* v = reinterpret_cast<const uint4*>(stream);
        // No words (a bad size among them): no loads, the header may lie past the stream's end.
        const uint32_t v_end = max_words_ ? (hdr + 4 * max_words_ + 15) / 16 : 0u, hdr_words = hdr / 4;
        for (uint32_t m = hdr / 16 + lane; m < v_end; m += 32 * DEPTH) {
          uint4 q[DEPTH];
#pragma unroll
          for (uint32_t k = 0; k < DEPTH; ++k)
            if (m + 32 * k < v_end) q[k] = __ldg(v + m + 32 * k);
#pragma unroll
          for (uint32_t k = 0; k < DEPTH; ++k) {
            const uint32_t w[4] = {q[k].x, q[k].y, q[k].z, q[k].w};
#pragma unroll
            for (uint32_t c = 0; c < 4; ++c) {
              const uint32_t i = 4 * (m + 32 * k) + c - hdr_words;  // wraps (huge) for header words
              if (m + 32 * k < v_end && i < max_words_) temp_.words[i] = w[c];
            }
          }
        }
      } else {
        for (uint32_t i = lane; i < max_words_; i += 32) temp_.words[i] = __ldg(gw + i);
      }
    }
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
    // 0xFF: a lane no rank maps to; 0xFE: the fast path's escape lane.
    rank_syms_ = FAST_TILES && lane == ESC_LANE ? 0xFEFEFEFEu : 0xFFFFFFFFu;
    const uint32_t lane_rank = FAST_TILES && lane >= 2 ? lane - 2 : lane;
    if (lane_of_rank(lane_rank) == lane && lane_rank < Code::NUM_RANKS) {
      rank_syms_ = 0;
#pragma unroll
      for (uint32_t fo = 0; fo < 4; ++fo)
        rank_syms_ |= Code::rank_to_symbol(Code::table(fo), lane_rank) << (8 * fo);
    }
    // Tiles [0, fast_tiles_) are full in every lane and end before any lane's lazy tail: there every pair
    // refills greedily, which FastTile relies on. A lane's first tile with a lazy pair: see pair_is_lazy.
    {
      const int32_t fp = final_pair_;
      const uint32_t first_lazy =
          fp < 0 ? 0u : fp < 3 + thread::LAZY_PAIRS ? 0u : uint32_t(fp - 3 - thread::LAZY_PAIRS) / 4 + 1;
      fast_tiles_ = FAST_TILES && !size_bad ? min(full_tiles_, __reduce_min_sync(FULL_MASK, first_lazy)) : 0u;
    }
    next_ = load_planes<D>(planes_, first_tile_, lane_first_, lane_count(0));
  }

  /// Tiles in the chunk begun last.
  ZIPCOMM_DEVICE uint32_t tiles() const { return tiles_; }

  /// Decodes tile t (tiles come in order, 0 first) into x (raw element bits); returns the lane's item count.
  ZIPCOMM_DEVICE uint32_t DecodeTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t cnt = raw_ ? RawTile(t, x) : CodedTile(t, x);
    check_acc_ = thread::ChunkCheck::add_items<D>(check_acc_, x, cnt);
    return cnt;
  }

  /// Outcome of the chunk, once every tile was decoded.
  ZIPCOMM_DEVICE Status Finish() {
    const uint32_t lane = lane_id();
    if (!raw_) {
      bad_ |= impossible_ != 0;
      if (!bad_ && (base_ > max_words_ || format::coded_chunk_bytes(tiles_, base_) != bytes_)) bad_ = 1u;
      for (uint32_t i = base_ + lane; !bad_ && i < max_words_; i += 32) bad_ |= word(i) != 0;
      bad_ |= (hi_ | lo_) != 0;  // fetched, never read: the tail of the lane's last word, rare whole words
    }
    __syncwarp();
    if (__any_sync(FULL_MASK, bad_)) return Status::corrupt_stream;
    const uint32_t check = __reduce_add_sync(FULL_MASK, thread::ChunkCheck::lane_final(check_acc_));
    return check == expected_check_ ? Status::ok : Status::checksum_mismatch;
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
    const LanePlanes<D> planes =
        load_planes<D>(planes_, first_tile_ + t, lane_first_ + uint64_t(t) * format::TILE_ELEMS, cnt);
    check_unused_plane_bits(planes, cnt);
    unpack_planes<D>(planes, x);
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

  // fp16's bit-planes hold a bit for every position of a tile: those of positions past the stream's end are
  // zero (the other dtypes load no byte past the end).
  ZIPCOMM_DEVICE void check_unused_plane_bits(const LanePlanes<D>& planes, uint32_t cnt) {
    if constexpr (D == DType::fp16) {
      const uint32_t unused = (0xFFu << cnt) & 0xFFu;
      bad_ |= (planes.p1[0] & (unused | unused << 8 | unused << 16)) != 0;
    }
  }

  // Lane word i of the chunk: from the staged copy, or from global memory (0 past the chunk's words).
  ZIPCOMM_DEVICE uint32_t word(uint32_t i) const {
    if constexpr (STAGE_WORDS) {
      // Through the shared window address kept from Begin (the compiler would otherwise rebuild it per read).
      uint32_t w;
      asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w) : "r"(smem_words_ + 4 * min(i, format::CODED_WORD_LIMIT - 1)));
      return w;
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

  // Lane of the exponent table for the Gaussian codeword at the top of peek, and its length (see lane_of_rank).
  ZIPCOMM_DEVICE static uint32_t fast_lane(uint32_t peek, uint32_t& len) {
    uint32_t ones;  // leading ones; 0xFFFFFFFF for 32 of them
    asm("bfind.shiftamt.u32 %0, %1;" : "=r"(ones) : "r"(~peek));
    ones = min(ones, Code::ESC_LEN);
    const bool small = ones < 2;
    len = ones + (small ? 2u : 1u);
    return small ? __funnelshift_r(peek, 0u, 30 - ones) : ones + 4;  // small: the codeword's 2 or 3 bits
  }

  // One full, greedy tile without branches: 4 x (refill, two codewords). Every lane stays in step; escapes
  // are not decoded here: if a lane met one, nothing is kept (false) and the general path decodes the tile.
  ZIPCOMM_DEVICE bool FastTile(uint32_t rank_exp, uint32_t (&exps)[ITEMS]) {
    uint32_t hi = hi_, lo = lo_, avail = avail_, base = base_, seen = 0;
    uint32_t e[ITEMS];
    const uint32_t lt = lanemask_lt();
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const bool need = avail < 32;
      const uint32_t mask = __ballot_sync(FULL_MASK, need);
      const uint32_t pos = base + __popc(mask & lt);
      // Staged words: every lane loads (no branch) and keeps the word only where it needs one.
      uint32_t w = 0;
      if constexpr (STAGE_WORDS) {
        const uint32_t loaded = word(pos);
        w = need ? loaded : 0u;
      } else if (need) {
        w = word(pos);
      }
      hi |= __funnelshift_r(w, 0u, avail);  // w = 0 where avail >= 32
      lo |= __funnelshift_r(0u, w, avail);
      avail |= 32u;  // avail + 32 where avail < 32; avail <= 63 anyway
      base += __popc(mask);
      uint32_t len0, len1;
      const uint32_t l0 = fast_lane(hi, len0);
      const uint32_t l1 = fast_lane(__funnelshift_l(lo, hi, len0), len1);
      e[2 * p] = __shfl_sync(FULL_MASK, rank_exp, l0);  // l0, l1 <= 19
      e[2 * p + 1] = __shfl_sync(FULL_MASK, rank_exp, l1);
      seen |= e[2 * p] | e[2 * p + 1];
      // <= 30 bits without an escape, and avail >= 32 after the refill.
      const uint32_t n = len0 + len1;
      hi = __funnelshift_l(lo, hi, n);
      lo = __funnelshift_l(0u, lo, n);
      avail -= n;
    }
    if (__any_sync(FULL_MASK, seen & FLAG_ESC)) return false;
    hi_ = hi, lo_ = lo, avail_ = avail, base_ = base;
    impossible_ |= seen & FLAG_IMPOSSIBLE;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) exps[i] = e[i] & EXP_FIELD;
    return true;
  }

  // Any tile, codeword by codeword: partial tiles, the lazy tail, escapes.
  ZIPCOMM_DEVICE void GeneralTile(uint32_t t, uint32_t cnt, uint32_t a, uint32_t rank_exp,
                                  uint32_t (&exps)[ITEMS]) {
    const bool tile_lazy =
        __any_sync(FULL_MASK, cnt > 0 && thread::pair_is_lazy(final_pair_, int32_t(4 * t + 3)));
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const bool lazy = thread::pair_is_lazy(final_pair_, int32_t(4 * t + p));
      refill(thread::need_before_pair(cnt > uint32_t(2 * p), lazy, avail_));
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
        uint32_t e = __shfl_sync(FULL_MASK, rank_exp, lane_of_rank(rank) & 31);
        if (valid) {
          bad_ |= len > avail_;
          consume(len);
        }
        if (__any_sync(FULL_MASK, esc)) {
          refill(thread::need_for_escape(esc, lazy, avail_, EXP_BITS));
          if (esc) {
            bad_ |= avail_ < EXP_BITS;
            const uint32_t raw = hi_ >> (32 - EXP_BITS);
            consume(EXP_BITS);
            bad_ |= !thread::escape_valid<Code>(raw, a);
            e = FB::assemble(raw, 0, 0);
          }
        }
        if (!valid) e = 0;
        bad_ |= (e & (FLAG_IMPOSSIBLE | FLAG_ESC)) != 0;
        exps[v] = e & EXP_FIELD;
      }
    }
  }

  ZIPCOMM_DEVICE uint32_t CodedTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t cnt = lane_count(t);
    const LanePlanes<D> planes = next_;
    if (t + 1 < tiles_)  // prefetch: the next tile's planes load while this one decodes
      next_ = load_planes<D>(planes_, first_tile_ + t + 1, lane_first_ + uint64_t(t + 1) * format::TILE_ELEMS,
                             lane_count(t + 1));
    const uint32_t a = __shfl_sync(FULL_MASK, t < 32 ? anchor_lo_ : anchor_hi_, t & 31);
    const uint32_t f = (__shfl_sync(FULL_MASK, frac_byte_, t >> 2) >> (2 * (t & 3))) & 3u;

    uint32_t exps[ITEMS] = {};  // the items' exponent fields; all zero in a tile anchored at 0
    if (a != 0) {
      // Exponent of each rank for this tile (in place, see EXP_FIELD), one rank per lane.
      const uint32_t sym = (rank_syms_ >> (8 * f)) & 0xFFu;
      const uint32_t rank_exp = sym == 0xFEu         ? FLAG_ESC
                                : sym == Code::ZERO ? 0u
                                : sym < a           ? FB::assemble(a - sym, 0, 0)
                                                    : FLAG_IMPOSSIBLE;
      // Full tiles outside the lazy tail (all but the last two of a chunk) take the fast path; a tile where it
      // met an escape is decoded again on the general path, from the same state.
      if (!(FAST_TILES && t < fast_tiles_ && FastTile(rank_exp, exps))) GeneralTile(t, cnt, a, rank_exp, exps);
    }
    if (cnt < ITEMS) check_unused_plane_bits(planes, cnt);
    unpack_planes<D>(planes, x);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) x[i] |= exps[i];
    // The stored anchor and fraction must describe the decoded tile.
    uint32_t mag = 0;
    if (cnt == ITEMS) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) mag = max(mag, FB::magnitude(x[i]));
    } else {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < cnt) mag = max(mag, FB::magnitude(x[i]));
    }
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
  uint32_t bytes_ = 0, elems_ = 0, tiles_ = 0, full_tiles_ = 0, fast_tiles_ = 0, max_words_ = 0;
  bool raw_ = false;
  uint32_t bad_ = 0, impossible_ = 0;
  uint32_t check_acc_ = 0, expected_check_ = 0;  // this lane's ChunkCheck word; the chunk's stored check
  int32_t final_pair_ = 0;
  uint32_t anchor_lo_ = 0, anchor_hi_ = 0, frac_byte_ = 0, rank_syms_ = 0;
  uint32_t smem_words_ = 0;                          // shared-window address of temp_.words
  uint32_t base_ = 0, hi_ = 0, lo_ = 0, avail_ = 0;  // bit buffer, MSB first: avail_ valid bits
  LanePlanes<D> next_{};                             // the next tile's planes (prefetched)
};

}  // namespace warp
}  // namespace zipcomm
