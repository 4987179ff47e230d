// P2P pipeline, device side: the sender and receiver kernels of the slot-ring protocol (p2p/protocol.cuh), each a
// persistent grid whose blocks run the block-level sender (p2p/block_frame_sender.cuh) or receiver
// (p2p/block_frame_receiver.cuh); a caller's own kernel can run those directly instead.
#pragma once

#include <cuda_runtime.h>

#include "../../config.hpp"
#include "../../format.hpp"
#include "../../thread/pair_code.hpp"
#include "block_frame_receiver.cuh"
#include "block_frame_sender.cuh"
#include "kernel_args.cuh"

namespace zipcomm {
namespace comm {

/// Dynamic shared memory of p2p_send_kernel: its block's BlockFrameSender storage.
template <DType D, class Code = thread::PairCode>
using P2PSendStorage = typename BlockFrameSender<D, P2PPolicy::WARPS, Code>::TempStorage;
/// Dynamic shared memory of p2p_recv_kernel: its block's BlockFrameReceiver storage.
template <DType D, class Code = thread::PairCode>
using P2PRecvStorage = typename BlockFrameReceiver<D, P2PPolicy::WARPS, Code>::TempStorage;

/// Sends frames [a.frame_begin, a.frame_end) of a.plan into a.ring: a persistent grid of P2PPolicy::THREADS
/// threads, sizeof(P2PSendStorage<D, Code>) bytes of dynamic shared memory. P2PSender fills `a` and launches it.
/// \code
/// zipcomm::comm::p2p_send_kernel<zipcomm::DType::bf16>
///     <<<blocks, zipcomm::comm::P2PPolicy::THREADS, sizeof(zipcomm::comm::P2PSendStorage<zipcomm::DType::bf16>),
///        stream>>>(args);
/// \endcode
template <DType D, class Code = thread::PairCode>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_send_kernel(SendArgs a);

/// Receives frames [a.frame_begin, a.frame_end) of a.plan from a.ring and decodes them into a.out: a persistent
/// grid of P2PPolicy::THREADS threads, sizeof(P2PRecvStorage<D, Code>) bytes of dynamic shared memory.
/// P2PReceiver fills `a` and launches it.
template <DType D, class Code = thread::PairCode>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_recv_kernel(RecvArgs a);

}  // namespace comm
}  // namespace zipcomm

#include "detail/recv_kernel.cuh"
#include "detail/send_kernel.cuh"
#include "detail/stream_kernels.cuh"
