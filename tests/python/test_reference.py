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

# docs/FORMAT.md section 15: the first 40000 elements of tests/data/llama_weights.bf16, pair code.
WORKED_EXAMPLE_HEADER = bytes.fromhex(
    "5a 50 43 4d 03 01 03 0e  40 9c 00 00 00 00 00 00"
    "80 d1 00 00 00 00 00 00  80 9c 00 00 00 00 00 00"
    "80 9c 00 00 00 00 00 00  b0 9c 00 00 00 00 00 00"
    "c5 37 e0 ec 00 00 00 00  00 00 00 00 00 00 00 00"
)


def test_format_md_worked_example() -> None:
    x = read_data("llama_weights.bf16", np.uint16)[:40000]
    buf = zipcomm.compress(x, dtype="bf16")
    assert len(buf) == 53632
    assert bytes(buf[:64]) == WORKED_EXAMPLE_HEADER
    table = np.frombuffer(bytes(buf[40064:40088]), "<u8")
    checks = np.frombuffer(bytes(buf[40088:40100]), "<u4")
    assert table.tolist() == [5504, 11008, 13520]
    assert checks.tolist() == [0x0CFB9371, 0xFEEEED29, 0x1C8EDCB5]
    info = zipcomm.info(buf)
    assert info == {
        "version": 3, "dtype": "bf16", "code": "pair", "elements": 40000, "original_bytes": 80000,
        "compressed_bytes": 53632, "ratio": 53632 / 80000, "chunks": 3, "raw_chunks": 0,
        "chunk_elements": 16384, "plane1_offset": 40064, "table_offset": 40064, "exp_offset": 40112,
        "header_check": 0xECE037C5, "buffer_bytes": 53632,
    }
    # Layout and bound of section 15 for the three dtypes.
    assert zipcomm.max_compressed_bytes(40000, "bf16") == 80112
    assert zipcomm.max_compressed_bytes(40000, "fp16") == 80192
    assert zipcomm.max_compressed_bytes(40000, "fp32") == 160112


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
                                            ("tiny_lm_grads_autocast.f32", "fp32", np.uint32)])
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
