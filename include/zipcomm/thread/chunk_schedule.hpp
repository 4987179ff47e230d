// Thread level: the order in which the 32 lane streams of a chunk fetch their 32-bit words.
//
// Every lane of a warp decodes its own bit stream, but the words of the 32 streams are interleaved in one
// array in the order the decoder asks for them: at each refill point the lanes that need a word take the next
// ones, in lane order. The encoder replays the same decisions, so no per-lane offsets are stored. This header
// holds the decisions both sides make; host and device code call the same functions.
#pragma once

#include <cstdint>

#include "../format.hpp"

namespace zipcomm {
namespace thread {

/// Refills in the last LAZY_PAIRS pairs of a lane's stream are lazy (fetch only what the next codeword needs),
/// everywhere else greedy (keep >= 32 bits buffered). Sixteen lazy codewords of >= 2 bits each guarantee that
/// no lane fetches a word it never reads, which would cost 32 bits per lane per chunk.
constexpr int32_t LAZY_PAIRS = 8;

/// Elements lane `lane` owns in tile `tile` of a chunk of `elems` elements (0..8; they are its first ones).
ZIPCOMM_HOST_DEVICE uint32_t lane_valid_count(uint32_t elems, uint32_t tile, uint32_t lane) {
  int64_t left = int64_t(elems) - int64_t(tile) * format::TILE_ELEMS - int64_t(lane) * format::ITEMS_PER_LANE;
  return left <= 0 ? 0u : left >= format::ITEMS_PER_LANE ? uint32_t(format::ITEMS_PER_LANE) : uint32_t(left);
}

/// Index (tile * 4 + pair) of the pair holding a lane's last element of the chunk; -1 if it owns none.
ZIPCOMM_HOST_DEVICE int32_t lane_final_pair(uint32_t elems, uint32_t lane) {
  uint32_t tiles = format::chunk_tiles(elems);
  if (tiles == 0) return -1;
  uint32_t c = lane_valid_count(elems, tiles - 1, lane);
  if (c > 0) return int32_t((tiles - 1) * 4 + (c - 1) / 2);
  return tiles >= 2 ? int32_t((tiles - 2) * 4 + 3) : -1;
}

/// Whether pair `pair_index` (tile * 4 + pair) is in the lazy tail of a lane whose final pair is `final_pair`.
ZIPCOMM_HOST_DEVICE bool pair_is_lazy(int32_t final_pair, int32_t pair_index) {
  return final_pair - pair_index < LAZY_PAIRS;
}

/// Refill rules. `avail` = bits buffered and not yet consumed (0..63).
/// Before a greedy pair: keep at least 32 bits, enough for two codewords.
ZIPCOMM_HOST_DEVICE bool need_before_pair(bool has_elements, bool lazy, uint32_t avail) {
  return has_elements && !lazy && avail < 32;
}
/// In a lazy pair: fetch only when the next codeword does not fit.
ZIPCOMM_HOST_DEVICE bool need_before_code(bool valid, bool lazy, uint32_t code_len, uint32_t avail) {
  return valid && lazy && code_len > avail;
}
/// After an escape codeword: its raw exponent (and, in a greedy pair, the next codeword) must fit.
ZIPCOMM_HOST_DEVICE bool need_for_escape(bool escaped, bool lazy, uint32_t avail, uint32_t exp_bits) {
  return escaped && (lazy ? avail < exp_bits : avail < 32);
}

}  // namespace thread
}  // namespace zipcomm
