"""zipcomm.quant: the quantization tier. LOSSY and opt-in, apart from the lossless codec.

Each group of G consecutive elements (G = 32, 64 or 128) of a bf16, fp16 or fp32 tensor becomes b-bit codes
(b = 2..8) and one set of group parameters: ``asymmetric`` (scale and minimum, 8 bytes per group) or
``symmetric`` (scale, 4 bytes). A quantized message has its own header (magic "ZPQT", version 1), so it is never
taken for a lossless stream, and the same bytes come from the host reference and the GPU kernels
(docs/QUANT.md has the layout and the exact arithmetic).

Whether a quantized model is good enough is measured by the Expected Acceptance Rate (``ear``): the mean over
positions of sum_x min(p(x), q(x)) between the original's and the quantized model's next-token distributions,
the probability that speculative sampling accepts the quantized model's token (1 = identical).

A plan gives every tensor of a model its own bit width (and mode and group size), from each tensor's measured
sensitivity (1 - EAR with only that tensor quantized) and a budget of bits per parameter or a target EAR:

    >>> sens = zipcomm.quant.measure_sensitivity(weights, evaluate)   # evaluate(replaced) -> EAR
    >>> plan = zipcomm.quant.plan(sens, budget_bits=5.0)               # or target_ear=0.99
    >>> print(plan.report())
    >>> messages = plan.quantize(weights)                             # name -> uint8 message
    >>> restored = {k: zipcomm.quant.dequantize(m) for k, m in messages.items()}

``zipcomm.torch.measure_quant_sensitivity(model, logits_fn)`` measures a torch model's sensitivities.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np

from . import _zipcomm_ext as _ext
from . import _array_argument, _arrays, _canonical_dtype, _framework, _out_target, _stream_argument

__all__ = [
    "Choice",
    "QuantPlan",
    "Sensitivity",
    "default_choices",
    "dequantize",
    "ear",
    "info",
    "max_quantized_bytes",
    "measure_sensitivity",
    "message_bits_per_param",
    "plan",
    "quantize",
]

_MODES = ("asymmetric", "symmetric")

try:  # optional: NumPy's bfloat16
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - depends on the environment
    _bfloat16 = None


@dataclass(frozen=True)
class Choice:
    """How to quantize one tensor: mode ("asymmetric" | "symmetric"), bits (2..8), group (32, 64, 128)."""

    mode: str = "asymmetric"
    bits: int = 4
    group: int = 64

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"zipcomm.quant.Choice: mode must be 'asymmetric' or 'symmetric', got {self.mode!r}")
        if not (isinstance(self.bits, int) and 2 <= self.bits <= 8):
            raise ValueError(f"zipcomm.quant.Choice: bits must be 2..8, got {self.bits!r}")
        if self.group not in (32, 64, 128):
            raise ValueError(f"zipcomm.quant.Choice: group must be 32, 64 or 128, got {self.group!r}")

    def __str__(self) -> str:
        return f"{'asym' if self.mode == 'asymmetric' else 'sym'}{self.bits}/g{self.group}"


def default_choices(bits: Iterable[int] = range(2, 9), groups: Iterable[int] = (64, 128),
                    modes: Iterable[str] = _MODES) -> list[Choice]:
    """The candidates the planner searches by default: every bit width 2..8, group 64 and 128, both modes."""
    return [Choice(m, b, g) for m in modes for g in groups for b in bits]


def _mode(mode: str, where: str) -> str:
    if mode in ("asymmetric", "asym"):
        return "asymmetric"
    if mode in ("symmetric", "sym"):
        return "symmetric"
    raise ValueError(f"{where}: mode must be 'asymmetric' or 'symmetric', got {mode!r}")


def quantize(x: Any, bits: int, *, group: int = 64, mode: str = "asymmetric", dtype: Any = None,
             out: Any = None, stream: Any = None, check: bool = False) -> Any:
    """Quantizes a bf16, fp16 or fp32 array into one message (LOSSY: see the module's help).

    Args:
        x: a C-contiguous array (NumPy with ml_dtypes.bfloat16 / float16 / float32, torch, CuPy, or bit patterns
            with ``dtype``); its elements are taken in row-major order.
        bits: code bits per element, 2..8.
        group: elements per group (one set of parameters each): 32, 64 or 128.
        mode: "asymmetric" (x' = lo + code * scale) or "symmetric" (x' = (code - 2^(b-1)) * scale).
        dtype: "bf16" / "fp16" / "fp32" for integer arrays holding bit patterns.
        out: optional uint8 array to write the message into (same device as x, C-contiguous, at least
            ``max_quantized_bytes`` bytes; 16-byte aligned on a GPU); bytes past the message are not written.
        stream (CUDA arrays): where the kernels run (as ``zipcomm.compress``: default the current stream of x's
            framework); nothing waits for the GPU unless ``check=True``, and errors surface at
            ``zipcomm.synchronize()``.
        check (CUDA arrays): wait for the call and raise its error.

    Returns:
        out when given, else the message as a 1-D uint8 array of exactly ``max_quantized_bytes(x.size, bits,
        group, mode)`` bytes: NumPy for host arrays (the C++ host reference wrote it), an array of x's framework on
        x's GPU for CUDA arrays (the device kernels write it, stream-ordered: the same bytes).

    Raises:
        ZipcommError: Status.not_finite for a NaN or an infinity in x, or a group whose range overflows.
        TypeError, ValueError: another dtype, a non-contiguous array, bits / group / mode out of range.
    """
    where = "zipcomm.quant.quantize"
    arg, declared = _array_argument(x, _canonical_dtype(dtype, where), where)
    mode = _mode(mode, where)
    if _arrays.cuda_device(arg) is not None:
        size = max_quantized_bytes(_arrays.numel(arg), bits, group, mode)
        buf = out if out is not None else _arrays.empty_bytes_like(x, size)
        call = _ext.quant_quantize(arg, declared, mode, int(bits), int(group), buf,
                                   _arrays.stream_handle(stream, x, where))
        if check:
            _ext.wait(call)
        return buf
    if stream is not None:
        raise ValueError(f"{where}: stream= is for CUDA arrays; x is on the host")
    if out is not None:
        _ext.quant_quantize(arg, declared, mode, int(bits), int(group), _out_target(out, where))
        return out
    return _ext.quant_quantize(arg, declared, mode, int(bits), int(group), None)


def dequantize(msg: Any, out: Any = None, *, dtype: Any = None, stream: Any = None, check: bool = False) -> Any:
    """Rebuilds the tensor a message approximates (every message check of docs/QUANT.md section 4 first).

    Args:
        msg: the message (uint8 array on the host or a GPU, bytes, bytearray); on a GPU 16-byte aligned.
        out: optional array to fill (same device as msg, C-contiguous, of the output dtype or integers of its
            width): on the host exactly the message's element count, on a GPU at least that many.
        dtype: the output element type ("bf16", "fp16", "fp32"); default the message's own, whose values are the
            reconstruction docs/QUANT.md defines; another one gets that fp32 value rounded to it.
        stream (CUDA messages): where the kernel runs (as ``zipcomm.decompress``); without out (or with an
            integer out and no dtype) the message's header is read first, which waits for the stream's work.
        check (CUDA messages): wait for the call and raise its error (else ``zipcomm.synchronize()`` does).

    Returns:
        out, or a new 1-D array (host: NumPy, bf16 as ml_dtypes.bfloat16 when installed, else uint16 bits; GPU:
        an array of msg's framework, filled in stream order).

    Raises:
        ZipcommError: bad_header, unsupported_version, corrupt_stream (truncated, padding or parameters no writer
            produces), buffer_too_small.
    """
    where = "zipcomm.quant.dequantize"
    msg = _stream_argument(msg, where)
    declared = _canonical_dtype(dtype, where)
    if _arrays.cuda_device(msg) is not None:
        handle = _arrays.stream_handle(stream, msg, where)
        if out is None:
            head = _ext.quant_info(msg, handle)
            declared = declared or head["dtype"]
            out = _arrays.empty_elements_like(msg, head["elements"], declared)
        call = _ext.quant_dequantize(msg, out, declared, handle)
        if check:
            _ext.wait(call)
        return out
    if stream is not None:
        raise ValueError(f"{where}: stream= is for CUDA messages; the message is on the host")
    if out is not None:
        _ext.quant_dequantize(msg, _out_target(out, where), declared)
        return out
    result = _ext.quant_dequantize(msg, None, declared)
    if result.dtype == np.uint16 and _bfloat16 is not None:
        return result.view(_bfloat16)
    return result


def info(msg: Any, *, stream: Any = None) -> dict[str, Any]:
    """The checked header of a message: version, dtype, mode, bits, group, elements, original_bytes,
    quantized_bytes, bits_per_element (all bytes counted). A GPU message's header is read after the work on
    ``stream`` (default: its framework's current stream), which waits for it."""
    where = "zipcomm.quant.info"
    msg = _stream_argument(msg, where)
    if _arrays.cuda_device(msg) is not None:
        return _ext.quant_info(msg, _arrays.stream_handle(stream, msg, where))
    return _ext.quant_info(msg)


def max_quantized_bytes(n: int, bits: int, group: int = 64, mode: str = "asymmetric") -> int:
    """The exact size of the message of n elements (it depends on nothing else)."""
    where = "zipcomm.quant.max_quantized_bytes"
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{where}: n must be a non-negative integer, got {n!r}")
    return int(_ext.quant_max_bytes(_mode(mode, where), int(bits), int(group), int(n)))


def message_bits_per_param(n: int, choice: Choice) -> float:
    """Bits per parameter of the message of n elements under choice, header and padding included."""
    return float(_ext.quant_message_bits_per_param(choice.mode, choice.bits, choice.group, int(n)))


def ear(p_logits: Any, q_logits: Any, *, per_row: bool = False, stream: Any = None) -> Any:
    """Expected Acceptance Rate of two models' logits over the same positions.

    Args:
        p_logits, q_logits: float32 arrays of shape (positions, vocabulary) or (vocabulary,), C-contiguous, both
            on the host or both on one GPU: p the original model's, q the quantized one's.
        per_row: return every position's value instead of the mean.
        stream (GPU logits): where the kernel runs (default: the logits' framework's current stream); the call
            waits for it (the result is a host value).

    Returns:
        The mean over positions of sum_x min(softmax(p)(x), softmax(q)(x)) (a float in [0, 1]; exactly 1.0 when
        the logits are bitwise identical), or a float64 NumPy array of the per-position values. Computed in
        fp64 with the row maximum subtracted and compensated sums (the C++ host reference on the host, one
        block per row on the GPU); a position with a NaN or +inf logit, or no finite one, gives NaN, and so
        does the mean. -inf logits are probability 0.
    """
    where = "zipcomm.quant.ear"
    args = []
    for x in (p_logits, q_logits):
        if not (isinstance(x, np.ndarray) or hasattr(x, "__dlpack__")):
            raise TypeError(f"{where}: logits must be arrays (NumPy, torch, CuPy), got {type(x).__name__}")
        args.append(x)
    handle = _arrays.stream_handle(stream, args[0], where) if _arrays.cuda_device(args[0]) is not None else 0
    rows = _ext.ear_rows(args[0], args[1], handle)
    if per_row:
        return rows
    if rows.size == 0 or np.isnan(rows).any():
        return math.nan
    return math.fsum(rows.tolist()) / rows.size


# ---- planning ---------------------------------------------------------------------------------------------------

@dataclass
class Sensitivity:
    """What the planner needs about one tensor: its parameter count and, per candidate, the message's bits per
    parameter and the sensitivity 1 - EAR with only this tensor quantized so."""

    params: int
    candidates: list[tuple[Choice, float, float]] = field(default_factory=list)  # (choice, bits/param, 1 - EAR)


def _round_trip(x: Any, choice: Choice) -> Any:
    """x quantized under choice and rebuilt: an array like x (framework, device, dtype, shape)."""
    msg = quantize(x, choice.bits, group=choice.group, mode=choice.mode, check=True)
    framework = _framework(x)
    out: Any
    if isinstance(x, np.ndarray):
        out = np.empty(x.shape, x.dtype)
    elif framework == "torch":
        import torch  # type: ignore[import-not-found, unused-ignore]

        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    elif framework == "cupy":
        import cupy  # type: ignore[import-not-found, unused-ignore]

        out = cupy.empty(x.shape, x.dtype)
    else:
        return dequantize(msg, check=True).reshape(tuple(x.shape))
    return dequantize(msg, out=out, check=_arrays.cuda_device(msg) is not None)


def measure_sensitivity(tensors: Mapping[str, Any], evaluate: Callable[[Mapping[str, Any]], float],
                        choices: Optional[Iterable[Choice]] = None,
                        progress: Optional[Callable[[str, Choice, float], None]] = None) -> dict[str, Sensitivity]:
    """Measures each tensor's sensitivity to each choice: one call of ``evaluate`` per (tensor, choice).

    Args:
        tensors: name -> bf16 / fp16 / fp32 array (host or GPU) of the model's weights to plan.
        evaluate: called with {name: the tensor quantized and rebuilt} (one entry; the caller runs its model on
            its calibration inputs with that tensor replaced and the others original) and returns the EAR of the
            result against the original model (``ear(original_logits, logits)``).
        choices: the candidates (default ``default_choices()``).
        progress: called after each measurement with (name, choice, EAR).

    Returns:
        name -> Sensitivity, the input of ``plan``.
    """
    choices = list(default_choices() if choices is None else choices)
    result: dict[str, Sensitivity] = {}
    for name, x in tensors.items():
        n = _arrays.numel(x)
        s = Sensitivity(params=n)
        for c in choices:
            e = float(evaluate({name: _round_trip(x, c)}))
            if not 0.0 <= e <= 1.0:
                raise ValueError(f"zipcomm.quant.measure_sensitivity: evaluate returned {e!r} for {name} under "
                                 f"{c}; it must return an EAR in [0, 1]")
            s.candidates.append((c, message_bits_per_param(n, c), 1.0 - e))
            if progress is not None:
                progress(name, c, e)
        result[name] = s
    return result


@dataclass
class QuantPlan:
    """One choice per tensor (None: sent unquantized), with what the planner predicts of it.

    bits_per_param: the plan's average over all its tensors' parameters (every message byte counted; an
    unquantized tensor at the cost its candidate gave). predicted_ear: 1 - sqrt(sum of squared sensitivities),
    the root-sum-square model docs/QUANT.md section 7 checks on a real model. met: the budget or the target
    was reached.
    """

    choices: dict[str, Optional[Choice]]
    bits_per_param: float
    predicted_ear: float
    met: bool
    goal: str
    limit: float
    detail: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # name -> (params, bits, 1 - EAR)

    def report(self) -> str:
        """The plan as a text table: one line per tensor, then the totals."""
        width = max([len(n) for n in self.choices] + [6])
        lines = [f"{'tensor':<{width}}  {'params':>12}  {'choice':>10}  {'bits/param':>10}  {'1 - EAR':>9}"]
        for name, c in self.choices.items():
            params, bits, s = self.detail.get(name, (0, math.nan, math.nan))
            lines.append(f"{name:<{width}}  {params:>12,}  {str(c) if c else 'original':>10}  {bits:>10.3f}  {s:>9.2e}")
        goal = (f"budget {self.limit:g} bits/param" if self.goal == "budget" else f"target EAR {self.limit:g}")
        lines.append(f"{goal}: {'met' if self.met else 'NOT met'}; {self.bits_per_param:.3f} bits/param, "
                     f"predicted EAR {self.predicted_ear:.4f}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({
            "goal": self.goal, "limit": self.limit, "met": self.met, "bits_per_param": self.bits_per_param,
            "predicted_ear": self.predicted_ear,
            "tensors": {n: (None if c is None else {"mode": c.mode, "bits": c.bits, "group": c.group})
                        for n, c in self.choices.items()},
        }, indent=1)

    def to_text(self) -> str:
        """The plan as text, one quantized tensor per line: ``NAME asymmetric|symmetric BITS GROUP`` (tensors left
        original are not listed), the format ``zipcomm_rl_weight_sync --plan FILE`` reads."""
        lines = [f"# zipcomm quantization plan: {self.bits_per_param:.4f} bits/param, predicted EAR "
                 f"{self.predicted_ear:.6f}"]
        lines += [f"{n} {c.mode} {c.bits} {c.group}" for n, c in self.choices.items() if c is not None]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "QuantPlan":
        d = json.loads(text)
        choices = {n: (None if c is None else Choice(c["mode"], int(c["bits"]), int(c["group"])))
                   for n, c in d["tensors"].items()}
        return cls(choices, float(d["bits_per_param"]), float(d["predicted_ear"]), bool(d["met"]), str(d["goal"]),
                   float(d["limit"]))

    def quantize(self, tensors: Mapping[str, Any]) -> dict[str, Any]:
        """name -> the tensor's message under the plan (tensors the plan leaves original are not included)."""
        out = {}
        for name, x in tensors.items():
            c = self.choices.get(name)
            if c is not None:
                out[name] = quantize(x, c.bits, group=c.group, mode=c.mode)
        return out


def plan(sensitivities: Mapping[str, Sensitivity], *, budget_bits: Optional[float] = None,
         target_ear: Optional[float] = None, keep_original_bits: Optional[float] = None) -> QuantPlan:
    """Chooses one candidate per tensor (the C++ planner, include/zipcomm/quant/bit_planner.hpp).

    Exactly one of:
        budget_bits: the lowest predicted EAR drop whose average bits per parameter stay within the budget.
        target_ear: the fewest bits per parameter whose predicted EAR reaches the target.
    keep_original_bits: when given, every tensor may also stay unquantized at this cost per parameter (e.g. 16 for
        bf16 weights, or the lossless codec's ~10.7) with sensitivity 0.

    The allocation walks each tensor's candidates along the lower convex hull of (bits, sensitivity^2) and buys,
    at each step, the upgrade that removes most of the sum of squared sensitivities per added bit. ``met`` is
    False when the budget cannot hold even the cheapest plan, or the target cannot be reached (the plan
    returned is then the cheapest, or the best).
    """
    if (budget_bits is None) == (target_ear is None):
        raise ValueError("zipcomm.quant.plan: give exactly one of budget_bits and target_ear")
    names = list(sensitivities)
    params, candidates = [], []
    for n in names:
        s = sensitivities[n]
        cands = [(c.mode, c.bits, c.group, float(b), float(v)) for c, b, v in s.candidates]
        if keep_original_bits is not None:
            cands.append(("asymmetric", 0, 64, float(keep_original_bits), 0.0))
        params.append(int(s.params))
        candidates.append(cands)
    goal, limit = (("budget", float(budget_bits)) if budget_bits is not None
                   else ("target_ear", float(target_ear)))  # type: ignore[arg-type]  # one of them is given
    pick, bits, predicted, met = _ext.plan_bits(params, candidates, goal, limit)
    choices: dict[str, Optional[Choice]] = {}
    detail: dict[str, tuple[int, float, float]] = {}
    for n, k, cands, p in zip(names, pick, candidates, params):
        mode, b, g, bpp, sens = cands[k]
        choices[n] = None if b == 0 else Choice(mode, b, g)
        detail[n] = (p, bpp, sens)
    return QuantPlan(choices, float(bits), float(predicted), bool(met), goal, limit, detail)
