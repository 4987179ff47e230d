#!/usr/bin/env python3
"""Static instruction counts of a kernel's loops and of one path through a loop, from SASS with line info.

An issue-bound kernel runs as fast as it issues: the instructions a tile takes on its usual path tell what a change
is worth before any GPU runs it. Input: `nvdisasm -c -gi kernel.cubin` (the CUDA toolkit's, or the PyPI wheel
nvidia-cuda-nvdisasm's) of a cubin built with `-lineinfo`, e.g. for the bf16 fixed-code decoder:

  bash scripts/sass-codec.sh bf16 fixed             # writes $OUT/codec_bf16_fixed.sass (OUT: /tmp/zipcomm-out)
  S=$OUT/codec_bf16_fixed.sass
  python3 scripts/sass_paths.py $S decompress_kernel                               # loops, largest first
  python3 scripts/sass_paths.py $S decompress_kernel --list 3790                   # one loop, with source lines
  python3 scripts/sass_paths.py $S decompress_kernel --path 3790 4c10 39a0=T 4050=1 42e0=T 49f0=T

--path START END [ADDR=T|N|K ...] walks from START until it executes END (a loop's back edge): a conditional
branch at ADDR is taken (T), not taken (N, the default) or taken its first K times (an inner loop of K + 1 rounds);
an unconditional one is always taken (BRA.DIV, taken only by a diverged warp, counts as conditional). It prints the
instructions executed, by opcode. Addresses belong to one build: read them off --list after every change.
"""
import argparse
import collections
import re
import signal
import sys

LOCATION = re.compile(r'\s*//## File "([^"]+)", line (\d+)')
LABEL = re.compile(r"\s*(\.L_x_\d+):")
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
BRANCH = re.compile(r"\bBRA\b.*?`\(([^)]*)\)")


def parse(path, function):
    """(address, text, innermost source file:line) of each instruction of the functions whose name holds
    `function`, and the addresses of their labels."""
    instructions, labels, pending = [], {}, []
    inside, in_chain, location = False, False, "?"
    with open(path) as f:
        for line in f:
            if line.startswith(".text."):  # a whole name: compress_kernel is not decompress_kernel
                inside = re.search(r"(?<![A-Za-z_])" + re.escape(function), line) is not None
                continue
            if not inside:
                continue
            m = LOCATION.match(line)
            if m:  # an inlined call's chain lists the innermost place first
                if not in_chain:
                    location = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
                in_chain = True
                continue
            in_chain = False
            m = LABEL.match(line)
            if m:
                pending.append(m.group(1))
                continue
            m = INSTRUCTION.match(line)
            if m:
                address = int(m.group(1), 16)
                instructions.append((address, m.group(2).strip(), location))
                for label in pending:
                    labels[label] = address
                pending = []
    return instructions, labels


def opcode(text):
    words = text.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def loops(instructions, labels):
    """(head, back edge) of every backward branch."""
    found = []
    for address, text, _ in instructions:
        m = BRANCH.search(text)
        if m and m.group(1) in labels and labels[m.group(1)] <= address:
            found.append((labels[m.group(1)], address))
    return found


def walk(instructions, labels, start, end, rules):
    index = {a: i for i, (a, _, _) in enumerate(instructions)}
    visits, executed = collections.Counter(), []
    i = index[start]
    while len(executed) < 100000:
        address, text, _ = instructions[i]
        executed.append(text)
        if address == end:
            return executed
        m = BRANCH.search(text)
        if m:
            conditional = text.startswith("@") or "BRA.DIV" in text  # BRA.DIV: only in a diverged warp
            visits[address] += 1
            rule = rules.get(address, "N" if conditional else "T")
            taken = not conditional or rule == "T" or (rule.isdigit() and visits[address] <= int(rule))
            if taken:
                i = index[labels[m.group(1)]]
                continue
        i += 1
    sys.exit("no end reached: the path loops (give an inner loop's back edge a round count)")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sass")
    parser.add_argument("function", help="a name in the (mangled) kernel name, e.g. compress_kernel")
    parser.add_argument("--list", metavar="HEAD", help="print the loop starting at HEAD (hex)")
    parser.add_argument("--path", nargs="+", metavar="ARG", help="START END [ADDR=T|N|K ...] (hex addresses)")
    parser.add_argument("--most", type=int, default=12, help="loops to report (12)")
    args = parser.parse_args()
    instructions, labels = parse(args.sass, args.function)
    if not instructions:
        sys.exit(f"no function matching {args.function!r} in {args.sass}")
    index = {a: i for i, (a, _, _) in enumerate(instructions)}
    found = loops(instructions, labels)
    if args.path:
        start, end = int(args.path[0], 16), int(args.path[1], 16)
        rules = {int(a, 16): v for a, v in (r.split("=") for r in args.path[2:])}
        executed = walk(instructions, labels, start, end, rules)
        ops = collections.Counter(opcode(t) for t in executed)
        print(f"{len(executed)} instructions: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(12)))
    elif args.list:
        head = int(args.list, 16)
        ends = [e for s, e in found if s == head]
        if not ends:
            sys.exit(f"no loop starts at {args.list}")
        for address, text, location in instructions[index[head]:index[max(ends)] + 1]:
            print(f"{address:05x}  {location:34s} {text}")
    else:
        print(f"{len(instructions)} instructions")
        for s, e in sorted(found, key=lambda x: x[1] - x[0], reverse=True)[:args.most]:
            body = instructions[index[s]:index[e] + 1]
            places = collections.Counter(loc for _, _, loc in body).most_common(4)
            print(f"loop {s:05x}-{e:05x}: {len(body):5d} instructions | " + ", ".join(f"{k} {v}" for k, v in places))


if __name__ == "__main__":
    main()
