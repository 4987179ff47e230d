// Host reference for P2P frames (plain C++17, no CUDA needed): builds the exact bytes a sender writes for one
// frame and reads a frame back, through the public host codec only (host::compress / host::decompress on each
// item as a one-chunk stream). Tests compare the GPU's frames with it; a host-side peer could use it.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "../../format.hpp"
#include "../../host/reference_codec.hpp"
#include "../../thread/chunk_check.hpp"
#include "protocol.cuh"

namespace zipcomm {
namespace comm {

/// The check of an item of `elems` (<= one chunk) elements (raw bits at p, little-endian): its chunk check.
inline uint32_t host_item_check(DType dtype, const uint8_t* p, uint32_t elems) {
  std::vector<uint32_t> bits(elems);
  for (uint32_t k = 0; k < elems; ++k) {
    uint32_t b = 0;
    std::memcpy(&b, p + uint64_t(k) * format::elem_bytes(dtype), format::elem_bytes(dtype));
    bits[k] = b;
  }
  return thread::chunk_check(dtype, bits.data(), elems);
}

/// Bytes of frame fi of `plan` for `message` (plan.n elements of plan.dtype): the planes section, then
/// section B. Returns the frame's length (planes_bytes + exps_bytes) in `frame`. A plan of an fp8 dtype gives
/// invalid_argument (the P2P links do not carry fp8).
inline Status host_encode_frame(const FramePlan& plan, const FrameInfo& fi, CodeId code, uint64_t seq,
                                const uint8_t* message, std::vector<uint8_t>& frame) {
  if (!comm_dtype_supported(plan.dtype)) return Status::invalid_argument;
  const uint32_t eb = format::elem_bytes(plan.dtype);
  const uint64_t table_bytes = item_table_bytes(fi.items);
  frame.assign(fi.planes_bytes + FRAME_HEADER_BYTES + table_bytes, 0);
  uint8_t* table = frame.data() + fi.planes_bytes + FRAME_HEADER_BYTES;
  for (uint32_t j = 0; j < fi.items; ++j) {
    const uint64_t first = fi.first_elem + uint64_t(j) * fi.item_elems;
    const uint32_t check = host_item_check(plan.dtype, message + first * eb, fi.item_elems_at(j));
    std::memcpy(table + ITEM_ENTRY_BYTES * j + 4, &check, 4);
  }
  uint32_t exps_bytes = uint32_t(FRAME_HEADER_BYTES + table_bytes);
  if (plan.kind == FrameKind::raw) {
    std::memcpy(frame.data(), message + fi.first_elem * eb, fi.elems * eb);
  } else {
    std::vector<uint8_t> stream;
    uint32_t end = 0;
    for (uint32_t j = 0; j < fi.items; ++j) {
      const uint32_t elems = fi.item_elems_at(j);
      const uint64_t first = fi.first_elem + uint64_t(j) * fi.item_elems;
      stream.assign(format::max_compressed_bytes(plan.dtype, elems, format::MAX_CHUNK_LOG2), 0);
      uint64_t bytes = 0;
      const Status s = host::compress(plan.dtype, code, message + first * eb, elems, stream.data(), stream.size(),
                                      &bytes, format::LowWidths::full, format::MAX_CHUNK_LOG2);
      if (s != Status::ok) return s;
      const format::Layout L = format::layout_for(plan.dtype, elems, format::MAX_CHUNK_LOG2);
      uint8_t* planes = frame.data() + item_planes_offset(plan, fi, j);
      std::memcpy(planes, stream.data() + format::HEADER_BYTES, L.table_offset - format::HEADER_BYTES);
      std::memcpy(planes + (L.table_offset - format::HEADER_BYTES), stream.data() + L.low_offset, L.low_max_bytes);
      frame.insert(frame.end(), stream.begin() + L.exp_offset, stream.begin() + bytes);
      end += uint32_t(bytes - L.exp_offset);
      std::memcpy(frame.data() + fi.planes_bytes + FRAME_HEADER_BYTES + ITEM_ENTRY_BYTES * j, &end, 4);
    }
    exps_bytes += end;
  }
  const FrameHeader h = make_frame_header(plan, fi, code, seq, exps_bytes);
  std::memcpy(frame.data() + fi.planes_bytes, &h, sizeof h);
  return Status::ok;
}

/// Checks and decodes one frame (`bytes` readable at `frame`) of `plan` into `message`; the same checks as
/// the receiver kernel (header, item table, every chunk). A plan of an fp8 dtype gives invalid_argument.
inline Status host_decode_frame(const FramePlan& plan, const FrameInfo& fi, CodeId code, uint64_t seq,
                                const uint8_t* frame, uint64_t bytes, uint8_t* message) {
  if (!comm_dtype_supported(plan.dtype)) return Status::invalid_argument;
  const uint32_t eb = format::elem_bytes(plan.dtype);
  if (bytes < fi.planes_bytes + FRAME_HEADER_BYTES) return Status::corrupt_stream;
  FrameHeader h;
  std::memcpy(&h, frame + fi.planes_bytes, sizeof h);
  Status s = validate_frame_header(h, plan, fi, code, seq);
  if (s != Status::ok) return s;
  if (bytes < fi.planes_bytes + h.exps_bytes) return Status::corrupt_stream;
  const uint8_t* table = frame + fi.planes_bytes + FRAME_HEADER_BYTES;
  s = validate_item_table(table, fi, plan.dtype, plan.kind, h.exps_bytes);
  if (s != Status::ok) return s;
  auto checked = [&](uint32_t j) {
    const uint64_t first = fi.first_elem + uint64_t(j) * fi.item_elems;
    return host_item_check(plan.dtype, message + first * eb, fi.item_elems_at(j)) == item_check(table, j);
  };
  if (plan.kind == FrameKind::raw) {
    std::memcpy(message + fi.first_elem * eb, frame, fi.elems * eb);
    for (uint32_t j = 0; j < fi.items; ++j)
      if (!checked(j)) return Status::checksum_mismatch;
    return Status::ok;
  }
  const uint8_t* chunks = table + item_table_bytes(fi.items);
  std::vector<uint8_t> stream;
  uint32_t start = 0;
  for (uint32_t j = 0; j < fi.items; ++j) {
    const uint32_t end = item_end(table, j);
    const uint32_t elems = fi.item_elems_at(j);
    const format::Layout L = format::layout_for(plan.dtype, elems, format::MAX_CHUNK_LOG2);
    // Rebuild the item's one-chunk stream and let the reference decoder check and decode it.
    stream.assign(L.exp_offset + (end - start), 0);
    const format::Header vh =
        format::make_header(plan.dtype, code, elems, format::MAX_CHUNK_LOG2, stream.size(), L.low_max_bytes);
    std::memcpy(stream.data(), &vh, sizeof vh);
    const uint8_t* planes = frame + item_planes_offset(plan, fi, j);
    std::memcpy(stream.data() + format::HEADER_BYTES, planes, L.table_offset - format::HEADER_BYTES);
    std::memcpy(stream.data() + L.low_offset, planes + (L.table_offset - format::HEADER_BYTES), L.low_max_bytes);
    const uint64_t chunk_end = end - start;
    std::memcpy(stream.data() + L.table_offset, &chunk_end, 8);
    if (format::has_low(plan.dtype)) std::memcpy(stream.data() + L.low_table_offset, &L.low_max_bytes, 8);
    const uint32_t check = item_check(table, j);
    std::memcpy(stream.data() + L.check_offset, &check, 4);
    std::memcpy(stream.data() + L.exp_offset, chunks + start, end - start);
    const uint64_t first = fi.first_elem + uint64_t(j) * fi.item_elems;
    s = host::decompress(stream.data(), stream.size(), message + first * eb, uint64_t(elems) * eb);
    if (s != Status::ok) return s;
    start = end;
  }
  return Status::ok;
}

}  // namespace comm
}  // namespace zipcomm
