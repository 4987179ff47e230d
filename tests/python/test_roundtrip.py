"""Bit-exact round trips through the host codec: every 16-bit pattern, random fp32, odd sizes, N-D arrays."""

from __future__ import annotations

import numpy as np
import pytest

import zipcomm
from conftest import SEED, DLPackArray, read_data

CODES = ["pair", "fixed"]
# Around the tile (256) and chunk (4096 by default at these sizes; 16384 at most) boundaries, and the worked
# example of docs/FORMAT.md (40000).
ODD_SIZES = [0, 1, 2, 3, 7, 8, 9, 255, 256, 257, 1000, 4095, 4097, 16383, 16384, 16385, 40000, 3 * 16384 + 129]


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16).ravel()


def roundtrip(x: np.ndarray, **kwargs) -> np.ndarray:
    buf = zipcomm.compress(x, **kwargs)
    assert buf.dtype == np.uint8 and buf.ndim == 1
    assert len(buf) <= zipcomm.max_compressed_bytes(x.size, kwargs.get("dtype") or x.dtype,
                                                    kwargs.get("chunk_elements"))
    y = zipcomm.decompress(buf)
    assert y.ndim == 1 and y.size == x.size
    np.testing.assert_array_equal(bits_of(y), bits_of(x))
    return buf


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_16_bit_pattern(dtype: str, code: str) -> None:
    """All 65536 bit patterns (NaN payloads, infinities, subnormals, -0), in order and shuffled."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    roundtrip(patterns, dtype=dtype, code=code)
    shuffled = np.random.default_rng(SEED).permutation(patterns)
    roundtrip(shuffled, dtype=dtype, code=code)


@pytest.mark.parametrize("chunk_elements", [4096, 8192, 16384])
def test_chunk_sizes(chunk_elements: int) -> None:
    """Every chunk size round-trips and is what info reports; the default follows the message size."""
    x = read_data("llama_grads.bf16", np.uint16)[:3 * 16384 + 129]
    buf = roundtrip(x, dtype="bf16", chunk_elements=chunk_elements)
    info = zipcomm.info(buf)
    assert info["chunk_elements"] == chunk_elements
    assert info["chunks"] == -(-x.size // chunk_elements)
    assert zipcomm.info(zipcomm.compress(x, dtype="bf16"))["chunk_elements"] == 4096  # short message: small chunks
    # smaller chunks pay their headers and padding: a little larger, never smaller, on real gradients
    assert len(buf) >= len(zipcomm.compress(x, dtype="bf16", chunk_elements=16384))


@pytest.mark.parametrize("bad", [0, 1, 2048, 4095, 32768, True, 4096.0])
def test_chunk_elements_refused(bad: object) -> None:
    x = np.zeros(100, np.uint16)
    with pytest.raises(ValueError, match="chunk_elements"):
        zipcomm.compress(x, dtype="bf16", chunk_elements=bad)
    with pytest.raises(ValueError, match="chunk_elements"):
        zipcomm.max_compressed_bytes(100, "bf16", chunk_elements=bad)


def test_fp16_native_dtype_matches_bit_patterns() -> None:
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    assert bytes(zipcomm.compress(patterns.view(np.float16))) == bytes(zipcomm.compress(patterns, dtype="fp16"))
    y = zipcomm.decompress(zipcomm.compress(patterns.view(np.float16)))
    assert y.dtype == np.float16


@pytest.mark.parametrize("code", CODES)
def test_random_fp32(rng: np.random.Generator, code: str) -> None:
    n = int(rng.integers(1, 300_000))
    gaussian = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 3)).astype(np.float32)
    roundtrip(gaussian, code=code)
    any_bits = rng.integers(0, 1 << 32, n, dtype=np.uint32)  # NaNs and all
    roundtrip(any_bits, dtype="fp32", code=code)
    roundtrip(any_bits.view(np.float32), code=code)


def test_fp32_special_values() -> None:
    special = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFBFFFFF, 0x00000001,
                        0x807FFFFF, 0x3F800000, 0x7F7FFFFF], dtype=np.uint32)
    roundtrip(special.view(np.float32))


@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_odd_sizes(rng: np.random.Generator, n: int, dtype: str) -> None:
    values = (rng.standard_normal(n) * 0.02).astype(np.float32)
    if dtype == "fp32":
        x = values
    elif dtype == "fp16":
        x = values.astype(np.float16)
    else:
        x = (values.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits (truncated)
    buf = roundtrip(x, dtype=dtype)
    assert zipcomm.info(buf)["elements"] == n
    if n == 0:
        assert len(buf) == zipcomm.HEADER_BYTES


@pytest.mark.parametrize("shape", [(), (1,), (3, 5), (2, 3, 257), (64, 1, 300)])
def test_nd_arrays_in_row_major_order(rng: np.random.Generator, shape: tuple) -> None:
    x = np.asarray(rng.standard_normal(shape), dtype=np.float16)
    buf = zipcomm.compress(x)
    assert bytes(buf) == bytes(zipcomm.compress(x.ravel()))
    np.testing.assert_array_equal(bits_of(zipcomm.decompress(buf)), bits_of(x))


def test_decompress_into_out(rng: np.random.Generator) -> None:
    x = rng.standard_normal((40, 50)).astype(np.float32)
    buf = zipcomm.compress(x)
    out = np.empty((40, 50), np.float32)
    assert zipcomm.decompress(buf, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint32), x.view(np.uint32))
    bits = np.empty(2000, np.uint32)  # integers of the element's width take the bits
    zipcomm.decompress(buf, out=bits)
    np.testing.assert_array_equal(bits, x.view(np.uint32).ravel())


def test_stream_inputs_bytes_bytearray_memoryview(rng: np.random.Generator) -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    buf = zipcomm.compress(x)
    for stream in (bytes(buf), bytearray(buf), memoryview(bytes(buf)), buf.view(np.int8)):
        np.testing.assert_array_equal(zipcomm.decompress(stream), x)
    # Bytes after the stream's end are ignored, as the C++ decoder ignores them.
    np.testing.assert_array_equal(zipcomm.decompress(bytes(buf) + b"\x55" * 17), x)


def test_unaligned_host_stream(rng: np.random.Generator) -> None:
    x = rng.standard_normal(5000).astype(np.float16)
    buf = zipcomm.compress(x)
    shifted = np.empty(len(buf) + 1, np.uint8)[1:]
    shifted[:] = buf
    np.testing.assert_array_equal(zipcomm.decompress(shifted), x)


def test_real_tensors(rng: np.random.Generator) -> None:
    for name, dtype, kind, limit in [("llama_grads.bf16", np.uint16, "bf16", 0.68),
                                     ("llama_weights.bf16", np.uint16, "bf16", 0.68),
                                     ("llama_grads_scaled.f16", np.uint16, "fp16", 0.87),
                                     ("llama_grads.f32", np.uint32, "fp32", 0.85),
                                     ("tiny_lm_grads_fp32.f32", np.uint32, "fp32", 0.86)]:
        x = read_data(name, dtype)
        buf = roundtrip(x, dtype=kind, chunk_elements=16384)
        assert len(buf) / x.nbytes < limit, name
        # the default for a tensor this short: 4096-element chunks, at most 0.015 larger
        assert len(roundtrip(x, dtype=kind)) / x.nbytes < limit + 0.015, name


def test_ml_dtypes_bfloat16(rng: np.random.Generator) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = rng.standard_normal((7, 300)).astype(ml_dtypes.bfloat16)
    buf = zipcomm.compress(x)
    assert bytes(buf) == bytes(zipcomm.compress(x.view(np.uint16), dtype="bf16"))
    y = zipcomm.decompress(buf)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.view(np.uint16), x.view(np.uint16).ravel())
    out = np.empty((7, 300), ml_dtypes.bfloat16)
    zipcomm.decompress(buf, out=out)
    np.testing.assert_array_equal(out.view(np.uint16), x.view(np.uint16))


def test_dlpack_bfloat16(rng: np.random.Generator) -> None:
    """A DLPack bfloat16 array (torch's export, without torch) is coded as bf16, and filled as out."""
    bits = rng.integers(0, 1 << 16, 5000, dtype=np.uint16)
    buf = zipcomm.compress(DLPackArray.bfloat16_over(bits))
    assert bytes(buf) == bytes(zipcomm.compress(bits, dtype="bf16"))
    with pytest.raises(TypeError, match="bfloat16"):
        zipcomm.compress(DLPackArray.bfloat16_over(bits), dtype="fp16")
    target = np.zeros(5000, np.uint16)
    zipcomm.decompress(buf, out=DLPackArray.bfloat16_over(target))
    np.testing.assert_array_equal(target, bits)


def test_torch_cpu_tensors_if_installed(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 1000, dtype=torch.bfloat16)
    buf = zipcomm.compress(x)
    assert bytes(buf) == bytes(zipcomm.compress(x.view(torch.int16).numpy(), dtype="bf16"))
    out = torch.empty(3000, dtype=torch.bfloat16)
    zipcomm.decompress(buf, out=out)
    assert torch.equal(out.view(torch.int16), x.reshape(-1).view(torch.int16))


@pytest.mark.parametrize("dtype, bits", [("bf16", np.uint16), ("fp32", np.uint32), ("fp8_e4m3", np.uint8)])
def test_threads_same_bytes(rng: np.random.Generator, dtype: str, bits: type) -> None:
    """The host codec on 1, 2, 3 or all hardware threads: the same stream, the same elements back."""
    x = rng.integers(0, np.iinfo(bits).max, size=37 * 4096 + 11, dtype=bits, endpoint=True)
    one = zipcomm.compress(x, dtype=dtype, threads=1)
    for threads in (2, 3, None):
        np.testing.assert_array_equal(zipcomm.compress(x, dtype=dtype, threads=threads), one)
        np.testing.assert_array_equal(zipcomm.decompress(one, threads=threads).view(bits), x)
        out = np.empty_like(x)
        zipcomm.decompress(one, out=out, threads=threads)
        np.testing.assert_array_equal(out, x)


def test_threads_corrupt_stream_same_error(rng: np.random.Generator) -> None:
    x = read_data("llama_grads.bf16", np.uint16)[:40 * 4096]
    buf = zipcomm.compress(x, dtype="bf16")
    buf[len(buf) // 2] ^= 0x40  # an exponent stream in the middle
    errors = set()
    for threads in (1, 2, 5, None):
        with pytest.raises(zipcomm.ZipcommError) as e:
            zipcomm.decompress(buf, threads=threads)
        errors.add(e.value.status)
    assert len(errors) == 1


@pytest.mark.parametrize("bad", [0, -1, 5000, 1.5, True, "2"])
def test_threads_refused(bad: object) -> None:
    x = np.zeros(100, np.uint16)
    with pytest.raises(ValueError, match="threads"):
        zipcomm.compress(x, dtype="bf16", threads=bad)
    with pytest.raises(ValueError, match="threads"):
        zipcomm.decompress(zipcomm.compress(x, dtype="bf16"), threads=bad)
