"""zipcomm.WeightSync: compressed copies of a set of CUDA tensors into another set (RL weight sync), losslessly or,
with a quantization plan, through the LOSSY quantization tier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from . import _arrays
from . import _zipcomm_ext as _ext

if TYPE_CHECKING:
    from .quant import Choice, QuantPlan

Tensors = Union[Sequence[Any], Mapping[str, Any]]


@dataclass(frozen=True)
class SyncResult:
    """What one WeightSync.sync() moved.

    Attributes:
        bytes: payload bytes moved (the tensors' sizes; the link moved fewer when coded).
        seconds: without a plan, GPU time of the sync on the receiving side's stream (CUDA events), from its
            start after the stream's earlier work until the receiver had decoded and checked every tensor; with
            a plan, the host's wall time of the whole sync (quantize, both transfers, dequantize).
        gb_per_s: bytes / seconds / 1e9 (0 for an empty sync).
        quantized_bytes: with a plan, the bytes of the quantized messages that replaced the planned tensors
            (their payload is counted in ``bytes`` at the tensors' own size); 0 without one.
    """

    bytes: int
    seconds: float
    quantized_bytes: int = 0

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


def _pairs(src: Tensors, dst: Tensors) -> tuple[list[Any], list[Any], list[str]]:
    """src and dst as matching lists, with a name per pair (the dict key, or the list index) for messages."""
    if isinstance(src, Mapping) != isinstance(dst, Mapping):
        raise TypeError("zipcomm.WeightSync: src and dst must both be dicts or both be lists of tensors")
    if isinstance(src, Mapping):
        missing = [k for k in src if k not in dst]
        extra = [k for k in dst if k not in src]
        if missing or extra:
            raise ValueError(f"zipcomm.WeightSync: src and dst have different keys (only in src: {missing[:5]}, "
                             f"only in dst: {extra[:5]})")
        names = [str(k) for k in src]
        assert isinstance(dst, Mapping)
        return [src[k] for k in src], [dst[k] for k in src], names
    if isinstance(src, (str, bytes)) or not isinstance(src, Sequence) or not isinstance(dst, Sequence):
        raise TypeError("zipcomm.WeightSync: src and dst must be lists (or tuples) or dicts of CUDA tensors")
    if len(src) != len(dst):
        raise ValueError(f"zipcomm.WeightSync: src holds {len(src)} tensors but dst {len(dst)}")
    return list(src), list(dst), [f"[{i}]" for i in range(len(src))]


class WeightSync:
    """Copies a set of CUDA tensors (a trainer's weights) into a matching set (an inference copy's), compressed
    losslessly on the way, through zipcomm's P2P links (include/zipcomm/comm/p2p.cuh).

    ``WeightSync(src, dst, link="host", raw=False)``

    Args:
        src, dst: matching lists (pairs by position) or dicts (pairs by key; the same keys) of CUDA DLPack
            arrays (torch, CuPy, ...) of bfloat16, float16 or float32; each pair of the same shape and dtype,
            both C-contiguous. All src tensors on one GPU, all dst tensors on one GPU. Other dtypes (fp8,
            integers, ...) are refused with TypeError: the links move bf16, fp16 and fp32 only; send such
            tensors another way. A mismatched pair (shape, dtype, keys, count) raises ValueError naming it. The
            tensors' memory is bound here: in-place updates (an optimizer step) are what the next sync moves;
            a tensor replaced by a new one needs a new WeightSync.
        link: how the data travels.
            "host": GPU -> pinned host memory ring -> the same GPU (HostStagingLink: the link a single GPU has,
                and the one where coding pays most: ~1.3-1.4x a raw pipelined copy on PCIe). src and dst on
                one GPU.
            "peer": the sender's GPU writes frames straight into the receiver's GPU memory (PeerLink: NVLink
                or PCIe peer writes; peer access is enabled). src and dst on two GPUs, or on one.
        raw: sync() sends uncompressed (the links' raw pipelined copy): the baseline to compare with.
        quantize: a ``zipcomm.quant.QuantPlan`` (LOSSY, opt-in): every tensor the plan gives a choice (by
            name: the dict key, or "[i]" for lists) is quantized on the sending GPU into a message
            (docs/QUANT.md), the messages travel bit-exact over a link of their own (raw), and the receiving
            GPU rebuilds dst from them; dst then holds the plan's approximation, not src's bits. Tensors the plan
            leaves out (or sets to None) go as without a plan. The message buffers are made once, on each side,
            here. The EAR of what arrived is the caller's to measure (run the
            model: ``zipcomm.quant.ear``).

    One link per element type is created here and reused by every sync (each holds its own buffers: a host
    link about 0.4 GiB of pinned memory and twice that on the GPU). Batches whose total is below a link's
    bypass threshold (4 MiB) go raw either way.

    ``sync(stream=None) -> SyncResult`` moves every tensor: one batch per element type (transfer_many, one
    pipeline per batch), ordered after the work already on ``stream``: an int cudaStream_t, a stream object
    (torch's .cuda_stream, CuPy's .ptr), or None: torch's current stream for torch tensors, else the default
    stream. With link="peer" the stream is the sending GPU's and the receive side runs on the receiving GPU's
    default stream. It returns only when every receiver has decoded every tensor and checked it against its
    chunk checks (the links' wait()): dst then holds src's bits exactly, and later work on any stream sees
    them. It raises ``zipcomm.ZipcommError`` (``.status``, e.g. Status.timeout or Status.checksum_mismatch) when
    a link reports an error, RuntimeError for a CUDA failure; the links are reset after an error, so the next
    sync may be tried. Nothing is in flight when sync returns or raises.

    ``close()`` (or leaving a ``with`` block) frees the links and lets go of the tensors.

    Raises (constructor): TypeError, ValueError as above; RuntimeError when this zipcomm was built without the
    GPU codec (no nvcc at build time; build_info()["cuda_compiled"]), or no GPU is usable, or a link cannot be
    created.
    """

    def __init__(self, src: Tensors, dst: Tensors, link: str = "host", raw: bool = False,
                 quantize: Optional["QuantPlan"] = None) -> None:
        from . import quant as _quant

        srcs, dsts, names = _pairs(src, dst)
        if link not in ("host", "peer"):
            raise ValueError(f"zipcomm.WeightSync: link must be 'host' or 'peer', got {link!r}")
        if quantize is not None and not isinstance(quantize, _quant.QuantPlan):
            raise TypeError("zipcomm.WeightSync: quantize must be a zipcomm.quant.QuantPlan, got "
                            f"{type(quantize).__name__}")
        self.link = link
        self.raw = bool(raw)
        self.plan = quantize
        self._first_src = srcs[0] if srcs else None
        # (src, dst, choice, message on the send side, message on the receive side) of the planned tensors
        self._quantized: list[tuple[Any, Any, "Choice", Any, Any]] = []
        self._message_links: Optional[Any] = None
        if quantize is not None:
            unknown = [n for n, c in quantize.choices.items() if c is not None and n not in names]
            if unknown:
                raise ValueError(f"zipcomm.WeightSync: the plan names tensors that are not synced: {unknown[:5]}")
            lossless = [(s_, d_, n) for s_, d_, n in zip(srcs, dsts, names) if quantize.choices.get(n) is None]
            for s_, d_, n in zip(srcs, dsts, names):
                c = quantize.choices.get(n)
                if c is not None:
                    size = _quant.max_quantized_bytes(_arrays.numel(s_), c.bits, c.group, c.mode)
                    self._quantized.append((s_, d_, c, _arrays.empty_bytes_like(s_, size), _arrays.empty_bytes_like(d_, size)))
            srcs, dsts, names = [x[0] for x in lossless], [x[1] for x in lossless], [x[2] for x in lossless]
            if self._quantized:
                self._message_links = _ext.WeightSyncLinks([q[3] for q in self._quantized],
                                                           [q[4] for q in self._quantized],
                                                           [f"message {i}" for i in range(len(self._quantized))],
                                                           link, True)
        self._links: Optional[Any] = _ext.WeightSyncLinks(srcs, dsts, names, link)

    @property
    def bytes(self) -> int:
        """Payload bytes of one sync (the tensors' sizes)."""
        return int(self._live().bytes) + sum(int(q[0].nbytes) for q in self._quantized)

    def modes(self) -> dict[str, str]:
        """How each element type's link runs: host link "stream" (the GPU schedules the copies) or "copy" (a
        host relay, where the driver lacks stream memory operations); "peer" for peer links."""
        return dict(self._live().modes())

    def sync(self, stream: Any = None) -> SyncResult:
        """Moves every src tensor into its dst; see help(zipcomm.WeightSync)."""
        links = self._live()
        from . import quant as _quant

        handle = _arrays.stream_handle(stream, self._first_src, "zipcomm.WeightSync.sync")
        if self._message_links is None:
            nbytes, seconds = links.sync(self.raw, handle)
            return SyncResult(int(nbytes), float(seconds))
        start = time.perf_counter()
        # Quantize on the sync's stream (after its earlier work), the messages and the other tensors over the
        # links (which return once every receiver is done), then rebuild on the receiver and wait for it.
        for s_, _, c, msg, _ in self._quantized:
            _quant.quantize(s_, c.bits, group=c.group, mode=c.mode, out=msg, stream=handle)
        self._message_links.sync(True, handle)
        nbytes, _ = links.sync(self.raw, handle)
        quantized = 0
        for s_, d_, _, _, msg in self._quantized:
            # On the receiving GPU's current stream (with link="peer" `handle` is the sending GPU's): the links
            # returned once every receiver was done.
            _quant.dequantize(msg, out=d_)
            nbytes += int(s_.nbytes)
            quantized += int(msg.nbytes)
        from . import synchronize

        synchronize()  # waits for them; raises the first error of zipcomm's GPU calls not yet waited for
        return SyncResult(int(nbytes), time.perf_counter() - start, int(quantized))

    def close(self) -> None:
        """Frees the links (waiting for their work) and releases the tensors. Idempotent."""
        if self._links is not None:
            self._links.close()
            self._links = None
        if self._message_links is not None:
            self._message_links.close()
            self._message_links = None
        self._quantized = []
        self._first_src = None

    def __enter__(self) -> "WeightSync":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> Any:
        if self._links is None:
            raise ValueError("zipcomm.WeightSync: closed")
        return self._links

    def __repr__(self) -> str:
        state = "closed" if self._links is None else f"{self._links.bytes} bytes"
        return f"zipcomm.WeightSync(link={self.link!r}, raw={self.raw}, {state})"
