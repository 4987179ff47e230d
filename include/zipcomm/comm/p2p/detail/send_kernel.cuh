// P2P pipeline: the body of p2p_send_kernel (declared in p2p/kernels.cuh): each block runs BlockFrameSender.
#pragma once

#include <cooperative_groups.h>

#include "../kernels.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_send_kernel(SendArgs a) {
  extern __shared__ __align__(16) unsigned char p2p_smem[];
  auto cta = cooperative_groups::this_thread_block();
  BlockFrameSender<D, P2PPolicy::WARPS, Code>(*reinterpret_cast<P2PSendStorage<D, Code>*>(p2p_smem))
      .Send(cta, a, blockIdx.x);
}

}  // namespace comm
}  // namespace zipcomm
