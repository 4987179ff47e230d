#!/usr/bin/env python3
"""What a fixed-width exponent code would cost in ratio against the pair code, for every dtype (a format study).

The fixed code is bench/probe_fixed_width.cu's: each exponent as its distance below its 256-element tile's largest
in 3 bits (96 bytes a tile), distances of 7 and more as one exception byte each, one anchor byte per tile, a chunk
padded to 16 bytes and stored raw where that is not smaller. Everything else in the stream (header, chunk table,
plane 0, low bits, checks) is the pair code's, so the study compresses each file with the library (the Python
package) and swaps the exponent section's size for the fixed code's.

Usage: python3 scripts/study_fixed_code.py --data DIR [--shared DIR]
DIR is tests/data (the fp8 samples and the two tiny_lm fp32 gradients); --shared a folder holding the full bf16,
fp16 and fp32 llama tensors (default: DIR, whose cuts then stand in for them). Requires numpy and the package
(bash scripts/python-test.sh builds it).
"""
import argparse, os

import numpy as np
import zipcomm

CHUNK = 16384
# dtype: (numpy type, exponent shift, exponent mask, exponent bits)
SPEC = {"bf16": (np.uint16, 7, 0xFF, 8), "fp16": (np.uint16, 10, 0x1F, 5), "fp32": (np.uint32, 23, 0xFF, 8),
        "fp8_e4m3": (np.uint8, 3, 0xF, 4), "fp8_e5m2": (np.uint8, 2, 0x1F, 5)}


def align16(x):
    return -(-x // 16) * 16


def study(path, dtype):
    t, shift, mask, eb = SPEC[dtype]
    x = np.fromfile(path, dtype=t)
    info = zipcomm.info(zipcomm.compress(x, dtype=dtype, chunk_elements=CHUNK))
    exps = ((x.astype(np.uint64) >> shift) & mask).astype(np.int64)
    fixed_bytes = exceptions = 0
    for c0 in range(0, len(x), CHUNK):
        e = exps[c0:c0 + CHUNK]
        elems, tiles = len(e), -(-len(e) // 256)
        tile = np.zeros(tiles * 256, dtype=np.int64)
        tile[:elems] = e
        tile = tile.reshape(tiles, 256)
        d = tile.max(axis=1, keepdims=True) - tile
        valid = (np.arange(tiles * 256) < elems).reshape(tiles, 256)
        xc = int(((d >= 7) & valid).sum())
        coded, raw = align16(tiles + 96 * tiles + xc), align16(-(-elems * eb // 8))
        fixed_bytes += coded if coded < raw else raw
        exceptions += xc
    orig = x.nbytes
    pair_exp = info["compressed_bytes"] - info["exp_offset"]
    return (info["ratio"], (info["exp_offset"] + fixed_bytes) / orig, exceptions / len(x), 8 * pair_exp / len(x),
            8 * fixed_bytes / len(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="tests/data")
    ap.add_argument("--shared", default=None)
    a = ap.parse_args()
    shared = a.shared or a.data
    files = [(shared, "llama_grads.bf16", "bf16"), (shared, "llama_acts.bf16", "bf16"),
             (shared, "llama_weights.bf16", "bf16"), (shared, "llama_grads_scaled.f16", "fp16"),
             (shared, "llama_grads.f32", "fp32"), (a.data, "tiny_lm_grads_autocast.f32", "fp32"),
             (a.data, "tiny_lm_grads_fp32.f32", "fp32")]
    for name in ("llama_grads", "llama_acts", "llama_weights"):
        files += [(a.data, name + ".e4m3", "fp8_e4m3"), (a.data, name + ".e5m2", "fp8_e5m2")]
    print(f"chunks of {CHUNK} elements; exponent bits per element include anchors, exceptions and padding")
    print(f"{'file':28s} {'dtype':9s} {'ratio: pair':>11s} {'fixed':>7s} {'exceptions':>10s} "
          f"{'exp bits: pair':>14s} {'fixed':>6s}")
    for folder, name, dtype in files:
        r = study(os.path.join(folder, name), dtype)
        print(f"{name:28s} {dtype:9s} {r[0]:11.4f} {r[1]:7.4f} {r[2]:10.3f} {r[3]:14.3f} {r[4]:6.3f}")


if __name__ == "__main__":
    main()
