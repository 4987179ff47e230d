// Block level: the fused steps of a compressed collective on whole streams, inside the caller's kernel.
//
//   BlockDecodeReduce        out[0, n) = op(decode(in), local)        (ring: the last reduce-scatter hop)
//   BlockDecodeReduceEncode  out stream = encode(op(decode(in), local)) (ring: a reduce-scatter hop)
//   BlockDecodeForward       out = decode(in); fwd = in, byte for byte  (ring: an all-gather hop)
//
// Each warp takes chunks warp, warp + WARPS, ...; synchronization goes only through the group (sync(),
// thread_rank(), size() with WARPS * 32 threads), so these run in a plain kernel (cooperative_groups
// thread_block), a persistent communication kernel or an NCCL device-API kernel (ncclCoopCta). Every member
// returns the same Status in every thread. The incoming stream must hold exactly n elements of D coded with
// Code (else size_mismatch / bad_header); it is read only inside [in, in + in_bytes). On an error status the
// outputs hold unspecified values. out may be the same array as local. Numeric semantics: docs/REDUCE.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "../thread/pair_code.hpp"
#include "../thread/reduce_op.hpp"
#include "../warp/lane_io.cuh"
#include "../warp/warp_chunk_decoder.cuh"
#include "../warp/warp_chunk_fused.cuh"
#include "block_stream_codec.cuh"

namespace zipcomm {
namespace block {
namespace detail {

/// Shared status word of a block: the first error wins.
struct BlockStatus {
  uint32_t word;
  template <class Group>
  ZIPCOMM_DEVICE void reset(Group& group) {
    if (group.thread_rank() == 0) word = 0;
    group.sync();
  }
  ZIPCOMM_DEVICE void report(Status s) {
    if (s != Status::ok) atomicCAS(&word, 0u, uint32_t(s));
  }
  template <class Group>
  ZIPCOMM_DEVICE Status collect(Group& group) {
    group.sync();
    const Status s = static_cast<Status>(word);
    group.sync();  // the caller may reuse temp storage after this
    return s;
  }
};

/// Opens a stream that must hold exactly n elements of D coded with Code.
template <DType D, class Code>
ZIPCOMM_DEVICE Status open_exact(format::StreamView& view, const uint8_t* in, uint64_t in_bytes, uint64_t n) {
  if (in == nullptr || reinterpret_cast<uintptr_t>(in) % 16) return Status::invalid_argument;
  Status s = view.open(in, in_bytes, D, Code::ID);
  if (s == Status::ok && view.layout.n != n) s = Status::size_mismatch;
  return s;
}

}  // namespace detail

/// \brief Decode + reduce of a whole stream: out[i] = combine(decode(in)[i], pre(local[i])), i < n.
/// \code
/// using Fused = zipcomm::block::BlockDecodeReduce<zipcomm::DType::bf16, 8>;
/// extern __shared__ Fused::TempStorage temp;      // 64 KB: dynamic shared memory
/// zipcomm::Status s = Fused(temp).DecodeReduce(cta, in, in_bytes, local, out, n, zipcomm::ReduceOp::sum());
/// \endcode
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockDecodeReduce {
  using WarpFused = warp::WarpChunkDecodeReduce<D, Code>;

 public:
  struct TempStorage {
    typename warp::TablesOf<Code>::Decode table;  // none for the fixed code
    detail::BlockStatus status;
  };

  ZIPCOMM_DEVICE explicit BlockDecodeReduce(TempStorage& temp) : temp_(temp) {}

  template <class Group>
  ZIPCOMM_DEVICE Status DecodeReduce(Group& group, const uint8_t* in, uint64_t in_bytes, const void* local, void* out,
                                     uint64_t n, const ReduceOp& op) {
    const uint32_t warp_id = uint32_t(group.thread_rank()) / 32;
    temp_.status.reset(group);
    format::StreamView view;
    Status st = detail::open_exact<D, Code>(view, in, in_bytes, n);
    if (st == Status::ok && (!reduce_op_valid(op) || (n && (!local || !out)))) st = Status::invalid_argument;
    if (st != Status::ok) {
      if (group.thread_rank() == 0) temp_.status.report(st);
      return temp_.status.collect(group);
    }
    warp::LoadCodeTable(temp_.table, group);
    WarpFused fused(temp_.table);
    for (uint64_t c = warp_id; c < view.layout.num_chunks; c += WARPS) {
      const uint8_t *chunk, *low;
      uint32_t bytes, low_bytes;
      const bool range_ok = view.chunk(D, c, chunk, bytes) && view.chunk_low(D, c, low, low_bytes);
      Status s = fused.DecodeReduce(chunk, bytes, view.layout.chunk_elems(c), view.layout.chunk_first_tile(c),
                                    view.chunk_planes(D, c), view.check(c), local, out, op);
      if (!range_ok) s = Status::corrupt_stream;
      if (warp::lane_id() == 0) temp_.status.report(s);
    }
    return temp_.status.collect(group);
  }

 private:
  TempStorage& temp_;
};

/// \brief Decode + forward of a whole stream: out[0, n) = decode(in), and fwd receives in's total_bytes
/// unchanged (fwd: 16-byte aligned, fwd_capacity bytes). Each chunk's bytes are copied by the warp that
/// decodes it, while they are hot in L1/L2 (DRAM reads them once).
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockDecodeForward {
  using WarpFused = warp::WarpChunkDecodeForward<D, Code>;

 public:
  struct TempStorage {
    typename warp::TablesOf<Code>::Decode table;  // none for the fixed code
    detail::BlockStatus status;
  };

  ZIPCOMM_DEVICE explicit BlockDecodeForward(TempStorage& temp) : temp_(temp) {}

  template <class Group>
  ZIPCOMM_DEVICE Status DecodeForward(Group& group, const uint8_t* in, uint64_t in_bytes, void* out, uint64_t n,
                                      uint8_t* fwd, uint64_t fwd_capacity) {
    const uint32_t warp_id = uint32_t(group.thread_rank()) / 32;
    const uint32_t lane = warp::lane_id();
    temp_.status.reset(group);
    format::StreamView view;
    Status st = detail::open_exact<D, Code>(view, in, in_bytes, n);
    if (st == Status::ok && (!fwd || reinterpret_cast<uintptr_t>(fwd) % 16 || (n && !out))) st = Status::invalid_argument;
    if (st == Status::ok && fwd_capacity < view.total_bytes()) st = Status::buffer_too_small;
    if (st != Status::ok) {
      if (group.thread_rank() == 0) temp_.status.report(st);
      return temp_.status.collect(group);
    }
    const format::Layout& L = view.layout;
    if (warp_id == 0) {
      // Header, the alignment gaps and the chunk tables: everything but raw bits and chunk streams.
      for (uint64_t b = lane; b < L.plane0_offset; b += 32) fwd[b] = in[b];
      format::for_section_gaps(L, lane, 32, [&](uint64_t b) { fwd[b] = in[b]; });
      // chunk ends, low ends, checks and their padding: 16-byte aligned at both ends
      const uint4* src = reinterpret_cast<const uint4*>(in + L.table_offset);
      uint4* dst = reinterpret_cast<uint4*>(fwd + L.table_offset);
      for (uint64_t i = lane; i < (L.low_offset - L.table_offset) / 16; i += 32) dst[i] = src[i];
    }
    warp::LoadCodeTable(temp_.table, group);
    WarpFused fused(temp_.table);
    for (uint64_t c = warp_id; c < L.num_chunks; c += WARPS) {
      const uint8_t *chunk, *low;
      uint32_t bytes, low_bytes;
      const bool range_ok = view.chunk(D, c, chunk, bytes) && view.chunk_low(D, c, low, low_bytes);
      uint8_t* fwd_chunk = range_ok ? fwd + (chunk - in) : nullptr;
      const warp::Planes fwd_planes{fwd + L.plane0_offset, fwd + L.widths_offset, fwd + (low - in), false};
      Status s = fused.DecodeForward(chunk, bytes, L.chunk_elems(c), L.chunk_first_tile(c),
                                     view.chunk_planes(D, c), view.check(c), out, fwd_chunk, fwd_planes);
      if (!range_ok) s = Status::corrupt_stream;
      if (lane == 0) temp_.status.report(s);
    }
    return temp_.status.collect(group);
  }

 private:
  TempStorage& temp_;
};

/// \brief Decode + reduce + encode of a whole stream: out = encode(op(decode(in), pre(local))), with no
/// uncompressed intermediate in memory, in the incoming stream's chunk size. out: 16-byte aligned, out_capacity
/// >= format::max_compressed_bytes(D, n, that chunk_log2); out_bytes receives the stream size (in every thread).
/// \code
/// using Fused = zipcomm::block::BlockDecodeReduceEncode<zipcomm::DType::bf16, 8>;
/// extern __shared__ Fused::TempStorage temp;      // ~133 KB for 8 warps: dynamic shared memory
/// uint64_t bytes;
/// zipcomm::Status s = Fused(temp).DecodeReduceEncode(cta, in, in_bytes, local, n, op, out, cap, bytes);
/// \endcode
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockDecodeReduceEncode {
  using Enc = BlockStreamEncoder<D, WARPS, Code>;

  // Per thread: finds chunk c of the incoming stream for the tile source.
  struct StreamSource {
    warp::ReducedTileSource<D, Code> tiles;
    const format::StreamView* view;
    detail::BlockStatus* status;
    bool pending = false;  // a chunk's first-pass status not yet reported
    ZIPCOMM_DEVICE void begin(uint64_t c, uint32_t elems, uint64_t first_tile) {
      flush();
      const uint8_t *chunk, *low;
      uint32_t bytes, low_bytes;
      // an inconsistent chunk: the decoder reports corrupt_stream and reads nothing
      if (!view->chunk(D, c, chunk, bytes) || !view->chunk_low(D, c, low, low_bytes)) bytes = 0;
      tiles.set_chunk(chunk, bytes, elems, first_tile, view->chunk_planes(D, c), view->check(c));
      pending = true;
    }
    ZIPCOMM_DEVICE void operator()(uint32_t t, uint32_t (&x)[warp::ITEMS]) { tiles(t, x); }
    ZIPCOMM_DEVICE void flush() {
      if (pending && warp::lane_id() == 0) status->report(tiles.status());
      pending = false;
    }
  };

 public:
  struct TempStorage {
    typename warp::TablesOf<Code>::Decode dec_table;  // none for the fixed code
    typename Enc::TempStorage enc;
    detail::BlockStatus status;
  };

  ZIPCOMM_DEVICE explicit BlockDecodeReduceEncode(TempStorage& temp) : temp_(temp) {}

  template <class Group>
  ZIPCOMM_DEVICE Status DecodeReduceEncode(Group& group, const uint8_t* in, uint64_t in_bytes, const void* local,
                                           uint64_t n, const ReduceOp& op, uint8_t* out, uint64_t out_capacity,
                                           uint64_t& out_bytes) {
    const uint32_t warp_id = uint32_t(group.thread_rank()) / 32;
    out_bytes = 0;
    temp_.status.reset(group);
    format::StreamView view;
    Status st = detail::open_exact<D, Code>(view, in, in_bytes, n);
    if (st == Status::ok && (!reduce_op_valid(op) || !out || reinterpret_cast<uintptr_t>(out) % 16 || (n && !local)))
      st = Status::invalid_argument;
    if (st == Status::ok && out_capacity < format::max_compressed_bytes(D, n, view.layout.chunk_log2))
      st = Status::buffer_too_small;
    if (st != Status::ok) {
      if (group.thread_rank() == 0) temp_.status.report(st);
      return temp_.status.collect(group);
    }
    warp::LoadCodeTable(temp_.dec_table, group);
    StreamSource source{warp::ReducedTileSource<D, Code>(temp_.dec_table, local, op), &view, &temp_.status};
    // chunk c of the new stream is chunk c of the incoming one, decoded and reduced
    const uint64_t total = Enc(temp_.enc, view.layout.chunk_log2).EncodeFrom(group, n, out, source);
    source.flush();
    const Status result = temp_.status.collect(group);
    out_bytes = result == Status::ok ? total : 0;
    return result;
  }

 private:
  TempStorage& temp_;
};

}  // namespace block
}  // namespace zipcomm
