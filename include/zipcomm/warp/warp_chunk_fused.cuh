// Warp level: the fused steps of a compressed collective, one chunk at a time, each touching memory once.
//
//   WarpChunkDecodeReduce        out = op(decode(in), local)                      (a reduce hop's last step)
//   WarpChunkDecodeReduceEncode  out stream = encode(op(decode(in), local))      (a reduce-scatter hop)
//   WarpChunkDecodeForward       out = decode(in), and in's bytes copied to fwd  (an all-gather hop)
//
// Element arrays (local, out) are indexed by the element's global index (first_tile * 256 + ...), any
// alignment (16-byte aligned arrays take vector loads). out may be the same array as local. The numeric
// result is thread::reduce_items' (docs/REDUCE.md): bit-identical to decoding first, then reducing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/reduce_op.hpp"
#include "lane_io.cuh"
#include "warp_chunk_decoder.cuh"
#include "warp_chunk_encoder.cuh"

namespace zipcomm {
namespace warp {

namespace detail {

/// A 16-bit sum on whole words (thread::sum_pairs: two elements per conversion) for a fast tile whose local
/// operand arrived as a full vector. take_sum_words takes the operand's words when tile t qualifies (before the
/// next tile's load is issued into the same registers); decode_sum_words then decodes and adds.
template <DType D, class Dec>
ZIPCOMM_DEVICE bool take_sum_words(const ReduceOp& op, const Dec& dec, uint32_t t, const LaneItemsPrefetch<D>& y,
                                   uint32_t (&yw)[ITEMS / 2]) {
  if constexpr (format::Traits<D>::ELEM_BYTES == 2) {
    if (op.id == ReduceOpId::sum && t < dec.fast_tiles() && y.full()) {
      y.TakeWords(yw);
      return true;
    }
  }
  return false;
}
template <DType D, class Dec>
ZIPCOMM_DEVICE void decode_sum_words(Dec& dec, uint32_t t, const uint32_t (&yw)[ITEMS / 2], uint32_t (&w)[ITEMS / 2]) {
  dec.DecodeFastWords(t, w);
#pragma unroll
  for (int p = 0; p < ITEMS / 2; ++p) w[p] = thread::sum_pairs<D>(w[p], yw[p]);
}

}  // namespace detail

/// \brief Decode + reduce: out[i] = combine(decoded[i], pre(local[i])) for one chunk.
/// \code
/// using Fused = zipcomm::warp::WarpChunkDecodeReduce<zipcomm::DType::bf16>;
/// extern __shared__ zipcomm::warp::PairDecodeTable table;    // 64 KB per block, LoadPairTable(table, cta)
/// zipcomm::Status s = Fused(table).DecodeReduce(chunk, bytes, elems, first_tile, planes, check,
///                                                 local, out, zipcomm::ReduceOp::sum());
/// \endcode
template <DType D, class Code = thread::PairCode>
class WarpChunkDecodeReduce {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no fused steps");
  using Dec = WarpChunkDecoder<D, Code>;

 public:
  ZIPCOMM_DEVICE explicit WarpChunkDecodeReduce(const typename TablesOf<Code>::Decode& table) : table_(table) {}

  ZIPCOMM_DEVICE Status DecodeReduce(const uint8_t* chunk, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                                     const ConstPlanes& planes, uint32_t check, const void* local, void* out,
                                     const ReduceOp& op) {
    const bool vector = aligned16(local) && aligned16(out);
    const uint64_t lane_first = first_tile * format::TILE_ELEMS + lane_id() * ITEMS;
    Dec dec(table_);
    dec.Begin(chunk, bytes, elems, first_tile, planes, check);
    // The local operand of tile t + 1 loads while tile t decodes.
    LaneItemsPrefetch<D> y_next;
    y_next.Issue(local, vector, lane_first, format::lane_valid_count(elems, 0, lane_id()));
    uint32_t t = 0;
    if constexpr (format::Traits<D>::ELEM_BYTES == 2) {
      // Full tiles of a 16-bit sum: whole words, in a loop of its own (no spills at 64 registers: 680 -> 840 GB/s)
      if (vector && op.id == ReduceOpId::sum) {
        for (; t < dec.fast_tiles(); ++t) {
          uint32_t yw[ITEMS / 2], w[ITEMS / 2];
          y_next.TakeWords(yw);
          if (t + 1 < dec.tiles())
            y_next.Issue(local, vector, lane_first + uint64_t(t + 1) * format::TILE_ELEMS,
                         format::lane_valid_count(elems, t + 1, lane_id()));
          detail::decode_sum_words<D>(dec, t, yw, w);
          *reinterpret_cast<uint4*>(static_cast<uint8_t*>(out) + (lane_first + uint64_t(t) * format::TILE_ELEMS) * 2) =
              make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    }
    for (; t < dec.tiles(); ++t) {
      uint32_t x[ITEMS], y[ITEMS];
      y_next.Take(y);
      if (t + 1 < dec.tiles())
        y_next.Issue(local, vector, lane_first + uint64_t(t + 1) * format::TILE_ELEMS,
                     format::lane_valid_count(elems, t + 1, lane_id()));
      if (t < dec.fast_tiles()) {  // a constant count: the store is one vector
        dec.DecodeFastTile(t, x);
        thread::reduce_items<D>(op, x, y);
        store_items_any<D>(out, vector, lane_first + uint64_t(t) * format::TILE_ELEMS, ITEMS, x);
        continue;
      }
      const uint32_t cnt = dec.DecodeTile(t, x);
      thread::reduce_items<D>(op, x, y);
      store_items_any<D>(out, vector, lane_first + uint64_t(t) * format::TILE_ELEMS, cnt, x);
    }
    return dec.Finish();
  }

 private:
  const typename TablesOf<Code>::Decode& table_;
};

/// \brief Decode + forward: out = decode(chunk), and the chunk (exponent stream and its share of the planes)
/// is copied unchanged to fwd_chunk / fwd_planes for the next peer with 16-byte vectors, while the decoder
/// reads the same bytes (DRAM sees them once; the second read is served by L1/L2).
template <DType D, class Code = thread::PairCode>
class WarpChunkDecodeForward {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no fused steps");
  using Dec = WarpChunkDecoder<D, Code>;

 public:
  ZIPCOMM_DEVICE explicit WarpChunkDecodeForward(const typename TablesOf<Code>::Decode& table) : table_(table) {}

  /// fwd_chunk: 16-byte aligned, `bytes` long (nullptr: the caller forwards the exponent stream itself).
  ZIPCOMM_DEVICE Status DecodeForward(const uint8_t* chunk, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                                      const ConstPlanes& planes, uint32_t check, void* out, uint8_t* fwd_chunk,
                                      const Planes& fwd_planes) {
    const bool vector = aligned16(out);
    const uint64_t lane_first = first_tile * format::TILE_ELEMS + lane_id() * ITEMS;
    Dec dec(table_);
    ChunkForward forward;
    forward.chunk = fwd_chunk;
    forward.planes = fwd_planes;
    dec.Begin(chunk, bytes, elems, first_tile, planes, check, &forward);  // copies the chunk's bytes on
    uint32_t t = 0;
    for (; t < dec.fast_tiles(); ++t) {  // a constant count: the store is one vector
      uint32_t x[ITEMS];
      dec.DecodeFastTile(t, x);
      store_items_any<D>(out, vector, lane_first + uint64_t(t) * format::TILE_ELEMS, ITEMS, x);
    }
    for (; t < dec.tiles(); ++t) {
      uint32_t x[ITEMS];
      const uint32_t cnt = dec.DecodeTile(t, x);
      store_items_any<D>(out, vector, lane_first + uint64_t(t) * format::TILE_ELEMS, cnt, x);
    }
    return dec.Finish();
  }

 private:
  const typename TablesOf<Code>::Decode& table_;
};

/// \brief The tiles of op(decode(chunk), local), in order, as an encoder's loader wants them (the source
/// behind decode + reduce + encode). Asking for tile 0 again restarts the decoder: a chunk the encoder
/// stores raw is decoded and reduced a second time. status() is the first pass's outcome.
template <DType D, class Code = thread::PairCode>
class ReducedTileSource {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no fused steps");
  using Dec = WarpChunkDecoder<D, Code>;

 public:
  ZIPCOMM_DEVICE ReducedTileSource(const typename TablesOf<Code>::Decode& table, const void* local,
                                   const ReduceOp& op)
      : dec_(table), local_(local), op_(op), vector_(aligned16(local)) {}

  /// The incoming chunk and its stored check (bytes = 0: known to be corrupt; only its planes are read).
  ZIPCOMM_DEVICE void set_chunk(const uint8_t* chunk, uint32_t bytes, uint32_t elems, uint64_t first_tile,
                                const ConstPlanes& planes, uint32_t check) {
    chunk_ = chunk;
    check_ = check;
    bytes_ = bytes;
    elems_ = elems;
    first_tile_ = first_tile;
    planes_ = planes;
    passes_ = 0;
    status_ = Status::ok;
  }

  ZIPCOMM_DEVICE void operator()(uint32_t t, uint32_t (&x)[ITEMS]) {
    if (t == 0) {
      dec_.Begin(chunk_, bytes_, elems_, first_tile_, planes_, check_);
      ++passes_;
      load_local(0);
    }
    uint32_t y[ITEMS];
    uint32_t yw[ITEMS / 2];
    const bool words = detail::take_sum_words<D>(op_, dec_, t, y_next_, yw);
    if (!words) y_next_.Take(y);
    if (t + 1 < dec_.tiles()) load_local(t + 1);  // loads while tile t decodes
    if constexpr (format::Traits<D>::ELEM_BYTES == 2) {
      if (words) {
        uint32_t w[ITEMS / 2];
        detail::decode_sum_words<D>(dec_, t, yw, w);
#pragma unroll
        for (int p = 0; p < ITEMS / 2; ++p) x[2 * p] = w[p] & 0xFFFFu, x[2 * p + 1] = w[p] >> 16;
      }
    }
    if (!words) {
      dec_.DecodeTile(t, x);
      thread::reduce_items<D>(op_, x, y);
    }
    if (passes_ == 1 && t + 1 == dec_.tiles()) status_ = dec_.Finish();
  }

  ZIPCOMM_DEVICE Status status() const { return status_; }

 private:
  ZIPCOMM_DEVICE void load_local(uint32_t t) {
    const uint64_t first = (first_tile_ + t) * format::TILE_ELEMS + lane_id() * ITEMS;
    y_next_.Issue(local_, vector_, first, format::lane_valid_count(elems_, t, lane_id()));
  }

  Dec dec_;
  LaneItemsPrefetch<D> y_next_;
  const void* local_;
  ReduceOp op_;
  bool vector_;
  const uint8_t* chunk_ = nullptr;
  uint32_t bytes_ = 0, elems_ = 0, passes_ = 0, check_ = 0;
  uint64_t first_tile_ = 0;
  ConstPlanes planes_{};
  Status status_ = Status::ok;
};

/// \brief Decode + reduce + encode: the reduced chunk is encoded again with no uncompressed copy in memory.
/// Two phases, like WarpChunkEncoder: Encode() decodes, reduces and codes (the result's planes are written
/// at once); Store() writes the exponent stream once the caller knows where the chunk goes. A chunk whose
/// result does not compress is stored raw: Store() then decodes and reduces it a second time.
/// \code
/// using Fused = zipcomm::warp::WarpChunkDecodeReduceEncode<zipcomm::DType::bf16>;
/// extern __shared__ zipcomm::warp::PairTables tables;         // 69 KB per block, LoadPairTable(tables, cta)
/// __shared__ Fused::TempStorage temp[WARPS];                 // 8 KB per warp
/// Fused f(temp[warp], tables, local, zipcomm::ReduceOp::sum());
/// zipcomm::Status s;
/// zipcomm::warp::ChunkInfo info = f.Encode(chunk, bytes, check, elems, first_tile, in_planes, out_planes, s);
/// f.Store(out_chunk, info);                                   // 16-byte aligned, info.bytes long
/// \endcode
/// `bytes` = 0 marks an incoming chunk already known to be corrupt: nothing of it is read but its planes,
/// and the status is corrupt_stream.
template <DType D, class Code = thread::PairCode>
class WarpChunkDecodeReduceEncode {
  static_assert(comm_dtype_supported(D), "the fp8 dtypes are codec only: no fused steps");
  using Enc = WarpChunkEncoder<D, Code>;

 public:
  using TempStorage = typename Enc::TempStorage;

  ZIPCOMM_DEVICE WarpChunkDecodeReduceEncode(TempStorage& temp, const typename TablesOf<Code>::Both& tables,
                                             const void* local,
                                             const ReduceOp& op)
      : source_(tables.decode, local, op), enc_(temp, tables.encode) {}

  ZIPCOMM_DEVICE ChunkInfo Encode(const uint8_t* chunk, uint32_t bytes, uint32_t check, uint32_t elems,
                                  uint64_t first_tile, const ConstPlanes& in_planes, const Planes& out_planes,
                                  Status& status) {
    source_.set_chunk(chunk, bytes, elems, first_tile, in_planes, check);
    elems_ = elems;
    const ChunkInfo info = enc_.Encode(elems, first_tile, source_, out_planes);
    status = source_.status();
    return info;
  }

  ZIPCOMM_DEVICE void Store(uint8_t* dst, const ChunkInfo& info) { enc_.Store(dst, elems_, info, source_); }

 private:
  ReducedTileSource<D, Code> source_;
  Enc enc_;
  uint32_t elems_ = 0;
};

}  // namespace warp
}  // namespace zipcomm
