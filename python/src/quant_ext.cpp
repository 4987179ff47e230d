// The quantization tier's half of the extension (LOSSY, opt-in; docs/QUANT.md): quantize / dequantize through the
// host reference (include/zipcomm/quant/reference_quant.hpp) or, for CUDA arrays, the device kernels; the EAR;
// the bit-width planner (bit_planner.hpp). zipcomm/quant.py is the public API.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <zipcomm/quant/bit_planner.hpp>
#include <zipcomm/quant/reference_quant.hpp>

#include "ext_common.hpp"
#include "quant_ext.hpp"

namespace zipcomm_python {
namespace {

using namespace nb::literals;
namespace quant = zipcomm::quant;
using quant::QuantMode;

QuantMode parse_mode(const std::string& s, const std::string& where) {
  if (s == "asymmetric" || s == "asym") return QuantMode::asymmetric;
  if (s == "symmetric" || s == "sym") return QuantMode::symmetric;
  throw nb::value_error((where + ": mode must be 'asymmetric' or 'symmetric', got '" + s + "'").c_str());
}

void check_choice(uint32_t bits, uint32_t group, const std::string& where) {
  if (!quant::bits_valid(bits))
    throw nb::value_error((where + ": bits must be 2..8, got " + std::to_string(bits)).c_str());
  if (!quant::group_valid(group))
    throw nb::value_error((where + ": group must be 32, 64 or 128, got " + std::to_string(group)).c_str());
}

/// A quantized tensor's element type: bf16, fp16 or fp32 (fp8 tensors are not quantized further).
DType quant_dtype(const AnyArray& x, const std::optional<std::string>& declared, const std::string& where) {
  const DType d = element_dtype(x, declared, where);
  if (!quant::original_dtype_valid(uint8_t(d)))
    throw nb::type_error((where + ": quantizes bfloat16, float16 and float32 tensors, got " +
                          zipcomm::dtype_name(d))
                             .c_str());
  return d;
}

nb::object quantize(const AnyArray& x, const std::optional<std::string>& declared, const std::string& mode_name,
                    uint32_t bits, uint32_t group, std::optional<WritableArray> out, uintptr_t stream) {
  const std::string where = "zipcomm.quant.quantize";
  require_known_device(x.device_type(), where);
  const DType d = quant_dtype(x, declared, where);
  const QuantMode mode = parse_mode(mode_name, where);
  check_choice(bits, group, where);
  require_c_contiguous(x, where, "the array");
  const uint64_t n = x.size();
  if (n > quant::MAX_ELEMENTS) throw nb::value_error((where + ": more than 2^50 elements").c_str());
  const uint64_t bytes = quant::max_quantized_bytes(mode, bits, group, n);  // the message's exact size
  const bool gpu_x = on_gpu(x.device_type());
  if (out) {
    require_known_device(out->device_type(), where);
    if (on_gpu(out->device_type()) != gpu_x || (gpu_x && out->device_id() != x.device_id()))
      throw nb::value_error((where + ": x and out are on different devices").c_str());
    if (!(is_integer(out->dtype()) && out->dtype().bits == 8))
      throw nb::type_error((where + ": out is a uint8 array (the message's bytes), got " +
                            dlpack_dtype_name(out->dtype()))
                               .c_str());
    require_c_contiguous(*out, where, "out");
    if (out->size() < bytes)
      throw nb::value_error((where + ": out has " + std::to_string(out->size()) + " bytes, the message needs " +
                             std::to_string(bytes))
                                .c_str());
  }
  if (gpu_x) {  // stream-ordered: returns the call's id (zipcomm._ext.wait)
#if ZIPCOMM_PYTHON_WITH_CUDA
    if (!out) throw nb::value_error((where + ": a CUDA array needs out (the Python layer makes one)").c_str());
    if (reinterpret_cast<uintptr_t>(out->data()) % quant::ALIGN)
      throw nb::value_error((where + ": out must start at a 16-byte aligned address on the GPU").c_str());
    uint64_t call = 0;
    {
      nb::gil_scoped_release unlocked;  // no Python object may be made without the GIL
      call = gpu::quantize_async(x.device_id(), d, mode, bits, group, x.data(), n, out->data(), out->size(), stream);
    }
    return nb::int_(call);
#else
    (void)stream;
    no_gpu_codec(where);
#endif
  }
  HostBuffer owned;
  void* dst = nullptr;
  uint64_t capacity = bytes;
  if (out) {
    dst = out->data();
    capacity = out->size();
  } else {
    owned = host_alloc(bytes);
    dst = owned.get();
  }
  uint64_t written = 0;
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = quant::host::quantize(d, mode, bits, group, x.data(), n, dst, capacity, &written);
  }
  check_status(s, where);
  if (out) return nb::none();
  return numpy_owning(owned.release(), written, nb::dtype<uint8_t>());
}

/// The checked header of a message (host or device memory).
quant::Header message_header(const AnyArray& msg, uintptr_t stream, const std::string& where) {
  require_stream_bytes(msg, where);
  uint8_t bytes[quant::HEADER_BYTES] = {};
  const uint64_t size = msg.size(), head = size < quant::HEADER_BYTES ? size : quant::HEADER_BYTES;
  if (on_gpu(msg.device_type())) {
#if ZIPCOMM_PYTHON_WITH_CUDA
    gpu::copy_to_host_on_stream(msg.device_id(), bytes, msg.data(), head, stream);
#else
    (void)stream;
    no_gpu_codec(where);
#endif
  } else if (head) {
    std::memcpy(bytes, msg.data(), head);
  }
  quant::Header h;
  check_status(quant::host::read_header(bytes, size, &h), where);
  return h;
}

nb::object dequantize(const AnyArray& msg, std::optional<WritableArray> out, const std::optional<std::string>& as,
                      uintptr_t stream) {
  const std::string where = "zipcomm.quant.dequantize";
  require_stream_bytes(msg, where);
  if (on_gpu(msg.device_type())) {  // stream-ordered: returns the call's id (zipcomm._ext.wait)
#if ZIPCOMM_PYTHON_WITH_CUDA
    const int device = msg.device_id();
    if (!out) throw nb::value_error((where + ": a CUDA message needs out (the Python layer makes one)").c_str());
    if (!on_gpu(out->device_type()) || out->device_id() != device)
      throw nb::value_error((where + ": the message and out are on different devices").c_str());
    if (reinterpret_cast<uintptr_t>(msg.data()) % quant::ALIGN)
      throw nb::value_error((where + ": a message on the GPU must start at a 16-byte aligned address; copy it "
                                     "into a new array")
                                .c_str());
    require_c_contiguous(*out, where, "out");
    // The output type: given, or out's own; else the message's (its header is read, after the stream's work).
    std::optional<DType> d = as ? std::optional<DType>(parse_dtype(*as, where)) : native_dtype(out->dtype());
    if (!d) d = DType(message_header(msg, stream, where).dtype);
    if (!quant::original_dtype_valid(uint8_t(*d)))
      throw nb::type_error((where + ": dequantizes into bfloat16, float16 or float32").c_str());
    require_out_dtype(*out, *d, where);
    const uint64_t capacity = uint64_t(out->size()) * format::elem_bytes(*d);
    uint64_t call = 0;
    {
      nb::gil_scoped_release unlocked;  // no Python object may be made without the GIL
      call = gpu::dequantize_async(device, msg.data(), msg.size(), *d, out->data(), capacity, stream);
    }
    return nb::int_(call);
#else
    (void)stream;
    no_gpu_codec(where);
#endif
  }
  const quant::Header h = message_header(msg, 0, where);
  const DType d = as ? parse_dtype(*as, where) : DType(h.dtype);
  if (!quant::original_dtype_valid(uint8_t(d)))
    throw nb::type_error((where + ": dequantizes into bfloat16, float16 or float32, not " + *as).c_str());
  if (out) {
    require_known_device(out->device_type(), where);
    if (on_gpu(out->device_type()))
      throw nb::value_error((where + ": the message and out are on different devices").c_str());
    require_out_dtype(*out, d, where);
    require_out_shape(*out, h.num_elements, where);
  }
  const uint64_t out_bytes = h.num_elements * format::elem_bytes(d);
  if (out) {
    Status s;
    {
      nb::gil_scoped_release unlocked;
      s = quant::host::dequantize(msg.data(), msg.size(), out->data(), out_bytes, d);
    }
    check_status(s, where);
    return nb::none();
  }
  HostBuffer dst = host_alloc(out_bytes);
  Status s;
  {
    nb::gil_scoped_release unlocked;
    s = quant::host::dequantize(msg.data(), msg.size(), dst.get(), out_bytes, d);
  }
  check_status(s, where);
  return numpy_owning(dst.release(), h.num_elements, result_dtype(d, true));
}

nb::dict info(const AnyArray& msg, uintptr_t stream) {
  const quant::Header h = message_header(msg, stream, "zipcomm.quant.info");
  const DType d = DType(h.dtype);
  nb::dict r;
  r["version"] = int(h.version);
  r["dtype"] = zipcomm::dtype_name(d);
  r["mode"] = quant::mode_name(QuantMode(h.mode));
  r["bits"] = int(h.bits);
  r["group"] = h.group_size;
  r["elements"] = h.num_elements;
  r["original_bytes"] = h.num_elements * format::elem_bytes(d);
  r["quantized_bytes"] = h.total_bytes;
  r["bits_per_element"] = h.num_elements ? 8.0 * double(h.total_bytes) / double(h.num_elements) : 0.0;
  return r;
}

uint64_t max_bytes(const std::string& mode, uint32_t bits, uint32_t group, uint64_t n) {
  const std::string where = "zipcomm.quant.max_quantized_bytes";
  const QuantMode m = parse_mode(mode, where);
  check_choice(bits, group, where);
  if (n > quant::MAX_ELEMENTS) throw nb::value_error((where + ": n is above 2^50").c_str());
  return quant::max_quantized_bytes(m, bits, group, n);
}

/// Per-row EAR of two (rows, vocab) float32 arrays, as a NumPy float64 array of rows.
nb::object ear_rows(const AnyArray& p, const AnyArray& q, uintptr_t stream) {
  const std::string where = "zipcomm.quant.ear";
  for (const AnyArray* a : {&p, &q}) {
    require_known_device(a->device_type(), where);
    const nb::dlpack::dtype t = a->dtype();
    if (!(t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 32 && t.lanes == 1))
      throw nb::type_error((where + ": logits must be float32, got " + dlpack_dtype_name(t)).c_str());
    if (a->ndim() != 1 && a->ndim() != 2)
      throw nb::value_error((where + ": logits must be 1-D (one position) or 2-D (positions, vocabulary)").c_str());
    require_c_contiguous(*a, where, "the logits");
  }
  bool same = p.ndim() == q.ndim();
  for (size_t k = 0; same && k < p.ndim(); ++k) same = p.shape(k) == q.shape(k);
  if (!same) throw nb::value_error((where + ": p and q have different shapes").c_str());
  if (on_gpu(p.device_type()) != on_gpu(q.device_type()) ||
      (on_gpu(p.device_type()) && p.device_id() != q.device_id()))
    throw nb::value_error((where + ": p and q are on different devices").c_str());
  const uint64_t rows = p.ndim() == 2 ? p.shape(0) : 1, vocab = p.ndim() == 2 ? p.shape(1) : p.shape(0);
  HostBuffer out = host_alloc(rows * sizeof(double));
  auto* r = static_cast<double*>(out.get());
  const auto *pp = static_cast<const float*>(p.data()), *qq = static_cast<const float*>(q.data());
  if (on_gpu(p.device_type())) {
#if ZIPCOMM_PYTHON_WITH_CUDA
    nb::gil_scoped_release unlocked;
    gpu::ear_rows(p.device_id(), pp, qq, rows, vocab, r, stream);
#else
    (void)stream;
    no_gpu_codec(where);
#endif
  } else {
    nb::gil_scoped_release unlocked;
    for (uint64_t i = 0; i < rows; ++i) r[i] = quant::host::ear_row(pp + i * vocab, qq + i * vocab, vocab);
  }
  return numpy_owning(out.release(), rows, nb::dtype<double>());
}

using Candidate = std::tuple<std::string, uint32_t, uint32_t, double, double>;  // mode, bits, group, bpp, s

nb::tuple plan_bits(const std::vector<uint64_t>& params, const std::vector<std::vector<Candidate>>& candidates,
                    const std::string& goal, double limit) {
  const std::string where = "zipcomm.quant.plan";
  if (params.size() != candidates.size())
    throw nb::value_error((where + ": one parameter count per tensor").c_str());
  if (goal != "budget" && goal != "target_ear")
    throw nb::value_error((where + ": goal is 'budget' or 'target_ear'").c_str());
  if (!std::isfinite(limit)) throw nb::value_error((where + ": the limit is not finite").c_str());
  std::vector<quant::PlanTensor> tensors(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    tensors[k].params = params[k];
    if (candidates[k].empty())
      throw nb::value_error((where + ": tensor " + std::to_string(k) + " has no candidates").c_str());
    for (const auto& [mode, bits, group, bpp, s] : candidates[k]) {
      quant::PlanCandidate c;
      // bits 0: sent as it is (not quantized); its mode and group are not used.
      c.choice = {bits ? parse_mode(mode, where) : QuantMode::asymmetric, bits, group};
      if (bits) check_choice(bits, group, where);
      if (!(std::isfinite(bpp) && bpp >= 0))
        throw nb::value_error((where + ": a candidate's bits per parameter must be finite and >= 0").c_str());
      if (!(s >= 0 && s <= 1))
        throw nb::value_error((where + ": a sensitivity (1 - EAR) must lie in [0, 1], got " + std::to_string(s))
                                  .c_str());
      c.bits_per_param = bpp;
      c.sensitivity = s;
      tensors[k].candidates.push_back(c);
    }
  }
  const quant::BitPlan plan = quant::plan_bits(
      tensors, goal == "budget" ? quant::PlanGoal::budget : quant::PlanGoal::target_ear, limit);
  return nb::make_tuple(plan.pick, plan.bits_per_param, plan.predicted_ear, plan.met);
}

}  // namespace

void register_quant(nb::module_& m) {
  m.def("quant_quantize", &quantize, "x"_a, "dtype"_a.none(), "mode"_a, "bits"_a, "group"_a, "out"_a.none(),
        "stream"_a = 0);
  m.def("quant_dequantize", &dequantize, "msg"_a, "out"_a.none(), "dtype"_a.none(), "stream"_a = 0);
  m.def("quant_info", &info, "msg"_a, "stream"_a = 0);
  m.def("quant_max_bytes", &max_bytes, "mode"_a, "bits"_a, "group"_a, "n"_a);
  m.def("quant_message_bits_per_param", [](const std::string& mode, uint32_t bits, uint32_t group, uint64_t n) {
    const std::string where = "zipcomm.quant.message_bits_per_param";
    const QuantMode md = parse_mode(mode, where);
    check_choice(bits, group, where);
    return quant::message_bits_per_param(md, bits, group, n);
  }, "mode"_a, "bits"_a, "group"_a, "n"_a);
  m.def("ear_rows", &ear_rows, "p"_a, "q"_a, "stream"_a = 0);
  m.def("plan_bits", &plan_bits, "params"_a, "candidates"_a, "goal"_a, "limit"_a);
}

}  // namespace zipcomm_python
