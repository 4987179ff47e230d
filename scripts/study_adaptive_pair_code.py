#!/usr/bin/env python3
"""What a pair code fitted per chunk would save against the frozen one (a design study for the wire format).

The frozen pair code (scripts/derive_pair_code.py, thread/pair_code.hpp) is one table per fraction bucket f for
every tensor. A chunk-adapted code would fit the codeword lengths (package-merge, at most 12 bits, so the decoder
keeps one 4096-entry lookup per f) to the chunk's own pair counts and ship them with the chunk. This measures,
on whole files, the exponent bits per element of both codes over the same symbols (escape payloads counted as
2 x 5 bits, as the format has them) and the table cost of the adapted one (per chunk and f that occurs: a
324-bit map of the pairs present and 4 bits per present pair's length), and turns the saving into the change of
the whole-file ratio (exponent bits / 16 per bf16 element).

Usage: python3 scripts/study_adaptive_pair_code.py --data DIR [--chunks 65536,262144,1048576]
DIR holds llama_grads.bf16, llama_acts.bf16, llama_weights.bf16 (the full tensors). Requires numpy only.
"""
import argparse, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import derive_pair_code as dpc  # noqa: E402

ESC_PAYLOAD_BITS = 10  # an escaped pair's two symbols as 5-bit ids


def tile_pairs(bits):
    """Per 256-element tile with a nonzero anchor: its fraction bucket f and its 128 pair ids (s0 * 18 + s1)."""
    s, a, f = dpc.tile_symbols(bits)
    pairs = s[:, 0::2] * dpc.NSYM + s[:, 1::2]
    return f, pairs, a != 0


def frozen_bits(table, f, pairs, live):
    """Bits of the frozen code: a pair below the table's threshold costs the escape codeword + its payload."""
    bits = 0
    for ff in range(4):
        p = pairs[live & (f == ff)].ravel()
        if p.size == 0:
            continue
        lengths = table[ff, : dpc.NSYM * dpc.NSYM]
        esc = lengths[p] == 0
        bits += int(lengths[p[~esc]].sum()) + int(esc.sum()) * int(table[ff, -1] + ESC_PAYLOAD_BITS)
    return bits


def adapted_bits(f, pairs, live):
    """Bits of a code fitted to these tiles (per f), its table's bits, and the pairs' empirical entropy in bits
    (what a coder with fractional codeword lengths, e.g. ANS, approaches with the same table)."""
    bits = table = 0
    entropy = 0.0
    for ff in range(4):
        p = pairs[live & (f == ff)].ravel()
        if p.size == 0:
            continue
        counts = np.bincount(p, minlength=dpc.NSYM * dpc.NSYM)
        present = np.flatnonzero(counts)
        if present.size == 1:
            lengths = np.ones(1, dtype=np.int64)  # a lone pair still takes one bit per codeword
        else:
            lengths = dpc.package_merge(counts[present] / counts.sum(), dpc.LMAX)
        bits += int((counts[present] * lengths).sum())
        table += dpc.NSYM * dpc.NSYM + 4 * present.size
        c = counts[present].astype(np.float64)
        entropy += float(-(c * np.log2(c / c.sum())).sum())
    return bits, table, entropy


def anchor_entropy(bits):
    """Information in the tiles' anchors and fractions (stored as 8 + 2 bits per tile): the entropy of (anchor minus
    the previous tile's anchor, fraction) over the file, bits per tile."""
    n = bits.size // dpc.TILE * dpc.TILE
    mag = (bits[:n].astype(np.int64) & 0x7FFF).reshape(-1, dpc.TILE).max(axis=1)
    a, f = mag >> 7, (mag >> 5) & 3
    sym = np.diff(a, prepend=a[:1]) * 4 + f
    _, c = np.unique(sym, return_counts=True)
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--chunks", default="65536,262144,1048576", help="chunk sizes in elements")
    args = ap.parse_args()
    table = dpc.derive(args.data)
    chunks = [int(c) for c in args.chunks.split(",")]
    print(f"{'file':<20} {'elements':>9} {'frozen b/e':>10} " +
          " ".join(f"{'fit ' + str(c // 1024) + 'Ki b/e':>14} {'ratio delta':>11} {'entropy b/e':>11}"
                   for c in chunks))
    for name in dpc.TRAINING:
        x = np.fromfile(os.path.join(args.data, name), dtype="<u2")
        f, pairs, live = tile_pairs(x)
        n = x.size // dpc.TILE * dpc.TILE
        frozen = frozen_bits(table, f, pairs, live) / n
        cols = []
        for c in chunks:
            tiles_per_chunk = max(c // dpc.TILE, 1)
            total = ent = 0.0
            for t0 in range(0, f.size, tiles_per_chunk):
                sl = slice(t0, t0 + tiles_per_chunk)
                b, tb, h = adapted_bits(f[sl], pairs[sl], live[sl])
                total += b + tb
                ent += h + tb
            fit = total / n
            cols.append(f"{fit:14.4f} {(fit - frozen) / 16:+11.4f} {ent / n:11.4f}")
        print(f"{name:<20} {n:>9} {frozen:10.4f} " + " ".join(cols))
        h = anchor_entropy(x)
        print(f"{'':<20} anchors and fractions: {h:.2f} bits of information per tile against 10 stored: "
              f"ratio {-(10 - h) / dpc.TILE / 16:+.4f} if coded at their entropy")
    print("b/e: exponent-code bits per element (pairs' codewords, escapes with payload; adapted: + its tables);"
          "\nratio delta: the change of the whole-file bf16 ratio from switching the frozen code for the fitted one;"
          "\nentropy: the chunk's pairs' empirical entropy + the same tables (fractional lengths, e.g. ANS).")


if __name__ == "__main__":
    main()
