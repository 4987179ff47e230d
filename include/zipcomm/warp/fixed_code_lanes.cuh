// Warp level: the fixed code's (thread::FixedCode) pieces that the warp chunk encoder and decoder share: a lane's
// eight 3-bit codes between registers and a tile's 96 code bytes, and the exception bytes placed by a warp scan.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/warp/warp_scan.cuh>

#include "../format.hpp"
#include "../thread/fixed_code.hpp"
#include "lane_io.cuh"

namespace zipcomm {
namespace warp {

/// A lane's codes in registers ("halves"): item 2p's at bit 3p, item 2p + 1's at bit 16 + 3p, where packed pairs
/// keep the two items; fixed_field_of gives the format's 24-bit field (thread::FixedCode::shift), fixed_halves_of
/// takes it back.
ZIPCOMM_DEVICE uint32_t fixed_field_of(uint32_t halves) { return (halves & 0xFFFu) | ((halves >> 4) & 0xFFF000u); }
ZIPCOMM_DEVICE uint32_t fixed_halves_of(uint32_t field) { return (field & 0xFFFu) | ((field << 4) & 0x0FFF0000u); }
/// Bit 3p or 16 + 3p set where that item's code is 7 (an exception). A lane lists its exceptions from the highest
/// flag down, items 7, 5, 3, 1, 6, 4, 2, 0 (thread::FixedCode::EXCEPTION_ORDER).
ZIPCOMM_DEVICE uint32_t fixed_exception_flags(uint32_t halves) {
  return halves & (halves >> 1) & (halves >> 2) & 0x02490249u;
}
ZIPCOMM_DEVICE uint32_t top_flag(uint32_t flags) { return 31u - __clz(flags); }
/// 8 x the item of flag bit b (pair (b & 15) / 3, half b >> 4): where a 64-bit word keeps a byte per item.
ZIPCOMM_DEVICE uint32_t item_byte_shift(uint32_t b) { return (((b & 15u) * 11u) >> 5) * 16u + ((b >> 4) << 3); }

/// Where a tile's 96 code bytes meet the lanes: as 24 words, word j = bits 32 j .. 32 j + 31 of the lanes' fields
/// one after another. Lanes 0-23 each move word `lane`; every lane's field spans two words.
struct FixedCodeWords {
  static constexpr uint32_t WORDS = thread::FixedCode::TILE_CODE_BYTES / 4;  // 24
  uint32_t from_field, from_bit;  // word `lane` starts at bit from_bit of field from_field
  uint32_t to_word, to_bit;       // field `lane` starts at bit to_bit of word to_word
  ZIPCOMM_DEVICE FixedCodeWords() {
    const uint32_t lane = lane_id();
    from_field = (32u * lane) / 24u;
    from_bit = 32u * lane - 24u * from_field;
    to_word = (24u * lane) / 32u;
    to_bit = 24u * lane - 32u * to_word;
  }
  /// This lane's word of the tile (meaningful in lanes 0-23) from every lane's 24-bit field.
  ZIPCOMM_DEVICE uint32_t word(uint32_t field) const {
    const uint32_t f0 = __shfl_sync(FULL_MASK, field, from_field & 31u);
    const uint32_t f1 = __shfl_sync(FULL_MASK, field, min(from_field + 1u, 31u));
    return (f0 >> from_bit) | (f1 << (24u - from_bit));
  }
  /// This lane's 24-bit field from the tile's words (lane j < 24 holding word j).
  ZIPCOMM_DEVICE uint32_t field(uint32_t word) const {
    const uint32_t w0 = __shfl_sync(FULL_MASK, word, to_word);
    const uint32_t w1 = __shfl_sync(FULL_MASK, word, min(to_word + 1u, WORDS - 1u));
    return __funnelshift_r(w0, w1, to_bit) & 0xFFFFFFu;
  }
};

/// The warp's exceptions of one tile, lane by lane: this lane's place among them and their number (all lanes
/// call it together; a whole warp's scan runs on shuffles and keeps nothing in its TempStorage).
ZIPCOMM_DEVICE void place_exceptions(uint32_t flags, uint32_t& at, uint32_t& total) {
  using Scan = cub::WarpScan<uint32_t>;
  typename Scan::TempStorage unused;
  Scan(unused).ExclusiveSum(uint32_t(__popc(flags)), at, total);
}

/// A lane's reading of a fixed-coded chunk (all 32 lanes call every member together): its code field of each tile,
/// the code words of the next two tiles loaded early, and the exceptions its codes mark. Errors OR into `bad`.
struct FixedCodeReader {
  using FC = thread::FixedCode;
  static constexpr uint32_t CODES_AHEAD = 4;  // code words prefetched to L1 this many tiles ahead
  const uint8_t* stream = nullptr;
  uint32_t bytes = 0, tiles = 0;
  const uint32_t* words = nullptr;  // the lane's code word of tile 0; the next tile's `stride` words on
  uint32_t stride = 0, ahead = 0, after = 0;  // the words of tiles t and t + 1 while tile t is next
  uint32_t list_at = 0, taken = 0;            // where the exception list starts; exceptions taken (warp-uniform)

  /// Starts a coded chunk (not raw) of `tiles` tiles: checks its size and anchors (exp_bits wide) and returns the
  /// lane's a << 2 of tile `lane` (low half) and of tile lane + 32 (high half). A chunk of impossible size reads
  /// nothing: its code words come from `zero` (one zero word).
  ZIPCOMM_DEVICE uint32_t Begin(const uint8_t* chunk, uint32_t chunk_bytes, uint32_t raw_bytes, uint32_t chunk_tiles,
                                uint32_t exp_bits, const uint32_t* zero, uint32_t& bad) {
    const uint32_t lane = lane_id();
    stream = chunk;
    bytes = chunk_bytes;
    tiles = chunk_tiles;
    list_at = (FC::TILE_CODE_BYTES + 1) * tiles;
    taken = 0;
    words = zero;
    stride = 0;
    uint32_t lo = 0, hi = 0;
    if (bytes > raw_bytes || bytes < FC::chunk_bytes(tiles, 0) || bytes % format::ALIGN) {
      bad = 1u;
    } else {
      words = reinterpret_cast<const uint32_t*>(chunk) + min(lane, FixedCodeWords::WORDS - 1u);
      stride = FixedCodeWords::WORDS;
      const uint8_t* anchors = chunk + FC::TILE_CODE_BYTES * tiles;
      // To L1: the code words of the first CODES_AHEAD tiles and the whole exception list (at most 17 lines),
      // which the tiles then read a byte at a time.
      if (lane * 128u < min(bytes, FC::TILE_CODE_BYTES * CODES_AHEAD)) prefetch_l1(chunk + lane * 128u);
      for (uint32_t at = (list_at & ~127u) + lane * 128u; at < bytes; at += 32u * 128u) prefetch_l1(chunk + at);
      if (lane < tiles) lo = anchors[lane];
      if (lane + 32 < tiles) hi = anchors[lane + 32];
      bad |= (lo | hi) >> exp_bits;
    }
    ahead = Load(0);
    after = Load(1);
    return lo << 2 | hi << 18;
  }

  /// The exponents of tile t's items (anchor a; the lane's first cnt valid), pair p's at bits 7 and 23 of e[p]
  /// (where a pair code decode entry keeps its d fields). Checks: codes past cnt are 0, a code below 7 is at most
  /// a, an exception e has e + 7 <= a and lies inside the chunk.
  ZIPCOMM_DEVICE void Exponents(uint32_t t, uint32_t a, uint32_t cnt, uint32_t (&e)[ITEMS / 2], uint32_t& bad) {
    const FixedCodeWords place;
    const uint32_t field = place.field(ahead);
    // Tile t + CODES_AHEAD's 96 code bytes (two lines at most) to L1: the copy below waits for the word load of
    // tile t + 1, which then comes from L1.
    if (lane_id() < 2 && t + CODES_AHEAD < tiles && stride != 0)  // stride 0: a chunk of impossible size
      prefetch_l1(stream + FC::TILE_CODE_BYTES * (t + CODES_AHEAD) + (FC::TILE_CODE_BYTES - 1) * lane_id());
    ahead = after;
    after = Load(t + 2);
    if (cnt < ITEMS) {  // items past the end code as 0: even ones from bit 3 ceil(cnt / 2), odd from 12 + 3 (cnt / 2)
      const uint32_t even = FC::BITS * ((cnt + 1) / 2), odd = FC::BITS * (cnt / 2);
      bad |= (field & ~((1u << even) - 1u) & 0xFFFu) | ((field >> 12) & ~((1u << odd) - 1u));
    }
    const uint32_t codes = fixed_halves_of(field);
    const uint32_t a7 = a * 0x00800080u;
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) e[p] = a7 - (((codes >> (FC::BITS * p)) & 0x00070007u) << 7);
    uint32_t flags = fixed_exception_flags(codes);
    if (a < FC::EXCEPTION) {  // no exception possible, and a distance may exceed a: checked one by one
      bad |= flags;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) bad |= ((field >> FC::shift(i)) & FC::EXCEPTION) > a;
    }
    if (!__any_sync(FULL_MASK, flags)) return;
    uint32_t at, total;
    place_exceptions(flags, at, total);
    at += list_at + taken;
    if (at + __popc(flags) > bytes) {  // the list ends inside the chunk
      bad = 1u;
      flags = 0;
    }
    // Each exception's correction (decoded as a - 7 so far) in the byte of its item (item_byte_shift), applied
    // to the pairs once after the loop.
    uint64_t fixes = 0;
    for (; flags; ++at) {
      const uint32_t b = top_flag(flags), x = stream[at];
      bad |= x + FC::EXCEPTION > a;
      fixes |= uint64_t((a - FC::EXCEPTION - x) & 0xFFu) << item_byte_shift(b);
      flags ^= 1u << b;
    }
    const uint32_t lo = uint32_t(fixes), hi = uint32_t(fixes >> 32);
    e[0] -= prmt(lo, 0u, 0x4140u) << 7;
    e[1] -= prmt(lo, 0u, 0x4342u) << 7;
    e[2] -= prmt(hi, 0u, 0x4140u) << 7;
    e[3] -= prmt(hi, 0u, 0x4342u) << 7;
    taken += total;
  }

  /// After the last tile: the exceptions taken are the chunk's, within the limit, and only zeros follow them.
  ZIPCOMM_DEVICE void Finish(uint32_t elems, uint32_t& bad) {
    bad |= taken > FC::exception_limit(elems) || FC::chunk_bytes(tiles, taken) != bytes;
    const uint32_t end = list_at + taken + lane_id();
    if (!bad && end < bytes) bad |= stream[end] != 0;  // fewer than 16
  }

 private:
  ZIPCOMM_DEVICE uint32_t Load(uint32_t t) const { return __ldg(words + min(t, tiles - 1u) * stride); }
};

}  // namespace warp
}  // namespace zipcomm
