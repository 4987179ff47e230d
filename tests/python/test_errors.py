"""Bad input: corrupt and truncated streams raise ZipcommError with the C++ Status; bad arguments raise
TypeError / ValueError; a CUDA array without a usable GPU raises a clear RuntimeError."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import zipcomm
from conftest import DLPackArray
from zipcomm import Status, ZipcommError

BODY_STATUSES = {Status.checksum_mismatch, Status.corrupt_stream}


def small_stream(dtype: str, n: int = 700, code: str = "pair") -> np.ndarray:
    rng = np.random.default_rng(7)
    values = (rng.standard_normal(n) * 0.05).astype(np.float32)
    x = {"fp32": values, "fp16": values.astype(np.float16),
         "bf16": (values.view(np.uint32) >> 16).astype(np.uint16)}[dtype]
    return zipcomm.compress(x, code, dtype=dtype)


def test_error_carries_status_and_its_words() -> None:
    buf = bytearray(small_stream("bf16"))
    buf[zipcomm.HEADER_BYTES + 5] ^= 0x01  # a plane byte: one element changes, its chunk check catches it
    with pytest.raises(ZipcommError) as caught:
        zipcomm.decompress(bytes(buf))
    err = caught.value
    assert err.status is Status.checksum_mismatch
    assert err.status.name == "checksum_mismatch"
    assert zipcomm.status_string(err.status) in str(err)  # "checksum mismatch", from zipcomm::status_string
    assert "Status.checksum_mismatch" in str(err)
    assert isinstance(err, Exception)
    again = pickle.loads(pickle.dumps(err))
    assert again.status is err.status and str(again) == str(err)


def test_every_status_has_words() -> None:
    for status in Status:
        assert zipcomm.status_string(status) != "unknown status"
    assert zipcomm.status_string(Status.corrupt_stream) == "corrupt stream"


@pytest.mark.parametrize("code", ["pair", "fixed"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_every_single_bit_flip_is_an_error(dtype: str, code: str) -> None:
    """docs/FORMAT.md section 14: no single-bit flip decodes; in the header it is bad_header (the version
    byte: unsupported_version), elsewhere corrupt_stream or checksum_mismatch."""
    clean = small_stream(dtype, code=code)
    for pos in range(len(clean)):
        for bit in range(8):
            damaged = clean.copy()
            damaged[pos] ^= np.uint8(1 << bit)
            with pytest.raises(ZipcommError) as caught:
                zipcomm.decompress(damaged)
            status = caught.value.status
            if pos < zipcomm.HEADER_BYTES:
                assert status in {Status.bad_header, Status.unsupported_version, Status.corrupt_stream}, (pos, bit)
            else:
                assert status in BODY_STATUSES, (pos, bit, status)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_truncated_stream(dtype: str) -> None:
    clean = small_stream(dtype, n=20000)
    for keep in [0, 1, 63, 64, 65, len(clean) // 2, len(clean) - 16, len(clean) - 1]:
        with pytest.raises(ZipcommError) as caught:
            zipcomm.decompress(clean[:keep])
        assert caught.value.status is Status.corrupt_stream, keep
        with pytest.raises(ZipcommError):
            zipcomm.info(clean[:keep])


def test_not_a_stream() -> None:
    with pytest.raises(ZipcommError) as caught:
        zipcomm.decompress(b"\x00" * 100)
    assert caught.value.status is Status.bad_header
    with pytest.raises(ZipcommError) as caught:
        zipcomm.info(bytes(100))
    assert caught.value.status is Status.bad_header


@pytest.mark.parametrize("version,code", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_version_1_and_2_streams_are_refused(version: int, code: int) -> None:
    buf = small_stream("bf16").copy()
    buf[4] = version
    buf[6] = code  # the codes of those versions (1 gaussian, 2 window3)
    check = 2166136261  # the header check (FNV-1a over bytes [0, 48)) is redone: a well-formed old header
    for b in bytes(buf[:48]):
        check = ((check ^ b) * 16777619) & 0xFFFFFFFF
    buf[48:52] = np.frombuffer(check.to_bytes(4, "little"), np.uint8)
    for read in (zipcomm.decompress, zipcomm.info):
        with pytest.raises(ZipcommError) as caught:
            read(buf)
        assert caught.value.status is Status.unsupported_version
        assert "unsupported format version" in str(caught.value)


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.int64, np.bool_, np.complex64, np.uint8])
def test_unsupported_dtype_names_it(dtype: type) -> None:
    with pytest.raises(TypeError, match=np.dtype(dtype).name if dtype is not np.bool_ else "bool"):
        zipcomm.compress(np.zeros(10, dtype))


def test_bit_patterns_need_a_declared_dtype() -> None:
    with pytest.raises(TypeError, match="dtype='bf16'"):
        zipcomm.compress(np.zeros(10, np.uint16))
    with pytest.raises(TypeError, match="32-bit"):
        zipcomm.compress(np.zeros(10, np.uint16), dtype="fp32")
    with pytest.raises(TypeError, match="float16"):
        zipcomm.compress(np.zeros(10, np.float16), dtype="bf16")
    with pytest.raises(TypeError):
        zipcomm.compress(np.zeros(10, np.float32), dtype="int8")
    with pytest.raises(TypeError, match="list"):
        zipcomm.compress([1.0, 2.0])


def test_non_contiguous_input_raises_value_error() -> None:
    x = np.zeros((8, 8), np.float32)
    for view in (x[:, ::2], x.T, x[::2]):
        with pytest.raises(ValueError, match="not C-contiguous"):
            zipcomm.compress(view)
    zipcomm.compress(x[2:5])  # a contiguous slice is fine
    zipcomm.compress(x[:1].T)  # extent-1 dimensions may have any stride, as in NumPy


def test_bad_code_and_bad_size_arguments() -> None:
    for code in ("huffman", "gaussian", "window3"):  # the codes of format v1/v2 are gone too
        with pytest.raises(ValueError, match="'pair' or 'fixed'"):
            zipcomm.compress(np.zeros(4, np.float32), code=code)
    with pytest.raises(ValueError):
        zipcomm.max_compressed_bytes(-1, "bf16")
    with pytest.raises(TypeError):
        zipcomm.max_compressed_bytes(10, "float64")


def test_bad_out() -> None:
    buf = small_stream("fp16", n=1000)
    with pytest.raises(ValueError, match="1000"):
        zipcomm.decompress(buf, out=np.empty(999, np.float16))
    with pytest.raises(TypeError, match="fp16"):
        zipcomm.decompress(buf, out=np.empty(1000, np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        zipcomm.decompress(buf, out=np.empty((1000, 2), np.float16)[:, 0])
    read_only = np.empty(1000, np.float16)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        zipcomm.decompress(buf, out=read_only)


def test_stream_of_wrong_type() -> None:
    with pytest.raises(TypeError, match="float32"):
        zipcomm.decompress(np.zeros(100, np.float32))
    with pytest.raises(TypeError):
        zipcomm.decompress("not bytes")


# ---- a CUDA array on a machine without a GPU: the GPU path says so clearly

def test_cuda_array_without_gpu_raises_clearly() -> None:
    if zipcomm.cuda_available():
        pytest.skip("a GPU is usable here: tests/python/test_gpu.py covers the GPU path")
    reason = zipcomm.build_info()["cuda_reason"]
    assert reason
    def fake_cuda(n: int, code: int, bits: int) -> DLPackArray:
        # A CUDA array whose memory is never touched: the GPU path must stop before.
        return DLPackArray(DLPackArray.CUDA, 1 << 20, n, code, bits)

    with pytest.raises(RuntimeError, match="CUDA device") as caught:
        zipcomm.compress(fake_cuda(1000, DLPackArray.BFLOAT, 16))
    message = str(caught.value)
    if zipcomm.build_info()["cuda_compiled"]:
        assert "no GPU is usable" in message and "cudaGetDeviceCount" in message
    else:
        assert "without the GPU codec" in message
    with pytest.raises(RuntimeError, match="CUDA device"):
        zipcomm.decompress(fake_cuda(4096, DLPackArray.UINT, 8))  # a stream
    with pytest.raises(RuntimeError, match="CUDA device"):
        zipcomm.info(fake_cuda(4096, DLPackArray.UINT, 8))
    with pytest.raises(ValueError, match="host arrays"):
        zipcomm.stats(fake_cuda(1000, DLPackArray.FLOAT, 32))
