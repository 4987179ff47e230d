"""zipcomm.quant (the LOSSY quantization tier): messages against the format's rules and error bound, the EAR,
the planner, sensitivities of a NumPy and a torch model, and, on a GPU, the device kernels' bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import zipcomm
import zipcomm.quant as zq
from conftest import read_data

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}


def _as_f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


@pytest.mark.parametrize("kind", list(DTYPES))
@pytest.mark.parametrize("mode", ["asymmetric", "symmetric"])
def test_round_trip_within_half_a_step(rng: np.random.Generator, kind: str, mode: str) -> None:
    for n in (0, 1, 31, 33, 64, 1000, int(rng.integers(1, 20000))):
        x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0])).astype(DTYPES[kind])
        for bits in range(2, 9):
            for group in (32, 64, 128):
                msg = zq.quantize(x, bits, group=group, mode=mode)
                assert msg.dtype == np.uint8 and msg.size == zq.max_quantized_bytes(n, bits, group, mode)
                head = zq.info(msg)
                assert (head["dtype"], head["mode"], head["bits"], head["group"], head["elements"]) == (
                    kind, mode, bits, group, n)
                y = zq.dequantize(msg)
                assert y.dtype == x.dtype and y.size == n
                # Per group: |x - x'| <= half a step, plus the narrowing to the dtype (one ulp of the value).
                xf, yf = _as_f32(x), _as_f32(y)
                for g in range(0, n, group):
                    a, b = xf[g:g + group], yf[g:g + group]
                    if mode == "asymmetric":
                        step = (a.max() - a.min()) / (2 ** bits - 1)
                    else:
                        step = np.abs(a).max() / (2 ** (bits - 1) - 1)
                    ulp = np.spacing(np.abs(a).max().astype(DTYPES[kind])).astype(np.float32)
                    assert np.abs(a - b).max() <= step / 2 * (1 + 1e-5) + ulp, (n, bits, group, g)


def test_out_dtype_and_bit_patterns(rng: np.random.Generator) -> None:
    x = rng.standard_normal(5000).astype(np.float32)
    msg = zq.quantize(x.reshape(50, 100), 6, group=128)
    y32 = zq.dequantize(msg)
    y16 = zq.dequantize(msg, dtype="fp16")
    np.testing.assert_array_equal(y16, y32.astype(np.float16))
    out = np.empty((100, 50), np.float32)
    assert zq.dequantize(msg, out=out) is out
    np.testing.assert_array_equal(out.ravel(), y32)
    # bf16 bit patterns in uint16 with dtype=, and out as uint16 bits
    xb = x.astype(ml_dtypes.bfloat16)
    m1, m2 = zq.quantize(xb, 4), zq.quantize(xb.view(np.uint16), 4, dtype="bf16")
    assert bytes(m1) == bytes(m2)
    bits = np.empty(x.size, np.uint16)
    zq.dequantize(m1, out=bits)
    np.testing.assert_array_equal(bits, zq.dequantize(m1).view(np.uint16))


def test_real_tensor(rng: np.random.Generator) -> None:
    x = read_data("llama_weights.bf16", np.uint16)[:1 << 18]
    msg = zq.quantize(x, 8, dtype="bf16", mode="asymmetric", group=64)
    assert zq.info(msg)["bits_per_element"] == pytest.approx(9.0, abs=0.01)
    y = _as_f32(zq.dequantize(msg))
    xf = _as_f32(x.view(ml_dtypes.bfloat16))
    assert np.abs(y - xf).max() <= np.abs(xf).max() / 100


def test_bad_input_raises(rng: np.random.Generator) -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[500] = bad
        with pytest.raises(zipcomm.ZipcommError) as e:
            zq.quantize(y, 4)
        assert e.value.status == zipcomm.Status.not_finite
    with pytest.raises(ValueError, match="bits"):
        zq.quantize(x, 9)
    with pytest.raises(ValueError, match="group"):
        zq.quantize(x, 4, group=48)
    with pytest.raises(ValueError, match="mode"):
        zq.quantize(x, 4, mode="affine")
    with pytest.raises(TypeError):
        zq.quantize(x.astype(np.float64), 4)
    with pytest.raises(TypeError):
        zq.quantize(x.astype(ml_dtypes.float8_e4m3fn), 4)
    with pytest.raises(ValueError, match="contiguous"):
        zq.quantize(x.reshape(10, 100)[:, ::2], 4)
    msg = zq.quantize(x, 4)
    for cut in (0, 10, 63, 64, msg.size - 1):
        with pytest.raises(zipcomm.ZipcommError) as e:
            zq.dequantize(msg[:cut])
        assert e.value.status == zipcomm.Status.corrupt_stream
    flipped = msg.copy()
    flipped[20] ^= 1
    with pytest.raises(zipcomm.ZipcommError) as e:
        zq.dequantize(flipped)
    assert e.value.status == zipcomm.Status.bad_header
    # Neither reader takes the other's message.
    with pytest.raises(zipcomm.ZipcommError) as e:
        zq.dequantize(zipcomm.compress(x))
    assert e.value.status == zipcomm.Status.bad_header
    with pytest.raises(zipcomm.ZipcommError) as e:
        zipcomm.decompress(msg)
    assert e.value.status == zipcomm.Status.bad_header
    with pytest.raises(ValueError, match="elements"):
        zq.dequantize(msg, out=np.empty(999, np.float32))
    with pytest.raises(TypeError):
        zq.dequantize(msg, out=np.empty(1000, np.float16))


def test_ear(rng: np.random.Generator) -> None:
    p = (rng.standard_normal((7, 3001)) * 4).astype(np.float32)
    assert zq.ear(p, p) == 1.0
    assert zq.ear(p[0], p[0]) == 1.0
    q = (p + 0.05 * rng.standard_normal(p.shape)).astype(np.float32)
    e = zq.ear(p, q)
    assert 0.9 < e < 1.0
    assert zq.ear(q, p) == e
    rows = zq.ear(p, q, per_row=True)
    assert rows.shape == (7,) and rows.dtype == np.float64
    assert e == pytest.approx(rows.mean(), rel=1e-15)
    # An independent fp64 computation of one row.
    a = np.exp(p[2].astype(np.float64) - p[2].max())
    b = np.exp(q[2].astype(np.float64) - q[2].max())
    assert rows[2] == pytest.approx(np.minimum(a / a.sum(), b / b.sum()).sum(), rel=1e-13)
    # Uniform against uniform over half the vocabulary: 0.5; -inf is probability 0.
    u = np.zeros(1000, np.float32)
    h = np.where(np.arange(1000) < 500, 0.0, -np.inf).astype(np.float32)
    assert zq.ear(u, h) == pytest.approx(0.5, rel=1e-14)
    bad = p.copy()
    bad[3, 7] = np.nan
    assert math.isnan(zq.ear(bad, p))
    assert math.isnan(zq.ear(bad, p, per_row=True)[3])
    with pytest.raises(ValueError, match="shapes"):
        zq.ear(p, q[:, :100].copy())
    with pytest.raises(TypeError, match="float32"):
        zq.ear(p.astype(np.float64), q.astype(np.float64))


def _synthetic(rng: np.random.Generator, tensors: int = 6) -> dict[str, zq.Sensitivity]:
    sens = {}
    for k in range(tensors):
        n = int(rng.integers(1000, 100000))
        s = zq.Sensitivity(params=n)
        base = float(rng.uniform(0.05, 0.5))
        for c in zq.default_choices():
            v = base * 0.5 ** (c.bits - 2) * (1.1 if c.mode == "symmetric" else 1.0) * (1.05 if c.group == 128 else 1)
            s.candidates.append((c, zq.message_bits_per_param(n, c), min(1.0, v)))
        sens[f"layer{k}"] = s
    return sens


def test_plan_budget_and_target(rng: np.random.Generator) -> None:
    sens = _synthetic(rng)
    for budget in (3.0, 4.5, 6.0, 8.0):
        p = zq.plan(sens, budget_bits=budget)
        assert p.met and p.bits_per_param <= budget
        assert set(p.choices) == set(sens)
        assert budget - p.bits_per_param < 2.0  # the budget is spent, up to an upgrade that would not fit
        # The prediction is the root-sum-square of the picked sensitivities.
        picked = [p.detail[n][2] for n in sens]
        assert p.predicted_ear == pytest.approx(1 - math.sqrt(sum(s * s for s in picked)), rel=1e-12)
    cheap, rich = zq.plan(sens, budget_bits=3.5), zq.plan(sens, budget_bits=7.0)
    assert rich.predicted_ear > cheap.predicted_ear
    t = zq.plan(sens, target_ear=0.95)
    assert t.met and t.predicted_ear >= 0.95
    assert t.bits_per_param <= zq.plan(sens, target_ear=0.97).bits_per_param
    assert not zq.plan(sens, budget_bits=1.0).met
    assert not zq.plan(sens, target_ear=1.0).met  # every candidate has a sensitivity above 0
    # Keeping tensors original (sensitivity 0) makes EAR 1 reachable.
    full = zq.plan(sens, target_ear=1.0, keep_original_bits=16.0)
    assert full.met and all(c is None for c in full.choices.values())
    text = t.report()
    assert "layer0" in text and "predicted EAR" in text
    back = zq.QuantPlan.from_json(t.to_json())
    assert back.choices == t.choices and back.bits_per_param == t.bits_per_param
    lines = [x.split() for x in t.to_text().splitlines() if not x.startswith("#")]
    assert {x[0]: zq.Choice(x[1], int(x[2]), int(x[3])) for x in lines} == {
        n: c for n, c in t.choices.items() if c is not None}
    with pytest.raises(ValueError, match="exactly one"):
        zq.plan(sens)
    with pytest.raises(ValueError, match="exactly one"):
        zq.plan(sens, budget_bits=4, target_ear=0.9)


def _numpy_model(rng: np.random.Generator):
    """A two-layer read-out: logits = tanh(x W1) W2, fp32."""
    w = {"w1": (rng.standard_normal((64, 128)) / 8).astype(np.float32),
         "w2": (rng.standard_normal((128, 500)) / 4).astype(np.float32)}
    x = rng.standard_normal((40, 64)).astype(np.float32)

    def logits(weights):
        return (np.tanh(x @ weights["w1"]) @ weights["w2"]).astype(np.float32)

    return w, logits


def test_measure_sensitivity_and_apply_a_plan(rng: np.random.Generator) -> None:
    w, logits = _numpy_model(rng)
    reference = logits(w)
    choices = [zq.Choice(m, b, 64) for m in ("asymmetric", "symmetric") for b in (2, 4, 6, 8)]
    seen = []
    sens = zq.measure_sensitivity(w, lambda r: zq.ear(reference, logits({**w, **r})), choices,
                                  progress=lambda n, c, e: seen.append((n, c)))
    assert len(seen) == 2 * len(choices)
    for name, s in sens.items():
        assert s.params == w[name].size
        by_bits = {c.bits: v for c, _, v in s.candidates if c.mode == "asymmetric"}
        assert by_bits[2] > by_bits[4] > by_bits[8] >= 0  # more bits, closer outputs
    p = zq.plan(sens, budget_bits=6.0)
    msgs = p.quantize(w)
    restored = {n: zq.dequantize(m).reshape(w[n].shape) for n, m in msgs.items()}
    measured = zq.ear(reference, logits({**w, **restored}))
    assert measured > 0.5
    assert abs(measured - p.predicted_ear) < 0.1  # the root-sum-square model holds roughly on two tensors


def test_torch_sensitivity_restores_the_model(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    import zipcomm.torch as zt

    torch.manual_seed(int(rng.integers(1 << 31)))
    model = torch.nn.Sequential(torch.nn.Embedding(300, 32), torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 300)).to(torch.bfloat16)
    tokens = torch.randint(0, 300, (50,))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sens = zt.measure_quant_sensitivity(model, lambda m: m(tokens).float(),
                                        choices=[zq.Choice("asymmetric", b, 64) for b in (2, 8)])
    assert set(sens) == {"0.weight", "1.weight", "3.weight"}  # the matrices; biases are left out
    for n, p in model.named_parameters():
        assert torch.equal(p.detach().view(torch.int16), before[n].view(torch.int16)), n
    for s in sens.values():
        low, high = s.candidates[0][2], s.candidates[1][2]
        assert low > high >= 0


@pytest.mark.gpu
def test_gpu_writes_the_host_bytes(cuda: object, rng: np.random.Generator) -> None:
    for kind, dt in DTYPES.items():
        bits_type = np.uint32 if kind == "fp32" else np.uint16
        x = rng.standard_normal(int(rng.integers(1, 100000))).astype(dt).view(bits_type)
        for bits, group, mode in ((2, 32, "asymmetric"), (4, 64, "symmetric"), (8, 128, "asymmetric")):
            host = zq.quantize(x, bits, group=group, mode=mode, dtype=kind)
            dev = zq.quantize(cuda.to_gpu(x), bits, group=group, mode=mode, dtype=kind)
            assert bytes(cuda.to_host(dev)) == bytes(host), (kind, bits, group, mode)
            y = cuda.to_host(zq.dequantize(dev))
            np.testing.assert_array_equal(y.view(bits_type), zq.dequantize(host).view(bits_type))
    zipcomm.synchronize()  # the quantize and dequantize calls above all succeeded
    # A NaN: the device quantizer refuses it in stream order; check=True (or synchronize) raises it.
    bad = rng.standard_normal(5000).astype(np.float32)
    bad[1234] = np.nan
    with pytest.raises(zipcomm.ZipcommError) as e:
        zq.quantize(cuda.to_gpu(bad), 4, check=True)
    assert e.value.status == zipcomm.Status.not_finite
    zq.quantize(cuda.to_gpu(bad), 4)
    with pytest.raises(zipcomm.ZipcommError):
        zipcomm.synchronize()
    p = (rng.standard_normal((9, 50000)) * 3).astype(np.float32)
    q = (p + 0.01 * rng.standard_normal(p.shape)).astype(np.float32)
    got = zq.ear(cuda.to_gpu(p), cuda.to_gpu(q), per_row=True)
    np.testing.assert_allclose(got, zq.ear(p, q, per_row=True), rtol=0, atol=1e-12)
    assert zq.ear(cuda.to_gpu(p), cuda.to_gpu(p)) == 1.0
