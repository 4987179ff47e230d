#!/usr/bin/env python3
"""Design-time derivation of the GaussianCode symbol orders (zipcomm wire format v1).

This script documents and reproduces how the four ORDER tables of
include/zipcomm/thread/exponent_code.hpp were obtained. It is NOT used at run time: the tables are frozen in
wire format v1 (docs/FORMAT.md) and never change with the data.

Method
  1. Training tensors: every raw file in the data folder that is listed in TRAINING (bf16 gradients,
     activations, weights and fp32 gradients), plus a synthetic N(0, 0.02) tensor rounded to bf16 with a fixed
     seed. The fp16 file is evaluated but not used for fitting.
  2. Per 256-element tile: anchor a = exponent of the largest magnitude (sign cleared), fraction
     f = top two mantissa bits of that largest magnitude. Tiles with a == 0 carry no codes and are skipped.
  3. Symbol of an element with exponent e: ZERO (16) if e == 0, else d = a - e if d < 16, else ESC (17).
  4. Per data set and per fraction bucket f: the distribution of symbols. Distributions are averaged over the
     training sets with equal weight (a data set with no tile in a bucket does not vote for that bucket).
  5. Per bucket: symbols 0..16 sorted by averaged probability, descending (ties: smaller symbol first).
  6. Robustness rule of v1: in every bucket (0..3) the ZERO symbol is moved to rank 8 (exact zeros are frequent
     only in some tensors; rank 8 caps the damage where they are rare and still costs 7 bits where they are not).
  7. Codeword lengths per rank are fixed: ranks 0,1 -> 2 bits; 2,3 -> 3 bits; rank r >= 4 -> r - 1 bits;
     escape -> 15 bits + the raw exponent (8 bits for bf16/fp32, 5 for fp16).

Output: the table in the C++ initializer form, whether it equals the table in the header (and, if not, which
entries differ and by how much probability), the expected code bits per element per data set for the frozen
and derived tables, and the order-0 exponent entropy for comparison.

Usage: python3 scripts/derive_gaussian_code.py [--data DIR] [--header PATH] [--seed S] [--gauss-n N]
Requires numpy only.
"""

import argparse
import os
import re
import sys

import numpy as np

TILE = 256
NUM_D = 16
ZERO = 16
ESC = 17
NUM_SYMS = 18  # 0..15 = d, 16 = ZERO, 17 = ESC
NUM_RANKS = 17  # ESC has no rank: its codeword is fifteen ones
ESC_LEN = 15
ZERO_RANK_ROBUST = 8

# dtype -> (numpy container, exponent bits, mantissa bits)
DTYPES = {
    "bf16": (np.uint16, 8, 7),
    "fp16": (np.uint16, 5, 10),
    "fp32": (np.uint32, 8, 23),
}
EXT_DTYPE = {".bf16": "bf16", ".f16": "fp16", ".fp16": "fp16", ".f32": "fp32", ".fp32": "fp32"}

# Files fitted (by name); every other file found is only evaluated.
TRAINING = ("llama_grads.bf16", "llama_acts.bf16", "llama_weights.bf16", "llama_grads.f32")
GAUSS_NAME = "gaussian N(0,0.02) bf16"


def rank_len(r):
    """Codeword length in bits of rank r (0..16)."""
    if r < 2:
        return 2
    if r < 4:
        return 3
    return r - 1


RANK_LEN = np.array([rank_len(r) for r in range(NUM_RANKS)], dtype=np.float64)


def sym_name(s):
    return "ZERO" if s == ZERO else "ESC" if s == ESC else str(s)


def f32_to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bf16 bit patterns (no NaNs expected)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def gaussian_bf16(n, seed):
    rng = np.random.default_rng(seed)
    return f32_to_bf16_bits(rng.normal(0.0, 0.02, n).astype(np.float32))


class Stats:
    """Per-fraction-bucket symbol counts and exponent statistics of one tensor."""

    def __init__(self, name, dtype, bits):
        _, eb, mb = DTYPES[dtype]
        self.name, self.dtype, self.exp_bits, self.mant_bits = name, dtype, eb, mb
        self.total_bits = 1 + eb + mb
        n = bits.size
        self.n = n
        mag_mask = (1 << (eb + mb)) - 1
        mag = (bits.astype(np.uint32) & np.uint32(mag_mask)).astype(np.int64)
        tiles = -(-n // TILE)
        pad = tiles * TILE - n
        valid = np.ones(tiles * TILE, dtype=bool)
        if pad:
            mag = np.concatenate([mag, np.zeros(pad, dtype=np.int64)])
            valid[n:] = False
        mag = mag.reshape(tiles, TILE)
        valid = valid.reshape(tiles, TILE)
        self.tiles = tiles
        mx = mag.max(axis=1)  # padding is zero, never above a real magnitude
        anchor = mx >> mb
        frac = (mx >> (mb - 2)) & 3
        exp = mag >> mb
        d = anchor[:, None] - exp
        sym = np.where(exp == 0, ZERO, np.where(d < NUM_D, d, ESC))
        coded = valid & (anchor[:, None] != 0)
        key = (np.broadcast_to(frac[:, None], sym.shape)[coded] * NUM_SYMS + sym[coded]).astype(np.int64)
        self.counts = np.bincount(key, minlength=4 * NUM_SYMS).reshape(4, NUM_SYMS).astype(np.float64)
        self.coded_elems = int(coded.sum())
        self.coded_tiles = int((anchor != 0).sum())
        # Order-0 entropy of the exponent over the whole tensor (bits per element).
        ecount = np.bincount(exp[valid], minlength=1 << eb).astype(np.float64)
        p = ecount[ecount > 0] / n
        self.h0 = float(-(p * np.log2(p)).sum())
        # Entropy of the exponent given the tile's (anchor, fraction): what any code on this model could reach.
        rel = np.where(exp == 0, -1, d)[coded]  # full d range, escapes split by value
        kk = np.broadcast_to(frac[:, None], sym.shape)[coded].astype(np.int64) * 512 + (rel + 1)
        joint = np.bincount(kk, minlength=4 * 512).reshape(4, 512).astype(np.float64)
        h = 0.0
        for f in range(4):
            tot = joint[f].sum()
            if tot:
                q = joint[f][joint[f] > 0] / tot
                h += tot * float(-(q * np.log2(q)).sum())
        self.h_cond = h / n

    def dist(self):
        """Per-bucket probability of each symbol (rows of zeros for empty buckets), and bucket sizes.
        Only tiles with anchor != 0 count: anchor-0 tiles carry no codes in v1."""
        counts = self.counts
        tot = counts.sum(axis=1)
        p = np.zeros_like(counts)
        for f in range(4):
            if tot[f]:
                p[f] = counts[f] / tot[f]
        return p, tot

    def code_bits(self, order):
        """Expected GaussianCode bits per element (all elements, anchor-0 tiles cost nothing)."""
        bits = 0.0
        for f in range(4):
            rank = {s: r for r, s in enumerate(order[f])}
            for s in range(NUM_SYMS - 1):
                bits += self.counts[f, s] * RANK_LEN[rank[s]]
            bits += self.counts[f, ESC] * (ESC_LEN + self.exp_bits)
        return bits / self.n

    def window3_bits(self):
        esc = 0.0
        for f in range(4):
            c = self.counts[f]
            # window3 escapes d >= 6 (symbols 6..15 and ESC)
            esc += c[6:NUM_D].sum() + c[ESC]
        return (3.0 * self.coded_elems + esc * self.exp_bits) / self.n

    def ratio_estimate(self, code_bits_per_elem):
        """(raw sign/mantissa + code + 10 bits of anchor/fraction per tile) / original; no table or padding."""
        bits = self.n * (self.total_bits - self.exp_bits) + code_bits_per_elem * self.n + 10 * self.tiles
        return bits / (self.n * self.total_bits)


def derive(train):
    """Averaged distributions and the derived orders (before and after the robustness rule)."""
    avg = np.zeros((4, NUM_SYMS))
    votes = np.zeros(4)
    for st in train:
        p, tot = st.dist()
        for f in range(4):
            if tot[f]:
                avg[f] += p[f]
                votes[f] += 1
    for f in range(4):
        if votes[f]:
            avg[f] /= votes[f]
    sorted_orders, orders = [], []
    for f in range(4):
        syms = sorted(range(NUM_RANKS), key=lambda s: (-avg[f, s], s))
        sorted_orders.append(list(syms))
        syms.remove(ZERO)  # v1 robustness rule: ZERO at rank 8 in every bucket
        syms.insert(ZERO_RANK_ROBUST, ZERO)
        orders.append(syms)
    return avg, sorted_orders, orders


def parse_header_order(path):
    text = open(path).read()
    m = re.search(r"ORDER\[4\]\[NUM_RANKS\]\s*=\s*\{(.*?)\};", text, re.S)
    if not m:
        raise SystemExit(f"could not find ORDER in {path}")
    rows = re.findall(r"\{([^{}]*)\}", m.group(1))
    order = []
    for row in rows:
        vals = [v.strip() for v in row.split(",") if v.strip()]
        order.append([ZERO if v == "ZERO" else int(v) for v in vals])
    if len(order) != 4 or any(len(r) != NUM_RANKS or sorted(r) != list(range(NUM_RANKS)) for r in order):
        raise SystemExit(f"ORDER in {path} is not 4 permutations of 0..16")
    return order


def cpp_table(order):
    lines = ["  static constexpr uint8_t ORDER[4][NUM_RANKS] = {"]
    for row in order:
        lines.append("      {" + ", ".join(sym_name(s) for s in row) + "},")
    lines.append("  };")
    return "\n".join(lines)


def load_folder(folder):
    out = []
    if not os.path.isdir(folder):
        print(f"warning: data folder {folder} not found; using the synthetic tensor only", file=sys.stderr)
        return out
    for name in sorted(os.listdir(folder)):
        ext = os.path.splitext(name)[1]
        if ext not in EXT_DTYPE:
            continue
        dtype = EXT_DTYPE[ext]
        arr = np.fromfile(os.path.join(folder, name), dtype=np.dtype(DTYPES[dtype][0]).newbyteorder("<"))
        out.append((name, dtype, arr))
    return out


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(repo, "tests", "data"),
                    help="folder of raw tensors (the frozen table was fitted on the full original files of "
                         "tests/data's cuts, tests/data/README.md; the cuts give a close but not equal fit)")
    ap.add_argument("--header", default=os.path.join(repo, "include", "zipcomm", "thread", "exponent_code.hpp"))
    ap.add_argument("--seed", type=int, default=20240601, help="seed of the synthetic N(0,0.02) tensor")
    ap.add_argument("--gauss-n", type=int, default=1 << 21, help="elements of the synthetic tensor")
    args = ap.parse_args()

    sets = [Stats(GAUSS_NAME, "bf16", gaussian_bf16(args.gauss_n, args.seed))]
    for name, dtype, arr in load_folder(args.data):
        sets.append(Stats(name, dtype, arr))
    train = [s for s in sets if s.name == GAUSS_NAME or s.name in TRAINING]
    print(f"training sets ({len(train)}): " + ", ".join(s.name for s in train))
    print(f"evaluated only: " + (", ".join(s.name for s in sets if s not in train) or "-"))

    avg, sorted_orders, orders = derive(train)
    print("fit: anchor-0 tiles skipped (they carry no codes in v1)")
    print("\naveraged symbol probabilities per fraction bucket (top 10, in derived order):")
    for f in range(4):
        print(f"  f={f}: " + "  ".join(f"{sym_name(s)}:{avg[f, s]:.4f}" for s in sorted_orders[f][:10])
              + f"  ESC:{avg[f, ESC]:.2e}")

    print("\nderived table (probability sort, then ZERO -> rank 8 in every bucket):")
    print(cpp_table(orders))

    frozen = parse_header_order(args.header)
    same = frozen == orders
    print(f"\nequal to the frozen table in {os.path.relpath(args.header, repo)}: {'YES' if same else 'NO'}")
    if not same:
        for f in range(4):
            for r in range(NUM_RANKS):
                if frozen[f][r] != orders[f][r]:
                    a, b = frozen[f][r], orders[f][r]
                    print(f"  f={f} rank {r:2d}: frozen {sym_name(a):>4} (p={avg[f, a]:.3e})  derived "
                          f"{sym_name(b):>4} (p={avg[f, b]:.3e})  dp={avg[f, b] - avg[f, a]:+.3e}")
    # Near-ties that could flip the sort with slightly different data.
    print("\nclosest adjacent pairs in the probability sort (rank r vs r+1, ranks 0..9):")
    for f in range(4):
        so = sorted_orders[f]
        gaps = sorted((avg[f, so[r]] - avg[f, so[r + 1]], r) for r in range(9))
        g, r = gaps[0]
        print(f"  f={f}: ranks {r}/{r + 1} ({sym_name(so[r])} vs {sym_name(so[r + 1])}) differ by {g:.2e}")

    print("\nexpected bits per element (code only; anchor-0 tiles cost 0) and estimated ratio "
          "(+10 bits/tile anchor+fraction, no table/padding):")
    hdr = (f"  {'data set':28s} {'elems':>9s} {'H0(exp)':>8s} {'H(e|a,f)':>8s} {'frozen':>7s} {'derived':>7s} "
           f"{'window3':>7s} {'ratio frozen':>12s} {'ratio w3':>8s}")
    print(hdr)
    for st in sets:
        bf, bd, bw = st.code_bits(frozen), st.code_bits(orders), st.window3_bits()
        print(f"  {st.name:28s} {st.n:9d} {st.h0:8.4f} {st.h_cond:8.4f} {bf:7.4f} {bd:7.4f} {bw:7.4f} "
              f"{st.ratio_estimate(bf):12.4f} {st.ratio_estimate(bw):8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
