"""Shared fixtures of the Python package's tests (run by scripts/python-test.sh against the installed package)."""

from __future__ import annotations

import ctypes
import os
import secrets
from pathlib import Path

import numpy as np
import pytest

import zipcomm

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"

# One seed per run, printed in the report header; ZIPCOMM_TEST_SEED=<n> replays a run.
SEED = int(os.environ.get("ZIPCOMM_TEST_SEED") or secrets.randbits(32))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and the GPU codec (skipped, with the reason, without)")


def pytest_report_header(config: pytest.Config) -> list[str]:
    info = zipcomm.build_info()
    return [
        f"zipcomm random seed: {SEED} (replay with ZIPCOMM_TEST_SEED={SEED})",
        f"zipcomm package: {Path(zipcomm.__file__).parent}",
        f"zipcomm build: {info}",
    ]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def read_data(name: str, dtype: type) -> np.ndarray:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"tests/data/{name} is missing")
    return np.fromfile(path, dtype=dtype)


# ---- a DLPack producer over raw memory: bfloat16 without torch, or a CUDA array on a machine without a GPU

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackArray:
    """A 1-D DLPack array of n elements at address `data` (dlpack.h structures, unversioned capsule)."""

    CPU, CUDA = 1, 2  # DLDeviceType
    INT, UINT, FLOAT, BFLOAT = 0, 1, 2, 4  # DLDataTypeCode

    def __init__(self, device_type: int, data: int, n: int, code: int, bits: int, keep: object = None) -> None:
        self._device_type, self._data, self._code, self._bits = device_type, data, code, bits
        self._shape = (ctypes.c_int64 * 1)(n)
        self._keep = keep  # the owner of the memory
        self._tensors: list[_DLManagedTensor] = []  # alive as long as this producer

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._device_type, 0)

    def __dlpack__(self, **kwargs: object) -> object:
        managed = _DLManagedTensor()
        managed.dl_tensor.data = self._data
        managed.dl_tensor.device = _DLDevice(self._device_type, 0)
        managed.dl_tensor.ndim = 1
        managed.dl_tensor.dtype = _DLDataType(self._code, self._bits, 1)
        managed.dl_tensor.shape = self._shape
        self._tensors.append(managed)
        new_capsule = ctypes.pythonapi.PyCapsule_New
        new_capsule.restype = ctypes.py_object
        new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new_capsule(ctypes.addressof(managed), b"dltensor", None)

    @classmethod
    def bfloat16_over(cls, bits: np.ndarray) -> "DLPackArray":
        """A bfloat16 view of a contiguous uint16 NumPy array (as torch would export one)."""
        assert bits.dtype == np.uint16 and bits.flags.c_contiguous
        return cls(cls.CPU, bits.ctypes.data, bits.size, cls.BFLOAT, 16, keep=bits)


# ---- CUDA arrays for the GPU tests

def gpu_skip_reason() -> str | None:
    """Why the GPU tests cannot run here, or None."""
    info = zipcomm.build_info()
    if not info["cuda_compiled"]:
        return "zipcomm was built without the GPU codec (no nvcc at build time, or ZIPCOMM_PYTHON_CUDA=OFF)"
    if info["cuda_devices"] == 0:
        return f"no usable GPU: {info['cuda_reason']}"
    return None


@pytest.fixture(scope="module")
def cuda() -> object:
    """CUDA arrays for the GPU tests (skips them, with the reason, where there is no GPU): a tiny adapter over
    torch, CuPy or cuda_array: to_gpu(numpy) and to_host(gpu array) as numpy."""
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        import torch

        class Torch:
            name = "torch"

            @staticmethod
            def to_gpu(a: np.ndarray) -> object:
                return torch.from_numpy(np.ascontiguousarray(a)).cuda()

            @staticmethod
            def to_host(t: object) -> np.ndarray:
                t = t.cpu()
                if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):  # NumPy has no such types
                    bits = {1: (torch.int8, np.uint8), 2: (torch.int16, np.uint16)}[t.element_size()]
                    return t.view(bits[0]).numpy().view(bits[1])
                return t.numpy()

        return Torch
    except ImportError:
        pass
    try:
        import cupy

        class CuPy:
            name = "cupy"
            to_gpu = staticmethod(cupy.asarray)
            to_host = staticmethod(cupy.asnumpy)

        return CuPy
    except ImportError:
        pass
    import cuda_array

    if cuda_array.cudart() is None:
        pytest.skip(f"the GPU tests make CUDA arrays with torch, CuPy or libcudart: no torch, no CuPy, and "
                    f"{cuda_array.reason()}")

    class CudaRuntime:
        # zipcomm gives back its own DLPack arrays for these inputs: to_host reads any of them.
        name = "cudart"
        to_gpu = staticmethod(cuda_array.CudaArray.from_numpy)
        to_host = staticmethod(cuda_array.to_numpy)

    return CudaRuntime
