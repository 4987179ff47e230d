// P2P pipeline: the body of p2p_send_kernel (declared in p2p/kernels.cuh): each block runs BlockFrameSender.
#pragma once

#include <cooperative_groups.h>

#include "../../../detail/dynamic_smem.cuh"
#include "../kernels.cuh"

namespace zipcomm {
namespace comm {

template <DType D, class Code>
__global__ void __launch_bounds__(P2PPolicy::THREADS, 2) p2p_send_kernel(SendArgs a) {
  auto cta = cooperative_groups::this_thread_block();
  auto& temp = *reinterpret_cast<P2PSendStorage<D, Code>*>(zipcomm::detail::dynamic_smem_bytes);
  BlockFrameSender<D, P2PPolicy::WARPS, Code>(temp).Send(cta, a, blockIdx.x);
}

}  // namespace comm
}  // namespace zipcomm
