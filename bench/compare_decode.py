#!/usr/bin/env python3
"""Compares zipcomm_bench runs of the decoder word-access variants (ZIPCOMM_DECODE_STAGING): device decode GB/s per
data set against the first run, the geometric mean of the ratios, and the same for rows whose code is the same in
every binary (device encode, block decode: their spread is the run-to-run noise).

Usage: python3 bench/compare_decode.py LABEL=bench.json LABEL=bench.json ...   (the first is the baseline)
"""
import json
import math
import sys


def load(path):
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {(r["library"], r["data"], r["dtype"], r["operation"], r["sms"]): r for r in rows if r["library"] == "zipcomm"}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    runs = []
    for arg in sys.argv[1:]:
        label, _, path = arg.partition("=")
        try:
            runs.append((label, load(path)))
        except (OSError, ValueError, KeyError) as e:
            print(f"{label}: no rows ({e})")
    if len(runs) < 2:
        print(__doc__)
        return 2
    base_label, base = runs[0]
    others = runs[1:]

    def keys(prefix):
        return [k for k in base if k[3].startswith(prefix)]

    decode = keys("device decode")
    print("device decode GB/s (uncompressed bytes), ratio to " + base_label)
    print(f"{'data':<32} {'dtype':<9}" + "".join(f" {label:>16}" for label, _ in runs))
    for k in decode:
        cells = [f" {base[k]['gbps']:>16.1f}"]
        for _, rows in others:
            r = rows.get(k)
            cells.append(f" {r['gbps']:>8.1f} ({r['gbps'] / base[k]['gbps']:.3f}x)" if r else f" {'-':>16}")
        where = f", {k[4]} SMs" if k[4] else ""
        print(f"{k[1] + where:<32} {k[2]:<9}" + "".join(cells))

    def summary(prefix, name):
        ks = keys(prefix)
        parts = []
        for label, rows in others:
            ratios = [rows[k]["gbps"] / base[k]["gbps"] for k in ks if k in rows and base[k]["gbps"] > 0]
            bf16 = [rows[k]["gbps"] / base[k]["gbps"] for k in ks if k in rows and k[2] == "bf16" and base[k]["gbps"] > 0]
            parts.append(f"{label} {geomean(ratios):.3f}x (bf16 {geomean(bf16):.3f}x, min {min(ratios, default=float('nan')):.3f}x)")
        print(f"{name}, geomean over {len(ks)} rows against {base_label}: " + "; ".join(parts))

    print()
    summary("device decode", "device decode")
    summary("device encode", "control: device encode")
    summary("block decode", "control: block decode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
