// Device-wide, stream-ordered entry points of the quantization tier ("ZPQT", LOSSY and opt-in; docs/QUANT.md):
// quantize a tensor into a message, dequantize a message. A message's bytes and the elements it reconstructs are
// the host reference's (reference_quant.hpp), bit for bit. They need no temp storage, allocate nothing, never
// synchronize the host, and write a Status to device memory; an argument error found on the host is written there
// too, in stream order, and returned as cudaErrorInvalidValue.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../format.hpp"
#include "quant_format.hpp"
#include "warp_group_dequantizer.cuh"
#include "warp_group_quantizer.cuh"

namespace zipcomm {
namespace quant {
namespace device {
namespace detail {

/// 8 warps per block, at most 80 registers per thread (the kernels need 72-80 without spilling): 3 blocks
/// (24 warps) per SM, each warp with its next tile's 2 KB of loads in flight while it works on the current one.
struct QuantPolicy {
  static constexpr int WARPS = 8;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int MIN_BLOCKS = 3;
  static constexpr int FUSED_MIN_BLOCKS = 2;  // dequantize + reduce / forward: 80 registers spilled 32-48 bytes at 3
};

struct QuantizeArgs {
  const void* in;
  uint64_t n;
  uint8_t* out;
  Status* status;
  DType dtype;
  QuantMode mode;
  uint32_t bits, group;
};

struct DequantizeArgs {
  const uint8_t* msg;
  uint64_t msg_bytes;
  void* out;
  uint64_t out_capacity_bytes;
  Status* status;
  const uint8_t* local = nullptr;  // dequantize + reduce: the local operand, n elements (the header's count)
  uint64_t n = 0;                  // dequantize + reduce: the element count the caller expects
  ReduceOp op;
  uint8_t* fwd = nullptr;          // dequantize + forward: where the message's bytes are copied
  uint64_t fwd_capacity = 0;
};

ZIPCOMM_DEVICE uint64_t global_warp() {
  return uint64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
}
ZIPCOMM_DEVICE uint64_t grid_warps() { return uint64_t(gridDim.x) * (blockDim.x / 32); }

/// Warps take tiles warp, warp + warps, ...; each starts the loads of its next tile before quantizing this one.
template <DType D>
__device__ __forceinline__ void quantize_tiles(const QuantizeArgs& a) {
  const Layout l = layout_for(a.mode, a.bits, a.group, a.n);
  const uint64_t first = global_warp(), warps = grid_warps();
  if (first == 0) warp::write_frame(a.out, a.dtype, l);
  using Quantizer = warp::WarpGroupQuantizer<D>;
  const uint64_t tiles = format::div_up(a.n, Quantizer::TILE_ELEMS);
  if (first >= tiles) return;
  const Quantizer q(l, a.out);
  const bool aligned = reinterpret_cast<uintptr_t>(a.in) % 16 == 0;
  warp::LaneItems<D> items = warp::load_lane_items<D>(a.in, aligned, a.n, first);
  Status st = Status::ok;
  for (uint64_t t = first; t < tiles; t += warps) {
    warp::LaneItems<D> ahead = items;
    if (t + warps < tiles) ahead = warp::load_lane_items<D>(a.in, aligned, a.n, t + warps);
    if (q.Quantize(items) != Status::ok) st = Status::not_finite;
    items = ahead;
  }
  if (warp::lane_id() == 0) warp::detail::report(a.status, st);
}

template <DType D>
__global__ void __launch_bounds__(QuantPolicy::THREADS, QuantPolicy::MIN_BLOCKS) quantize_kernel(QuantizeArgs a) {
  quantize_tiles<D>(a);
}

/// Warps take tiles warp, warp + warps, ...; each starts the loads of its next tile before it reconstructs this one.
/// What a dequantizing kernel does besides dequantizing: its own instantiation each, so that the plain
/// dequantize carries none of the others' registers.
enum class ReceiveStep { dequantize, reduce, forward };

/// Dequantize + forward: tile t's warp also copies the message's t-th share of 16-byte vectors on, so the grid
/// sweeps the message once and each decode's reads hit the lines the copy just brought into L2. The share is
/// loaded before the tile is reconstructed and stored after, so its loads wait beside the tile's work.
struct ForwardShare {
  static constexpr uint32_t VECS = 4;  // per lane: a tile's share is at most 80 vectors (8-bit codes, groups of 32)
  uint4 v[VECS];
  uint64_t begin = 0, end = 0;

  ZIPCOMM_DEVICE ForwardShare(const DequantizeArgs& a, const Layout& l, uint64_t tiles, uint64_t t) {
    const uint64_t vecs = l.total_bytes / 16, share = format::div_up(vecs, tiles ? tiles : 1);
    begin = t * share < vecs ? t * share : vecs;
    end = begin + share < vecs ? begin + share : vecs;
    const uint4* in = reinterpret_cast<const uint4*>(a.msg);
#pragma unroll
    for (uint32_t k = 0; k < VECS; ++k) {
      const uint64_t i = begin + k * 32 + warp::lane_id();
      if (i < end) v[k] = __ldg(in + i);
    }
  }
  ZIPCOMM_DEVICE void Store(const DequantizeArgs& a) const {
    uint4* out = reinterpret_cast<uint4*>(a.fwd);
#pragma unroll
    for (uint32_t k = 0; k < VECS; ++k) {
      const uint64_t i = begin + k * 32 + warp::lane_id();
      if (i < end) out[i] = v[k];
    }
    const uint4* in = reinterpret_cast<const uint4*>(a.msg);  // a share longer than VECS vectors a lane
    for (uint64_t i = begin + VECS * 32 + warp::lane_id(); i < end; i += 32) out[i] = __ldg(in + i);
  }
};

template <DType O, ReceiveStep STEP>
__device__ __forceinline__ void dequantize_tiles(const DequantizeArgs& a, const Layout& l, DType msg_dtype) {
  const uint64_t first = global_warp(), warps = grid_warps();
  const uint64_t tiles = format::div_up(l.n, warp::WarpGroupDequantizer::TILE_ELEMS);
  if constexpr (STEP == ReceiveStep::forward)
    if (tiles == 0 && first == 0) ForwardShare(a, l, 0, 0).Store(a);  // a message of no element: its header
  if (first >= tiles) return;
  __shared__ warp::WarpGroupDequantizer::TempStorage temp[QuantPolicy::WARPS];
  const warp::WarpGroupDequantizer dq(temp[threadIdx.x / 32], l, msg_dtype, a.msg);
  const bool aligned = (reinterpret_cast<uintptr_t>(a.out) | reinterpret_cast<uintptr_t>(a.local)) % 16 == 0;
  warp::LaneCodes codes = dq.Load(first);
  Status st = Status::ok;
  for (uint64_t t = first; t < tiles; t += warps) {
    warp::LaneCodes ahead = codes;
    if (t + warps < tiles) ahead = dq.Load(t + warps);
    Status s;
    if constexpr (STEP == ReceiveStep::reduce) {
      s = dq.DequantizeReduce<O>(codes, a.out, aligned, a.local, a.op);
    } else if constexpr (STEP == ReceiveStep::forward) {
      const ForwardShare share(a, l, tiles, t);
      s = dq.Dequantize<O>(codes, a.out, aligned);
      share.Store(a);
    } else {
      s = dq.Dequantize<O>(codes, a.out, aligned);
    }
    if (s != Status::ok) st = Status::corrupt_stream;
    codes = ahead;
  }
  if (warp::lane_id() == 0) warp::detail::report(a.status, st);
}

/// Every warp checks the header (and the destination's size) before it reads anything else: a message that
/// fails is read no further, and nothing is written.
template <DType O, ReceiveStep STEP>
__global__ void __launch_bounds__(QuantPolicy::THREADS, STEP == ReceiveStep::dequantize ? QuantPolicy::MIN_BLOCKS
                                                                                        : QuantPolicy::FUSED_MIN_BLOCKS)
    dequantize_kernel(DequantizeArgs a) {
  Header h{};
  Status hs = a.msg_bytes < HEADER_BYTES ? Status::corrupt_stream : Status::ok;
  if (hs == Status::ok) {
    h = *reinterpret_cast<const Header*>(a.msg);
    hs = validate_header(h, a.msg_bytes);
  }
  if (hs == Status::ok && STEP == ReceiveStep::reduce && h.num_elements != a.n) hs = Status::size_mismatch;
  if (hs == Status::ok && (h.num_elements * format::Traits<O>::ELEM_BYTES > a.out_capacity_bytes ||
                           (STEP == ReceiveStep::forward && h.total_bytes > a.fwd_capacity)))
    hs = Status::buffer_too_small;
  if (hs != Status::ok) {
    if (blockIdx.x == 0 && threadIdx.x == 0) warp::detail::report(a.status, hs);
    return;
  }
  const Layout l = layout_for(static_cast<QuantMode>(h.mode), h.bits, h.group_size, h.num_elements);
  if (global_warp() == 0 && !warp::frame_padding_zero(a.msg, l) && warp::lane_id() == 0)
    warp::detail::report(a.status, Status::corrupt_stream);
  dequantize_tiles<O, STEP>(a, l, static_cast<DType>(h.dtype));
}

template <int = 0>
__global__ void set_status_kernel(Status* status, Status value) {
  *status = value;
}

/// An argument error found on the host: written to d_status in stream order, and cudaErrorInvalidValue.
inline cudaError_t fail_in_stream(Status* d_status, Status s, cudaStream_t stream) {
  set_status_kernel<><<<1, 1, 0, stream>>>(d_status, s);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : cudaErrorInvalidValue;
}

/// Blocks for `tiles` tiles: one warp per tile, at most as many blocks as the GPU holds at once.
template <class Kernel>
inline cudaError_t grid_for(Kernel kernel, uint64_t tiles, int& grid) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, QuantPolicy::THREADS, 0);
  if (e != cudaSuccess) return e;
  const uint64_t want = format::div_up(tiles, QuantPolicy::WARPS);
  const uint64_t cap = uint64_t(sms) * uint64_t(per_sm > 0 ? per_sm : 1);
  grid = int(want < cap ? (want > 0 ? want : 1) : cap);
  return cudaSuccess;
}

/// Checks a dequantizing call's arguments and launches the kernel of `step`.
inline cudaError_t launch_dequantize(const DequantizeArgs& args, DType out_dtype, ReceiveStep step,
                                     cudaStream_t stream) {
  if (!args.status) return cudaErrorInvalidValue;
  Status check = Status::ok;
  if (!args.msg || reinterpret_cast<uintptr_t>(args.msg) % 16 || !original_dtype_valid(uint8_t(out_dtype)) ||
      (!args.out && args.out_capacity_bytes))
    check = Status::invalid_argument;
  else if (args.msg_bytes < HEADER_BYTES)
    check = Status::corrupt_stream;
  if (check != Status::ok) return fail_in_stream(args.status, check, stream);
  cudaError_t e = cudaMemsetAsync(args.status, 0, sizeof(Status), stream);  // Status::ok
  if (e != cudaSuccess) return e;
  // The element count is in the header, on the device; the message bounds it: b >= 2 bits per element.
  const uint64_t max_tiles = format::div_up(4 * args.msg_bytes, warp::WarpGroupDequantizer::TILE_ELEMS);
  return visit_comm_dtype(out_dtype, cudaErrorInvalidValue, [&](auto dt) {
    constexpr DType O = decltype(dt)::value;
    auto launch = [&](auto kernel) {
      int grid = 1;
      cudaError_t err = grid_for(kernel, max_tiles, grid);
      if (err != cudaSuccess) return err;
      kernel<<<grid, QuantPolicy::THREADS, 0, stream>>>(args);
      return cudaGetLastError();
    };
    return step == ReceiveStep::reduce    ? launch(dequantize_kernel<O, ReceiveStep::reduce>)
           : step == ReceiveStep::forward ? launch(dequantize_kernel<O, ReceiveStep::forward>)
                                          : launch(dequantize_kernel<O, ReceiveStep::dequantize>);
  });
}

}  // namespace detail

/// Quantizes n elements of `dtype` (raw bits at d_in, any alignment) with b = `bits` (2..8), group size `group`
/// (32, 64, 128) and `mode` into the message at d_out (16-byte aligned, out_capacity >=
/// max_quantized_bytes(mode, bits, group, n), which is the message's exact size: no size is written). Writes
/// the outcome to *d_status (device memory): Status::ok, or Status::not_finite when the input holds a NaN or an
/// infinity or a group's range overflows (as the host reference refuses it; the message is then one that no
/// reader accepts). Argument errors (Status::invalid_argument: null pointers, unknown dtype or mode, bits or
/// group out of range, n > 2^50, d_out not 16-byte aligned; Status::buffer_too_small) are written to *d_status
/// and returned as cudaErrorInvalidValue; a null d_status is only returned.
inline cudaError_t quantize(const void* d_in, uint64_t n, DType dtype, QuantMode mode, uint32_t bits, uint32_t group,
                            void* d_out, uint64_t out_capacity, Status* d_status, cudaStream_t stream = 0) {
  if (!d_status) return cudaErrorInvalidValue;
  Status check = Status::ok;
  if ((!d_in && n) || !d_out || reinterpret_cast<uintptr_t>(d_out) % 16 || !original_dtype_valid(uint8_t(dtype)) ||
      !mode_valid(uint32_t(mode)) || !bits_valid(bits) || !group_valid(group) || n > MAX_ELEMENTS)
    check = Status::invalid_argument;
  else if (out_capacity < max_quantized_bytes(mode, bits, group, n))
    check = Status::buffer_too_small;
  if (check != Status::ok) return detail::fail_in_stream(d_status, check, stream);
  cudaError_t e = cudaMemsetAsync(d_status, 0, sizeof(Status), stream);  // Status::ok
  if (e != cudaSuccess) return e;
  const detail::QuantizeArgs args{d_in, n, static_cast<uint8_t*>(d_out), d_status, dtype, mode, bits, group};
  return visit_comm_dtype(dtype, cudaErrorInvalidValue, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    int grid = 1;
    const uint64_t tiles = format::div_up(n, warp::WarpGroupQuantizer<D>::TILE_ELEMS);
    cudaError_t err = detail::grid_for(detail::quantize_kernel<D>, tiles, grid);
    if (err != cudaSuccess) return err;
    detail::quantize_kernel<D><<<grid, detail::QuantPolicy::THREADS, 0, stream>>>(args);
    return cudaGetLastError();
  });
}

/// Dequantizes the message at d_msg (16-byte aligned, msg_bytes readable) into d_out (any alignment, room for
/// out_capacity_bytes) as elements of `out_dtype`: each element's fp32 reconstruction narrowed to out_dtype with
/// round-to-nearest-even, as quant::host::dequantize with the same out_dtype. With out_dtype the message's own
/// dtype (the header's, which the caller knows as it knows the element count) that is the reconstruction
/// docs/QUANT.md defines; with another dtype it is that value cast. The element count comes from the header, on
/// the device. *d_status (device memory) gets the host reference's status: bad_header, unsupported_version,
/// corrupt_stream (a message shorter than its header says, or one whose body fails the reference's checks),
/// buffer_too_small; nothing is read past msg_bytes nor written past out_capacity_bytes. Unlike the host
/// reference, a body error does not leave d_out untouched: the groups that passed their checks are written.
/// Argument errors (Status::invalid_argument: null or unaligned d_msg, unknown out_dtype, null d_out with a
/// capacity; Status::corrupt_stream: msg_bytes < 64) are written to *d_status and returned as
/// cudaErrorInvalidValue; a null d_status is only returned.
inline cudaError_t dequantize(const void* d_msg, uint64_t msg_bytes, DType out_dtype, void* d_out,
                              uint64_t out_capacity_bytes, Status* d_status, cudaStream_t stream = 0) {
  detail::DequantizeArgs args{static_cast<const uint8_t*>(d_msg), msg_bytes, d_out, out_capacity_bytes, d_status};
  return detail::launch_dequantize(args, out_dtype, detail::ReceiveStep::dequantize, stream);
}

/// Dequantize + reduce, the receive side of a reduction hop: d_out[i] = combine(x'[i], pre(d_local[i])) for the
/// message's n elements (x' its reconstruction as out_dtype, as dequantize() writes it; thread/reduce_op.hpp's
/// operators, docs/REDUCE.md), which is quant::host::dequantize_reduce. d_local and d_out hold n elements of
/// out_dtype (any alignment; d_out may equal d_local); a message of another element count gives
/// Status::size_mismatch and writes nothing. Errors otherwise as dequantize().
inline cudaError_t dequantize_reduce(const void* d_msg, uint64_t msg_bytes, DType out_dtype, const void* d_local,
                                     void* d_out, uint64_t n, const ReduceOp& op, Status* d_status,
                                     cudaStream_t stream = 0) {
  if (d_status && ((!d_local && n) || !reduce_op_valid(op)))
    return detail::fail_in_stream(d_status, Status::invalid_argument, stream);
  detail::DequantizeArgs args{static_cast<const uint8_t*>(d_msg), msg_bytes, d_out,
                              n * format::elem_bytes(out_dtype), d_status};
  args.local = static_cast<const uint8_t*>(d_local);
  args.n = n;
  args.op = op;
  return detail::launch_dequantize(args, out_dtype, detail::ReceiveStep::reduce, stream);
}

/// Dequantize + forward, an all-gather hop: dequantize() into d_out, and the message's bytes (its header's
/// total_bytes) copied to d_fwd (16-byte aligned; fwd_capacity smaller than the message gives
/// Status::buffer_too_small and writes nothing), in the same pass. Errors otherwise as dequantize().
inline cudaError_t dequantize_forward(const void* d_msg, uint64_t msg_bytes, DType out_dtype, void* d_out,
                                      uint64_t out_capacity_bytes, void* d_fwd, uint64_t fwd_capacity,
                                      Status* d_status, cudaStream_t stream = 0) {
  if (d_status && (!d_fwd || reinterpret_cast<uintptr_t>(d_fwd) % 16))
    return detail::fail_in_stream(d_status, Status::invalid_argument, stream);
  detail::DequantizeArgs args{static_cast<const uint8_t*>(d_msg), msg_bytes, d_out, out_capacity_bytes, d_status};
  args.fwd = static_cast<uint8_t*>(d_fwd);
  args.fwd_capacity = fwd_capacity;
  return detail::launch_dequantize(args, out_dtype, detail::ReceiveStep::forward, stream);
}

}  // namespace device
}  // namespace quant
}  // namespace zipcomm
