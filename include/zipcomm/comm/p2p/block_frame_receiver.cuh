// P2P pipeline, device side: the receiver's block-level logic (BlockFrameReceiver), for p2p_recv_kernel or a
// caller's own persistent kernel. The protocol it speaks is in p2p/protocol.cuh; docs/P2P.md walks through it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "../../warp/pair_tables.cuh"
#include "kernel_args.cuh"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// \brief Receives frames [a.frame_begin, a.frame_end) of a.plan from a.ring and decodes them into a.out, run
/// by a group of WARPS * 32 threads (a thread block, or any group with thread_rank(), size() and sync()). Each
/// warp takes items in order from a.item_counter, so any number of groups share one transfer; the transfer is
/// complete once a.done_word holds a.done_value (or the launch's frames_done count reached its frames), never
/// when one group returns. Every wait is bounded and every error goes to a.control (SideControl::status), as in
/// p2p_recv_kernel, which is this class run by each block of a persistent grid.
///
/// The group's warps return independently: call g.sync() before reusing TempStorage.
/// \code
/// using Receiver = zipcomm::comm::BlockFrameReceiver<zipcomm::DType::bf16, 8>;
/// extern __shared__ __align__(16) unsigned char smem[];       // sizeof(Receiver::TempStorage): 64 KB, dynamic
/// auto& temp = *reinterpret_cast<Receiver::TempStorage*>(smem);
/// auto cta = cooperative_groups::this_thread_block();          // 256 threads
/// Receiver(temp).Receive(cta, args);                           // args: a RecvArgs, as P2PReceiver fills it
/// cta.sync();
/// \endcode
template <DType D, int WARPS, class Code = thread::PairCode>
class BlockFrameReceiver {
 public:
  /// The decode table (loaded by Receive).
  struct TempStorage {
    typename warp::TablesOf<Code>::Decode table;  // none for the fixed code
  };

  ZIPCOMM_DEVICE explicit BlockFrameReceiver(TempStorage& temp) : temp_(temp) {}

  /// Loads the decode table (group.sync()), then decodes items until a.item_counter passes the launch's last
  /// frame or the transfer is aborted.
  template <class Group>
  ZIPCOMM_DEVICE void Receive(Group& g, const RecvArgs& a);

 private:
  TempStorage& temp_;
};

}  // namespace comm
}  // namespace zipcomm

#include "detail/block_frame_receiver.cuh"
