// P2P pipeline, host side: a link's options, the messages of a batch, a calibration point, the host link's
// modes, and how a transfer's status is decided.
#pragma once

#include <cstdint>

#include "../../config.hpp"
#include "../../detail/bounded_wait.cuh"
#include "kernel_args.cuh"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// Knobs of a link whose best value depends on the platform or the data; what measured fastest on the H200's
/// pinned-host link (bench_p2p --sweep, real bf16 gradients; docs/DECISIONS.md) is the default, and the shape's
/// defaults are in p2p/protocol.cuh. Memory of a HostStagingLink: 16 slots of about 24 MiB (bf16) in pinned host
/// memory, twice that in GPU memory.
struct P2POptions {
  PipelineShape shape;                  // how messages are cut into items and frames
  uint32_t slots = 16;                  // frames in flight: 4 slots 1.347 / 4.301 ms at 64 / 256 MiB, 16 1.205 / 4.181
  uint64_t timeout_ns = zipcomm::detail::DEFAULT_WAIT_TIMEOUT_NS;  // a peer silent this long gives Status::timeout
  int sender_blocks = 0;                // 0: one block per SM
  int receiver_blocks = 0;              // 0: one block per SM (persistent receivers)
  uint64_t bypass_bytes = uint64_t(4) << 20;        // messages below go raw; a guess until calibrate() measures it
  uint64_t raw_chunk_bytes = uint64_t(8) << 20;     // largest chunk of the pipelined raw copy (bypass)
  uint64_t raw_single_bytes = uint64_t(256) << 10;  // raw messages up to this size: one chunk, two copies
  // Stream mode's section-B budget (bytes past it go by SM stores and loads, the overflow): a first guess of the
  // coded exponent bytes per 1024 elements (bf16 gradients need ~350), then after each transfer the most a frame
  // needed plus a margin of permille / 1000 and per_kelem bytes per 1024 elements. Every byte of margin crosses
  // the link on every frame.
  uint32_t exps_budget_per_kelem = 410;
  uint32_t exps_budget_margin_permille = 5;    // 0.5% + 1: 0.4-0.6% faster than 2% + 4 at 64 and 128 MiB
  uint32_t exps_budget_margin_per_kelem = 1;
  // Stream mode: each copy of a frame's planes or section B goes in pieces (each host -> device piece waits only for
  // its own device -> host piece) of 1 / copy_pieces_per_transfer of the transfer's wire bytes, at least
  // copy_piece_bytes (256 KiB if 0); with copy_pieces_per_transfer 0, of copy_piece_bytes (0: whole copies). The
  // host -> device side trails by the largest piece and each piece costs ~3 us of copy engine, so the best piece
  // is about sqrt(wire bytes x cost per piece x link rate): it depends on the link.
  uint64_t copy_piece_bytes = uint64_t(4) << 20;  // 1.245 ms at 64 MiB, whole copies 1.322
  uint32_t copy_pieces_per_transfer = 32;         // 0.4-0.8% faster than 1/16 at 256 MiB
  static constexpr uint64_t MIN_COPY_PIECE_BYTES = 4096;  // copy_piece_bytes below this (but 0) is refused
};

/// One message of a batch (HostStagingLink::transfer_many, PeerLink::transfer_many): n elements from src to dst.
struct P2PMessage {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t n = 0;
};

/// Status of a transfer as seen by both ends and, in copy mode, the host relay: the first error.
inline Status transfer_status(Status relay, const SideControl& send, const SideControl& recv) {
  if (relay != Status::ok) return relay;
  if (recv.status) return Status(recv.status);  // what the reader got decides: report its error first
  if (send.status) return Status(send.status);
  return Status::ok;
}

/// Who schedules a HostStagingLink's copies. In both modes the sender kernel codes each frame into GPU memory and
/// the copy engines move it GPU -> pinned ring -> GPU, planes as soon as they are split, section B once complete.
///  stream: the GPU (the default; fastest measured). Persistent sender and receiver kernels; the copy streams
///          wait for the sender's flags (cuStreamWaitValue64, through a gate stream's event) and a stream of its
///          own writes each frame's "landed" flag (cuStreamWriteValue64), which the receiver waits for before it
///          decodes in GPU memory. Section B moves up to a budget by fixed-size copies, the rest (the overflow) by
///          SM stores and loads through the pinned ring. transfer() returns once everything is enqueued.
///  copy:   a host relay inside transfer(): it polls the sender's flags in pinned memory, issues each frame's
///          copies with section B's exact length and one decode launch per frame, and returns once every frame
///          is enqueued. The fallback where the GPU or driver lacks 64-bit stream memory operations: init() picks
///          it then, and tests force it. 0.84-1.1x the raw copy on the H200, below stream mode's 1.34-1.38x.
enum class HostLinkMode : uint8_t { stream = 1, copy = 2 };

/// One measurement of a link's calibrate() (HostStagingLink, PeerLink): median times of a coded and a raw
/// transfer of `bytes`.
struct P2PCalibrationPoint {
  uint64_t bytes;
  double coded_ms, raw_ms;
};

}  // namespace comm
}  // namespace zipcomm
