// Warp level: the pair code's (thread::PairCode) lane streams as the warp chunk decoder reads them: a lane's words
// through a 96-bit buffer, the two exponents of a pair from one lookup in the block's decode table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../format.hpp"
#include "../thread/float_bits.hpp"
#include "../thread/pair_code.hpp"
#include "lane_io.cuh"

namespace zipcomm {
namespace warp {
namespace detail {
static __device__ const uint32_t ZERO_WORD[1] = {0u};
}  // namespace detail

/// A lane's reading of a chunk coded in the pair code (all 32 lanes call every member together): its words, loaded
/// two ahead of the buffer, and the pairs they code, every rule of the code checked. Errors OR into `bad`.
template <DType D, class Code = thread::PairCode>
class PairCodeReader {
  using FB = thread::FloatBits<D>;
  static constexpr uint32_t EXP_BITS = FB::EXP_BITS;

 public:
  /// table: the shared-window address of the block's decode table.
  ZIPCOMM_DEVICE explicit PairCodeReader(uint32_t table) : table_(table) {}

  /// Forgets the last chunk: a raw chunk reads no word (Load() reads detail::ZERO_WORD).
  ZIPCOMM_DEVICE void Reset() {
    hi_ = mid_ = lo_ = avail_ = 0;
    fetched_ = count_ = 0;
    ahead_ = after_ = 0;
    words_ = detail::ZERO_WORD;
    last_ = interleaved_ = tail_at_ = 0;
  }

  /// Starts a coded chunk (not raw) of `tiles` tiles: checks its size, lane word counts and padding and returns
  /// the lane's a << 2 | f of tile `lane` (low half) and of tile lane + 32 (high half). A chunk of impossible size
  /// reads nothing more.
  ZIPCOMM_DEVICE uint32_t Begin(const uint8_t* stream, uint32_t bytes, uint32_t raw_bytes, uint32_t tiles,
                                uint32_t& bad) {
    const uint32_t lane = lane_id();
    Reset();
    const uint32_t hdr = format::chunk_header_bytes(tiles), counts = format::lane_counts_offset(tiles);
    // Warp-uniform: nothing of a chunk with an impossible size is read.
    if (bytes > raw_bytes || bytes < hdr || bytes % format::ALIGN) {
      bad = 1u;
      return 0;
    }
    count_ = stream[counts + lane];
    const uint32_t total = __reduce_add_sync(FULL_MASK, count_);
    const LaneWordPlace place = lane_word_place(count_);
    const bool counts_bad = __any_sync(FULL_MASK, count_ > format::LANE_WORD_LIMIT) ||
                            format::coded_chunk_bytes(tiles, total) != bytes;
    if (counts_bad) {
      bad = 1u;
      count_ = 0;
      return 0;
    }
    if (count_) {
      words_ = reinterpret_cast<const uint32_t*>(stream + hdr);
      last_ = count_ - 1;
      interleaved_ = place.interleaved;
      tail_at_ = format::lane_word_index(place.interleaved, lane, place.interleaved, place.tail_before) -
                 place.interleaved;
    }
    ahead_ = Load(0);
    after_ = Load(1);
    // Zero: the fraction byte's unused bits, the header's padding and the padding after the streams.
    if (tiles % 4 && lane == 0) bad |= (stream[tiles + tiles / 4] >> (2 * (tiles % 4))) != 0;
    for (uint32_t b = counts + 32 + lane; b < hdr; b += 32) bad |= stream[b] != 0;
    for (uint32_t b = hdr + 4 * total + lane; b < bytes; b += 32) bad |= stream[b] != 0;
    // Tile anchors and fraction bytes live in lanes; each tile fetches its own with a shuffle.
    uint32_t tile_af = 0;
    if (lane < tiles) tile_af = TileAnchorFraction(stream, tiles, lane);
    if (lane + 32 < tiles) tile_af |= TileAnchorFraction(stream, tiles, lane + 32) << 16;
    return tile_af;
  }

  /// The exponents of a full tile of anchor a != 0 and fraction f, pair by pair into e: place(both fields of
  /// pair p, where a decode entry keeps its d fields) from one refill and four lookups, or, where some lane met
  /// an escape or an ESC symbol, join(the two items' exponent fields) from GeneralTile, decoding again from the
  /// same state.
  template <class Place, class Join>
  ZIPCOMM_DEVICE void FullTileExponents(uint32_t a, uint32_t f, uint32_t (&e)[ITEMS / 2], Place place, Join join,
                                        uint32_t& bad) {
    const uint32_t table_f = table_ + 4 * Code::WINDOWS * f;
    const uint32_t hi = hi_, mid = mid_, lo = lo_, avail = avail_, fetched = fetched_;
    const uint32_t a2 = a << 7 | a << 23 | Code::FILL;
    uint32_t flags = 0, dmax = 0;
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) {
      if (p == 0) RefillTile();  // four pairs take at most 48 bits
      const uint32_t entry = Lookup(table_f);
      Consume(entry & Code::LEN_MASK);
      flags |= entry;
      dmax = __vmaxu2(dmax, entry & Code::D_FIELDS);
      e[p] = place(PackedExponents(entry, a2));
    }
    if (__any_sync(FULL_MASK, flags & Code::SLOW)) {
      hi_ = hi, mid_ = mid, lo_ = lo, avail_ = avail, fetched_ = fetched;
      ahead_ = Load(fetched), after_ = Load(fetched + 1);
      uint32_t exps[ITEMS];
      GeneralTile(table_f, f, a, ITEMS, exps, bad);
#pragma unroll
      for (int p = 0; p < ITEMS / 2; ++p) e[p] = join(exps[2 * p], exps[2 * p + 1]);
    } else {
      // Both d fields below the anchor: a - 1 - d borrows from the guard bit above its field otherwise.
      bad |= ((a2 - 0x00800080u - dmax) & 0x80008000u) != 0x80008000u;
    }
  }

  /// The exponent fields of tile t's items (anchor a != 0, fraction f; the lane's first cnt valid, all 8 when t is
  /// one of the chunk's full_tiles).
  ZIPCOMM_DEVICE void TileExponents(uint32_t t, uint32_t full_tiles, uint32_t a, uint32_t f, uint32_t cnt,
                                    uint32_t (&exps)[ITEMS], uint32_t& bad) {
    const uint32_t table_f = table_ + 4 * Code::WINDOWS * f;
    bool general = t >= full_tiles;
    if (!general) {
      // Fast path: one refill, four lookups; a tile where a lane met an escape or an ESC symbol is decoded
      // again on the general path from the same state.
      const uint32_t hi = hi_, mid = mid_, lo = lo_, avail = avail_, fetched = fetched_;
      const uint32_t a2 = a << 7 | a << 23 | Code::FILL;
      uint32_t flags = 0, dmax = 0;
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        if (p == 0) RefillTile();  // four pairs take at most 48 bits
        const uint32_t entry = Lookup(table_f);
        Consume(entry & Code::LEN_MASK);
        flags |= entry;
        dmax = __vmaxu2(dmax, entry & Code::D_FIELDS);
        PairExponents(entry, a2, exps[2 * p], exps[2 * p + 1]);
      }
      general = __any_sync(FULL_MASK, flags & Code::SLOW);
      if (general) {
        hi_ = hi, mid_ = mid, lo_ = lo, avail_ = avail, fetched_ = fetched;
        ahead_ = Load(fetched), after_ = Load(fetched + 1);  // loaded again: a copy would wait for the loads
      } else {
        CheckD(dmax, a, bad);
      }
    }
    if (general) GeneralTile(table_f, f, a, cnt, exps, bad);
  }

  /// Once every tile was read: the lane read exactly its words, and what it fetched past its last codeword is zero.
  ZIPCOMM_DEVICE void Finish(uint32_t& bad) const {
    const uint32_t consumed = 32 * fetched_ - avail_;
    bad |= (consumed + 31) / 32 != count_ || (hi_ | mid_ | lo_) != 0;
  }

 private:
  // Word k of the lane's stream, or (past its end) its last word, or (no words) detail::ZERO_WORD: always a load
  // straight into the register that keeps it, never a predicated one whose default the compiler would merge
  // with a register copy that waits for the load. Word() zeroes what lies past the end.
  ZIPCOMM_DEVICE uint32_t Load(uint32_t k) const {
    k = min(k, last_);
    return __ldg(words_ + (k < interleaved_ ? k * format::LANES + lane_id() : tail_at_ + k));
  }
  // The word loaded as word k, zero past the stream's end (Finish() rejects a stream whose codewords run into it).
  ZIPCOMM_DEVICE uint32_t Word(uint32_t k, uint32_t loaded) const { return k < count_ ? loaded : 0u; }

  // Word w into the buffer behind its avail_ (< 64) bits.
  ZIPCOMM_DEVICE void Place(uint32_t w) {
    const uint32_t s = avail_ & 31u, top = w >> s, rest = __funnelshift_r(0u, w, s);  // rest: w << (32 - s)
    if (avail_ < 32) hi_ |= top, mid_ |= rest;
    else mid_ |= top, lo_ |= rest;
    avail_ += 32;
  }
  // Keeps at least 32 bits buffered (the general path: a field of up to 31 bits, or a pair): the lane's next
  // word joins the buffer when fewer are held.
  ZIPCOMM_DEVICE void Refill() {
    if (avail_ < 32) {
      Place(Word(fetched_, ahead_));
      ahead_ = after_;
      after_ = Load(fetched_ + 2);
      ++fetched_;
    }
  }
  // Keeps at least 48 bits buffered (a full tile's four pairs), once per tile: one or two words join. Both were
  // loaded at least a tile before, and the words loaded here are read a tile later: the check of the next tile
  // does not wait for them (a select waits for its operands' loads even when predicated off).
  ZIPCOMM_DEVICE void RefillTile() {
    const bool one = avail_ < 48, two = avail_ < 16;
    const uint32_t w0 = Word(fetched_, ahead_), w1 = Word(fetched_ + 1, after_);
    if (one) Place(w0);
    if (two) Place(w1);
    if (two) ahead_ = Load(fetched_ + 2);
    else if (one) ahead_ = after_;
    if (one) after_ = Load(fetched_ + (two ? 3u : 2u));
    fetched_ += uint32_t(one) + uint32_t(two);
  }
  ZIPCOMM_DEVICE void Consume(uint32_t n) {  // n <= 31, n <= avail_
    hi_ = __funnelshift_l(mid_, hi_, n);
    mid_ = __funnelshift_l(lo_, mid_, n);
    lo_ <<= n;
    avail_ -= n;
  }
  ZIPCOMM_DEVICE uint32_t Take(uint32_t n, uint32_t& bad) {  // the next n (1..31) bits
    Refill();
    bad |= n > avail_;
    const uint32_t v = hi_ >> (32 - n);
    Consume(min(n, avail_));
    return v;
  }
  ZIPCOMM_DEVICE uint32_t Lookup(uint32_t table_f) const {
    uint32_t e;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(e) : "r"(table_f + 4 * (hi_ >> (32 - Code::MAX_LEN))));
    return e;
  }

  // Exponent fields (in place) of a pair from its decode entry (or one built alike); ESC symbols give the
  // anchor here and are overwritten by the caller.
  ZIPCOMM_DEVICE static void PairExponents(uint32_t entry, uint32_t a2, uint32_t& e0, uint32_t& e1) {
    const uint32_t diff = a2 - entry;  // both a - d fields at once (d < a was checked, so no borrow)
    e0 = entry & Code::ZERO0 ? 0u : FB::assemble((diff >> 7) & 0xFFu, 0, 0);
    e1 = entry & Code::ZERO1 ? 0u : FB::assemble((diff >> 23) & 0xFFu, 0, 0);
  }
  // Both exponent fields of a pair in place: a - d, or 0 for a ZERO symbol (its flag is the half's top bit).
  ZIPCOMM_DEVICE static uint32_t PackedExponents(uint32_t entry, uint32_t a2) {
    return (a2 - entry) & ~prmt(entry, 0u, 0xBB99u) & Code::D_FIELDS;
  }

  // A tile where some lane has an escape, an ESC symbol or fewer than 8 items: pair by pair, each field read
  // with its own refill, every rule checked.
  ZIPCOMM_DEVICE void GeneralTile(uint32_t table_f, uint32_t f, uint32_t a, uint32_t cnt, uint32_t (&exps)[ITEMS],
                                  uint32_t& bad) {
    const uint32_t a2 = a << 7 | a << 23 | Code::FILL;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      exps[2 * p] = exps[2 * p + 1] = 0;
      if (uint32_t(2 * p) >= cnt) continue;
      Refill();
      uint32_t entry = Lookup(table_f);
      const uint32_t len = entry & Code::LEN_MASK;
      bad |= len > avail_;
      Consume(min(len, avail_));
      if ((entry & (Code::SLOW | Code::ESC0 | Code::ESC1)) == Code::SLOW) {
        // The escape pair: two symbol ids follow; only pairs without a codeword of their own may use it.
        const uint32_t s0 = Take(Code::ID_BITS, bad), s1 = Take(Code::ID_BITS, bad);
        const bool own = s0 >= Code::NUM_SYMBOLS || s1 >= Code::NUM_SYMBOLS ||
                         (thread::DEVICE_PAIR_TABLES.encode[f][s0 * Code::NUM_SYMBOLS + s1] >>
                          Code::ENCODE_LEN_SHIFT) <= Code::MAX_LEN;
        bad |= own;
        entry = (s0 < Code::NUM_D ? s0 << 7 : s0 == Code::ZERO ? Code::ZERO0 : Code::ESC0) |
                (s1 < Code::NUM_D ? s1 << 23 : s1 == Code::ZERO ? Code::ZERO1 : Code::ESC1);
      }
      CheckD(entry, a, bad);
      PairExponents(entry, a2, exps[2 * p], exps[2 * p + 1]);
      if (entry & Code::ESC0) {
        const uint32_t e = Take(EXP_BITS, bad);
        bad |= !Code::escape_valid(e, a);
        exps[2 * p] = FB::assemble(e, 0, 0);
      }
      if (entry & Code::ESC1) {
        const uint32_t e = Take(EXP_BITS, bad);
        bad |= !Code::escape_valid(e, a);
        exps[2 * p + 1] = FB::assemble(e, 0, 0);
      }
      if (uint32_t(2 * p + 1) >= cnt) bad |= (entry & Code::ZERO1) == 0;  // an item past the end codes as ZERO
    }
  }

  // Both d fields below the anchor (e = a - d >= 1); ZERO and ESC symbols carry d = 0.
  ZIPCOMM_DEVICE static void CheckD(uint32_t entry, uint32_t a, uint32_t& bad) {
    bad |= ((entry >> 7) & 0xFFu) >= a || ((entry >> 23) & 0xFFu) >= a;
  }

  // a << 2 | f of tile k, from the chunk's anchor bytes and fraction bits.
  ZIPCOMM_DEVICE static uint32_t TileAnchorFraction(const uint8_t* stream, uint32_t tiles, uint32_t k) {
    return uint32_t(stream[k]) << 2 | ((stream[tiles + k / 4] >> (2 * (k % 4))) & 3u);
  }

  uint32_t table_;                                  // shared-window address of the decode table
  const uint32_t* words_ = detail::ZERO_WORD;       // the chunk's words (ZERO_WORD when this lane has none)
  uint32_t count_ = 0, fetched_ = 0;                // the lane's words: in its stream, taken so far
  uint32_t last_ = 0;                               // index of the last word Load() reads
  uint32_t interleaved_ = 0, tail_at_ = 0;          // where its words are (format::lane_word_index)
  uint32_t ahead_ = 0, after_ = 0;                  // its words fetched_ and fetched_ + 1, loaded early
  uint32_t hi_ = 0, mid_ = 0, lo_ = 0, avail_ = 0;  // 96-bit buffer, MSB first: avail_ (< 80) valid bits
};

}  // namespace warp
}  // namespace zipcomm
