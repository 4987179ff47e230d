// The library's own kernels keep their TempStorage in dynamic shared memory (it exceeds the 48 KB of a static
// declaration); each launch passes sizeof of the kernel's storage type, and the kernel casts this array to it.
#pragma once

#include "../config.hpp"

namespace zipcomm {
namespace detail {

#ifdef __CUDACC__
// Declared once at namespace scope: a cast inside the kernel keeps the kernel's code as with a local declaration
// (an accessor function moved address arithmetic in the encoder's SASS).
extern __shared__ __align__(16) unsigned char dynamic_smem_bytes[];
#endif

}  // namespace detail
}  // namespace zipcomm
