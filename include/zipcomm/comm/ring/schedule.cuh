// Ring allreduce, the arithmetic: which elements each (slice, channel, pipeline round) covers, what a rank
// does at each step, where each message lives in a rank's window. Plain C++17 (no CUDA needed) so that the
// device kernel, the host communicators, the host model of the ring and the tests all call the same functions.
// docs/RING.md describes the protocol.
//
//   slice k       [k * S, (k + 1) * S) of [0, n), S = align_up(ceil(n / ranks), RING_GRANULE): the elements whose
//                 reduction starts at rank k (so the numeric result depends on (n, ranks) only)
//   channel c     part c of every slice, handled by one thread block per rank
//   round i       pipeline chunk i of a channel's part: one message (at most chunk_elems elements) per hop
//   step s        0: send own slice; 1..R-2: reduce and send; R-1: reduce, keep the final slice, send it;
//                 R..2R-3: keep and forward; 2R-2: keep. At step s rank r works on slice (r - s) mod R.
#pragma once

#include <cstdint>

#include "../../config.hpp"
#include "../../format.hpp"

namespace zipcomm {
namespace comm {

constexpr int RING_MAX_RANKS = 16;
constexpr int RING_MAX_CHANNELS = 128;
/// Slice and part boundaries are multiples of this many elements: whole tiles, 16-byte aligned vectors.
constexpr uint64_t RING_GRANULE = 1024;
/// Every slot and the mailbox start on this boundary, so no two slots share a cache line.
constexpr uint64_t RING_SLOT_ALIGN = 256;
/// A channel gets at least this many elements of a slice (fewer channels for small messages: an empty hop
/// still costs a flag round trip).
constexpr uint64_t RING_MIN_CHANNEL_ELEMS = 16384;

/// A raw (uncompressed) message: this header, then the elements. The count and dtype let the receiver reject
/// a message that is not the one it expects, as the compressed stream's header does.
constexpr uint32_t RING_RAW_MAGIC = 0x5752505Au;  // bytes "ZPRW"
constexpr uint64_t RING_RAW_HEADER_BYTES = 16;
struct RingRawHeader {
  uint32_t magic;
  uint8_t dtype;
  uint8_t reserved[3];
  uint64_t count;
};
static_assert(sizeof(RingRawHeader) == RING_RAW_HEADER_BYTES, "raw message header is 16 bytes");

// ---- partition ---------------------------------------------------------------------------------------------

/// Elements per slice: depends on (n, ranks) only, so every channel count and chunk size gives the same result.
ZIPCOMM_HOST_DEVICE uint64_t ring_slice_elems(uint64_t n, int ranks) {
  return format::align_up(format::div_up(n, uint64_t(ranks)), RING_GRANULE);
}

struct RingRange {
  uint64_t first, count;
};

/// Slice k of [0, n): empty when the slices before it already cover n.
ZIPCOMM_HOST_DEVICE RingRange ring_slice(uint64_t n, int ranks, int k) {
  const uint64_t S = ring_slice_elems(n, ranks);
  const uint64_t first = uint64_t(k) * S < n ? uint64_t(k) * S : n;
  const uint64_t end = n - first > S ? first + S : n;
  return {first, end - first};
}

/// How one call's elements are cut: slices, then channel parts, then pipeline chunks (one message each).
struct RingPartition {
  uint64_t n;
  int ranks;
  int channels;
  uint64_t slice_elems;  // S
  uint64_t part_elems;   // per channel within a slice (multiple of RING_GRANULE)
  uint64_t chunk_elems;  // per pipeline chunk (multiple of RING_GRANULE)
  uint64_t rounds;       // pipeline chunks per channel part
};

/// ranks in [1, RING_MAX_RANKS], channels in [1, RING_MAX_CHANNELS], chunk_elems a positive multiple of
/// RING_GRANULE (ring_partition_valid checks).
ZIPCOMM_HOST_DEVICE RingPartition make_ring_partition(uint64_t n, int ranks, int channels, uint64_t chunk_elems) {
  RingPartition p{};
  p.n = n;
  p.ranks = ranks;
  p.channels = channels;
  p.slice_elems = ring_slice_elems(n, ranks);
  p.part_elems = format::align_up(format::div_up(p.slice_elems, uint64_t(channels)), RING_GRANULE);
  p.chunk_elems = chunk_elems;
  p.rounds = p.part_elems ? format::div_up(p.part_elems, chunk_elems) : 0;
  return p;
}

ZIPCOMM_HOST_DEVICE bool ring_partition_valid(const RingPartition& p) {
  return p.ranks >= 1 && p.ranks <= RING_MAX_RANKS && p.channels >= 1 && p.channels <= RING_MAX_CHANNELS &&
         p.chunk_elems >= RING_GRANULE && p.chunk_elems % RING_GRANULE == 0 && p.n <= (uint64_t(1) << 50);
}

/// Elements of pipeline chunk `round` of channel `channel`'s part of slice `slice` (possibly empty).
ZIPCOMM_HOST_DEVICE RingRange ring_chunk(const RingPartition& p, int slice, int channel, uint64_t round) {
  const RingRange s = ring_slice(p.n, p.ranks, slice);
  const uint64_t s_end = s.first + s.count;
  const uint64_t part_off = uint64_t(channel) * p.part_elems;
  const uint64_t part_first = part_off < s.count ? s.first + part_off : s_end;
  const uint64_t part_end = s_end - part_first > p.part_elems ? part_first + p.part_elems : s_end;
  const uint64_t chunk_off = round * p.chunk_elems;
  const uint64_t first = chunk_off < part_end - part_first ? part_first + chunk_off : part_end;
  const uint64_t end = part_end - first > p.chunk_elems ? first + p.chunk_elems : part_end;
  return {first, end - first};
}

// ---- steps -------------------------------------------------------------------------------------------------

enum class RingActionKind : uint8_t {
  send_own = 0,     // reduce-scatter step 0: pre(own chunk) -> next
  reduce_send = 1,  // reduce-scatter: op(incoming, pre(own)) -> next
  reduce_keep = 2,  // last reduce-scatter step: op(incoming, pre(own)) -> own buffer and next
  forward = 3,      // all-gather: incoming -> own buffer and next
  receive = 4,      // last all-gather step: incoming -> own buffer
  local_only = 5,   // one rank: pre(own) in place
};
constexpr int RING_ACTION_KINDS = 6;

ZIPCOMM_HOST_DEVICE const char* ring_action_name(RingActionKind k) {
  switch (k) {
    case RingActionKind::send_own: return "send own";
    case RingActionKind::reduce_send: return "reduce + send";
    case RingActionKind::reduce_keep: return "reduce + keep + send";
    case RingActionKind::forward: return "keep + forward";
    case RingActionKind::receive: return "keep";
    case RingActionKind::local_only: return "local";
  }
  return "?";
}

struct RingAction {
  RingActionKind kind;
  int slice;    // the slice this step works on
  int in_msg;   // message of the round read from the own mailbox (-1: none)
  int out_msg;  // message of the round written into the next rank's mailbox (-1: none)
};

ZIPCOMM_HOST_DEVICE int ring_steps(int ranks) { return ranks == 1 ? 1 : 2 * ranks - 1; }
/// Messages a rank sends per round, and slots a round needs in each mailbox (the messages + one self slot,
/// where the compressed ring keeps the finished slice before decoding and forwarding it).
ZIPCOMM_HOST_DEVICE int ring_messages_per_round(int ranks) { return ranks == 1 ? 0 : 2 * ranks - 2; }
ZIPCOMM_HOST_DEVICE int ring_slots_per_round(int ranks) { return ranks == 1 ? 0 : 2 * ranks - 1; }

ZIPCOMM_HOST_DEVICE RingAction ring_action(int ranks, int rank, int step) {
  if (ranks == 1) return {RingActionKind::local_only, rank, -1, -1};
  const int R = ranks, s = step;
  RingAction a;
  a.slice = ((rank - s) % R + R) % R;
  a.in_msg = s >= 1 ? s - 1 : -1;
  a.out_msg = s <= 2 * R - 3 ? s : -1;
  a.kind = s == 0           ? RingActionKind::send_own
           : s < R - 1      ? RingActionKind::reduce_send
           : s == R - 1     ? RingActionKind::reduce_keep
           : s < 2 * R - 2  ? RingActionKind::forward
                            : RingActionKind::receive;
  return a;
}

/// Slot of message `msg` of local round `round` (the round's index within its pass) in a channel's mailbox.
ZIPCOMM_HOST_DEVICE uint32_t ring_slot_index(int ranks, uint64_t round, int msg) {
  return uint32_t(round * uint64_t(ring_slots_per_round(ranks)) + uint64_t(msg));
}
ZIPCOMM_HOST_DEVICE uint32_t ring_self_slot_index(int ranks, uint64_t round) {
  return ring_slot_index(ranks, round, 2 * ranks - 2);
}

// ---- window ------------------------------------------------------------------------------------------------
// One rank's window (a device allocation its peers can write): a control area, then the mailbox.
//   [0, 4)                 error word: the first error Status any rank saw (peers write it)
//   [8, 16)                bytes sent by this rank (statistics)
//   [ready_offset, ...)    per channel and slot: the epoch in which the PREVIOUS rank filled that slot
//   [mailbox_offset, ...)  per channel: slots_per_channel slots of slot_bytes, written by the previous rank
// A slot is filled once per pass and read once, after its flag. No acknowledgement is needed before it is
// refilled in the next pass: a rank starts pass e + 1 only once its own pass e is over (one stream per
// rank), and the ring's dependencies then imply the next rank has read every slot it is about to refill
// (docs/RING.md gives the argument; the host model in tests/host/test_ring_schedule.cpp checks it).

constexpr uint64_t RING_ERROR_OFFSET = 0;
constexpr uint64_t RING_BYTES_SENT_OFFSET = 8;

struct RingWindowLayout {
  int channels;
  uint32_t slots_per_channel;
  uint64_t slot_bytes;
  uint64_t ready_offset, mailbox_offset, total_bytes;
};

ZIPCOMM_HOST_DEVICE RingWindowLayout make_ring_window_layout(int channels, uint32_t slots_per_channel,
                                                             uint64_t slot_bytes) {
  RingWindowLayout L{};
  L.channels = channels;
  L.slots_per_channel = slots_per_channel;
  L.slot_bytes = slot_bytes;
  L.ready_offset = 256;
  L.mailbox_offset =
      format::align_up(L.ready_offset + 4 * uint64_t(channels) * slots_per_channel, RING_SLOT_ALIGN);
  L.total_bytes = L.mailbox_offset + uint64_t(channels) * slots_per_channel * slot_bytes;
  return L;
}

ZIPCOMM_HOST_DEVICE bool ring_window_layout_valid(const RingWindowLayout& L) {
  return L.channels >= 1 && L.channels <= RING_MAX_CHANNELS && L.slot_bytes >= RING_SLOT_ALIGN &&
         L.slot_bytes % RING_SLOT_ALIGN == 0 && L.mailbox_offset % RING_SLOT_ALIGN == 0;
}

ZIPCOMM_HOST_DEVICE uint32_t* ring_error_word(uint8_t* window) {
  return reinterpret_cast<uint32_t*>(window + RING_ERROR_OFFSET);
}
ZIPCOMM_HOST_DEVICE unsigned long long* ring_bytes_sent(uint8_t* window) {
  return reinterpret_cast<unsigned long long*>(window + RING_BYTES_SENT_OFFSET);
}
ZIPCOMM_HOST_DEVICE uint32_t* ring_ready_flag(const RingWindowLayout& L, uint8_t* window, int channel,
                                              uint32_t slot) {
  return reinterpret_cast<uint32_t*>(window + L.ready_offset) + uint64_t(channel) * L.slots_per_channel + slot;
}
ZIPCOMM_HOST_DEVICE uint8_t* ring_slot(const RingWindowLayout& L, uint8_t* window, int channel, uint32_t slot) {
  return window + L.mailbox_offset + (uint64_t(channel) * L.slots_per_channel + slot) * L.slot_bytes;
}

/// Pipeline rounds one pass (one kernel launch) can hold: every message of a pass has a slot of its own, so
/// no slot is read twice in a launch (the decoders read slots with non-coherent loads: docs/REDUCE.md).
ZIPCOMM_HOST_DEVICE uint64_t ring_rounds_per_pass(const RingWindowLayout& L, int ranks) {
  return ranks == 1 ? ~uint64_t(0) : L.slots_per_channel / uint64_t(ring_slots_per_round(ranks));
}

// ---- slot sizing -------------------------------------------------------------------------------------------

/// Bytes a slot needs for a message of `elems` elements of dtype d, compressed or raw (whichever is larger).
ZIPCOMM_HOST_DEVICE uint64_t ring_slot_need(DType d, uint64_t elems) {
  const uint64_t coded = format::max_compressed_bytes(d, elems, format::MAX_CHUNK_LOG2);  // the block encoder's
  const uint64_t raw = RING_RAW_HEADER_BYTES + elems * format::elem_bytes(d);
  return coded > raw ? coded : raw;
}

/// Largest pipeline chunk whose message fits a slot of slot_bytes: whole 16384-element codec chunks when at
/// least one fits, else whole granules; 0 when not even one granule fits.
ZIPCOMM_HOST_DEVICE uint64_t ring_chunk_elems(DType d, uint64_t slot_bytes) {
  const uint64_t steps[2] = {uint64_t(format::MAX_CHUNK_ELEMS), RING_GRANULE};
  for (uint64_t step : steps) {
    uint64_t ce = slot_bytes / format::elem_bytes(d) / step * step;
    while (ce >= step && ring_slot_need(d, ce) > slot_bytes) ce -= step;
    if (ce >= step) return ce;
  }
  return 0;
}

/// The default slot: one fp32 chunk of 8 x 16384 elements (one codec chunk per warp of an 8-warp block), or
/// one bf16 or fp16 chunk of 16 codec chunks.
ZIPCOMM_HOST_DEVICE uint64_t ring_default_slot_bytes() {
  const uint64_t wide = ring_slot_need(DType::fp32, 8 * uint64_t(format::MAX_CHUNK_ELEMS));
  const uint64_t half = ring_slot_need(DType::fp16, 16 * uint64_t(format::MAX_CHUNK_ELEMS));
  return format::align_up(wide > half ? wide : half, RING_SLOT_ALIGN);
}

}  // namespace comm
}  // namespace zipcomm
