// Warp level: encode one chunk (up to 16384 elements) of exponents: into 32 lane streams of pair codewords, or
// into the fixed code's 3-bit codes and exception bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../format.hpp"
#include "../thread/chunk_check.hpp"
#include "../thread/fixed_code.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/float_bits.hpp"
#include "array_tile_source.cuh"
#include "fixed_code_lanes.cuh"
#include "lane_io.cuh"
#include "pair_tables.cuh"

namespace zipcomm {
namespace warp {

/// Size and kind of one encoded chunk stream.
struct ChunkInfo {
  uint32_t bytes;  ///< bytes of the chunk stream (16-byte multiple)
  uint32_t words;  ///< lane words of a coded chunk, all lanes together (fixed code: its exceptions)
  bool coded;      ///< false: exponents stored raw (coding did not pay)
  uint32_t check;  ///< thread::chunk_check of the elements coded (the chunk table's check entry)
};

/// \brief Encodes the exponents of one chunk; all 32 lanes of the warp call every member together.
///
/// Every lane codes its own items into its own stream (two items per pair codeword, one table lookup), kept
/// in the caller's TempStorage; Store() writes the chunk header and the 32 streams one after another once the
/// caller knows where the chunk goes. The sign/mantissa planes are written as each tile is read (so a sender
/// may put them on the wire before the exponents are done).
///
/// \tparam D     element type (DType::bf16, fp16, fp32, fp8_e4m3, fp8_e5m2)
/// \tparam Code  thread::PairCode, or thread::FixedCode: each lane's codes go to their fixed places in the chunk
///               built in TempStorage, the tiles' exceptions after them, placed by a warp scan; no table
///               (TablesOf<FixedCode>::Encode is NoTable)
///
/// \code
/// __global__ void kernel(const __nv_bfloat16* in, uint8_t* out, ...) {
///   using Enc = zipcomm::warp::WarpChunkEncoder<zipcomm::DType::bf16>;
///   __shared__ zipcomm::warp::PairEncodeTable table;          // 5 KB, one per block
///   __shared__ Enc::TempStorage temp[WARPS];                  // 8 KB per warp
///   auto cta = cooperative_groups::this_thread_block();
///   zipcomm::warp::LoadPairTable(table, cta);
///   Enc enc(temp[threadIdx.x / 32], table);
///   auto load = [&](uint32_t tile, uint32_t (&x)[8]) { ... };  // this lane's 8 items of the tile
///   zipcomm::warp::ChunkInfo info = enc.Encode(elems, first_tile, load, planes);
///   enc.Store(chunk_dst, elems, info, load);                   // chunk_dst: 16-byte aligned
/// }
/// \endcode
/// The loader is called once per tile in order, and a second time per tile only when the chunk is raw.
/// TempStorage may be reused for the next chunk right after Store() returns (Store ends with __syncwarp).
template <DType D, class Code = thread::PairCode>
class WarpChunkEncoder {
  using FB = thread::FloatBits<D>;
  static constexpr uint32_t EXP_BITS = FB::EXP_BITS;
  static constexpr uint32_t LANE_WORDS = format::LANE_WORD_LIMIT;
  // Full tiles are coded two elements per word: maximum, symbols and plane bytes on packed pairs (fp32: its upper
  // halves, which are bf16 patterns; the low halves go to the width writer; fp32 encode 765-771 -> 889-910 GB/s, H100).
  static constexpr bool PACKED = D == DType::bf16 || D == DType::fp16 || D == DType::fp32;
  static constexpr DType HALF = packed_half<D>;
  using PB = thread::FloatBits<HALF>;
  // fp8 full tiles on the lane's two words: four elements per word, plane 0 by a bit transpose.
  static constexpr bool BYTES = is_fp8(D);
  static constexpr bool FIXED = Code::ID == CodeId::fixed;
  using FC = thread::FixedCode;

  struct PairWords {
    // Word k of lane l's stream at [k][(l + k) % 32]: conflict-free stores while lanes fill words at about the
    // same pace, conflict-free loads when Store() copies one lane's stream out.
    uint32_t words[LANE_WORDS][format::LANES];
  };
  struct alignas(16) FixedChunk {
    uint8_t bytes[FC::MAX_CHUNK_BYTES];  // the coded chunk as stored: codes, anchors, exceptions
  };

 public:
  /// 8 KB (pair code) or 8,256 bytes (fixed code) per warp.
  using TempStorage = std::conditional_t<FIXED, FixedChunk, PairWords>;

  ZIPCOMM_DEVICE WarpChunkEncoder(TempStorage& temp, const typename TablesOf<Code>::Encode& table)
      : temp_(temp), table_(static_cast<uint32_t>(__cvta_generic_to_shared(&table))) {}

  /// Encodes a chunk of `elems` elements whose first tile has global index `first_tile`.
  /// load(tile, x) fills this lane's 8 items of chunk tile `tile` (items past the end may hold anything).
  template <class Loader>
  ZIPCOMM_DEVICE ChunkInfo Encode(uint32_t elems, uint64_t first_tile, Loader& load, const Planes& planes) {
    const uint32_t lane = lane_id();
    const uint32_t tiles = format::chunk_tiles(elems);
    const uint32_t full_tiles = elems / format::TILE_ELEMS;
    uint32_t check = thread::ChunkCheck::lane_seed(lane);
    anchor_lo_ = anchor_hi_ = frac_byte_ = 0;
    acc_ = 0;
    nacc_ = 0;
    words_ = 0;
    tiles_ = tiles;
    exception_limit_ = FC::exception_limit(elems);
    LowCursor low;
    if constexpr (format::has_low(D)) {
      if (!planes.full)
        low = load_low_codes(planes.widths, first_tile, tiles);
      else if (lane == 0)
        store_low_codes(planes.widths, first_tile, tiles, low.codes);  // all zero: full width
    }

    uint32_t t = 0;
    constexpr bool WORDS = format::Traits<D>::ELEM_BYTES == 2 && LoadsWords<Loader>::value;
    if constexpr (PACKED) {
      // Full tiles in a loop of their own, two per round: a loader that alternates between two prefetches
      // (ArrayTileSource) then knows which one each tile takes.
      uint8_t* plane0_at = planes.plane0 + first_tile * format::TILE_ELEMS + lane * ITEMS;
#pragma unroll 2
      for (; t < full_tiles; ++t) {
        if constexpr (WORDS) {  // 16-bit items as loaded, two a word
          uint32_t w[ITEMS / 2];
          load.words(t, w);
          if constexpr (format::has_low(D)) {  // fp16's three low bits
            uint32_t x[ITEMS];
#pragma unroll
            for (int p = 0; p < ITEMS / 2; ++p) x[2 * p] = w[p] & 0xFFFFu, x[2 * p + 1] = w[p] >> 16;
            const uint32_t code = low.code(t);
            write_low_bits<D>(planes.low + low.at, code, format::TILE_ELEMS, ITEMS, x);
            low.at += format::low_tile_bytes(D, code, format::TILE_ELEMS);
          }
          check = FullTileWords(t, w, plane0_at + t * format::TILE_ELEMS, check);
          continue;
        }
        uint32_t x[ITEMS];
        load(t, x);
        if constexpr (format::has_low(D)) {  // the low bits by the per-item writer (fp16: none at the narrow width)
          const uint32_t code = low.code(t);
          write_low_bits<D>(planes.low + low.at, code, format::TILE_ELEMS, ITEMS, x);
          low.at += format::low_tile_bytes(D, code, format::TILE_ELEMS);
        }
        check = FullTilePacked(t, x, plane0_at + t * format::TILE_ELEMS, check);
      }
    } else if constexpr (BYTES) {
      uint8_t* plane0_at = planes.plane0 + lane_plane0_bits_at<D>(first_tile * format::TILE_ELEMS);
#pragma unroll 2
      for (; t < full_tiles; ++t) {
        uint32_t x[ITEMS];
        load(t, x);
        check = FullTileBytes(t, x, plane0_at + t * format::plane0_tile_bytes(D), check);
      }
    }
    for (; t < tiles; ++t) {
      uint32_t x[ITEMS];
      load(t, x);  // loaders start the next tile's load before they return (ArrayTileSource, the decoders)
      const uint32_t cnt = t < full_tiles ? uint32_t(ITEMS) : format::lane_valid_count(elems, t, lane);
      const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * ITEMS;
      const uint32_t code = low.code(t), valid = t < full_tiles ? format::TILE_ELEMS : elems - t * format::TILE_ELEMS;
      write_planes<D>(planes.plane0, planes.low + low.at, code, valid, first, cnt, x);
      low.at += format::low_tile_bytes(D, code, valid);
      check = thread::ChunkCheck::add_items<D>(check, x, cnt);

      // Full tiles (all but a chunk's last) take the branches without per-item predicates.
      const bool full = t < full_tiles;  // warp-uniform
      uint32_t mag = 0;
      if (full) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) mag = max(mag, FB::magnitude(x[i]));
      } else {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
          if (uint32_t(i) < cnt) mag = max(mag, FB::magnitude(x[i]));
      }
      mag = __reduce_max_sync(FULL_MASK, mag);
      const uint32_t a = mag >> FB::MANT_BITS;
      const uint32_t f = thread::fraction_of<D>(mag);
      KeepHeader(t, a, f);
      if constexpr (FIXED)
        FixedTileItems(t, a, x, full ? uint32_t(ITEMS) : cnt);
      else if (a != 0)  // a = 0: all exponents zero, nothing to code
        PairTileItems(a, f, x, cnt, full);
    }
    ChunkInfo info;
    if constexpr (FIXED) {
      __syncwarp();
      info.words = words_;  // the exceptions
      info.coded = FC::stays_coded(D, elems, words_);
      info.bytes = info.coded ? FC::chunk_bytes(tiles, words_) : format::raw_chunk_bytes(D, elems);
      info.check = __reduce_add_sync(FULL_MASK, thread::ChunkCheck::lane_final(check));
      return info;
    }
    if (nacc_ > 0) Flush();  // the partial last word, zero-padded
    __syncwarp();

    info.words = __reduce_add_sync(FULL_MASK, words_);
    const uint32_t max_lane = __reduce_max_sync(FULL_MASK, words_);
    info.coded = format::chunk_stays_coded(D, elems, info.words, max_lane);
    info.bytes = info.coded ? format::coded_chunk_bytes(tiles, info.words) : format::raw_chunk_bytes(D, elems);
    info.check = __reduce_add_sync(FULL_MASK, thread::ChunkCheck::lane_final(check));
    return info;
  }

  /// Writes the chunk stream to dst (16-byte aligned, info.bytes long). For a raw chunk the loader is
  /// called again for every tile.
  template <class Loader>
  ZIPCOMM_DEVICE void Store(uint8_t* dst, uint32_t elems, const ChunkInfo& info, Loader& load) {
    if (!info.coded)
      StoreRaw(dst, elems, info, load);
    else if constexpr (FIXED)
      StoreFixed(dst, format::chunk_tiles(elems), info);
    else
      StorePair(dst, format::chunk_tiles(elems), info);
    __syncwarp();
  }

 private:
  // The chunk header's bytes stay in registers: lane t % 32 holds tile t's anchor, lane t / 4 its fraction.
  ZIPCOMM_DEVICE void KeepHeader(uint32_t t, uint32_t a, uint32_t f) {
    const uint32_t lane = lane_id();
    if (lane == (t & 31u)) (t < 32 ? anchor_lo_ : anchor_hi_) = a;
    if (lane == t / 4) frac_byte_ |= f << (2 * (t & 3u));
  }

  // The encode entry of pair (s0, s1) under the tile's table.
  ZIPCOMM_DEVICE static uint32_t Entry(uint32_t table_f, uint32_t s0, uint32_t s1) {
    uint32_t e;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(e) : "r"(table_f + 4 * (s0 * Code::NUM_SYMBOLS + s1)));
    return e;
  }

  // Appends an entry's bits (<= 22, right-aligned; the count in the top byte).
  ZIPCOMM_DEVICE void Append(uint32_t entry) {
    Put(entry & ((1u << Code::ENCODE_LEN_SHIFT) - 1u), entry >> Code::ENCODE_LEN_SHIFT);
  }
  // Appends two entries; two codewords of at most 12 bits go in as one field.
  ZIPCOMM_DEVICE void Append2(uint32_t e0, uint32_t e1) {
    constexpr uint32_t LONG = 16u << Code::ENCODE_LEN_SHIFT;  // an escape pair's entry: 22 bits
    static_assert(Code::MAX_LEN < 16, "codewords of their own stay below 16 bits");
    if (((e0 | e1) & LONG) == 0) {
      const uint32_t len1 = e1 >> Code::ENCODE_LEN_SHIFT;
      Put((e0 & 0xFFFFu) << len1 | (e1 & 0xFFFFu), (e0 >> Code::ENCODE_LEN_SHIFT) + len1);
    } else {
      Append(e0);
      Append(e1);
    }
  }
  // Appends the len (1..31) low bits of v after the nacc_ (< 32) bits held, MSB first; a full word moves out.
  ZIPCOMM_DEVICE void Put(uint32_t v, uint32_t len) {
    const uint32_t left = v << (32 - len), total = nacc_ + len;
    acc_ |= left >> nacc_;
    if (total >= 32) {
      Flush();
      acc_ = __funnelshift_r(0u, left, nacc_);  // the bits that did not fit (nacc_ > 0 here)
    }
    nacc_ = total & 31u;
  }
  ZIPCOMM_DEVICE void Flush() {
    // Words past the lane limit are counted, not kept: the chunk is then stored raw.
    if constexpr (!FIXED)
      if (words_ < LANE_WORDS) temp_.words[words_][(lane_id() + words_) & 31u] = acc_;
    ++words_;
  }

  // A full lane's four pairs of a tile with an ESC symbol (exps: the items' exponents): the raw exponent of each
  // ESC follows its pair's codeword.
  ZIPCOMM_DEVICE void AppendWithEscapes(uint32_t table_f, uint32_t a, const uint32_t (&exps)[ITEMS]) {
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) {
      const uint32_t s0 = Code::symbol_of(exps[2 * p], a), s1 = Code::symbol_of(exps[2 * p + 1], a);
      Append(Entry(table_f, s0, s1));
      if (s0 == Code::ESC) Append(exps[2 * p] | EXP_BITS << Code::ENCODE_LEN_SHIFT);
      if (s1 == Code::ESC) Append(exps[2 * p + 1] | EXP_BITS << Code::ENCODE_LEN_SHIFT);
    }
  }
  ZIPCOMM_DEVICE static void exponents_of(const uint32_t (&x)[ITEMS], uint32_t (&exps)[ITEMS]) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) exps[i] = FB::exponent(x[i]);
  }

  // A full tile (the lane's 8 items; plane0_at is where its 8 plane bytes go); returns the updated check.
  ZIPCOMM_DEVICE uint32_t FullTilePacked(uint32_t t, const uint32_t (&x)[ITEMS], uint8_t* plane0_at, uint32_t check) {
    uint32_t w[ITEMS / 2];
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) w[p] = packed_pair<D>(x[2 * p], x[2 * p + 1]);
    if constexpr (D == DType::fp32) check = thread::ChunkCheck::add_items<D>(check, x, ITEMS);  // whole elements
    return FullTileWords(t, w, plane0_at, check);
  }
  // FullTilePacked from the packed words (fp32: the check of the whole elements already taken).
  ZIPCOMM_DEVICE uint32_t FullTileWords(uint32_t t, const uint32_t (&w)[ITEMS / 2], uint8_t* plane0_at,
                                        uint32_t check) {
    uint32_t top[ITEMS / 2];
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p)
      top[p] = w[p] >> (PB::MANT_BITS - 7);  // each half's top 7 mantissa bits in its low byte (fp16: 3 bits down)
    // Plane bytes: those 7 bits under the sign (the top bit of each half's high byte); fp16 encode 663 -> 718 GB/s.
    *reinterpret_cast<uint2*>(plane0_at) =
        make_uint2((prmt(top[0], top[1], 0x6420u) & 0x7F7F7F7Fu) | (prmt(w[0], w[1], 0x7531u) & 0x80808080u),
                   (prmt(top[2], top[3], 0x6420u) & 0x7F7F7F7Fu) | (prmt(w[2], w[3], 0x7531u) & 0x80808080u));
    uint32_t mag = 0;
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) {
      if constexpr (D != DType::fp32) check = thread::ChunkCheck::round(check, w[p]);
      mag = __vmaxu2(mag, w[p] & 0x7FFF7FFFu);
    }
    // fp32: the largest upper half is the largest magnitude's, whose exponent and top mantissa bits it holds.
    mag = __reduce_max_sync(FULL_MASK, max(mag & 0xFFFFu, mag >> 16));
    const uint32_t a = mag >> PB::MANT_BITS, f = thread::fraction_of<HALF>(mag);
    KeepHeader(t, a, f);
    if constexpr (FIXED)
      FixedTilePacked(t, a, w);
    else if (a != 0)  // a = 0: all exponents zero, nothing to code
      PairTilePacked(a, f, w);
    return check;
  }
  // The pair code's tile from its items (partial tiles, dtypes without a packed path): cnt valid, all if full.
  ZIPCOMM_DEVICE void PairTileItems(uint32_t a, uint32_t f, const uint32_t (&x)[ITEMS], uint32_t cnt, bool full) {
    uint32_t sym[ITEMS];
    bool esc = false;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      sym[i] = full || uint32_t(i) < cnt ? Code::symbol_of(FB::exponent(x[i]), a) : Code::ZERO;
      esc |= sym[i] == Code::ESC;
    }
    const uint32_t table_f = table_ + 4 * Code::NUM_PAIRS * f;
    if (!__any_sync(FULL_MASK, esc)) {
      if (full) {
#pragma unroll
        for (int p = 0; p < 4; ++p) Append(Entry(table_f, sym[2 * p], sym[2 * p + 1]));
      } else {
#pragma unroll
        for (int p = 0; p < 4; ++p)
          if (2 * p < cnt) Append(Entry(table_f, sym[2 * p], sym[2 * p + 1]));
      }
    } else {
      // ESC symbols: their raw exponents follow the pair's codeword.
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        if (2 * p >= cnt) continue;
        Append(Entry(table_f, sym[2 * p], sym[2 * p + 1]));
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (sym[2 * p + j] == Code::ESC) Append(FB::exponent(x[2 * p + j]) | EXP_BITS << Code::ENCODE_LEN_SHIFT);
      }
    }
  }
  // The pair code's symbols of both halves at once: d = a - e, ZERO (16) where e = 0; d >= 16 (an ESC) sends the
  // tile to AppendWithEscapes.
  ZIPCOMM_DEVICE void PairTilePacked(uint32_t a, uint32_t f, const uint32_t (&w)[ITEMS / 2]) {
    constexpr uint32_t EXP_MASK = (1u << EXP_BITS) - 1u;
    const uint32_t a2 = a | a << 16;
    uint32_t s[ITEMS / 2], dmax = 0;
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) {
      const uint32_t e2 = (w[p] >> PB::MANT_BITS) & (EXP_MASK | EXP_MASK << 16);
      const uint32_t nonzero = prmt(e2 + 0x7FFF7FFFu, 0u, 0xBB99u);  // 0xFFFF in each half whose e != 0
      const uint32_t d2 = (a2 - e2) & nonzero;
      dmax = __vmaxu2(dmax, d2);
      s[p] = d2 | (~nonzero & (Code::ZERO | Code::ZERO << 16));
    }
    const uint32_t table_f = table_ + 4 * Code::NUM_PAIRS * f;
    if (!__any_sync(FULL_MASK, dmax & 0xFFF0FFF0u)) {
#pragma unroll
      for (int p = 0; p < ITEMS / 2; p += 2)
        Append2(Entry(table_f, s[p] & 0xFFFFu, s[p] >> 16), Entry(table_f, s[p + 1] & 0xFFFFu, s[p + 1] >> 16));
    } else {
      uint32_t exps[ITEMS];  // fp32: its upper halves' exponents are its own
#pragma unroll
      for (int p = 0; p < ITEMS / 2; ++p)
        exps[2 * p] = PB::exponent(w[p] & 0xFFFFu), exps[2 * p + 1] = PB::exponent(w[p] >> 16);
      AppendWithEscapes(table_f, a, exps);
    }
  }
  // The fixed code's codes min(a - e, 7) of both halves at once.
  ZIPCOMM_DEVICE void FixedTilePacked(uint32_t t, uint32_t a, const uint32_t (&w)[ITEMS / 2]) {
    constexpr uint32_t EXP_MASK = (1u << EXP_BITS) - 1u;
    const uint32_t a2 = a * 0x00010001u;
    uint32_t codes = 0, e2[ITEMS / 2];
#pragma unroll
    for (int p = 0; p < ITEMS / 2; ++p) {
      e2[p] = (w[p] >> PB::MANT_BITS) & (EXP_MASK | EXP_MASK << 16);
      codes |= __vminu2(a2 - e2[p], FC::EXCEPTION * 0x00010001u) << (FC::BITS * p);
    }
    FixedTile(t, codes, e2);
  }

  // A full fp8 tile (plane0_at: the lane's byte of the tile's first bit-plane); returns the updated check.
  ZIPCOMM_DEVICE uint32_t FullTileBytes(uint32_t t, const uint32_t (&x)[ITEMS], uint8_t* plane0_at, uint32_t check) {
    constexpr uint32_t MANT = FB::MANT_BITS, ONES = 0x01010101u;
    constexpr uint32_t P = format::plane0_planes(D);
    const uint2 bytes = pack_bytes(x);  // folded with the loader's split of the same words
    const uint32_t w[2] = {bytes.x, bytes.y};
    uint32_t v[2], mag2 = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      v[k] = ((w[k] >> (7 - MANT)) & (ONES << MANT)) | (w[k] & ((1u << MANT) - 1u) * ONES);  // sign << MANT | m
      mag2 = __vmaxu2(mag2, byte_magnitudes_max2(w[k]));
      check = thread::ChunkCheck::round(check, w[k]);
    }
    const uint32_t bits = thread::bytes_to_bit_planes<P>(v[0], v[1]);
#pragma unroll
    for (uint32_t j = 0; j < P; ++j) plane0_at[j * format::LANES] = uint8_t(bits >> (8 * j));
    const uint32_t mag = __reduce_max_sync(FULL_MASK, max(mag2 & 0xFFFFu, mag2 >> 16));
    const uint32_t a = mag >> MANT, f = thread::fraction_of<D>(mag);
    KeepHeader(t, a, f);
    if constexpr (FIXED)
      FixedTileItems(t, a, x, ITEMS);
    else if (a != 0)  // a = 0: all exponents zero, nothing to code
      PairTileBytes(a, f, w, x);
    return check;
  }
  // Symbols of four items at once: d = a - e (e <= a: no borrow between bytes), ZERO where e = 0; an ESC (d >= 16,
  // e5m2 only) sends the tile to AppendWithEscapes.
  ZIPCOMM_DEVICE void PairTileBytes(uint32_t a, uint32_t f, const uint32_t (&w)[2], const uint32_t (&x)[ITEMS]) {
    constexpr uint32_t MANT = FB::MANT_BITS, ONES = 0x01010101u;
    constexpr uint32_t EXP_MASK = ((1u << EXP_BITS) - 1u) * ONES;
    uint32_t s[2], dor = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t e4 = (w[k] >> MANT) & EXP_MASK;
      const uint32_t nonzero = prmt(e4 + 0x7F7F7F7Fu, 0u, 0xBA98u);  // 0xFF in each byte whose e != 0
      const uint32_t d4 = (a * ONES - e4) & nonzero;
      dor |= d4;
      s[k] = d4 | (~nonzero & Code::ZERO * ONES);
    }
    const uint32_t table_f = table_ + 4 * Code::NUM_PAIRS * f;
    static_assert(Code::NUM_D == 16, "d < 16: bit 4 of a byte marks an ESC");
    if (EXP_BITS == 4 || !__any_sync(FULL_MASK, dor & 0x10101010u)) {
#pragma unroll
      for (int k = 0; k < 2; ++k)
        Append2(Entry(table_f, s[k] & 0xFFu, (s[k] >> 8) & 0xFFu), Entry(table_f, (s[k] >> 16) & 0xFFu, s[k] >> 24));
    } else {
      uint32_t exps[ITEMS];
      exponents_of(x, exps);
      AppendWithEscapes(table_f, a, exps);
    }
  }

  // The pair code's chunk: its header, then the lanes' words (format::lane_word_index).
  ZIPCOMM_DEVICE void StorePair(uint8_t* dst, uint32_t tiles, const ChunkInfo& info) {
    const uint32_t lane = lane_id();
    const uint32_t hdr = format::chunk_header_bytes(tiles), counts = format::lane_counts_offset(tiles);
    // Header: anchors, fractions, lane word counts, zero padding; at most 112 bytes, a few per lane.
    for (uint32_t base = 0; base < hdr; base += 32) {
      const uint32_t b = base + lane;
      const uint32_t anchor = __shfl_sync(FULL_MASK, b < 32 ? anchor_lo_ : anchor_hi_, b & 31u);
      const uint32_t frac = __shfl_sync(FULL_MASK, frac_byte_, (b - tiles) & 31u);
      const uint32_t count = __shfl_sync(FULL_MASK, words_, (b - counts) & 31u);
      if (b < hdr) dst[b] = uint8_t(b < tiles ? anchor : b < counts ? frac : b < counts + 32 ? count : 0u);
    }
    // The words (format::lane_word_index): the first `interleaved` of every lane round by round, one store of
    // 128 bytes per round; then each lane's rest, lane after lane, by warp-wide copies.
    const LaneWordPlace place = lane_word_place(words_);
    const uint32_t interleaved = place.interleaved, rest = words_ - interleaved;
    uint32_t* out = reinterpret_cast<uint32_t*>(dst + hdr);
    for (uint32_t r = 0; r < interleaved; ++r) out[r * format::LANES + lane] = temp_.words[r][(lane + r) & 31u];
    uint32_t* tails = out + interleaved * format::LANES;
    for (uint32_t l = 0; l < format::LANES; ++l) {
      const uint32_t n = __shfl_sync(FULL_MASK, rest, l), s = __shfl_sync(FULL_MASK, place.tail_before, l);
      for (uint32_t k = lane; k < n; k += 32)
        tails[s + k] = temp_.words[interleaved + k][(l + interleaved + k) & 31u];
    }
    const uint32_t end = hdr + 4 * info.words;
    for (uint32_t b = end + lane; b < info.bytes; b += 32) dst[b] = 0;
  }
  // A raw chunk: the loader is called again for every tile.
  template <class Loader>
  ZIPCOMM_DEVICE void StoreRaw(uint8_t* dst, uint32_t elems, const ChunkInfo& info, Loader& load) {
    const uint32_t lane = lane_id();
    const uint32_t tiles = format::chunk_tiles(elems);
    for (uint32_t t = 0; t < tiles; ++t) {
      uint32_t x[ITEMS];
      load(t, x);
      const uint32_t cnt = format::lane_valid_count(elems, t, lane);
      uint64_t packed = 0;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < cnt) packed |= uint64_t(FB::exponent(x[i])) << (EXP_BITS * i);
      const uint32_t at = (t * format::TILE_ELEMS + lane * ITEMS) * EXP_BITS / 8;
      if (EXP_BITS == 8) {
        if (at < info.bytes) *reinterpret_cast<uint2*>(dst + at) = make_uint2(uint32_t(packed), uint32_t(packed >> 32));
      } else if (EXP_BITS == 4) {
        if (at < info.bytes) *reinterpret_cast<uint32_t*>(dst + at) = uint32_t(packed);
      } else {
#pragma unroll
        for (uint32_t k = 0; k < EXP_BITS; ++k)
          if (at + k < info.bytes) dst[at + k] = uint8_t(packed >> (8 * k));
      }
    }
  }

  // Fixed code: tile t's codes (halves form, fixed_code_lanes.cuh) to their place in the chunk built in temp_, its
  // exceptions (exponents e2 in the same halves) to the list after the codes and anchors, lane by lane. Past the
  // exception limit they are counted, not kept: the chunk is then stored raw.
  ZIPCOMM_DEVICE void FixedTile(uint32_t t, uint32_t codes, const uint32_t (&e2)[ITEMS / 2]) {
    const uint32_t lane = lane_id();
    const FixedCodeWords place;
    const uint32_t word = place.word(fixed_field_of(codes));
    if (lane < FixedCodeWords::WORDS) reinterpret_cast<uint32_t*>(temp_.bytes)[t * FixedCodeWords::WORDS + lane] = word;
    uint32_t flags = fixed_exception_flags(codes);
    if (!__any_sync(FULL_MASK, flags)) return;
    uint32_t at, total;
    place_exceptions(flags, at, total);
    uint8_t* list = temp_.bytes + (FC::TILE_CODE_BYTES + 1) * tiles_;
    const uint64_t exps = prmt(e2[0], e2[1], 0x6420u) | uint64_t(prmt(e2[2], e2[3], 0x6420u)) << 32;  // item i: byte i
    for (at += words_; flags; ++at) {
      const uint32_t b = top_flag(flags);
      if (at < exception_limit_) list[at] = uint8_t(exps >> item_byte_shift(b));
      flags ^= 1u << b;
    }
    words_ += total;
  }
  // Fixed code: a tile from its items (fp8, a chunk's last tile), cnt of them valid.
  ZIPCOMM_DEVICE void FixedTileItems(uint32_t t, uint32_t a, const uint32_t (&x)[ITEMS], uint32_t cnt) {
    uint32_t codes = 0, e2[ITEMS / 2] = {};
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      if (uint32_t(i) >= cnt) continue;  // items past the end code as 0
      const uint32_t e = FB::exponent(x[i]), half = 16u * (i & 1);
      codes |= min(a - e, FC::EXCEPTION) << (half + FC::BITS * (i >> 1));
      e2[i >> 1] |= e << half;
    }
    FixedTile(t, codes, e2);
  }
  // Fixed code: the chunk built in temp_ with its anchors and zero padding, copied out in 16-byte vectors.
  ZIPCOMM_DEVICE void StoreFixed(uint8_t* dst, uint32_t tiles, const ChunkInfo& info) {
    const uint32_t lane = lane_id();
    uint8_t* anchors = temp_.bytes + FC::TILE_CODE_BYTES * tiles;
    if (lane < tiles) anchors[lane] = uint8_t(anchor_lo_);
    if (lane + 32 < tiles) anchors[lane + 32] = uint8_t(anchor_hi_);
    const uint32_t used = (FC::TILE_CODE_BYTES + 1) * tiles + info.words;
    if (used + lane < info.bytes) temp_.bytes[used + lane] = 0;  // fewer than 16
    __syncwarp();
    const uint4* from = reinterpret_cast<const uint4*>(temp_.bytes);
    uint4* to = reinterpret_cast<uint4*>(dst);
    for (uint32_t k = lane; k < info.bytes / 16; k += 32) to[k] = from[k];
  }

  TempStorage& temp_;
  uint32_t table_;  // shared-window address of the encode table
  uint32_t acc_ = 0;  // the lane's pending bits, MSB first: nacc_ of them
  uint32_t nacc_ = 0, words_ = 0;  // fixed code: words_ counts the chunk's exceptions (the same in every lane)
  uint32_t tiles_ = 0, exception_limit_ = 0;
  uint32_t anchor_lo_ = 0, anchor_hi_ = 0, frac_byte_ = 0;
};

}  // namespace warp
}  // namespace zipcomm
