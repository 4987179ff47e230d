// Warp level: decode one chunk stream back into elements, tile by tile, handing each lane's 8 items to a
// caller-supplied sink (store, reduce, forward: the fused primitives are sinks).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/chunk_check.hpp"
#include "../thread/fixed_code.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/float_bits.hpp"
#include "fixed_code_lanes.cuh"
#include "lane_io.cuh"
#include "pair_code_lanes.cuh"
#include "pair_tables.cuh"

namespace zipcomm {
namespace warp {
/// Where decode + forward copies a chunk: its exponent stream (16-byte aligned; nullptr: not copied) and
/// its raw bits, into the forward stream's plane 0, width codes and the chunk's low part (plane0 nullptr: not
/// copied).
struct ChunkForward {
  uint8_t* chunk = nullptr;
  Planes planes{nullptr, nullptr, nullptr, false};
};

/// \brief Decodes one chunk; all 32 lanes of the warp call every member together.
///
/// Pair code: each lane reads its own stream (through L1) and decodes two items per lookup in the block's shared
/// decode table (PairCodeReader). Fixed code (thread::FixedCode, no table): each lane takes its 24-bit field from the tile's code
/// words and the exceptions its codes mark from the list, placed by a warp scan (FixedCodeReader). Every tile is
/// checked against its anchor (and fraction), every code and escape for canonical form, every lane's word count
/// against what it decoded and every bit after its last codeword for zero, so a corrupt or truncated stream
/// yields Status::corrupt_stream; the elements decoded are then checked against the chunk's
/// stored check (thread::ChunkCheck), which gives Status::checksum_mismatch. Nothing is read outside
/// [stream, stream + bytes).
///
/// Two ways to drive it:
/// \code
/// using Dec = zipcomm::warp::WarpChunkDecoder<zipcomm::DType::bf16>;
/// __shared__ zipcomm::warp::PairDecodeTable table;   // 64 KB, one per block (dynamic shared memory)
/// zipcomm::warp::LoadPairTable(table, cta);
/// // push: the decoder hands every tile to a sink
/// auto sink = [&](uint32_t tile, const uint32_t (&x)[8], uint32_t count) { /* lane's items */ };
/// zipcomm::Status s = Dec(table).Decode(chunk, chunk_bytes, elems, first_tile, planes, check, sink);
/// // pull: the caller asks for tiles in order (what an encoder's loader does in decode + reduce + encode)
/// Dec dec(table);
/// dec.Begin(chunk, chunk_bytes, elems, first_tile, planes, check);
/// for (uint32_t t = 0; t < dec.tiles(); ++t) { uint32_t x[8]; uint32_t count = dec.DecodeTile(t, x); ... }
/// zipcomm::Status s = dec.Finish();
/// \endcode
/// Every lane sees every tile in order (count = 0 for lanes with no item in the tile), even after an error
/// was found (then with unspecified values), so the warp stays converged. Begin(..., forward) also copies the
/// chunk's exponent stream and its share of the planes unchanged to `forward` (decode + forward), with
/// 16-byte vectors; DRAM sees those bytes once, the decoder's own reads of them hit L1/L2.
template <DType D, class Code = thread::PairCode>
class WarpChunkDecoder {
  using FB = thread::FloatBits<D>;
  static constexpr uint32_t EXP_BITS = FB::EXP_BITS;
  // Full tiles decode two elements per word: the decode entry's d fields sit where a bf16 pair's exponents sit
  // (fp16: 3 bits lower), and a plane byte is the sign and top mantissa bits of one element, so a pair assembles
  // in a few instructions (fp32: the pair's upper halves, which are bf16 patterns; the low halves join them after;
  // fp32 decode 1,301-1,314 -> 1,517-1,540 GB/s, H100).
  static constexpr bool PACKED = D == DType::bf16 || D == DType::fp16 || D == DType::fp32;
  static constexpr DType HALF = packed_half<D>;
  static constexpr uint32_t PACKED_SHIFT = PACKED ? thread::FloatBits<HALF>::MANT_BITS - 7 : 0;  // bf16 0, fp16 3
  // fp8 full tiles decode into the lane's two words: four elements per word, plane 0 by a bit transpose.
  static constexpr bool BYTES = is_fp8(D);
  static constexpr uint32_t PLANES_AHEAD = 4;  // bf16 decode 981 -> 1,020 GB/s (H100); 8 ahead: 908
  // Bytes from one tile's plane 0 to the next at a lane's place in it.
  static constexpr uint32_t PLANE_TILE_BYTES = BYTES ? format::plane0_tile_bytes(D) : format::TILE_ELEMS;
  static constexpr bool FIXED = Code::ID == CodeId::fixed;
  using FC = thread::FixedCode;

 public:
  ZIPCOMM_DEVICE explicit WarpChunkDecoder(const typename TablesOf<Code>::Decode& table)
      : pair_(static_cast<uint32_t>(__cvta_generic_to_shared(&table))) {}

  template <class Sink>
  ZIPCOMM_DEVICE Status Decode(const uint8_t* stream, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                               const ConstPlanes& planes, uint32_t check, Sink& sink) {
    Begin(stream, bytes, elems, first_tile, planes, check);
    uint32_t t = 0;
    // The fast tiles in a loop of their own: the sink sees a constant count (one vector store).
    for (; t < fast_tiles(); ++t) {
      uint32_t x[ITEMS];
      DecodeFastTile(t, x);
      sink(t, x, uint32_t(ITEMS));
    }
    for (; t < tiles_; ++t) {
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
    plane0_ = planes.plane0;
    low_ = planes.low;
    full_tiles_ = elems / format::TILE_ELEMS;
    lane_first_ = first_tile * format::TILE_ELEMS + lane * ITEMS;
    const uint32_t raw_bytes = format::raw_chunk_bytes(D, elems);
    raw_ = bytes == raw_bytes;
    bad_ = 0;
    low_cursor_ = LowCursor{};
    if constexpr (format::has_low(D)) BeginLow(planes);
    if (forward != nullptr) {
      if (forward->chunk != nullptr && bytes % 16 == 0) copy_bytes(forward->chunk, stream, bytes);
      const uint64_t first_elem = first_tile * format::TILE_ELEMS;
      if (forward->planes.plane0 != nullptr) {
        const uint64_t at = format::plane0_bytes(D, first_elem);
        copy_bytes(forward->planes.plane0 + at, planes.plane0 + at, uint32_t(format::plane0_bytes(D, elems)));
        if constexpr (format::has_low(D)) {
          if (lane == 0) store_low_codes(forward->planes.widths, first_tile, tiles_, low_cursor_.codes);
          if (!bad_) copy_bytes(forward->planes.low, planes.low, planes.low_bytes);
        }
      }
    }
    tile_af_ = 0;
    plane_at_ = planes.plane0 + (BYTES ? lane_plane0_bits_at<D>(lane_first_) : lane_first_) + PLANE_TILE_BYTES;
    if constexpr (FIXED) {
      if (!raw_) tile_af_ = fixed_.Begin(stream, bytes, raw_bytes, tiles_, EXP_BITS, detail::ZERO_WORD, bad_);
    } else if (!raw_) {
      tile_af_ = pair_.Begin(stream, bytes, raw_bytes, tiles_, bad_);
    }
    next_ = LoadPlanes(0);
  }

  /// Tiles in the chunk begun last.
  ZIPCOMM_DEVICE uint32_t tiles() const { return tiles_; }
  /// Its first tiles that DecodeFastTile may decode (the full tiles of a coded chunk; else 0).
  ZIPCOMM_DEVICE uint32_t fast_tiles() const { return (PACKED || BYTES) && !raw_ ? full_tiles_ : 0u; }
  /// DecodeFastTile with the items two per word, the first in the low half (16-bit dtypes).
  ZIPCOMM_DEVICE void DecodeFastWords(uint32_t t, uint32_t (&w)[ITEMS / 2]) {
    static_assert(PACKED && D != DType::fp32, "two items per word: 16-bit dtypes");
    FullTilePacked(t, w);
  }
  /// DecodeTile for t < fast_tiles(): 8 items.
  ZIPCOMM_DEVICE void DecodeFastTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    if constexpr (D == DType::fp32) {
      uint32_t w[ITEMS / 2], low_halves[ITEMS / 2];
#pragma unroll
      for (int p = 0; p < ITEMS / 2; ++p) low_halves[p] = next_.low[p];  // before next_ takes tile t + 1
      FullTilePacked(t, w);
#pragma unroll
      for (int p = 0; p < ITEMS / 2; ++p)
        x[2 * p] = prmt(low_halves[p], w[p], 0x5410u), x[2 * p + 1] = prmt(low_halves[p], w[p], 0x7632u);
      check_acc_ = thread::ChunkCheck::add_items<D>(check_acc_, x, ITEMS);
    } else if constexpr (PACKED) {
      uint32_t w[ITEMS / 2];
      FullTilePacked(t, w);
      unpack_words(w, x);
    } else if constexpr (BYTES) {
      uint32_t lo, hi;
      FullTileBytes(t, lo, hi);
      unpack_bytes(lo, hi, x);
    }
  }

  /// Decodes tile t (tiles come in order, 0 first) into x (raw element bits); returns the lane's item count.
  ZIPCOMM_DEVICE uint32_t DecodeTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    if (t < fast_tiles()) {
      DecodeFastTile(t, x);
      return ITEMS;
    }
    const uint32_t cnt = raw_ ? RawTile(t, x) : CodedTile(t, x);
    check_acc_ = thread::ChunkCheck::add_items<D>(check_acc_, x, cnt);
    return cnt;
  }

  /// Outcome of the chunk, once every tile was decoded.
  ZIPCOMM_DEVICE Status Finish() {
    if constexpr (FIXED) {
      if (!raw_) fixed_.Finish(elems_, bad_);
    } else if (!raw_ && !bad_) {
      pair_.Finish(bad_);
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
    return tile < full_tiles_ ? uint32_t(ITEMS) : format::lane_valid_count(elems_, tile, lane_id());
  }

  // The chunk's width codes, checked: each valid, and the tiles' low parts exactly fill the chunk's low part.
  // Otherwise no low bit is read (the chunk is corrupt).
  ZIPCOMM_DEVICE void BeginLow(const ConstPlanes& planes) {
    const uint32_t lane = lane_id();
    low_cursor_ = load_low_codes(planes.widths, first_tile_, tiles_);
    uint32_t bytes = 0, bad_code = 0;
#pragma unroll
    for (uint32_t k = lane; k < 64; k += 32) {
      if (k >= tiles_) continue;
      const uint32_t code = low_cursor_.code(k);
      bad_code |= code >= format::low_code_count(D);
      bytes += format::low_tile_bytes(D, code, format::tile_valid_count(elems_, k));
    }
    const uint32_t total = __reduce_add_sync(FULL_MASK, bytes);
    low_empty_ = total == 0;
    if (__any_sync(FULL_MASK, bad_code) || total != planes.low_bytes) {
      bad_ = 1u;
      const uint32_t none = format::low_none_code(D) * 0x55555555u;
      low_cursor_.codes[0] = low_cursor_.codes[1] = low_cursor_.codes[2] = low_cursor_.codes[3] = none;
    }
  }

  // Loads tile t's raw bits (tiles in order): its low part follows the previous tile's.
  ZIPCOMM_DEVICE LanePlanes<D> LoadPlanes(uint32_t t) {
    const uint32_t code = low_cursor_.code(t), valid = format::tile_valid_count(elems_, t);
    const LanePlanes<D> r = load_planes<D>(plane0_, low_ + low_cursor_.at, code, valid,
                                           lane_first_ + uint64_t(t) * format::TILE_ELEMS, lane_count(t), bad_);
    low_cursor_.at += format::low_tile_bytes(D, code, valid);
    return r;
  }

  ZIPCOMM_DEVICE uint32_t RawTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t lane = lane_id();
    const uint32_t cnt = format::lane_valid_count(elems_, t, lane);
    const LanePlanes<D> planes = next_;
    if (t + 1 < tiles_) next_ = LoadPlanes(t + 1);
    unpack_planes<D>(planes, x);
    const uint32_t at = (t * format::TILE_ELEMS + lane * ITEMS) * EXP_BITS / 8;
    uint64_t packed = 0;
    if (EXP_BITS == 8) {
      if (at < bytes_) {
        uint2 v = *reinterpret_cast<const uint2*>(stream_ + at);
        packed = uint64_t(v.x) | uint64_t(v.y) << 32;
      }
    } else if (EXP_BITS == 4) {  // a lane's 32 bits, 4-byte aligned; the chunk is a 16-byte multiple
      if (at < bytes_) packed = *reinterpret_cast<const uint32_t*>(stream_ + at);
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

  // a << 2 | f of tile t (the same in every lane).
  ZIPCOMM_DEVICE uint32_t AnchorFraction(uint32_t t) const {
    return (__shfl_sync(FULL_MASK, tile_af_, t & 31) >> ((t & 32) >> 1)) & 0x3FFu;
  }
  ZIPCOMM_DEVICE static void unpack_words(const uint32_t (&w)[ITEMS / 2], uint32_t (&x)[ITEMS]) {
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) x[2 * p] = w[p] & 0xFFFFu, x[2 * p + 1] = w[p] >> 16;
  }

  // A full tile into w (element 2p in the low half of w[p]; fp32: their upper halves); the tile's anchor and
  // fraction checked on the packed words, the chunk check too (16-bit dtypes).
  ZIPCOMM_DEVICE void FullTilePacked(uint32_t t, uint32_t (&w)[ITEMS / 2]) {
    const LanePlanes<D>& planes = next_;  // loaded while the previous tile decoded
    const uint32_t af = AnchorFraction(t), a = af >> 2, f = af & 3u;
    uint32_t e[ITEMS / 2] = {};
    if constexpr (FIXED) {
      fixed_.Exponents(t, a, ITEMS, e, bad_);
#pragma unroll
      for (int p = 0; p < ITEMS / 2; ++p) e[p] <<= PACKED_SHIFT;
    } else if (a != 0) {
      pair_.FullTileExponents(
          a, f, e, [](uint32_t fields) { return fields << PACKED_SHIFT; },
          [](uint32_t e0, uint32_t e1) { return packed_pair<D>(e0, e1); }, bad_);
    }
    // Plane bytes 2p and 2p + 1 each fill both bytes of a half: its top bit is the sign, its low 7 bits the top
    // of the mantissa.
    const uint2 p0 = planes.p0;
    const uint32_t spread[ITEMS / 2] = {prmt(p0.x, 0u, 0x1100u), prmt(p0.x, 0u, 0x3322u), prmt(p0.y, 0u, 0x1100u),
                                        prmt(p0.y, 0u, 0x3322u)};
    uint32_t low[ITEMS / 2] = {};
    if constexpr (D == DType::fp16) {
      if (planes.low[0] != 0) {  // the tile's three low bit-planes (zero at the narrow width)
        uint32_t lo, hi;         // the items' low bits, a byte each
        thread::bit_planes_to_bytes<3>(planes.low[0], lo, hi);
        low[0] = prmt(lo, 0u, 0x4140u), low[1] = prmt(lo, 0u, 0x4342u);  // two items a word, a half each
        low[2] = prmt(hi, 0u, 0x4140u), low[3] = prmt(hi, 0u, 0x4342u);
      }
    }
    uint32_t mag = 0;
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) {
      const uint32_t m = (spread[p] & 0x007F007Fu) << PACKED_SHIFT | e[p] | low[p];
      w[p] = (spread[p] & 0x80008000u) | m;
      mag = __vmaxu2(mag, m);
      if constexpr (D != DType::fp32) check_acc_ = thread::ChunkCheck::round(check_acc_, w[p]);
    }
    // The planes of tile t + PLANES_AHEAD go to L1 now (the load below waits for the latest word load too).
    const uint8_t* next_at = plane_at_;  // tile t + 1's (full tiles come in order)
    plane_at_ += PLANE_TILE_BYTES;
    if (t + PLANES_AHEAD < full_tiles_) prefetch_l1(next_at + (PLANES_AHEAD - 1) * PLANE_TILE_BYTES);
    // The next tile's planes load into the registers just read: loaded earlier, they would need a copy at the
    // end of the tile, which waits for the load. A chunk with no low bits (bf16 values in fp16 or fp32) takes
    // plane 0 alone, as bf16 does.
    if ((!format::has_low(D) || low_empty_) && t + 1 < full_tiles_)
      next_.p0 = __ldg(reinterpret_cast<const uint2*>(next_at));
    else if (t + 1 < tiles_)
      next_ = LoadPlanes(t + 1);
    mag = __reduce_max_sync(FULL_MASK, max(mag & 0xFFFFu, mag >> 16));
    // The stored anchor and fraction must describe the decoded tile: its largest magnitude's exponent and top
    // two mantissa bits.
    if (AnchorFractionOf(mag, thread::FloatBits<HALF>::MANT_BITS) != af) bad_ = 1u;
  }

  // A full fp8 tile into lo (items 0-3, the first in the low byte) and hi (items 4-7); anchor, fraction and the
  // chunk check on those words.
  ZIPCOMM_DEVICE void FullTileBytes(uint32_t t, uint32_t& lo, uint32_t& hi) {
    constexpr uint32_t MANT = FB::MANT_BITS, ONES = 0x01010101u;
    const uint32_t planes = next_.p0.x;  // loaded while the previous tile decoded
    const uint32_t af = AnchorFraction(t), a = af >> 2, f = af & 3u;
    uint32_t e[ITEMS / 2] = {};  // pair p's exponents in place: item 2p's in byte 0, item 2p + 1's in byte 2
    if constexpr (FIXED) {
      fixed_.Exponents(t, a, ITEMS, e, bad_);
#pragma unroll
      for (int p = 0; p < ITEMS / 2; ++p) e[p] >>= 7 - MANT;
    } else if (a != 0) {
      pair_.FullTileExponents(
          a, f, e, [](uint32_t fields) { return fields >> (7 - MANT); },
          [](uint32_t e0, uint32_t e1) { return e0 | e1 << 16; }, bad_);
    }
    uint32_t v[2];
    thread::bit_planes_to_bytes<format::plane0_planes(D)>(planes, v[0], v[1]);
    uint32_t w[2], mag2 = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      // v = sign << MANT | mantissa: the sign to bit 7, the exponents between.
      w[k] = ((v[k] << (7 - MANT)) & 0x80808080u) | (v[k] & ((1u << MANT) - 1u) * ONES) |
             prmt(e[2 * k], e[2 * k + 1], 0x6420u);
      mag2 = __vmaxu2(mag2, byte_magnitudes_max2(w[k]));
      check_acc_ = thread::ChunkCheck::round(check_acc_, w[k]);
    }
    lo = w[0], hi = w[1];
    const uint8_t* at = plane_at_;  // tile t + 1's, as in FullTilePacked
    plane_at_ += PLANE_TILE_BYTES;
    if (t + PLANES_AHEAD < full_tiles_) prefetch_l1(at + (PLANES_AHEAD - 1) * PLANE_TILE_BYTES);
    if (t + 1 < full_tiles_) {  // into the register just read, as in FullTilePacked
      uint32_t bits = 0;
#pragma unroll
      for (uint32_t j = 0; j < format::plane0_planes(D); ++j)
        bits |= uint32_t(__ldg(at + j * format::LANES)) << (8 * j);
      next_.p0.x = bits;
    } else if (t + 1 < tiles_) {
      next_ = LoadPlanes(t + 1);
    }
    const uint32_t mag = __reduce_max_sync(FULL_MASK, max(mag2 & 0xFFFFu, mag2 >> 16));
    if (AnchorFractionOf(mag, MANT) != af) bad_ = 1u;
  }

  ZIPCOMM_DEVICE uint32_t CodedTile(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t cnt = lane_count(t);
    const LanePlanes<D> planes = next_;
    if (t + 1 < tiles_) next_ = LoadPlanes(t + 1);  // prefetch: the next tile's bits load while this one decodes
    const uint32_t af = AnchorFraction(t), a = af >> 2, f = af & 3u;

    uint32_t exps[ITEMS] = {};  // the items' exponent fields; all zero in a tile anchored at 0
    if constexpr (FIXED) {
      uint32_t e[ITEMS / 2];
      fixed_.Exponents(t, a, cnt, e, bad_);
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        exps[i] = uint32_t(i) < cnt ? FB::assemble((e[i / 2] >> (i % 2 ? 23 : 7)) & 0xFFu, 0, 0) : 0u;
    } else if (a != 0) {
      pair_.TileExponents(t, full_tiles_, a, f, cnt, exps, bad_);
    }
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
    if ((mag >> FB::MANT_BITS) != a || (!FIXED && thread::fraction_of<D>(mag) != f)) bad_ = 1u;
    return cnt;
  }

  // a << 2 | f of a tile whose largest magnitude is mag (MANT mantissa bits); the fixed code keeps no fraction.
  ZIPCOMM_DEVICE static uint32_t AnchorFractionOf(uint32_t mag, uint32_t mant) {
    return FIXED ? (mag >> mant) << 2 : mag >> (mant - 2);
  }

 private:
  const uint8_t* stream_ = nullptr;
  const uint8_t* plane0_ = nullptr;
  const uint8_t* low_ = nullptr;  // the chunk's low part
  LowCursor low_cursor_{};        // its width codes; where the next tile to load starts
  bool low_empty_ = false;        // no tile of the chunk stores low bits
  uint64_t first_tile_ = 0, lane_first_ = 0;
  uint32_t bytes_ = 0, elems_ = 0, tiles_ = 0, full_tiles_ = 0;
  bool raw_ = false;
  uint32_t bad_ = 0;
  uint32_t check_acc_ = 0, expected_check_ = 0;  // this lane's ChunkCheck word; the chunk's stored check
  uint32_t tile_af_ = 0;  // a << 2 | f of tile lane (low half) and of tile lane + 32 (high half)
  const uint8_t* plane_at_ = nullptr;  // the lane's plane-0 bytes of the tile after the next full one to decode
  LanePlanes<D> next_{};          // the next tile's planes (prefetched)
  PairCodeReader<D, Code> pair_;  // the pair code's state
  FixedCodeReader fixed_{};       // the fixed code's state
};

}  // namespace warp
}  // namespace zipcomm
