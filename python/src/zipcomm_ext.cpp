// Python extension zipcomm._zipcomm_ext: the host codec (include/zipcomm/host/reference_codec.hpp) and, when
// built with ZIPCOMM_PYTHON_CUDA, the GPU codec (gpu_codec.cu), behind functions taking any DLPack array
// (nb::ndarray: NumPy, torch, CuPy, ... with no build-time dependency on any of them).
// zipcomm/__init__.py is the public API; what needs Python objects (ml_dtypes views, wrapping a GPU result
// in the framework of the input) is done there.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <zipcomm/host/reference_codec.hpp>

#include "codec_errors.hpp"
#include "ext_common.hpp"
#include "quant_ext.hpp"
#include "weight_sync.hpp"  // plain C++: its types are used in every build, its links only with CUDA
#if ZIPCOMM_PYTHON_WITH_CUDA
#include "gpu_codec.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace zipcomm_python {
namespace {

using zipcomm::CodeId;

CodeId parse_code(const std::string& s, const std::string& where) {
  if (s == "pair") return CodeId::pair;
  if (s == "fixed") return CodeId::fixed;
  throw nb::value_error((where + ": unknown code '" + s + "' ('pair' or 'fixed')").c_str());
}

/// Chunks of a stream stored raw (their exponent section entry has the raw size), from its chunk table.
uint64_t count_raw_chunks(const uint8_t* table, const format::Header& h) {
  const DType d = DType(h.dtype);
  const format::Layout l = format::layout_of(h);
  uint64_t prev = 0, raw = 0;
  for (uint64_t c = 0; c < l.num_chunks; ++c) {
    uint64_t end;
    std::memcpy(&end, table + 8 * c, 8);
    if (end >= prev && end - prev == format::raw_chunk_bytes(d, l.chunk_elems(c))) ++raw;
    prev = end;
  }
  return raw;
}

nb::dict header_info(const format::Header& h, uint64_t raw_chunks) {
  const DType d = DType(h.dtype);
  const uint64_t original = h.num_elements * format::elem_bytes(d);
  nb::dict r;
  r["version"] = int(h.version);
  r["dtype"] = zipcomm::dtype_name(d);
  r["code"] = zipcomm::code_name(CodeId(h.code));
  r["elements"] = h.num_elements;
  r["original_bytes"] = original;
  r["compressed_bytes"] = h.total_bytes;
  r["ratio"] = original ? double(h.total_bytes) / double(original) : 0.0;
  r["chunks"] = format::layout_of(h).num_chunks;
  r["raw_chunks"] = raw_chunks;
  r["chunk_elements"] = uint64_t(1) << h.chunk_log2;
  r["table_offset"] = h.table_offset;
  r["low_offset"] = h.low_offset;
  r["exp_offset"] = h.exp_offset;
  r["header_check"] = h.header_check;
  return r;
}

#if ZIPCOMM_PYTHON_WITH_CUDA

/// The checked header of a stream in device memory: its first 64 bytes, read after the work on `stream`.
format::Header read_device_header(const AnyArray& buf, uintptr_t stream, const std::string& where) {
  uint8_t header_bytes[format::HEADER_BYTES] = {};
  const uint64_t in_bytes = buf.size();
  gpu::copy_to_host_on_stream(buf.device_id(), header_bytes, buf.data(),
                              std::min<uint64_t>(in_bytes, format::HEADER_BYTES), stream);
  format::Header h;
  check_status(zipcomm::host::read_header(header_bytes, in_bytes, &h), where);
  return h;
}

#endif

// ------------------------------------------------------------------------------------------------ functions

/// chunk_log2 as given (0: the default for n), checked.
uint32_t chunk_log2_for(uint32_t chunk_log2, uint64_t n, const std::string& where) {
  chunk_log2 = format::resolve_chunk_log2(chunk_log2, n);
  if (!format::chunk_log2_valid(chunk_log2))
    throw nb::value_error((where + ": chunks hold 4096, 8192 or 16384 elements").c_str());
  return chunk_log2;
}

nb::object compress(const AnyArray& x, const std::optional<std::string>& declared, const std::string& code,
                    uint32_t chunk_log2, uint32_t threads) {
  const std::string where = "zipcomm.compress";
  require_known_device(x.device_type(), where);
  if (on_gpu(x.device_type())) throw nb::value_error((where + ": a CUDA array goes through compress_gpu").c_str());
  const DType d = element_dtype(x, declared, where);
  const CodeId c = parse_code(code, where);
  require_c_contiguous(x, where, "the array");
  const uint64_t n = x.size();
  chunk_log2 = chunk_log2_for(chunk_log2, n, where);
  const uint64_t capacity = format::max_compressed_bytes(d, n, chunk_log2);
  HostBuffer out = host_alloc(capacity);
  uint64_t bytes = 0;
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = zipcomm::host::compress(d, c, x.data(), n, out.get(), capacity, &bytes, format::LowWidths::minimal,
                                chunk_log2, threads);
  }
  check_status(s, where);
  // Give back the unused tail of the bound (realloc to a smaller size does not move in practice).
  if (void* shrunk = std::realloc(out.get(), bytes ? bytes : 1)) {
    (void)out.release();
    out.reset(shrunk);
  }
  return numpy_owning(out.release(), bytes, nb::dtype<uint8_t>());
}

nb::object decompress(const AnyArray& buf, std::optional<WritableArray> out, uint32_t threads) {
  const std::string where = "zipcomm.decompress";
  require_stream_bytes(buf, where);
  const uint64_t in_bytes = buf.size();
  if (on_gpu(buf.device_type()) || (out && on_gpu(out->device_type())))
    throw nb::value_error((where + ": CUDA arrays go through decompress_gpu").c_str());
  if (out) require_known_device(out->device_type(), where);
  format::Header h;
  check_status(zipcomm::host::read_header(buf.data(), in_bytes, &h), where);
  const DType d = DType(h.dtype);
  const uint64_t out_bytes = h.num_elements * format::elem_bytes(d);
  Status s;
  if (out) {
    require_out_dtype(*out, d, where);
    require_out_shape(*out, h.num_elements, where);
    {
      nb::gil_scoped_release unlocked;
      s = zipcomm::host::decompress(buf.data(), in_bytes, out->data(), out_bytes, threads);
    }
    check_status(s, where);
    return nb::none();
  }
  HostBuffer dst = host_alloc(out_bytes);
  {
    nb::gil_scoped_release unlocked;
    s = zipcomm::host::decompress(buf.data(), in_bytes, dst.get(), out_bytes, threads);
  }
  check_status(s, where);
  return numpy_owning(dst.release(), h.num_elements, result_dtype(d, true));
}

uint64_t max_compressed_bytes(uint64_t n, const std::string& dtype, uint32_t chunk_log2) {
  const std::string where = "zipcomm.max_compressed_bytes";
  return format::max_compressed_bytes(parse_dtype(dtype, where), n, chunk_log2_for(chunk_log2, n, where));
}

// ---- the GPU codec, stream-ordered: each call returns an id; wait(id) / synchronize() read the outcomes

/// The bound of the stream of x: the size compress_gpu's out needs.
uint64_t compress_capacity(const AnyArray& x, const std::optional<std::string>& declared, uint32_t chunk_log2) {
  const std::string where = "zipcomm.compress";
  return format::max_compressed_bytes(element_dtype(x, declared, where), x.size(),
                                      chunk_log2_for(chunk_log2, x.size(), where));
}

#if ZIPCOMM_PYTHON_WITH_CUDA
/// out: 8-bit integers on `device`, C-contiguous, 16-byte aligned, at least `bytes` long.
void require_stream_buffer(const WritableArray& out, int device, uint64_t bytes, const std::string& where,
                           const char* what) {
  if (!on_gpu(out.device_type()) || out.device_id() != device)
    throw nb::value_error((where + ": " + what + " is not on the array's CUDA device").c_str());
  if (!is_integer(out.dtype()) || out.dtype().bits != 8)
    throw nb::type_error((where + ": " + what + " is a uint8 array, got " + dlpack_dtype_name(out.dtype())).c_str());
  require_c_contiguous(out, where, what);
  if (out.size() < bytes)
    throw nb::value_error((where + ": " + what + " has " + std::to_string(out.size()) + " bytes, " +
                           std::to_string(bytes) + " are needed (max_compressed_bytes)")
                              .c_str());
  if (reinterpret_cast<uintptr_t>(out.data()) % format::ALIGN)
    throw nb::value_error((where + ": " + what + " must start at a 16-byte aligned address").c_str());
}
#endif

uint64_t compress_gpu(const AnyArray& x, const std::optional<std::string>& declared, const std::string& code,
                      const WritableArray& out, uint32_t chunk_log2, uintptr_t stream) {
  const std::string where = "zipcomm.compress";
  if (!on_gpu(x.device_type())) throw nb::value_error((where + ": compress_gpu takes CUDA arrays").c_str());
#if ZIPCOMM_PYTHON_WITH_CUDA
  const DType d = element_dtype(x, declared, where);
  const CodeId c = parse_code(code, where);
  require_c_contiguous(x, where, "the array");
  const uint64_t n = x.size();
  chunk_log2 = chunk_log2_for(chunk_log2, n, where);
  const uint64_t capacity = format::max_compressed_bytes(d, n, chunk_log2);
  require_stream_buffer(out, x.device_id(), capacity, where, "out");
  nb::gil_scoped_release unlocked;
  return gpu::compress_async(x.device_id(), d, c, x.data(), n, out.data(), out.size(), chunk_log2, stream);
#else
  (void)declared, (void)code, (void)out, (void)chunk_log2, (void)stream;
  no_gpu_codec(where);
#endif
}

/// dtype: the stream's element type, from `declared` or out's own type; without either the header is read (which
/// waits for the work on `stream`).
uint64_t decompress_gpu(const AnyArray& buf, const WritableArray& out, const std::optional<std::string>& declared,
                        uintptr_t stream) {
  const std::string where = "zipcomm.decompress";
  require_stream_bytes(buf, where);
  if (!on_gpu(buf.device_type())) throw nb::value_error((where + ": decompress_gpu takes CUDA arrays").c_str());
#if ZIPCOMM_PYTHON_WITH_CUDA
  const int device = buf.device_id();
  if (!on_gpu(out.device_type()) || out.device_id() != device)
    throw nb::value_error((where + ": the stream and out are on different devices").c_str());
  if (reinterpret_cast<uintptr_t>(buf.data()) % format::ALIGN)
    throw nb::value_error((where + ": a stream on the GPU must start at a 16-byte aligned address (the "
                                   "device decoder reads 16-byte words); copy it into a new array")
                              .c_str());
  require_c_contiguous(out, where, "out");
  std::optional<DType> d = declared ? std::optional<DType>(parse_dtype(*declared, where)) : native_dtype(out.dtype());
  if (!d) {
    const format::Header h = read_device_header(buf, stream, where);
    d = DType(h.dtype);
  }
  require_out_dtype(out, *d, where);
  nb::gil_scoped_release unlocked;
  return gpu::decompress_async(device, *d, buf.data(), buf.size(), out.data(), out.size(), stream);
#else
  (void)out, (void)declared, (void)stream;
  no_gpu_codec(where);
#endif
}

uint64_t wait_call(uint64_t id) {
#if ZIPCOMM_PYTHON_WITH_CUDA
  nb::gil_scoped_release unlocked;
  return gpu::wait(id);
#else
  (void)id;
  return 0;
#endif
}

void synchronize_calls() {
#if ZIPCOMM_PYTHON_WITH_CUDA
  nb::gil_scoped_release unlocked;
  gpu::synchronize();
#endif
}

/// The first `bytes` bytes of a CUDA uint8 array, as a view that keeps the array alive.
/// An uninitialised CUDA array of `count` elements of `dtype` ("uint8": bytes, else a codec dtype, in its own
/// DLPack type): outputs for arrays of no framework that allocates.
DeviceArray cuda_empty(int device, uint64_t count, const std::string& dtype) {
#if ZIPCOMM_PYTHON_WITH_CUDA
  DeviceArray a;
  a.dtype = dtype == "uint8" ? nb::dtype<uint8_t>() : result_dtype(parse_dtype(dtype, "zipcomm"), false);
  a.count = count;
  a.device = device;
  a.data = static_cast<uint8_t*>(gpu::alloc(device, a.nbytes()));
  a.memory = std::shared_ptr<void>(a.data, [device](void* p) { gpu::free_device_memory(device, p); });
  return a;
#else
  (void)device, (void)count, (void)dtype;
  no_gpu_codec("zipcomm");
#endif
}

/// What a reader needs first (dtype, elements, compressed_bytes), from the header alone: for a GPU stream one
/// 64-byte read after the work on `stream`, not the chunk table info() also reads.
nb::dict header_fields(const AnyArray& buf, uintptr_t stream, const std::string& where) {
  require_stream_bytes(buf, where);
  format::Header h;
  if (on_gpu(buf.device_type())) {
#if ZIPCOMM_PYTHON_WITH_CUDA
    h = read_device_header(buf, stream, where);
#else
    (void)stream;
    no_gpu_codec(where);
#endif
  } else {
    check_status(zipcomm::host::read_header(buf.data(), buf.size(), &h), where);
  }
  nb::dict r;
  r["dtype"] = zipcomm::dtype_name(DType(h.dtype));
  r["elements"] = h.num_elements;
  r["compressed_bytes"] = h.total_bytes;
  return r;
}

nb::dict info(const AnyArray& buf, uintptr_t stream) {
  const std::string where = "zipcomm.info";
  require_stream_bytes(buf, where);
  const uint64_t in_bytes = buf.size();
  format::Header h;
  if (on_gpu(buf.device_type())) {
#if ZIPCOMM_PYTHON_WITH_CUDA
    const int device = buf.device_id();
    h = read_device_header(buf, stream, where);
    const uint64_t chunks = format::layout_of(h).num_chunks;
    std::vector<uint8_t> table(8 * chunks);
    gpu::copy_to_host_on_stream(device, table.data(), static_cast<const uint8_t*>(buf.data()) + h.table_offset,
                                table.size(), stream);
    nb::dict r = header_info(h, count_raw_chunks(table.data(), h));
    r["buffer_bytes"] = in_bytes;
    return r;
#else
    no_gpu_codec(where);
#endif
  }
  check_status(zipcomm::host::read_header(buf.data(), in_bytes, &h), where);
  const auto* base = static_cast<const uint8_t*>(buf.data());
  nb::dict r = header_info(h, count_raw_chunks(base + h.table_offset, h));
  r["buffer_bytes"] = in_bytes;  // a stream may be followed by other bytes; the header says where it ends
  return r;
}

/// Order-0 entropy of the exponent field, in bits per element.
double exponent_entropy_bits(DType d, const uint8_t* src, uint64_t n) {
  if (n == 0) return 0.0;
  std::vector<uint64_t> hist(256, 0);
  for (uint64_t i = 0; i < n; ++i) {
    if (d == DType::fp32) {
      uint32_t b;
      std::memcpy(&b, src + 4 * i, 4);
      ++hist[(b >> 23) & 0xFFu];
    } else if (format::elem_bytes(d) == 1) {  // fp8: the exponent sits above 3 (e4m3) or 2 (e5m2) mantissa bits
      const int eb = format::exp_bits(d);
      ++hist[(src[i] >> (7 - eb)) & ((1u << eb) - 1)];
    } else {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      ++hist[d == DType::bf16 ? (v >> 7) & 0xFFu : (v >> 10) & 0x1Fu];
    }
  }
  double h = 0;
  for (uint64_t c : hist)
    if (c) {
      const double p = double(c) / double(n);
      h -= p * std::log2(p);
    }
  return h;
}

nb::dict stats(const AnyArray& x, const std::optional<std::string>& declared, const std::string& code,
               uint32_t chunk_log2) {
  const std::string where = "zipcomm.stats";
  require_known_device(x.device_type(), where);
  if (on_gpu(x.device_type()))
    throw nb::value_error((where + ": measures host arrays; copy the array to the host first (x.cpu(), "
                                   "cupy.asnumpy(x))")
                              .c_str());
  const DType d = element_dtype(x, declared, where);
  const CodeId c = parse_code(code, where);
  require_c_contiguous(x, where, "the array");
  const uint64_t n = x.size();
  chunk_log2 = chunk_log2_for(chunk_log2, n, where);
  const uint64_t capacity = format::max_compressed_bytes(d, n, chunk_log2);
  std::vector<uint8_t> stream(capacity);
  uint64_t bytes = 0;
  Status s;
  double h0;
  const auto* src = static_cast<const uint8_t*>(x.data());
  {
    nb::gil_scoped_release unlocked;
    s = zipcomm::host::compress(d, c, src, n, stream.data(), capacity, &bytes, format::LowWidths::minimal, chunk_log2,
                                0);
    h0 = exponent_entropy_bits(d, src, n);
  }
  check_status(s, where);
  format::Header h;
  std::memcpy(&h, stream.data(), sizeof h);
  nb::dict r = header_info(h, count_raw_chunks(stream.data() + h.table_offset, h));
  const double elem_bits = 8.0 * format::elem_bytes(d);
  r["bits_per_element"] = n ? 8.0 * double(bytes) / double(n) : 0.0;
  r["exponent_entropy_bits"] = h0;
  // What an ideal order-0 coder of the exponents (sign and mantissa stored raw) would reach.
  r["entropy_bound"] = n ? (elem_bits - format::exp_bits(d) + h0) / elem_bits : 0.0;
  return r;
}

nb::tuple cuda_device_count() {
#if ZIPCOMM_PYTHON_WITH_CUDA
  std::string why;
  const int count = gpu::device_count(&why);
  return nb::make_tuple(count, why);
#else
  return nb::make_tuple(0, std::string("built without the GPU codec (no nvcc when it was built, or "
                                       "ZIPCOMM_PYTHON_CUDA=OFF)"));
#endif
}


// ------------------------------------------------------------------------------------------------ WeightSync

/// zipcomm.WeightSync's C++ half: checks the tensor pairs once, holds them (their DLPack references keep the
/// memory alive), groups them by element type and owns the links (weight_sync.cu) that move them.
class WeightSyncLinks {
 public:
  /// bytes_as_fp32: the arrays are uint8 buffers of a multiple of 4 bytes (quantized messages), moved as fp32
  /// elements; the caller syncs them raw (bit-exact copies whatever the bytes are).
  WeightSyncLinks(const nb::list& srcs, const nb::list& dsts, const std::vector<std::string>& names,
                  const std::string& link, bool bytes_as_fp32) {
    const std::string where = "zipcomm.WeightSync";
    if (link != "host" && link != "peer")
      throw nb::value_error((where + ": link must be 'host' or 'peer', got '" + link + "'").c_str());
    if (nb::len(srcs) != nb::len(dsts) || nb::len(srcs) != names.size())
      throw nb::value_error((where + ": src and dst hold different numbers of tensors").c_str());
    int send_device = -1, recv_device = -1;
    std::vector<DType> order;  // element types in order of first appearance: one link (and batch) each
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string what = where + ": tensor '" + names[i] + "'";
      AnyArray src;
      WritableArray dst;
      if (!nb::try_cast(srcs[i], src))
        throw nb::type_error((what + ": src is not a DLPack array (torch, CuPy, ...), got " +
                              std::string(nb::type_name(srcs[i].type()).c_str()))
                                 .c_str());
      if (!nb::try_cast(dsts[i], dst))
        throw nb::type_error((what + ": dst is not a writable DLPack array (torch, CuPy, ...), got " +
                              std::string(nb::type_name(dsts[i].type()).c_str()))
                                 .c_str());
      std::optional<DType> d = native_dtype(src.dtype());
      uint64_t count = uint64_t(src.size());
      if (bytes_as_fp32) {
        if (!(is_integer(src.dtype()) && src.dtype().bits == 8) || count % 4)
          throw nb::type_error((what + ": message buffers must be 8-bit integer arrays of a multiple of 4 bytes")
                                   .c_str());
        d = DType::fp32;
        count /= 4;
      } else if (!d || format::elem_bytes(*d) == 1)
        throw nb::type_error((what + " is " + dlpack_dtype_name(src.dtype()) +
                              ": WeightSync moves bfloat16, float16 and float32 tensors (the types of the P2P "
                              "links); send other tensors another way")
                                 .c_str());
      const nb::dlpack::dtype sd = src.dtype(), dd = dst.dtype();
      if (sd.code != dd.code || sd.bits != dd.bits || sd.lanes != dd.lanes)
        throw nb::value_error((what + ": src is " + dlpack_dtype_name(sd) + " but dst is " + dlpack_dtype_name(dd))
                                  .c_str());
      bool same_shape = src.ndim() == dst.ndim();
      for (size_t k = 0; same_shape && k < src.ndim(); ++k) same_shape = src.shape(k) == dst.shape(k);
      if (!same_shape)
        throw nb::value_error((what + ": src has shape " + shape_text(src) + " but dst " + shape_text(dst)).c_str());
      require_c_contiguous(src, what, "src");
      require_c_contiguous(dst, what, "dst");
      for (const auto& [side, type, id, device] :
           {std::tuple<const char*, int, int, int*>{"src", src.device_type(), src.device_id(), &send_device},
            std::tuple<const char*, int, int, int*>{"dst", dst.device_type(), dst.device_id(), &recv_device}}) {
        if (!on_gpu(type))
          throw nb::value_error((what + ": " + side + " is not on a CUDA device (DLPack device type " +
                                 std::to_string(type) + "); WeightSync moves CUDA tensors")
                                    .c_str());
        if (*device == -1) *device = id;
        if (*device != id)
          throw nb::value_error((what + ": " + side + " is on CUDA device " + std::to_string(id) + ", the " +
                                 side + " tensors before it on device " + std::to_string(*device) +
                                 " (all src tensors must be on one GPU, all dst tensors on one GPU)")
                                    .c_str());
      }
      auto group = std::find(order.begin(), order.end(), *d);
      if (group == order.end()) {
        order.push_back(*d);
        groups_.emplace_back();
        groups_.back().dtype = *d;
        group = order.end() - 1;
      }
      groups_[size_t(group - order.begin())].messages.push_back({src.data(), dst.data(), count});
      bytes_ += count * format::elem_bytes(*d);
      srcs_.push_back(src);
      dsts_.push_back(dst);
    }
    if (link == "host" && send_device != recv_device)
      throw nb::value_error((where + ": link='host' moves tensors within one GPU (GPU -> pinned host memory -> "
                                     "the same GPU), but src is on device " + std::to_string(send_device) +
                             " and dst on device " + std::to_string(recv_device) + "; use link='peer'")
                                .c_str());
#if ZIPCOMM_PYTHON_WITH_CUDA
    std::string why;
    if (gpu::device_count(&why) == 0)
      throw CudaError(where + ": no GPU is usable here (" + why + ")");
    if (send_device >= 0) {
      nb::gil_scoped_release unlocked;
      links_ = std::make_unique<gpu::WeightSyncLinks>(link == "host" ? gpu::LinkKind::host : gpu::LinkKind::peer,
                                                      send_device, recv_device, order);
    }
#else
    throw CudaError(where + ": this zipcomm was built without the GPU codec (no nvcc when it was built, or "
                            "ZIPCOMM_PYTHON_CUDA=OFF), so it has no P2P links; rebuild with the CUDA Toolkit");
#endif
  }

  /// (payload bytes, seconds); blocks until every receiver decoded and checked everything.
  nb::tuple sync(bool raw, uintptr_t stream) {
    if (closed_) throw nb::value_error("zipcomm.WeightSync.sync: the WeightSync is closed");
#if ZIPCOMM_PYTHON_WITH_CUDA
    if (!links_) return nb::make_tuple(uint64_t(0), 0.0);
    gpu::SyncTiming t;
    {
      nb::gil_scoped_release unlocked;
      t = links_->sync(groups_, raw, stream);
    }
    return nb::make_tuple(t.bytes, t.seconds);
#else
    (void)raw, (void)stream;
    throw CudaError("zipcomm.WeightSync.sync: built without the GPU codec");
#endif
  }

  /// Per element type, how its link runs: "stream" / "copy" (host link modes) or "peer".
  nb::dict modes() const {
    nb::dict r;
#if ZIPCOMM_PYTHON_WITH_CUDA
    if (links_)
      for (const auto& g : groups_) r[zipcomm::dtype_name(g.dtype)] = links_->mode(g.dtype);
#endif
    return r;
  }

  void close() {
#if ZIPCOMM_PYTHON_WITH_CUDA
    {
      nb::gil_scoped_release unlocked;
      links_.reset();  // the links wait for their work and free their memory
    }
#endif
    groups_.clear();
    srcs_.clear();
    dsts_.clear();
    closed_ = true;
  }

  uint64_t bytes() const { return bytes_; }
  bool closed() const { return closed_; }

 private:
  template <class Array>
  static std::string shape_text(const Array& a) {
    std::string s = "(";
    for (size_t k = 0; k < a.ndim(); ++k) s += (k ? ", " : "") + std::to_string(a.shape(k));
    return s + (a.ndim() == 1 ? ",)" : ")");
  }

  std::vector<gpu::SyncGroup> groups_;
#if ZIPCOMM_PYTHON_WITH_CUDA
  std::unique_ptr<gpu::WeightSyncLinks> links_;
#endif
  std::vector<AnyArray> srcs_;  // the DLPack imports of every src and dst: their memory stays alive
  std::vector<WritableArray> dsts_;
  uint64_t bytes_ = 0;
  bool closed_ = false;
};

}  // namespace
}  // namespace zipcomm_python

NB_MODULE(_zipcomm_ext, m) {
  using namespace zipcomm_python;
  m.doc() = "zipcomm C++ codec (private: use the zipcomm package)";

  nb::enum_<Status>(m, "Status", "zipcomm::Status (include/zipcomm/config.hpp): the outcome of a codec operation")
      .value("ok", Status::ok)
      .value("invalid_argument", Status::invalid_argument)
      .value("buffer_too_small", Status::buffer_too_small)
      .value("bad_header", Status::bad_header)
      .value("corrupt_stream", Status::corrupt_stream)
      .value("size_mismatch", Status::size_mismatch)
      .value("timeout", Status::timeout)
      .value("checksum_mismatch", Status::checksum_mismatch)
      .value("unsupported_version", Status::unsupported_version)
      .value("not_finite", Status::not_finite);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object cls = nb::module_::import_("zipcomm._errors").attr("ZipcommError");
      nb::object err = cls(e.what(), nb::cast(e.status));
      PyErr_SetObject(cls.ptr(), err.ptr());
    } catch (const CudaError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  m.def("status_string", [](Status s) { return std::string(zipcomm::status_string(s)); }, "status"_a);
  m.def("compress", &compress, "x"_a, "dtype"_a.none(), "code"_a, "chunk_log2"_a, "threads"_a);
  m.def("decompress", &decompress, "buf"_a, "out"_a.none(), "threads"_a);
  m.def("max_compressed_bytes", &max_compressed_bytes, "n"_a, "dtype"_a, "chunk_log2"_a);
  m.def("compress_capacity", &compress_capacity, "x"_a, "dtype"_a.none(), "chunk_log2"_a);
  m.def("compress_gpu", &compress_gpu, "x"_a, "dtype"_a.none(), "code"_a, "out"_a, "chunk_log2"_a, "stream"_a);
  m.def("decompress_gpu", &decompress_gpu, "buf"_a, "out"_a, "dtype"_a.none(), "stream"_a);
  m.def("wait", &wait_call, "call"_a);
  m.def("synchronize", &synchronize_calls);
  nb::class_<DeviceArray>(m, "DeviceArray",
                          "A 1-D CUDA array zipcomm allocated (outputs for arrays of no framework that allocates): "
                          "DLPack-exportable (torch.from_dlpack, cupy.from_dlpack, ...) as often as asked")
      .def("__dlpack__",
           [](nb::handle self, nb::kwargs) {
             // Each export keeps the array (and so its memory) alive until the consumer lets go of it.
             const DeviceArray& a = nb::cast<const DeviceArray&>(self);
             const size_t shape[1] = {a.count};
             return nb::ndarray<>(a.data, 1, shape, self, nullptr, a.dtype, DL_CUDA, a.device).cast();
           })
      .def("__dlpack_device__", [](const DeviceArray& a) { return nb::make_tuple(int(DL_CUDA), a.device); })
      .def_prop_ro("shape", [](const DeviceArray& a) { return nb::make_tuple(a.count); })
      .def_prop_ro("size", [](const DeviceArray& a) { return a.count; })
      .def_prop_ro("nbytes", &DeviceArray::nbytes)
      .def_prop_ro("device", [](const DeviceArray& a) { return a.device; })
      .def("prefix", [](const DeviceArray& a, size_t count) {
        if (count > a.count) throw nb::value_error("zipcomm: prefix longer than the array");
        DeviceArray p = a;
        p.count = count;
        return p;
      }, "count"_a, "The first count elements, sharing the memory.")
      .def("__len__", [](const DeviceArray& a) { return a.count; });
  m.def("cuda_empty", &cuda_empty, "device"_a, "count"_a, "dtype"_a);
  m.def("info", &info, "buf"_a, "stream"_a = 0);
  m.def("header_fields", &header_fields, "buf"_a, "stream"_a, "where"_a);
  m.def("stats", &stats, "x"_a, "dtype"_a.none(), "code"_a, "chunk_log2"_a);
  m.def("cuda_device_count", &cuda_device_count);
  register_quant(m);
  nb::class_<WeightSyncLinks>(m, "WeightSyncLinks", "zipcomm.WeightSync's links (private)")
      .def(nb::init<const nb::list&, const nb::list&, const std::vector<std::string>&, const std::string&, bool>(),
           "srcs"_a, "dsts"_a, "names"_a, "link"_a, "bytes_as_fp32"_a = false)
      .def("sync", &WeightSyncLinks::sync, "raw"_a, "stream"_a)
      .def("modes", &WeightSyncLinks::modes)
      .def("close", &WeightSyncLinks::close)
      .def_prop_ro("bytes", &WeightSyncLinks::bytes)
      .def_prop_ro("closed", &WeightSyncLinks::closed);
#if ZIPCOMM_PYTHON_WITH_CUDA
  m.attr("cuda_compiled") = true;
#else
  m.attr("cuda_compiled") = false;
#endif
  m.attr("library_version") = std::to_string(ZIPCOMM_VERSION_MAJOR) + "." + std::to_string(ZIPCOMM_VERSION_MINOR) +
                              "." + std::to_string(ZIPCOMM_VERSION_PATCH);
  m.attr("FORMAT_VERSION") = int(zipcomm::format::VERSION);
  m.attr("HEADER_BYTES") = zipcomm::format::HEADER_BYTES;
  m.attr("CHUNK_ELEMENTS") = zipcomm::format::MAX_CHUNK_ELEMS;
}
