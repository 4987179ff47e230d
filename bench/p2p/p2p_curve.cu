// zipcomm_bench_p2p's curve: effective GB/s of the pinned-host link (each mode asked for, coded always and as used
// after calibrate()) against message size, next to the raw pipelined copy-engine transfer (best chunk of a sweep,
// and timed in pairs with the link); writes the JSON bench/plot_p2p.py draws.
#include <string>

#include "p2p/p2p_bench.cuh"

namespace p2p_bench {

int run_curve(HostBench& hb, const Options& opt) {
  // ---- raw baseline: the pipelined copy-engine transfer, best chunk of a sweep ------------------------------
  const uint64_t chunks[] = {uint64_t(128) << 10, uint64_t(256) << 10, uint64_t(512) << 10, uint64_t(1) << 20,
                             uint64_t(2) << 20,   uint64_t(4) << 20,   uint64_t(8) << 20,   uint64_t(16) << 20};
  constexpr uint32_t RAW_BUFFERS = 4;
  uint8_t* raw_host;
  CK(cudaHostAlloc(&raw_host, RAW_BUFFERS * (uint64_t(16) << 20), cudaHostAllocDefault));
  uint8_t* raw_host_wc;  // the baseline also gets write-combined staging, and keeps whichever is faster
  CK(cudaHostAlloc(&raw_host_wc, RAW_BUFFERS * (uint64_t(16) << 20), cudaHostAllocWriteCombined));
  std::vector<cudaEvent_t> raw_events(2 * RAW_BUFFERS + 2);
  for (auto& e : raw_events) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  // ---- the links ------------------------------------------------------------------------------------------
  struct Link {
    const char* name;
    HostStagingLink<DType::bf16> link;
  };
  // The modes asked for (default options), then each --curve-variant (named by its spec's NAME).
  std::vector<Link> all_links(2 + opt.curve_variants.size());
  std::vector<std::string> curve_names(opt.curve_variants.size());
  const HostLinkMode all_modes[2] = {HostLinkMode::stream, HostLinkMode::copy};
  const char* all_names[2] = {"stream", "copy"};
  int NL = 0;
  for (int k = 0; k < 2; ++k) {
    if (("," + opt.modes + ",").find(std::string(",") + all_names[k] + ",") == std::string::npos) continue;
    all_links[NL].name = all_names[k];
    CK(all_links[NL].link.init(0, P2POptions(), all_modes[k]));
    if (all_links[NL].link.mode() != all_modes[k]) {
      std::printf("%s mode: not supported on this GPU/driver (no 64-bit stream memory operations), skipped\n",
                  all_names[k]);
      continue;
    }
    ++NL;
  }
  for (size_t i = 0; i < opt.curve_variants.size(); ++i) {
    HostLinkMode m;
    P2POptions o;
    if (!parse_variant(opt.curve_variants[i], curve_names[i], m, o)) return 2;
    all_links[NL].name = curve_names[i].c_str();
    CK(all_links[NL].link.init(0, o, m));
    ++NL;
  }
  Link* links = all_links.data();
  for (int k = 0; k < NL; ++k) {
    Link& l = links[k];
    CK(l.link.calibrate(hb.src, hb.sample.size() / 2));
    std::printf(
        "%s mode: measured bypass threshold %s\n", l.name,
        l.link.bypass_threshold() == UINT64_MAX ? "never code" : bench::human_bytes(l.link.bypass_threshold()).c_str());
  }

  std::printf("\n%-9s %9s %8s |", "size", "raw GB/s", "chunk");
  for (int k = 0; k < NL; ++k) std::printf(" %8s", links[k].name);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %7s+bp", links[k].name);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %c+bp/raw", links[k].name[0]);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %c+bp/swp", links[k].name[0]);
  std::printf(" |");
  for (int k = 0; k < NL; ++k) std::printf(" %6s %13s", "paced", "host us l/r");
  std::printf("\n");
  std::vector<double> min_ratio(NL, 1e9), min_ratio_64(NL, 1e9);
  for (uint64_t bytes = opt.min_kib << 10; bytes <= hb.max_bytes; bytes *= 2) {
    const uint64_t n = bytes / 2;
    const int reps = std::max(5, int(opt.reps_scale * (bytes <= (uint64_t(1) << 20)    ? 41
                                                   : bytes <= (uint64_t(64) << 20) ? 21
                                                                                   : 7)));
    // raw: best chunk
    double raw_best = 1e30;
    uint64_t raw_chunk = 0;
    uint8_t* raw_best_host = raw_host;
    std::vector<uint64_t> cands;  // pipelined chunk sizes below the message size, and one chunk (two copies)
    for (uint64_t c : chunks)
      if (c < bytes) cands.push_back(c);
    if (bytes <= RAW_BUFFERS * (uint64_t(16) << 20)) cands.push_back(bytes);
    for (uint8_t* host : {raw_host, raw_host_wc})
      for (uint64_t c : cands) {
        const double ms = hb.time_ms(
            reps,
            [&] {
              CK(StagedRawCopy::run(hb.src, hb.dst, bytes, c, host, RAW_BUFFERS, raw_events.data(), hb.stream,
                                    hb.side));
            },
            no_wait);
        if (ms < raw_best) raw_best = ms, raw_chunk = c, raw_best_host = host;
      }
    CK(cudaMemsetAsync(hb.dst, 0, bytes, hb.stream));  // on the copy's stream: a legacy memset could land after it
    CK(StagedRawCopy::run(hb.src, hb.dst, bytes, raw_chunk, raw_best_host, RAW_BUFFERS, raw_events.data(), hb.stream,
                          hb.side));
    CK(cudaStreamSynchronize(hb.stream));
    hb.verify(bytes, "raw");
    hb.rows.push_back({bytes, "raw", raw_best, bytes / raw_best / 1e6,
                    "chunk " + std::to_string(raw_chunk) + (raw_best_host == raw_host_wc ? ", write-combined" : "")});
    std::vector<double> coded(NL), autob(NL), raw_pair(NL), host_link(NL), host_raw(NL), paced_ratio(NL, 0.0);
    // Below 16 MiB a timing covers several transfers back to back, queued behind a blocking kernel (GPU time;
    // the host-paced ratio and each side's host time per call are printed too).
    const int batch = bytes < (uint64_t(256) << 10) ? 32 : bytes < (uint64_t(16) << 20) ? 8 : 1;
    for (int k = 0; k < NL; ++k) {
      HostStagingLink<DType::bf16>& link = links[k].link;
      auto wait = [&] {
        const Status s = link.wait();
        if (s != Status::ok) {
          std::fprintf(stderr, "%s link: %s at %llu bytes\n", links[k].name, status_string(s),
                       (unsigned long long)bytes);
          std::exit(1);
        }
      };
      coded[k] = hb.time_ms(
          reps, [&] { CK(link.transfer_coded(hb.src, hb.dst, n, hb.stream)); }, wait);
      CK(cudaMemsetAsync(hb.dst, 0, bytes,
                         hb.stream));  // on the transfer's stream: a legacy memset could land after it
      CK(link.transfer_coded(hb.src, hb.dst, n, hb.stream));
      wait();
      hb.verify(bytes, links[k].name);
      // The link as used against the raw transfer with `chunk`, timed alternately (blocked: GPU time).
      auto link_vs_raw = [&](uint64_t chunk, bool blocked) {
        return hb.time_pair_ms(
            reps, [&] { CK(link.transfer(hb.src, hb.dst, n, hb.stream)); }, wait,
            [&] {
              CK(StagedRawCopy::run(hb.src, hb.dst, bytes, chunk, raw_best_host, RAW_BUFFERS, raw_events.data(),
                                    hb.stream, hb.side));
            },
            no_wait, batch, blocked);
      };
      const auto pair = link_vs_raw(raw_chunk, batch > 1);
      autob[k] = pair.first;
      raw_pair[k] = pair.second;
      host_link[k] = hb.host_us[0], host_raw[k] = hb.host_us[1];
      if (batch > 1 && raw_chunk < bytes) {
        // The sweep picked its chunk by host-paced timing (one transfer per timing); in GPU time one chunk (two
        // copies on one stream) can beat it (256 KiB: 20 us against 26 for two 128 KiB chunks, H200). The
        // pair is timed again against one chunk, and the stronger raw baseline is kept.
        const auto one = link_vs_raw(bytes, true);
        if (one.second < pair.second) {
          autob[k] = one.first;
          raw_pair[k] = one.second;
          host_link[k] = hb.host_us[0], host_raw[k] = hb.host_us[1];
        }
      }
      if (batch > 1) {  // the same pair timed as the host issues it (not blocked): what a caller's loop sees
        const auto paced = link_vs_raw(raw_chunk, false);
        paced_ratio[k] = paced.second / paced.first;
        hb.rows.push_back({bytes, std::string("probe_hostpaced_link_") + links[k].name, paced.first,
                        bytes / paced.first / 1e6, "as link_ but not blocked: the host's calls pace the batch"});
        hb.rows.push_back({bytes, std::string("probe_hostpaced_raw_") + links[k].name, paced.second,
                        bytes / paced.second / 1e6, "as raw_paired_ but not blocked"});
      }
      hb.rows.push_back({bytes, std::string("probe_host_us_link_") + links[k].name, host_link[k] / 1e3, 0,
                      "host time per transfer() call (ms field)"});
      hb.rows.push_back({bytes, std::string("probe_host_us_raw_") + links[k].name, host_raw[k] / 1e3, 0,
                      "host time per raw transfer's calls (ms field)"});
      CK(cudaMemsetAsync(hb.dst, 0, bytes, hb.stream));
      CK(link.transfer(hb.src, hb.dst, n, hb.stream));
      wait();
      hb.verify(bytes, links[k].name);
      hb.rows.push_back({bytes, std::string("coded_") + links[k].name, coded[k], bytes / coded[k] / 1e6, ""});
      hb.rows.push_back({bytes, std::string("link_") + links[k].name, autob[k], bytes / autob[k] / 1e6,
                      use_bypass(bytes, link.bypass_threshold())
                          ? "bypass (raw, chunk " + std::to_string(link.raw_chunk_for(bytes)) + ")"
                          : std::string("coded")});
      hb.rows.push_back({bytes, std::string("raw_paired_") + links[k].name, raw_pair[k], bytes / raw_pair[k] / 1e6,
                      "raw (chunk of the sweep, or one chunk where that was faster in GPU time) timed alternately "
                      "with link_" + std::string(links[k].name)});
      const double r = raw_pair[k] / autob[k];
      min_ratio[k] = std::min(min_ratio[k], r);
      if (bytes >= (uint64_t(64) << 20)) min_ratio_64[k] = std::min(min_ratio_64[k], r);
    }
    std::printf("%-9s %9.2f %8s |", bench::human_bytes(bytes).c_str(), bytes / raw_best / 1e6,
                bench::human_bytes(raw_chunk).c_str());
    for (int k = 0; k < NL; ++k) std::printf(" %8.2f", bytes / coded[k] / 1e6);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %10.2f", bytes / autob[k] / 1e6);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %9.3f", raw_pair[k] / autob[k]);
    std::printf(" |");
    for (int k = 0; k < NL; ++k) std::printf(" %9.3f", raw_best / autob[k]);
    std::printf(" |");
    for (int k = 0; k < NL; ++k)
      if (batch > 1)
        std::printf(" %6.3f %6.1f/%-6.1f", paced_ratio[k], host_link[k], host_raw[k]);
      else
        std::printf(" %6s %6.1f/%-6.1f", "-", host_link[k], host_raw[k]);
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf(
      "\nGB/s = message bytes / (start .. receiver holds every decoded element); raw = pipelined "
      "copy-engine transfer, best of one chunk and chunks of {128K..16M}; stream/copy = the link's modes, "
      "coded always; +bp = the link as used (raw below its measured bypass threshold); first "
      "s/c+bp/raw = link (+bp) speed over the raw transfer (the sweep's chunk, below 16 MiB also one "
      "chunk: the faster) timed alternately with it (below 256 KiB: 32 transfers of each side per timing, "
      "below 16 MiB: 8, interleaved and queued behind a blocking kernel so the GPU's work is timed, an "
      "event before each transfer; which goes first alternates); second = over the sweep's best raw time "
      "(one transfer per timing); last group, per link: the same ratio with the host pacing the batch (not "
      "blocked), and host us per call, link/raw.\n");
  for (int k = 0; k < NL; ++k)
    std::printf("%s link: min over sizes of speed/raw %.3f; min at >= 64 MiB %.3f\n", links[k].name, min_ratio[k],
                min_ratio_64[k]);

  if (!opt.json.empty()) {
    std::ofstream o(opt.json);
    o << "{\n  \"gpu\": \"" << hb.prop.name << "\",\n  \"data\": \"" << opt.data << "/llama_grads.bf16 tiled\",\n"
      << "  \"bypass\": {";
    for (int k = 0; k < NL; ++k)
      o << "\"" << links[k].name
        << "\": " << (links[k].link.bypass_threshold() == UINT64_MAX ? -1.0 : double(links[k].link.bypass_threshold()))
        << (k + 1 < NL ? ", " : "},\n");
    o << "  \"min_ratio\": {";
    for (int k = 0; k < NL; ++k) o << "\"" << links[k].name << "\": " << min_ratio[k] << (k + 1 < NL ? ", " : "},\n");
    o << "  \"min_ratio_64mib\": {";
    for (int k = 0; k < NL; ++k)
      o << "\"" << links[k].name << "\": " << min_ratio_64[k] << (k + 1 < NL ? ", " : "},\n");
    o << "  \"rows\": [\n";
    write_rows_json(o, hb.rows);
    o << "  ]\n}\n";
  }
  CK(cudaFreeHost(raw_host));
  CK(cudaFreeHost(raw_host_wc));
  for (cudaEvent_t& e : raw_events) CK(cudaEventDestroy(e));
  return 0;
}

}  // namespace p2p_bench
