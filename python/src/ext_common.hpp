// What the Python extension's bindings share: DLPack array arguments (dtype, layout, device checks), Status
// errors, and arrays handed back to Python (NumPy arrays owning host memory, CUDA arrays owning device memory).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include <zipcomm/format.hpp>

#include "codec_errors.hpp"
#if ZIPCOMM_PYTHON_WITH_CUDA
#include "gpu_codec.hpp"
#endif

namespace zipcomm_python {

namespace nb = nanobind;
using zipcomm::DType;
using zipcomm::Status;
namespace format = zipcomm::format;

using AnyArray = nb::ndarray<nb::ro>;  // any dtype, shape, strides and device
using WritableArray = nb::ndarray<>;

// DLPack device types (dlpack.h: DLDeviceType).
constexpr int DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13;
// DLPack type codes of the fp8 dtypes (dlpack.h v1.1: kDLFloat8_e4m3fn, kDLFloat8_e5m2), which nanobind's
// dtype_code does not name.
constexpr uint8_t DL_FLOAT8_E4M3FN = 10, DL_FLOAT8_E5M2 = 12;

inline std::string dlpack_dtype_name(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  std::string base;
  switch (static_cast<C>(t.code)) {
    case C::Int: base = "int"; break;
    case C::UInt: base = "uint"; break;
    case C::Float: base = "float"; break;
    case C::Bfloat: base = "bfloat"; break;
    case C::Complex: base = "complex"; break;
    case C::Bool: return "bool";
    default:
      if (t.code == DL_FLOAT8_E4M3FN && t.bits == 8 && t.lanes == 1) return "float8_e4m3fn";
      if (t.code == DL_FLOAT8_E5M2 && t.bits == 8 && t.lanes == 1) return "float8_e5m2";
      return "DLPack dtype code " + std::to_string(t.code) + " of " + std::to_string(t.bits) + " bits";
  }
  base += std::to_string(t.bits);
  if (t.lanes != 1) base += "x" + std::to_string(t.lanes);
  return base;
}

inline bool is_integer(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  return t.lanes == 1 && (t.code == uint8_t(C::Int) || t.code == uint8_t(C::UInt));
}

/// The codec's dtype for an element type DLPack can name natively, if any.
inline std::optional<DType> native_dtype(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  if (t.code == uint8_t(C::Bfloat) && t.bits == 16) return DType::bf16;
  if (t.code == uint8_t(C::Float) && t.bits == 16) return DType::fp16;
  if (t.code == uint8_t(C::Float) && t.bits == 32) return DType::fp32;
  if (t.code == DL_FLOAT8_E4M3FN && t.bits == 8) return DType::fp8_e4m3;
  if (t.code == DL_FLOAT8_E5M2 && t.bits == 8) return DType::fp8_e5m2;
  return std::nullopt;
}

inline DType parse_dtype(const std::string& s, const std::string& where) {
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp16" || s == "float16" || s == "half") return DType::fp16;
  if (s == "fp32" || s == "float32" || s == "float") return DType::fp32;
  if (s == "fp8_e4m3" || s == "float8_e4m3fn" || s == "e4m3") return DType::fp8_e4m3;
  if (s == "fp8_e5m2" || s == "float8_e5m2" || s == "e5m2") return DType::fp8_e5m2;
  throw nb::value_error((where + ": unknown dtype '" + s + "' (bf16, fp16, fp32, fp8_e4m3 or fp8_e5m2)").c_str());
}


/// The element type to code `x` as. `declared` labels integer arrays holding bit patterns (numpy has no
/// bfloat16); for a float array it must agree with the array's own type.
inline DType element_dtype(const AnyArray& x, const std::optional<std::string>& declared, const std::string& where) {
  const nb::dlpack::dtype t = x.dtype();
  const std::optional<DType> native = native_dtype(t);
  const std::string name = dlpack_dtype_name(t);
  if (declared) {
    const DType d = parse_dtype(*declared, where);
    if (native) {
      if (*native != d)
        throw nb::type_error((where + ": the array is " + name + " but dtype='" + *declared +
                              "' was given (dtype= labels integer arrays of bit patterns only)")
                                 .c_str());
      return d;
    }
    if (is_integer(t) && t.bits == 8 * format::elem_bytes(d)) return d;
    throw nb::type_error((where + ": dtype='" + *declared + "' needs an array of " +
                          std::to_string(8 * format::elem_bytes(d)) + "-bit integers (bit patterns), got " + name)
                             .c_str());
  }
  if (native) return *native;
  std::string hint;
  if (is_integer(t) && t.bits == 8) hint = "; for bit patterns pass dtype='fp8_e4m3' or dtype='fp8_e5m2'";
  if (is_integer(t) && t.bits == 16) hint = "; for bit patterns pass dtype='bf16' or dtype='fp16'";
  if (is_integer(t) && t.bits == 32) hint = "; for bit patterns pass dtype='fp32'";
  throw nb::type_error((where + ": unsupported dtype " + name +
                        " (zipcomm codes bfloat16, float16, float32, float8_e4m3fn and float8_e5m2" + hint + ")")
                           .c_str());
}

/// Row-major with no gaps (dimensions of extent 1 may have any stride, as in NumPy).
template <class Array>
inline void require_c_contiguous(const Array& x, const std::string& where, const char* what) {
  if (x.size() <= 1) return;
  int64_t expected = 1;
  for (size_t i = x.ndim(); i-- > 0;) {
    if (x.shape(i) != 1 && x.stride(i) != expected)
      throw nb::value_error((where + ": " + what +
                             " is not C-contiguous; pass a contiguous copy (numpy.ascontiguousarray(x), "
                             "x.contiguous())")
                                .c_str());
    expected *= int64_t(x.shape(i));
  }
}

inline bool on_host(int device_type) { return device_type == DL_CPU || device_type == DL_CUDA_HOST; }
inline bool on_gpu(int device_type) { return device_type == DL_CUDA || device_type == DL_CUDA_MANAGED; }

inline void require_known_device(int device_type, const std::string& where) {
  if (!on_host(device_type) && !on_gpu(device_type))
    throw nb::value_error((where + ": arrays on DLPack device type " + std::to_string(device_type) +
                           " are not supported (CPU and CUDA are)")
                              .c_str());
}

/// A stream argument: bytes of any 8-bit integer array, contiguous.
inline void require_stream_bytes(const AnyArray& buf, const std::string& where) {
  if (!is_integer(buf.dtype()) || buf.dtype().bits != 8)
    throw nb::type_error((where + ": a compressed stream is bytes (a uint8 array, bytes, bytearray), got " +
                          dlpack_dtype_name(buf.dtype()))
                             .c_str());
  require_c_contiguous(buf, where, "the stream");
  require_known_device(buf.device_type(), where);
}

inline void check_status(Status s, const std::string& where) {
  if (s != Status::ok) throw StatusError(where, s);
}

/// The DLPack type of a decoded array: numpy has no bfloat16, so bf16 comes back as its uint16 bits there. fp8
/// comes back as uint8 bits everywhere (few frameworks import DLPack's fp8 codes yet): zipcomm/__init__.py
/// views them as the framework's fp8 type.
inline nb::dlpack::dtype result_dtype(DType d, bool bf16_as_bits) {
  if (format::elem_bytes(d) == 1) return nb::dtype<uint8_t>();
  if (d == DType::fp32) return nb::dtype<float>();
  if (d == DType::fp16) return nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
  if (bf16_as_bits) return nb::dtype<uint16_t>();
  return nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1};
}

/// Whether `out` may receive elements of d: the float type itself, or integers of its width.
inline void require_out_dtype(const WritableArray& out, DType d, const std::string& where) {
  const nb::dlpack::dtype t = out.dtype();
  const std::optional<DType> native = native_dtype(t);
  if (native ? *native == d : is_integer(t) && t.bits == 8 * format::elem_bytes(d)) return;
  throw nb::type_error((where + ": out is " + dlpack_dtype_name(t) + " but the stream holds " +
                        zipcomm::dtype_name(d) + " (out must be " + zipcomm::dtype_name(d) + " or " +
                        std::to_string(8 * format::elem_bytes(d)) + "-bit integers)")
                           .c_str());
}

inline void require_out_shape(const WritableArray& out, uint64_t n, const std::string& where) {
  if (out.size() != n)
    throw nb::value_error((where + ": out has " + std::to_string(out.size()) + " elements, the stream holds " +
                           std::to_string(n))
                              .c_str());
  require_c_contiguous(out, where, "out");
}

/// A NumPy array of `count` elements of `dtype` that owns `data` (malloc'd).
inline nb::object numpy_owning(void* data, size_t count, nb::dlpack::dtype dtype) {
  nb::capsule owner(data, [](void* p) noexcept { std::free(p); });
  const size_t shape[1] = {count};
  return nb::ndarray<nb::numpy>(data, 1, shape, owner, nullptr, dtype).cast();
}

struct MallocFree {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<void, MallocFree>;

inline HostBuffer host_alloc(uint64_t bytes) {
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) throw std::bad_alloc();
  return HostBuffer(p);
}

/// A 1-D CUDA array zipcomm allocated, for callers whose arrays come from no framework that allocates (DLPack
/// producers of their own): exported through DLPack as often as asked (a capsule per __dlpack__ call, each
/// keeping the array alive), freed when the last view and export let go.
struct DeviceArray {
  std::shared_ptr<void> memory;  // frees the allocation with its last owner
  uint8_t* data = nullptr;
  size_t count = 0;
  nb::dlpack::dtype dtype;
  int device = 0;
  size_t nbytes() const { return count * ((dtype.bits * dtype.lanes + 7) / 8); }
};

#if !ZIPCOMM_PYTHON_WITH_CUDA
[[noreturn]] inline void no_gpu_codec(const std::string& where) {
  throw CudaError(where + ": the array is on a CUDA device, but this zipcomm was built without the GPU codec "
                          "(no nvcc when it was built, or ZIPCOMM_PYTHON_CUDA=OFF); pass a host array, or "
                          "rebuild with the CUDA Toolkit");
}
#endif

}  // namespace zipcomm_python
