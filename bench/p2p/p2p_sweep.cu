// zipcomm_bench_p2p --sweep: variants of the pinned-host link's knobs (ring depth, frames, copy pieces, budget
// margin, grids, copy mode), coded always, at two sizes; --variant adds any option set (parse_variant).
#include <string>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {

// --variant NAME:KEY=VALUE,...: a link with the default options (stream mode) and these set, timed by the sweep.
// Keys: mode (stream|copy), items (tier-0 frame items), item (tier-0 item elements), slots, budget (first section-B
// budget, bytes per 1024 elements), mpm, mkel (its margin: per mille, bytes per 1024 elements), tiers, t1items,
// t1item, t1region (Ki elements), t2items, t2item, t2region, sblocks, rblocks, piece (KiB), pieces (per transfer),
// head (ITEM/FRAME/MIB of bf16). Returns false (with a message) on a key or value it does not know.
bool parse_variant(const std::string& spec, std::string& name, HostLinkMode& mode, P2POptions& o) {
  const size_t colon = spec.find(':');
  name = spec.substr(0, colon);
  mode = HostLinkMode::stream;
  o = P2POptions();
  if (colon == std::string::npos) return true;
  const std::string rest = spec.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    const size_t end = std::min(rest.find(',', pos), rest.size());
    const std::string kv = rest.substr(pos, end - pos);
    pos = end + 1;
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return std::fprintf(stderr, "--variant: '%s' is not KEY=VALUE\n", kv.c_str()), false;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
    if (k == "mode") {
      if (v == "copy") mode = HostLinkMode::copy;
      else if (v == "stream") mode = HostLinkMode::stream;
      else return std::fprintf(stderr, "--variant: unknown mode '%s'\n", v.c_str()), false;
    } else if (k == "items") o.shape.tier[0].frame_items = uint32_t(x);
    else if (k == "item") o.shape.tier[0].item_elems = uint32_t(x);
    else if (k == "slots") o.slots = uint32_t(x);
    else if (k == "budget") o.exps_budget_per_kelem = uint32_t(x);
    else if (k == "mpm") o.exps_budget_margin_permille = uint32_t(x);
    else if (k == "mkel") o.exps_budget_margin_per_kelem = uint32_t(x);
    else if (k == "tiers") o.shape.num_tiers = uint32_t(x);
    else if (k == "t1items") o.shape.tier[1].frame_items = uint32_t(x);
    else if (k == "t1item") o.shape.tier[1].item_elems = uint32_t(x);
    else if (k == "t1region") o.shape.tier[1].region_elems = uint64_t(x) << 10;  // Ki elements
    else if (k == "t2items") o.shape.tier[2].frame_items = uint32_t(x);
    else if (k == "t2item") o.shape.tier[2].item_elems = uint32_t(x);
    else if (k == "t2region") o.shape.tier[2].region_elems = uint64_t(x) << 10;
    else if (k == "sblocks") o.sender_blocks = int(x);
    else if (k == "rblocks") o.receiver_blocks = int(x);
    else if (k == "piece") o.copy_piece_bytes = uint64_t(x) << 10;  // KiB
    else if (k == "pieces") o.copy_pieces_per_transfer = uint32_t(x);
    else if (k == "head") {
      unsigned item = 0, frame = 0, mib = 0;
      if (std::sscanf(v.c_str(), "%u/%u/%u", &item, &frame, &mib) != 3)
        return std::fprintf(stderr, "--variant: head wants ITEM/FRAME/MIB\n"), false;
      o.shape.head = {item, frame, uint64_t(mib) << 19};
    } else
      return std::fprintf(stderr, "--variant: unknown key '%s'\n", k.c_str()), false;
  }
  if (!shape_valid(o.shape))
    return std::fprintf(stderr, "--variant %s: not a valid pipeline shape\n", name.c_str()), false;
  return true;
}

int run_sweep(HostBench& hb, const Options& opt) {
  struct Variant {
    const char* name;
    HostLinkMode mode;
    P2POptions opt;
  };
  std::vector<Variant> vs;
  auto add = [&](const char* name, HostLinkMode m, auto&& tweak) {
    P2POptions o;
    tweak(o);
    vs.push_back({name, m, o});
  };
  // The default link and one knob moved each way (head: item elements x items per frame, region in MiB of bf16,
  // elements = MiB << 19); then copy mode, the fallback.
  const HostLinkMode stream_mode = HostLinkMode::stream;
  add("stream default", stream_mode, [](P2POptions&) {});
  add("stream frames of 256 items", stream_mode, [](P2POptions& o) { o.shape.tier[0].frame_items = 256; });
  add("stream frames of 1024 items", stream_mode, [](P2POptions& o) { o.shape.tier[0].frame_items = 1024; });
  add("stream 8 slots", stream_mode, [](P2POptions& o) { o.slots = 8; });
  add("stream 32 slots", stream_mode, [](P2POptions& o) { o.slots = 32; });
  add("stream head 4096x256 over 8 MiB", stream_mode,
      [](P2POptions& o) { o.shape.head = {4096, 256, uint64_t(8) << 19}; });
  add("stream whole copies", stream_mode, [](P2POptions& o) { o.copy_piece_bytes = o.copy_pieces_per_transfer = 0; });
  add("stream pieces of 1/16", stream_mode, [](P2POptions& o) { o.copy_pieces_per_transfer = 16; });
  add("stream budget margin 2% + 4", stream_mode, [](P2POptions& o) {
    o.exps_budget_margin_permille = 20;
    o.exps_budget_margin_per_kelem = 4;
  });
  add("stream sender on half the SMs", stream_mode,
      [&](P2POptions& o) { o.sender_blocks = hb.prop.multiProcessorCount / 2; });
  add("copy default", HostLinkMode::copy, [](P2POptions&) {});
  add("copy frames of 128 items", HostLinkMode::copy, [](P2POptions& o) { o.shape.tier[0].frame_items = 128; });
  // --variant links: always timed; the built-in ones then only where --sweep-only names them.
  const size_t builtin = vs.size();
  std::vector<std::string> variant_names(opt.variants.size());
  for (size_t i = 0; i < opt.variants.size(); ++i) {
    Variant v{nullptr, HostLinkMode::stream, P2POptions()};
    if (!parse_variant(opt.variants[i], variant_names[i], v.mode, v.opt)) return 2;
    v.name = variant_names[i].c_str();
    vs.push_back(v);
  }
  std::printf("\nknob sweep (coded, always): ms at %llu MiB / %llu MiB, and GB/s\n",
              (unsigned long long)opt.sweep_mib[0], (unsigned long long)opt.sweep_mib[1]);
  for (size_t vi = 0; vi < vs.size(); ++vi) {
    Variant& v = vs[vi];
    if (vi < builtin && !opt.variants.empty() && opt.sweep_only.empty()) continue;
    if (vi < builtin && !opt.sweep_only.empty() && std::string(v.name).find(opt.sweep_only) == std::string::npos)
      continue;
    HostStagingLink<DType::bf16> link;
    CK(link.init(0, v.opt, v.mode));
    double ms[2];
    const uint64_t sizes[2] = {opt.sweep_mib[0] << 20, opt.sweep_mib[1] << 20};
    for (int k = 0; k < 2; ++k) {
      const uint64_t bytes = std::min(sizes[k], hb.max_bytes);
      auto wait = [&] {
        if (link.wait() != Status::ok) std::fprintf(stderr, "sweep %s: transfer failed\n", v.name), std::exit(1);
      };
      ms[k] = hb.time_ms(
          7, [&] { CK(link.transfer_coded(hb.src, hb.dst, bytes / 2, hb.stream)); }, wait);
      hb.verify(bytes, v.name);
      hb.rows.push_back({bytes, std::string("sweep: ") + v.name, ms[k], bytes / ms[k] / 1e6,
                      "wire " + std::to_string(link.wire_bytes())});
    }
    std::printf(
        "  %-56s %8.3f ms %7.1f GB/s | %8.3f ms %7.1f GB/s%s\n", v.name, ms[0],
        std::min(sizes[0], hb.max_bytes) / ms[0] / 1e6, ms[1], std::min(sizes[1], hb.max_bytes) / ms[1] / 1e6,
        link.wire_bytes()
            ? (" | wire/raw " + std::to_string(double(link.wire_bytes()) / std::min(sizes[1], hb.max_bytes))).c_str()
            : "");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace p2p_bench
