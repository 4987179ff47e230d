// libFuzzer target for the P2P frame checks (build: clang++ -fsanitize=fuzzer,address,undefined). The receiver
// kernel and the host reference share validate_frame_header, the item-table rules and the item checks
// (comm/p2p/protocol.cuh), so this exercises on a CPU what a GPU receiver does with a damaged frame. The kernel
// checks the table per item (item_entry_share_valid), the reference whole (validate_item_table): every frame
// whose header passes is also checked for the two refusing the same tables.
//
// Input: 8 bytes of parameters, then a body.
//   byte 0: dtype (b % 3), raw or coded frames (bit 2), bit 3 unused (the pair code is the only code), mode (bit 4)
//   bytes 1-3: the cut (tier 0 item 256 * (1 + b % 4) elements, tiers' frame sizes, an optional head)
//   bytes 4-5: message elements (1 .. 65536); byte 6: which frame; byte 7: sequence number
// Mode 0 (parse): the body is taken as the frame's bytes as they are: the decoder must not read or write out of
//   bounds, whatever it returns.
// Mode 1 (damage): a message is made from the body, frame f encoded by the reference, then damaged at the
//   positions and with the masks the body's tail gives; the decoder must refuse it or give back exactly the
//   original elements (nothing silently wrong).
//
// Compiled with ZIPCOMM_FUZZ_SEED_MAIN, the same file writes seed inputs (both modes, every dtype and kind)
// into the directory given, and runs each through the harness once.
#include <zipcomm/comm/p2p/reference.cuh>

#include "fuzz_check.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace zipcomm;
using namespace zipcomm::comm;

namespace {

constexpr size_t kParams = 8;
constexpr DType kDTypes[3] = {DType::bf16, DType::fp16, DType::fp32};

struct Setup {
  FramePlan plan;
  FrameInfo fi;
  CodeId code;
  uint64_t seq;
  bool damage_mode;
};

/// The cut and frame the parameter bytes ask for; false when they describe no valid frame.
bool make_setup(const uint8_t* p, Setup& s) {
  const DType dtype = kDTypes[p[0] % 3];
  const FrameKind kind = (p[0] & 4) ? FrameKind::raw : FrameKind::coded;
  s.code = CodeId::pair;
  s.damage_mode = (p[0] & 16) != 0;
  PipelineShape shape;
  shape.tier[0] = {256u * (1u + p[1] % 4u), 1u + (p[1] >> 2) % 4u, 0};
  shape.tier[1] = {256u, 1u + p[2] % 8u, uint64_t(256) * (p[2] >> 3)};
  shape.tier[2] = {256u, 1u + p[3] % 4u, uint64_t(256) * ((p[3] >> 2) % 8u)};
  shape.num_tiers = 1u + (p[3] >> 5) % 3u;
  if (p[3] & 0x80) shape.head = {256u, 2u, uint64_t(512) * (1u + p[2] % 4u)};
  if (!shape_valid(shape)) return false;
  const uint64_t n = 1 + (uint64_t(p[4]) | uint64_t(p[5]) << 8);
  s.plan = make_plan(dtype, kind, n, shape);
  if (s.plan.num_frames == 0) return false;
  s.fi = s.plan.frame(p[6] % s.plan.num_frames);
  s.seq = p[7];
  return true;
}

/// The receiver kernel's per-item table check refuses exactly what the reference's whole-table check refuses.
void check_table_shares(const Setup& s, const uint8_t* frame, size_t size) {
  if (size < s.fi.planes_bytes + FRAME_HEADER_BYTES) return;
  FrameHeader h;
  std::memcpy(&h, frame + s.fi.planes_bytes, sizeof h);
  if (validate_frame_header(h, s.plan, s.fi, s.code, s.seq) != Status::ok) return;
  if (size < s.fi.planes_bytes + h.exps_bytes) return;
  const uint8_t* table = frame + s.fi.planes_bytes + FRAME_HEADER_BYTES;
  bool shares = true;
  for (uint32_t j = 0; j < s.fi.items; ++j)
    shares = shares && item_entry_share_valid(table, s.fi, s.plan.dtype, s.plan.kind, h.exps_bytes, j);
  FUZZ_CHECK(shares == (validate_item_table(table, s.fi, s.plan.dtype, s.plan.kind, h.exps_bytes) == Status::ok));
}

void parse_mode(const Setup& s, const uint8_t* body, size_t size) {
  // Exactly `size` readable bytes: ASan reports any read past the frame.
  std::vector<uint8_t> frame(body, body + size);
  std::vector<uint8_t> message(s.plan.n * format::elem_bytes(s.plan.dtype));
  check_table_shares(s, frame.data(), frame.size());
  (void)host_decode_frame(s.plan, s.fi, s.code, s.seq, frame.data(), frame.size(), message.data());
}

void damage_mode(const Setup& s, const uint8_t* body, size_t size) {
  const uint64_t bytes = s.plan.n * format::elem_bytes(s.plan.dtype);
  std::vector<uint8_t> message(bytes);
  for (uint64_t i = 0; i < bytes; ++i) message[i] = size ? body[i % size] : uint8_t(i * 131);
  std::vector<uint8_t> frame;
  FUZZ_CHECK(host_encode_frame(s.plan, s.fi, s.code, s.seq, message.data(), frame) == Status::ok);
  // The intact frame decodes to the original.
  std::vector<uint8_t> out(bytes, 0xA5);
  FUZZ_CHECK(host_decode_frame(s.plan, s.fi, s.code, s.seq, frame.data(), frame.size(), out.data()) == Status::ok);
  const uint64_t eb = format::elem_bytes(s.plan.dtype);
  const uint64_t at = s.fi.first_elem * eb, len = s.fi.elems * eb;
  FUZZ_CHECK(std::memcmp(out.data() + at, message.data() + at, len) == 0);
  // Damage: the body's last bytes, in groups of 3 (position low, position high, xor mask), up to 8 of them.
  const size_t groups = size / 3 < 8 ? size / 3 : 8;
  for (size_t g = 0; g < groups; ++g) {
    const uint8_t* d = body + size - 3 * (g + 1);
    const size_t pos = (size_t(d[0]) | size_t(d[1]) << 8) % frame.size();
    frame[pos] ^= d[2];
  }
  // Truncation too, when the first body byte says so.
  size_t keep = frame.size();
  if (size && (body[0] & 1)) keep = (size_t(body[0]) * 97) % frame.size();
  std::vector<uint8_t> cut(frame.begin(), frame.begin() + keep);
  check_table_shares(s, cut.data(), cut.size());
  std::fill(out.begin(), out.end(), 0xA5);
  const Status st = host_decode_frame(s.plan, s.fi, s.code, s.seq, cut.data(), cut.size(), out.data());
  if (st == Status::ok) {
    // Accepted: then every element of the frame must be the original (a change in bytes the decoder does not
    // use, e.g. zero padding, may be accepted; a wrong element may not).
    FUZZ_CHECK(std::memcmp(out.data() + at, message.data() + at, len) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kParams) return 0;
  Setup s;
  if (!make_setup(data, s)) return 0;
  if (s.damage_mode)
    damage_mode(s, data + kParams, size - kParams);
  else
    parse_mode(s, data + kParams, size - kParams);
  return 0;
}

#ifdef ZIPCOMM_FUZZ_SEED_MAIN
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  int written = 0;
  for (int dt = 0; dt < 3; ++dt)
    for (int raw = 0; raw < 2; ++raw)
      for (int mode = 0; mode < 2; ++mode) {
        std::vector<uint8_t> in = {uint8_t(dt | raw << 2 | mode << 4), 5, 0x21, 0x47, 0x39, 0x30, 1, 7};
        Setup s;
        if (!make_setup(in.data(), s)) continue;
        if (mode == 0) {  // a valid frame, for the parser to start from
          std::vector<uint8_t> message(s.plan.n * format::elem_bytes(s.plan.dtype));
          for (size_t i = 0; i < message.size(); ++i) message[i] = uint8_t(i * 37 + (i >> 3));
          std::vector<uint8_t> frame;
          if (host_encode_frame(s.plan, s.fi, s.code, s.seq, message.data(), frame) != Status::ok) return 1;
          in.insert(in.end(), frame.begin(), frame.end());
        } else {
          for (int i = 0; i < 96; ++i) in.push_back(uint8_t(i * 29 + 3));
        }
        LLVMFuzzerTestOneInput(in.data(), in.size());
        const std::string path = std::string(argv[1]) + "/seed_" + std::to_string(written++);
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(in.data(), 1, in.size(), f) != in.size()) return 1;
        std::fclose(f);
      }
  std::printf("%d seeds\n", written);
  return written > 0 ? 0 : 1;
}
#endif
