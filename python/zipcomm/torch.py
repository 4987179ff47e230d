"""PyTorch DDP communication hooks: gradient buckets sent compressed (lossless) and reduced in a fixed order.

    >>> import zipcomm
    >>> model = torch.nn.parallel.DistributedDataParallel(module)
    >>> model.register_comm_hook(zipcomm.torch.CompressedAllreduceState(), zipcomm.torch.allreduce_hook)

``allreduce_hook`` compresses each bf16/fp16/fp32 bucket of at least ``threshold_bytes`` with
``zipcomm.compress`` (the host codec for CPU tensors; for CUDA tensors the GPU codec when
``zipcomm.cuda_available()``, else a copy through host memory), exchanges the compressed bytes with
torch.distributed's own collectives (``all_gather`` of the stream sizes, then ``all_gather`` of the streams
padded to the largest; gloo and NCCL alike), decompresses every rank's stream on every rank and reduces them
there. Other dtypes and smaller buckets go uncompressed through the same gather and the same reduction.

Reduction order and precision (the same in both hooks, so their results are bit-identical):
    * the contributions are added in rank order, ``((g0 + g1) + g2) + ... + g[world-1]``, elementwise;
    * bf16 and fp16 are summed in float32, divided by the world size in float32 (``average=True``) and rounded
      to the bucket's dtype once, at the end; fp32 and other floating dtypes are summed and divided in their
      own dtype (no wider accumulator: an fp32 model does its arithmetic in fp32, as DDP's default does);
    * every rank does the same arithmetic on the same bits, so every rank gets the same result, bit for bit,
      and a result does not depend on the threshold, the codec path or the bucket's device.

How it differs from ``dist.all_reduce`` (DDP's default hook): NCCL and gloo reduce in an order of their own
(ring or tree segments, which depends on the topology and message size) and in the bucket's dtype, and DDP's
default divides each gradient by the world size before the sum. Results therefore agree with the default to
rounding, not bit for bit; ``uncompressed_allreduce_hook`` is the reference with this hook's exact arithmetic.

Cost: each rank receives the other ranks' streams, (world_size - 1) x the compressed bucket, and decodes all
of them; a ring all_reduce moves about 2 x (world_size - 1) / world_size x the bucket. With bf16 gradients
(compressed to about 0.67) that is fewer bytes for 2 ranks, about as many for 3 and more beyond: what the hook
gives at any size is a lossless transfer and a reduction that is the same bits on every rank, in every run,
whatever the backend's algorithm. The hooks are synchronous: the bucket is reduced when the hook returns, and
the returned future is already complete.

``measure_quant_sensitivity(model, logits_fn)`` measures, for the quantization tier's planner
(``zipcomm.quant.plan``), how much each weight matrix of a model moves its output distribution when quantized.

This module needs PyTorch; ``import zipcomm`` does not (``zipcomm.torch`` is loaded on first use).
"""

# No `from __future__ import annotations`: DDP's register_comm_hook compares the hook's annotations with
# dist.GradBucket and torch.futures.Future[torch.Tensor] as objects, and refuses strings.
from dataclasses import dataclass, field
from typing import Iterable, Optional, Union

try:
    import torch
    import torch.distributed as dist
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("zipcomm.torch needs PyTorch (pip install torch); the rest of zipcomm does not") from error

import zipcomm

__all__ = [
    "CompressedAllreduceState",
    "allreduce_hook",
    "measure_quant_sensitivity",
    "reduce_in_rank_order",
    "uncompressed_allreduce_hook",
]

#: Dtypes the hook compresses (those it reduces in a wider type or its own); other bucket dtypes, fp8 among
#: them, are sent uncompressed.
COMPRESSED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

#: Default of CompressedAllreduceState.threshold_bytes: below it the 64-byte header, the chunk table and the two
#: extra collectives cost more than the bytes saved.
DEFAULT_THRESHOLD_BYTES = 64 * 1024


@dataclass
class CompressedAllreduceState:
    """State of ``allreduce_hook`` (and of ``uncompressed_allreduce_hook``, which ignores the threshold).

    Attributes:
        process_group: the group to reduce over; None is the default group.
        threshold_bytes: bf16/fp16/fp32 buckets of at least this many bytes are compressed, smaller ones are
            sent as they are (the result is the same either way).
        average: divide the sum by the group's size, as DDP's default hook does; False leaves the sum.
        code: the codec's exponent code: "pair" (the denser) or "fixed" (the faster; zipcomm.compress).
        compressed_buckets, uncompressed_buckets: buckets this rank has reduced each way so far.
        compressed_input_bytes, compressed_output_bytes: bytes of this rank's compressed buckets before and
            after compression (their ratio is what the compression saved on the wire).
    """

    process_group: Optional[dist.ProcessGroup] = None
    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES
    average: bool = True
    code: str = "pair"
    compressed_buckets: int = field(default=0, init=False)
    uncompressed_buckets: int = field(default=0, init=False)
    compressed_input_bytes: int = field(default=0, init=False)
    compressed_output_bytes: int = field(default=0, init=False)


def _completed_future(tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    # A future that knows the device records the current stream, so that DDP's later use of the result waits.
    devices: Optional[list[Union[int, str, torch.device]]] = [tensor.device] if tensor.is_cuda else None
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=devices)
    future.set_result(tensor)
    return future


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    if dtype.is_floating_point or dtype.is_complex:
        return dtype
    raise TypeError(f"zipcomm.torch: cannot reduce a bucket of {dtype} (gradients are floating point)")


def reduce_in_rank_order(contributions: Iterable[torch.Tensor], dtype: torch.dtype, world_size: int,
                         average: bool) -> torch.Tensor:
    """The hooks' reduction: the sum of the contributions in the order given (rank 0 first), then / world_size.

    Args:
        contributions: an iterable of 1-D tensors of ``dtype``, all on one device; consumed one at a time, so
            a generator keeps at most one decoded contribution alive.
        dtype: the bucket's dtype; bf16/fp16 are summed and divided in float32 and rounded once at the end,
            other floating dtypes are summed in their own dtype.
        world_size: the divisor when ``average``.
        average: divide by ``world_size``.

    Returns:
        A new tensor of ``dtype``.
    """
    accumulator_dtype = _accumulator_dtype(dtype)
    total: Optional[torch.Tensor] = None
    for contribution in contributions:
        if total is None:
            total = contribution.to(accumulator_dtype, copy=True)
        else:
            total.add_(contribution.to(accumulator_dtype))
    if total is None:
        raise ValueError("zipcomm.torch: no contributions to reduce")
    if average:
        # A 0-dim tensor on the same device, not a Python number: CUDA kernels turn division by a scalar into
        # a multiplication by its reciprocal, which can differ from true division in the last bit.
        total.div_(torch.tensor(world_size, dtype=accumulator_dtype, device=total.device))
    return total.to(dtype)


def _all_gather_bytes(payload: torch.Tensor,
                      group: Optional[dist.ProcessGroup]) -> tuple[list[torch.Tensor], list[int]]:
    """Every rank's 1-D uint8 payload (sizes may differ), as [rank 0, rank 1, ...] and their sizes."""
    world_size = dist.get_world_size(group)
    size = torch.tensor([payload.numel()], dtype=torch.int64, device=payload.device)
    sizes = [torch.empty_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size, group=group)
    byte_counts = [int(n) for n in torch.cat(sizes).tolist()]
    padded_bytes = max(byte_counts)
    if payload.numel() == padded_bytes:
        padded = payload
    else:
        padded = torch.zeros(padded_bytes, dtype=torch.uint8, device=payload.device)
        padded[: payload.numel()].copy_(payload)
    gathered = [torch.empty(padded_bytes, dtype=torch.uint8, device=payload.device) for _ in range(world_size)]
    dist.all_gather(gathered, padded, group=group)  # the GPU codec runs on the current stream, after it
    return gathered, byte_counts


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).view(torch.uint8)


def _reduce_uncompressed(tensor: torch.Tensor, group: Optional[dist.ProcessGroup], average: bool) -> None:
    # Gathered as bytes: every backend moves uint8, not every one moves bf16.
    world_size = dist.get_world_size(group)
    gathered = [torch.empty_like(_bytes_of(tensor)) for _ in range(world_size)]
    dist.all_gather(gathered, _bytes_of(tensor), group=group)
    contributions = (g.view(tensor.dtype) for g in gathered)
    tensor.copy_(reduce_in_rank_order(contributions, tensor.dtype, world_size, average).view_as(tensor))


def _compress(tensor: torch.Tensor, code: str) -> torch.Tensor:
    """The stream of a bucket as a uint8 tensor on the bucket's device."""
    flat = tensor.reshape(-1)
    if flat.is_cuda and zipcomm.cuda_available():
        # On the current stream, after the bucket's gradients; check=True: the stream's exact bytes, errors raised.
        return zipcomm.compress(flat, code, check=True)
    stream = torch.from_numpy(zipcomm.compress(flat.cpu(), code))
    return stream.to(flat.device)


def _decompress(stream: torch.Tensor, dtype: torch.dtype, numel: int) -> torch.Tensor:
    """A stream (uint8 tensor) decoded into a new 1-D tensor on the stream's device."""
    decoded = torch.empty(numel, dtype=dtype, device=stream.device)
    if stream.is_cuda and not zipcomm.cuda_available():
        host = torch.empty(numel, dtype=dtype)
        zipcomm.decompress(stream.cpu(), out=host)
        return decoded.copy_(host)
    zipcomm.decompress(stream, out=decoded)  # on a GPU: stream-ordered, its error raised by the caller's synchronize
    return decoded


def _reduce_compressed(tensor: torch.Tensor, state: CompressedAllreduceState) -> None:
    group = state.process_group
    world_size = dist.get_world_size(group)
    stream = _compress(tensor, state.code)
    state.compressed_buckets += 1
    state.compressed_input_bytes += tensor.numel() * tensor.element_size()
    state.compressed_output_bytes += stream.numel()
    gathered, byte_counts = _all_gather_bytes(stream, group)
    # Decoded one rank at a time, in rank order, each added as soon as it is decoded.
    contributions = (_decompress(g[:n], tensor.dtype, tensor.numel()) for g, n in zip(gathered, byte_counts))
    tensor.copy_(reduce_in_rank_order(contributions, tensor.dtype, world_size, state.average).view_as(tensor))
    if tensor.is_cuda:
        zipcomm.synchronize()  # one wait for every rank's decode: a corrupt stream raises here


def allreduce_hook(state: Optional[CompressedAllreduceState],
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket sent compressed and reduced in rank order (see the module's help).

    Use: ``model.register_comm_hook(CompressedAllreduceState(), allreduce_hook)``. bf16/fp16/fp32 buckets of
    at least ``state.threshold_bytes`` are compressed; the others are gathered as they are. Either way the
    bucket becomes the sum of every rank's bucket, added in rank order (bf16/fp16 in float32, rounded once),
    divided by the world size when ``state.average``: bit-identical on every rank and to
    ``uncompressed_allreduce_hook``. None as state means ``CompressedAllreduceState()``.

    Returns:
        A completed future holding the bucket's buffer, which now holds the result.

    Raises:
        zipcomm.ZipcommError: a received stream does not decode (corrupt or truncated on the way).
        TypeError: a bucket of a dtype that cannot be averaged (not floating point).
    """
    if state is None:
        state = CompressedAllreduceState()
    tensor = bucket.buffer()
    if tensor.dtype in COMPRESSED_DTYPES and tensor.numel() * tensor.element_size() >= state.threshold_bytes:
        _reduce_compressed(tensor, state)
    else:
        state.uncompressed_buckets += 1
        _reduce_uncompressed(tensor, state.process_group, state.average)
    return _completed_future(tensor)


def uncompressed_allreduce_hook(state: Optional[CompressedAllreduceState],
                                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: ``allreduce_hook``'s gather and reduction without compression (its reference).

    Every rank's bucket is gathered as it is and reduced as ``allreduce_hook`` does (rank order; bf16/fp16
    in float32, rounded once; divided by the world size when ``state.average``), so both hooks give the same
    bits. ``state.threshold_bytes`` and ``state.code`` are not used; None as state means the defaults.
    """
    if state is None:
        state = CompressedAllreduceState()
    tensor = bucket.buffer()
    state.uncompressed_buckets += 1
    _reduce_uncompressed(tensor, state.process_group, state.average)
    return _completed_future(tensor)


@torch.no_grad()
def measure_quant_sensitivity(model: torch.nn.Module, logits_fn, names: Optional[Iterable[str]] = None,
                              choices=None, progress=None):
    """Each parameter's sensitivity to quantization: 1 - EAR of the model with only that parameter quantized.

    Args:
        model: the model; its parameters are replaced one at a time, in place, and restored (bit for bit).
        logits_fn: ``logits_fn(model)`` runs the model on fixed calibration inputs and returns float32 logits
            of shape (positions, vocabulary) (or anything ``zipcomm.quant.ear`` takes); called once for the
            original and once per (parameter, choice).
        names: the parameters to plan (default: every bf16 / fp16 / fp32 parameter with at least 2 dimensions,
            the weight matrices and embeddings).
        choices: ``zipcomm.quant.Choice`` candidates (default ``zipcomm.quant.default_choices()``).
        progress: called with (name, choice, EAR) after each measurement.

    Returns:
        name -> ``zipcomm.quant.Sensitivity``, for ``zipcomm.quant.plan``.
    """
    params = dict(model.named_parameters())
    if names is None:
        names = [n for n, p in params.items() if p.dim() >= 2 and p.dtype in COMPRESSED_DTYPES]
    names = list(names)
    for n in names:
        if n not in params:
            raise KeyError(f"zipcomm.torch.measure_quant_sensitivity: the model has no parameter {n!r}")
    reference = logits_fn(model).detach().float().contiguous()

    def evaluate(replaced):
        ((name, value),) = replaced.items()
        p = params[name]
        saved = p.data.clone()
        try:
            p.data.copy_(value)
            logits = logits_fn(model).detach().float().contiguous()
        finally:
            p.data.copy_(saved)
        return zipcomm.quant.ear(reference, logits)

    tensors = {n: params[n].data.detach().clone(memory_format=torch.contiguous_format) for n in names}
    return zipcomm.quant.measure_sensitivity(tensors, evaluate, choices, progress)
