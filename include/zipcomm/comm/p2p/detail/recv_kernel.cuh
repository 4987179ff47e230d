// P2P pipeline: the body of p2p_recv_kernel (declared in p2p/kernels.cuh): each block runs BlockFrameReceiver.
#pragma once

#include <cooperative_groups.h>

#include "../../../detail/dynamic_smem.cuh"
#include "../kernels.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_recv_kernel(RecvArgs a) {
  auto cta = cooperative_groups::this_thread_block();
  auto& temp = *reinterpret_cast<P2PRecvStorage<D, Code>*>(zipcomm::detail::dynamic_smem_bytes);
  BlockFrameReceiver<D, P2PPolicy::WARPS, Code>(temp).Receive(cta, a);
}

}  // namespace comm
}  // namespace zipcomm
