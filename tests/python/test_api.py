"""The package's surface: where it is imported from, info/stats/max_compressed_bytes, help texts."""

from __future__ import annotations

import pydoc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zipcomm
from conftest import REPO, read_data


def test_imported_from_the_installed_package() -> None:
    # The tests exercise what pip installed, not the sources in python/.
    package = Path(zipcomm.__file__).resolve().parent
    assert not package.is_relative_to(REPO / "python"), package
    assert (package / "py.typed").exists()


def test_import_does_not_load_torch() -> None:
    # zipcomm.torch (the DDP hooks) is loaded on first use: `import zipcomm` works where torch is not installed.
    probe = "import sys, zipcomm; assert 'torch' not in sys.modules and 'zipcomm.torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


def test_build_info_and_cuda_available() -> None:
    info = zipcomm.build_info()
    assert info["format_version"] == zipcomm.FORMAT_VERSION == 6
    assert info["library_version"] == zipcomm.__version__
    assert zipcomm.cuda_available() == (info["cuda_devices"] > 0)
    if not info["cuda_compiled"]:
        assert zipcomm.cuda_available() is False
    assert "False" in zipcomm.cuda_available.__doc__ and "nvcc" in zipcomm.cuda_available.__doc__


def test_help_explains_format_and_statuses() -> None:
    text = pydoc.render_doc(zipcomm.compress, renderer=pydoc.plaintext)
    for words in ("Wire format v6", "docs/FORMAT.md", "header", "plane0", "chunk table", "exponent section",
                  "checksum_mismatch", "corrupt_stream", "bad_header", "unsupported_version", "C-contiguous"):
        assert words in text, words
    for name in ("decompress", "info", "stats", "max_compressed_bytes", "cuda_available", "build_info"):
        assert getattr(zipcomm, name).__doc__, name


def test_max_compressed_bytes_bounds_random_bits(rng: np.random.Generator) -> None:
    for kind, bits in (("bf16", np.uint16), ("fp16", np.uint16), ("fp32", np.uint32), ("fp8_e4m3", np.uint8),
                       ("fp8_e5m2", np.uint8)):
        for n in (0, 1, 255, 16385, 50000):
            x = rng.integers(0, np.iinfo(bits).max, n, dtype=bits, endpoint=True)
            for chunk_elements in (None, 4096, 8192, 16384):
                bound = zipcomm.max_compressed_bytes(n, kind, chunk_elements)
                assert len(zipcomm.compress(x, dtype=kind, chunk_elements=chunk_elements)) <= bound
    assert zipcomm.max_compressed_bytes(0, "fp32") == zipcomm.HEADER_BYTES
    # docs/FORMAT.md section 15 (16384-element chunks)
    assert zipcomm.max_compressed_bytes(np.int64(40000), np.float16, 16384) == 80256
    assert zipcomm.max_compressed_bytes(40000, "bfloat16", chunk_elements=16384) == 80112


def test_info_fields(rng: np.random.Generator) -> None:
    x = rng.integers(0, 1 << 32, 20000, dtype=np.uint32)  # random bits: exponents stored raw
    buf = zipcomm.compress(x, "pair", dtype="fp32")
    info = zipcomm.info(bytes(buf) + b"\x00" * 3)
    assert info["dtype"] == "fp32" and info["code"] == "pair" and info["version"] == 6
    assert info["elements"] == 20000 and info["original_bytes"] == 80000
    assert info["compressed_bytes"] == len(buf) and info["buffer_bytes"] == len(buf) + 3
    assert info["chunks"] == 5 and info["raw_chunks"] == 5 and info["chunk_elements"] == 4096
    assert info["ratio"] == pytest.approx(len(buf) / 80000)


def test_stats_of_real_gradients() -> None:
    x = read_data("llama_grads.bf16", np.uint16)
    stats = zipcomm.stats(x, dtype="bf16", chunk_elements=16384)
    assert stats["elements"] == x.size and stats["original_bytes"] == x.nbytes
    assert stats["compressed_bytes"] == len(zipcomm.compress(x, dtype="bf16", chunk_elements=16384))
    assert stats["ratio"] == pytest.approx(0.66931, abs=5e-5)  # tests/data/README.md
    assert stats["raw_chunks"] == 0 and stats["chunks"] == 4
    small = zipcomm.stats(x, dtype="bf16")  # 65536 elements: 4096-element chunks by default
    assert small["chunks"] == 16 and small["compressed_bytes"] == len(zipcomm.compress(x, dtype="bf16"))
    assert 0 < stats["exponent_entropy_bits"] < 8
    assert 0.5 < stats["entropy_bound"] < 1
    assert stats["bits_per_element"] == pytest.approx(16 * stats["ratio"])
    empty = zipcomm.stats(np.zeros(0, np.float32))
    assert empty["elements"] == 0 and empty["compressed_bytes"] == zipcomm.HEADER_BYTES
    # The fixed code: the same stream frame, code "fixed" in the header, about 0.035 more of ratio on bf16.
    fixed = zipcomm.stats(x, "fixed", dtype="bf16", chunk_elements=16384)
    assert fixed["code"] == "fixed" and fixed["raw_chunks"] == 0
    assert fixed["ratio"] == pytest.approx(0.70422, abs=5e-5)  # tests/host/test_real_data.cpp
    buf = zipcomm.compress(x, "fixed", dtype="bf16", chunk_elements=16384)
    assert zipcomm.info(buf)["code"] == "fixed" and len(buf) == fixed["compressed_bytes"]
    np.testing.assert_array_equal(zipcomm.decompress(buf).view(np.uint16), x)


def test_gpu_only_arguments_are_refused_for_host_arrays() -> None:
    x = np.ones(100, np.float32)
    for kwargs in ({"stream": 0}, {"out": np.zeros(4096, np.uint8)}):
        with pytest.raises(ValueError, match="CUDA arrays"):
            zipcomm.compress(x, **kwargs)
    stream = zipcomm.compress(x)
    with pytest.raises(ValueError, match="CUDA arrays"):
        zipcomm.decompress(stream, stream=0)
    with pytest.raises(ValueError, match="CUDA arrays"):
        zipcomm.decompress(stream, dtype="fp32")
    assert zipcomm.compressed_size(stream) == len(stream)
    assert zipcomm.compressed_size(np.concatenate([stream, np.zeros(100, np.uint8)])) == len(stream)
    zipcomm.synchronize()  # nothing pending: returns at once, on any machine


def test_stream_handles() -> None:
    from zipcomm import _arrays
    from cuda_array import CUDA, DLPackExport

    class TorchLike:
        cuda_stream = 12345

    class CuPyLike:
        ptr = 678

    host = np.zeros(4, np.float32)
    assert _arrays.stream_handle(None, host, "t") == 0  # the legacy default stream
    assert _arrays.stream_handle(7, host, "t") == 7
    assert _arrays.stream_handle(TorchLike(), host, "t") == 12345
    assert _arrays.stream_handle(CuPyLike(), host, "t") == 678
    with pytest.raises(TypeError, match="bool"):
        _arrays.stream_handle(True, host, "t")
    with pytest.raises(TypeError, match="cuda_stream"):
        _arrays.stream_handle("default", host, "t")
    assert _arrays.cuda_device(host) is None
    assert _arrays.cuda_device(b"bytes") is None
    assert _arrays.cuda_device(DLPackExport(CUDA, 3, 1 << 20, (8,), np.dtype(np.float32), None)) == 3
