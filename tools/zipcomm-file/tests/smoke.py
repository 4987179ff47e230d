#!/usr/bin/env python3
"""Smoke tests of zipcomm-file that run on a CPU (standard library only).

usage: smoke.py EXE WORKDIR roundtrip FILE DTYPE [CODE]
       smoke.py EXE WORKDIR stats FILE DTYPE MAX_RATIO
       smoke.py EXE WORKDIR install_deps SCRIPT
       smoke.py EXE WORKDIR TEST    (TEST: one of the other functions named in TESTS below)
WORKDIR is emptied first.
"""
import filecmp
import json
import math
import os
import random
import re
import shutil
import signal
import stat
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


def run_bytes(exe, *args, stdin=b"", expect=0, **kw):
    """Runs with binary stdin/stdout; returns (stdout bytes, stderr text)."""
    p = subprocess.run([exe, *args], input=stdin, capture_output=True, **kw)
    err = p.stderr.decode(errors="replace")
    if p.returncode != expect:
        sys.exit(f"FAIL: zipcomm-file {' '.join(args)}: exit {p.returncode}, expected {expect}\nstderr: {err}")
    return p.stdout, err


def temp_files(folder):
    return [f for f in os.listdir(folder) if ".zipcomm-tmp." in f]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def expect_fail(exe, *args, code=1, needle=""):
    p = run(exe, *args, expect=code)
    if needle.lower() not in p.stderr.lower():
        sys.exit(f"FAIL: zipcomm-file {' '.join(args)}: stderr lacks '{needle}': {p.stderr}")
    return p


def gaussian_bf16(n, seed=5, scale=0.02):
    return bf16_bytes(gauss_f32(random.Random(seed), n, scale))


def format_version(exe):
    m = re.search(r"stream format version (\d+)", run(exe, "--version").stdout)
    if not m:
        sys.exit("FAIL: --version does not name the stream format version")
    return int(m.group(1))


def roundtrip(exe, work, path, dtype, code="pair"):
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


def f8_bytes(vals, e4m3):
    """fp8 by truncation (test data): e5m2 is fp16's top byte; e4m3 is fp16 of x / 256 (bias 7) shifted by 7."""
    out = bytearray()
    for h in struct.unpack(f"<{len(vals)}H", f16_bytes([v / 256 if e4m3 else v for v in vals])):
        out.append((h >> 8 & 0x80) | (h >> 7 & 0x7F) if e4m3 else h >> 8)
    return bytes(out)


def make_safetensors(path, pad_header=True, gap=0):
    """Writes a small safetensors file mixing BF16, F16, F32, F8, I64 and an empty tensor; returns the tensors."""
    rng = random.Random(1234)
    tensors = [  # (name, dtype, shape, bytes) in data order
        ("model.layers.0.mlp.weight", "BF16", [100, 400], bf16_bytes(gauss_f32(rng, 40000, 0.02))),
        ("model.embed.weight", "F32", [64, 300], f32_bytes(gauss_f32(rng, 19200, 1.0))),
        ("step", "I64", [3], struct.pack("<3q", 300, -1, 1 << 40)),
        ("model.layers.0.norm.weight", "F16", [5000], f16_bytes([1.0 + x for x in gauss_f32(rng, 5000, 0.1)])),
        ("empty", "BF16", [0, 7], b""),
        ("odd.u8", "U8", [5], bytes([1, 2, 3, 4, 5])),
        ("grad\u00e9\"quoted\"", "BF16", [1, 300], bf16_bytes(gauss_f32(rng, 300, 1e-3))),
        ("fp8.e4m3", "F8_E4M3", [20000], f8_bytes(gauss_f32(rng, 20000, 2.0), True)),
        ("fp8.e5m2", "F8_E5M2", [20000], f8_bytes(gauss_f32(rng, 20000, 0.02), False)),
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
    if names["fp8.e5m2"]["stored"] != "zipcomm" or names["fp8.e5m2"]["dtype"] != "F8_E5M2":
        sys.exit(f"FAIL: the F8_E5M2 tensor is not coded: {names['fp8.e5m2']}")
    if not names["model.layers.0.mlp.weight"]["ratio"] < 0.8:
        sys.exit(f"FAIL: bf16 tensor ratio {names['model.layers.0.mlp.weight']['ratio']}")
    if not doc["ratio"] < 1.0:
        sys.exit(f"FAIL: container not smaller than the file: {doc['ratio']}")
    print(p.stdout.strip())
    print(run(exe, "stats", src).stdout)
    # A file with gaps between tensors and an unpadded header round-trips too; --format forces the parser.
    src2 = os.path.join(work, "gaps.bin")
    make_safetensors(src2, pad_header=False, gap=3)
    run(exe, "compress", "-f", "--format", "safetensors", "--code", "pair", src2, z)
    run(exe, "decompress", "-f", z, back)
    if not same_file(src2, back):
        sys.exit("FAIL: safetensors (gaps, --code pair) round trip differs")
    # Header-only file with no tensors at all.
    src3 = os.path.join(work, "empty.safetensors")
    text = b"{}      "
    with open(src3, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
    run(exe, "compress", "-f", src3, z)
    run(exe, "decompress", "-f", z, back)
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
    case("a code of an older format version",
         ["compress", "--dtype", "bf16", "--code", "gaussian", good_raw, out], 2)
    case("missing output argument", ["decompress", good_z], 2)

    failed = 0
    for desc, args, code in cases:
        p = subprocess.run([exe, *args], capture_output=True, text=True)
        msg = p.stderr.strip().splitlines()[0] if p.stderr.strip() else "(no message)"
        ok = p.returncode == code and p.stderr.strip() != "" and not os.path.exists(out) and not temp_files(work)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} [{p.returncode}] {desc}: {msg}")
    if failed:
        sys.exit(f"FAIL: {failed} malformed-input case(s) misbehaved (or left an output behind)")


# ------------------------------------------------------------------------------------- never lose a file

def same_path(exe, work):
    """Output == input (same path, or the same file through another path) is refused, the input intact."""
    src = write(os.path.join(work, "x.bf16"), gaussian_bf16(20000))
    original = read(src)
    os.makedirs(os.path.join(work, "sub"))
    os.link(src, os.path.join(work, "hard.bf16"))
    os.symlink(src, os.path.join(work, "link.bf16"))
    for out in (src, os.path.join(work, "sub", "..", "x.bf16"), os.path.join(work, "hard.bf16"),
                os.path.join(work, "link.bf16")):
        expect_fail(exe, "compress", "-f", "--dtype", "bf16", src, out, needle="same file")
        if read(src) != original:
            sys.exit(f"FAIL: compress onto {out} changed the input")
    z = os.path.join(work, "x.zc")
    run(exe, "compress", "--dtype", "bf16", src, z)
    zbytes = read(z)
    expect_fail(exe, "decompress", "-f", z, z, needle="same file")
    expect_fail(exe, "decompress", "-f", z, os.path.join(work, "sub", "..", "x.zc"), needle="same file")
    # Standard input redirected from the output file is the same file too.
    with open(z, "rb") as f:
        p = subprocess.run([exe, "decompress", "-f", "-", z], stdin=f, capture_output=True, text=True)
    if p.returncode != 1 or "same file" not in p.stderr or read(z) != zbytes:
        sys.exit(f"FAIL: decompress - OUT < OUT was not refused: {p.returncode} {p.stderr}")
    if temp_files(work):
        sys.exit(f"FAIL: temporary files left: {temp_files(work)}")
    print("ok: output == input refused (path, ../ path, hard link, symlink, stdin), inputs intact")


def existing_output(exe, work):
    """An existing output is replaced only with -f."""
    src = write(os.path.join(work, "x.bf16"), gaussian_bf16(20000))
    out = write(os.path.join(work, "out.zc"), b"precious\n")
    expect_fail(exe, "compress", "--dtype", "bf16", src, out, needle="-f")
    if read(out) != b"precious\n":
        sys.exit("FAIL: an existing output was changed without -f")
    run(exe, "compress", "--dtype", "bf16", "-f", src, out)
    back = write(os.path.join(work, "back.bf16"), b"also precious\n")
    expect_fail(exe, "decompress", out, back, needle="already exists")
    if read(back) != b"also precious\n":
        sys.exit("FAIL: decompress changed an existing output without -f")
    run(exe, "decompress", "--force", out, back)
    if read(back) != read(src):
        sys.exit("FAIL: decompress -f did not restore the input")
    if stat.S_IMODE(os.stat(back).st_mode) & 0o600 != 0o600:
        sys.exit("FAIL: the output is not readable and writable by its owner")
    # A device holds nothing to lose: /dev/null needs no -f.
    run(exe, "decompress", out, os.devnull)
    if temp_files(work):
        sys.exit(f"FAIL: temporary files left: {temp_files(work)}")
    print("ok: existing outputs refused without -f, replaced with -f; /dev/null written directly")


def limited_file_size(limit):
    """preexec_fn: writes past `limit` bytes fail with EFBIG (a full disk, without filling one)."""
    def apply():
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def no_partial(exe, work):
    """A failure leaves no output and no temporary file, and an output being replaced survives intact."""
    original = gaussian_bf16(40000)
    src = write(os.path.join(work, "x.bf16"), original)
    z = os.path.join(work, "x.zc")
    run(exe, "compress", "--dtype", "bf16", src, z)
    stream = read(z)
    cut = write(os.path.join(work, "cut.zc"), read(z)[: os.path.getsize(z) // 2])
    out = os.path.join(work, "out.bf16")
    expect_fail(exe, "decompress", cut, out, needle="truncated")
    if os.path.exists(out) or temp_files(work):
        sys.exit("FAIL: a failed decompress left a file behind")
    write(out, b"old contents\n")
    expect_fail(exe, "decompress", "-f", cut, out, needle="truncated")
    if read(out) != b"old contents\n" or temp_files(work):
        sys.exit("FAIL: a failed decompress -f damaged the output it was to replace")
    # A write that fails half way (file size limit): the output being replaced and the input survive.
    if hasattr(os, "fork"):
        for args in (["compress", "-f", "--dtype", "bf16", src, out], ["decompress", "-f", z, out]):
            p = subprocess.run([exe, *args], capture_output=True, text=True, preexec_fn=limited_file_size(4096))
            if p.returncode != 1 or read(out) != b"old contents\n" or temp_files(work) or not p.stderr:
                sys.exit(f"FAIL: {args[0]} with a failing write: exit {p.returncode}, {p.stderr}")
            print(f"ok: {args[0]} with a failing write: {p.stderr.strip()}")
    if os.path.exists("/dev/full"):
        full = os.path.join(work, "full.out")
        os.symlink("/dev/full", full)
        expect_fail(exe, "decompress", z, full, needle="space")
    if read(src) != original or read(z) != stream:
        sys.exit("FAIL: an input changed")
    # A folder the program cannot write to (root can write anywhere, so only checked for other users).
    if os.geteuid() != 0:
        locked = os.path.join(work, "locked")
        os.makedirs(locked)
        os.chmod(locked, 0o555)
        try:
            expect_fail(exe, "decompress", z, os.path.join(locked, "out.bf16"), needle="temporary file")
            if os.listdir(locked):
                sys.exit("FAIL: a file appeared in a read-only folder")
        finally:
            os.chmod(locked, 0o755)
    print("ok: no partial output after a truncated stream, a failing write, /dev/full")


# ------------------------------------------------------------------------------------- info and stats

def info_stream(exe, work):
    raw = gaussian_bf16(40000)
    src = write(os.path.join(work, "x.bf16"), raw)
    z = os.path.join(work, "x.zc")
    run(exe, "compress", "--dtype", "bf16", "--code", "pair", src, z)
    doc = json.loads(run(exe, "info", "--json", z).stdout)
    want = {"kind": "stream", "format_version": format_version(exe), "dtype": "bf16", "code": "pair",
            "elements": 40000, "original_bytes": len(raw), "compressed_bytes": os.path.getsize(z),
            "chunks": 10}  # 4096-element chunks: the default below 2^24 elements
    for k, v in want.items():
        if doc.get(k) != v:
            sys.exit(f"FAIL: info --json {k} = {doc.get(k)}, expected {v}: {doc}")
    if abs(doc["ratio"] - os.path.getsize(z) / len(raw)) > 1e-5:
        sys.exit(f"FAIL: info ratio {doc['ratio']}")
    text = run(exe, "info", z).stdout
    for needle in ("zipcomm stream, format version", "bf16 / pair", "40000", "chunks:"):
        if needle not in text:
            sys.exit(f"FAIL: info lacks '{needle}':\n{text}")
    # stats on a stream says it is compressed and describes it, instead of measuring its bytes as bf16.
    p = run(exe, "stats", "--dtype", "bf16", z)
    if "already compressed" not in p.stdout or "bf16 / pair" not in p.stdout:
        sys.exit(f"FAIL: stats on a stream:\n{p.stdout}")
    doc = json.loads(run(exe, "stats", "--json", "--dtype", "bf16", z).stdout)
    if not doc.get("already_compressed") or doc.get("original_bytes") != len(raw):
        sys.exit(f"FAIL: stats --json on a stream: {doc}")
    # A stream of a format version this build does not read is named as such, by version and status.
    cur = format_version(exe)
    old = bytearray(read(z))
    old[4] = 4  # versions 5 and 6 are read
    h = 2166136261
    for b in old[:48]:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    struct.pack_into("<I", old, 48, h)
    oldz = write(os.path.join(work, "old.zc"), bytes(old))
    for args in (["info", oldz], ["decompress", oldz, os.path.join(work, "old.out")], ["stats", oldz]):
        p = expect_fail(exe, *args, needle=f"format version 4; this build reads versions 5 to {cur}")
        print(f"ok: {args[0]} of a version-4 stream: {p.stderr.strip().splitlines()[-1]}")
    expect_fail(exe, "info", write(os.path.join(work, "trail.zc"), read(z) + b"\0" * 16), needle="after the end")
    expect_fail(exe, "info", src, needle="neither")
    print(text)


def info_container(exe, work):
    src = os.path.join(work, "model.safetensors")
    make_safetensors(src)
    z = os.path.join(work, "model.zcf")
    run(exe, "compress", src, z)
    doc = json.loads(run(exe, "info", "--json", z).stdout)
    if doc["kind"] != "container" or doc["container_version"] != 2 or doc["original_bytes"] != os.path.getsize(src) \
            or doc["compressed_bytes"] != os.path.getsize(z):
        sys.exit(f"FAIL: info --json on a container: {doc}")
    entries = doc["entries"]
    if sum(e["original_bytes"] for e in entries) != os.path.getsize(src) or entries[0]["kind"] != "raw_bytes":
        sys.exit(f"FAIL: container entries do not tile the file: {entries}")
    streams = [e for e in entries if e["kind"] == "stream"]
    if not streams or any(e["format_version"] != format_version(exe) or e["code"] != "pair" for e in streams):
        sys.exit(f"FAIL: container stream entries: {streams}")
    if doc["chunks"] != sum(e["chunks"] for e in streams):
        sys.exit("FAIL: container chunk count")
    text = run(exe, "info", z).stdout
    for needle in ("zipcomm-file container, version 2", "entries:", "raw bytes", "stream", "fnv1a64"):
        if needle not in text:
            sys.exit(f"FAIL: info lacks '{needle}':\n{text}")
    p = run(exe, "stats", z)
    if "already compressed" not in p.stdout or "container" not in p.stdout:
        sys.exit(f"FAIL: stats on a container:\n{p.stdout}")
    # --format raw still measures the bytes, as the user asked.
    if "already compressed" in run(exe, "stats", "--format", "raw", "--dtype", "bf16", "-q", z).stdout:
        sys.exit("FAIL: --format raw did not force raw stats")
    print(text)


# ------------------------------------------------------------------------------------- command line

def help_text(exe, work):
    general = run(exe, "--help").stdout
    for cmd in ("compress", "decompress", "info", "stats"):
        if cmd not in general:
            sys.exit(f"FAIL: --help lacks {cmd}")
    options = {"compress": ["--dtype", "--force", "--no-roundtrip-check", "--progress", "--quiet", "--threads"],
               "decompress": ["--force", "--quiet", "--threads"], "info": ["--json"],
               "stats": ["--dtype", "--json", "--format", "--threads"]}
    for cmd, opts in options.items():
        for form in ([cmd, "--help"], [cmd, "-h"], ["help", cmd], [cmd, "--dtype", "bf16", "a", "b", "--help"]):
            p = run(exe, *form)
            if not p.stdout.startswith("usage:") or f"zipcomm-file {cmd}" not in p.stdout:
                sys.exit(f"FAIL: {' '.join(form)}:\n{p.stdout}")
            for o in opts:
                if o not in p.stdout:
                    sys.exit(f"FAIL: {' '.join(form)} lacks {o}")
    p = expect_fail(exe, "decompress", "--dtype", "bf16", "a", "b", code=2, needle="does not apply")
    if "zipcomm-file decompress --help" not in p.stderr:
        sys.exit(f"FAIL: a usage error does not point at the command's help: {p.stderr}")
    expect_fail(exe, "compress", "--fast", "a", "b", code=2, needle="unknown option")
    expect_fail(exe, "compress", "--dtype", "bf16", "--code", "window3", "a", "b", code=2,
                needle="pair or fixed")
    print(run(exe, "compress", "--help").stdout)


def version(exe, work):
    for form in (["--version"], ["-V"], ["info", "--version"]):
        out = run(exe, *form).stdout
        if not re.match(r"zipcomm-file \S+ \(zipcomm stream format version \d+, container version 2, ", out):
            sys.exit(f"FAIL: {' '.join(form)}: {out}")
    print(out.strip())


def stdio(exe, work):
    raw = gaussian_bf16(30000)
    z, _ = run_bytes(exe, "compress", "--dtype", "bf16", "-", "-", stdin=raw)
    back, _ = run_bytes(exe, "decompress", "-", "-", stdin=z)
    if back != raw or z[:4] != b"ZPCM":
        sys.exit("FAIL: raw stdin/stdout round trip")
    src = os.path.join(work, "model.safetensors")
    make_safetensors(src)
    c, _ = run_bytes(exe, "compress", "--format", "safetensors", "-", "-", stdin=read(src))
    out = os.path.join(work, "back.safetensors")
    run_bytes(exe, "decompress", "-", out, stdin=c)
    if read(out) != read(src) or c[:4] != b"ZPCF":
        sys.exit("FAIL: safetensors stdin round trip")
    # A file to stdout, and info on stdin.
    from_file, _ = run_bytes(exe, "compress", "--format", "safetensors", src, "-")
    if from_file != c:
        sys.exit("FAIL: compress FILE - differs from compress - -")
    doc = json.loads(run_bytes(exe, "info", "--json", "-", stdin=c)[0])
    if doc["kind"] != "container":
        sys.exit("FAIL: info - on a container")
    print("ok: stdin/stdout round trips (raw and safetensors), info on stdin")


def summary(exe, work):
    src = write(os.path.join(work, "x.bf16"), gaussian_bf16(40000))
    z = os.path.join(work, "x.zc")
    line = re.compile(r"zipcomm-file: (compressed|decompressed) \S+ -> \S+: (\d+) -> (\d+) bytes "
                      r"\(ratio [0-9.]+\), [0-9.]+ GB/s \((host|gpu)\)")
    p = run(exe, "compress", "--dtype", "bf16", src, z)
    m = line.search(p.stderr)
    if not m or int(m.group(2)) != os.path.getsize(src) or int(m.group(3)) != os.path.getsize(z):
        sys.exit(f"FAIL: compress summary line: {p.stderr}")
    p = run(exe, "decompress", z, os.path.join(work, "back"))
    m = line.search(p.stderr)
    if not m or m.group(1) != "decompressed" or int(m.group(3)) != os.path.getsize(src):
        sys.exit(f"FAIL: decompress summary line: {p.stderr}")
    if run(exe, "decompress", "-q", z, os.devnull).stderr:
        sys.exit("FAIL: -q still prints")
    # The progress line (automatic above 256 MiB) is forced here; each phase gets a line when stderr is a file.
    p = run(exe, "compress", "--progress", "-f", "--dtype", "bf16", src, z)
    for phase in ("reading", "coding", "checking", "writing"):
        if f": {phase} " not in p.stderr:
            sys.exit(f"FAIL: --progress lacks the {phase} phase: {p.stderr}")
    print(p.stderr)


def dtype_warning(exe, work):
    rng = random.Random(11)
    vals = gauss_f32(rng, 40000, 0.02)
    f32 = write(os.path.join(work, "x.f32"), f32_bytes(vals))
    bf16 = write(os.path.join(work, "x.bf16"), bf16_bytes(vals))
    checks = [(f32, "bf16", "fp32"), (bf16, "fp32", "bf16"), (bf16, "fp16", "bf16")]
    for path, given, suggested in checks:
        p = run(exe, "compress", "--dtype", given, path, os.path.join(work, f"out.{given}.zc"))
        if "zipcomm-file: warning:" not in p.stderr or f"use --dtype {suggested}" not in p.stderr:
            sys.exit(f"FAIL: no wrong-dtype warning for {os.path.basename(path)} as {given}: {p.stderr}")
        print(p.stderr.strip().splitlines()[-1])
    for path, dt in ((f32, "fp32"), (bf16, "bf16")):
        p = run(exe, "compress", "--dtype", dt, path, os.path.join(work, f"right.{dt}.zc"))
        if "zipcomm-file: warning:" in p.stderr:
            sys.exit(f"FAIL: a warning for the right dtype: {p.stderr}")
    # Data that is not floats at all (random bytes): a high ratio on its own is suspect.
    noise_rng = random.Random(3)
    noise = write(os.path.join(work, "noise.bin"), bytes(noise_rng.getrandbits(8) for _ in range(1 << 17)))
    p = run(exe, "compress", "--dtype", "bf16", noise, os.path.join(work, "noise.zc"))
    if "do not look like bf16" not in p.stderr:
        sys.exit(f"FAIL: no warning for random bytes: {p.stderr}")
    print("ok: wrong --dtype warnings")


# ------------------------------------------------------------------------------------- container kinds

def tiny_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, bytes)] in data order."""
    header, data = {}, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    write(path, struct.pack("<Q", len(text)) + text + data)


def container_raw(exe, work):
    """Tensors that coding would grow are stored as-is (entry kind 2)."""
    src = os.path.join(work, "tiny.safetensors")
    tiny_safetensors(src, [("t", "BF16", [3], bf16_bytes([1.0, -2.5, 3.0]))])
    z, back = os.path.join(work, "tiny.zcf"), os.path.join(work, "tiny.back")
    run(exe, "compress", src, z)
    run(exe, "decompress", z, back)
    if read(back) != read(src):
        sys.exit("FAIL: tiny container round trip")
    doc = json.loads(run(exe, "info", "--json", z).stdout)
    kinds = [e["kind"] for e in doc["entries"]]
    if kinds != ["raw_bytes", "raw_tensor"] or doc["entries"][1]["stored_bytes"] != 6:
        sys.exit(f"FAIL: the 3-element tensor was not stored raw: {doc}")
    # Only the container's own header, entries and alignment padding may be added (a stream would add 100+ bytes).
    limit = os.path.getsize(src) + 32 + len(kinds) * (32 + 15)
    if os.path.getsize(z) > limit:
        sys.exit(f"FAIL: container of {os.path.getsize(z)} bytes for a {os.path.getsize(src)}-byte file "
                 f"(limit {limit})")
    print(f"ok: 3-element bf16 tensor: {os.path.getsize(src)} -> {os.path.getsize(z)} bytes, tensor stored raw")
    # An incompressible tensor (random bits: every exponent equally likely) and a large Gaussian one: the first
    # raw, the second coded. (A LayerNorm weight of all ones is coded: every pair is (d 0, d 0), 6 bits/element.)
    norm = os.path.join(work, "norm.safetensors")
    tiny_safetensors(norm, [("noise", "BF16", [2048], random.Random(3).randbytes(4096)),
                            ("w", "BF16", [20000], gaussian_bf16(20000))])
    zn = os.path.join(work, "norm.zcf")
    run(exe, "compress", norm, zn)
    doc = json.loads(run(exe, "info", "--json", zn).stdout)
    if [e["kind"] for e in doc["entries"]] != ["raw_bytes", "raw_tensor", "stream"]:
        sys.exit(f"FAIL: incompressible tensor entries: {doc['entries']}")
    st = json.loads(run(exe, "stats", "--json", norm).stdout)
    ln = [t for t in st["tensors"] if t["name"] == "noise"][0]
    if ln["stored"] != "raw" or ln["compressed_bytes"] != 4096 or not ln["stream_bytes"] >= 4096:
        sys.exit(f"FAIL: stats of the incompressible tensor: {ln}")
    run(exe, "decompress", zn, os.path.join(work, "norm.back"))
    if read(os.path.join(work, "norm.back")) != read(norm):
        sys.exit("FAIL: incompressible tensor container round trip")
    # Version 1 containers (kinds 0 and 1 only) are still read; kind 2 needs version 2.
    big = os.path.join(work, "model.safetensors")
    make_safetensors(big)
    zb = os.path.join(work, "model.zcf")
    run(exe, "compress", big, zb)
    v1 = bytearray(read(zb))
    if 2 in [v1[32 + 32 * i] for i in range(struct.unpack_from("<I", v1, 16)[0])]:
        sys.exit("FAIL: the test file is expected to have no raw tensor entry")
    struct.pack_into("<I", v1, 4, 1)
    run(exe, "decompress", write(os.path.join(work, "v1.zcf"), bytes(v1)), os.path.join(work, "v1.back"))
    if read(os.path.join(work, "v1.back")) != read(big):
        sys.exit("FAIL: a version-1 container was not read")
    bad = bytearray(read(z))
    struct.pack_into("<I", bad, 4, 1)
    expect_fail(exe, "decompress", write(os.path.join(work, "v1k2.zcf"), bytes(bad)), os.path.join(work, "o"),
                needle="unknown kind 2")
    bad = bytearray(read(z))
    struct.pack_into("<I", bad, 4, 3)
    expect_fail(exe, "info", write(os.path.join(work, "v3.zcf"), bytes(bad)), needle="container version 3")
    print("ok: raw tensor entries, version-1 containers read, version 3 refused")


# ------------------------------------------------------------------------------------- install-deps.sh

def install_deps(exe, work, script):
    """scripts/install-deps.sh on a machine without apt-get: only missing required tools are an error."""
    root = os.path.join(work, "repo")
    os.makedirs(os.path.join(root, "scripts"))
    os.makedirs(os.path.join(root, ".deps", "catch2"))
    shutil.copy(script, os.path.join(root, "scripts", "install-deps.sh"))
    write(os.path.join(root, ".deps", "catch2", "catch.hpp"), b"")
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    # PATH holds the utilities the script uses and stand-ins for the build tools; no apt-get, sudo or clang++.
    for tool in ("sort", "head", "sed", "mktemp", "rm", "id", "dirname", "grep", "tail", "timeout", "cat"):
        where = shutil.which(tool)
        if where:
            os.symlink(where, os.path.join(bindir, tool))

    def stub(name, body):
        path = os.path.join(bindir, name)
        write(path, ("#!/bin/sh\n" + body).encode())
        os.chmod(path, 0o755)
        return path

    cmake = stub("cmake", 'echo "cmake version 3.28.3"\n')
    for name in ("g++", "ninja", "python3"):
        stub(name, "exit 0\n")
    bash = shutil.which("bash")

    def deps():
        p = subprocess.run([bash, os.path.join(root, "scripts", "install-deps.sh")], capture_output=True, text=True,
                           env={"PATH": bindir, "HOME": work, "LC_ALL": "C"})
        return p.returncode, p.stdout + p.stderr

    rc, out = deps()
    if rc != 0 or "WARNING" not in out or "fuzz" not in out:
        sys.exit(f"FAIL: only libFuzzer missing, no apt-get: exit {rc}, expected 0 with a warning:\n{out}")
    print(f"ok: only the optional clang/libFuzzer missing: exit 0\n{out}")
    os.remove(cmake)
    rc, out = deps()
    if rc != 1 or "ERROR" not in out or "cmake" not in out:
        sys.exit(f"FAIL: cmake missing, no apt-get: exit {rc}, expected 1 naming cmake:\n{out}")
    print(f"ok: required cmake missing: exit 1\n{out}")
    stub("cmake", 'echo "cmake version 3.28.3"\n')
    stub("clang++", "exit 0\n")  # "links" the libFuzzer probe
    rc, out = deps()
    if rc != 0 or "all dependencies present" not in out:
        sys.exit(f"FAIL: everything present: exit {rc}:\n{out}")
    print(f"ok: everything present: exit 0\n{out}")


def ear(exe, work):
    """ear: known values (identical rows 1 exactly, uniform against uniform over half 0.5), an independent
    computation of a random pair, refused sizes, NaN rows."""
    rng = random.Random()
    vocab = 1000
    uniform = [0.0] * vocab
    half = [0.0 if i < vocab // 2 else -math.inf for i in range(vocab)]
    a = [rng.gauss(0, 3) for _ in range(vocab)]
    b = [x + rng.gauss(0, 0.3) for x in a]
    p = write(os.path.join(work, "p.f32"), f32_bytes(uniform + a + a))
    q = write(os.path.join(work, "q.f32"), f32_bytes(half + a + b))
    out = json.loads(run(exe, "ear", "--vocab", str(vocab), "--json", p, q).stdout)

    def softmax(v):  # in double, from the fp32 values
        v = [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]
        m = max(v)
        e = [math.exp(x - m) for x in v]
        z = math.fsum(e)
        return [x / z for x in e]

    want = math.fsum(min(x, y) for x, y in zip(softmax(a), softmax(b)))
    expected = (0.5 + 1.0 + want) / 3
    if out["positions"] != 3 or abs(out["ear"] - expected) > 1e-12 or abs(out["min"] - min(0.5, want)) > 1e-12:
        sys.exit(f"FAIL: ear gave {out}, expected ear {expected}, min {min(0.5, want)}")
    print(f"ok: ear {out['ear']:.12f} (expected {expected:.12f})")
    same = json.loads(run(exe, "ear", "--vocab", str(vocab), "--json", p, p).stdout)
    if same["ear"] != 1.0:
        sys.exit(f"FAIL: ear of a file with itself is {same['ear']}, not exactly 1")
    expect_fail(exe, "ear", "--vocab", "999", p, q, needle="whole number of positions")
    expect_fail(exe, "ear", "--vocab", str(vocab), p, write(os.path.join(work, "short.f32"), f32_bytes(a)),
                needle="same positions")
    expect_fail(exe, "ear", p, q, code=2, needle="--vocab")
    expect_fail(exe, "ear", "--vocab", "0", p, q, code=2, needle="--vocab")
    nan = write(os.path.join(work, "nan.f32"), f32_bytes(uniform + a + [math.nan] + a[1:]))
    bad = json.loads(run(exe, "ear", "--vocab", str(vocab), "--json", nan, q, expect=1).stdout)
    if bad["ear"] is not None or bad["nan_positions"] != 1:
        sys.exit(f"FAIL: a NaN logit gave {bad}")
    print("ok: ear refuses bad sizes and reports NaN positions")


def threads(exe, work):
    """The host codec writes the same stream on any number of threads and reads it back on any number."""
    raw = write(os.path.join(work, "x.bf16"), gaussian_bf16(300_000, seed=11))
    streams = []
    for t in ("1", "3", "0"):
        z = os.path.join(work, f"x.{t}.zc")
        run(exe, "compress", "--host", "--threads", t, "--dtype", "bf16", raw, z)
        streams.append(read(z))
    if any(s != streams[0] for s in streams[1:]):
        sys.exit("FAIL: --threads changed the compressed bytes")
    for t in ("1", "2", "0"):
        back = os.path.join(work, f"x.back.{t}")
        run(exe, "decompress", "--host", "--threads", t, os.path.join(work, "x.1.zc"), back)
        if not same_file(raw, back):
            sys.exit(f"FAIL: decompress --threads {t} differs from the original")
    for bad in ("-1", "x", "", "5000"):
        expect_fail(exe, "compress", "--threads", bad, "--dtype", "bf16", raw, os.path.join(work, "y.zc"),
                    code=2, needle="--threads")
    print("ok: --threads 1, 2, 3 and 0 write and read the same bytes; bad counts refused")


TESTS = {"roundtrip": roundtrip, "stats": stats, "safetensors": safetensors, "malformed": malformed,
         "same_path": same_path, "existing_output": existing_output, "no_partial": no_partial,
         "info_stream": info_stream, "info_container": info_container, "help": help_text, "version": version,
         "stdio": stdio, "summary": summary, "dtype_warning": dtype_warning, "container_raw": container_raw,
         "install_deps": install_deps, "ear": ear, "threads": threads}


def main():
    if len(sys.argv) < 4 or sys.argv[3] not in TESTS:
        sys.exit(__doc__)
    exe, work, what, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    TESTS[what](exe, work, *rest)


if __name__ == "__main__":
    main()
