// zipcomm ring allreduce: the schedule (ring/schedule.cuh), the block collective and its persistent kernel
// (ring/allreduce.cuh), the raw/compressed switch (ring/switch.cuh) and the host side for the ranks one process
// drives (ring/communicator.cuh). docs/RING.md describes the design; examples/05_ring_allreduce uses it.
#pragma once

#include "ring/allreduce.cuh"
#include "ring/communicator.cuh"
#include "ring/launch_args.cuh"
#include "ring/schedule.cuh"
#include "ring/switch.cuh"
