// P2P pipeline, device side: the sender's block-level logic (BlockFrameSender), for p2p_send_kernel or a
// caller's own persistent kernel. The protocol it speaks is in p2p/protocol.cuh; docs/P2P.md walks through it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "../../warp/pair_tables.cuh"
#include "../../warp/warp_chunk_encoder.cuh"
#include "kernel_args.cuh"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// \brief Sends frames [a.frame_begin, a.frame_end) of a.plan into a.ring, run by a group of WARPS * 32
/// threads (a thread block, or any group with thread_rank(), size() and sync()). Each warp takes items in order
/// from a.item_counter, so any number of groups (of one launch or of several kernels) share one transfer;
/// every wait on the peer is bounded and every error goes to a.control (SideControl::status), as in
/// p2p_send_kernel, which is this class run by each block of a persistent grid.
///
/// The group's warps return independently (a warp stops at its first error): call g.sync() before reusing
/// TempStorage. a.scratch holds one area of a.scratch_bytes per warp of every group: group_index * WARPS
/// areas precede this group's.
/// \code
/// using Sender = zipcomm::comm::BlockFrameSender<zipcomm::DType::bf16, 8>;
/// extern __shared__ __align__(16) unsigned char smem[];       // sizeof(Sender::TempStorage): ~69 KB, dynamic
/// auto& temp = *reinterpret_cast<Sender::TempStorage*>(smem);
/// auto cta = cooperative_groups::this_thread_block();          // 256 threads
/// Sender(temp).Send(cta, args, blockIdx.x);                    // args: a SendArgs, as P2PSender fills it
/// cta.sync();
/// if (cta.thread_rank() == 0 && args.control->status != 0) { /* this side failed: Status(status) */ }
/// \endcode
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockFrameSender {
  using Encoder = warp::WarpChunkEncoder<D, Code>;

 public:
  /// The encode table (loaded by Send) and each warp's encoder storage.
  struct TempStorage {
    typename warp::TablesOf<Code>::Encode table;  // none for the fixed code
    typename Encoder::TempStorage warp[WARPS];
  };

  ZIPCOMM_DEVICE explicit BlockFrameSender(TempStorage& temp) : temp_(temp) {}

  /// Loads the encode table (group.sync()), then sends items until a.item_counter passes the launch's last
  /// frame or the transfer is aborted. group_index: which of the side's concurrently running groups this is.
  template <class Group>
  ZIPCOMM_DEVICE void Send(Group& g, const SendArgs& a, uint32_t group_index);

 private:
  TempStorage& temp_;
};

}  // namespace comm
}  // namespace zipcomm

#include "detail/block_frame_sender.cuh"
