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
    bool bad = false;

    if (bytes == raw_bytes) {
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
                          (bytes - hdr) / 4 > format::CODED_WORD_LIMIT;
    bad = size_bad;
    const uint32_t max_words = size_bad ? 0u : (bytes - hdr) / 4;
    const uint32_t* gw = reinterpret_cast<const uint32_t*>(stream + hdr);
    for (uint32_t i = lane; i < max_words; i += 32) temp_.words[i] = __ldg(gw + i);
    const uint32_t used_hdr = tiles + (tiles + 3) / 4;
    if (!bad)
      for (uint32_t b = used_hdr + lane; b < hdr; b += 32) bad |= stream[b] != 0;
    if (!bad && tiles % 4 && lane == 0) bad |= (stream[tiles + tiles / 4] >> (2 * (tiles % 4))) != 0;
    __syncwarp();

    const int32_t final_pair = thread::lane_final_pair(elems, lane);
    const uint32_t lt = lanemask_lt();
    uint32_t base = 0;
    uint64_t buf = 0;
    uint32_t avail = 0;

    auto refill = [&](bool need) -> bool {
      uint32_t mask = __ballot_sync(FULL_MASK, need);
      if (mask) {
        if (need) {
          uint32_t pos = base + __popc(mask & lt);
          uint32_t w = 0;
          if (pos < max_words)
            w = temp_.words[pos];
          else
            bad = true;
          buf |= uint64_t(w) << (32 - avail);
          avail += 32;
        }
        base += __popc(mask);
      }
      return mask != 0;
    };

    for (uint32_t t = 0; t < tiles; ++t) {
      const uint32_t cnt = thread::lane_valid_count(elems, t, lane);
      const uint64_t first = (first_tile + t) * format::TILE_ELEMS + lane * ITEMS;
      uint32_t x[ITEMS];
      read_planes<D>(planes, first_tile + t, first, cnt, x);
      const uint32_t a = size_bad ? 0u : stream[t];
      const uint32_t f = size_bad ? 0u : (stream[tiles + t / 4] >> (2 * (t % 4))) & 3u;

      if (a != 0) {
        const typename Code::Table tab = Code::table(f);
        const bool tile_lazy =
            __any_sync(FULL_MASK, cnt > 0 && thread::pair_is_lazy(final_pair, int32_t(4 * t + 3)));
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          const bool lazy = thread::pair_is_lazy(final_pair, int32_t(4 * t + p));
          refill(thread::need_before_pair(cnt > uint32_t(2 * p), lazy, avail));
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int v = 2 * p + j;
            const bool valid = cnt > uint32_t(v);
            uint32_t len;
            uint32_t sym = Code::decode(tab, uint32_t(buf >> 32), len);
            if (tile_lazy) {
              const bool need = thread::need_before_code(valid, lazy, len, avail);
              if (refill(need) && need) sym = Code::decode(tab, uint32_t(buf >> 32), len);
            }
            uint32_t e = 0;
            bool esc = false;
            if (valid) {
              if (len > avail) bad = true;
              buf <<= len;
              avail -= min(len, avail);
              esc = sym == Code::ESC;
              if (!esc) bad |= !thread::exponent_of<Code>(sym, a, e);
            }
            if (__any_sync(FULL_MASK, esc)) {
              refill(thread::need_for_escape(esc, lazy, avail, EXP_BITS));
              if (esc) {
                if (avail < EXP_BITS) bad = true;
                e = uint32_t(buf >> (64 - EXP_BITS));
                buf <<= EXP_BITS;
                avail -= min(EXP_BITS, avail);
                bad |= !thread::escape_valid<Code>(e, a);
              }
            }
            x[v] |= FB::assemble(e & ((1u << EXP_BITS) - 1u), 0, 0);
          }
        }
      }
      // The stored anchor and fraction must describe the decoded tile.
      uint32_t mag = 0;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i)
        if (uint32_t(i) < cnt) mag = max(mag, FB::magnitude(x[i]));
      mag = __reduce_max_sync(FULL_MASK, mag);
      if ((mag >> FB::MANT_BITS) != a || thread::fraction_of<D>(mag) != f) bad = true;
      sink(t, x, cnt);
    }
    if (!bad && format::coded_chunk_bytes(tiles, base) != bytes) bad = true;
    for (uint32_t i = base + lane; !bad && i < max_words; i += 32) bad |= temp_.words[i] != 0;
    __syncwarp();
    return __any_sync(FULL_MASK, bad) ? Status::corrupt_stream : Status::ok;
  }

 private:
  TempStorage& temp_;
};

}  // namespace warp
}  // namespace zipcomm
