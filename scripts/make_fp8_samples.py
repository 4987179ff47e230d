#!/usr/bin/env python3
"""Makes the fp8 samples of tests/data (llama_{grads,acts,weights}.{e4m3,e5m2}) from the bf16 ones.

FP8 training and inference keep a tensor in fp8 with one scale per tensor, chosen from its largest magnitude
(amax) so that the tensor fills the fp8 range: scale = fp8_max / amax, fp8 = convert(x * scale), and the
scale travels beside the tensor (Transformer Engine's delayed and current scaling, torchao's tensorwise
float8). This script does exactly that to each bf16 file, per file (one tensor) and per format:

  fp8_e4m3  OCP E4M3FN (torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinities,
            NaN = S.1111.111, largest finite 448
  fp8_e5m2  OCP E5M2 (torch.float8_e5m2): 1 sign, 5 exponent (bias 15), 2 mantissa bits, largest finite 57344

  x      = the bf16 values, exactly widened to fp32
  amax   = max |x|                           (the files hold no infinity or NaN)
  scale  = float32(fp8_max) / float32(amax)  (fp32 division, rounded to nearest even)
  y      = clip(x * scale, -fp8_max, fp8_max) (fp32 product, rounded to nearest even; the clip saturates)
  fp8    = y rounded to the nearest fp8 value, ties to even (ml_dtypes' conversion)

The conversion is checked on every element against a reference written here (nearest of the 254 finite
values, ties to the even code). The outputs are raw fp8 bytes, no header; the scale and amax are printed.

Usage: python3 scripts/make_fp8_samples.py [SRC_DIR] [--out DIR]
  SRC_DIR   folder with llama_grads.bf16, llama_acts.bf16, llama_weights.bf16 (default: tests/data, the cuts;
            the full original files give whole-file figures)
  --out DIR where to write the fp8 files (default: tests/data when SRC_DIR is tests/data, else nothing is
            written and only the figures are printed)
Prints, per file and format: amax, scale, the share of values that became zero or subnormal, and the
compression ratio of the zipcomm host codec when the zipcomm package is importable.
Requires numpy and ml_dtypes.
"""

import argparse
import os
import sys

import numpy as np

try:
    import ml_dtypes
except ImportError:
    sys.exit("make_fp8_samples.py needs ml_dtypes (pip install ml_dtypes)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data")
NAMES = ["llama_grads", "llama_acts", "llama_weights"]
# (zipcomm dtype, file extension, numpy type, largest finite value)
FORMATS = [
    ("fp8_e4m3", "e4m3", ml_dtypes.float8_e4m3fn, 448.0),
    ("fp8_e5m2", "e5m2", ml_dtypes.float8_e5m2, 57344.0),
]


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def reference_round(y, np_type):
    """fp32 values (finite, |y| <= the largest finite fp8 value) -> fp8 codes, nearest, ties to the even code."""
    codes = np.arange(128, dtype=np.uint8)  # the non-negative codes; the sign is the top bit
    values = codes.view(np_type).astype(np.float64)
    finite = ~np.isnan(values) & ~np.isinf(values)
    codes, values = codes[finite], values[finite]  # increasing with the code
    a = np.abs(y.astype(np.float64))
    hi = np.clip(np.searchsorted(values, a), 1, len(values) - 1)
    lo = hi - 1
    d_lo, d_hi = a - values[lo], values[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi] % 2 == 0))
    out = np.where(pick_hi, codes[hi], codes[lo]).astype(np.uint8)
    exact = a == values[hi]
    out[exact] = codes[hi][exact]
    return out | np.where(np.signbit(y), np.uint8(0x80), np.uint8(0))


def to_fp8(x, np_type, fp8_max):
    amax = np.float32(np.max(np.abs(x))) if x.size else np.float32(0)
    scale = np.float32(fp8_max) / amax if amax > 0 else np.float32(1)
    y = np.clip(x * scale, np.float32(-fp8_max), np.float32(fp8_max)).astype(np.float32)
    q = y.astype(np_type).view(np.uint8)
    ref = reference_round(y, np_type)
    mismatch = np.flatnonzero(q != ref)
    if mismatch.size:
        i = mismatch[0]
        sys.exit(f"conversion differs from the reference at {i}: {y[i]!r} -> 0x{q[i]:02x}, reference 0x{ref[i]:02x}")
    return q, amax, scale


def zipcomm_ratio(q, dtype):
    try:
        import zipcomm
    except ImportError:
        return None
    return len(zipcomm.compress(q, dtype=dtype)) / q.size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", nargs="?", default=DATA, help="folder of the bf16 files (default tests/data)")
    ap.add_argument("--out", default=None, help="folder for the fp8 files (default: tests/data for tests/data)")
    args = ap.parse_args()
    out = args.out or (DATA if os.path.realpath(args.src) == os.path.realpath(DATA) else None)
    print(f"source {args.src}; {'writing to ' + out if out else 'figures only (no --out)'}")
    print(f"{'file':<22} {'elements':>9} {'amax':>12} {'scale':>14} {'zero':>7} {'subnormal':>9} {'ratio':>8}")
    for name in NAMES:
        path = os.path.join(args.src, name + ".bf16")
        if not os.path.exists(path):
            print(f"{name}.bf16: missing, skipped")
            continue
        x = bf16_to_f32(np.fromfile(path, dtype=np.uint16))
        if not np.all(np.isfinite(x)):
            sys.exit(f"{path}: holds infinities or NaNs; amax scaling needs finite values")
        for dtype, ext, np_type, fp8_max in FORMATS:
            q, amax, scale = to_fp8(x, np_type, fp8_max)
            exponent_bits = 4 if dtype == "fp8_e4m3" else 5
            mag = q & np.uint8(0x7F)
            zero = np.mean(mag == 0)
            subnormal = np.mean((mag != 0) & (mag >> np.uint8(7 - exponent_bits) == 0))
            ratio = zipcomm_ratio(q, dtype)
            shown = f"{ratio:.5f}" if ratio is not None else "-"
            print(f"{name + '.' + ext:<22} {q.size:>9} {float(amax):>12.6g} {float(scale):>14.8g} {zero:>7.4f} "
                  f"{subnormal:>9.4f} {shown:>8}")
            if out:
                q.tofile(os.path.join(out, f"{name}.{ext}"))


if __name__ == "__main__":
    main()
