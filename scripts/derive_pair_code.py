#!/usr/bin/env python3
"""Design-time derivation of the pair code's codeword lengths (zipcomm wire format, since v3).

Documents and reproduces the PairCode::LENGTHS table of include/zipcomm/thread/pair_code.hpp. It is not used
at run time: the lengths are frozen in the wire format (docs/FORMAT.md) and never change with the data.

Method
  1. Per 256-element tile: anchor a = exponent of the largest magnitude, f = its top two mantissa bits. Tiles
     with a == 0 carry no codes. Symbol of exponent e: ZERO (16) if e == 0, d = a - e if d < 16, else ESC (17).
  2. A lane codes the pairs (items 2p, 2p+1) of its 8 consecutive items; per f, the joint distribution of the
     324 symbol pairs is averaged over the training files with equal weight.
  3. Robustness for sparse tensors: ZERO's single-symbol probability is floored at 2^-7 and the joint
     distribution is blended half and half with the product of the floored marginals.
  4. Pairs below 1e-6 are merged into one escape pair (its codeword is followed by the two symbols as 5-bit
     ids). Lengths come from package-merge with at most 12 bits, so one 4096-entry table per f decodes any pair.

Usage: python3 scripts/derive_pair_code.py --data DIR [--check include/zipcomm/thread/pair_code.hpp]
Requires numpy only. DIR holds llama_grads.bf16, llama_acts.bf16 and llama_weights.bf16 (the full-size
tensors; tests/data holds excerpts of them, enough to reproduce the table's shape but not every length).
"""
import argparse, os, re, sys
import numpy as np

TILE, NSYM, ZERO, ESC, NUM_D = 256, 18, 16, 17, 16
LMAX, THRESH, ZERO_FLOOR = 12, 1e-6, 2.0 ** -7
TRAINING = ["llama_grads.bf16", "llama_acts.bf16", "llama_weights.bf16"]


def tile_symbols(bits):
    """Per 256-element tile of bf16 bits (a trailing partial tile dropped): the elements' symbols (tiles x 256),
    the tile anchors a and fraction buckets f."""
    n = bits.size // TILE * TILE
    b = bits[:n].astype(np.int64)
    e = ((b >> 7) & 0xFF).reshape(-1, TILE)
    mag = (b & 0x7FFF).reshape(-1, TILE).max(axis=1)
    a, f = mag >> 7, (mag >> 5) & 3
    d = a[:, None] - e
    return np.where(e == 0, ZERO, np.where(d < NUM_D, d, ESC)), a, f


def pair_counts(bits):
    s, a, f = tile_symbols(bits)
    pc = np.zeros((4, NSYM, NSYM))
    for ff in range(4):
        ss = s[(f == ff) & (a != 0)].reshape(-1, 2)
        np.add.at(pc[ff], (ss[:, 0], ss[:, 1]), 1)
    return pc


def package_merge(p, lmax):
    """Optimal prefix-code lengths (each <= lmax) for probabilities p (all > 0)."""
    n = len(p)
    order = np.argsort(p, kind="stable")
    leaves = [(p[i], (int(i),)) for i in order]
    cur = list(leaves)
    for _ in range(lmax - 1):
        pk = [(cur[i][0] + cur[i + 1][0], cur[i][1] + cur[i + 1][1]) for i in range(0, len(cur) - 1, 2)]
        cur = sorted(leaves + pk, key=lambda x: x[0])
    lengths = np.zeros(n, dtype=np.int64)
    for _, syms in cur[: 2 * n - 2]:
        for s in syms:
            lengths[s] += 1
    return lengths


def derive(data_dir):
    q = np.zeros((4, NSYM, NSYM))
    for name in TRAINING:
        pc = pair_counts(np.fromfile(os.path.join(data_dir, name), dtype="<u2"))
        q += pc / np.maximum(pc.sum(axis=(1, 2), keepdims=True), 1)
    q /= len(TRAINING)
    table = np.zeros((4, NSYM * NSYM + 1), dtype=np.int64)
    for f in range(4):
        joint = q[f] / q[f].sum()
        marg = joint.sum(axis=1)
        marg[ZERO] = max(marg[ZERO], ZERO_FLOOR)
        marg /= marg.sum()
        prod = np.outer(marg, marg)
        blend = 0.5 * prod + 0.5 * joint
        blend[ZERO, :] = np.maximum(blend[ZERO, :], prod[ZERO, :])
        blend[:, ZERO] = np.maximum(blend[:, ZERO], prod[:, ZERO])
        blend = (blend / blend.sum()).ravel()
        keep = blend >= THRESH
        alphabet = np.concatenate([blend[keep], [blend[~keep].sum() + 1e-9]])
        lengths = package_merge(alphabet, LMAX)
        assert (2.0 ** -lengths).sum() == 1.0, "the code must be complete"
        table[f, np.flatnonzero(keep)] = lengths[:-1]
        table[f, NSYM * NSYM] = lengths[-1]
    return table


def as_cpp(table):
    rows = []
    for f in range(4):
        vals = ",".join(str(int(v)) for v in table[f])
        rows.append("    {" + vals + "},")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--check", help="header whose LENGTHS table must equal the derived table")
    args = ap.parse_args()
    table = derive(args.data)
    print(as_cpp(table))
    if args.check:
        text = open(args.check).read()
        body = re.search(r"LENGTHS\[4\]\[[^\]]+\] = \{(.*?)\n  \};", text, re.S).group(1)
        frozen = np.array([int(v) for v in re.findall(r"\d+", body)]).reshape(4, -1)
        same = np.array_equal(frozen, table)
        print("frozen table matches" if same else f"frozen table differs in {(frozen != table).sum()} entries")
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
