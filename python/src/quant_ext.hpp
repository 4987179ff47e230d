// The quantization tier's bindings (quant_ext.cpp), registered into the extension module by zipcomm_ext.cpp.
#pragma once

#include <nanobind/nanobind.h>

namespace zipcomm_python {

/// Adds quant_quantize, quant_dequantize, quant_info, quant_max_bytes, quant_message_bits_per_param, ear_rows and
/// plan_bits to m.
void register_quant(nanobind::module_& m);

}  // namespace zipcomm_python
