// The library's own kernels keep their TempStorage in dynamic shared memory (it exceeds the 48 KB of a static
// declaration); each launch passes sizeof of the kernel's storage type, and the kernel casts this array to it.
#pragma once

namespace zipcomm {
namespace detail {

#ifdef __CUDACC__
// A plain declaration, cast inside each kernel: that compiles as a kernel-local declaration does, where an
// accessor function changes the encoder's code.
extern __shared__ __align__(16) unsigned char dynamic_smem_bytes[];
#endif

}  // namespace detail
}  // namespace zipcomm
