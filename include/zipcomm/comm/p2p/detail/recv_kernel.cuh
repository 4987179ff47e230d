// P2P pipeline: the body of p2p_recv_kernel (declared in p2p/kernels.cuh): each block runs BlockFrameReceiver.
#pragma once

#include <cooperative_groups.h>

#include "../kernels.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_recv_kernel(RecvArgs a) {
  extern __shared__ __align__(16) unsigned char p2p_smem[];
  auto cta = cooperative_groups::this_thread_block();
  BlockFrameReceiver<D, P2PPolicy::WARPS, Code>(*reinterpret_cast<P2PRecvStorage<D, Code>*>(p2p_smem))
      .Receive(cta, a);
}

}  // namespace comm
}  // namespace zipcomm
