// P2P pipeline, device side: the sender and receiver kernels of the slot-ring protocol (p2p/protocol.cuh).
//
// Sender: warps take items in order; each waits until its frame's slot is free (credit), splits the item's
// sign/mantissa planes straight into the slot and counts them (the last one publishes the frame's planes
// flag: split-send), codes the exponents (warp::WarpChunkEncoder), places its chunk with a look-back over the
// earlier items of the frame, writes it, and counts the item done; the frame's last item writes the item
// table and header and publishes the exponents flag.
// Receiver: warps take items in order; the warp holding a frame's first item (the leader) waits for the
// frame's flags on the ring, checks the header once, and mirrors what it saw into device memory; every warp then
// checks its item-table entry, decodes its item from the ring (GPU memory) into the output, and counts it done;
// the frame's last item hands the slot back (credit). A transfer is complete once every frame was decoded, never
// earlier.
// Every wait is bounded (Status::timeout) and gives up when the transfer was aborted.
#pragma once

#include <cuda_runtime.h>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "../../warp/pair_tables.cuh"
#include "../../warp/warp_chunk_encoder.cuh"
#include "kernel_args.cuh"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// Shared memory of p2p_send_kernel: the encode table and each warp's lane words.
template <DType D, class Code>
struct P2PSendSmem {
  warp::PairEncodeTable table;
  typename warp::WarpChunkEncoder<D, Code>::TempStorage warp[P2PPolicy::WARPS];
};

/// Sends frames [a.frame_begin, a.frame_end) of a.plan into a.ring: a persistent grid of P2PPolicy::THREADS
/// threads, sizeof(P2PSendSmem<D, Code>) bytes of dynamic shared memory. P2PSender fills `a` and launches it.
/// \code
/// zipcomm::comm::p2p_send_kernel<zipcomm::DType::bf16>
///     <<<blocks, zipcomm::comm::P2PPolicy::THREADS, sizeof(zipcomm::comm::P2PSendSmem<zipcomm::DType::bf16,
///        zipcomm::thread::PairCode>), stream>>>(args);
/// \endcode
template <DType D, class Code = thread::PairCode>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_send_kernel(SendArgs a);

/// Receives frames [a.frame_begin, a.frame_end) of a.plan from a.ring and decodes them into a.out: a persistent
/// grid of P2PPolicy::THREADS threads, sizeof(warp::PairDecodeTable) bytes of dynamic shared memory. P2PReceiver
/// fills `a` and launches it.
template <DType D, class Code = thread::PairCode>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_recv_kernel(RecvArgs a);

}  // namespace comm
}  // namespace zipcomm

#include "detail/recv_kernel.cuh"
#include "detail/send_kernel.cuh"
#include "detail/stream_kernels.cuh"
