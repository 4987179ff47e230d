// zipcomm-file: compress, decompress and measure raw tensor files and .safetensors files with zipcomm v1.
//
//   zipcomm-file compress   --dtype bf16|fp16|fp32 [--code gaussian|window3] IN OUT
//   zipcomm-file compress   [--code C] IN.safetensors OUT          (container, docs/FILE_CONTAINER.md)
//   zipcomm-file decompress IN OUT                                  (stream or container, detected by magic)
//   zipcomm-file stats      --dtype D [--code C] [--json] FILE
//   options: --format raw|safetensors  --host (never use the GPU)  --verify (GPU bytes must equal host bytes)
//
// Uses the GPU (device::compress / device::decompress) when one is present, the host reference codec
// otherwise; both write identical bytes. Exit codes: 0 ok, 1 error (message on stderr), 2 usage.
//
// Built as CUDA when ZIPCOMM_WITH_CUDA is defined (CMake does it when CUDA is enabled), else as plain C++.

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <zipcomm/format.hpp>
#include <zipcomm/host/reference_codec.hpp>

#if defined(ZIPCOMM_WITH_CUDA)
#include <cuda_runtime.h>

#include <zipcomm/device/device_codec_dispatch.cuh>  // run-time (dtype, code) dispatch: all six kernel pairs
#define ZIPCOMM_FILE_GPU 1
#else
#define ZIPCOMM_FILE_GPU 0
#endif

#include "json_lite.hpp"
#include "safetensors.hpp"

namespace zipcomm_file {

using zipcomm::CodeId;
using zipcomm::DType;
using zipcomm::Status;
namespace format = zipcomm::format;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------------- file I/O

std::vector<uint8_t> read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + got);
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) throw Error("cannot read '" + path + "'");
  return data;
}

void write_file(const std::string& path, const std::vector<uint8_t>& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot create '" + path + "': " + std::strerror(errno));
  bool ok = data.empty() || std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error("cannot write '" + path + "'");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void put_le(std::vector<uint8_t>& v, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i) v.push_back(uint8_t(x >> (8 * i)));
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t fnv1a64(const uint8_t* p, uint64_t n) {
  uint64_t h = 14695981039346656037ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// ---------------------------------------------------------------------------------------------- codec

const char* code_name(CodeId c) { return c == CodeId::gaussian ? "gaussian" : c == CodeId::window3 ? "window3" : "?"; }

#if ZIPCOMM_FILE_GPU
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { cuda_check(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc"); }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};
#endif

/// Compresses / decompresses through the GPU when one is usable, through the host codec otherwise.
class Codec {
 public:
  Codec(bool force_host, bool verify) : verify_(verify) {
#if ZIPCOMM_FILE_GPU
    int count = 0;
    if (!force_host && cudaGetDeviceCount(&count) == cudaSuccess && count > 0) gpu_ = true;
    if (!gpu_) (void)cudaGetLastError();  // clear the sticky "no device" error
#else
    (void)force_host;
#endif
  }
  bool gpu() const { return gpu_; }
  const char* path() const { return gpu_ ? "gpu" : "host"; }

  std::vector<uint8_t> compress(DType d, CodeId c, const uint8_t* src, uint64_t n) const {
    std::vector<uint8_t> out;
#if ZIPCOMM_FILE_GPU
    if (gpu_ && n > 0) {
      out = gpu_compress(d, c, src, n);
      if (verify_) {
        std::vector<uint8_t> ref = host_compress(d, c, src, n);
        if (ref != out) throw Error("--verify: GPU stream differs from the host codec's stream (" +
                                    std::to_string(out.size()) + " vs " + std::to_string(ref.size()) + " bytes)");
      }
      return out;
    }
#endif
    return host_compress(d, c, src, n);
  }

  /// Decompresses one stream (exactly `bytes` bytes); returns the raw tensor bytes.
  std::vector<uint8_t> decompress(const uint8_t* src, uint64_t bytes, format::Header* out_header = nullptr) const {
    format::Header h;
    Status st = zipcomm::host::read_header(src, bytes, &h);
    if (st != Status::ok) throw Error(std::string("not a valid zipcomm v1 stream: ") + zipcomm::status_string(st));
    if (h.total_bytes != bytes)
      throw Error("stream is " + std::to_string(h.total_bytes) + " bytes but " + std::to_string(bytes) +
                  " bytes were given (trailing data)");
    if (out_header) *out_header = h;
    const DType d = DType(h.dtype);
    const uint64_t raw_bytes = h.num_elements * format::elem_bytes(d);
#if ZIPCOMM_FILE_GPU
    if (gpu_ && h.num_elements > 0) {
      std::vector<uint8_t> out = gpu_decompress(d, CodeId(h.code), src, bytes, h.num_elements);
      if (verify_) {
        std::vector<uint8_t> ref = host_decompress(src, bytes, raw_bytes);
        if (ref != out) throw Error("--verify: GPU decompression differs from the host codec's");
      }
      return out;
    }
#endif
    return host_decompress(src, bytes, raw_bytes);
  }

 private:
  bool gpu_ = false;
  bool verify_ = false;

  static std::vector<uint8_t> host_compress(DType d, CodeId c, const uint8_t* src, uint64_t n) {
    std::vector<uint8_t> out(format::max_compressed_bytes(d, n));
    uint64_t bytes = 0;
    Status st = zipcomm::host::compress(d, c, src, n, out.data(), out.size(), &bytes);
    if (st != Status::ok) throw Error(std::string("host compress failed: ") + zipcomm::status_string(st));
    out.resize(bytes);
    return out;
  }
  static std::vector<uint8_t> host_decompress(const uint8_t* src, uint64_t bytes, uint64_t raw_bytes) {
    std::vector<uint8_t> out(raw_bytes);
    Status st = zipcomm::host::decompress(src, bytes, out.data(), out.size());
    if (st != Status::ok) throw Error(std::string("decompression failed: ") + zipcomm::status_string(st));
    return out;
  }

#if ZIPCOMM_FILE_GPU
  struct DeviceResult {
    uint64_t bytes;
    Status status;
  };
  static std::vector<uint8_t> gpu_compress(DType d, CodeId c, const uint8_t* src, uint64_t n) {
    const uint64_t in_bytes = n * format::elem_bytes(d);
    const uint64_t cap = format::max_compressed_bytes(d, n);
    DeviceBuffer d_in(in_bytes), d_out(cap), d_res(sizeof(DeviceResult));
    cuda_check(cudaMemcpy(d_in.p, src, in_bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    cuda_check(cudaMemset(d_res.p, 0xFF, sizeof(DeviceResult)), "cudaMemset");
    auto* res = static_cast<DeviceResult*>(d_res.p);
    size_t temp = 0;
    cuda_check(zipcomm::device::compress(d, c, nullptr, temp, d_in.p, n, d_out.p, cap, &res->bytes, &res->status),
               "device::compress (size query)");
    DeviceBuffer d_temp(temp);
    cuda_check(zipcomm::device::compress(d, c, d_temp.p, temp, d_in.p, n, d_out.p, cap, &res->bytes, &res->status),
               "device::compress");
    cuda_check(cudaDeviceSynchronize(), "device::compress (kernel)");
    DeviceResult r;
    cuda_check(cudaMemcpy(&r, d_res.p, sizeof r, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    if (r.status != Status::ok) throw Error(std::string("device compress failed: ") + zipcomm::status_string(r.status));
    if (r.bytes > cap || r.bytes < format::HEADER_BYTES)
      throw Error("device compress reported an impossible size " + std::to_string(r.bytes));
    std::vector<uint8_t> out(r.bytes);
    cuda_check(cudaMemcpy(out.data(), d_out.p, r.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }
  static std::vector<uint8_t> gpu_decompress(DType d, CodeId c, const uint8_t* src, uint64_t bytes, uint64_t n) {
    const uint64_t out_bytes = n * format::elem_bytes(d);
    DeviceBuffer d_in(bytes), d_out(out_bytes), d_res(sizeof(DeviceResult));
    cuda_check(cudaMemcpy(d_in.p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    cuda_check(cudaMemset(d_res.p, 0xFF, sizeof(DeviceResult)), "cudaMemset");
    auto* res = static_cast<DeviceResult*>(d_res.p);
    size_t temp = 0;
    cuda_check(zipcomm::device::decompress(d, c, nullptr, temp, d_in.p, bytes, d_out.p, n, &res->status),
               "device::decompress (size query)");
    DeviceBuffer d_temp(temp);
    cuda_check(zipcomm::device::decompress(d, c, d_temp.p, temp, d_in.p, bytes, d_out.p, n, &res->status),
               "device::decompress");
    cuda_check(cudaDeviceSynchronize(), "device::decompress (kernel)");
    DeviceResult r;
    cuda_check(cudaMemcpy(&r, d_res.p, sizeof r, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    if (r.status != Status::ok)
      throw Error(std::string("device decompress failed: ") + zipcomm::status_string(r.status));
    std::vector<uint8_t> out(out_bytes);
    cuda_check(cudaMemcpy(out.data(), d_out.p, out_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }
#endif
};

// ---------------------------------------------------------------------------------------------- statistics

/// Exponent-field entropy bound: (raw sign+mantissa bits + n * H0(exponent)) in bits, for n elements.
double bound_bits(DType d, const uint8_t* src, uint64_t n) {
  std::vector<uint64_t> hist(256, 0);
  const int eb = format::exp_bits(d);
  const uint32_t es = format::elem_bytes(d);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t b;
    if (d == DType::fp32) {
      std::memcpy(&b, src + 4 * i, 4);
      ++hist[(b >> 23) & 0xFF];
    } else {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      ++hist[d == DType::bf16 ? (v >> 7) & 0xFF : (v >> 10) & 0x1F];
    }
  }
  double h = 0;
  for (uint64_t c : hist)
    if (c) {
      double p = double(c) / double(n);
      h -= p * std::log2(p);
    }
  return double(n) * (double(es * 8 - eb) + h);
}

struct StreamStats {
  uint64_t chunks = 0, raw_chunks = 0;
};

StreamStats stream_stats(const std::vector<uint8_t>& s) {
  format::Header h;
  std::memcpy(&h, s.data(), sizeof h);
  const DType d = DType(h.dtype);
  const format::Layout l = format::layout_for(d, h.num_elements);
  StreamStats st;
  st.chunks = l.num_chunks;
  uint64_t prev = 0;
  for (uint64_t c = 0; c < l.num_chunks; ++c) {
    uint64_t end = get_le(s.data() + l.table_offset + 8 * c, 8);
    if (end - prev == format::raw_chunk_bytes(d, format::chunk_elems(h.num_elements, c))) ++st.raw_chunks;
    prev = end;
  }
  return st;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string ratio_str(uint64_t num, uint64_t den) { return den ? fmt("%.6f", double(num) / double(den)) : "null"; }

// ---------------------------------------------------------------------------------------------- container

constexpr uint32_t CONTAINER_MAGIC = 0x4643505Au;  // "ZPCF"
constexpr uint32_t CONTAINER_VERSION = 1;
constexpr uint64_t CONTAINER_HEADER = 32, ENTRY_BYTES = 32, PAYLOAD_ALIGN = 16;

struct Entry {
  uint8_t kind = 0;  // 0 raw, 1 zipcomm stream
  uint8_t dtype = 0;
  uint64_t offset = 0, length = 0, stored = 0;
};

struct ContainerResult {
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> stored_of_tensor;  // per SafeFile tensor index (0 if raw)
  std::vector<StreamStats> stats_of_tensor;
};

ContainerResult build_container(const std::vector<uint8_t>& file, const SafeFile& sf, const Codec& codec,
                                CodeId code) {
  const std::vector<Segment> segs = segments_of(sf, file.size());
  std::vector<Entry> entries;
  std::vector<std::vector<uint8_t>> streams(segs.size());
  ContainerResult r;
  r.stored_of_tensor.assign(sf.tensors.size(), 0);
  r.stats_of_tensor.assign(sf.tensors.size(), StreamStats{});
  for (size_t i = 0; i < segs.size(); ++i) {
    Entry e;
    e.offset = segs[i].offset;
    e.length = segs[i].length;
    if (segs[i].tensor >= 0) {
      const SafeTensor& t = sf.tensors[segs[i].tensor];
      e.kind = 1;
      e.dtype = uint8_t(t.zdtype);
      streams[i] = codec.compress(t.zdtype, code, file.data() + t.begin, t.elements);
      e.stored = streams[i].size();
      r.stored_of_tensor[segs[i].tensor] = e.stored;
      r.stats_of_tensor[segs[i].tensor] = stream_stats(streams[i]);
    } else {
      e.stored = e.length;
    }
    entries.push_back(e);
  }
  std::vector<uint8_t>& out = r.bytes;
  put_le(out, CONTAINER_MAGIC, 4);
  put_le(out, CONTAINER_VERSION, 4);
  put_le(out, file.size(), 8);
  put_le(out, entries.size(), 4);
  put_le(out, 0, 4);
  put_le(out, fnv1a64(file.data(), file.size()), 8);
  for (const Entry& e : entries) {
    out.push_back(e.kind);
    out.push_back(e.dtype);
    put_le(out, 0, 6);
    put_le(out, e.offset, 8);
    put_le(out, e.length, 8);
    put_le(out, e.stored, 8);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    out.resize(format::align_up(out.size(), PAYLOAD_ALIGN), 0);
    if (entries[i].kind == 1)
      out.insert(out.end(), streams[i].begin(), streams[i].end());
    else
      out.insert(out.end(), file.begin() + entries[i].offset, file.begin() + entries[i].offset + entries[i].length);
  }
  return r;
}

std::vector<uint8_t> read_container(const std::vector<uint8_t>& c, const Codec& codec) {
  auto bad = [](const std::string& what) { return Error("corrupt container: " + what); };
  if (c.size() < CONTAINER_HEADER) throw bad("truncated header");
  if (get_le(c.data(), 4) != CONTAINER_MAGIC) throw bad("bad magic");
  if (get_le(c.data() + 4, 4) != CONTAINER_VERSION)
    throw bad("unsupported version " + std::to_string(get_le(c.data() + 4, 4)));
  const uint64_t orig_size = get_le(c.data() + 8, 8);
  const uint64_t count = get_le(c.data() + 16, 4);
  if (get_le(c.data() + 20, 4) != 0) throw bad("reserved flags are not zero");
  const uint64_t checksum = get_le(c.data() + 24, 8);
  if (count > (c.size() - CONTAINER_HEADER) / ENTRY_BYTES) throw bad("entry table exceeds the file");
  // Every entry is at least one byte of the original, and a stream is never larger than a few times its
  // data, so the original size is bounded by what we hold; reject absurd sizes before allocating.
  if (orig_size > uint64_t(c.size()) * 64 + (1u << 20)) throw bad("original size is implausible");
  std::vector<uint8_t> out;
  out.reserve(orig_size);
  uint64_t pos = format::align_up(CONTAINER_HEADER + count * ENTRY_BYTES, PAYLOAD_ALIGN);
  if (count == 0) pos = CONTAINER_HEADER;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = c.data() + CONTAINER_HEADER + i * ENTRY_BYTES;
    const std::string which = "entry " + std::to_string(i) + ": ";
    const uint8_t kind = e[0], dtype = e[1];
    for (int k = 2; k < 8; ++k)
      if (e[k]) throw bad(which + "reserved bytes are not zero");
    const uint64_t offset = get_le(e + 8, 8), length = get_le(e + 16, 8), stored = get_le(e + 24, 8);
    if (offset != out.size()) throw bad(which + "original_offset does not continue the previous entry");
    if (length == 0 || length > orig_size - out.size()) throw bad(which + "original_length out of range");
    pos = format::align_up(pos, PAYLOAD_ALIGN);
    if (pos > c.size() || stored > c.size() - pos) throw bad(which + "payload runs past the end of the file");
    const uint8_t* payload = c.data() + pos;
    if (kind == 0) {
      if (dtype != 0 || stored != length) throw bad(which + "raw entry with a dtype or stored_length != length");
      out.insert(out.end(), payload, payload + length);
    } else if (kind == 1) {
      format::Header h;
      std::vector<uint8_t> raw;
      try {
        raw = codec.decompress(payload, stored, &h);
      } catch (const Error& err) {
        throw bad(which + err.what());
      }
      if (h.dtype != dtype) throw bad(which + "stream dtype differs from the entry's dtype");
      if (raw.size() != length) throw bad(which + "stream size differs from original_length");
      out.insert(out.end(), raw.begin(), raw.end());
    } else {
      throw bad(which + "unknown kind " + std::to_string(kind));
    }
    // Padding before the next payload must be zero.
    uint64_t next = pos + stored;
    uint64_t pad_end = i + 1 < count ? format::align_up(next, PAYLOAD_ALIGN) : next;
    if (pad_end > c.size()) throw bad("truncated padding");
    for (uint64_t k = next; k < pad_end; ++k)
      if (c[k]) throw bad(which + "non-zero padding");
    pos = pad_end;
  }
  // Padding between the entry table and the first payload must be zero too.
  for (uint64_t k = CONTAINER_HEADER + count * ENTRY_BYTES;
       count && k < format::align_up(CONTAINER_HEADER + count * ENTRY_BYTES, PAYLOAD_ALIGN); ++k)
    if (c[k]) throw bad("non-zero padding after the entry table");
  if (pos != c.size()) throw bad("trailing bytes after the last payload");
  if (out.size() != orig_size) throw bad("entries cover " + std::to_string(out.size()) + " bytes, header says " +
                                         std::to_string(orig_size));
  if (fnv1a64(out.data(), out.size()) != checksum) throw bad("checksum of the restored file does not match");
  return out;
}

// ---------------------------------------------------------------------------------------------- commands

struct Options {
  std::string cmd;
  std::vector<std::string> files;
  bool has_dtype = false;
  DType dtype = DType::bf16;
  CodeId code = CodeId::gaussian;
  bool json = false, force_host = false, verify = false;
  std::string format;  // "", "raw", "safetensors"
};

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "fp16" || s == "f16") return DType::fp16;
  if (s == "fp32" || s == "f32") return DType::fp32;
  throw UsageError("unknown --dtype '" + s + "' (bf16, fp16 or fp32)");
}
CodeId parse_code(const std::string& s) {
  if (s == "gaussian") return CodeId::gaussian;
  if (s == "window3") return CodeId::window3;
  throw UsageError("unknown --code '" + s + "' (gaussian or window3)");
}

Options parse_args(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing command");
  Options o;
  o.cmd = argv[1];
  if (o.cmd == "-h" || o.cmd == "--help" || o.cmd == "help") throw UsageError("");
  if (o.cmd != "compress" && o.cmd != "decompress" && o.cmd != "stats")
    throw UsageError("unknown command '" + o.cmd + "'");
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--dtype") o.dtype = parse_dtype(value()), o.has_dtype = true;
    else if (a == "--code") o.code = parse_code(value());
    else if (a == "--format") {
      o.format = value();
      if (o.format != "raw" && o.format != "safetensors") throw UsageError("--format is raw or safetensors");
    } else if (a == "--json") o.json = true;
    else if (a == "--host") o.force_host = true;
    else if (a == "--verify") o.verify = true;
    else if (a == "--") {
      for (++i; i < argc; ++i) o.files.push_back(argv[i]);
    } else if (a.size() > 1 && a[0] == '-') throw UsageError("unknown option '" + a + "'");
    else o.files.push_back(a);
  }
  const size_t want = o.cmd == "stats" ? 1 : 2;
  if (o.files.size() != want)
    throw UsageError(o.cmd + " takes " + std::to_string(want) + " file argument" + (want > 1 ? "s" : ""));
  return o;
}

bool is_safetensors(const Options& o) {
  if (!o.format.empty()) return o.format == "safetensors";
  return ends_with(o.files[0], ".safetensors");
}

uint64_t elements_of(const Options& o, const std::vector<uint8_t>& data) {
  const uint32_t es = format::elem_bytes(o.dtype);
  if (data.size() % es)
    throw Error("'" + o.files[0] + "' is " + std::to_string(data.size()) + " bytes, not a multiple of the " +
                zipcomm::dtype_name(o.dtype) + " element size " + std::to_string(es));
  return data.size() / es;
}

int cmd_compress(const Options& o, const Codec& codec) {
  std::vector<uint8_t> in = read_file(o.files[0]);
  if (is_safetensors(o)) {
    SafeFile sf = parse_safetensors(in.data(), in.size());
    write_file(o.files[1], build_container(in, sf, codec, o.code).bytes);
    return 0;
  }
  if (!o.has_dtype) throw UsageError("compress of a raw file needs --dtype");
  const uint64_t n = elements_of(o, in);
  write_file(o.files[1], codec.compress(o.dtype, o.code, in.data(), n));
  return 0;
}

int cmd_decompress(const Options& o, const Codec& codec) {
  std::vector<uint8_t> in = read_file(o.files[0]);
  if (in.size() < 4) throw Error("'" + o.files[0] + "' is too short to be a zipcomm stream or container");
  const uint64_t magic = get_le(in.data(), 4);
  if (magic == format::MAGIC) {
    write_file(o.files[1], codec.decompress(in.data(), in.size()));
  } else if (magic == CONTAINER_MAGIC) {
    write_file(o.files[1], read_container(in, codec));
  } else {
    throw Error("'" + o.files[0] + "' is neither a zipcomm v1 stream nor a zipcomm-file container (bad magic)");
  }
  return 0;
}

int cmd_stats_raw(const Options& o, const Codec& codec, const std::vector<uint8_t>& in) {
  if (!o.has_dtype) throw UsageError("stats of a raw file needs --dtype");
  const uint64_t n = elements_of(o, in);
  std::vector<uint8_t> s = codec.compress(o.dtype, o.code, in.data(), n);
  StreamStats st = stream_stats(s);
  const double orig_bits = 8.0 * double(in.size());
  const double bound = n ? bound_bits(o.dtype, in.data(), n) / orig_bits : 0.0;
  const double bpe = n ? 8.0 * double(s.size()) / double(n) : 0.0;
  if (o.json) {
    std::printf(
        "{\"file\": %s, \"format\": \"raw\", \"dtype\": \"%s\", \"code\": \"%s\", \"elements\": %llu, "
        "\"original_bytes\": %llu, \"compressed_bytes\": %llu, \"ratio\": %s, \"entropy_bound\": %s, "
        "\"bits_per_element\": %s, \"chunks\": %llu, \"raw_chunks\": %llu, \"path\": \"%s\"}\n",
        json_quote(o.files[0]).c_str(), zipcomm::dtype_name(o.dtype), code_name(o.code), (unsigned long long)n,
        (unsigned long long)in.size(), (unsigned long long)s.size(), ratio_str(s.size(), in.size()).c_str(),
        n ? fmt("%.6f", bound).c_str() : "null", fmt("%.4f", bpe).c_str(), (unsigned long long)st.chunks,
        (unsigned long long)st.raw_chunks, codec.path());
  } else {
    std::printf("file:              %s\n", o.files[0].c_str());
    std::printf("dtype / code:      %s / %s\n", zipcomm::dtype_name(o.dtype), code_name(o.code));
    std::printf("elements:          %llu\n", (unsigned long long)n);
    std::printf("original bytes:    %llu\n", (unsigned long long)in.size());
    std::printf("compressed bytes:  %llu (header, planes, chunk table and exponents all counted)\n",
                (unsigned long long)s.size());
    std::printf("ratio:             %s\n", ratio_str(s.size(), in.size()).c_str());
    std::printf("entropy_bound:     %s (raw sign+mantissa + order-0 exponent entropy, whole file)\n",
                n ? fmt("%.6f", bound).c_str() : "n/a");
    std::printf("bits per element:  %.4f of %u\n", bpe, format::elem_bytes(o.dtype) * 8);
    std::printf("chunks:            %llu (%llu stored raw)\n", (unsigned long long)st.chunks,
                (unsigned long long)st.raw_chunks);
    std::printf("path:              %s\n", codec.path());
  }
  return 0;
}

int cmd_stats_safetensors(const Options& o, const Codec& codec, const std::vector<uint8_t>& in) {
  SafeFile sf = parse_safetensors(in.data(), in.size());
  ContainerResult cr = build_container(in, sf, codec, o.code);
  double total_bound_bits = 8.0 * double(in.size());
  uint64_t total_elems = 0;
  std::vector<double> bounds(sf.tensors.size(), 1.0);
  for (size_t i = 0; i < sf.tensors.size(); ++i) {
    const SafeTensor& t = sf.tensors[i];
    total_elems += t.elements;
    if (t.is_float && t.elements) {
      double bb = bound_bits(t.zdtype, in.data() + t.begin, t.elements);
      bounds[i] = bb / (8.0 * double(t.end - t.begin));
      total_bound_bits -= 8.0 * double(t.end - t.begin) - bb;
    }
  }
  const double total_bound = in.empty() ? 0.0 : total_bound_bits / (8.0 * double(in.size()));
  if (o.json) {
    std::printf("{\"file\": %s, \"format\": \"safetensors\", \"dtype\": \"mixed\", \"code\": \"%s\", "
                "\"elements\": %llu, \"original_bytes\": %llu, \"compressed_bytes\": %llu, \"ratio\": %s, "
                "\"entropy_bound\": %s, \"path\": \"%s\", \"tensors\": [",
                json_quote(o.files[0]).c_str(), code_name(o.code), (unsigned long long)total_elems,
                (unsigned long long)in.size(), (unsigned long long)cr.bytes.size(),
                ratio_str(cr.bytes.size(), in.size()).c_str(), fmt("%.6f", total_bound).c_str(), codec.path());
    for (size_t i = 0; i < sf.tensors.size(); ++i) {
      const SafeTensor& t = sf.tensors[i];
      const uint64_t len = t.end - t.begin;
      const bool coded = t.is_float && len;
      const uint64_t stored = coded ? cr.stored_of_tensor[i] : len;
      std::printf("%s{\"name\": %s, \"dtype\": \"%s\", \"elements\": %llu, \"original_bytes\": %llu, "
                  "\"compressed_bytes\": %llu, \"ratio\": %s, \"entropy_bound\": %s, \"stored\": \"%s\"}",
                  i ? ", " : "", json_quote(t.name).c_str(), t.dtype.c_str(), (unsigned long long)t.elements,
                  (unsigned long long)len, (unsigned long long)stored, ratio_str(stored, len).c_str(),
                  len ? fmt("%.6f", bounds[i]).c_str() : "null", coded ? "zipcomm" : "raw");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("file: %s (safetensors, %zu tensors, JSON header %llu bytes, code %s, path %s)\n", o.files[0].c_str(),
              sf.tensors.size(), (unsigned long long)sf.header_len, code_name(o.code), codec.path());
  size_t w = 6;
  for (const auto& t : sf.tensors) w = t.name.size() > w ? t.name.size() : w;
  w = w > 60 ? 60 : w;
  std::printf("%-*s %-7s %12s %14s %14s %9s %9s %s\n", int(w), "tensor", "dtype", "elements", "bytes", "stored",
              "ratio", "bound", "raw chunks");
  for (size_t i = 0; i < sf.tensors.size(); ++i) {
    const SafeTensor& t = sf.tensors[i];
    const uint64_t len = t.end - t.begin;
    const bool coded = t.is_float && len;
    const uint64_t stored = coded ? cr.stored_of_tensor[i] : len;
    std::string chunks = coded ? std::to_string(cr.stats_of_tensor[i].raw_chunks) + "/" +
                                     std::to_string(cr.stats_of_tensor[i].chunks)
                               : "(stored raw)";
    std::printf("%-*s %-7s %12llu %14llu %14llu %9s %9s %s\n", int(w), t.name.c_str(), t.dtype.c_str(),
                (unsigned long long)t.elements, (unsigned long long)len, (unsigned long long)stored,
                len ? fmt("%.4f", double(stored) / double(len)).c_str() : "-",
                len ? fmt("%.4f", bounds[i]).c_str() : "-", chunks.c_str());
  }
  std::printf("%-*s %-7s %12llu %14llu %14llu %9s %9s (whole file: container header, JSON header, padding "
              "included)\n",
              int(w), "TOTAL", "", (unsigned long long)total_elems, (unsigned long long)in.size(),
              (unsigned long long)cr.bytes.size(), ratio_str(cr.bytes.size(), in.size()).c_str(),
              fmt("%.6f", total_bound).c_str());
  return 0;
}

int cmd_stats(const Options& o, const Codec& codec) {
  std::vector<uint8_t> in = read_file(o.files[0]);
  return is_safetensors(o) ? cmd_stats_safetensors(o, codec, in) : cmd_stats_raw(o, codec, in);
}

const char* USAGE =
    "usage:\n"
    "  zipcomm-file compress   --dtype bf16|fp16|fp32 [--code gaussian|window3] IN OUT\n"
    "  zipcomm-file compress   [--code C] IN.safetensors OUT\n"
    "  zipcomm-file decompress IN OUT\n"
    "  zipcomm-file stats      --dtype D [--code C] [--json] FILE\n"
    "  zipcomm-file stats      [--code C] [--json] FILE.safetensors\n"
    "options:\n"
    "  --format raw|safetensors  override detection by the .safetensors extension\n"
    "  --host                    use the host codec even when a GPU is present\n"
    "  --verify                  with a GPU: check GPU bytes against the host codec (exit 1 on mismatch)\n"
    "exit codes: 0 ok, 1 error, 2 usage\n";

int run(int argc, char** argv) {
  Options o;
  try {
    o = parse_args(argc, argv);
  } catch (const UsageError& e) {
    if (*e.what()) std::fprintf(stderr, "zipcomm-file: %s\n", e.what());
    std::fputs(USAGE, *e.what() ? stderr : stdout);
    return *e.what() ? 2 : 0;
  }
  try {
    Codec codec(o.force_host, o.verify);
    if (o.verify && !codec.gpu())
      std::fprintf(stderr, "zipcomm-file: note: no GPU in use, --verify has nothing to compare\n");
    if (o.cmd == "compress") return cmd_compress(o, codec);
    if (o.cmd == "decompress") return cmd_decompress(o, codec);
    return cmd_stats(o, codec);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "zipcomm-file: %s\n%s", e.what(), USAGE);
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "zipcomm-file: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zipcomm-file: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace zipcomm_file

int main(int argc, char** argv) { return zipcomm_file::run(argc, argv); }
