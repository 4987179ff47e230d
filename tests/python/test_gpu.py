"""The GPU path (arrays on a CUDA device, through zipcomm::device): same bytes as the host codec, round
trips, errors. Needs a GPU and the GPU codec in the build; CUDA arrays come from the `cuda` fixture (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

import zipcomm
from conftest import read_data

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("code", ["pair", "fixed"])
@pytest.mark.parametrize("name,kind,bits", [("llama_grads.bf16", "bf16", np.uint16),
                                            ("llama_grads_scaled.f16", "fp16", np.uint16),
                                            ("tiny_lm_grads_autocast.f32", "fp32", np.uint32)])
def test_gpu_writes_the_host_bytes_and_round_trips(cuda: object, name: str, kind: str, bits: type, code: str) -> None:
    x = read_data(name, bits)
    for n in (0, 1, 257, 40000, x.size):
        expected = zipcomm.compress(x[:n], code, dtype=kind)
        # Stream-ordered: the buffer has the bound's size, the stream is its prefix.
        buffer = zipcomm.compress(cuda.to_gpu(x[:n]), code, dtype=kind)
        assert len(cuda.to_host(buffer)) == zipcomm.max_compressed_bytes(n, kind)
        assert zipcomm.compressed_size(buffer) == len(expected)
        assert bytes(cuda.to_host(buffer))[: len(expected)] == bytes(expected), (name, n)
        # check=True: waited for, exactly the stream
        stream = zipcomm.compress(cuda.to_gpu(x[:n]), code, dtype=kind, check=True)
        assert bytes(cuda.to_host(stream)) == bytes(expected), (name, n)
        decoded = zipcomm.decompress(buffer)
        np.testing.assert_array_equal(cuda.to_host(decoded).view(bits), x[:n])
        # a stream written on the host decodes on the GPU, into a given out (bit patterns: dtype= or the header)
        for declared in (None, kind):
            out = cuda.to_gpu(np.zeros(n, bits))
            zipcomm.decompress(cuda.to_gpu(expected), out=out, dtype=declared, check=True)
            np.testing.assert_array_equal(cuda.to_host(out), x[:n])
        assert zipcomm.info(stream)["compressed_bytes"] == len(expected)
        zipcomm.synchronize()  # nothing failed


def test_gpu_bf16_dtype(cuda: object) -> None:
    if cuda.name != "torch":
        pytest.skip("bfloat16 arrays on the GPU: torch")
    import torch

    x = torch.randn(3, 5000, dtype=torch.bfloat16, device="cuda")
    y = zipcomm.decompress(zipcomm.compress(x))
    assert y.dtype == torch.bfloat16 and y.device == x.device
    assert torch.equal(y.view(torch.int16), x.reshape(-1).view(torch.int16))


def test_gpu_calls_follow_their_streams(cuda: object) -> None:
    """compress and decompress run on the given (or current) stream, after the work already there, and a
    decompress on another stream made to wait for the first sees the whole stream."""
    if cuda.name != "torch":
        pytest.skip("streams: torch")
    import torch

    n = 1 << 24
    x = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(50_000_000)  # the data is written late: a call not ordered after it reads zeros
        x.normal_()
        buffer = zipcomm.compress(x)  # the current stream: producer
        done = torch.cuda.Event()
        done.record()
    consumer.wait_event(done)
    out = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    zipcomm.decompress(buffer, out=out, stream=consumer)
    consumer.synchronize()
    zipcomm.synchronize()
    assert torch.equal(out.view(torch.int16), x.view(torch.int16))
    # An explicit int handle works as well
    out2 = torch.empty_like(out)
    zipcomm.decompress(buffer, out=out2, stream=consumer.cuda_stream, check=True)
    assert torch.equal(out2.view(torch.int16), x.view(torch.int16))


def test_gpu_out_buffers(cuda: object) -> None:
    x = cuda.to_gpu(np.arange(100000, dtype=np.float32))
    need = zipcomm.max_compressed_bytes(100000, "fp32")
    out = cuda.to_gpu(np.zeros(need + 64, np.uint8))
    assert zipcomm.compress(x, out=out) is out
    zipcomm.synchronize()
    expected = zipcomm.compress(np.arange(100000, dtype=np.float32))
    assert bytes(cuda.to_host(out))[: zipcomm.compressed_size(out)] == bytes(expected)
    with pytest.raises(ValueError, match="bytes"):
        zipcomm.compress(x, out=cuda.to_gpu(np.zeros(need - 1, np.uint8)))
    with pytest.raises(TypeError, match="uint8"):
        zipcomm.compress(x, out=cuda.to_gpu(np.zeros(need, np.float32)))
    with pytest.raises(ValueError, match="host"):
        zipcomm.compress(np.zeros(10, np.float32), out=out)


def test_gpu_corrupt_stream(cuda: object) -> None:
    x = read_data("llama_weights.bf16", np.uint16)
    stream = zipcomm.compress(x, dtype="bf16")
    damaged = stream.copy()
    damaged[1000] ^= 4
    with pytest.raises(zipcomm.ZipcommError) as caught:
        zipcomm.decompress(cuda.to_gpu(damaged), check=True)
    assert caught.value.status in {zipcomm.Status.checksum_mismatch, zipcomm.Status.corrupt_stream}
    # Without check=True the error surfaces at synchronize(), once.
    zipcomm.decompress(cuda.to_gpu(damaged))
    with pytest.raises(zipcomm.ZipcommError) as caught:
        zipcomm.synchronize()
    assert caught.value.status in {zipcomm.Status.checksum_mismatch, zipcomm.Status.corrupt_stream}
    zipcomm.synchronize()
    # A stream shorter than its header says: refused when the header is read, before anything is enqueued.
    with pytest.raises(zipcomm.ZipcommError) as caught:
        zipcomm.decompress(cuda.to_gpu(stream[: len(stream) - 16]))
    assert caught.value.status is zipcomm.Status.corrupt_stream
    zipcomm.synchronize()


def test_gpu_stream_must_be_aligned(cuda: object) -> None:
    stream = zipcomm.compress(np.ones(1000, np.float32))
    padded = cuda.to_gpu(np.concatenate([np.zeros(1, np.uint8), stream]))
    with pytest.raises(ValueError, match="16-byte aligned"):
        zipcomm.decompress(padded[1:])


@pytest.mark.parametrize("name,kind", [("llama_grads.e4m3", "fp8_e4m3"), ("llama_acts.e5m2", "fp8_e5m2")])
def test_gpu_fp8(cuda: object, name: str, kind: str) -> None:
    """fp8 on the GPU: the host's bytes, round trips (torch: back as its float8 type), host streams decoded."""
    x = read_data(name, np.uint8)
    for n in (0, 1, 257, 40000, x.size):
        expected = zipcomm.compress(x[:n], dtype=kind)
        stream = zipcomm.compress(cuda.to_gpu(x[:n]), dtype=kind, check=True)
        assert bytes(cuda.to_host(stream)) == bytes(expected), (name, n)
        decoded = zipcomm.decompress(stream)
        if cuda.name == "torch":
            import torch

            assert decoded.dtype == (torch.float8_e4m3fn if kind == "fp8_e4m3" else torch.float8_e5m2)
            decoded = decoded.view(torch.uint8)
        np.testing.assert_array_equal(cuda.to_host(decoded), x[:n])
        out = cuda.to_gpu(np.zeros(n, np.uint8))
        zipcomm.decompress(cuda.to_gpu(expected), out=out, check=True)
        np.testing.assert_array_equal(cuda.to_host(out), x[:n])
