// P2P pipeline: the body of BlockFrameReceiver::Receive (declared in p2p/block_frame_receiver.cuh).
//
// Warps take items in order; the warp holding a frame's first item (the leader) waits for the frame's flags on
// the ring, checks the header once, and mirrors what it saw into device memory; every warp then checks its
// item-table entry, decodes its item from the ring (GPU memory) into the output, and counts it done; the
// frame's last item hands the slot back (credit). A transfer is complete once every frame was decoded, never
// earlier. Every wait is bounded (Status::timeout) and gives up when the transfer was aborted.
#pragma once

#include "../../../warp/warp_chunk_decoder.cuh"
#include "../block_frame_receiver.cuh"
#include "device_ops.cuh"

namespace zipcomm {
namespace comm {

template <DType D, int WARPS, class Code>
template <class Group>
ZIPCOMM_DEVICE void BlockFrameReceiver<D, WARPS, Code>::Receive(Group& g, const RecvArgs& a) {
  warp::LoadCodeTable(temp_.table, g);
  warp::WarpChunkDecoder<D, Code> dec(temp_.table);
  const uint32_t lane = warp::lane_id();
  const bool coded = a.plan.kind == FrameKind::coded;
  const bool vector = reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  const uint32_t eb = format::elem_bytes(D);
  const uint32_t S = a.ring.num_slots;
  if (a.frame_begin >= a.frame_end) return;
  const uint64_t item_begin = a.plan.frame(a.frame_begin).first_item;
  const uint64_t item_stop = a.frame_end < a.plan.num_frames ? a.plan.frame(a.frame_end).first_item : a.plan.num_items;
  const uint64_t launch_frames = a.frame_end - a.frame_begin;

  for (;;) {
    const uint64_t g = item_begin + p2p_detail::take_item(a.item_counter);
    if (g >= item_stop) break;
    uint64_t* item_trace = a.item_trace && lane == 0 ? a.item_trace + ITEM_TRACE_STAMPS * g : nullptr;
    if (item_trace) item_trace[0] = zipcomm::detail::global_timer_ns();
    if (p2p_detail::aborted(a.control)) break;
    uint32_t j = 0;
    const uint64_t f = a.plan.frame_of_item(g, j);
    const FrameInfo fi = a.plan.frame(f);
    const uint64_t q = a.seq_base + f;
    const uint32_t slot = slot_of(q, S);
    const uint8_t* base = a.ring.slot_at(slot);  // the frame, decoded where it is
    uint64_t* trace = a.trace ? a.trace + TRACE_STAMPS * (f - a.frame_begin) : nullptr;
    if (trace && j == 0 && lane == 0) trace[0] = zipcomm::detail::global_timer_ns();
    uint64_t* mirror_planes = &a.mirror[2 * slot];
    uint64_t* mirror_exps = &a.mirror[2 * slot + 1];
    auto fail = [&](Status s, bool stop) {
      if (lane == 0) p2p_detail::report(a.control, s, f, stop, a.poison);
    };

    // 1. Leader: wait for the frame on the ring, check it once, tell the frame's other warps.
    if (j == 0) {
      Status s = Status::ok;
      if (a.wait_flags)
        s = p2p_detail::warp_wait<true>(
            &a.ring.ready_planes[slot], [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
      if (s != Status::ok) {
        fail(s, true);
        break;
      }
      if (lane == 0) p2p_detail::store_release_gpu(mirror_planes, flag_value(q));
      if (trace && lane == 0) trace[3] = zipcomm::detail::global_timer_ns();
      if (a.wait_flags)
        s = p2p_detail::warp_wait<true>(
            &a.ring.ready_exps[slot], [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
      if (s != Status::ok) {
        fail(s, true);
        break;
      }
      // The header is checked here once; the item table's entries by the warps that use them (step 3): a
      // whole-table check here sat on the path from a frame's landing to its first decode (5-11 us of the
      // transfer's tail).
      alignas(16) FrameHeader h;
      {
        const uint4* hv = reinterpret_cast<const uint4*>(base + fi.planes_bytes);
        uint4* hd = reinterpret_cast<uint4*>(&h);
#pragma unroll
        for (int i = 0; i < 4; ++i) hd[i] = __ldcv(hv + i);
      }
      const Status hs = validate_frame_header(h, a.plan, fi, Code::ID, q);
      if (lane == 0) {
        a.frame_status[2 * slot] = uint32_t(hs);
        a.frame_status[2 * slot + 1] = h.exps_bytes;
        p2p_detail::store_release_gpu(mirror_exps, flag_value(q));
        if (trace) trace[1] = zipcomm::detail::global_timer_ns();
      }
      // Out-of-step peers (another message size or sequence) cannot recover: stop the transfer.
      if (hs != Status::ok) fail(hs, hs == Status::size_mismatch || hs == Status::bad_header);
    }

    // 2. The item's planes (or raw bytes).
    const uint32_t elems = fi.item_elems_at(j);
    const uint64_t elem0 = fi.first_elem + uint64_t(j) * fi.item_elems;
    const uint64_t planes_at = item_planes_offset(a.plan, fi, j);
    Status s = p2p_detail::warp_wait<false>(
        mirror_planes, [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
    if (s != Status::ok) {
      fail(s, true);
      break;
    }
    s = p2p_detail::warp_wait<false>(
        mirror_exps, [&](uint64_t v) { return ready_state(v, q); }, a.control, a.timeout_ns);
    if (s != Status::ok) {
      fail(s, true);
      break;
    }
    const Status frame_ok = Status(*const_cast<volatile uint32_t*>(&a.frame_status[2 * slot]));
    if (item_trace) item_trace[1] = zipcomm::detail::global_timer_ns();

    // 3. Decode into the output (raw frames: copy).
    if (frame_ok == Status::ok) {
      uint8_t* out_bytes = static_cast<uint8_t*>(a.out) + elem0 * eb;
      const uint8_t* table = base + fi.planes_bytes + FRAME_HEADER_BYTES;
      const uint32_t exps_bytes = *const_cast<volatile uint32_t*>(&a.frame_status[2 * slot + 1]);
      const uint32_t expected = item_check(table, j);
      if (!p2p_detail::warp_item_entry_valid(table, fi, D, a.plan.kind, exps_bytes, j)) {
        fail(Status::corrupt_stream, false);
      } else if (!coded) {
        p2p_detail::warp_copy<true>(out_bytes, base + planes_at, uint64_t(elems) * eb);
        __syncwarp();
        if (p2p_detail::written_item_check<D>(out_bytes, elems) != expected) fail(Status::checksum_mismatch, false);
      } else {
        const uint32_t start = j ? item_end(table, j - 1) : 0u;
        const uint32_t end = item_end(table, j);
        const uint64_t chunk_at = fi.planes_bytes + FRAME_HEADER_BYTES + item_table_bytes(fi.items) + start;
        if (a.overflow_slots) {  // the chunk's bytes past the fixed-size copy: from the overflow area
          const uint64_t overflow_at = fi.planes_bytes + exps_budget_bytes(fi, a.exps_budget);
          const uint64_t from = chunk_at > overflow_at ? chunk_at : overflow_at;
          const uint64_t to = chunk_at + (end - start);
          if (to > from)
            p2p_detail::warp_copy<true>(const_cast<uint8_t*>(base) + from,
                                        a.overflow_slots + slot * a.ring.slot_bytes + from, to - from);
        }
        __syncwarp();
        __threadfence();  // the warp's own overflow writes, before the decoder's loads
        const warp::Planes at = p2p_detail::item_planes<D>(const_cast<uint8_t*>(base + planes_at), elems);
        const warp::ConstPlanes planes{at.plane0, at.widths, at.low,
                                       uint32_t(format::layout_for(D, elems, format::MAX_CHUNK_LOG2).low_max_bytes)};
        auto sink = [&](uint32_t t, const uint32_t(&x)[warp::ITEMS], uint32_t cnt) {
          const uint64_t at = uint64_t(t) * format::TILE_ELEMS + lane * warp::ITEMS;
          if (vector)
            warp::store_items<D, true>(out_bytes, at, cnt, x);
          else
            warp::store_items<D, false>(out_bytes, at, cnt, x);
        };
        const Status ds = dec.Decode(base + chunk_at, end - start, elems, 0, planes, expected, sink);
        if (ds != Status::ok) fail(ds, false);
      }
    }

    // 4. Count the item; the frame's last one hands the slot back, the launch's last frame completes it.
    // Fences: GPU scope before the counts (every counter lives on this GPU), one system-scope release per frame
    // for the observers off the SMs (copy streams, the sender's GPU, the host). Release is cumulative: what
    // the counting warps wrote and read is ordered before the credit and the done word through the counters.
    // (A system fence per item cost its warp ~4-8 us while the copy engines streamed, and the transfer's last
    // item paid it on the critical path: bench_p2p --trace-light, H200.)
    if (item_trace) item_trace[2] = zipcomm::detail::global_timer_ns();
    __threadfence();
    __syncwarp();
    const bool last_of_frame = lane == 0 && p2p_detail::count_frame_item(&a.counters[slot], fi.items);
    if (item_trace) item_trace[3] = zipcomm::detail::global_timer_ns();
    if (last_of_frame) {
      __threadfence();  // acquire the frame's items before the launch count passes them on
      const bool last_of_launch = p2p_detail::tagged_increment(a.frames_done, a.launch_tag) == launch_frames;
      // One system fence releases the frame's items (the launch's last frame: every frame's, acquired through
      // frames_done) to both the credit and the done word.
      p2p_detail::fence_acq_rel_sys();
      if (a.give_credits) p2p_detail::store_relaxed_sys(&a.ring.credits[slot], flag_value(q));
      if (trace) trace[2] = zipcomm::detail::global_timer_ns();
      if (last_of_launch && a.done_word != nullptr) p2p_detail::store_relaxed_sys(a.done_word, a.done_value);
    }
  }
}

}  // namespace comm
}  // namespace zipcomm
