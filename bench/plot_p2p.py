#!/usr/bin/env python3
"""Draws bench_p2p's JSON: effective GB/s against message size (coded links and the raw transfer), and the
links' speed over raw with the targets (1.40x at >= 64 MiB, never below 0.97x).

Usage: python3 bench/plot_p2p.py bench_p2p.json out.png
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        d = json.load(f)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_p2p.py: matplotlib is not installed; no PNG drawn")
        return 3
    series = {}
    for r in d["rows"]:
        if r["method"].startswith("probe") or r["method"].startswith("sweep"):
            continue
        series.setdefault(r["method"], []).append((r["bytes"], r["gbps"], r["ms"]))
    for v in series.values():
        v.sort()
    labels = {
        "raw": "raw: pipelined copy-engine transfer (best chunk)",
        "coded_copy": "coded, copy mode (always coded)",
        "link_copy": "link, copy mode (raw below measured threshold)",
        "coded_stream": "coded, stream mode (always coded)",
        "link_stream": "link, stream mode (raw below measured threshold)",
    }
    styles = {"raw": "k-", "coded_copy": "C2--", "link_copy": "C2-", "coded_stream": "C3--", "link_stream": "C3-"}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 9), sharex=True)
    for name, pts in series.items():
        if name.startswith("raw_paired_"):
            continue  # the paired raw times only feed the ratios below
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(name, "-"), marker=".",
                 label=labels.get(name, name))
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_ylabel("effective GB/s (message bytes / time to decoded)")
    ax1.set_title("GPU -> pinned host -> GPU on %s, real bf16 gradients (%s)" % (d.get("gpu", "?"), d.get("data", "?")))
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)
    # Speed over raw: a link as used against the raw transfer timed alternately with it (raw_paired_<link>),
    # coded-always against the raw sweep's best.
    raw = {p[0]: p[2] for p in series.get("raw", [])}
    for name in sorted(series):
        if not (name.startswith("link_") or name.startswith("coded_")):
            continue
        base = raw
        if name.startswith("link_") and ("raw_paired_" + name[5:]) in series:
            base = {p[0]: p[2] for p in series["raw_paired_" + name[5:]]}
        pts = [(b, base[b] / ms) for b, _, ms in series.get(name, []) if b in base]
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(name, "-"), marker=".",
                     label=labels.get(name, name) + (" / paired raw" if base is not raw else ""))
    ax2.axhline(1.40, color="g", lw=0.8, ls=":", label="target 1.40x (>= 64 MiB)")
    ax2.axhline(0.97, color="r", lw=0.8, ls=":", label="floor 0.97x (every size)")
    ax2.axvline(64 << 20, color="g", lw=0.5, ls=":")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("message bytes")
    ax2.set_ylabel("speed over raw")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print("plot_p2p.py: wrote", sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
