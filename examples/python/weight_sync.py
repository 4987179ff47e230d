#!/usr/bin/env python3
"""RL weight sync from Python: a trainer's transformer-shaped state dict copied into an inference copy with
zipcomm.WeightSync, compressed (coded) against uncompressed (raw), and checked bit-exact; with --quantize, also
through the LOSSY quantization tier under a plan of the given bits per parameter, with the EAR of what arrived.

    python examples/python/weight_sync.py                      # pinned-host link on GPU 0
    python examples/python/weight_sync.py --link peer --recv-device 1
    python examples/python/weight_sync.py --quantize 6         # + a layer-wise plan of 6 bits per parameter

Needs zipcomm built with the GPU codec, a GPU, and torch (bf16 tensors) or CuPy (fp16: CuPy has no bfloat16);
without them it says why and exits 0. The weights are Gaussian * 0.02 (norm weights about 1), the exponent
spread that makes real bf16 weights compress to about 0.67 of their size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any, Callable

import zipcomm


def transformer_shapes(layers: int, hidden: int, intermediate: int, kv_hidden: int,
                       vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """A Llama-style decoder's parameters (tied embeddings)."""
    shapes: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", (hidden,)),
                   (p + "self_attn.q_proj.weight", (hidden, hidden)),
                   (p + "self_attn.k_proj.weight", (kv_hidden, hidden)),
                   (p + "self_attn.v_proj.weight", (kv_hidden, hidden)),
                   (p + "self_attn.o_proj.weight", (hidden, hidden)),
                   (p + "post_attention_layernorm.weight", (hidden,)),
                   (p + "mlp.gate_proj.weight", (intermediate, hidden)),
                   (p + "mlp.up_proj.weight", (intermediate, hidden)),
                   (p + "mlp.down_proj.weight", (hidden, intermediate))]
    shapes.append(("model.norm.weight", (hidden,)))
    return shapes


class Torch:
    dtype_name = "bf16"

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def weights(self, shape: tuple[int, ...], device: int, norm: bool) -> Any:
        t = self.torch.randn(shape, device=f"cuda:{device}") * 0.02
        return (t + 1 if norm else t).to(self.torch.bfloat16)

    def empty_like(self, x: Any, device: int) -> Any:
        return self.torch.empty_like(x, device=f"cuda:{device}")

    def zero(self, x: Any) -> None:
        x.zero_()

    def same_bits(self, a: Any, b: Any) -> bool:
        return bool(self.torch.equal(a.view(self.torch.int16), b.to(a.device).view(self.torch.int16)))


class CuPy:
    dtype_name = "fp16"

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def weights(self, shape: tuple[int, ...], device: int, norm: bool) -> Any:
        with self.cupy.cuda.Device(device):
            t = self.cupy.random.standard_normal(shape, dtype=self.cupy.float32) * 0.02
            return (t + 1 if norm else t).astype(self.cupy.float16)

    def empty_like(self, x: Any, device: int) -> Any:
        with self.cupy.cuda.Device(device):
            return self.cupy.empty_like(x)

    def zero(self, x: Any) -> None:
        with x.device:
            x.fill(0)

    def same_bits(self, a: Any, b: Any) -> bool:
        return bool((self.cupy.asnumpy(a).view("u2") == self.cupy.asnumpy(b).view("u2")).all())


def framework() -> Any:
    for make in (Torch, CuPy):
        try:
            return make()
        except ImportError:
            continue
    return None


def timed(sync: zipcomm.WeightSync, iterations: int, before: Callable[[], None]) -> list[float]:
    sync.sync()  # warm-up: first launches, the links' budgets
    rates = []
    for _ in range(iterations):
        before()
        rates.append(sync.sync().gb_per_s)
    return rates


def forward(torch: Any, w: dict, layers: int, tokens: Any) -> Any:
    """Logits of a gated-MLP stack over the synced tensors (attention left out: the example needs a function of
    every matrix whose output distribution the quantization moves, not a language model), read out through the
    tied embedding, scaled to a next-token-like entropy."""
    x = w["model.embed_tokens.weight"][tokens].float()
    for i in range(layers):
        p = f"model.layers.{i}."
        h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w[p + "input_layernorm.weight"].float())
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].float().T for n in ("q", "k", "v"))
        x = x + (q * k.repeat(1, q.shape[1] // k.shape[1]).sigmoid()) @ w[p + "self_attn.o_proj.weight"].float().T
        h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w[p + "post_attention_layernorm.weight"].float())
        gate, up = h @ w[p + "mlp.gate_proj.weight"].float().T, h @ w[p + "mlp.up_proj.weight"].float().T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].float().T
        x = x + v.repeat(1, x.shape[1] // v.shape[1])
    x = torch.nn.functional.rms_norm(x, (x.shape[-1],), w["model.norm.weight"].float())
    logits = x @ w["model.embed_tokens.weight"].float().T
    return (logits * (4.0 / logits.std(dim=1, keepdim=True))).contiguous()


def quantized_sync(fw: Any, args: Any, trainer: dict, inference: dict, recv_device: int) -> bool:
    """Plans bits per tensor for args.quantize bits per parameter, syncs through the plan, measures the EAR."""
    torch = fw.torch
    import zipcomm.quant as zq

    tokens = torch.randint(0, trainer["model.embed_tokens.weight"].shape[0], (256,), device=f"cuda:{args.device}")
    reference = forward(torch, trainer, args.layers, tokens)
    matrices = {n: t for n, t in trainer.items() if t.dim() == 2}
    choices = zq.default_choices(bits=range(3, 9))
    sens = zq.measure_sensitivity(
        matrices, lambda replaced: zq.ear(reference, forward(torch, {**trainer, **replaced}, args.layers, tokens)),
        choices)
    plan = zq.plan(sens, budget_bits=args.quantize)
    print(plan.report())
    with zipcomm.WeightSync(trainer, inference, link=args.link, quantize=plan) as sync:
        results = [sync.sync() for _ in range(args.iterations + 1)][1:]
    arrived = {n: t.to(f"cuda:{args.device}") for n, t in inference.items()}
    ear = zq.ear(reference, forward(torch, arrived, args.layers, tokens))
    r = results[-1]
    lossless = sum(t.nbytes for n, t in trainer.items() if plan.choices.get(n) is None)
    print(f"quantized: {r.bytes / 2**30:.2f} GiB of tensors sent as {r.quantized_bytes / 2**30:.3f} GiB of messages "
          f"+ {lossless / 2**30:.3f} GiB coded losslessly; "
          f"{statistics.median(x.gb_per_s for x in results):.2f} GB/s (median of {args.iterations}, wall time); "
          f"EAR of what arrived {ear:.4f} (plan predicted {plan.predicted_ear:.4f})")
    return plan.met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--link", choices=["host", "peer"], default="host")
    parser.add_argument("--device", type=int, default=0, help="the trainer's GPU")
    parser.add_argument("--recv-device", type=int, default=None, help="the inference copy's GPU (peer link)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (4: 38 tensors, 0.46 GiB in bf16)")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--quantize", type=float, default=None, metavar="BITS",
                        help="also sync through a quantization plan of BITS bits per parameter (LOSSY; needs torch)")
    args = parser.parse_args()
    recv_device = args.device if args.recv_device is None else args.recv_device

    fw = framework()
    if fw is None:
        print("weight_sync.py needs torch or CuPy to make CUDA tensors: neither is installed; skipped")
        return 0
    info = zipcomm.build_info()
    if not zipcomm.cuda_available():
        why = "built without the GPU codec" if not info["cuda_compiled"] else info["cuda_reason"]
        print(f"weight_sync.py needs a GPU and zipcomm's GPU codec: {why}; skipped")
        return 0

    shapes = transformer_shapes(args.layers, hidden=2048, intermediate=5632, kv_hidden=512, vocab=32000)
    trainer = {name: fw.weights(shape, args.device, norm=name.endswith("norm.weight")) for name, shape in shapes}
    inference = {name: fw.empty_like(t, recv_device) for name, t in trainer.items()}
    total = sum(t.nbytes for t in trainer.values())
    print(f"{type(fw).__name__}: {len(trainer)} {fw.dtype_name} tensors, {total / 2**30:.2f} GiB; link={args.link} "
          f"(GPU {args.device} -> GPU {recv_device})")

    def clear() -> None:
        for t in inference.values():
            fw.zero(t)

    with zipcomm.WeightSync(trainer, inference, link=args.link, raw=True) as raw:
        raw_rates = timed(raw, args.iterations, lambda: None)
    with zipcomm.WeightSync(trainer, inference, link=args.link) as coded:
        print(f"link modes: {coded.modes()}")
        coded_rates = timed(coded, args.iterations, clear)  # cleared first: what is checked below is this sync's
    exact = all(fw.same_bits(trainer[k], inference[k]) for k in trainer)
    raw_rate, coded_rate = statistics.median(raw_rates), statistics.median(coded_rates)
    print(f"raw:   {raw_rate:7.2f} GB/s (median of {args.iterations})")
    print(f"coded: {coded_rate:7.2f} GB/s (median of {args.iterations}): {coded_rate / raw_rate:.2f}x raw")
    print(f"inference copy bit-exact: {'yes' if exact else 'NO'}")
    if args.quantize is not None:
        if not isinstance(fw, Torch):
            print("--quantize needs torch (the EAR runs a model over the tensors); skipped")
        elif not quantized_sync(fw, args, trainer, inference, recv_device):
            print(f"the plan does not fit {args.quantize} bits per parameter")
            return 1
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
