// zipcomm P2P pipeline: the protocol (p2p/protocol.cuh), the block-level sender and receiver
// (p2p/block_frame_sender.cuh, p2p/block_frame_receiver.cuh) and their kernels (p2p/kernels.cuh), the ends on
// one GPU (p2p/endpoints.cuh) and the two links built from them (p2p/host_staging_link.cuh, p2p/peer_link.cuh).
// docs/P2P.md describes the design; examples/02_p2p_pipeline and examples/03_rl_weight_sync use it.
#pragma once

#include "p2p/block_frame_receiver.cuh"
#include "p2p/block_frame_sender.cuh"
#include "p2p/endpoints.cuh"
#include "p2p/frame_ring.cuh"
#include "p2p/host_staging_link.cuh"
#include "p2p/kernels.cuh"
#include "p2p/options.cuh"
#include "p2p/peer_link.cuh"
#include "p2p/protocol.cuh"
#include "p2p/staged_raw_copy.cuh"
