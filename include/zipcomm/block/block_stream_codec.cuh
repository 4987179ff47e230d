// Block level: a group of WARPS warps encodes or decodes a whole stream (header, planes, table, chunks)
// inside the caller's kernel. Synchronization goes only through the group type, so the same code runs in a
// plain kernel (cooperative_groups::thread_block), in a persistent communication kernel, and in an NCCL
// device-API kernel (ncclCoopCta): the group needs sync(), thread_rank() and size().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/reduce_op.hpp"
#include "../warp/lane_io.cuh"
#include "../warp/pair_tables.cuh"
#include "../warp/warp_chunk_decoder.cuh"
#include "../warp/warp_chunk_encoder.cuh"

namespace zipcomm {
namespace block {

/// \brief Encodes n elements into one complete stream, WARPS chunks at a time (one per warp); a block-wide
/// scan of the chunk sizes places them, so no global state is needed. Suited to messages a block owns:
/// a ring step's slice, one chunk of a P2P pipeline.
///
/// \tparam WARPS  warps in the group; the group must have exactly WARPS * 32 threads
/// \code
/// using Enc = zipcomm::block::BlockStreamEncoder<zipcomm::DType::bf16, 8>;
/// extern __shared__ Enc::TempStorage temp;   // ~69 KB for 8 warps: use dynamic shared memory
/// auto cta = cooperative_groups::this_thread_block();
/// uint64_t bytes = Enc(temp).Encode(cta, d_in, n, d_out);   // same value in every thread
/// \endcode
/// d_out must be 16-byte aligned with room for format::max_compressed_bytes(D, n, chunk_log2). Chunks hold
/// 2^chunk_log2 elements (a constructor argument; default 16384: the block's warps take them in rounds, one
/// barrier each). The planes and the table are written as chunks complete; the header is written last. A
/// barrier (group.sync()) is needed before temp is reused for something else.
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockStreamEncoder {
  using WarpEnc = warp::WarpChunkEncoder<D, Code>;

 public:
  struct TempStorage {
    typename warp::TablesOf<Code>::Encode table;  // none for the fixed code
    typename WarpEnc::TempStorage warp[WARPS];
    uint32_t sizes[WARPS];
  };

  /// chunk_log2: 12..14 (anything else is taken as 14).
  ZIPCOMM_DEVICE explicit BlockStreamEncoder(TempStorage& temp, uint32_t chunk_log2 = format::MAX_CHUNK_LOG2)
      : temp_(temp), chunk_log2_(format::chunk_log2_valid(chunk_log2) ? chunk_log2 : format::MAX_CHUNK_LOG2) {}

  /// Encodes in[0, n). With an avg `pre_op`, each element is first scaled (a rank's own contribution to a
  /// reduction, thread::reduce_pre); the other operators leave the input as it is. The fp8 dtypes have no
  /// arithmetic: for them `pre_op` is not applied (pass none).
  template <class Group>
  ZIPCOMM_DEVICE uint64_t Encode(Group& group, const void* in, uint64_t n, uint8_t* out,
                                 const ReduceOp& pre_op = ReduceOp::sum()) {
    warp::ArrayTileSource<D> src(in, pre_op);
    return EncodeFrom(group, n, out, src);
  }

  /// Encodes n elements produced tile by tile by `source`, one object per thread with two members:
  ///   void begin(uint64_t chunk, uint32_t elems, uint64_t first_tile);   // before a chunk, warp-wide
  ///   void operator()(uint32_t tile, uint32_t (&x)[8]);                  // the lane's items of a tile
  /// Tiles of a chunk are asked for in order; a chunk stored raw asks for them a second time, from 0.
  template <class Group, class Source>
  ZIPCOMM_DEVICE uint64_t EncodeFrom(Group& group, uint64_t n, uint8_t* out, Source& source) {
    const uint32_t warp_id = uint32_t(group.thread_rank()) / 32;
    const uint32_t lane = warp::lane_id();
    const format::Layout L = format::layout_for(D, n, chunk_log2_);
    if (warp_id == 0) {
      format::for_section_gaps(L, lane, 32, [&](uint64_t b) { out[b] = 0; });
    }
    warp::LoadCodeTable(temp_.table, group);
    WarpEnc enc(temp_.warp[warp_id], temp_.table);
    uint64_t* table = reinterpret_cast<uint64_t*>(out + L.table_offset);
    uint64_t* low_table = reinterpret_cast<uint64_t*>(out + L.low_table_offset);
    uint32_t* checks = reinterpret_cast<uint32_t*>(out + L.check_offset);
    uint64_t base = 0;
    for (uint64_t round = 0; round * WARPS < L.num_chunks; ++round) {
      const uint64_t c = round * WARPS + warp_id;
      const bool mine = c < L.num_chunks;
      const uint32_t elems = mine ? L.chunk_elems(c) : 0;
      const uint64_t first_tile = L.chunk_first_tile(c);
      warp::ChunkInfo info{0, 0, false, 0};
      if (mine) {
        // every tile at full width: chunk c's low part starts where c full chunks' end
        const uint64_t low_start = c * format::full_low_chunk_bytes(D, 1u << chunk_log2_);
        source.begin(c, elems, first_tile);
        info = enc.Encode(elems, first_tile, source,
                          warp::Planes{out + L.plane0_offset, out + L.widths_offset, out + L.low_offset + low_start, true});
        if (format::has_low(D) && lane == 0) low_table[c] = low_start + format::full_low_chunk_bytes(D, elems);
      }
      if (lane == 0) temp_.sizes[warp_id] = info.bytes;
      group.sync();
      uint64_t exclusive = base, round_total = 0;
      for (int w = 0; w < WARPS; ++w) {
        const uint32_t s = temp_.sizes[w];
        if (uint32_t(w) < warp_id) exclusive += s;
        round_total += s;
      }
      if (mine) {
        enc.Store(out + L.exp_offset + exclusive, elems, info, source);
        if (lane == 0) {
          table[c] = exclusive + info.bytes;
          checks[c] = info.check;
        }
      }
      base += round_total;
      group.sync();  // sizes are rewritten next round
    }
    const uint64_t total = L.exp_offset + base;
    if (group.thread_rank() == 0)
      *reinterpret_cast<format::Header*>(out) = format::make_header(D, Code::ID, n, chunk_log2_, total, L.low_bytes);
    return total;
  }

 private:
  TempStorage& temp_;
  uint32_t chunk_log2_;
};

/// \brief Decodes a whole stream; each warp takes chunks warp, warp + WARPS, ... and hands every tile to
/// `sink(global_tile, x, count)` (the lane's 8 items as raw bits). Returns the same Status in every thread.
/// `in_bytes` bounds every read; streams of another dtype or code give Status::bad_header.
///
/// \code
/// using Dec = zipcomm::block::BlockStreamDecoder<zipcomm::DType::bf16, 8>;
/// extern __shared__ Dec::TempStorage temp;     // 64 KB: dynamic shared memory
/// Dec dec(temp);                               // one object for all the streams this block decodes
/// for (...) zipcomm::Status s = dec.Decode(cta, d_in, in_bytes, max_elems, sink);
/// \endcode
/// The decode table is loaded into temp by the object's first Decode and kept for its later ones: use temp for
/// something else only after the object's last Decode (a new object loads the table again).
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockStreamDecoder {
  using WarpDec = warp::WarpChunkDecoder<D, Code>;

 public:
  struct TempStorage {
    typename warp::TablesOf<Code>::Decode table;  // none for the fixed code
    // The stream being decoded, opened by one thread: warps read it per chunk, so its offsets take no registers
    // across the chunk loop (at 64 registers, 16 warps x 2 blocks per SM, they would spill).
    format::StreamView view;
    uint32_t status;
  };

  ZIPCOMM_DEVICE explicit BlockStreamDecoder(TempStorage& temp) : temp_(temp) {}

  /// Reads and checks the header and the gaps between the stream's sections; on success n is the element count.
  ZIPCOMM_DEVICE static Status ReadHeader(const uint8_t* in, uint64_t in_bytes, uint64_t max_elems, uint64_t& n) {
    format::StreamView view;
    const Status s = Open(in, in_bytes, max_elems, view);
    n = s == Status::ok ? view.layout.n : 0;
    return s;
  }

  template <class Group, class Sink>
  ZIPCOMM_DEVICE Status Decode(Group& group, const uint8_t* in, uint64_t in_bytes, uint64_t max_elems, Sink& sink) {
    const uint32_t warp_id = uint32_t(group.thread_rank()) / 32;
    const uint32_t lane = warp::lane_id();
    if (group.thread_rank() == 0) {
      const Status st = Open(in, in_bytes, max_elems, temp_.view);
      if (st != Status::ok) temp_.view.layout.num_chunks = 0;  // no chunk is read
      temp_.status = uint32_t(st);
    }
    if (!table_loaded_)
      warp::LoadCodeTable(temp_.table, group);  // syncs the group
    else
      group.sync();
    table_loaded_ = true;
    const format::StreamView& view = temp_.view;
    WarpDec dec(temp_.table);
    for (uint64_t c = warp_id; c < view.layout.num_chunks; c += WARPS) {
      const uint8_t *chunk, *low;
      uint32_t bytes, low_bytes;
      const uint32_t elems = view.layout.chunk_elems(c);
      Status s = Status::ok;
      if (!view.chunk(D, c, chunk, bytes) || !view.chunk_low(D, c, low, low_bytes)) {
        s = Status::corrupt_stream;
      } else {
        const uint64_t first_tile = view.layout.chunk_first_tile(c);
        auto chunk_sink = [&](uint32_t t, const uint32_t (&x)[warp::ITEMS], uint32_t cnt) {
          sink(first_tile + t, x, cnt);
        };
        s = dec.Decode(chunk, bytes, elems, first_tile, view.chunk_planes(D, c), view.check(c), chunk_sink);
      }
      if (s != Status::ok && lane == 0) atomicCAS(&temp_.status, 0u, uint32_t(s));
    }
    group.sync();
    const Status result = static_cast<Status>(temp_.status);
    group.sync();  // status and view are rewritten by the next Decode; temp may be reused after the last one
    return result;
  }

 private:
  ZIPCOMM_DEVICE static Status Open(const uint8_t* in, uint64_t in_bytes, uint64_t max_elems,
                                    format::StreamView& view) {
    Status s = view.open(in, in_bytes, D, Code::ID);
    if (s == Status::ok && view.layout.n > max_elems) s = Status::buffer_too_small;
    return s;
  }

  TempStorage& temp_;
  bool table_loaded_ = false;
};

}  // namespace block
}  // namespace zipcomm
