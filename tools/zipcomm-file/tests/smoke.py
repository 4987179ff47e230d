#!/usr/bin/env python3
"""Smoke tests of zipcomm-file that run on a CPU (standard library only).

usage: smoke.py EXE WORKDIR roundtrip FILE DTYPE [CODE]
       smoke.py EXE WORKDIR stats FILE DTYPE MAX_RATIO
       smoke.py EXE WORKDIR safetensors
       smoke.py EXE WORKDIR malformed
"""
import filecmp
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys


def run(exe, *args, expect=0):
    p = subprocess.run([exe, *args], capture_output=True, text=True)
    shown = " ".join(os.path.basename(a) if os.path.isabs(a) else a for a in args)
    if p.returncode != expect:
        sys.exit(f"FAIL: zipcomm-file {shown}: exit {p.returncode}, expected {expect}\n"
                 f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def same_file(a, b):
    if shutil.which("cmp"):
        return subprocess.run(["cmp", a, b]).returncode == 0
    return filecmp.cmp(a, b, shallow=False)


def roundtrip(exe, work, path, dtype, code="gaussian"):
    z, back = os.path.join(work, "x.zc"), os.path.join(work, "x.back")
    run(exe, "compress", "--dtype", dtype, "--code", code, path, z)
    run(exe, "decompress", z, back)
    if not same_file(path, back):
        sys.exit("FAIL: decompressed file differs from the original")
    print(f"ok: {os.path.basename(path)} {dtype}/{code}: {os.path.getsize(path)} -> {os.path.getsize(z)} bytes")


def stats(exe, work, path, dtype, max_ratio):
    p = run(exe, "stats", "--dtype", dtype, "--json", path)
    doc = json.loads(p.stdout)
    for key in ("ratio", "entropy_bound", "dtype", "code", "elements", "original_bytes", "compressed_bytes", "path"):
        if key not in doc:
            sys.exit(f"FAIL: stats --json lacks '{key}': {p.stdout}")
    z = os.path.join(work, "x.zc")
    run(exe, "compress", "--dtype", dtype, path, z)
    if doc["compressed_bytes"] != os.path.getsize(z) or doc["original_bytes"] != os.path.getsize(path):
        sys.exit(f"FAIL: stats sizes disagree with the files: {p.stdout}")
    if abs(doc["ratio"] - os.path.getsize(z) / os.path.getsize(path)) > 1e-5:
        sys.exit(f"FAIL: ratio is not compressed/original: {p.stdout}")
    if not (0.0 < doc["entropy_bound"] < 1.0):
        sys.exit(f"FAIL: implausible entropy_bound: {p.stdout}")
    if not doc["ratio"] < float(max_ratio):
        sys.exit(f"FAIL: ratio {doc['ratio']} not below {max_ratio}")
    print(p.stdout.strip())
    print(run(exe, "stats", "--dtype", dtype, path).stdout)


# ------------------------------------------------------------------------------------- safetensors helpers

def gauss_f32(rng, n, scale):
    return [rng.gauss(0.0, scale) for _ in range(n)]


def f32_bytes(vals):
    return struct.pack(f"<{len(vals)}f", *vals)


def bf16_bytes(vals):
    words = struct.unpack(f"<{len(vals)}I", f32_bytes(vals))
    return struct.pack(f"<{len(words)}H", *[w >> 16 for w in words])


def f16_bytes(vals):
    return struct.pack(f"<{len(vals)}e", *vals)


def make_safetensors(path, pad_header=True, gap=0):
    """Writes a small safetensors file mixing BF16, F16, F32, I64 and an empty tensor; returns the tensors."""
    rng = random.Random(1234)
    tensors = [  # (name, dtype, shape, bytes) in data order
        ("model.layers.0.mlp.weight", "BF16", [100, 400], bf16_bytes(gauss_f32(rng, 40000, 0.02))),
        ("model.embed.weight", "F32", [64, 300], f32_bytes(gauss_f32(rng, 19200, 1.0))),
        ("step", "I64", [3], struct.pack("<3q", 300, -1, 1 << 40)),
        ("model.layers.0.norm.weight", "F16", [5000], f16_bytes([1.0 + x for x in gauss_f32(rng, 5000, 0.1)])),
        ("empty", "BF16", [0, 7], b""),
        ("odd.u8", "U8", [5], bytes([1, 2, 3, 4, 5])),
        ("grad\u00e9\"quoted\"", "BF16", [1, 300], bf16_bytes(gauss_f32(rng, 300, 1e-3))),
    ]
    header, data = {}, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw + b"\0" * gap
    header["__metadata__"] = {"format": "pt", "note": "zipcomm smoke test \\ \u2713"}
    # Header keys in an order different from the data order.
    keys = sorted(header, reverse=True)
    text = json.dumps({k: header[k] for k in keys}).encode()
    if pad_header:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return tensors


def safetensors(exe, work):
    src = os.path.join(work, "model.safetensors")
    tensors = make_safetensors(src)
    z, back = os.path.join(work, "model.zcf"), os.path.join(work, "back.safetensors")
    run(exe, "compress", src, z)
    run(exe, "decompress", z, back)
    if not same_file(src, back):
        sys.exit("FAIL: safetensors round trip differs")
    p = run(exe, "stats", "--json", src)
    doc = json.loads(p.stdout)
    if doc["compressed_bytes"] != os.path.getsize(z) or doc["original_bytes"] != os.path.getsize(src):
        sys.exit(f"FAIL: safetensors stats sizes disagree with the files: {p.stdout}")
    names = {t["name"]: t for t in doc["tensors"]}
    if set(names) != {t[0] for t in tensors}:
        sys.exit(f"FAIL: tensor names differ: {sorted(names)}")
    if names["step"]["stored"] != "raw" or names["model.layers.0.mlp.weight"]["stored"] != "zipcomm":
        sys.exit("FAIL: wrong storage choice")
    if not names["model.layers.0.mlp.weight"]["ratio"] < 0.8:
        sys.exit(f"FAIL: bf16 tensor ratio {names['model.layers.0.mlp.weight']['ratio']}")
    if not doc["ratio"] < 1.0:
        sys.exit(f"FAIL: container not smaller than the file: {doc['ratio']}")
    print(p.stdout.strip())
    print(run(exe, "stats", src).stdout)
    # A file with gaps between tensors and an unpadded header round-trips too; --format forces the parser.
    src2 = os.path.join(work, "gaps.bin")
    make_safetensors(src2, pad_header=False, gap=3)
    run(exe, "compress", "--format", "safetensors", "--code", "window3", src2, z)
    run(exe, "decompress", z, back)
    if not same_file(src2, back):
        sys.exit("FAIL: safetensors (gaps, window3) round trip differs")
    # Header-only file with no tensors at all.
    src3 = os.path.join(work, "empty.safetensors")
    text = b"{}      "
    with open(src3, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
    run(exe, "compress", src3, z)
    run(exe, "decompress", z, back)
    if not same_file(src3, back):
        sys.exit("FAIL: empty safetensors round trip differs")
    print("ok: safetensors round trips")


# ------------------------------------------------------------------------------------- malformed input

def malformed(exe, work):
    def write(name, data):
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    out = os.path.join(work, "out")
    cases = []  # (description, args, expected exit code)

    def case(desc, args, code=1):
        cases.append((desc, args, code))

    rng = random.Random(7)
    good_raw = write("good.bf16", bf16_bytes(gauss_f32(rng, 20000, 0.01)))
    good_z = os.path.join(work, "good.zc")
    run(exe, "compress", "--dtype", "bf16", good_raw, good_z)
    zbytes = open(good_z, "rb").read()
    st = os.path.join(work, "good.safetensors")
    make_safetensors(st)
    good_c = os.path.join(work, "good.zcf")
    run(exe, "compress", st, good_c)
    cbytes = open(good_c, "rb").read()
    sbytes = open(st, "rb").read()

    case("raw size not a multiple of the element size", ["compress", "--dtype", "bf16", write("odd.bf16", b"abc"), out])
    case("fp32 size not a multiple of 4", ["compress", "--dtype", "fp32", write("odd.f32", b"abcdef"), out])
    case("missing input file", ["compress", "--dtype", "bf16", os.path.join(work, "nope"), out])
    case("decompress of garbage", ["decompress", write("garbage", b"hello world, not a stream"), out])
    case("decompress of an empty file", ["decompress", write("empty", b""), out])
    case("truncated stream", ["decompress", write("trunc.zc", zbytes[: len(zbytes) // 2]), out])
    case("stream cut inside the header", ["decompress", write("trunc2.zc", zbytes[:40]), out])
    flipped = bytearray(zbytes)
    flipped[20] ^= 0x01
    case("stream with a corrupted header", ["decompress", write("flip.zc", bytes(flipped)), out])
    case("stream with trailing bytes", ["decompress", write("trail.zc", zbytes + b"\0" * 16), out])
    bad_table = bytearray(zbytes)
    hdr_table = struct.unpack_from("<Q", zbytes, 32)[0]  # header.table_offset
    struct.pack_into("<Q", bad_table, hdr_table, 1 << 40)
    case("stream with a bad chunk table", ["decompress", write("table.zc", bytes(bad_table)), out])
    case("truncated container", ["decompress", write("trunc.zcf", cbytes[: len(cbytes) - 100]), out])
    bad_sum = bytearray(cbytes)
    bad_sum[24] ^= 0xFF
    case("container with a wrong checksum", ["decompress", write("sum.zcf", bytes(bad_sum)), out])
    bad_entry = bytearray(cbytes)
    struct.pack_into("<Q", bad_entry, 32 + 16, 1 << 62)
    case("container with an entry out of range", ["decompress", write("entry.zcf", bytes(bad_entry)), out])
    case("container header only", ["decompress", write("hdr.zcf", cbytes[:32]), out])

    def st_file(name, header_bytes, data=b"", length=None):
        n = len(header_bytes) if length is None else length
        return write(name, struct.pack("<Q", n) + header_bytes + data)

    case("safetensors shorter than 8 bytes", ["compress", write("short.safetensors", b"\x10\0\0"), out])
    case("safetensors header length beyond the file",
         ["compress", st_file("len.safetensors", b"{}", length=1 << 40), out])
    case("safetensors header length near 2^64",
         ["stats", st_file("len2.safetensors", b"{}", length=(1 << 64) - 1)])
    case("safetensors truncated inside the header", ["compress", write("cut.safetensors", sbytes[:30]), out])
    case("safetensors truncated data", ["compress", write("cutdata.safetensors", sbytes[:-10]), out])
    case("bad JSON", ["compress", st_file("json.safetensors", b'{"a": {"dtype": "BF16",'), out])
    case("JSON not an object", ["stats", st_file("arr.safetensors", b"[1, 2]")])
    case("deeply nested JSON", ["stats", st_file("deep.safetensors", b"[" * 100000 + b"]" * 100000)])
    case("offsets out of range",
         ["compress", st_file("range.safetensors", b'{"t":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}',
                              b"\0" * 4), out])
    case("size not a multiple of the element size",
         ["compress", st_file("mult.safetensors", b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,6]}}',
                              b"\0" * 6), out])
    case("shape disagrees with offsets",
         ["stats", st_file("shape.safetensors", b'{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}',
                           b"\0" * 8)])
    case("unknown dtype",
         ["compress", st_file("dtype.safetensors", b'{"t":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}}',
                              b"\0" * 2), out])
    case("negative offset",
         ["compress", st_file("neg.safetensors", b'{"t":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}}',
                              b"\0" * 2), out])
    case("overlapping tensors",
         ["compress", st_file("overlap.safetensors",
                              b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                              b'"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', b"\0" * 6), out])
    case("duplicate tensor names",
         ["compress", st_file("dup.safetensors",
                              b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                              b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\0" * 2), out])
    case("metadata value not a string",
         ["compress", st_file("meta.safetensors", b'{"__metadata__":{"k":1}}'), out])
    case("shape overflow",
         ["compress", st_file("ovf.safetensors",
                              b'{"t":{"dtype":"U8","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}}'), out])
    case("integer too large",
         ["compress", st_file("big.safetensors",
                              b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,99999999999999999999999]}}'), out])
    case("unterminated string", ["compress", st_file("str.safetensors", b'{"t'), out])
    case("raw NUL inside the JSON", ["compress", st_file("nul.safetensors", b'{"t":\0}'), out])
    # usage errors: exit code 2
    case("no arguments", [], 2)
    case("unknown command", ["squash", good_raw, out], 2)
    case("unknown option", ["compress", "--fast", good_raw, out], 2)
    case("raw compress without --dtype", ["compress", good_raw, out], 2)
    case("unknown dtype option", ["compress", "--dtype", "fp8", good_raw, out], 2)
    case("missing output argument", ["decompress", good_z], 2)

    failed = 0
    for desc, args, code in cases:
        p = subprocess.run([exe, *args], capture_output=True, text=True)
        msg = p.stderr.strip().splitlines()[0] if p.stderr.strip() else "(no message)"
        ok = p.returncode == code and p.stderr.strip() != ""
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} [{p.returncode}] {desc}: {msg}")
    if failed:
        sys.exit(f"FAIL: {failed} malformed-input case(s) misbehaved")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    exe, work, what, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    {"roundtrip": roundtrip, "stats": stats, "safetensors": safetensors, "malformed": malformed}[what](exe, work, *rest)


if __name__ == "__main__":
    main()
