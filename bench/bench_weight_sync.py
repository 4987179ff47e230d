#!/usr/bin/env python3
"""zipcomm.WeightSync throughput: a transformer-shaped bf16 state dict (real weights of tests/data tiled into each
tensor) synced into a second copy on the same GPU over the pinned-host link, coded against raw (the link's
pipelined uncompressed copy) and, with --quantize, through a uniform quantization choice; median GB/s of the
tensors' bytes over --reps syncs, every coded sync checked bit-exact. Prints a table and writes JSON.

Usage: python3 bench/bench_weight_sync.py [--layers 4] [--reps 5] [--quantize asym6/g128] [--json OUT.json]
Needs a GPU, torch with CUDA and zipcomm built with the GPU codec (else it says why and exits 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def example_module():
    """examples/python/weight_sync.py, for its model shapes (one definition of them)."""
    spec = importlib.util.spec_from_file_location("weight_sync_example", REPO / "examples/python/weight_sync.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quantize", default=None, help="also sync through this choice for every matrix, e.g. asym6/g128")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"bench_weight_sync: needs torch ({e}); skipped")
        return 0
    import zipcomm
    import zipcomm.quant as zq

    if not torch.cuda.is_available() or not zipcomm.cuda_available():
        print(f"bench_weight_sync: needs a GPU and zipcomm's GPU codec ({zipcomm.build_info()}); skipped")
        return 0
    shapes = example_module().transformer_shapes(args.layers, hidden=2048, intermediate=5632, kv_hidden=512,
                                                 vocab=32000)
    sample = torch.from_numpy(np.fromfile(REPO / "tests/data/llama_weights.bf16", dtype=np.int16)).view(torch.bfloat16)
    trainer = {}
    for i, (name, shape) in enumerate(shapes):
        n = int(np.prod(shape))
        reps = -(-n // sample.numel())
        flat = sample.roll(i * 7919).repeat(reps)[:n]  # real weights, a different rotation per tensor
        trainer[name] = flat.reshape(shape).cuda()
    inference = {k: torch.empty_like(v) for k, v in trainer.items()}
    total = sum(t.nbytes for t in trainer.values())

    def same_bits() -> bool:
        return all(torch.equal(trainer[k].view(torch.int16), inference[k].view(torch.int16)) for k in trainer)

    rows = []

    def measure(label: str, **kwargs) -> None:
        with zipcomm.WeightSync(trainer, inference, link="host", **kwargs) as sync:
            sync.sync()  # warm-up: first launches, the links' calibration
            results = []
            for _ in range(args.reps):
                for t in inference.values():
                    t.zero_()
                results.append(sync.sync())
                if "quantize" not in kwargs and not same_bits():
                    raise SystemExit(f"bench_weight_sync: {label} sync is not bit-exact")
        gbps = statistics.median(r.gb_per_s for r in results)
        wire = results[-1].quantized_bytes
        rows.append({"sync": label, "bytes": total, "gb_per_s": gbps, "quantized_bytes": wire,
                     "timing": "GPU events" if "quantize" not in kwargs else "host wall time"})

    measure("raw", raw=True)
    measure("coded")
    if args.quantize:
        choice = zq.Choice(*_parse_choice(args.quantize))
        plan = zq.QuantPlan({n: (choice if t.dim() == 2 else None) for n, t in trainer.items()}, 0.0, 0.0, True,
                            "budget", 0.0)
        measure(f"quantized {choice}", quantize=plan)

    # "-dirty" when the tree measured is not the commit's
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    gpu = torch.cuda.get_device_name()
    print(f"WeightSync over the pinned-host link: {len(trainer)} bf16 tensors, {total / 2**30:.2f} GiB, {gpu}, "
          f"commit {commit}, median of {args.reps}")
    print(f"{'sync':<24} {'GB/s':>8} {'x raw':>7} {'wire GiB':>9}   (raw, coded: GPU time; quantized: wall time)")
    raw = rows[0]["gb_per_s"]
    for r in rows:
        wire = r["quantized_bytes"] / 2**30 if r["quantized_bytes"] else float("nan")
        print(f"{r['sync']:<24} {r['gb_per_s']:>8.2f} {r['gb_per_s'] / raw:>7.3f} {wire:>9.3f}")
    if args.json:
        args.json.write_text(json.dumps({"gpu": gpu, "commit": commit, "layers": args.layers, "reps": args.reps,
                                         "rows": rows}, indent=1))
    return 0


def _parse_choice(text: str) -> tuple[str, int, int]:
    """"asym6/g128" -> ("asymmetric", 6, 128)."""
    m = re.fullmatch(r"(asym|sym)(\d)/g(\d+)", text)
    if not m:
        raise SystemExit(f"bench_weight_sync: --quantize takes asymB/gG or symB/gG, got {text!r}")
    return ("asymmetric" if m[1] == "asym" else "symmetric"), int(m[2]), int(m[3])


if __name__ == "__main__":
    sys.exit(main())
