// P2P pipeline: the body of BlockFrameSender::Send (declared in p2p/block_frame_sender.cuh).
//
// Warps take items in order; each waits until its frame's slot is free (credit), splits the item's
// sign/mantissa planes straight into the slot and counts them (the last one publishes the frame's planes
// flag: split-send), codes the exponents (warp::WarpChunkEncoder), places its chunk with a look-back over the
// earlier items of the frame, writes it, and counts the item done; the frame's last item writes the item
// table and header and publishes the exponents flag. Every wait is bounded (Status::timeout) and gives up
// when the transfer was aborted.
#pragma once

#include "../block_frame_sender.cuh"
#include "device_ops.cuh"

namespace zipcomm {
namespace comm {

template <DType D, int WARPS, class Code>
template <class Group>
ZIPCOMM_DEVICE void BlockFrameSender<D, WARPS, Code>::Send(Group& g, const SendArgs& a, uint32_t group_index) {
  warp::LoadCodeTable(temp_.table, g);
  const uint32_t warp_in_group = uint32_t(g.thread_rank()) / 32;
  Encoder enc(temp_.warp[warp_in_group], temp_.table);
  const uint32_t lane = warp::lane_id();
  // The kernel's blocks of WARPS * 32 threads: warp blockIdx.x * WARPS + w of the grid, as P2PSender sizes it.
  const uint64_t warp_index = uint64_t(group_index) * WARPS + warp_in_group;
  uint8_t* scratch = a.scratch + warp_index * a.scratch_bytes;
  const bool coded = a.plan.kind == FrameKind::coded;
  const bool vector = reinterpret_cast<uintptr_t>(a.in) % 16 == 0;
  const uint32_t eb = format::elem_bytes(D);
  const uint32_t S = a.ring.num_slots;
  if (a.frame_begin >= a.frame_end) return;
  const uint64_t item_begin = a.plan.frame(a.frame_begin).first_item;
  const uint64_t item_stop = a.frame_end < a.plan.num_frames ? a.plan.frame(a.frame_end).first_item : a.plan.num_items;

  for (;;) {
    const uint64_t g = item_begin + p2p_detail::take_item(a.item_counter);
    if (g >= item_stop) break;
    if (p2p_detail::aborted(a.control)) break;
    uint32_t j = 0;
    const uint64_t f = a.plan.frame_of_item(g, j);
    const FrameInfo fi = a.plan.frame(f);
    const uint64_t q = a.seq_base + f;
    const uint32_t slot = slot_of(q, S);
    uint8_t* frame = a.ring.slots + slot * a.ring.slot_bytes;
    uint64_t* trace = a.trace ? a.trace + TRACE_STAMPS * (f - a.frame_begin) : nullptr;
    if (trace && j == 0 && lane == 0) trace[0] = zipcomm::detail::global_timer_ns();

    // 1. The slot is ours once the consumer handed back frame q - S. The frame's first warp polls the
    //    (possibly remote) credit word; the others watch its device-local mirror.
    if (a.wait_credits) {
      Status s = Status::ok;
      if (j == 0) {
        s = p2p_detail::warp_wait<true>(
            &a.ring.credits[slot], [&](uint64_t v) { return credit_state(v, q, S); }, a.control, a.timeout_ns);
        if (s == Status::ok && lane == 0) p2p_detail::store_release_gpu(&a.credit_seen[slot], flag_value(q));
        if (trace && lane == 0) trace[3] = zipcomm::detail::global_timer_ns();
      } else {
        s = p2p_detail::warp_wait<false>(
            &a.credit_seen[slot], [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
      }
      if (s != Status::ok) {
        if (lane == 0) p2p_detail::report(a.control, s, f, true, a.poison);
        break;
      }
    }

    if (a.first_frame_planes_first && f != a.frame_begin) {
      const uint64_t q0 = a.seq_base + a.frame_begin;
      const Status s = p2p_detail::warp_wait<true>(
          &a.ring.ready_planes[slot_of(q0, S)],
          [&](uint64_t v) { return v >= flag_value(q0) ? FlagState::ready : FlagState::waiting; }, a.control,
          a.timeout_ns);
      if (s != Status::ok) {
        if (lane == 0) p2p_detail::report(a.control, s, f, true, a.poison);
        break;
      }
    }

    // 2. Split-send: the item's planes (or raw bytes) go straight into the slot.
    const uint32_t elems = fi.item_elems_at(j);
    const uint64_t elem0 = fi.first_elem + uint64_t(j) * fi.item_elems;
    uint8_t* planes = frame + item_planes_offset(a.plan, fi, j);
    uint32_t check = 0;
    if (coded) {
      p2p_detail::split_item_planes<D>(planes, a.in, vector, elem0, elems);
    } else {
      p2p_detail::warp_copy<false>(planes, static_cast<const uint8_t*>(a.in) + elem0 * eb, uint64_t(elems) * eb);
      if (j + 1 == fi.items) p2p_detail::warp_zero(frame, fi.elems * eb, fi.planes_bytes);
      check = p2p_detail::input_item_check<D>(a.in, vector, elem0, elems);
    }
    // GPU scope before the count, system scope once, in the release that publishes the frame: release is
    // cumulative, so what the counted warps wrote is ordered before the flag (the receiver's step 4 says more).
    __threadfence();
    __syncwarp();
    if (lane == 0 && p2p_detail::count_frame_item(&a.counters[2 * slot], fi.items)) {
      p2p_detail::store_release_sys(&a.ring.ready_planes[slot], flag_value(q));
      if (trace) trace[1] = zipcomm::detail::global_timer_ns();
    }

    // 3. Exponents: code the item, place its chunk after those of the frame's earlier items, write it.
    uint8_t* section_b = frame + fi.planes_bytes;
    uint32_t* entry = reinterpret_cast<uint32_t*>(section_b + FRAME_HEADER_BYTES + uint64_t(ITEM_ENTRY_BYTES) * j);
    const uint64_t table_bytes = item_table_bytes(fi.items);
    if (!coded && lane == 0) *reinterpret_cast<uint2*>(entry) = make_uint2(0u, check);
    if (coded) {
      warp::ArrayTileSource<D> load(static_cast<const uint8_t*>(a.in) + elem0 * eb, ReduceOp::sum());
      load.begin(0, elems, 0);
      const warp::ChunkInfo info = enc.Encode(elems, 0, load, p2p_detail::item_planes<D>(scratch, elems));
      uint32_t exclusive = 0;
      const Status s = p2p_detail::look_back(a.lookback + uint64_t(slot) * MAX_FRAME_ITEMS, j, q, info.bytes, a.control,
                                             a.timeout_ns, exclusive);
      if (s != Status::ok) {
        if (lane == 0) p2p_detail::report(a.control, s, f, true, a.poison);
        break;
      }
      enc.Store(section_b + FRAME_HEADER_BYTES + table_bytes + exclusive, elems, info, load);
      if (lane == 0) *reinterpret_cast<uint2*>(entry) = make_uint2(exclusive + info.bytes, info.check);
    }

    // 4. The frame's last item closes it: table padding, header, exponents flag.
    __threadfence();
    __syncwarp();
    uint32_t done = 0;
    if (lane == 0) done = p2p_detail::count_frame_item(&a.counters[2 * slot + 1], fi.items);
    done = __shfl_sync(warp::FULL_MASK, done, 0);
    if (done) {
      __threadfence();  // acquire the frame's items (their look-back entries, chunks and table entries)
      uint32_t exps_bytes = uint32_t(FRAME_HEADER_BYTES + table_bytes);
      if (coded) {
        const uint64_t last = cuda::atomic_ref<uint64_t, cuda::thread_scope_device>(
                                  a.lookback[uint64_t(slot) * MAX_FRAME_ITEMS + fi.items - 1])
                                  .load(cuda::memory_order_relaxed);
        exps_bytes += uint32_t(last & 0xFFFFFFFFu);
      }
      p2p_detail::warp_zero(section_b + FRAME_HEADER_BYTES, uint64_t(ITEM_ENTRY_BYTES) * fi.items, table_bytes);
      if (a.exps_need && lane == 0)
        atomicMax(&a.exps_need[a.exps_budget.tier_of(fi.item_elems)], exps_need_per_kelem(fi, exps_bytes));
      if (a.overflow_slots) {  // what the fixed-size copy of section B leaves behind goes by SM stores
        const uint64_t budget = exps_budget_bytes(fi, a.exps_budget);
        if (exps_bytes > budget)
          p2p_detail::warp_copy<true>(a.overflow_slots + slot * a.ring.slot_bytes + fi.planes_bytes + budget,
                                      section_b + budget, exps_bytes - budget);
      }
      if (lane == 0) {
        alignas(16) const FrameHeader h = make_frame_header(a.plan, fi, Code::ID, q, exps_bytes);
        const uint4* hv = reinterpret_cast<const uint4*>(&h);
        uint4* dst = reinterpret_cast<uint4*>(section_b);
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[i] = hv[i];
        // Read only after ready_exps (acquire), whose release below publishes it.
        if (a.ring.exps_bytes) p2p_detail::store_relaxed_sys(&a.ring.exps_bytes[slot], exps_bytes);
      }
      __threadfence();
      __syncwarp();
      if (lane == 0) p2p_detail::store_release_sys(&a.ring.ready_exps[slot], flag_value(q));
      if (trace && lane == 0) trace[2] = zipcomm::detail::global_timer_ns();
    }
  }
}

}  // namespace comm
}  // namespace zipcomm
