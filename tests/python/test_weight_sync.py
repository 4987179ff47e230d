"""zipcomm.WeightSync: the argument checks (on the host, over fake CUDA arrays that are never read), and on a
GPU bit-exact coded and raw syncs over the host and peer links. CUDA arrays come from cuda_array.py (libcudart
through ctypes), so the GPU tests need neither torch nor CuPy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cuda_array
import zipcomm
import zipcomm.quant as zq
from conftest import gpu_skip_reason
from cuda_array import CUDA, CudaArray, DLPackExport

bfloat16 = pytest.importorskip("ml_dtypes").bfloat16


def fake_cuda(shape: tuple[int, ...], dtype: Any, device: int = 0) -> DLPackExport:
    """A CUDA array at a made-up address: enough for the checks, which never touch the memory."""
    return DLPackExport(CUDA, device, 1 << 20, shape, np.dtype(dtype), None)


def gpu_reason() -> str | None:
    reason = gpu_skip_reason()
    if reason:
        return reason
    if cuda_array.cudart() is None:
        return f"the tests make CUDA arrays with libcudart: {cuda_array.reason()}"
    return None


# ---- the checks, on any machine

@pytest.mark.parametrize("src,dst,error,match", [
    ([fake_cuda((4, 5), bfloat16)], [fake_cuda((5, 4), bfloat16)], ValueError, r"'\[0\]': src has shape \(4, 5\)"),
    ([fake_cuda((8,), np.float16)], [fake_cuda((8,), np.float32)], ValueError, "src is float16 but dst is float32"),
    ([fake_cuda((8,), np.int32)], [fake_cuda((8,), np.int32)], TypeError, "int32: WeightSync moves bfloat16"),
    ([fake_cuda((8,), np.float32)], [], ValueError, "src holds 1 tensors but dst 0"),
    ({"a": fake_cuda((8,), np.float32)}, {"b": fake_cuda((8,), np.float32)}, ValueError, "different keys"),
    ({"a": fake_cuda((8,), np.float32)}, [fake_cuda((8,), np.float32)], TypeError, "both be dicts"),
    ({"w": DLPackExport.of_numpy(np.zeros(8, np.float32))}, {"w": fake_cuda((8,), np.float32)}, ValueError,
     "'w': src is not on a CUDA device"),
    ([fake_cuda((8,), np.float32, 0)], [fake_cuda((8,), np.float32, 1)], ValueError, "link='host' moves tensors"),
    ([fake_cuda((8,), np.float32, 0), fake_cuda((8,), np.float32, 1)], [fake_cuda((8,), np.float32)] * 2,
     ValueError, "src is on CUDA device 1"),
    ([np.zeros(8, np.float32)], [fake_cuda((8,), np.float32)], ValueError, "not on a CUDA device"),
    (["weights"], [fake_cuda((8,), np.float32)], TypeError, "src is not a DLPack array"),
])
def test_mismatched_tensors_are_refused(src: Any, dst: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        zipcomm.WeightSync(src, dst)


def test_unknown_link_is_refused() -> None:
    with pytest.raises(ValueError, match="link must be 'host' or 'peer'"):
        zipcomm.WeightSync([fake_cuda((8,), np.float32)], [fake_cuda((8,), np.float32)], link="nvlink")


def test_quantize_plan_checks() -> None:
    src, dst = {"w": fake_cuda((64,), np.float32)}, {"w": fake_cuda((64,), np.float32)}
    with pytest.raises(TypeError, match="QuantPlan"):
        zipcomm.WeightSync(src, dst, quantize={"w": 4})
    stranger = zq.QuantPlan({"v": zq.Choice()}, 5.0, 0.9, True, "budget", 5.0)
    with pytest.raises(ValueError, match="not synced"):
        zipcomm.WeightSync(src, dst, quantize=stranger)
    host = {"w": DLPackExport.of_numpy(np.zeros(64, np.float32))}
    with pytest.raises(ValueError, match="not on a CUDA device"):
        zipcomm.WeightSync(host, dst, quantize=zq.QuantPlan({"w": zq.Choice()}, 5.0, 0.9, True, "budget", 5.0))


def test_without_a_gpu_it_says_why() -> None:
    if gpu_reason() is None:
        pytest.skip("a GPU is usable here: the GPU tests cover WeightSync")
    with pytest.raises(RuntimeError, match="built without the GPU codec|no GPU is usable"):
        zipcomm.WeightSync({"w": fake_cuda((8,), np.float32)}, {"w": fake_cuda((8,), np.float32)})


def test_help_explains_it() -> None:
    text = zipcomm.WeightSync.__doc__ or ""
    for words in ('"host"', '"peer"', "raw", "decoded", "ZipcommError", "TypeError"):
        assert words in text


# ---- on a GPU

@pytest.fixture
def gpu() -> None:
    reason = gpu_reason()
    if reason:
        pytest.skip(reason)


# Odd sizes, every dtype, a zero-size tensor; the bf16 and fp32 groups pass the links' 4 MiB bypass (coded).
SHAPES = [("embed", (2048, 1031), bfloat16), ("q_proj", (1024, 1024), bfloat16), ("bias", (257,), bfloat16),
          ("one", (1,), bfloat16), ("empty", (0,), bfloat16), ("norm", (3, 5, 7), np.float32),
          ("big32", ((1 << 20) + 3,), np.float32), ("half", (1000, 1537), np.float16), ("h1", (17,), np.float16)]


def host_state(rng: np.random.Generator, scale: float = 0.02) -> dict[str, np.ndarray]:
    return {name: (rng.standard_normal(shape) * scale).astype(dtype) for name, shape, dtype in SHAPES}


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


def check_copy(expected: dict[str, np.ndarray], dst: dict[str, CudaArray]) -> None:
    for name, a in expected.items():
        got = dst[name].to_numpy()
        assert got.shape == a.shape, name
        np.testing.assert_array_equal(bits(got), bits(a), err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("raw", [False, True], ids=["coded", "raw"])
@pytest.mark.parametrize("as_dict", [True, False], ids=["dict", "list"])
def test_sync_is_bit_exact(gpu: None, rng: np.random.Generator, raw: bool, as_dict: bool) -> None:
    state = host_state(rng)
    src = {k: CudaArray.from_numpy(v) for k, v in state.items()}
    dst = {k: CudaArray(v.shape, v.dtype) for k, v in state.items()}
    with zipcomm.WeightSync(src if as_dict else list(src.values()), dst if as_dict else list(dst.values()),
                            link="host", raw=raw) as sync:
        assert set(sync.modes()) == {"bf16", "fp16", "fp32"}
        result = sync.sync()
        assert result.bytes == sum(a.nbytes for a in state.values()) == sync.bytes
        assert result.seconds > 0 and result.gb_per_s > 0
        check_copy(state, dst)
        # In-place updates (an optimizer step) are what the next sync moves; the links are reused.
        state = host_state(rng, scale=0.03)
        for name, a in state.items():
            src[name].copy_from(a)
        sync.sync(stream=0)
        check_copy(state, dst)
    with pytest.raises(ValueError, match="closed"):
        sync.sync()


@pytest.mark.gpu
def test_quantized_sync(gpu: None, rng: np.random.Generator) -> None:
    """With a plan: the planned tensors arrive as the host reference rebuilds them, the others bit-exact."""
    state = {"w": (rng.standard_normal((1000, 1031)) * 0.02).astype(bfloat16),
             "h": (rng.standard_normal(300001) * 0.5).astype(np.float16),
             "b": (rng.standard_normal(4097)).astype(np.float32),
             "e": (rng.standard_normal((2048, 1024)) * 0.02).astype(bfloat16)}
    plan = zq.QuantPlan({"w": zq.Choice("asymmetric", 4, 64), "h": zq.Choice("symmetric", 6, 128), "b": None},
                        0.0, 0.0, True, "budget", 0.0)
    src = {k: CudaArray.from_numpy(v) for k, v in state.items()}
    dst = {k: CudaArray(v.shape, v.dtype) for k, v in state.items()}
    with zipcomm.WeightSync(src, dst, quantize=plan) as sync:
        for _ in range(2):
            result = sync.sync()
            assert result.bytes == sum(a.nbytes for a in state.values()) == sync.bytes
            assert result.quantized_bytes == sum(zq.max_quantized_bytes(state[n].size, c.bits, c.group, c.mode)
                                                 for n, c in plan.choices.items() if c is not None)
            for name, c in plan.choices.items():
                want = state[name] if c is None else zq.dequantize(
                    zq.quantize(state[name], c.bits, group=c.group, mode=c.mode)).reshape(state[name].shape)
                np.testing.assert_array_equal(bits(dst[name].to_numpy()), bits(want), err_msg=name)
            np.testing.assert_array_equal(bits(dst["e"].to_numpy()), bits(state["e"]))


@pytest.mark.gpu
def test_outputs_for_arrays_of_no_framework(gpu: None, rng: np.random.Generator) -> None:
    """Inputs of no allocating framework get zipcomm.DeviceArray outputs: exported as often as asked (each use
    of a message or stream is another export), prefixes sharing the memory."""
    x = rng.standard_normal(100003).astype(np.float32)
    src = CudaArray.from_numpy(x)
    buf = zipcomm.compress(src)
    assert isinstance(buf, zipcomm.DeviceArray) and buf.nbytes == zipcomm.max_compressed_bytes(x.size, "fp32")
    size = zipcomm.compressed_size(buf)
    assert zipcomm.compressed_size(buf) == size == len(zipcomm.compress(x))
    stream = zipcomm.compress(src, check=True)
    assert isinstance(stream, zipcomm.DeviceArray) and len(stream) == size
    for _ in range(2):
        np.testing.assert_array_equal(cuda_array.to_numpy(zipcomm.decompress(stream, check=True)), x)
    msg = zq.quantize(src, 4, group=64)
    for _ in range(2):
        np.testing.assert_array_equal(cuda_array.to_numpy(zq.dequantize(msg, check=True)),
                                      zq.dequantize(zq.quantize(x, 4, group=64)))
    with pytest.raises(ValueError, match="longer"):
        buf.prefix(buf.size + 1)


@pytest.mark.gpu
def test_sync_of_special_values(gpu: None, rng: np.random.Generator) -> None:
    """Every bit pattern (NaN payloads, infinities, subnormals, -0) arrives as it was sent."""
    raw16 = rng.integers(0, 1 << 16, 3 << 20, dtype=np.uint16)
    raw32 = rng.integers(0, 1 << 32, 2 << 20, dtype=np.uint32)
    src = [CudaArray.from_numpy(raw16.view(bfloat16)), CudaArray.from_numpy(raw32.view(np.float32))]
    dst = [CudaArray(a.shape, a.dtype) for a in src]
    with zipcomm.WeightSync(src, dst) as sync:
        sync.sync()
    np.testing.assert_array_equal(dst[0].to_numpy().view(np.uint16), raw16)
    np.testing.assert_array_equal(dst[1].to_numpy().view(np.uint32), raw32)


@pytest.mark.gpu
def test_zero_size_and_empty_syncs(gpu: None) -> None:
    src, dst = [CudaArray((0,), np.float32)], [CudaArray((0,), np.float32)]
    with zipcomm.WeightSync(src, dst) as sync:
        assert sync.sync().bytes == 0
    with zipcomm.WeightSync([], []) as sync:
        assert sync.sync().bytes == 0


@pytest.mark.gpu
def test_mismatched_gpu_tensors_are_refused(gpu: None) -> None:
    a, b = CudaArray((4, 6), bfloat16), CudaArray((6, 4), bfloat16)
    with pytest.raises(ValueError, match="shape"):
        zipcomm.WeightSync([a], [b])
    with pytest.raises(ValueError, match="float16"):
        zipcomm.WeightSync([CudaArray((8,), np.float16)], [CudaArray((8,), np.float32)])


@pytest.mark.gpu
@pytest.mark.parametrize("devices", [(0, 0), (0, 1)], ids=["one_gpu", "two_gpus"])
def test_peer_sync_is_bit_exact(gpu: None, rng: np.random.Generator, devices: tuple[int, int]) -> None:
    if devices[1] >= cuda_array.device_count():
        pytest.skip(f"link='peer' between two GPUs: {cuda_array.device_count()} GPU(s) here")
    state = host_state(rng)
    src = {k: CudaArray.from_numpy(v, device=devices[0]) for k, v in state.items()}
    dst = {k: CudaArray(v.shape, v.dtype, device=devices[1]) for k, v in state.items()}
    for raw in (False, True):
        with zipcomm.WeightSync(src, dst, link="peer", raw=raw) as sync:
            assert sync.modes() == {"bf16": "peer", "fp16": "peer", "fp32": "peer"}
            sync.sync()
        check_copy(state, dst)
        for a in dst.values():
            a.copy_from(np.zeros(a.shape, a.dtype))


@pytest.mark.gpu
def test_torch_tensors_and_streams(gpu: None) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    src = {"w": torch.randn(3000, 1000, dtype=torch.bfloat16, device="cuda") * 0.02,
           "b": torch.randn(1000, device="cuda")}
    dst = {k: torch.empty_like(v) for k, v in src.items()}
    with zipcomm.WeightSync(src, dst) as sync:
        sync.sync()  # torch's current stream
        assert all(torch.equal(src[k].view(torch.int16 if src[k].element_size() == 2 else torch.int32),
                               dst[k].view(torch.int16 if dst[k].element_size() == 2 else torch.int32))
                   for k in src)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            src["w"].mul_(2)  # ordered before the sync on `side`
            sync.sync(stream=side)
        assert torch.equal(src["w"].view(torch.int16), dst["w"].view(torch.int16))
