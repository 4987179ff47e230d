"""fp8 (fp8_e4m3, fp8_e5m2): every bit pattern round trips, through uint8 bits with dtype=, ml_dtypes arrays,
DLPack fp8 arrays and torch fp8 tensors; the bytes are the C++ reference's; corrupt streams raise."""

from __future__ import annotations

import numpy as np
import pytest

import zipcomm
from conftest import SEED, DLPackArray, read_data
from zipcomm import Status, ZipcommError

FP8 = ["fp8_e4m3", "fp8_e5m2"]
DLPACK_FP8_CODE = {"fp8_e4m3": 10, "fp8_e5m2": 12}  # dlpack.h: kDLFloat8_e4m3fn, kDLFloat8_e5m2


def roundtrip_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    buf = zipcomm.compress(bits, dtype=dtype)
    assert len(buf) <= zipcomm.max_compressed_bytes(bits.size, dtype)
    assert zipcomm.info(buf)["dtype"] == dtype
    y = zipcomm.decompress(buf)
    assert y.size == bits.size and y.itemsize == 1
    np.testing.assert_array_equal(y.view(np.uint8), bits.ravel())
    return buf


@pytest.mark.parametrize("dtype", FP8)
def test_every_pattern_in_every_position(dtype: str) -> None:
    """All 256 patterns: in order, a chunk of shuffled tiles, short streams, a short last tile, a raw chunk."""
    rng = np.random.default_rng(SEED)
    patterns = np.arange(256, dtype=np.uint8)
    roundtrip_bits(patterns, dtype)
    roundtrip_bits(np.concatenate([rng.permutation(patterns) for _ in range(64)]), dtype)
    for n in (1, 2, 7, 8, 9, 100, 255):
        roundtrip_bits(rng.permutation(patterns)[:n], dtype)
    roundtrip_bits(np.concatenate([rng.permutation(patterns) for _ in range(3)] + [patterns[:77]]), dtype)
    noise = rng.integers(0, 256, 2 * 16384 + 500, dtype=np.uint8)
    noise[rng.choice(noise.size, 256, replace=False)] = patterns
    buf = roundtrip_bits(noise, dtype)
    info = zipcomm.info(buf)
    assert info["raw_chunks"] == info["chunks"] == 9  # random bits in 4096-element chunks: every chunk raw


@pytest.mark.parametrize("dtype", FP8)
def test_ml_dtypes_arrays(rng: np.random.Generator, dtype: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np_type = ml_dtypes.float8_e4m3fn if dtype == "fp8_e4m3" else ml_dtypes.float8_e5m2
    x = (rng.standard_normal((9, 1000)) * 4).astype(np_type)
    buf = zipcomm.compress(x)
    assert bytes(buf) == bytes(zipcomm.compress(x.view(np.uint8), dtype=dtype))
    assert zipcomm.info(buf)["dtype"] == dtype
    y = zipcomm.decompress(buf)
    assert y.dtype == np_type
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8).ravel())
    out = np.empty((9, 1000), np_type)
    zipcomm.decompress(buf, out=out)
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))
    other = "fp8_e5m2" if dtype == "fp8_e4m3" else "fp8_e4m3"
    with pytest.raises(TypeError, match=dtype):
        zipcomm.compress(x, dtype=other)
    assert zipcomm.stats(x)["dtype"] == dtype


@pytest.mark.parametrize("dtype", FP8)
def test_dlpack_fp8_arrays(rng: np.random.Generator, dtype: str) -> None:
    """A DLPack array with the fp8 type code (what torch exports where it can) is coded as that dtype."""
    bits = rng.integers(0, 256, 5000, dtype=np.uint8)
    arr = DLPackArray(DLPackArray.CPU, bits.ctypes.data, bits.size, DLPACK_FP8_CODE[dtype], 8, keep=bits)
    buf = zipcomm.compress(arr)
    assert bytes(buf) == bytes(zipcomm.compress(bits, dtype=dtype))
    target = np.zeros(5000, np.uint8)
    out = DLPackArray(DLPackArray.CPU, target.ctypes.data, target.size, DLPACK_FP8_CODE[dtype], 8, keep=target)
    zipcomm.decompress(buf, out=out)
    np.testing.assert_array_equal(target, bits)


def test_dtype_names_and_errors(rng: np.random.Generator) -> None:
    bits = rng.integers(0, 256, 3000, dtype=np.uint8)
    ref = bytes(zipcomm.compress(bits, dtype="fp8_e4m3"))
    for name in ("float8_e4m3fn", "e4m3"):
        assert bytes(zipcomm.compress(bits, dtype=name)) == ref
    assert zipcomm.info(zipcomm.compress(bits, dtype="float8_e5m2"))["dtype"] == "fp8_e5m2"
    with pytest.raises(TypeError, match="8-bit"):
        zipcomm.compress(bits.view(np.int8).astype(np.int16), dtype="fp8_e4m3")
    with pytest.raises(TypeError, match="fp8_e4m3"):  # uint8 without a dtype: the hint names the fp8 dtypes
        zipcomm.compress(bits)
    with pytest.raises(TypeError, match="unsupported dtype"):
        zipcomm.compress(bits, dtype="fp8")  # which fp8 is ambiguous
    assert zipcomm.max_compressed_bytes(0, "fp8_e4m3") == zipcomm.HEADER_BYTES
    # 256 elements: 64 + 4 planes of 32 bytes + 16 (table, check, padding) + 128 raw exponent bytes
    assert zipcomm.max_compressed_bytes(256, "fp8_e4m3") == 64 + 128 + 16 + 128
    assert zipcomm.max_compressed_bytes(256, "fp8_e5m2") == 64 + 96 + 16 + 160


@pytest.mark.parametrize("dtype", FP8)
def test_every_single_bit_flip_is_an_error(rng: np.random.Generator, dtype: str) -> None:
    bits = (rng.standard_normal(700) * 8).astype(np.float16).view(np.uint16) >> 8  # e5m2-like bytes
    clean = zipcomm.compress(bits.astype(np.uint8), dtype=dtype)
    for pos in range(len(clean)):
        for bit in range(8):
            damaged = clean.copy()
            damaged[pos] ^= np.uint8(1 << bit)
            with pytest.raises(ZipcommError) as caught:
                zipcomm.decompress(damaged)
            assert caught.value.status in {Status.bad_header, Status.unsupported_version, Status.corrupt_stream,
                                           Status.checksum_mismatch}, (pos, bit)


@pytest.mark.parametrize("name", ["llama_grads", "llama_acts", "llama_weights"])
def test_real_fp8_tensors(name: str) -> None:
    for dtype, ext, limit in (("fp8_e4m3", "e4m3", 0.9), ("fp8_e5m2", "e5m2", 0.8)):
        x = read_data(f"{name}.{ext}", np.uint8)
        buf = roundtrip_bits(x, dtype)
        assert len(buf) / x.nbytes < limit, (name, dtype)


def test_torch_fp8_tensors_if_installed(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")
    for dtype, torch_type in (("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)):
        x = (torch.randn(3, 1000) * 4).to(torch_type)
        buf = zipcomm.compress(x)
        assert bytes(buf) == bytes(zipcomm.compress(x.view(torch.uint8).numpy(), dtype=dtype))
        out = torch.empty(3000, dtype=torch_type)
        zipcomm.decompress(buf, out=out)
        assert torch.equal(out.view(torch.uint8), x.reshape(-1).view(torch.uint8))
