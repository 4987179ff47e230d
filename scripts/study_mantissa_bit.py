#!/usr/bin/env python3
"""What coding each element's top mantissa bit with its exponent symbol would save (a wire-format design study).

Within a binade a near-Gaussian tensor's density falls with the magnitude, so the top mantissa bit of an element
close to its tile's largest magnitude is far from uniform (P(1) ~0.12-0.15 at d = 0, ~0.3 at d = 1, ~0.5 from
d = 3 on). Plane 0 stores it raw. This measures, on whole files:
  1. the entropy bound: 1 - H(top bit | d, f) bits per element (d = the element's exponent symbol, f = its tile's
     fraction bucket);
  2. a static pair code over joint symbols (d, top bit) - 34 symbols, 1156 pairs - against today's 18-symbol
     pair code, both fitted on the files themselves (package-merge, rare pairs escaped with their ids), for
     codewords of at most 12, 13 and 14 bits, with the planes then holding 7 bits per element.
Printed ratios count the exponent codes and the planes only (no anchors, fractions, lane counts or checks:
about 0.09 bits per element more in the format), so compare them with each other.

Usage: python3 scripts/study_mantissa_bit.py --data DIR
DIR holds llama_grads.bf16, llama_acts.bf16, llama_weights.bf16. Requires numpy only.
"""
import argparse, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derive_pair_code as dpc  # noqa: E402

FILES = ["llama_grads.bf16", "llama_acts.bf16", "llama_weights.bf16"]


def symbols(bits, joint):
    """Per tile: symbols (joint: (d, top bit) as 2d + m for d < 16, then ZERO, ESC), anchors, fractions."""
    s, a, f = dpc.tile_symbols(bits)
    if joint:
        n = bits.size // dpc.TILE * dpc.TILE
        m = (bits[:n].astype(np.int64).reshape(s.shape) >> 6) & 1
        s = np.where(s < dpc.NUM_D, 2 * s + m, np.where(s == dpc.ZERO, 32, 33))
    return s, a, f


def entropy_bound(bits):
    s, a, f = symbols(bits, False)
    n = bits.size // dpc.TILE * dpc.TILE
    m = ((bits[:n].astype(np.int64) >> 6) & 1).reshape(s.shape)
    key = (np.broadcast_to(f[:, None], s.shape) * dpc.NSYM + s).ravel() * 2 + m.ravel()
    joint = np.bincount(key, minlength=4 * dpc.NSYM * 2).reshape(-1, 2).astype(float)
    tot = joint.sum(axis=1)
    live = tot > 0
    p = joint[live] / tot[live, None]
    h = -(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1)), 0)).sum(axis=1)
    return 1.0 - (h * tot[live]).sum() / tot.sum()


def code_bits(data, joint, lmax):
    """Exponent-section bits per element of a static pair code fitted on `data` (a list of uint16 arrays)."""
    nsym = 34 if joint else dpc.NSYM
    esc_sym, id_bits = (33, 6) if joint else (dpc.ESC, 5)  # an escaped pair's symbol ids
    per_file, probs = [], np.zeros((4, nsym, nsym))
    for bits in data:
        s, a, f = symbols(bits, joint)
        pc = np.zeros((4, nsym, nsym))
        for ff in range(4):
            ss = s[(f == ff) & (a != 0)].reshape(-1, 2)
            np.add.at(pc[ff], (ss[:, 0], ss[:, 1]), 1)
        probs += pc / np.maximum(pc.sum(axis=(1, 2), keepdims=True), 1)
        per_file.append((s, a, f, pc))
    lengths = np.zeros((4, nsym, nsym))
    for ff in range(4):
        p = probs[ff].ravel() / max(probs[ff].sum(), 1e-30)
        keep = p > dpc.THRESH
        q = np.append(p[keep], p[~keep].sum() + 1e-12)
        ln = dpc.package_merge(q / q.sum(), lmax)
        full = np.empty(p.size)
        full[keep] = ln[:-1]
        full[~keep] = ln[-1] + 2 * id_bits
        lengths[ff] = full.reshape(nsym, nsym)
    out = []
    for bits, (s, a, f, pc) in zip(data, per_file):
        total = sum((pc[ff] * lengths[ff]).sum() for ff in range(4))
        total += 8 * (s == esc_sym).sum()  # an escaped exponent's raw bits
        if joint:
            total += ((s == 32) | (s == 33)).sum()  # the top bit of ZERO and ESC elements, raw
        out.append(total / (s.size))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    data = [np.fromfile(os.path.join(args.data, f), dtype=np.uint16) for f in FILES]
    print("entropy bound, ratio change: " +
          ", ".join(f"{f.split('.')[0]} {-entropy_bound(b) / 16:+.4f}" for f, b in zip(FILES, data)))
    base12 = code_bits(data, False, dpc.LMAX)
    for lmax in (12, 13, 14):
        base = code_bits(data, False, lmax)
        print(f"18-symbol pair code, {lmax} bits: " + ", ".join(
            f"{f.split('.')[0]} {(x + 8) / 16:.4f}" for f, x in zip(FILES, base)))
        r = code_bits(data, True, lmax)
        print(f"(d, top bit) pair code, {lmax} bits: " + ", ".join(
            f"{f.split('.')[0]} {(x + 7) / 16:.4f} ({(x - b - 1) / 16:+.4f}; against 12-bit today "
            f"{(x - b12 - 1) / 16:+.4f})" for f, x, b, b12 in zip(FILES, r, base, base12)))


if __name__ == "__main__":
    main()
