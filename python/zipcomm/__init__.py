"""zipcomm: lossless compression of bf16, fp16, fp32 and fp8 (e4m3, e5m2) tensors.

A thin client of the zipcomm C++ library (header-only, include/zipcomm): the host reference codec for arrays
in host memory, the device-wide GPU codec for arrays on a CUDA device (when the package was built with nvcc).
Both write the same bytes: wire format v6 (docs/FORMAT.md). Every decoded bit equals the input bit (NaN
payloads, infinities, subnormals and -0 included).

Arrays are taken through DLPack: NumPy, torch, CuPy and other DLPack arrays, with no dependency on any of them
except NumPy. NumPy has no bfloat16 and no fp8: pass ``ml_dtypes.bfloat16`` / ``ml_dtypes.float8_e4m3fn`` /
``ml_dtypes.float8_e5m2`` arrays, or bit patterns as uint16 with ``dtype="bf16"`` or as uint8 with
``dtype="fp8_e4m3"`` / ``dtype="fp8_e5m2"``. torch's ``float8_e4m3fn`` and ``float8_e5m2`` tensors are taken
as their bytes (a uint8 view), so they work whether or not the torch version exports fp8 through DLPack.

    >>> import numpy as np, zipcomm
    >>> x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    >>> buf = zipcomm.compress(x)                  # numpy uint8 array: one wire format v6 stream
    >>> y = zipcomm.decompress(buf)                # 1-D float32, bit-identical to x.ravel()
    >>> zipcomm.info(buf)["elements"]
    100000

Errors of the codec raise ``ZipcommError`` (``.status`` is a ``zipcomm.Status``); wrong argument types raise
TypeError, wrong shapes, layouts or values ValueError. On CUDA arrays the codec is stream-ordered (the current
stream of the array's framework, or ``stream=``) and does not wait for the GPU: ``zipcomm.synchronize()`` (or
``check=True``) raises the errors of those calls; ``compressed_size(buf)`` says how much of a GPU compress
result is the stream.

``zipcomm.WeightSync`` copies a set of CUDA tensors (a trainer's weights) into another (an inference copy's),
compressed on the way through zipcomm's P2P links, bit-exact: ``help(zipcomm.WeightSync)``.

``zipcomm.quant`` is the LOSSY, opt-in quantization tier (its own message format, the Expected Acceptance Rate,
a bit-width planner): ``help(zipcomm.quant)``.

``zipcomm.torch`` (loaded on first use, needs PyTorch) holds DDP communication hooks that send gradient
buckets compressed and reduce them in rank order: ``help(zipcomm.torch)``.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

import numpy as np
import numpy.typing as npt

from . import _arrays
from . import _zipcomm_ext as _ext
from ._errors import ZipcommError
from ._weight_sync import SyncResult, WeightSync
from ._zipcomm_ext import DeviceArray, Status

__all__ = [
    "DeviceArray",
    "Status",
    "SyncResult",
    "WeightSync",
    "ZipcommError",
    "quant",
    "build_info",
    "compress",
    "compressed_size",
    "cuda_available",
    "decompress",
    "info",
    "max_compressed_bytes",
    "stats",
    "status_string",
    "synchronize",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "CHUNK_ELEMENTS",
]

__version__ = "0.1.0"

#: Version of the wire format this package writes and reads (docs/FORMAT.md).
FORMAT_VERSION: int = _ext.FORMAT_VERSION
#: Bytes of the stream header.
HEADER_BYTES: int = _ext.HEADER_BYTES
#: Elements in the largest chunk (the unit of independent decoding and of the chunk checks); a stream's own
#: chunk size is info(buf)["chunk_elements"]: 4096, 8192 or 16384, the smaller ones for short messages.
CHUNK_ELEMENTS: int = _ext.CHUNK_ELEMENTS

try:  # optional: NumPy's bfloat16 and fp8
    from ml_dtypes import bfloat16 as _bfloat16
    from ml_dtypes import float8_e4m3fn as _float8_e4m3fn
    from ml_dtypes import float8_e5m2 as _float8_e5m2
except ImportError:  # pragma: no cover - depends on the environment
    _bfloat16 = _float8_e4m3fn = _float8_e5m2 = None

_DTYPE_NAMES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "fp8_e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2",
}
# The element types whose arrays are passed as their bytes: NumPy's (ml_dtypes) and torch's fp8 names.
_FP8_NAMES = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}

_STATUS_HELP = """
    Status values (``zipcomm.Status``, include/zipcomm/config.hpp), raised as ``ZipcommError``:
        invalid_argument     unknown dtype/code, null pointer, bad alignment
        buffer_too_small     destination below what the operation needs
        bad_header           magic, header check, dtype, code, reserved words or sizes of the header are wrong
        corrupt_stream       truncated stream, or a chunk table / chunk / padding that breaks the format
        size_mismatch        element counts of operands disagree
        timeout              a bounded wait on a peer expired (communication only)
        checksum_mismatch    a chunk decoded to elements whose check differs from the stored one
        unsupported_version  a stream of another format version (v1 to v4 streams are refused)
    Every single-bit flip of a stream gives bad_header, corrupt_stream or checksum_mismatch, never wrong data
    (docs/FORMAT.md, section 14)."""

_FORMAT_HELP = """
    Wire format v6 (docs/FORMAT.md; v5 streams are read too): one self-contained stream per array,
    little-endian:
        [0, 64)            header: magic "ZPCM", version 6, dtype (1 bf16, 2 fp16, 3 fp32, 4 fp8_e4m3,
                           5 fp8_e5m2), code (3 pair), chunk_log2 (12, 13 or 14), element count, total bytes,
                           section offsets, FNV-1a check
        plane0             stored raw: one byte per element, the sign and the top 7 mantissa bits; fp8: the
                           sign and the mantissa as bit-planes, 4 (e4m3) or 3 (e5m2) planes of 32 bytes per
                           256-element tile
        width codes        fp16, fp32: 2 bits per 256-element tile, how many low mantissa bits the tile keeps
                           (fp32 16, 8 or 0; fp16 3 or 0): bits that are zero in every element are dropped, so
                           bf16 values widened to fp32 or converted to fp16 cost what bf16 costs
        chunk tables       per chunk of 2^chunk_log2 elements: end offsets of its exponent stream and of its low
                           bits (fp16, fp32), then a 32-bit check of its elements
        low section        per chunk, per tile: the low mantissa bits it keeps
        exponent section   per chunk: the exponents coded two at a time with a fixed prefix code (the pair
                           code) on their distance below a per-tile (256 elements) maximum, one bit stream per
                           lane of a warp, or stored raw when that is not smaller
    Sections are 16-byte aligned and the padding is zero. Only the exponents are coded, so real tensors come
    to about 0.67 of their size (bf16), 0.68 (fp16 holding bf16 values), 0.33 (fp32 holding bf16 values) to
    0.85 (fp32 with full mantissas), 0.83 (fp8_e4m3), 0.71 (fp8_e5m2); random bits come to slightly over 1
    (max_compressed_bytes is the bound)."""


def _canonical_dtype(dtype: Any, where: str) -> Optional[str]:
    """'bf16' / 'fp16' / 'fp32' / 'fp8_e4m3' / 'fp8_e5m2' from a name, a NumPy dtype or type, or a torch dtype;
    None stays None."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.partition(".")[0] == "torch":
        name = str(dtype).rpartition(".")[2]  # torch.bfloat16 -> bfloat16
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{where}: dtype must be 'bf16', 'fp16', 'fp32', 'fp8_e4m3', 'fp8_e5m2' or a float "
                            f"dtype, got {dtype!r}") from None
    canonical = _DTYPE_NAMES.get(name.lower())
    if canonical is None:
        raise TypeError(f"{where}: unsupported dtype {name!r} (zipcomm codes bf16, fp16, fp32, fp8_e4m3 and "
                        "fp8_e5m2)")
    return canonical


def _fp8_of(x: Any) -> Optional[str]:
    """'fp8_e4m3' / 'fp8_e5m2' for a NumPy (ml_dtypes) or torch fp8 array, else None."""
    if isinstance(x, np.ndarray):
        return _FP8_NAMES.get(x.dtype.name)
    if _framework(x) == "torch":
        return _FP8_NAMES.get(str(getattr(x, "dtype", "")).rpartition(".")[2])
    return None


def _as_fp8_bytes(x: Any, fp8: str, dtype: Optional[str], where: str) -> tuple[Any, str]:
    """An fp8 array as a uint8 view of its bytes (DLPack has no fp8 in NumPy, nor in older torch)."""
    if dtype not in (None, fp8):
        raise TypeError(f"{where}: the array is {fp8} but dtype={dtype!r} was given")
    if isinstance(x, np.ndarray):
        return x.view(np.uint8), fp8
    import torch  # type: ignore[import-not-found, unused-ignore]

    return x.view(torch.uint8), fp8


def _array_argument(x: Any, dtype: Optional[str], where: str) -> tuple[Any, Optional[str]]:
    """The array as the extension takes it (DLPack), and its declared dtype."""
    fp8 = _fp8_of(x)
    if fp8 is not None:
        return _as_fp8_bytes(x, fp8, dtype, where)
    if isinstance(x, np.ndarray):
        if x.dtype.name == "bfloat16":
            # ml_dtypes arrays have no DLPack type code: pass their bits.
            if dtype not in (None, "bf16"):
                raise TypeError(f"{where}: the array is bfloat16 but dtype={dtype!r} was given")
            return x.view(np.uint16), "bf16"
        if not x.dtype.isnative:
            raise TypeError(f"{where}: the array is {x.dtype.str}, not in native byte order; "
                            "pass x.astype(x.dtype.newbyteorder('='))")
        return x, dtype
    if hasattr(x, "__dlpack__") or isinstance(x, memoryview):
        return x, dtype
    raise TypeError(f"{where}: expected an array (NumPy, torch, CuPy or another DLPack array), got {type(x).__name__}")


def _stream_argument(buf: Any, where: str) -> Any:
    if isinstance(buf, (bytes, bytearray, memoryview, np.ndarray)) or hasattr(buf, "__dlpack__"):
        return buf
    raise TypeError(f"{where}: expected a compressed stream (uint8 array, bytes, bytearray), got {type(buf).__name__}")


def _out_target(out: Any, where: str) -> Any:
    """An output array as the extension takes it: NumPy bfloat16 and fp8 arrays as views of their bits."""
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError(f"{where}: out is read-only")
    if isinstance(out, np.ndarray) and out.dtype.name == "bfloat16":
        return out.view(np.uint16)
    fp8 = _fp8_of(out)
    if fp8 is not None:
        return _as_fp8_bytes(out, fp8, None, where)[0]
    return out


def _framework(x: Any) -> str:
    return type(x).__module__.partition(".")[0]


def _chunk_log2(chunk_elements: int | None, where: str) -> int:
    """log2 of chunk_elements (4096, 8192 or 16384); 0 for None: the default for the message size."""
    if chunk_elements is None:
        return 0
    if (isinstance(chunk_elements, bool) or not isinstance(chunk_elements, (int, np.integer))
            or chunk_elements not in (4096, 8192, 16384)):
        raise ValueError(f"{where}: chunk_elements is 4096, 8192 or 16384, got {chunk_elements!r}")
    return int(chunk_elements).bit_length() - 1


def _threads(threads: Any, where: str) -> int:
    """threads= as the host codec takes it: 0 for one per hardware thread."""
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= 4096:
        raise ValueError(f"{where}: threads is an integer from 1 to 4096 or None, got {threads!r}")
    return int(threads)


def compress(x: Any, code: str = "pair", *, dtype: Any = None, stream: Any = None, out: Any = None,
             check: bool = False, chunk_elements: int | None = None, threads: int | None = None) -> Any:
    """Compresses an array of bf16, fp16, fp32 or fp8 elements, losslessly, into one wire format v6 stream.

    Args:
        x: a C-contiguous array of any shape (its elements are taken in row-major order; the shape is not
            stored: decompress gives them back as 1-D). bfloat16 (torch.bfloat16, ml_dtypes.bfloat16),
            float16, float32, fp8 (torch.float8_e4m3fn / torch.float8_e5m2, ml_dtypes.float8_e4m3fn /
            ml_dtypes.float8_e5m2, or a DLPack array of those types); or integer bit patterns with ``dtype``:
            uint8/int8 with "fp8_e4m3" or "fp8_e5m2", uint16/int16 with "bf16" or "fp16", uint32/int32 with
            "fp32". A non-contiguous array raises ValueError (pass a contiguous copy: numpy.ascontiguousarray(x),
            x.contiguous()); another dtype raises TypeError naming it.
        code: the exponent code: "pair" (prefix codewords, the denser: bf16 gradients to about 0.665) or
            "fixed" (3 bits per exponent at a fixed place, exceptions listed: about 0.70, fewer instructions
            per element, so faster where the codec gets few SMs). decompress reads the code from the stream.
        dtype: what the elements are when x holds bit patterns: "bf16", "fp16", "fp32", "fp8_e4m3" (OCP E4M3FN:
            no infinities, NaN S.1111.111), "fp8_e5m2" (or a NumPy/torch dtype). For a float array it may be
            given and must agree.
        stream (CUDA arrays): where the GPU codec runs: a torch or CuPy stream, or an int cudaStream_t. Default:
            the current stream of x's framework (torch.cuda.current_stream(), CuPy's current stream), else the
            legacy default stream. x must stay alive and unchanged until the work on that stream has run.
        out (CUDA arrays): a uint8 array on x's GPU of at least ``max_compressed_bytes(x.size, dtype,
            chunk_elements)`` bytes, 16-byte aligned, to write the stream into (default: a new one, from x's
            framework's allocator).
        check (CUDA arrays): wait for this call and raise its error; the result is then exactly the stream.
        chunk_elements: elements per chunk, the unit a GPU warp codes alone: 4096, 8192 or 16384. Default: 16384
            from 128 Mi elements up, 8192 from 16 Mi, 4096 below, so that a short message still occupies the GPU;
            smaller chunks cost about 0.004 (8192) and 0.012 (4096) of ratio on bf16.
        threads (host arrays): CPU threads that code chunks side by side, the GIL released (default: one per
            hardware thread; 1: the calling thread only). The bytes do not depend on it.

    Returns:
        For a host array (NumPy, torch CPU, ...): a 1-D numpy.ndarray of uint8, the stream, exactly as the C++
        host reference (zipcomm::host::compress) writes it. For an array on a CUDA device: the GPU codec
        (zipcomm::device::compress: the same bytes) is enqueued on ``stream`` and nothing waits for it; the
        result is ``out`` or a new uint8 array of x's framework (torch, CuPy; else a DLPack array) of
        max_compressed_bytes bytes, whose first ``compressed_size(result)`` bytes are the stream (the rest is
        unspecified; decompress and info ignore it). With ``check=True`` the call is waited for and the result is
        a view of exactly the stream. Its errors are raised by ``check=True`` or by ``zipcomm.synchronize()``.

    Raises:
        ZipcommError: the codec failed (see the statuses below).
        TypeError, ValueError: unsupported dtype, non-contiguous array, unknown code, a wrong out.
        RuntimeError: a CUDA array, but no usable GPU or no GPU codec in this build (see cuda_available()).
    """
    where = "zipcomm.compress"
    arg, declared = _array_argument(x, _canonical_dtype(dtype, where), where)
    log2 = _chunk_log2(chunk_elements, where)
    if _arrays.cuda_device(arg) is None:
        if stream is not None or out is not None:
            raise ValueError(f"{where}: stream= and out= are for CUDA arrays; x is on the host")
        return _ext.compress(arg, declared, code, log2, _threads(threads, where))
    if threads is not None:
        raise ValueError(f"{where}: threads= is for host arrays; x is on a GPU")
    buf = out if out is not None else _arrays.empty_bytes_like(x, _ext.compress_capacity(arg, declared, log2))
    call = _ext.compress_gpu(arg, declared, code, buf, log2, _arrays.stream_handle(stream, x, where))
    if not check:
        return buf
    return _arrays.prefix(buf, _ext.wait(call))


compress.__doc__ += _FORMAT_HELP + "\n" + _STATUS_HELP  # type: ignore[operator]


def decompress(buf: Any, out: Any = None, *, dtype: Any = None, stream: Any = None, check: bool = False,
               threads: int | None = None) -> Any:
    """Decompresses one wire format v5 or v6 stream, checking all of it (every chunk's check of its elements).

    Args:
        buf: the stream: a uint8 array (host or CUDA), bytes, bytearray or memoryview. Bytes after the
            stream's end (the header's total_bytes) are ignored. On a GPU it must start 16-byte aligned.
        out: optional array to fill, on the same device as buf, C-contiguous, of any shape, and of the stream's
            dtype (bf16: bfloat16, uint16 or int16; fp16: float16, uint16 or int16; fp32: float32, uint32 or
            int32; fp8: its float8 type, uint8 or int8). On the host it must hold exactly the stream's element
            count; on a GPU at least that many (the rest is left as it is). Its contents are unspecified if an
            error is raised.
        dtype (CUDA arrays): the stream's element type when out holds bit patterns (integers): it lets the call
            be enqueued without reading the stream's header.
        stream (CUDA arrays): where the GPU codec runs (as for compress). Without out (or with an integer out and
            no dtype) the stream's 64-byte header is read first, which waits for the work on that stream.
        check (CUDA arrays): wait for this call and raise its error.
        threads (host streams): CPU threads that decode chunks side by side (default: one per hardware thread;
            1: the calling thread only). The result and the error raised do not depend on it.

    Returns:
        out when given. Otherwise a new 1-D array of the stream's dtype and element count: on the host a
        numpy.ndarray, float16 / float32, and for bf16 / fp8 ml_dtypes.bfloat16 / float8_e4m3fn / float8_e5m2
        when ml_dtypes is installed, else uint16 / uint8 holding the bits; on a GPU an array of buf's framework
        (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2 in torch; uint16 / uint8 bits in CuPy), filled
        in stream order: its errors are raised by ``check=True`` or by ``zipcomm.synchronize()``.

    Raises:
        ZipcommError: a corrupt, truncated or foreign stream (bad_header, corrupt_stream, checksum_mismatch,
            unsupported_version, ...).
        TypeError, ValueError: buf is not bytes; out has the wrong dtype, size or layout, or another device.
    """
    where = "zipcomm.decompress"
    buf = _stream_argument(buf, where)
    if _arrays.cuda_device(buf) is not None:
        if threads is not None:
            raise ValueError(f"{where}: threads= is for host streams; buf is on a GPU")
        handle = _arrays.stream_handle(stream, buf, where)
        declared = _canonical_dtype(dtype, where)
        if out is None:
            head = _ext.header_fields(buf, handle, where)
            declared = head["dtype"]
            out = _arrays.empty_elements_like(buf, head["elements"], declared)
        target = out
        fp8 = _fp8_of(out)
        if fp8 is not None:
            target, declared = _as_fp8_bytes(out, fp8, declared, where)
        call = _ext.decompress_gpu(buf, target, declared, handle)
        if check:
            _ext.wait(call)
        return out
    if stream is not None or dtype is not None:
        raise ValueError(f"{where}: stream= and dtype= are for CUDA arrays; the stream is on the host")
    if out is not None:
        _ext.decompress(buf, _out_target(out, where), _threads(threads, where))
        return out
    result = _ext.decompress(buf, None, _threads(threads, where))
    if result.dtype == np.uint16 and _bfloat16 is not None:  # uint16 comes back only for bf16 streams
        return result.view(_bfloat16)
    if result.dtype == np.uint8 and _float8_e4m3fn is not None:  # uint8 only for fp8: the header says which
        return result.view(_float8_e4m3fn if _ext.header_fields(buf, 0, where)["dtype"] == "fp8_e4m3" else _float8_e5m2)
    return result


def synchronize() -> None:
    """Waits for every GPU compress / decompress call not yet waited for, and raises the first error among them
    (``ZipcommError`` with its Status, or RuntimeError for a CUDA failure). The GPU calls are stream-ordered and
    return before the GPU has run them; this (or their ``check=True``) is where their errors surface."""
    _ext.synchronize()


def compressed_size(buf: Any, *, stream: Any = None) -> int:
    """The stream's size in bytes (its header's total_bytes): what to send of a GPU compress result. For a GPU
    buffer the header is read after the work on ``stream`` (default: the buffer's framework's current stream),
    which waits for it."""
    where = "zipcomm.compressed_size"
    buf = _stream_argument(buf, where)
    handle = _arrays.stream_handle(stream, buf, where) if _arrays.cuda_device(buf) is not None else 0
    return int(_ext.header_fields(buf, handle, where)["compressed_bytes"])


def max_compressed_bytes(n: int, dtype: Any, chunk_elements: int | None = None) -> int:
    """Upper bound of the stream size of n elements of dtype ("bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2"
    or a float dtype) in chunks of chunk_elements (default: compress's default for n).

    Reached when every chunk is stored raw (random bits): the planes, the header and tables, and the raw
    exponents. compress never writes more.
    """
    where = "zipcomm.max_compressed_bytes"
    canonical = _canonical_dtype(dtype, where)
    if canonical is None:
        raise TypeError(f"{where}: dtype is required")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{where}: n must be a non-negative integer, got {n!r}")
    return int(_ext.max_compressed_bytes(int(n), canonical, _chunk_log2(chunk_elements, where)))


def info(buf: Any, *, stream: Any = None) -> dict[str, Any]:
    """The header fields of a stream, checked (magic, header check, version, sizes) but without decoding it.

    Returns a dict: version, dtype ("bf16" | "fp16" | "fp32" | "fp8_e4m3" | "fp8_e5m2"), code ("pair" | "fixed"),
    elements, original_bytes, compressed_bytes (the header's total_bytes), ratio (compressed / original), chunks,
    raw_chunks (chunks whose exponents are stored raw), chunk_elements, table_offset, low_offset,
    exp_offset, header_check, buffer_bytes (the length of buf; bytes past compressed_bytes are ignored).

    Raises ZipcommError for a header that does not check out (bad_header, unsupported_version) or a buffer
    shorter than the stream (corrupt_stream). A GPU buffer's header and chunk table are read after the work on
    ``stream`` (default: the buffer's framework's current stream), which waits for it.
    """
    where = "zipcomm.info"
    buf = _stream_argument(buf, where)
    if _arrays.cuda_device(buf) is not None:
        return _ext.info(buf, _arrays.stream_handle(stream, buf, where))
    return _ext.info(buf)


def stats(x: Any, code: str = "pair", *, dtype: Any = None, chunk_elements: int | None = None) -> dict[str, Any]:
    """How well a host array compresses: compresses it (host codec) and measures the stream.

    Takes the same x, code, dtype and chunk_elements as compress. Returns a dict: dtype, code, elements, original_bytes,
    compressed_bytes, ratio (compressed / original, every byte counted), bits_per_element, chunks, raw_chunks,
    exponent_entropy_bits (order-0 entropy of the exponent field, bits per element), entropy_bound (the ratio
    of an ideal order-0 exponent coder with sign and mantissa raw), and the header fields of info().
    """
    where = "zipcomm.stats"
    arg, declared = _array_argument(x, _canonical_dtype(dtype, where), where)
    return _ext.stats(arg, declared, code, _chunk_log2(chunk_elements, where))


def status_string(status: Status) -> str:
    """The words for a Status (zipcomm::status_string), as ZipcommError messages use them."""
    return _ext.status_string(status)


def cuda_available() -> bool:
    """True when CUDA arrays can be coded here: this build has the GPU codec and a CUDA GPU is usable.

    False on a host-only build (the package was built without nvcc, or with ZIPCOMM_PYTHON_CUDA=OFF:
    build_info()["cuda_compiled"] is False), and on a machine without a usable GPU or driver
    (build_info()["cuda_reason"] says why). Host arrays work either way.
    """
    return _ext.cuda_device_count()[0] > 0


def build_info() -> dict[str, Any]:
    """What this build is: package and C++ library versions, wire format version, whether the GPU codec was
    compiled in (cuda_compiled), how many GPUs it sees now (cuda_devices) and, when none, why (cuda_reason)."""
    devices, reason = _ext.cuda_device_count()
    return {
        "version": __version__,
        "library_version": _ext.library_version,
        "format_version": FORMAT_VERSION,
        "cuda_compiled": bool(_ext.cuda_compiled),
        "cuda_devices": devices,
        "cuda_reason": reason,
    }


from . import quant  # noqa: E402  (needs the helpers above)


def __getattr__(name: str) -> Any:
    # zipcomm.torch is imported on first use: it needs PyTorch, the rest of the package does not.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
