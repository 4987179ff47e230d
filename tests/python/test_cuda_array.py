"""cuda_array.py's DLPack export, on the host: the ctypes structures (DLManagedTensor, capsule, deleter) that the
GPU tests rely on, read back by NumPy and by zipcomm's extension (nanobind)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cuda_array
import zipcomm
from cuda_array import DLPackExport


@pytest.mark.parametrize("dtype,shape", [(np.float32, (3, 5)), (np.uint16, (7,)), (np.int8, (2, 3, 4)),
                                         (np.float16, (0,)), (np.int64, ())])
def test_numpy_reads_a_host_export(rng: np.random.Generator, dtype: type, shape: tuple[int, ...]) -> None:
    a = np.asarray(rng.standard_normal(shape) * 100).astype(dtype)
    before = cuda_array.live_exports()
    b = np.from_dlpack(DLPackExport.of_numpy(a))
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)
    if a.size:
        assert b.ctypes.data == a.ctypes.data  # a view of the same memory, not a copy
    assert cuda_array.live_exports() == before + 1
    del b
    gc.collect()
    assert cuda_array.live_exports() == before  # NumPy called the deleter


def test_consuming_a_capsule_calls_its_deleter() -> None:
    a = np.arange(10, dtype=np.float32)
    before = cuda_array.live_exports()
    capsule = DLPackExport.of_numpy(a).__dlpack__()
    tensor, release = cuda_array.consume_capsule(capsule)
    assert (tensor.ndim, tensor.shape[0], tensor.dtype.code, tensor.dtype.bits, tensor.device.device_type,
            tensor.data) == (1, 10, 2, 32, 1, a.ctypes.data)
    assert cuda_array.live_exports() == before + 1
    release()
    assert cuda_array.live_exports() == before
    with pytest.raises(ValueError):  # renamed: a second consumer is refused
        cuda_array.read_capsule(capsule)


def test_zipcomm_reads_a_host_export(rng: np.random.Generator) -> None:
    """The bfloat16 code (kDLBfloat) and a 2-D shape through nanobind, and to_numpy's host path."""
    from ml_dtypes import bfloat16

    x = (rng.standard_normal((64, 300)) * 0.02).astype(bfloat16)
    before = cuda_array.live_exports()
    stream = zipcomm.compress(DLPackExport.of_numpy(x))
    assert bytes(stream) == bytes(zipcomm.compress(x.view(np.uint16), dtype="bf16"))
    gc.collect()
    assert cuda_array.live_exports() == before
    np.testing.assert_array_equal(cuda_array.to_numpy(DLPackExport.of_numpy(x)).view(np.uint16), x.view(np.uint16))


def test_dtype_codes_round_trip() -> None:
    from ml_dtypes import bfloat16

    for dtype in (np.float16, np.float32, np.float64, np.int8, np.uint32, np.dtype(bfloat16)):
        assert cuda_array.numpy_dtype_of(*cuda_array.dl_dtype_of(np.dtype(dtype))) == np.dtype(dtype)
