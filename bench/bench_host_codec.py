#!/usr/bin/env python3
"""The host codec's throughput (zipcomm.compress / decompress on NumPy arrays, the path of CPU tensors, the DDP
hook's CPU buckets and zipcomm-file without a GPU) on each thread count: a tests/data file tiled to --mib MiB,
best of --reps, every round trip checked bit-exact, against one memcpy of the same bytes. Prints a table and
writes JSON.

Usage: python3 bench/bench_host_codec.py [--data tests/data] [--mib 64] [--threads 1,2,0] [--reps 5] [--json OUT]
(--threads 0: one per hardware thread.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import zipcomm

REPO = Path(__file__).resolve().parents[1]
FILES = [("llama_grads.bf16", "bf16", np.uint16), ("llama_grads_scaled.f16", "fp16", np.uint16),
         ("llama_grads.f32", "fp32", np.uint32), ("llama_grads.e4m3", "fp8_e4m3", np.uint8)]


def best_seconds(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / "tests/data")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--threads", default="1,2,0", help="comma-separated thread counts (0: all)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    rows = []
    print(f"host codec, {args.mib} MiB, best of {args.reps}, {os.cpu_count()} hardware threads")
    print(f"{'data':<24} {'threads':>7} {'ratio':>7} {'compress GB/s':>14} {'decompress GB/s':>16} {'memcpy GB/s':>12}")
    for name, dtype, bits in FILES:
        path = args.data / name
        if not path.exists():
            print(f"{name}: not in {args.data}, skipped")
            continue
        x = np.resize(np.fromfile(path, bits), (args.mib << 20) // np.dtype(bits).itemsize)
        copy = np.empty_like(x)
        memcpy = x.nbytes / best_seconds(lambda: np.copyto(copy, x), args.reps) / 1e9
        for t in counts:
            threads = t if t > 0 else None
            buf = zipcomm.compress(x, dtype=dtype, threads=threads)
            back = np.empty_like(x)
            enc = best_seconds(lambda: zipcomm.compress(x, dtype=dtype, threads=threads), args.reps)
            dec = best_seconds(lambda: zipcomm.decompress(buf, out=back, threads=threads), args.reps)
            if not np.array_equal(back, x):
                raise SystemExit(f"{name}: the round trip on {t} threads differs from the input")
            row = {"data": name, "dtype": dtype, "threads": t, "bytes": x.nbytes, "ratio": len(buf) / x.nbytes,
                   "compress_gbps": x.nbytes / enc / 1e9, "decompress_gbps": x.nbytes / dec / 1e9,
                   "memcpy_gbps": memcpy}
            rows.append(row)
            print(f"{name:<24} {t:>7} {row['ratio']:>7.4f} {row['compress_gbps']:>14.3f} "
                  f"{row['decompress_gbps']:>16.3f} {memcpy:>12.2f}")
    if args.json:
        args.json.write_text(json.dumps({"hardware_threads": os.cpu_count(), "mib": args.mib, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
