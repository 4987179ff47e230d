# Type stub of the C++ extension (python/src/zipcomm_ext.cpp). Private: the zipcomm package is the API.
import enum
from typing import Any

class Status(enum.Enum):
    ok = 0
    invalid_argument = 1
    buffer_too_small = 2
    bad_header = 3
    corrupt_stream = 4
    size_mismatch = 5
    timeout = 6
    checksum_mismatch = 7
    unsupported_version = 8

cuda_compiled: bool
library_version: str
FORMAT_VERSION: int
HEADER_BYTES: int
CHUNK_ELEMENTS: int

def status_string(status: Status) -> str: ...
def compress(x: Any, dtype: str | None, code: str) -> Any: ...
def decompress(buf: Any, out: Any | None, bf16_as_bits: bool) -> Any: ...
def max_compressed_bytes(n: int, dtype: str) -> int: ...
def info(buf: Any) -> dict[str, Any]: ...
def stats(x: Any, dtype: str | None, code: str) -> dict[str, Any]: ...
def cuda_device_count() -> tuple[int, str]: ...
