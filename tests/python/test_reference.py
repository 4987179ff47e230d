"""The package writes the C++ host reference's bytes: the worked example of docs/FORMAT.md section 15, and
(when it is built) the output of `zipcomm-file compress --host`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import zipcomm
from conftest import REPO, read_data

# The worked example of docs/FORMAT.md: the first 40000 elements of tests/data/llama_weights.bf16, pair code,
# 16384-element chunks, format v6 (version 6; the header's offsets: table, low section, exponent section).
WORKED_EXAMPLE_HEADER = bytes.fromhex(
    "5a 50 43 4d 06 01 03 0e  40 9c 00 00 00 00 00 00"
    "80 d1 00 00 00 00 00 00  80 9c 00 00 00 00 00 00"
    "b0 9c 00 00 00 00 00 00  b0 9c 00 00 00 00 00 00"
    "14 1f 27 9e 00 00 00 00  00 00 00 00 00 00 00 00"
)


def u64s(buf: np.ndarray, offset: int, count: int) -> list[int]:
    return np.frombuffer(bytes(buf[offset:offset + 8 * count]), "<u8").tolist()


def u32s(buf: np.ndarray, offset: int, count: int) -> list[int]:
    return np.frombuffer(bytes(buf[offset:offset + 4 * count]), "<u4").tolist()


def test_format_md_worked_example() -> None:
    x = read_data("llama_weights.bf16", np.uint16)[:40000]
    buf = zipcomm.compress(x, dtype="bf16", chunk_elements=16384)
    assert len(buf) == 53632
    assert bytes(buf[:64]) == WORKED_EXAMPLE_HEADER
    info = zipcomm.info(buf)
    assert info == {
        "version": 6, "dtype": "bf16", "code": "pair", "elements": 40000, "original_bytes": 80000,
        "compressed_bytes": 53632, "ratio": 53632 / 80000, "chunks": 3, "raw_chunks": 0,
        "chunk_elements": 16384, "table_offset": 40064, "low_offset": 40112, "exp_offset": 40112,
        "header_check": 0x9E271F14, "buffer_bytes": 53632,
    }
    # bf16: no width codes and no low table; the checks follow the chunk table, the low section is empty.
    assert u64s(buf, info["table_offset"], 3) == [5504, 11008, 13520]
    assert u32s(buf, info["table_offset"] + 24, 3) == [0x0CFB9371, 0xFEEEED29, 0x1C8EDCB5]
    assert not buf[40100:40112].any()
    # Layout and bound of section 15 for the three dtypes.
    assert zipcomm.max_compressed_bytes(40000, "bf16", 16384) == 80112
    assert zipcomm.max_compressed_bytes(40000, "fp16", 16384) == 80256
    assert zipcomm.max_compressed_bytes(40000, "fp32", 16384) == 160176
    assert zipcomm.max_compressed_bytes(40000, "fp8_e4m3", 16384) == 64 + 157 * 128 + 48 + 20000
    assert zipcomm.max_compressed_bytes(40000, "fp8_e5m2", 16384) == 64 + 157 * 96 + 48 + 25008
    # The default for 40000 elements: 10 chunks of 4096, 12 bytes of table and check each (low_offset 40192),
    # then 9 raw chunks of 4096 bytes and a raw tail of 3136.
    assert zipcomm.max_compressed_bytes(40000, "bf16") == 40192 + 9 * 4096 + 3136
    assert zipcomm.info(zipcomm.compress(x, dtype="bf16"))["chunk_elements"] == 4096


def test_format_md_worked_example_width_codes() -> None:
    # docs/FORMAT.md section 15: tests/data/llama_grads.f32 (bf16 gradients widened to fp32) at minimal widths:
    # every tile at code 2, no low bits stored.
    x = read_data("llama_grads.f32", np.uint32)
    assert x.size == 32768
    buf = zipcomm.compress(x, dtype="fp32", chunk_elements=16384)
    info = zipcomm.info(buf)
    assert (len(buf), info["version"], info["table_offset"], info["low_offset"], info["exp_offset"],
            info["header_check"]) == (44000, 6, 32864, 32912, 32912, 0xE349FC58)
    assert bytes(buf[32832:32864]) == b"\xaa" * 32  # 128 width codes, 2 each
    table = info["table_offset"]
    assert u64s(buf, table, 2) == [5536, 11088]  # chunk table
    assert u64s(buf, table + 16, 2) == [0, 0]  # low table
    assert u32s(buf, table + 32, 2) == [0x502A4677, 0x32B93058]  # chunk checks
    np.testing.assert_array_equal(zipcomm.decompress(buf).view(np.uint32), x)


def zipcomm_file_cli() -> Path:
    """The C++ command-line tool: $ZIPCOMM_FILE, else the one scripts/test.sh builds."""
    env = os.environ.get("ZIPCOMM_FILE")
    build_dir = os.environ.get("ZIPCOMM_BUILD_DIR", "build")
    path = Path(env) if env else REPO / build_dir / "tools" / "zipcomm-file" / "zipcomm-file"
    if not path.is_file():
        pytest.skip(f"zipcomm-file not built ({path}); set ZIPCOMM_FILE to compare with it")
    return path


@pytest.mark.parametrize("code", ["pair"])
@pytest.mark.parametrize("name,kind,bits", [("llama_grads.bf16", "bf16", np.uint16),
                                            ("llama_grads_scaled.f16", "fp16", np.uint16),
                                            ("tiny_lm_grads_autocast.f32", "fp32", np.uint32),
                                            ("llama_grads.e4m3", "fp8_e4m3", np.uint8),
                                            ("llama_acts.e5m2", "fp8_e5m2", np.uint8)])
def test_same_bytes_as_the_cli(tmp_path: Path, name: str, kind: str, bits: type, code: str) -> None:
    cli = zipcomm_file_cli()
    x = read_data(name, bits)
    for n in (x.size, 40000, 257):
        raw, stream = tmp_path / f"{n}.raw", tmp_path / f"{n}.zpc"
        x[:n].tofile(raw)
        subprocess.run([str(cli), "compress", "--host", "-q", "-f", "--dtype", kind, "--code", code, str(raw),
                        str(stream)], check=True)
        expected = stream.read_bytes()
        assert bytes(zipcomm.compress(x[:n], code, dtype=kind)) == expected, (name, n)
        np.testing.assert_array_equal(zipcomm.decompress(expected).view(bits), x[:n])
