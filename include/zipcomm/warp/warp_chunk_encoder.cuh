// Warp level: encode one chunk (up to 16384 elements) of exponents into an interleaved lane-word stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../format.hpp"
#include "../thread/chunk_check.hpp"
#include "../thread/chunk_schedule.hpp"
#include "../thread/exponent_code.hpp"
#include "../thread/float_bits.hpp"
#include "../thread/reduce_op.hpp"
#include "lane_io.cuh"

namespace zipcomm {
namespace warp {

/// The tiles of an element array in memory, as an encoder's loader wants them (any alignment). With an
/// avg `pre_op` each element is scaled first: a rank's own contribution entering a reduction.
template <DType D>
struct ArrayTileSource {
  const void* in;
  ReduceOp pre_op = ReduceOp::sum();
  bool vector = false;
  uint64_t first_tile = 0;
  uint32_t elems = 0;

  ZIPCOMM_DEVICE ArrayTileSource(const void* array, const ReduceOp& op)
      : in(array), pre_op(op), vector(reinterpret_cast<uintptr_t>(array) % 16 == 0) {}
  ZIPCOMM_DEVICE void begin(uint64_t /*chunk*/, uint32_t chunk_elems, uint64_t chunk_first_tile) {
    elems = chunk_elems;
    first_tile = chunk_first_tile;
  }
  ZIPCOMM_DEVICE void operator()(uint32_t t, uint32_t (&x)[ITEMS]) {
    const uint32_t lane = lane_id();
    const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * ITEMS;
    load_items_any<D>(in, vector, first, thread::lane_valid_count(elems, t, lane), x);
    thread::pre_items<D>(pre_op, x);
  }
  ZIPCOMM_DEVICE Status status() const { return Status::ok; }
};

/// Size and kind of one encoded chunk stream.
struct ChunkInfo {
  uint32_t bytes;  ///< bytes of the chunk stream (16-byte multiple)
  uint32_t words;  ///< lane words of a coded chunk
  bool coded;      ///< false: exponents stored raw (coding did not pay)
  uint32_t check;  ///< thread::chunk_check of the elements coded (the chunk table's check entry)
};

/// \brief Encodes the exponents of one chunk; all 32 lanes of the warp call every member together.
///
/// The sign/mantissa planes are written as each tile is read (so a sender may put them on the wire before
/// the exponents are done); exponent words are staged in the caller's TempStorage and written out by
/// Store() once the caller knows where the chunk goes.
///
/// \tparam D     element type (DType::bf16, fp16, fp32)
/// \tparam Code  thread::GaussianCode (default) or thread::Window3Code
///
/// \code
/// __global__ void kernel(const __nv_bfloat16* in, uint8_t* out, ...) {
///   using Enc = zipcomm::warp::WarpChunkEncoder<zipcomm::DType::bf16>;
///   __shared__ Enc::TempStorage temp[WARPS];                  // 8.3 KB per warp
///   Enc enc(temp[threadIdx.x / 32]);
///   auto load = [&](uint32_t tile, uint32_t (&x)[8]) { ... };  // this lane's 8 items of the tile
///   zipcomm::warp::ChunkInfo info = enc.Encode(elems, first_tile, load, planes);
///   enc.Store(chunk_dst, elems, info, load);                   // chunk_dst: 16-byte aligned
/// }
/// \endcode
/// The loader is called once per tile in order, and a second time per tile only when the chunk is raw.
/// TempStorage may be reused for the next chunk right after Store() returns (Store ends with __syncwarp).
template <DType D, class Code = thread::GaussianCode>
class WarpChunkEncoder {
  using FB = thread::FloatBits<D>;
  static constexpr uint32_t EXP_BITS = FB::EXP_BITS;

 public:
  struct TempStorage {
    uint32_t words[format::CODED_WORD_LIMIT];
    uint8_t header[format::CHUNK_HEADER_BYTES];  // anchors, then fractions (4 per byte)
  };

  ZIPCOMM_DEVICE explicit WarpChunkEncoder(TempStorage& temp) : temp_(temp) {}

  /// Encodes a chunk of `elems` elements whose first tile has global index `first_tile`.
  /// load(tile, x) fills this lane's 8 items of chunk tile `tile` (items past the end may hold anything).
  template <class Loader>
  ZIPCOMM_DEVICE ChunkInfo Encode(uint32_t elems, uint64_t first_tile, Loader& load, const Planes& planes) {
    const uint32_t lane = lane_id();
    const uint32_t tiles = format::chunk_tiles(elems);
    const int32_t final_pair = thread::lane_final_pair(elems, lane);
    const uint32_t lt = lanemask_lt();

    uint32_t base = 0;   // words handed out so far (same in every lane)
    uint32_t avail = 0;  // bits the decoder holds and has not consumed yet (replayed)
    uint32_t acc = 0;    // the word being filled, MSB first, `nacc` bits used
    uint32_t nacc = 0;
    uint32_t pend0 = 0, pend1 = 0, pend2 = 0;  // positions of fetched words not yet written (at most 3)
    uint32_t npend = 0;

    auto write_word = [&](uint32_t w) {
      if (pend0 < format::CODED_WORD_LIMIT) temp_.words[pend0] = w;
      pend0 = pend1;
      pend1 = pend2;
      --npend;
    };
    auto emit = [&](uint32_t bits, uint32_t len) {  // len <= 30
      const uint32_t total = nacc + len;
      if (total < 32) {
        acc |= bits << (32 - total);
        nacc = total;
      } else {
        write_word(acc | (bits >> (total - 32)));
        acc = total == 32 ? 0u : bits << (64 - total);
        nacc = total - 32;
      }
    };
    auto step = [&](bool need) {
      const uint32_t mask = __ballot_sync(FULL_MASK, need);
      if (mask) {
        if (need) {
          const uint32_t pos = base + __popc(mask & lt);
          pend0 = npend == 0 ? pos : pend0;
          pend1 = npend == 1 ? pos : pend1;
          pend2 = npend == 2 ? pos : pend2;
          ++npend;
          avail += 32;
        }
        base += __popc(mask);
      }
    };

    // Codeword of each symbol under each of the 4 orders, one symbol per lane: bits | len << 16.
    uint32_t sym_code_f[4] = {0, 0, 0, 0};
#pragma unroll
    for (uint32_t fo = 0; fo < 4; ++fo)
      if (lane <= Code::ESC) {
        uint32_t b, l;
        Code::encode(Code::table(fo), lane, b, l);
        sym_code_f[fo] = b | (l << 16);
      }
    const uint32_t full_tiles = elems / format::TILE_ELEMS;
    uint32_t check = thread::ChunkCheck::lane_seed(lane);

    uint32_t x[ITEMS], next[ITEMS];
    load(0, next);
    for (uint32_t t = 0; t < tiles; ++t) {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) x[i] = next[i];
      if (t + 1 < tiles) load(t + 1, next);  // prefetch: the next tile loads while this one is coded
      const uint32_t cnt = t < full_tiles ? uint32_t(ITEMS) : thread::lane_valid_count(elems, t, lane);
      const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * ITEMS;
      write_planes<D>(planes, first_tile + t, first, cnt, x);
      check = thread::ChunkCheck::add_items<D>(check, x, cnt);

      uint32_t mag = 0;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < cnt) mag = max(mag, FB::magnitude(x[i]));
      mag = __reduce_max_sync(FULL_MASK, mag);
      const uint32_t a = mag >> FB::MANT_BITS;
      const uint32_t f = thread::fraction_of<D>(mag);
      if (lane == 0) {
        temp_.header[t] = uint8_t(a);
        uint8_t& fb = temp_.header[tiles + t / 4];
        fb = uint8_t((t % 4 ? fb : 0) | (f << (2 * (t % 4))));
      }
      if (a == 0) continue;  // all exponents zero: nothing to code

      const uint32_t sym_code = f == 0 ? sym_code_f[0] : f == 1 ? sym_code_f[1] : f == 2 ? sym_code_f[2] : sym_code_f[3];
      uint32_t cw[ITEMS], ce[ITEMS];
      bool esc_any = false;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        ce[i] = FB::exponent(x[i]);
        const uint32_t sym = thread::symbol_of<Code>(ce[i], a);
        cw[i] = __shfl_sync(FULL_MASK, sym_code, sym);
        if (sym != Code::ESC) ce[i] = 0xFFFFFFFFu;  // marks "no raw exponent follows"
        esc_any |= (sym == Code::ESC) && uint32_t(i) < cnt;
      }
      const bool tile_esc = __any_sync(FULL_MASK, esc_any);
      const bool tile_lazy = __any_sync(FULL_MASK, cnt > 0 && thread::pair_is_lazy(final_pair, int32_t(4 * t + 3)));

      if (!tile_esc && !tile_lazy && __all_sync(FULL_MASK, cnt == ITEMS)) {
        // Fast path (all but the last two tiles of a chunk, unless escapes occur): one greedy refill
        // point and one two-codeword emission per pair.
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          step(avail < 32);
          const uint32_t len0 = cw[2 * p] >> 16, len1 = cw[2 * p + 1] >> 16;
          emit(((cw[2 * p] & 0xFFFFu) << len1) | (cw[2 * p + 1] & 0xFFFFu), len0 + len1);
          avail -= len0 + len1;
        }
        continue;
      }
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const bool lazy = thread::pair_is_lazy(final_pair, int32_t(4 * t + p));
        step(thread::need_before_pair(cnt > uint32_t(2 * p), lazy, avail));
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int v = 2 * p + j;
          const bool valid = cnt > uint32_t(v);
          const uint32_t len = cw[v] >> 16;
          if (tile_lazy) step(thread::need_before_code(valid, lazy, len, avail));
          if (valid) {
            emit(cw[v] & 0xFFFFu, len);
            avail -= len;
          }
          if (tile_esc) {
            const bool esc = valid && ce[v] != 0xFFFFFFFFu;
            step(thread::need_for_escape(esc, lazy, avail, EXP_BITS));
            if (esc) {
              emit(ce[v], EXP_BITS);
              avail -= EXP_BITS;
            }
          }
        }
      }
    }
    // Flush: the partial last word, then words fetched but never filled (possible only behind zero tiles).
    if (nacc > 0) write_word(acc);
    while (npend > 0) write_word(0u);
    __syncwarp();

    ChunkInfo info;
    info.words = base;
    info.coded = format::chunk_stays_coded(D, elems, base);
    info.bytes = info.coded ? format::coded_chunk_bytes(tiles, base) : format::raw_chunk_bytes(D, elems);
    info.check = __reduce_add_sync(FULL_MASK, thread::ChunkCheck::lane_final(check));
    return info;
  }

  /// Writes the chunk stream to dst (16-byte aligned, info.bytes long). For a raw chunk the loader is
  /// called again for every tile.
  template <class Loader>
  ZIPCOMM_DEVICE void Store(uint8_t* dst, uint32_t elems, const ChunkInfo& info, Loader& load) {
    const uint32_t lane = lane_id();
    const uint32_t tiles = format::chunk_tiles(elems);
    if (info.coded) {
      const uint32_t hdr = format::chunk_header_bytes(tiles);
      const uint32_t used = tiles + (tiles + 3) / 4;
      for (uint32_t b = lane; b < hdr; b += 32) dst[b] = b < used ? temp_.header[b] : 0;
      const uint32_t total_words = (info.bytes - hdr) / 4;
      uint32_t* w = reinterpret_cast<uint32_t*>(dst + hdr);
      for (uint32_t i = lane; i < total_words; i += 32) w[i] = i < info.words ? temp_.words[i] : 0u;
    } else {
      for (uint32_t t = 0; t < tiles; ++t) {
        uint32_t x[ITEMS];
        load(t, x);
        const uint32_t cnt = thread::lane_valid_count(elems, t, lane);
        uint64_t packed = 0;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
          if (uint32_t(i) < cnt) packed |= uint64_t(FB::exponent(x[i])) << (EXP_BITS * i);
        const uint32_t at = (t * format::TILE_ELEMS + lane * ITEMS) * EXP_BITS / 8;
        if (EXP_BITS == 8) {
          if (at < info.bytes) *reinterpret_cast<uint2*>(dst + at) = make_uint2(uint32_t(packed), uint32_t(packed >> 32));
        } else {
#pragma unroll
          for (uint32_t k = 0; k < EXP_BITS; ++k)
            if (at + k < info.bytes) dst[at + k] = uint8_t(packed >> (8 * k));
        }
      }
    }
    __syncwarp();
  }

 private:
  TempStorage& temp_;
};

}  // namespace warp
}  // namespace zipcomm
