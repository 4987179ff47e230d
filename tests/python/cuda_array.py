"""A minimal CUDA array for the tests, over libcudart through ctypes: GPU tests run on a machine with a GPU and
NumPy but neither torch nor CuPy. It allocates (cudaMalloc), copies (cudaMemcpy) and frees (cudaFree), exports
itself through DLPack (``__dlpack__`` / ``__dlpack_device__``: a DLManagedTensor in a "dltensor" capsule, with a
deleter) and reads back any CUDA DLPack array (``to_numpy``). The DLPack part also exports host buffers
(``DLPackExport``), so that its structures are tested on machines without a GPU too."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from typing import Any, Optional

import numpy as np

# ---- dlpack.h (unversioned ABI, DLPack 0.x / 1.x "dltensor" capsules)

CPU, CUDA = 1, 2  # DLDeviceType: kDLCPU, kDLCUDA
INT, UINT, FLOAT, BFLOAT = 0, 1, 2, 4  # DLDataTypeCode


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


_CAPSULE_NAME = b"dltensor"  # a module constant: the capsule keeps a pointer to it
_USED_CAPSULE_NAME = b"used_dltensor"

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
# Exported tensors not yet given back: their DLManagedTensor (and shape array, and the owner of the memory) must
# outlive the consumer's use, which ends when it calls the deleter.
_live: dict[int, tuple[Any, ...]] = {}


@DELETER
def _delete_managed(address: int) -> None:
    _live.pop(address, None)


def live_exports() -> int:
    """Exported tensors whose deleter has not run yet."""
    return len(_live)


def dl_dtype_of(dtype: np.dtype) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a NumPy dtype; ml_dtypes' bfloat16 is kDLBfloat."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return BFLOAT, 16
    code = {"f": FLOAT, "i": INT, "u": UINT, "b": UINT}.get(dtype.kind)
    if code is None:
        raise TypeError(f"no DLPack type for {dtype}")
    return code, 8 * dtype.itemsize


def numpy_dtype_of(code: int, bits: int) -> np.dtype:
    """The NumPy dtype for a DLPack type; bfloat16 as ml_dtypes.bfloat16 when installed, else its uint16 bits."""
    if code == BFLOAT and bits == 16:
        try:
            from ml_dtypes import bfloat16

            return np.dtype(bfloat16)
        except ImportError:
            return np.dtype(np.uint16)
    kind = {FLOAT: "f", INT: "i", UINT: "u"}.get(code)
    if kind is None:  # fp8 and other codes: their bytes
        return np.dtype(f"u{bits // 8}")
    return np.dtype(f"{kind}{bits // 8}")


class DLPackExport:
    """Exports a C-contiguous buffer at `data` (device memory or host memory) as DLPack capsules."""

    def __init__(self, device_type: int, device_id: int, data: int, shape: tuple[int, ...], dtype: np.dtype,
                 owner: object) -> None:
        self._device = (device_type, device_id)
        self._data = data
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._owner = owner  # whatever keeps the memory alive

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> object:
        # The unversioned capsule: consumers asking for max_version >= 1 accept it too (DLPack 2023.12 spec).
        del stream, max_version, dl_device, copy
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        managed = DLManagedTensor()
        managed.dl_tensor.data = self._data
        managed.dl_tensor.device = DLDevice(*self._device)
        managed.dl_tensor.ndim = ndim
        code, bits = dl_dtype_of(self.dtype)
        managed.dl_tensor.dtype = DLDataType(code, bits, 1)
        managed.dl_tensor.shape = shape
        managed.dl_tensor.strides = None  # compact row-major
        managed.dl_tensor.byte_offset = 0
        managed.manager_ctx = None
        managed.deleter = _delete_managed
        address = ctypes.addressof(managed)
        _live[address] = (managed, shape, self)
        # No capsule destructor: it would be a ctypes callback, which cannot run while the consumer that drops
        # the capsule has an exception pending. A capsule nobody consumes keeps its tensor (a leak, tests only).
        return _capsule_new(address, _CAPSULE_NAME, None)

    @classmethod
    def of_numpy(cls, a: np.ndarray) -> "DLPackExport":
        """A host (kDLCPU) export of a C-contiguous NumPy array (bfloat16: ml_dtypes)."""
        assert a.flags.c_contiguous
        return cls(CPU, 0, a.ctypes.data, a.shape, a.dtype, a)


def read_capsule(capsule: object) -> DLManagedTensor:
    """The DLManagedTensor of an unconsumed "dltensor" capsule (the capsule still owns it)."""
    return DLManagedTensor.from_address(_capsule_get_pointer(capsule, _CAPSULE_NAME))


def consume_capsule(capsule: object) -> tuple[DLTensor, Any]:
    """Takes a "dltensor" capsule as a DLPack consumer does: renames it "used_dltensor" (its producer's capsule
    destructor then leaves the tensor alone) and returns its DLTensor and a function that gives it back (calls
    its deleter)."""
    managed = read_capsule(capsule)
    _capsule_set_name(capsule, _USED_CAPSULE_NAME)
    address = ctypes.addressof(managed)

    def release() -> None:
        if managed.deleter:
            managed.deleter(address)

    return managed.dl_tensor, release


# ---- libcudart

def _find_libcudart() -> Optional[ctypes.CDLL]:
    names = []
    for root in filter(None, [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]):
        names += sorted(glob.glob(os.path.join(root, "lib64", "libcudart.so*")), reverse=True)
        names += sorted(glob.glob(os.path.join(root, "targets", "*", "lib", "libcudart.so*")), reverse=True)
    names += sorted(glob.glob("/usr/local/cuda-*/lib64/libcudart.so*"), reverse=True)
    names += sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libcudart.so*"), reverse=True)
    for entry in sys.path:  # the CUDA runtime wheels (nvidia-cuda-runtime-cu12, ...)
        names += sorted(glob.glob(os.path.join(entry, "nvidia", "cuda_runtime", "lib", "libcudart.so*")), reverse=True)
    found = ctypes.util.find_library("cudart")
    names += [found] if found else []
    names += ["libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0"]
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


_cudart: Optional[ctypes.CDLL] = None
_cudart_reason = ""
H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyKind


def cudart() -> Optional[ctypes.CDLL]:
    """libcudart, loaded once; None when it is not found or sees no GPU (reason())."""
    global _cudart, _cudart_reason
    if _cudart is None and not _cudart_reason:
        lib = _find_libcudart()
        if lib is None:
            _cudart_reason = "libcudart.so not found (CUDA_HOME, /usr/local/cuda, the loader's path)"
            return None
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        count = ctypes.c_int(0)
        err = lib.cudaGetDeviceCount(ctypes.byref(count))
        if err != 0 or count.value == 0:
            _cudart_reason = f"libcudart sees no GPU (cudaGetDeviceCount: {lib.cudaGetErrorString(err).decode()})"
            return None
        _cudart = lib
    return _cudart


def reason() -> str:
    """Why cudart() is None."""
    return _cudart_reason


def device_count() -> int:
    lib = cudart()
    if lib is None:
        return 0
    count = ctypes.c_int(0)
    _check(lib.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
    return count.value


def _check(err: int, what: str) -> None:
    if err != 0:
        raise RuntimeError(f"{what}: {_cudart.cudaGetErrorString(err).decode()} ({err})")  # type: ignore[union-attr]


class _DeviceMemory:
    """One cudaMalloc, freed when the last array over it goes."""

    def __init__(self, device: int, nbytes: int) -> None:
        self.device = device
        self.ptr = ctypes.c_void_p(None)
        with _on_device(device):
            _check(cudart().cudaMalloc(ctypes.byref(self.ptr), ctypes.c_size_t(max(nbytes, 1))), "cudaMalloc")

    def __del__(self) -> None:
        if self.ptr.value and _cudart is not None:
            with _on_device(self.device):
                _cudart.cudaFree(self.ptr)


class _on_device:
    def __init__(self, device: int) -> None:
        self.device, self.previous = device, ctypes.c_int(0)

    def __enter__(self) -> None:
        _check(cudart().cudaGetDevice(ctypes.byref(self.previous)), "cudaGetDevice")
        if self.previous.value != self.device:
            _check(cudart().cudaSetDevice(self.device), "cudaSetDevice")

    def __exit__(self, *exc: object) -> None:
        if self.previous.value != self.device:
            cudart().cudaSetDevice(self.previous.value)


def _memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
    if nbytes:
        _check(cudart().cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(nbytes), kind),
               "cudaMemcpy")


class CudaArray(DLPackExport):
    """A C-contiguous array in CUDA device memory (cudaMalloc'd), exported through DLPack."""

    def __init__(self, shape: Any, dtype: Any, device: int = 0, *, _memory: Optional[_DeviceMemory] = None,
                 _offset: int = 0) -> None:
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        memory = _memory or _DeviceMemory(device, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        super().__init__(CUDA, memory.device, memory.ptr.value + _offset, shape, dtype, memory)
        self.device = memory.device
        self._memory, self._offset = memory, _offset

    @property
    def ptr(self) -> int:
        return self._data

    @classmethod
    def from_numpy(cls, a: np.ndarray, device: int = 0) -> "CudaArray":
        """A device copy of a NumPy array (any dtype; bfloat16 through ml_dtypes)."""
        a = np.ascontiguousarray(a)
        out = cls(a.shape, a.dtype, device)
        with _on_device(device):
            _memcpy(out.ptr, a.ctypes.data, a.nbytes, H2D)
        return out

    def copy_from(self, a: np.ndarray) -> None:
        """Overwrites the array with a NumPy array of its shape and dtype (an in-place update)."""
        a = np.ascontiguousarray(a)
        assert a.shape == self.shape and a.dtype == self.dtype, (a.shape, a.dtype, self.shape, self.dtype)
        with _on_device(self.device):
            _memcpy(self.ptr, a.ctypes.data, a.nbytes, H2D)

    def to_numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        with _on_device(self.device):
            _memcpy(out.ctypes.data, self.ptr, self.nbytes, D2H)
        return out

    def __getitem__(self, key: slice) -> "CudaArray":
        """A view of a 1-D range (step 1)."""
        if len(self.shape) != 1 or not isinstance(key, slice):
            raise TypeError("CudaArray views: 1-D slices only")
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise ValueError("CudaArray views: step 1 only")
        return CudaArray((max(stop - start, 0),), self.dtype, _memory=self._memory,
                         _offset=self._offset + start * self.dtype.itemsize)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"CudaArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def to_numpy(x: Any) -> np.ndarray:
    """A host copy of any CUDA (or host) DLPack array, e.g. what zipcomm returns for a non-torch, non-CuPy
    input: read through its capsule, which is consumed (renamed, then its deleter called)."""
    if isinstance(x, CudaArray):
        return x.to_numpy()
    device_type, device_id = x.__dlpack_device__()
    tensor, release = consume_capsule(x.__dlpack__())
    shape = tuple(tensor.shape[k] for k in range(tensor.ndim))
    dtype = numpy_dtype_of(tensor.dtype.code, tensor.dtype.bits)
    if tensor.strides:
        expected = 1
        for k in reversed(range(tensor.ndim)):
            if shape[k] != 1 and tensor.strides[k] != expected:
                release()
                raise ValueError("to_numpy: a non-contiguous array")
            expected *= shape[k]
    out = np.empty(shape, dtype)
    try:
        source = (tensor.data or 0) + tensor.byte_offset
        if device_type == CPU:  # NumPy's from_dlpack has no bfloat16: copy the bytes
            ctypes.memmove(out.ctypes.data, source, out.nbytes)
        else:
            with _on_device(device_id):
                _memcpy(out.ctypes.data, source, out.nbytes, D2H)
    finally:
        release()
    return out
