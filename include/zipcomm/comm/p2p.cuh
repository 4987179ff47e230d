// zipcomm P2P pipeline: the protocol (p2p_protocol.cuh), the sender/receiver kernels (p2p_kernels.cuh) and the
// host-side ends and links (p2p_link.cuh). docs/P2P.md describes the design; examples/02_p2p_pipeline and
// examples/03_rl_weight_sync use it.
#pragma once

#include "p2p_protocol.cuh"
#include "p2p_kernels.cuh"
#include "p2p_link.cuh"
