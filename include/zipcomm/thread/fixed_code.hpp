// Thread level: the fixed code (code 4). Each exponent is stored as its distance below its tile's anchor in 3 bits
// at a fixed place; distances of 7 and more (zeros and the smallest magnitudes) are marked 7 and their exponent
// follows as an exception byte. Decoding reads fixed places and walks no bit stream: fewer instructions per
// element than the pair code, for about 0.04 of ratio (docs/DECISIONS.md, "A fixed-width exponent code").
#pragma once

#include <cstdint>

#include "../format.hpp"

namespace zipcomm {
namespace thread {

/// A coded chunk of T tiles: the tiles' codes (96 bytes a tile: lane l's 24-bit field at byte 3 l, little-endian),
/// the tiles' anchors (one byte each), then the exception bytes, padded with zeros to 16 bytes.
struct FixedCode {
  static constexpr CodeId ID = CodeId::fixed;
  static constexpr uint32_t BITS = 3, EXCEPTION = 7;  // distances 0..6 in place; 7: an exception byte follows
  static constexpr uint32_t FIELD_BYTES = 3;          // a lane's 8 codes in a tile
  static constexpr uint32_t TILE_CODE_BYTES = format::LANES * FIELD_BYTES;  // 96

  /// Bit of item i's code in its lane's field: even items in bits 0-11, odd ones in 12-23, so that a pair's two
  /// codes lie 12 bits apart (one shift places both in a 16-bit pair's halves).
  static constexpr uint32_t shift(uint32_t i) { return (i & 1u) * 12u + (i >> 1) * BITS; }
  /// A lane's exceptions are listed in this order of its items (its field's code bits from the highest down).
  static constexpr uint32_t EXCEPTION_ORDER[format::ITEMS_PER_LANE] = {7, 5, 3, 1, 6, 4, 2, 0};

  /// Bytes of a coded chunk of `tiles` tiles with `exceptions` exception bytes.
  static constexpr uint32_t chunk_bytes(uint32_t tiles, uint32_t exceptions) {
    return static_cast<uint32_t>(format::align_up((TILE_CODE_BYTES + 1ull) * tiles + exceptions, format::ALIGN));
  }
  /// Most exceptions a coded chunk of `elems` elements holds: one item in eight. A warp then builds the chunk in
  /// 8,256 bytes of shared memory; real tensors have 2-9% (zeros and the smallest magnitudes).
  static constexpr uint32_t exception_limit(uint32_t elems) { return elems / 8; }
  /// Bytes of the largest coded chunk (16384 elements, exception_limit of them exceptions): 8,256.
  static constexpr uint32_t MAX_CHUNK_BYTES =
      (TILE_CODE_BYTES + 1) * ((1u << format::MAX_CHUNK_LOG2) / format::TILE_ELEMS) +
      (1u << format::MAX_CHUNK_LOG2) / 8;
  /// Whether a chunk with `exceptions` exceptions is stored coded (else raw): within the limit and smaller.
  static ZIPCOMM_HOST_DEVICE bool stays_coded(DType d, uint32_t elems, uint32_t exceptions) {
    return exceptions <= exception_limit(elems) &&
           chunk_bytes(format::chunk_tiles(elems), exceptions) < format::raw_chunk_bytes(d, elems);
  }
};

}  // namespace thread
}  // namespace zipcomm
