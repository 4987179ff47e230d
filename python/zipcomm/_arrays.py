"""Arrays and streams of the GPU paths: which framework and device an array is on, the CUDA stream a call runs
on, and new GPU arrays made in the caller's framework (torch's caching allocator, CuPy's pool) where there is one."""

from __future__ import annotations

from typing import Any

from . import _zipcomm_ext as _ext

_DL_CUDA, _DL_CUDA_MANAGED = 2, 13


def framework(x: Any) -> str:
    return type(x).__module__.partition(".")[0]


def numel(x: Any) -> int:
    """Elements of an array of any framework (the product of its shape)."""
    n = 1
    for d in x.shape:
        n *= int(d)
    return n


def cuda_device(x: Any) -> int | None:
    """x's CUDA device ordinal, or None for an array that is not on a CUDA device."""
    if not hasattr(x, "__dlpack_device__") or type(x).__module__ == "numpy":
        return None
    device_type, device_id = x.__dlpack_device__()
    return int(device_id) if int(device_type) in (_DL_CUDA, _DL_CUDA_MANAGED) else None


def stream_handle(stream: Any, array: Any, where: str) -> int:
    """A cudaStream_t as an int: given as one, as an object with .cuda_stream (torch) or .ptr (CuPy); when None,
    the current stream of array's framework (torch.cuda.current_stream, cupy.cuda.get_current_stream) on its
    device, else 0 (the legacy default stream)."""
    if stream is None:
        fw = framework(array) if array is not None else ""
        if fw == "torch":
            import torch  # type: ignore[import-not-found, unused-ignore]

            return int(torch.cuda.current_stream(array.device).cuda_stream)
        if fw == "cupy":
            import cupy  # type: ignore[import-not-found, unused-ignore]

            with cupy.cuda.Device(array.device.id):
                return int(cupy.cuda.get_current_stream().ptr)
        return 0
    if isinstance(stream, bool):
        raise TypeError(f"{where}: stream must be a CUDA stream, got a bool")
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    raise TypeError(f"{where}: stream must be an int cudaStream_t or a stream object with .cuda_stream (torch) or "
                    f".ptr (CuPy), got {type(stream).__name__}")


def empty_bytes_like(x: Any, size: int) -> Any:
    """A uint8 array of size bytes on x's GPU: in x's framework for torch and CuPy, else a DLPack array of the
    extension's (zipcomm.DeviceArray, cudaMalloc)."""
    fw = framework(x)
    if fw == "torch":
        import torch  # type: ignore[import-not-found, unused-ignore]

        return torch.empty(size, dtype=torch.uint8, device=x.device)
    if fw == "cupy":
        import cupy  # type: ignore[import-not-found, unused-ignore]

        with cupy.cuda.Device(x.device.id):
            return cupy.empty(size, dtype=cupy.uint8)
    device = cuda_device(x)
    if device is None:
        raise ValueError("zipcomm: the array is not on a CUDA device")
    return _ext.cuda_empty(device, size, "uint8")


_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8_e4m3": "float8_e4m3fn",
                 "fp8_e5m2": "float8_e5m2"}
_CUPY_DTYPES = {"bf16": "uint16", "fp16": "float16", "fp32": "float32", "fp8_e4m3": "uint8", "fp8_e5m2": "uint8"}


def empty_elements_like(x: Any, count: int, dtype: str) -> Any:
    """count elements of dtype ("bf16", ...) on x's GPU, in x's framework: torch's own types; CuPy's, with bf16 and
    fp8 as their bits (it has no such types); else a zipcomm.DeviceArray."""
    fw = framework(x)
    if fw == "torch":
        import torch  # type: ignore[import-not-found, unused-ignore]

        return torch.empty(count, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device=x.device)
    if fw == "cupy":
        import cupy  # type: ignore[import-not-found, unused-ignore]

        with cupy.cuda.Device(x.device.id):
            return cupy.empty(count, dtype=_CUPY_DTYPES[dtype])
    device = cuda_device(x)
    if device is None:
        raise ValueError("zipcomm: the array is not on a CUDA device")
    return _ext.cuda_empty(device, count, dtype)


def prefix(buf: Any, size: int) -> Any:
    """The first size bytes of a 1-D GPU byte array, without a copy."""
    if framework(buf) in ("torch", "cupy"):
        return buf[:size]
    return buf.prefix(size)
