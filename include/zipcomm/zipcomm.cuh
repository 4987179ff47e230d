// zipcomm umbrella header: the whole codec (host reference, thread/warp/block primitives, device-wide API).
#pragma once

#include "config.hpp"
#include "format.hpp"
#include "host/reference_codec.hpp"
#include "thread/pair_code.hpp"
#include "thread/float_bits.hpp"
#include "thread/reduce_op.hpp"
#include "warp/lane_io.cuh"
#include "warp/warp_chunk_decoder.cuh"
#include "warp/warp_chunk_encoder.cuh"
#include "warp/warp_chunk_fused.cuh"
#include "block/block_stream_codec.cuh"
#include "block/block_fused.cuh"
#include "device/device_codec.cuh"
#include "device/device_fused.cuh"
