// zipcomm-file: compress, decompress, describe and measure raw tensor files and .safetensors files with zipcomm.
//
//   zipcomm-file compress   --dtype bf16|fp16|fp32|fp8_e4m3|fp8_e5m2 [--code pair|fixed] IN OUT
//   zipcomm-file compress   [--code C] IN.safetensors OUT          (container, docs/FILE_CONTAINER.md)
//   zipcomm-file decompress IN OUT                                  (stream or container, detected by magic)
//   zipcomm-file info       [--json] FILE...                        (describes a stream or a container)
//   zipcomm-file stats      --dtype D [--code C] [--json] FILE
//   zipcomm-file ear        --vocab V [--json] P Q                  (Expected Acceptance Rate of two logits files)
//   `zipcomm-file COMMAND --help` lists each command's options; IN, OUT and FILE may be '-' (stdin/stdout).
//
// OUT is never left partial: it is written to a temporary file in OUT's folder, checked, synced and renamed
// over OUT. Uses the GPU (device::compress / device::decompress) when one is present, the host reference
// codec otherwise; both write identical bytes. Exit codes: 0 ok, 1 error (message on stderr), 2 usage.
//
// Built as CUDA when ZIPCOMM_WITH_CUDA is defined (CMake does it when CUDA is enabled), else as plain C++.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <zipcomm/format.hpp>
#include <zipcomm/host/reference_codec.hpp>
#include <zipcomm/quant/reference_quant.hpp>

#if defined(ZIPCOMM_WITH_CUDA)
#include <cuda_runtime.h>

#include <zipcomm/device/device_codec_dispatch.cuh>  // run-time (dtype, code) dispatch: every dtype's kernels
#include <zipcomm/quant/device_ear.cuh>
#define ZIPCOMM_FILE_GPU 1
#else
#define ZIPCOMM_FILE_GPU 0
#endif

#ifndef ZIPCOMM_FILE_VERSION
#define ZIPCOMM_FILE_VERSION "unknown"
#endif

#include "json_lite.hpp"
#include "safetensors.hpp"

namespace zipcomm_file {

using zipcomm::CodeId;
using zipcomm::DType;
using zipcomm::Status;
namespace format = zipcomm::format;

/// A command line that cannot be run; `command` names the command whose usage applies ("" = the tool's).
struct UsageError : std::runtime_error {
  std::string command;
  explicit UsageError(const std::string& what, std::string cmd = "")
      : std::runtime_error(what), command(std::move(cmd)) {}
};

struct Options {
  std::string cmd;
  std::vector<std::string> files;
  bool has_dtype = false;
  DType dtype = DType::bf16;
  CodeId code = CodeId::pair;
  bool json = false, force_host = false, verify = false;
  bool force = false, quiet = false, progress = false;
  bool roundtrip_check = true;  // compress: decode the output again before it replaces OUT
  bool help = false, version = false;
  std::string format;  // "", "raw", "safetensors"
  uint64_t vocab = 0;  // ear: logits per position
  unsigned threads = 0;  // host codec threads (0: one per hardware thread)
};

// Inputs above this size get a progress line on stderr (--progress: any size; -q: never).
constexpr uint64_t PROGRESS_MIN_BYTES = 256ull << 20;
// Files are read and written in pieces of this size, so that progress can move.
constexpr uint64_t IO_PIECE_BYTES = 16ull << 20;

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

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string ratio_str(uint64_t num, uint64_t den) { return den ? fmt("%.6f", double(num) / double(den)) : "null"; }

std::string human_bytes(uint64_t b) {
  if (b < 1024) return std::to_string(b) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = double(b) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) v /= 1024.0, ++u;
  return fmt("%.1f ", v) + units[u];
}

/// How a file argument is named in messages ("-" is standard input or output).
std::string shown_name(const std::string& path, bool output) {
  return path == "-" ? (output ? "(stdout)" : "(stdin)") : path;
}

// ---------------------------------------------------------------------------------------------- progress

/// One status line on stderr for long runs: rewritten in place on a terminal, one line per phase otherwise
/// (so that logs are not flooded).
class Progress {
 public:
  void start(const std::string& label) {
    if (on_) return;
    on_ = true;
    label_ = label;
    tty_ = isatty(2) != 0;
  }
  bool on() const { return on_; }
  /// done == NO_FRACTION: a phase done in one step (one pass of the codec), shown without a percentage.
  static constexpr uint64_t NO_FRACTION = ~0ull;
  void update(const char* phase, uint64_t done, uint64_t total) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool new_phase = phase_ != phase;
    if (!tty_) {
      if (new_phase)
        std::fprintf(stderr, "zipcomm-file: %s: %s (%s)\n", label_.c_str(), phase, human_bytes(total).c_str());
    } else if (new_phase || done == total || now - last_ >= std::chrono::milliseconds(200)) {
      if (done == NO_FRACTION) {
        std::fprintf(stderr, "\rzipcomm-file: %s: %s %s\033[K", label_.c_str(), phase, human_bytes(total).c_str());
      } else {
        const int pct = total ? int(100.0 * double(done) / double(total)) : 100;
        std::fprintf(stderr, "\rzipcomm-file: %s: %s %3d%% of %s\033[K", label_.c_str(), phase, pct,
                     human_bytes(total).c_str());
      }
      std::fflush(stderr);
      shown_ = true;
      last_ = now;
    }
    phase_ = phase;
  }
  /// Clears the line on a terminal; the summary line takes its place.
  void finish() {
    if (on_ && tty_ && shown_) std::fputs("\r\033[K", stderr);
    shown_ = false;
  }

 private:
  bool on_ = false, tty_ = false, shown_ = false;
  std::string label_, phase_;
  std::chrono::steady_clock::time_point last_{};
};

// ---------------------------------------------------------------------------------------------- input

/// A file descriptor closed on scope exit (standard streams are left open).
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd > 2) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

/// Opens IN ("-": standard input) and stats it without reading, so that the output checks come first.
int open_input(const std::string& path, struct stat* st) {
  const int fd = path == "-" ? 0 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  if (::fstat(fd, st) != 0) {
    const int e = errno;
    if (fd > 2) ::close(fd);
    throw Error("cannot stat '" + path + "': " + std::strerror(e));
  }
  if (S_ISDIR(st->st_mode)) {
    if (fd > 2) ::close(fd);
    throw Error("'" + path + "' is a directory");
  }
  return fd;
}

/// Reads all of fd. Progress starts when the size (known up front, or reached while reading a pipe) is
/// above PROGRESS_MIN_BYTES, or always with --progress.
std::vector<uint8_t> read_all(int fd, const std::string& path, const struct stat& st, const Options& o,
                              Progress& progress) {
  const uint64_t known = S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0;
  auto want_progress = [&](uint64_t size) { return !o.quiet && (o.progress || size > PROGRESS_MIN_BYTES); };
  if (want_progress(known)) progress.start(shown_name(path, false));
  std::vector<uint8_t> data;
  data.reserve(known);
  std::vector<uint8_t> piece;  // for bytes past the expected size (a pipe, a growing file)
  for (;;) {
    const uint64_t old = data.size();
    const bool direct = old < known;  // read straight into the result while the expected size lasts
    uint64_t room;
    uint8_t* dst;
    if (direct) {
      room = std::min<uint64_t>(known - old, IO_PIECE_BYTES);
      data.resize(old + room);
      dst = data.data() + old;
    } else {
      if (piece.empty()) piece.resize(known ? 1 << 16 : IO_PIECE_BYTES);
      room = piece.size();
      dst = piece.data();
    }
    ssize_t got;
    do got = ::read(fd, dst, room);
    while (got < 0 && errno == EINTR);
    if (got < 0) throw Error("cannot read '" + shown_name(path, false) + "': " + std::strerror(errno));
    if (direct) data.resize(old + uint64_t(got));
    else data.insert(data.end(), piece.begin(), piece.begin() + got);
    if (got == 0) break;
    if (!progress.on() && want_progress(data.size())) progress.start(shown_name(path, false));
    progress.update("reading", data.size(), std::max<uint64_t>(known, data.size()));
  }
  return data;
}

/// Reads a whole file ("-": standard input), without progress.
std::vector<uint8_t> read_file(const std::string& path) {
  struct stat st;
  Fd fd(open_input(path, &st));
  Options quiet;
  quiet.quiet = true;
  Progress none;
  return read_all(fd.fd, path, st, quiet, none);
}

// ---------------------------------------------------------------------------------------------- output

/// Where OUT goes, decided before any work so that a refusal costs nothing.
struct OutputPlan {
  enum class Kind {
    standard_output,  // "-"
    replace,          // a new or regular file: temporary file, then rename
    in_place,         // an existing device or FIFO (/dev/null): written directly, nothing to replace
  };
  Kind kind = Kind::replace;
  std::string path;
};

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

/// Refuses OUT when it is IN (by path, or the same file reached another way), an existing file without
/// --force, a directory, or a terminal for compressed data. A symbolic link to a regular file is replaced
/// by the new file (as gzip does), not written through.
OutputPlan plan_output(const Options& o, const struct stat& in_st, bool compressed_data) {
  const std::string& in = o.files[0];
  const std::string& out = o.files[1];
  OutputPlan plan;
  plan.path = out;
  if (out == "-") {
    plan.kind = OutputPlan::Kind::standard_output;
    struct stat st;
    if (::fstat(1, &st) == 0 && S_ISREG(st.st_mode) && S_ISREG(in_st.st_mode) && same_file(st, in_st))
      throw Error("standard output is the input file '" + shown_name(in, false) + "'");
    if (compressed_data && !o.force && isatty(1))
      throw Error("refusing to write compressed data to a terminal (redirect it, or use -f)");
    return plan;
  }
  if (in != "-" && in == out) throw Error("input and output are the same file ('" + out + "')");
  struct stat st;
  if (::stat(out.c_str(), &st) != 0) {
    if (errno != ENOENT) throw Error("cannot use output '" + out + "': " + std::strerror(errno));
    if (ends_with(out, "/")) throw Error("output '" + out + "' names a folder");
    return plan;  // a new file
  }
  if (S_ISREG(in_st.st_mode) && same_file(st, in_st))
    throw Error("'" + out + "' is the same file as the input '" + shown_name(in, false) + "'");
  if (S_ISDIR(st.st_mode)) throw Error("output '" + out + "' is a directory");
  if (S_ISREG(st.st_mode)) {
    if (!o.force) throw Error("'" + out + "' already exists; use -f to overwrite it");
    return plan;
  }
  // Character devices and FIFOs hold nothing to lose; anything else (a block device) needs --force.
  if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode) && !o.force)
    throw Error("'" + out + "' is not a regular file; use -f to write into it");
  plan.kind = OutputPlan::Kind::in_place;
  return plan;
}

void write_all(int fd, const std::vector<uint8_t>& data, const std::string& name, Progress& progress) {
  uint64_t done = 0;
  while (done < data.size()) {
    const uint64_t piece = std::min<uint64_t>(data.size() - done, IO_PIECE_BYTES);
    const ssize_t put = ::write(fd, data.data() + done, piece);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw Error("cannot write '" + name + "': " + std::strerror(put < 0 ? errno : EIO));
    done += uint64_t(put);
    progress.update("writing", done, data.size());
  }
}

// The temporary file being written, for the signal handler (only async-signal-safe functions may run there).
char g_pending_temp[4096];
volatile std::sig_atomic_t g_pending_temp_set = 0;

extern "C" void remove_pending_temp_and_exit(int sig) {
  if (g_pending_temp_set) ::unlink(g_pending_temp);
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

/// A temporary file in the target's folder (same file system, so that rename is atomic). It is removed
/// unless commit() moved it to the target, also when SIGINT, SIGTERM or SIGHUP ends the program.
class TempFile {
 public:
  explicit TempFile(const std::string& target) {
    const size_t slash = target.rfind('/');
    dir_ = slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash);
    std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
    if (base.size() > 200) base.resize(200);  // room for the prefix and suffix within NAME_MAX
    path_ = dir_ + "/." + base + ".zipcomm-tmp.XXXXXX";
    if (path_.size() >= sizeof g_pending_temp) throw Error("output path too long: '" + target + "'");
    std::vector<char> name(path_.begin(), path_.end());
    name.push_back('\0');
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0) throw Error("cannot create a temporary file in '" + dir_ + "': " + std::strerror(errno));
    path_ = name.data();
    std::memcpy(g_pending_temp, name.data(), name.size());
    g_pending_temp_set = 1;
    install_signal_cleanup();
    // mkstemp creates 0600; give the file the mode a plain `> OUT` would.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
  }
  ~TempFile() { discard(); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }

  /// Syncs and closes the file, checking that it holds exactly `bytes` bytes.
  void finish_write(uint64_t bytes, const std::string& target) {
    struct stat st;
    if (::fsync(fd_) != 0) throw Error("cannot sync '" + target + "': " + std::strerror(errno));
    if (::fstat(fd_, &st) != 0 || uint64_t(st.st_size) != bytes)
      throw Error("'" + target + "': the written file does not have the expected size");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error("cannot close '" + target + "': " + std::strerror(errno));
  }

  /// Moves the file to `target`. Without `replace`, an existing target (one that appeared during the work)
  /// is an error: a hard link fails atomically then; file systems without hard links fall back to rename.
  void commit(const std::string& target, bool replace) {
    if (!replace) {
      if (::link(path_.c_str(), target.c_str()) == 0) {
        ::unlink(path_.c_str());
        committed();
        return;
      }
      if (errno == EEXIST) throw Error("'" + target + "' already exists; use -f to overwrite it");
    }
    if (::rename(path_.c_str(), target.c_str()) != 0)
      throw Error("cannot rename the temporary file to '" + target + "': " + std::strerror(errno));
    committed();
  }

 private:
  std::string dir_, path_;
  int fd_ = -1;
  bool done_ = false;

  void committed() {
    g_pending_temp_set = 0;
    done_ = true;
    // The rename is durable only once the folder is synced; a failure here does not undo it.
    const int dfd = ::open(dir_.c_str(), O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!done_) {
      g_pending_temp_set = 0;
      ::unlink(path_.c_str());
      done_ = true;
    }
  }
  static void install_signal_cleanup() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old{};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) continue;  // keep nohup's choice
      struct sigaction sa{};
      sa.sa_handler = remove_pending_temp_and_exit;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  }
};

/// Writes `data` to OUT as planned: a regular file only appears (or is replaced) once complete and synced.
void write_output(const OutputPlan& plan, const Options& o, const std::vector<uint8_t>& data, Progress& progress) {
  if (plan.kind == OutputPlan::Kind::standard_output) {
    write_all(1, data, "standard output", progress);
    return;
  }
  if (plan.kind == OutputPlan::Kind::in_place) {
    Fd fd(::open(plan.path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.fd < 0) throw Error("cannot open '" + plan.path + "': " + std::strerror(errno));
    write_all(fd.fd, data, plan.path, progress);
    const int f = fd.fd;
    fd.fd = -1;
    if (::close(f) != 0) throw Error("cannot write '" + plan.path + "': " + std::strerror(errno));
    return;
  }
  TempFile tmp(plan.path);
  write_all(tmp.fd(), data, plan.path, progress);
  progress.update("syncing", Progress::NO_FRACTION, data.size());
  tmp.finish_write(data.size(), plan.path);
  tmp.commit(plan.path, o.force);
}

// ---------------------------------------------------------------------------------------------- codec


/// Why read_header refused a stream, naming the format version it claims when that is not this build's.
std::string header_problem(const uint8_t* p, uint64_t bytes, Status st) {
  const std::string why = zipcomm::status_string(st);
  if (bytes >= 4 && bytes < sizeof(format::Header) && get_le(p, 4) == format::MAGIC)
    return "truncated zipcomm stream (" + std::to_string(bytes) + " bytes, less than its header)";
  if (bytes >= sizeof(format::Header)) {
    format::Header h;
    std::memcpy(&h, p, sizeof h);
    if (h.magic == format::MAGIC && (h.version < format::OLDEST_READ_VERSION || h.version > format::VERSION))
      return "zipcomm stream of format version " + std::to_string(h.version) + "; this build reads versions " +
             std::to_string(format::OLDEST_READ_VERSION) + " to " + std::to_string(format::VERSION) + " (" + why + ")";
    // A header that passed every other check but promises more bytes than there are: the file was cut.
    if (h.magic == format::MAGIC && st == Status::corrupt_stream && h.total_bytes > bytes)
      return "truncated zipcomm stream (" + std::to_string(bytes) + " of " + std::to_string(h.total_bytes) +
             " bytes)";
  }
  return std::string("not a valid zipcomm stream (") + why + ")";
}

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
  Codec(bool force_host, bool verify, unsigned threads) : verify_(verify), threads_(threads) {
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
        std::vector<uint8_t> ref = host_compress(d, c, src, n, threads_);
        if (ref != out) throw Error("--verify: GPU stream differs from the host codec's stream (" +
                                    std::to_string(out.size()) + " vs " + std::to_string(ref.size()) + " bytes)");
      }
      return out;
    }
#endif
    return host_compress(d, c, src, n, threads_);
  }

  /// Decompresses one stream (exactly `bytes` bytes); returns the raw tensor bytes.
  std::vector<uint8_t> decompress(const uint8_t* src, uint64_t bytes, format::Header* out_header = nullptr) const {
    format::Header h;
    Status st = zipcomm::host::read_header(src, bytes, &h);
    if (st != Status::ok) throw Error(header_problem(src, bytes, st));
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
        std::vector<uint8_t> ref = host_decompress(src, bytes, raw_bytes, threads_);
        if (ref != out) throw Error("--verify: GPU decompression differs from the host codec's");
      }
      return out;
    }
#endif
    return host_decompress(src, bytes, raw_bytes, threads_);
  }

  static std::vector<uint8_t> host_compress(DType d, CodeId c, const uint8_t* src, uint64_t n, unsigned threads) {
    std::vector<uint8_t> out(format::max_compressed_bytes(d, n));
    uint64_t bytes = 0;
    Status st = zipcomm::host::compress(d, c, src, n, out.data(), out.size(), &bytes, format::LowWidths::minimal,
                                        format::CHUNK_LOG2_AUTO, threads);
    if (st != Status::ok) throw Error(std::string("host compress failed: ") + zipcomm::status_string(st));
    out.resize(bytes);
    return out;
  }
 private:
  bool gpu_ = false;
  bool verify_ = false;
  unsigned threads_ = 0;

  static std::vector<uint8_t> host_decompress(const uint8_t* src, uint64_t bytes, uint64_t raw_bytes,
                                              unsigned threads) {
    std::vector<uint8_t> out(raw_bytes);
    Status st = zipcomm::host::decompress(src, bytes, out.data(), out.size(), threads);
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
    } else if (es == 1) {  // fp8: the exponent sits above the 3 (e4m3) or 2 (e5m2) mantissa bits
      ++hist[(src[i] >> (7 - eb)) & ((1u << eb) - 1)];
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

/// Chunk counts of a stream whose header read_header accepted (so its chunk table lies inside the stream).
StreamStats stream_stats(const uint8_t* s, const format::Header& h) {
  const DType d = DType(h.dtype);
  const format::Layout l = format::layout_of(h);
  StreamStats st;
  st.chunks = l.num_chunks;
  uint64_t prev = 0;
  for (uint64_t c = 0; c < l.num_chunks; ++c) {
    uint64_t end = get_le(s + l.table_offset + 8 * c, 8);
    if (end - prev == format::raw_chunk_bytes(d, l.chunk_elems(c))) ++st.raw_chunks;
    prev = end;
  }
  return st;
}
StreamStats stream_stats(const std::vector<uint8_t>& s) {
  format::Header h;
  std::memcpy(&h, s.data(), sizeof h);
  return stream_stats(s.data(), h);
}

/// Warns when the data does not look like its --dtype. Real bf16/fp16/fp32 tensors code to 0.66-0.86 (fp8
/// 0.7-0.9); a wrong dtype mostly to about 1.0, except bf16 read as fp32 (0.83, where bf16 gives 0.67). So the
/// other dtypes are tried on the first MiB, and a ratio above 0.95 is suspect on its own.
void warn_if_dtype_looks_wrong(const Options& o, const std::vector<uint8_t>& in, uint64_t coded_bytes) {
  constexpr uint64_t MIN_BYTES = 64 << 10;     // below this, the header and tables dominate the ratio
  constexpr uint64_t SAMPLE_BYTES = 1 << 20;
  constexpr double CLEARLY_BETTER = 0.05;
  constexpr double SUSPECT_RATIO = 0.95;
  if (o.quiet || in.size() < MIN_BYTES) return;
  const uint64_t sample = std::min<uint64_t>(in.size(), SAMPLE_BYTES) / 4 * 4;
  const DType all[] = {DType::bf16, DType::fp16, DType::fp32, DType::fp8_e4m3, DType::fp8_e5m2};
  double sample_ratio[6] = {2, 2, 2, 2, 2, 2};  // indexed by the dtype id
  for (DType d : all) {
    if (in.size() % format::elem_bytes(d)) continue;  // a file of another dtype is a whole number of elements
    const uint64_t n = sample / format::elem_bytes(d);
    sample_ratio[int(d)] = double(Codec::host_compress(d, o.code, in.data(), n, o.threads).size()) / double(sample);
  }
  DType best = o.dtype;
  for (DType d : all)
    if (sample_ratio[int(d)] < sample_ratio[int(best)]) best = d;
  const double ratio = double(coded_bytes) / double(in.size());
  const char* given = zipcomm::dtype_name(o.dtype);
  if (best != o.dtype && sample_ratio[int(best)] < sample_ratio[int(o.dtype)] - CLEARLY_BETTER) {
    std::fprintf(stderr,
                 "zipcomm-file: warning: ratio %.3f with --dtype %s, but the first %s codes to %.3f as %s "
                 "(%.3f as %s): the data looks like %s; if so, use --dtype %s\n",
                 ratio, given, human_bytes(sample).c_str(), sample_ratio[int(best)], zipcomm::dtype_name(best),
                 sample_ratio[int(o.dtype)], given, zipcomm::dtype_name(best), zipcomm::dtype_name(best));
  } else if (ratio > SUSPECT_RATIO) {
    std::fprintf(stderr,
                 "zipcomm-file: warning: ratio %.3f with --dtype %s: the exponents do not look like %s tensors "
                 "(wrong --dtype, integer or random data, or data already compressed)\n",
                 ratio, given, given);
  }
}

// ---------------------------------------------------------------------------------------------- stream info

struct StreamInfo {
  format::Header header{};
  StreamStats stats;
  uint64_t original_bytes = 0;
};

/// Reads a stream's header and chunk table; throws an Error that names the problem (another format version
/// included) when read_header refuses it.
StreamInfo inspect_stream(const uint8_t* p, uint64_t bytes) {
  StreamInfo si;
  const Status st = zipcomm::host::read_header(p, bytes, &si.header);
  if (st != Status::ok) throw Error(header_problem(p, bytes, st));
  si.stats = stream_stats(p, si.header);
  si.original_bytes = si.header.num_elements * format::elem_bytes(DType(si.header.dtype));
  return si;
}

// ---------------------------------------------------------------------------------------------- container

constexpr uint32_t CONTAINER_MAGIC = 0x4643505Au;  // "ZPCF"
// Version 2 added kind 2 (a float tensor stored raw); version-1 containers are still read.
constexpr uint32_t CONTAINER_VERSION = 2;
constexpr uint64_t CONTAINER_HEADER = 32, ENTRY_BYTES = 32, PAYLOAD_ALIGN = 16;

enum EntryKind : uint8_t {
  ENTRY_RAW_BYTES = 0,   // bytes between float tensors (prefix, JSON header, other tensors, gaps)
  ENTRY_STREAM = 1,      // a float tensor as a zipcomm stream
  ENTRY_RAW_TENSOR = 2,  // a float tensor stored as-is, because its stream would not be smaller
};
const char* entry_kind_name(uint8_t k) {
  return k == ENTRY_RAW_BYTES ? "raw bytes" : k == ENTRY_STREAM ? "stream" : k == ENTRY_RAW_TENSOR ? "raw tensor" : "?";
}
const char* entry_kind_json(uint8_t k) {
  return k == ENTRY_RAW_BYTES ? "raw_bytes" : k == ENTRY_STREAM ? "stream" : "raw_tensor";
}

struct Entry {
  uint8_t kind = ENTRY_RAW_BYTES;
  uint8_t dtype = 0;
  uint64_t offset = 0, length = 0, stored = 0;
  uint64_t payload = 0;  // where the payload starts in the container
};

struct ContainerIndex {
  uint32_t version = 0;
  uint64_t original_size = 0, checksum = 0;
  std::vector<Entry> entries;
};

/// Checks everything in a container but the payloads' contents and the checksum, which need decoding.
ContainerIndex parse_container(const uint8_t* c, uint64_t size) {
  auto bad = [](const std::string& what) { return Error("corrupt container: " + what); };
  if (size < CONTAINER_HEADER) throw bad("truncated header");
  if (get_le(c, 4) != CONTAINER_MAGIC) throw bad("bad magic");
  ContainerIndex idx;
  idx.version = uint32_t(get_le(c + 4, 4));
  if (idx.version < 1 || idx.version > CONTAINER_VERSION)
    throw Error("zipcomm-file container version " + std::to_string(idx.version) + "; this build reads versions 1 to " +
                std::to_string(CONTAINER_VERSION));
  idx.original_size = get_le(c + 8, 8);
  const uint64_t count = get_le(c + 16, 4);
  if (get_le(c + 20, 4) != 0) throw bad("reserved flags are not zero");
  idx.checksum = get_le(c + 24, 8);
  if (count > (size - CONTAINER_HEADER) / ENTRY_BYTES) throw bad("entry table exceeds the file");
  // Every entry is at least one byte of the original, and a stream is never larger than a few times its
  // input: an original size far beyond the container is corrupt, and is refused before allocating.
  if (idx.original_size > size * 64 + (1u << 20)) throw bad("original size is implausible");
  const uint64_t table_end = CONTAINER_HEADER + count * ENTRY_BYTES;
  uint64_t pos = count ? format::align_up(table_end, PAYLOAD_ALIGN) : CONTAINER_HEADER;
  if (pos > size) throw bad("truncated padding");
  for (uint64_t k = table_end; k < pos; ++k)
    if (c[k]) throw bad("non-zero padding after the entry table");
  uint64_t covered = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = c + CONTAINER_HEADER + i * ENTRY_BYTES;
    const std::string which = "entry " + std::to_string(i) + ": ";
    Entry en;
    en.kind = e[0];
    en.dtype = e[1];
    for (int k = 2; k < 8; ++k)
      if (e[k]) throw bad(which + "reserved bytes are not zero");
    en.offset = get_le(e + 8, 8), en.length = get_le(e + 16, 8), en.stored = get_le(e + 24, 8);
    if (en.offset != covered) throw bad(which + "original_offset does not continue the previous entry");
    if (en.length == 0 || en.length > idx.original_size - covered) throw bad(which + "original_length out of range");
    if (en.stored > size - pos) throw bad(which + "payload runs past the end of the file");
    if (en.kind == ENTRY_RAW_BYTES) {
      if (en.dtype != 0 || en.stored != en.length)
        throw bad(which + "raw entry with a dtype or stored_length != length");
    } else if (en.kind == ENTRY_STREAM) {
      if (!zipcomm::dtype_valid(en.dtype)) throw bad(which + "unknown dtype " + std::to_string(en.dtype));
    } else if (en.kind == ENTRY_RAW_TENSOR && idx.version >= 2) {
      if (!zipcomm::dtype_valid(en.dtype)) throw bad(which + "unknown dtype " + std::to_string(en.dtype));
      if (en.stored != en.length || en.length % format::elem_bytes(DType(en.dtype)))
        throw bad(which + "raw tensor with stored_length != length or a partial element");
    } else {
      throw bad(which + "unknown kind " + std::to_string(en.kind) + " for container version " +
                std::to_string(idx.version));
    }
    en.payload = pos;
    covered += en.length;
    // Padding before the next payload must be zero; the last payload ends the file.
    const uint64_t next = pos + en.stored;
    const uint64_t pad_end = i + 1 < count ? format::align_up(next, PAYLOAD_ALIGN) : next;
    if (pad_end > size) throw bad("truncated padding");
    for (uint64_t k = next; k < pad_end; ++k)
      if (c[k]) throw bad(which + "non-zero padding");
    pos = pad_end;
    idx.entries.push_back(en);
  }
  if (pos != size) throw bad("trailing bytes after the last payload");
  if (covered != idx.original_size)
    throw bad("entries cover " + std::to_string(covered) + " bytes, header says " + std::to_string(idx.original_size));
  return idx;
}

/// Restores the original file from a container; every entry and the whole-file checksum are checked.
std::vector<uint8_t> read_container(const std::vector<uint8_t>& c, const Codec& codec, Progress* progress = nullptr,
                                    const char* phase = "decoding") {
  auto bad = [](const std::string& what) { return Error("corrupt container: " + what); };
  const ContainerIndex idx = parse_container(c.data(), c.size());
  std::vector<uint8_t> out;
  out.reserve(idx.original_size);
  for (size_t i = 0; i < idx.entries.size(); ++i) {
    const Entry& e = idx.entries[i];
    const uint8_t* payload = c.data() + e.payload;
    if (e.kind == ENTRY_STREAM) {
      const std::string which = "entry " + std::to_string(i) + ": ";
      format::Header h;
      std::vector<uint8_t> raw;
      try {
        raw = codec.decompress(payload, e.stored, &h);
      } catch (const Error& err) {
        throw bad(which + err.what());
      }
      if (h.dtype != e.dtype) throw bad(which + "stream dtype differs from the entry's dtype");
      if (raw.size() != e.length) throw bad(which + "stream size differs from original_length");
      out.insert(out.end(), raw.begin(), raw.end());
    } else {
      out.insert(out.end(), payload, payload + e.length);
    }
    if (progress) progress->update(phase, out.size(), idx.original_size);
  }
  if (fnv1a64(out.data(), out.size()) != idx.checksum) throw bad("checksum of the restored file does not match");
  return out;
}

struct ContainerResult {
  std::vector<uint8_t> bytes;
  // Per SafeFile tensor index: its entry kind (raw bytes for non-float and empty tensors), its stored
  // size, its stream's size (also when the stream was not kept), and its chunk counts.
  std::vector<uint8_t> kind_of_tensor;
  std::vector<uint64_t> stored_of_tensor, coded_of_tensor;
  std::vector<StreamStats> stats_of_tensor;
};

ContainerResult build_container(const std::vector<uint8_t>& file, const SafeFile& sf, const Codec& codec,
                                CodeId code, Progress* progress = nullptr) {
  const std::vector<Segment> segs = segments_of(sf, file.size());
  std::vector<Entry> entries;
  std::vector<std::vector<uint8_t>> streams(segs.size());
  ContainerResult r;
  r.kind_of_tensor.assign(sf.tensors.size(), ENTRY_RAW_BYTES);
  r.stored_of_tensor.assign(sf.tensors.size(), 0);
  r.coded_of_tensor.assign(sf.tensors.size(), 0);
  r.stats_of_tensor.assign(sf.tensors.size(), StreamStats{});
  for (size_t i = 0; i < segs.size(); ++i) {
    Entry e;
    e.offset = segs[i].offset;
    e.length = segs[i].length;
    e.stored = e.length;
    if (segs[i].tensor >= 0) {
      const size_t ti = size_t(segs[i].tensor);
      const SafeTensor& t = sf.tensors[ti];
      e.dtype = uint8_t(t.zdtype);
      streams[i] = codec.compress(t.zdtype, code, file.data() + t.begin, t.elements);
      r.coded_of_tensor[ti] = streams[i].size();
      if (streams[i].size() < e.length) {
        e.kind = ENTRY_STREAM;
        e.stored = streams[i].size();
        r.stats_of_tensor[ti] = stream_stats(streams[i]);
      } else {  // tiny or incompressible tensors: the stream's header and tables would make them grow
        e.kind = ENTRY_RAW_TENSOR;
        streams[i].clear();
      }
      r.kind_of_tensor[ti] = e.kind;
      r.stored_of_tensor[ti] = e.stored;
    }
    entries.push_back(e);
    if (progress) progress->update("coding", e.offset + e.length, file.size());
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
    if (entries[i].kind == ENTRY_STREAM)
      out.insert(out.end(), streams[i].begin(), streams[i].end());
    else
      out.insert(out.end(), file.begin() + entries[i].offset, file.begin() + entries[i].offset + entries[i].length);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------- info

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llx", (unsigned long long)v);
  return buf;
}

/// Prints what a stream's header says. Returns 1 when the file is not exactly one stream.
int describe_stream(const Options& o, const std::string& name, const uint8_t* p, uint64_t size, bool already_note) {
  const StreamInfo si = inspect_stream(p, size);
  const format::Header& h = si.header;
  const DType d = DType(h.dtype);
  const uint64_t trailing = size - h.total_bytes;
  if (o.json) {
    std::printf("{\"file\": %s, \"kind\": \"stream\", %s\"format_version\": %u, \"dtype\": \"%s\", \"code\": \"%s\", "
                "\"elements\": %llu, \"original_bytes\": %llu, \"compressed_bytes\": %llu, \"ratio\": %s, "
                "\"chunks\": %llu, \"raw_chunks\": %llu, \"trailing_bytes\": %llu}\n",
                json_quote(name).c_str(), already_note ? "\"already_compressed\": true, " : "", unsigned(h.version),
                zipcomm::dtype_name(d), code_name(CodeId(h.code)), (unsigned long long)h.num_elements,
                (unsigned long long)si.original_bytes, (unsigned long long)h.total_bytes,
                ratio_str(h.total_bytes, si.original_bytes).c_str(), (unsigned long long)si.stats.chunks,
                (unsigned long long)si.stats.raw_chunks, (unsigned long long)trailing);
  } else {
    std::printf("file:              %s\n", name.c_str());
    std::printf("kind:              zipcomm stream, format version %u\n", unsigned(h.version));
    std::printf("dtype / code:      %s / %s\n", zipcomm::dtype_name(d), code_name(CodeId(h.code)));
    std::printf("elements:          %llu\n", (unsigned long long)h.num_elements);
    std::printf("original bytes:    %llu\n", (unsigned long long)si.original_bytes);
    std::printf("compressed bytes:  %llu\n", (unsigned long long)h.total_bytes);
    std::printf("ratio:             %s\n", ratio_str(h.total_bytes, si.original_bytes).c_str());
    std::printf("chunks:            %llu (%llu stored raw)\n", (unsigned long long)si.stats.chunks,
                (unsigned long long)si.stats.raw_chunks);
    if (trailing) std::printf("trailing bytes:    %llu after the stream\n", (unsigned long long)trailing);
  }
  if (trailing) {
    std::fprintf(stderr, "zipcomm-file: error: '%s': %llu bytes after the end of the stream (decompress refuses it)\n",
                 name.c_str(), (unsigned long long)trailing);
    return 1;
  }
  return 0;
}

/// Prints what a container's header and entry table say (and each stream's header). Returns 1 when an
/// entry's stream cannot be read by this build.
int describe_container(const Options& o, const std::string& name, const uint8_t* p, uint64_t size, bool already_note) {
  const ContainerIndex idx = parse_container(p, size);
  struct Row {
    const Entry* e;
    bool has_stream = false;
    StreamInfo si;
    std::string problem;
  };
  std::vector<Row> rows;
  uint64_t counts[3] = {0, 0, 0}, chunks = 0;
  for (const Entry& e : idx.entries) {
    Row r;
    r.e = &e;
    ++counts[e.kind];
    if (e.kind == ENTRY_STREAM) {
      try {
        r.si = inspect_stream(p + e.payload, e.stored);
        r.has_stream = true;
        chunks += r.si.stats.chunks;
      } catch (const Error& err) {
        r.problem = err.what();
      }
    }
    rows.push_back(r);
  }
  auto dtype_of = [](const Entry& e) { return e.kind == ENTRY_RAW_BYTES ? "-" : zipcomm::dtype_name(DType(e.dtype)); };
  if (o.json) {
    std::printf("{\"file\": %s, \"kind\": \"container\", %s\"container_version\": %u, \"original_bytes\": %llu, "
                "\"compressed_bytes\": %llu, \"ratio\": %s, \"fnv1a64\": \"%s\", \"streams\": %llu, "
                "\"raw_tensors\": %llu, \"raw_byte_runs\": %llu, \"chunks\": %llu, \"entries\": [",
                json_quote(name).c_str(), already_note ? "\"already_compressed\": true, " : "", idx.version,
                (unsigned long long)idx.original_size, (unsigned long long)size,
                ratio_str(size, idx.original_size).c_str(), hex64(idx.checksum).c_str(),
                (unsigned long long)counts[ENTRY_STREAM], (unsigned long long)counts[ENTRY_RAW_TENSOR],
                (unsigned long long)counts[ENTRY_RAW_BYTES], (unsigned long long)chunks);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Entry& e = *rows[i].e;
      std::printf("%s{\"index\": %zu, \"kind\": \"%s\", \"dtype\": %s, \"original_offset\": %llu, "
                  "\"original_bytes\": %llu, \"stored_bytes\": %llu, \"ratio\": %s",
                  i ? ", " : "", i, entry_kind_json(e.kind),
                  e.kind == ENTRY_RAW_BYTES ? "null" : json_quote(dtype_of(e)).c_str(), (unsigned long long)e.offset,
                  (unsigned long long)e.length, (unsigned long long)e.stored, ratio_str(e.stored, e.length).c_str());
      if (rows[i].has_stream) {
        const format::Header& h = rows[i].si.header;
        std::printf(", \"format_version\": %u, \"code\": \"%s\", \"elements\": %llu, \"chunks\": %llu, "
                    "\"raw_chunks\": %llu",
                    unsigned(h.version), code_name(CodeId(h.code)), (unsigned long long)h.num_elements,
                    (unsigned long long)rows[i].si.stats.chunks, (unsigned long long)rows[i].si.stats.raw_chunks);
      } else if (e.kind == ENTRY_RAW_TENSOR) {
        std::printf(", \"elements\": %llu", (unsigned long long)(e.length / format::elem_bytes(DType(e.dtype))));
      }
      if (!rows[i].problem.empty()) std::printf(", \"problem\": %s", json_quote(rows[i].problem).c_str());
      std::printf("}");
    }
    std::printf("]}\n");
  } else {
    std::printf("file:              %s\n", name.c_str());
    std::printf("kind:              zipcomm-file container, version %u\n", idx.version);
    std::printf("original bytes:    %llu\n", (unsigned long long)idx.original_size);
    std::printf("compressed bytes:  %llu\n", (unsigned long long)size);
    std::printf("ratio:             %s\n", ratio_str(size, idx.original_size).c_str());
    std::printf("entries:           %zu (%llu zipcomm streams, %llu tensors stored raw, %llu raw byte runs)\n",
                rows.size(), (unsigned long long)counts[ENTRY_STREAM], (unsigned long long)counts[ENTRY_RAW_TENSOR],
                (unsigned long long)counts[ENTRY_RAW_BYTES]);
    std::printf("chunks:            %llu (in the streams)\n", (unsigned long long)chunks);
    std::printf("fnv1a64:           %s (of the original file; decompress checks it)\n", hex64(idx.checksum).c_str());
    std::printf("%5s  %-10s  %-5s  %-8s  %7s  %12s  %14s  %14s  %14s  %8s\n", "entry", "kind", "dtype", "code",
                "format", "elements", "offset", "original", "stored", "ratio");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Entry& e = *rows[i].e;
      const bool s = rows[i].has_stream;
      std::string elements = "-";
      if (s) elements = std::to_string(rows[i].si.header.num_elements);
      else if (e.kind == ENTRY_RAW_TENSOR) elements = std::to_string(e.length / format::elem_bytes(DType(e.dtype)));
      std::printf("%5zu  %-10s  %-5s  %-8s  %7s  %12s  %14llu  %14llu  %14llu  %8s\n", i, entry_kind_name(e.kind),
                  dtype_of(e), s ? code_name(CodeId(rows[i].si.header.code)) : "-",
                  s ? ("v" + std::to_string(rows[i].si.header.version)).c_str() : e.kind == ENTRY_STREAM ? "?" : "-",
                  elements.c_str(), (unsigned long long)e.offset, (unsigned long long)e.length,
                  (unsigned long long)e.stored, fmt("%.4f", double(e.stored) / double(e.length)).c_str());
    }
  }
  int rc = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].problem.empty()) {
      std::fprintf(stderr, "zipcomm-file: error: '%s': entry %zu: %s\n", name.c_str(), i, rows[i].problem.c_str());
      rc = 1;
    }
  return rc;
}

/// Describes a stream or container from its headers; throws Error for anything else.
int describe(const Options& o, const std::string& name, const std::vector<uint8_t>& data, bool already_note) {
  const uint64_t magic = data.size() >= 4 ? get_le(data.data(), 4) : 0;
  if (magic == format::MAGIC) return describe_stream(o, name, data.data(), data.size(), already_note);
  if (magic == CONTAINER_MAGIC) return describe_container(o, name, data.data(), data.size(), already_note);
  throw Error("'" + name + "' is neither a zipcomm stream nor a zipcomm-file container (for a raw tensor file or " +
              "a .safetensors file, use `zipcomm-file stats`)");
}

int cmd_info(const Options& o) {
  int rc = 0;
  for (const std::string& f : o.files) {
    try {
      rc |= describe(o, shown_name(f, false), read_file(f), false);
    } catch (const Error& e) {
      std::fprintf(stderr, "zipcomm-file: error: '%s': %s\n", shown_name(f, false).c_str(), e.what());
      rc = 1;
    }
  }
  return rc;
}

// ---------------------------------------------------------------------------------------------- commands

bool is_safetensors(const Options& o) {
  if (!o.format.empty()) return o.format == "safetensors";
  return ends_with(o.files[0], ".safetensors");
}

uint64_t elements_of(const Options& o, const std::vector<uint8_t>& data) {
  const uint32_t es = format::elem_bytes(o.dtype);
  if (data.size() % es)
    throw Error("'" + shown_name(o.files[0], false) + "' is " + std::to_string(data.size()) +
                " bytes, not a multiple of the " + zipcomm::dtype_name(o.dtype) + " element size " +
                std::to_string(es));
  return data.size() / es;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// "zipcomm-file: compressed IN -> OUT: A -> B bytes (ratio R), X GB/s (host)": GB/s counts original bytes
/// per second of coding (reading, checking and writing excluded).
void print_summary(const Options& o, const char* verb, uint64_t from, uint64_t to, uint64_t original,
                   uint64_t compressed, double coding_s, const Codec& codec) {
  if (o.quiet) return;
  const double gbps = coding_s > 0 ? double(original) / coding_s / 1e9 : 0.0;
  std::fprintf(stderr, "zipcomm-file: %s %s -> %s: %llu -> %llu bytes (ratio %s), %.3f GB/s (%s)\n", verb,
               shown_name(o.files[0], false).c_str(), shown_name(o.files[1], true).c_str(), (unsigned long long)from,
               (unsigned long long)to, original ? fmt("%.4f", double(compressed) / double(original)).c_str() : "n/a",
               gbps, codec.path());
}

/// Checks compress's output before it may replace anything. By default it is decoded again and compared
/// with the input (about the cost of a decompress: a careful tool does not trust an encoder it cannot see);
/// --no-roundtrip-check keeps only the structural checks (stream header and size, container tables).
void check_compressed(const Options& o, const Codec& codec, const std::vector<uint8_t>& in,
                      const std::vector<uint8_t>& out, bool container, Progress& progress) {
  try {
    if (o.roundtrip_check) {
      progress.update("checking", Progress::NO_FRACTION, in.size());
      const std::vector<uint8_t> back =
          container ? read_container(out, codec, &progress, "checking") : codec.decompress(out.data(), out.size());
      if (back != in) throw Error("it does not decode to the input");
      return;
    }
    if (container) {
      parse_container(out.data(), out.size());
      return;
    }
    format::Header h;
    const Status st = zipcomm::host::read_header(out.data(), out.size(), &h);
    if (st != Status::ok) throw Error(header_problem(out.data(), out.size(), st));
    if (h.total_bytes != out.size() || h.num_elements * format::elem_bytes(DType(h.dtype)) != in.size())
      throw Error("its header does not match its size or the input's");
  } catch (const Error& e) {
    throw Error(std::string("the compressed output failed its check (") + e.what() + "); nothing was written");
  }
}

int cmd_compress(const Options& o, const Codec& codec) {
  const bool container = is_safetensors(o);
  if (!container && !o.has_dtype)
    throw UsageError("compress of a raw file needs --dtype (or --format safetensors)", "compress");
  struct stat in_st;
  Fd in_fd(open_input(o.files[0], &in_st));
  const OutputPlan plan = plan_output(o, in_st, true);
  Progress progress;
  const std::vector<uint8_t> in = read_all(in_fd.fd, o.files[0], in_st, o, progress);
  const uint64_t magic = in.size() >= 4 ? get_le(in.data(), 4) : 0;
  if (!o.quiet && o.format.empty() && (magic == format::MAGIC || magic == CONTAINER_MAGIC))
    std::fprintf(stderr, "zipcomm-file: warning: '%s' is already a zipcomm %s\n", shown_name(o.files[0], false).c_str(),
                 magic == format::MAGIC ? "stream" : "container");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> out;
  if (container) {
    const SafeFile sf = parse_safetensors(in.data(), in.size());
    out = build_container(in, sf, codec, o.code, &progress).bytes;
  } else {
    const uint64_t n = elements_of(o, in);
    progress.update("coding", Progress::NO_FRACTION, in.size());
    out = codec.compress(o.dtype, o.code, in.data(), n);
  }
  const double coding_s = seconds_since(t0);
  check_compressed(o, codec, in, out, container, progress);
  write_output(plan, o, out, progress);
  progress.finish();
  print_summary(o, "compressed", in.size(), out.size(), in.size(), out.size(), coding_s, codec);
  if (!container) warn_if_dtype_looks_wrong(o, in, out.size());
  return 0;
}

int cmd_decompress(const Options& o, const Codec& codec) {
  struct stat in_st;
  Fd in_fd(open_input(o.files[0], &in_st));
  const OutputPlan plan = plan_output(o, in_st, false);
  Progress progress;
  const std::vector<uint8_t> in = read_all(in_fd.fd, o.files[0], in_st, o, progress);
  const std::string name = shown_name(o.files[0], false);
  if (in.size() < 4) throw Error("'" + name + "' is too short to be a zipcomm stream or container");
  const uint64_t magic = get_le(in.data(), 4);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> out;
  if (magic == format::MAGIC || magic == CONTAINER_MAGIC) {
    try {
      if (magic == format::MAGIC) {
        progress.update("decoding", Progress::NO_FRACTION, in.size());
        out = codec.decompress(in.data(), in.size());
      } else {
        out = read_container(in, codec, &progress, "decoding");
      }
    } catch (const Error& e) {
      throw Error("'" + name + "': " + e.what());
    }
  } else {
    throw Error("'" + name + "' is neither a zipcomm stream nor a zipcomm-file container (bad magic)");
  }
  const double coding_s = seconds_since(t0);
  write_output(plan, o, out, progress);
  progress.finish();
  print_summary(o, "decompressed", in.size(), out.size(), out.size(), in.size(), coding_s, codec);
  return 0;
}

int cmd_stats_raw(const Options& o, const Codec& codec, const std::vector<uint8_t>& in) {
  if (!o.has_dtype) throw UsageError("stats of a raw file needs --dtype", "stats");
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
  warn_if_dtype_looks_wrong(o, in, s.size());
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
      const bool coded = cr.kind_of_tensor[i] == ENTRY_STREAM;
      const uint64_t stored = cr.kind_of_tensor[i] == ENTRY_RAW_BYTES ? len : cr.stored_of_tensor[i];
      const std::string coded_bytes = t.is_float && len ? std::to_string(cr.coded_of_tensor[i]) : "null";
      std::printf("%s{\"name\": %s, \"dtype\": \"%s\", \"elements\": %llu, \"original_bytes\": %llu, "
                  "\"compressed_bytes\": %llu, \"ratio\": %s, \"entropy_bound\": %s, \"stored\": \"%s\", "
                  "\"stream_bytes\": %s}",
                  i ? ", " : "", json_quote(t.name).c_str(), t.dtype.c_str(), (unsigned long long)t.elements,
                  (unsigned long long)len, (unsigned long long)stored, ratio_str(stored, len).c_str(),
                  len ? fmt("%.6f", bounds[i]).c_str() : "null", coded ? "zipcomm" : "raw", coded_bytes.c_str());
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
    const uint8_t kind = cr.kind_of_tensor[i];
    const uint64_t stored = kind == ENTRY_RAW_BYTES ? len : cr.stored_of_tensor[i];
    std::string chunks = kind == ENTRY_STREAM ? std::to_string(cr.stats_of_tensor[i].raw_chunks) + "/" +
                                                    std::to_string(cr.stats_of_tensor[i].chunks)
                         : kind == ENTRY_RAW_TENSOR
                             ? "(stored raw: a stream would be " + std::to_string(cr.coded_of_tensor[i]) + " bytes)"
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
  const std::vector<uint8_t> in = read_file(o.files[0]);
  const std::string name = shown_name(o.files[0], false);
  const uint64_t magic = in.size() >= 4 ? get_le(in.data(), 4) : 0;
  // Measuring a compressed file as tensors gives nonsense; --format raw still forces it.
  if (o.format.empty() && (magic == format::MAGIC || magic == CONTAINER_MAGIC)) {
    if (!o.json)
      std::printf("%s is already compressed (a zipcomm %s); stats measures uncompressed tensors.\n"
                  "What `zipcomm-file info` says of it:\n\n",
                  name.c_str(), magic == format::MAGIC ? "stream" : "container");
    try {
      return describe(o, name, in, true);
    } catch (const Error& e) {
      throw Error("'" + name + "': " + e.what());
    }
  }
  return is_safetensors(o) ? cmd_stats_safetensors(o, codec, in) : cmd_stats_raw(o, codec, in);
}

// ---------------------------------------------------------------------------------------------- ear

/// Expected Acceptance Rate of two raw fp32 logits files (positions x vocab, row-major, little-endian): per
/// position sum_x min(p(x), q(x)) of the two softmaxes, then the mean (quant::host::ear_row; on the GPU
/// quant::device::ear_rows, the same value within a few ulps).
int cmd_ear(const Options& o, const Codec& codec) {
  if (o.vocab == 0) throw UsageError("ear needs --vocab V (logits per position)", "ear");
  const std::vector<uint8_t> p = read_file(o.files[0]), q = read_file(o.files[1]);
  const std::string pn = shown_name(o.files[0], false), qn = shown_name(o.files[1], false);
  if (p.size() != q.size())
    throw Error("'" + pn + "' is " + std::to_string(p.size()) + " bytes but '" + qn + "' " +
                std::to_string(q.size()) + ": the two files must hold the same positions");
  if (o.vocab > p.size() / 4 || p.size() % (4 * o.vocab) != 0)
    throw Error("'" + pn + "' is " + std::to_string(p.size()) + " bytes, not a whole number of positions of " +
                std::to_string(o.vocab) + " fp32 logits");
  const uint64_t rows = p.size() / (4 * o.vocab);
  std::vector<float> pf(p.size() / 4), qf(q.size() / 4);  // aligned copies
  std::memcpy(pf.data(), p.data(), p.size());
  std::memcpy(qf.data(), q.data(), q.size());
  std::vector<double> per_row(rows);
  const auto t0 = std::chrono::steady_clock::now();
#if ZIPCOMM_FILE_GPU
  if (codec.gpu()) {
    DeviceBuffer dp(p.size()), dq(q.size()), dr(rows * 8);
    cuda_check(cudaMemcpy(dp.p, pf.data(), p.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaMemcpy(dq.p, qf.data(), q.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(zipcomm::quant::device::ear_rows(static_cast<float*>(dp.p), static_cast<float*>(dq.p), rows, o.vocab,
                                                static_cast<double*>(dr.p)),
               "quant::device::ear_rows");
    cuda_check(cudaMemcpy(per_row.data(), dr.p, rows * 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (o.verify)
      for (uint64_t r = 0; r < rows; ++r) {
        const double h = zipcomm::quant::host::ear_row(&pf[r * o.vocab], &qf[r * o.vocab], o.vocab);
        if (!(std::fabs(h - per_row[r]) <= 1e-12) && !(std::isnan(h) && std::isnan(per_row[r])))
          throw Error("--verify: the GPU's EAR of position " + std::to_string(r) + " differs from the host's");
      }
  } else
#endif
  {
    for (uint64_t r = 0; r < rows; ++r)
      per_row[r] = zipcomm::quant::host::ear_row(&pf[r * o.vocab], &qf[r * o.vocab], o.vocab);
  }
  zipcomm::quant::CompensatedSum sum;
  uint64_t bad = 0;
  double lowest = 1.0;
  for (double v : per_row) {
    sum.add(v);
    if (std::isnan(v)) ++bad;
    else lowest = std::min(lowest, v);
  }
  const double mean = sum.value() / double(rows), secs = seconds_since(t0);
  if (o.json) {
    std::printf("{\"ear\": %s, \"positions\": %llu, \"vocab\": %llu, \"min\": %s, \"nan_positions\": %llu, "
                "\"path\": \"%s\"}\n",
                bad ? "null" : fmt("%.17g", mean).c_str(), (unsigned long long)rows, (unsigned long long)o.vocab,
                bad == rows ? "null" : fmt("%.17g", lowest).c_str(), (unsigned long long)bad, codec.path());
  } else {
    std::printf("EAR %s over %llu positions (vocabulary %llu): lowest position %s%s (%s, %.3f s)\n",
                bad ? "nan" : fmt("%.9f", mean).c_str(), (unsigned long long)rows, (unsigned long long)o.vocab,
                bad == rows ? "nan" : fmt("%.9f", lowest).c_str(),
                bad ? (", " + std::to_string(bad) + " position(s) with a NaN or +inf logit, or none finite").c_str()
                    : "",
                codec.path(), secs);
  }
  return bad ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------- usage

struct CommandHelp {
  const char* name;
  const char* synopsis;
  const char* details;
};

const CommandHelp COMMANDS[] = {
    {"compress",
     "  zipcomm-file compress --dtype D [options] IN OUT\n"
     "  zipcomm-file compress [options] IN.safetensors OUT\n",
     "Compresses a raw tensor file into one zipcomm stream, or a .safetensors file into a zipcomm-file\n"
     "container (docs/FILE_CONTAINER.md; a tensor that coding would make larger is stored as-is).\n"
     "OUT is written to a temporary file in its folder, decoded again and compared with IN, synced, and\n"
     "only then renamed over OUT: an error never leaves a partial OUT. IN and OUT may be '-' (standard\n"
     "input and output). A summary line goes to stderr, with a warning when the ratio suggests another\n"
     "--dtype.\n"
     "\n"
     "options:\n"
     "  --dtype D                 element type of a raw tensor file (required for one): bf16, fp16,\n"
     "                            fp32, fp8_e4m3 (OCP E4M3FN) or fp8_e5m2\n"
     "  --code pair|fixed         exponent code: pair (the default, denser) or fixed (faster)\n"
     "  --format raw|safetensors  override detection by the .safetensors extension (needed for a\n"
     "                            .safetensors file on standard input)\n"
     "  -f, --force               overwrite an existing OUT; write compressed data to a terminal\n"
     "  --no-roundtrip-check      check only the output's header and size instead of decoding it again\n"
     "  -q, --quiet               no summary line, progress line or warnings\n"
     "  --progress                a progress line on stderr also for inputs under 256 MiB\n"
     "  --host                    use the host codec even when a GPU is present\n"
     "  --threads N               threads of the host codec (default 0: one per hardware thread)\n"
     "  --verify                  with a GPU: check the GPU's bytes against the host codec's\n"
     "  -h, --help                this text\n"},
    {"decompress",
     "  zipcomm-file decompress [options] IN OUT\n",
     "Restores the original file from a zipcomm stream or a zipcomm-file container (told apart by their\n"
     "first four bytes, ZPCM or ZPCF). Everything is checked while decoding (the stream's format and checks,\n"
     "the container's tables and whole-file checksum). OUT is written to a temporary file in its folder,\n"
     "synced, and only then renamed over OUT: an error never leaves a partial OUT. A device or FIFO (such as\n"
     "/dev/null) is written directly. IN and OUT may be '-'.\n"
     "\n"
     "options:\n"
     "  -f, --force               overwrite an existing OUT\n"
     "  -q, --quiet               no summary line or progress line\n"
     "  --progress                a progress line on stderr also for inputs under 256 MiB\n"
     "  --host                    use the host codec even when a GPU is present\n"
     "  --threads N               threads of the host codec (default 0: one per hardware thread)\n"
     "  --verify                  with a GPU: check the GPU's bytes against the host codec's\n"
     "  -h, --help                this text\n"},
    {"info",
     "  zipcomm-file info [--json] FILE...\n",
     "Describes zipcomm streams and zipcomm-file containers from their headers, without decoding them:\n"
     "a stream's format version, dtype, code, elements, original and compressed bytes, ratio and chunks; a\n"
     "container's version, sizes, ratio, checksum and entries (each stream's header included). A stream of\n"
     "a format version this build does not read is named as such. FILE may be '-'.\n"
     "\n"
     "options:\n"
     "  --json                    one JSON object per file on stdout\n"
     "  -h, --help                this text\n"},
    {"stats",
     "  zipcomm-file stats --dtype D [options] FILE\n"
     "  zipcomm-file stats [options] FILE.safetensors\n",
     "Measures how well a raw tensor file or a .safetensors file compresses (ratio, entropy bound, chunks\n"
     "stored raw) without writing anything. A file that is already a zipcomm stream or container is not\n"
     "measured: stats says so and prints what `info` prints. FILE may be '-'.\n"
     "\n"
     "options:\n"
     "  --dtype D                 element type of a raw tensor file (required for one): bf16, fp16,\n"
     "                            fp32, fp8_e4m3 (OCP E4M3FN) or fp8_e5m2\n"
     "  --code pair|fixed         exponent code: pair (the default, denser) or fixed (faster)\n"
     "  --format raw|safetensors  override detection by the .safetensors extension and by the magic of a\n"
     "                            stream or container\n"
     "  --json                    one JSON object on stdout\n"
     "  -q, --quiet               no warnings\n"
     "  --host                    use the host codec even when a GPU is present\n"
     "  --threads N               threads of the host codec (default 0: one per hardware thread)\n"
     "  --verify                  with a GPU: check the GPU's bytes against the host codec's\n"
     "  -h, --help                this text\n"},
    {"ear",
     "  zipcomm-file ear --vocab V [options] P Q\n",
     "Expected Acceptance Rate of two models' logits (the quantization tier's fidelity measure,\n"
     "docs/QUANT.md section 5): P and Q are raw little-endian fp32 files of positions x V logits, row-major\n"
     "(the original model's and the other's, over the same positions). Per position it takes\n"
     "sum_x min(p(x), q(x)) of the two softmaxes (fp64, compensated sums; 1 for identical rows), and prints\n"
     "the mean and the lowest position. A position with a NaN or +inf logit, or no finite one, makes the\n"
     "result NaN and the exit code 1. P or Q may be '-'.\n"
     "\n"
     "options:\n"
     "  --vocab V                 logits per position (required)\n"
     "  --json                    one JSON object on stdout\n"
     "  --host                    use the host reference even when a GPU is present\n"
     "  --verify                  with a GPU: check every position against the host reference (1e-12)\n"
     "  -h, --help                this text\n"},
};

const char* GENERAL_HELP =
    "zipcomm-file: lossless compression of bf16/fp16/fp32/fp8 tensor files and .safetensors files with zipcomm\n"
    "\n"
    "usage: zipcomm-file COMMAND [options] ARGS\n"
    "commands:\n"
    "  compress IN OUT           compress a raw tensor file (--dtype) or a .safetensors file\n"
    "  decompress IN OUT         restore the original file from a stream or container\n"
    "  info FILE...              describe a zipcomm stream or zipcomm-file container\n"
    "  stats FILE                measure how well a raw tensor file or .safetensors file compresses\n"
    "  ear P Q                   Expected Acceptance Rate of two fp32 logits files (--vocab)\n"
    "  help [COMMAND]            this text, or a command's\n"
    "IN, OUT and FILE may be '-' for standard input/output. An existing OUT is replaced only with -f.\n"
    "`zipcomm-file COMMAND --help` describes a command; `zipcomm-file --version` prints the version.\n"
    "exit codes: 0 ok, 1 error, 2 usage\n";

const CommandHelp* find_command(const std::string& name) {
  for (const CommandHelp& c : COMMANDS)
    if (name == c.name) return &c;
  return nullptr;
}

struct OptionSpec {
  const char* name;
  bool takes_value;
  const char* commands;  // the commands it applies to, space-separated
};
const OptionSpec OPTION_SPECS[] = {
    {"--dtype", true, "compress stats"},
    {"--code", true, "compress stats"},
    {"--format", true, "compress stats"},
    {"--json", false, "info stats ear"},
    {"--vocab", true, "ear"},
    {"--force", false, "compress decompress"},
    {"--quiet", false, "compress decompress stats"},
    {"--progress", false, "compress decompress"},
    {"--no-roundtrip-check", false, "compress"},
    {"--host", false, "compress decompress stats ear"},
    {"--verify", false, "compress decompress stats ear"},
    {"--threads", true, "compress decompress stats"},
};

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "fp16" || s == "f16") return DType::fp16;
  if (s == "fp32" || s == "f32") return DType::fp32;
  if (s == "fp8_e4m3" || s == "e4m3" || s == "float8_e4m3fn") return DType::fp8_e4m3;
  if (s == "fp8_e5m2" || s == "e5m2" || s == "float8_e5m2") return DType::fp8_e5m2;
  throw UsageError("unknown --dtype '" + s + "' (bf16, fp16, fp32, fp8_e4m3 or fp8_e5m2)");
}
CodeId parse_code(const std::string& s) {
  if (s == "pair") return CodeId::pair;
  if (s == "fixed") return CodeId::fixed;
  throw UsageError("unknown --code '" + s + "' (pair or fixed)");
}

Options parse_args(int argc, char** argv) {
  Options o;
  if (argc < 2) throw UsageError("missing command");
  const std::string first = argv[1];
  if (first == "-h" || first == "--help" || first == "-V" || first == "--version") {
    o.help = first == "-h" || first == "--help";
    o.version = !o.help;
    return o;
  }
  if (first == "help") {
    o.help = true;
    if (argc > 2) o.cmd = argv[2];
    if (argc > 3 || (!o.cmd.empty() && !find_command(o.cmd))) throw UsageError("help takes one command name");
    return o;
  }
  o.cmd = first;
  if (!find_command(o.cmd)) throw UsageError("unknown command '" + o.cmd + "'");
  // --help and --version win over everything else on the line (until "--").
  for (int i = 2; i < argc && std::string(argv[i]) != "--"; ++i) {
    const std::string a = argv[i];
    o.help = o.help || a == "-h" || a == "--help";
    o.version = o.version || a == "-V" || a == "--version";
  }
  if (o.help || o.version) return o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) o.files.push_back(argv[i]);
      break;
    }
    if (a.size() < 2 || a[0] != '-') {  // "-" is a file: standard input or output
      o.files.push_back(a);
      continue;
    }
    std::string inline_value;
    bool has_inline = false;
    const size_t eq = a.find('=');
    if (a.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1), a.resize(eq), has_inline = true;
    }
    if (a == "-f") a = "--force";
    if (a == "-q") a = "--quiet";
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& s : OPTION_SPECS)
      if (a == s.name) spec = &s;
    if (!spec) throw UsageError("unknown option '" + a + "'", o.cmd);
    if ((" " + std::string(spec->commands) + " ").find(" " + o.cmd + " ") == std::string::npos)
      throw UsageError(a + " does not apply to " + o.cmd, o.cmd);
    if (has_inline && !spec->takes_value) throw UsageError(a + " takes no value", o.cmd);
    std::string value;
    if (spec->takes_value) {
      if (!has_inline && i + 1 >= argc) throw UsageError(a + " needs a value", o.cmd);
      value = has_inline ? inline_value : argv[++i];
    }
    try {
      if (a == "--dtype") o.dtype = parse_dtype(value), o.has_dtype = true;
      else if (a == "--code") o.code = parse_code(value);
      else if (a == "--format") {
        if (value != "raw" && value != "safetensors") throw UsageError("--format is raw or safetensors");
        o.format = value;
      } else if (a == "--vocab") {
        char* end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
        if (value.empty() || *end || errno || v == 0 || value[0] == '-')
          throw UsageError("--vocab takes a positive integer, got '" + value + "'");
        o.vocab = v;
      } else if (a == "--threads") {
        char* end = nullptr;
        errno = 0;
        const unsigned long v = std::strtoul(value.c_str(), &end, 10);
        if (value.empty() || *end || errno || v > 4096 || value[0] == '-')
          throw UsageError("--threads takes an integer from 0 (all hardware threads) to 4096, got '" + value + "'");
        o.threads = unsigned(v);
      } else if (a == "--json") o.json = true;
      else if (a == "--force") o.force = true;
      else if (a == "--quiet") o.quiet = true;
      else if (a == "--progress") o.progress = true;
      else if (a == "--no-roundtrip-check") o.roundtrip_check = false;
      else if (a == "--host") o.force_host = true;
      else if (a == "--verify") o.verify = true;
    } catch (const UsageError& e) {
      throw UsageError(e.what(), o.cmd);
    }
  }
  if (o.cmd == "info") {
    if (o.files.empty()) throw UsageError("info takes at least one file argument", o.cmd);
  } else {
    const size_t want = o.cmd == "stats" ? 1 : 2;  // compress, decompress, ear: 2
    if (o.files.size() != want)
      throw UsageError(o.cmd + " takes " + std::to_string(want) + " file argument" + (want > 1 ? "s" : ""), o.cmd);
  }
  return o;
}

void print_help(const std::string& cmd) {
  const CommandHelp* c = find_command(cmd);
  if (!c) {
    std::fputs(GENERAL_HELP, stdout);
    return;
  }
  std::printf("usage:\n%s\n%s", c->synopsis, c->details);
}

void print_usage_error(const UsageError& e) {
  std::fprintf(stderr, "zipcomm-file: %s\n", e.what());
  const CommandHelp* c = find_command(e.command);
  if (c)
    std::fprintf(stderr, "usage:\n%sTry 'zipcomm-file %s --help' for its options.\n", c->synopsis, c->name);
  else
    std::fputs("Try 'zipcomm-file --help'.\n", stderr);
}

int run(int argc, char** argv) {
  Options o;
  try {
    o = parse_args(argc, argv);
  } catch (const UsageError& e) {
    print_usage_error(e);
    return 2;
  }
  if (o.version) {
    std::printf("zipcomm-file %s (zipcomm stream format version %u, container version %u, %s)\n",
                ZIPCOMM_FILE_VERSION, unsigned(format::VERSION), CONTAINER_VERSION,
                ZIPCOMM_FILE_GPU ? "CUDA build" : "host-only build");
    return 0;
  }
  if (o.help) {
    print_help(o.cmd);
    return 0;
  }
  try {
    if (o.cmd == "info") return cmd_info(o);
    Codec codec(o.force_host, o.verify, o.threads);
    if (o.verify && !codec.gpu())
      std::fprintf(stderr, "zipcomm-file: note: no GPU in use, --verify has nothing to compare\n");
    if (o.cmd == "compress") return cmd_compress(o, codec);
    if (o.cmd == "decompress") return cmd_decompress(o, codec);
    if (o.cmd == "ear") return cmd_ear(o, codec);
    return cmd_stats(o, codec);
  } catch (const UsageError& e) {
    print_usage_error(e);
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
