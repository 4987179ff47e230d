#!/usr/bin/env python3
"""Makes the two genuinely-fp32 gradient samples of tests/data from a short, real training run on the CPU.

The other fp32 sample (llama_grads.f32) is bf16 widened to fp32: every value has 16 zero low mantissa bits.
Real fp32 gradients come in two kinds, and this script makes one sample of each:

  tiny_lm_grads_fp32.f32      gradients of a training run in plain fp32: full mantissas. The 2-D parameter
                              matrices, flattened in parameter order.
  tiny_lm_grads_autocast.f32  gradients of the same run made in bf16 autocast (the way PyTorch's
                              torch.autocast(dtype=torch.bfloat16) computes them, emulated): the gradients of
                              matmul weights and biases are bf16 widened to fp32, those of LayerNorms and
                              embeddings (the tied one: rows of bytes in the batch) stay full fp32. The
                              whole flat gradient buffer, in parameter order, as data-parallel training
                              all-reduces it.

Both files hold the gradients of the last training step, raw fp32 little-endian, no header. They are whole
tensors, not cuts: the model is small enough for its gradients to fit in 256 KiB.

Model: a GPT-2-shaped byte-level language model (token embedding tied to the output layer, learned position
embedding, pre-LayerNorm blocks of causal self-attention and a GELU MLP, biases), with a hand-written backward
pass. Data: the bytes of the Python standard library's own .py files (found through sysconfig), next-byte
prediction. Optimizer: Adam. Everything is seeded. The same numpy/BLAS and Python version give the same files;
elsewhere the statistics hold but bits may differ (BLAS kernels, the standard library's text).

bf16 autocast, emulated: every matmul rounds its inputs to bf16, accumulates in fp32 and rounds its output to
bf16 (forward and backward alike); softmax, LayerNorm, the loss and the residual stream run in fp32. Weights
are fp32 master copies; the gradient of a weight used in a matmul is a bf16 value widened to fp32.

Usage: python3 scripts/make_fp32_samples.py [--out DIR] [--steps N] [--seed S]
Requires numpy only.
"""

import argparse
import os
import sys
import sysconfig
import time

import numpy as np

VOCAB = 256  # bytes
N_EMBD = 32
N_HEAD = 4
N_LAYER = 4
BLOCK = 128  # context length
BATCH = 16
CORPUS_BYTES = 4 << 20  # enough text for a few hundred steps without repeating much

FP32_FILE = "tiny_lm_grads_fp32.f32"
AUTOCAST_FILE = "tiny_lm_grads_autocast.f32"


# ---- precision

def bf16_round(x):
    """fp32 -> nearest bf16 (ties to even), kept as fp32: the value a bf16 tensor would hold."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    return u.view(np.float32)


def fp32_identity(x):
    return x


# ---- data

def load_corpus(limit):
    """Bytes of the standard library's .py files, in sorted path order, up to limit bytes."""
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "__pycache__"))
        paths += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    paths.sort()
    chunks, size = [], 0
    for p in paths:
        with open(p, "rb") as f:
            b = f.read()
        chunks.append(b)
        size += len(b)
        if size >= limit:
            break
    data = np.frombuffer(b"".join(chunks)[:limit], dtype=np.uint8)
    return data, len(chunks)


# ---- model: parameters in PyTorch (nanoGPT) order; Linear weights are (out, in)

def init_params(rng):
    std = 0.02
    proj_std = 0.02 / np.sqrt(2 * N_LAYER)  # GPT-2: residual projections scaled down by depth
    C = N_EMBD
    p = {"wte": rng.normal(0, std, (VOCAB, C)), "wpe": rng.normal(0, std, (BLOCK, C))}
    for i in range(N_LAYER):
        h = f"h{i}."
        p[h + "ln1.w"], p[h + "ln1.b"] = np.ones(C), np.zeros(C)
        p[h + "attn.w"], p[h + "attn.b"] = rng.normal(0, std, (3 * C, C)), np.zeros(3 * C)
        p[h + "proj.w"], p[h + "proj.b"] = rng.normal(0, proj_std, (C, C)), np.zeros(C)
        p[h + "ln2.w"], p[h + "ln2.b"] = np.ones(C), np.zeros(C)
        p[h + "fc.w"], p[h + "fc.b"] = rng.normal(0, std, (4 * C, C)), np.zeros(4 * C)
        p[h + "mproj.w"], p[h + "mproj.b"] = rng.normal(0, proj_std, (C, 4 * C)), np.zeros(C)
    p["lnf.w"], p["lnf.b"] = np.ones(C), np.zeros(C)
    return {k: v.astype(np.float32) for k, v in p.items()}


def linear_fwd(x, w, b, rnd):
    xi, wi = rnd(x), rnd(w)
    y = xi @ wi.T
    if b is not None:
        y = y + rnd(b)
    return rnd(y), (xi, wi)


def linear_bwd(dy, cache, rnd, has_bias=True):
    xi, wi = cache
    dyi = rnd(dy)
    dx = rnd(dyi @ wi)
    x2, dy2 = xi.reshape(-1, xi.shape[-1]), dyi.reshape(-1, dyi.shape[-1])
    dw = rnd(dy2.T @ x2)
    db = rnd(dy2.sum(axis=0)) if has_bias else None
    return dx, dw, db


def layernorm_fwd(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + np.float32(eps))
    xh = xc * rstd
    return xh * w + b, (xh, rstd, w)


def layernorm_bwd(dy, cache):
    xh, rstd, w = cache
    dw = (dy * xh).reshape(-1, xh.shape[-1]).sum(axis=0)
    db = dy.reshape(-1, xh.shape[-1]).sum(axis=0)
    dxh = dy * w
    dx = rstd * (dxh - dxh.mean(axis=-1, keepdims=True) - xh * (dxh * xh).mean(axis=-1, keepdims=True))
    return dx, dw, db


GELU_K = np.float32(np.sqrt(2.0 / np.pi))


def gelu_fwd(u):
    t = np.tanh(GELU_K * (u + np.float32(0.044715) * u * u * u))
    return np.float32(0.5) * u * (1 + t), t


def gelu_bwd(du_out, u, t):
    dt = GELU_K * (1 + np.float32(3 * 0.044715) * u * u)
    return du_out * (np.float32(0.5) * (1 + t) + np.float32(0.5) * u * (1 - t * t) * dt)


def forward_backward(p, idx, tgt, rnd):
    """Mean cross-entropy of next-byte prediction and the gradient of every parameter (fp32 arrays).
    rnd is bf16_round (autocast) or fp32_identity (plain fp32)."""
    B, T = idx.shape
    C, H = N_EMBD, N_HEAD
    D = C // H
    scale = np.float32(1.0 / np.sqrt(D))
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    g = {}

    x = p["wte"][idx] + p["wpe"][:T]  # embeddings run in fp32 under autocast
    caches = []
    for i in range(N_LAYER):
        h = f"h{i}."
        c = {}
        a, c["ln1"] = layernorm_fwd(x, p[h + "ln1.w"], p[h + "ln1.b"])
        qkv, c["attn"] = linear_fwd(a, p[h + "attn.w"], p[h + "attn.b"], rnd)
        q, k, v = (t.reshape(B, T, H, D).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
        s = rnd(rnd(q @ k.transpose(0, 1, 3, 2)) * scale)
        s = np.where(mask, np.float32(-np.inf), s)
        s = s - s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        pr = e / e.sum(axis=-1, keepdims=True)  # softmax in fp32
        prb = rnd(pr)
        y = rnd(prb @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        c["q"], c["k"], c["v"], c["pr"], c["prb"] = q, k, v, pr, prb
        o, c["proj"] = linear_fwd(y, p[h + "proj.w"], p[h + "proj.b"], rnd)
        x = x + o  # residual stream in fp32
        a2, c["ln2"] = layernorm_fwd(x, p[h + "ln2.w"], p[h + "ln2.b"])
        u, c["fc"] = linear_fwd(a2, p[h + "fc.w"], p[h + "fc.b"], rnd)
        gl, c["t"] = gelu_fwd(u)
        c["u"] = u
        m, c["mproj"] = linear_fwd(rnd(gl), p[h + "mproj.w"], p[h + "mproj.b"], rnd)
        x = x + m
        caches.append(c)
    xf, cf = layernorm_fwd(x, p["lnf.w"], p["lnf.b"])
    logits, ch = linear_fwd(xf, p["wte"], None, rnd)  # tied output layer

    # Cross-entropy in fp32.
    z = logits - logits.max(axis=-1, keepdims=True)
    ez = np.exp(z)
    se = ez.sum(axis=-1, keepdims=True)
    logp = z - np.log(se)
    loss = float(-np.take_along_axis(logp, tgt[..., None], axis=-1).mean())
    dlogits = ez / se
    np.put_along_axis(dlogits, tgt[..., None], np.take_along_axis(dlogits, tgt[..., None], axis=-1) - 1, axis=-1)
    dlogits = (dlogits / np.float32(B * T)).astype(np.float32)

    dxf, dwte_head, _ = linear_bwd(dlogits, ch, rnd, has_bias=False)
    dx, g["lnf.w"], g["lnf.b"] = layernorm_bwd(dxf, cf)
    for i in reversed(range(N_LAYER)):
        h, c = f"h{i}.", caches[i]
        dgl, g[h + "mproj.w"], g[h + "mproj.b"] = linear_bwd(dx, c["mproj"], rnd)
        du = rnd(gelu_bwd(dgl, c["u"], c["t"]))
        da2, g[h + "fc.w"], g[h + "fc.b"] = linear_bwd(du, c["fc"], rnd)
        dln2, g[h + "ln2.w"], g[h + "ln2.b"] = layernorm_bwd(da2, c["ln2"])
        dx = dx + dln2
        dy, g[h + "proj.w"], g[h + "proj.b"] = linear_bwd(dx, c["proj"], rnd)
        dy = rnd(dy).reshape(B, T, H, D).transpose(0, 2, 1, 3)
        q, k, v, pr, prb = c["q"], c["k"], c["v"], c["pr"], c["prb"]
        dpr = rnd(dy @ v.transpose(0, 1, 3, 2))
        dv = rnd(prb.transpose(0, 1, 3, 2) @ dy)
        ds = pr * (dpr - (dpr * pr).sum(axis=-1, keepdims=True))  # softmax backward in fp32
        ds = rnd(rnd(ds) * scale)
        dq = rnd(ds @ k)
        dk = rnd(ds.transpose(0, 1, 3, 2) @ q)
        dqkv = np.concatenate([t.transpose(0, 2, 1, 3).reshape(B, T, C) for t in (dq, dk, dv)], axis=-1)
        da, g[h + "attn.w"], g[h + "attn.b"] = linear_bwd(dqkv, c["attn"], rnd)
        dln1, g[h + "ln1.w"], g[h + "ln1.b"] = layernorm_bwd(da, c["ln1"])
        dx = dx + dln1
    # Tied embedding: the output layer's gradient (bf16 under autocast) plus the lookup's (fp32), summed in fp32.
    dwte = dwte_head.copy()
    np.add.at(dwte, idx.reshape(-1), dx.reshape(-1, C))
    g["wte"] = dwte
    g["wpe"] = np.zeros_like(p["wpe"])
    g["wpe"][:T] = dx.sum(axis=0)
    return loss, {k: g[k].astype(np.float32) for k in p}


def train(data, steps, seed, rnd, label):
    """Adam on fp32 master weights; returns the gradients of the last step."""
    rng = np.random.default_rng(seed)
    p = init_params(rng)
    batch_rng = np.random.default_rng(seed + 1)  # the same batches for both runs
    moment1 = {k: np.zeros_like(v) for k, v in p.items()}
    moment2 = {k: np.zeros_like(v) for k, v in p.items()}
    lr, b1, b2, eps = 3e-3, 0.9, 0.95, 1e-8
    t0 = time.time()
    first = None
    for step in range(1, steps + 1):
        starts = batch_rng.integers(0, data.size - BLOCK - 1, BATCH)
        win = np.stack([data[i:i + BLOCK + 1] for i in starts]).astype(np.int64)
        loss, g = forward_backward(p, win[:, :-1], win[:, 1:], rnd)
        first = loss if first is None else first
        if step == 1 or step % 50 == 0 or step == steps:
            print(f"  {label} step {step:4d} loss {loss:.4f} ({time.time() - t0:.1f} s)")
        if step == steps:
            return g, first, loss
        lr_t = lr * min(1.0, step / 50)  # short warm-up
        for k in p:
            moment1[k] = b1 * moment1[k] + (1 - b1) * g[k]
            moment2[k] = b2 * moment2[k] + (1 - b2) * g[k] * g[k]
            m_hat, v_hat = moment1[k] / (1 - b1 ** step), moment2[k] / (1 - b2 ** step)
            p[k] = (p[k] - lr_t * m_hat / (np.sqrt(v_hat) + eps)).astype(np.float32)
    raise AssertionError("steps must be >= 1")


# ---- summary statistics

def low16_zero_fraction(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return float(np.mean((u & np.uint32(0xFFFF)) == 0))


def byte_entropy_ratio(a):
    """Order-0 entropy of each of the 4 byte positions, over 32 bits: what a byte-level entropy coder
    (nvCOMP ANS-like, one model per byte position) could reach at best, without its own overhead."""
    b = np.ascontiguousarray(a, dtype="<f4").view(np.uint8).reshape(-1, 4)
    bits = 0.0
    for j in range(4):
        q = np.bincount(b[:, j], minlength=256) / b.shape[0]
        q = q[q > 0]
        bits += float(-(q * np.log2(q)).sum())
    return bits / 32.0


def param_kind(name):
    if name in ("wte", "wpe"):
        return "embeddings"
    if ".ln" in name or name.startswith("lnf."):
        return "LayerNorm weights and biases"
    return "matmul weights and biases"


def describe(name, a):
    print(f"  {name}: {a.size} elements, {a.size * 4} bytes")
    z = low16_zero_fraction(a)
    print(f"    values with 16 zero low mantissa bits: {z:.4f} ({round(z * a.size)}; "
          f"exact zeros {int(np.sum(a == 0))})")
    print(f"    byte-position order-0 entropy ratio: {byte_entropy_ratio(a):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data"), help="default: tests/data")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    data, nfiles = load_corpus(CORPUS_BYTES)
    print(f"corpus: {data.size} bytes from {nfiles} .py files of the Python {sys.version.split()[0]} standard "
          "library")
    print(f"model: byte-level GPT, {N_LAYER} layers, {N_EMBD} wide, {N_HEAD} heads, context {BLOCK}, "
          f"batch {BATCH}, {args.steps} Adam steps, seed {args.seed}, numpy {np.__version__}")

    shapes = {k: v.shape for k, v in init_params(np.random.default_rng(0)).items()}
    order = list(shapes)  # parameter order: the order of the flat gradient buffer
    print(f"parameters: {sum(int(np.prod(s)) for s in shapes.values())} in {len(order)} tensors")

    results = {}
    for label, rnd in (("fp32", fp32_identity), ("bf16 autocast", bf16_round)):
        g, first, last = train(data, args.steps, args.seed, rnd, label)
        if not last < first - 1.0:
            sys.exit(f"error: {label} loss did not go down enough ({first:.4f} -> {last:.4f})")
        results[label] = g

    g32 = results["fp32"]
    fp32_sample = np.concatenate([g32[k].reshape(-1) for k in order if g32[k].ndim == 2]).astype("<f4")
    gac = results["bf16 autocast"]
    autocast_sample = np.concatenate([gac[k].reshape(-1) for k in order]).astype("<f4")

    os.makedirs(args.out, exist_ok=True)
    print("written:")
    for name, a in ((FP32_FILE, fp32_sample), (AUTOCAST_FILE, autocast_sample)):
        assert a.size * 4 <= 256 * 1024, "a sample must stay within 256 KiB"
        assert np.all(np.isfinite(a))
        a.tofile(os.path.join(args.out, name))
        describe(name, a)
    # Where the autocast sample's full-mantissa values come from, by kind of parameter.
    groups = {"matmul weights and biases": [], "embeddings": [], "LayerNorm weights and biases": []}
    for k in order:
        groups[param_kind(k)].append(gac[k].reshape(-1))
    for kind, parts in groups.items():
        a = np.concatenate(parts)
        print(f"    {AUTOCAST_FILE}, {kind}: {a.size} values, {1 - low16_zero_fraction(a):.4f} full fp32")


if __name__ == "__main__":
    main()
