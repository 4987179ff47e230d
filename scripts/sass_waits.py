#!/usr/bin/env python3
"""Which loads each instruction waits for: the control codes of Volta-to-Hopper SASS, from `cuobjdump -sass`.

Every instruction carries a stall count, a yield bit, the scoreboard its result sets (variable-latency
operations: global and shared loads, shuffles, conversions), the scoreboard its source operands free, and a
mask of the scoreboards it waits on. A warp has six; loads that share one are waited for together, so an
instruction that waits on a scoreboard waits for the newest load that set it, whichever register that load
writes. That is what makes a prefetch useless when its load shares the scoreboard of an earlier one.

Usage:
  cuobjdump -sass kernel.cubin > kernel.sass
  python3 scripts/sass_waits.py kernel.sass [--from 0x5300] [--to 0x5a40] [--grep 'LDG|LDS|SEL'] [--waits]
(--waits: only instructions that wait on a scoreboard or set one.)
"""
import argparse
import re
import signal
import sys

INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\* (0x[0-9a-f]{16}) \*/")
CONTROL_WORD = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")


def parse(lines):
    """Yields (address, text, stall, yield, write scoreboard, read scoreboard, wait mask) per instruction."""
    i = 0
    while i < len(lines):
        m = INSTRUCTION.match(lines[i])
        hi = CONTROL_WORD.search(lines[i + 1]) if m and i + 1 < len(lines) else None
        if not hi:
            i += 1
            continue
        ctl = int(hi.group(1), 16) >> 41  # bits 105-125 of the 128-bit instruction
        yield (int(m.group(1), 16), m.group(2), ctl & 0xF, (ctl >> 4) & 1, (ctl >> 5) & 7, (ctl >> 8) & 7,
               (ctl >> 11) & 0x3F)
        i += 2


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under head
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="output of cuobjdump -sass (or - for stdin)")
    ap.add_argument("--from", dest="lo", type=lambda s: int(s, 16), default=0)
    ap.add_argument("--to", dest="hi", type=lambda s: int(s, 16), default=1 << 40)
    ap.add_argument("--grep", default=None, help="only instructions matching this regular expression")
    ap.add_argument("--waits", action="store_true", help="only instructions that wait on or set a scoreboard")
    a = ap.parse_args()
    text = sys.stdin.read() if a.sass == "-" else open(a.sass).read()
    pattern = re.compile(a.grep) if a.grep else None
    for addr, ins, stall, yld, wr, rd, wait in parse(text.splitlines()):
        if not a.lo <= addr <= a.hi or (pattern and not pattern.search(ins)):
            continue
        if a.waits and not wait and wr == 7:
            continue
        waits = ",".join(f"SB{b}" for b in range(6) if wait >> b & 1)
        sets = "-" if wr == 7 else f"SB{wr}"
        frees = "-" if rd == 7 else f"SB{rd}"
        print(f"{addr:05x}  {ins[:72]:72s} stall {stall:2d}{' y' if yld else '  '}  sets {sets:3s}  frees {frees:3s}"
              f"  waits [{waits}]")


if __name__ == "__main__":
    main()
