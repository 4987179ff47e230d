"""zipcomm.torch's DDP hooks: the reduction (rank order, bf16/fp16 in float32), compressed = uncompressed bit for
bit, and a 4-process DDP training on gloo whose parameters are the same bits with either hook and on every rank.
Needs torch with torch.distributed and gloo (skipped, with the reason, without)."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

try:  # any ImportError, not only a missing module: a torch that is there but cannot load skips too
    import torch
    import torch.distributed as dist
except ImportError as error:
    pytest.skip(f"the DDP hook tests need PyTorch, which is not importable here ({error}); "
                "pip install torch in this environment to run them", allow_module_level=True)

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("the DDP hook tests need torch.distributed with the gloo backend", allow_module_level=True)

import zipcomm  # noqa: E402
import zipcomm.torch as zt  # noqa: E402
from conftest import SEED  # noqa: E402

WORLD_SIZE = 4
TRAIN_STEPS = 5
# Small, so that both paths of allreduce_hook run: in the DDP training the bf16 and fp32 buckets (6272 and
# 3264 bytes) are compressed, the fp16 one (1040 bytes) is not.
THRESHOLD_BYTES = 2048
# A gloo collective that waits longer than this fails instead of blocking; the parent kills stragglers later.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)
RUN_DEADLINE_S = 150.0

_BIT_VIEWS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
CRAFTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor, so that torch.equal compares bits (NaN, -0) rather than values."""
    return t.detach().view(_BIT_VIEWS[t.element_size()])


class CraftedBucket:
    """The one part of torch.distributed.GradBucket the hooks use: buffer()."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor

    def buffer(self) -> torch.Tensor:
        return self._tensor


def contribution(rank: int, world_size: int, dtype: torch.dtype, n: int, seed: int) -> torch.Tensor:
    """Rank `rank`'s crafted bucket, computable on every rank: gaussians over many binades, zeros and -0; the
    last rank's is all zeros, so that the streams of one bucket differ in size between ranks."""
    if world_size > 1 and rank == world_size - 1:
        return torch.zeros(n, dtype=dtype)
    rng = np.random.default_rng([seed, rank, n, CRAFTED_DTYPES.index(dtype)])
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-12, 4, n)
    x[rng.random(n) < 0.05] = 0.0
    x[rng.random(n) < 0.05] = -0.0
    return torch.from_numpy(x).to(dtype)


def expected_reduction(parts: list[torch.Tensor], average: bool) -> torch.Tensor:
    """The documented reduction, computed with NumPy: added in rank order in float32 (bf16/fp16/fp32) or in the
    dtype (float64), divided by the world size, rounded once to the dtype."""
    import ml_dtypes

    dtype = parts[0].dtype
    wide = np.float64 if dtype == torch.float64 else np.float32
    total = parts[0].to(torch.float64).numpy().astype(wide)  # bf16/fp16 -> float64 -> float32 is exact
    for part in parts[1:]:
        total = total + part.to(torch.float64).numpy().astype(wide)
    if average:
        total = total / wide(len(parts))
    if dtype == torch.bfloat16:
        return torch.from_numpy(total.astype(ml_dtypes.bfloat16).view(np.int16)).view(torch.bfloat16)
    target = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}[dtype]
    return torch.from_numpy(total.astype(target))


def check_crafted_buckets(rank: int, world_size: int, seed: int) -> None:
    """Both hooks on crafted buckets (every dtype path; below and above the threshold; sum and average) give the
    NumPy reference's bits."""
    for dtype in CRAFTED_DTYPES:
        for n in (3, 700, 40000):
            parts = [contribution(r, world_size, dtype, n, seed) for r in range(world_size)]
            for average in (True, False):
                expected = expected_reduction(parts, average)
                state = zt.CompressedAllreduceState(threshold_bytes=THRESHOLD_BYTES, average=average)
                compressed = parts[rank].clone()
                future = zt.allreduce_hook(state, CraftedBucket(compressed))
                assert future.done() and future.wait().data_ptr() == compressed.data_ptr()
                reference = parts[rank].clone()
                zt.uncompressed_allreduce_hook(state, CraftedBucket(reference))
                where = f"rank {rank}/{world_size}, {dtype}, n={n}, average={average}"
                assert torch.equal(bits(compressed), bits(expected)), where
                assert torch.equal(bits(reference), bits(expected)), where
                compresses = dtype in zt.COMPRESSED_DTYPES and n * parts[0].element_size() >= THRESHOLD_BYTES
                assert state.compressed_buckets == int(compresses), where
                assert state.uncompressed_buckets == 2 - int(compresses), where


# ---- world size 1, in this process

@pytest.fixture
def single_process_group() -> Iterator[None]:
    if dist.is_initialized():
        pytest.skip("a default process group is already initialized in this process")
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=COLLECTIVE_TIMEOUT)  # port 0: the system picks one
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=COLLECTIVE_TIMEOUT)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_zipcomm_torch_attribute_and_help() -> None:
    assert zipcomm.torch is zt
    assert "DDP" in zt.__doc__ and "rank order" in zt.__doc__ and "all_reduce" in zt.__doc__
    for hook in (zt.allreduce_hook, zt.uncompressed_allreduce_hook, zt.reduce_in_rank_order):
        assert hook.__doc__, hook


def test_reduction_is_in_rank_order() -> None:
    # Float addition does not associate: the order is visible, and the documented one is rank 0, 1, 2, ...
    parts = [torch.tensor([x], dtype=torch.float32) for x in (1e8, 1.0, -1e8, 1.0)]
    assert zt.reduce_in_rank_order(parts, torch.float32, 4, average=False).item() == 1.0  # ((1e8+1)-1e8)+1
    assert zt.reduce_in_rank_order(parts[::-1], torch.float32, 4, average=False).item() == 0.0
    # bf16 is summed in float32 and rounded once: 256 + 1 + 1 is 258 (exact in bf16); summed in bf16 it is 256.
    parts = [torch.tensor([x], dtype=torch.bfloat16) for x in (256.0, 1.0, 1.0)]
    assert zt.reduce_in_rank_order(parts, torch.bfloat16, 3, average=False).item() == 258.0
    assert zt.reduce_in_rank_order(parts, torch.bfloat16, 2, average=True).item() == 129.0
    with pytest.raises(TypeError, match="floating point"):
        zt.reduce_in_rank_order([torch.ones(2, dtype=torch.int32)], torch.int32, 1, average=True)


def test_hooks_on_crafted_buckets_world_size_1(single_process_group: None) -> None:
    check_crafted_buckets(0, 1, SEED)
    # With one rank the bucket comes back with the same bits (infinities and subnormals included).
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-40, -3.5, 65504.0] * 300)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        bucket = special.to(dtype)
        state = zt.CompressedAllreduceState(threshold_bytes=0)
        zt.allreduce_hook(state, CraftedBucket(bucket))
        assert torch.equal(bits(bucket), bits(special.to(dtype))), dtype
        assert state.compressed_buckets == 1 and 0 < state.compressed_output_bytes
        assert state.compressed_input_bytes == bucket.numel() * bucket.element_size()


# ---- 4 processes, gloo, DDP training

class MixedPrecisionModel(torch.nn.Module):
    """A few Linear layers in fp32, bf16 and fp16: DDP makes a bucket of each dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(16, 48)                            # fp32: weight 3 KiB, bias 192 B
        self.middle = torch.nn.Linear(48, 64).to(torch.bfloat16)       # weight 6 KiB, bias 128 B
        self.last = torch.nn.Linear(64, 8).to(torch.float16)           # weight 1 KiB, bias 16 B

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.first(x))
        h = torch.tanh(self.middle(h.to(torch.bfloat16)))
        return self.last(h.to(torch.float16)).float()


def train(hook: Callable[..., Any] | None, state: Any, rank: int, seed: int) -> list[torch.Tensor]:
    """TRAIN_STEPS of SGD on this rank's random data, under DDP with the hook (None: DDP's default)."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(seed)  # the same initial parameters on every rank
    model = DistributedDataParallel(MixedPrecisionModel())
    if hook is not None:
        model.register_comm_hook(state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    data = torch.Generator().manual_seed(seed * 1000 + rank + 1)
    for _ in range(TRAIN_STEPS):
        x = torch.randn(32, 16, generator=data)
        target = torch.randn(32, 8, generator=data)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), target).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.module.parameters()]


def initial_parameters(seed: int) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    return [p.detach().clone() for p in MixedPrecisionModel().parameters()]


def ddp_worker(rank: int, world_size: int, port: int, out_dir: str, seed: int) -> None:
    """One rank of test_ddp_training_is_bit_identical: crafted buckets, then the three trainings; writes its
    parameters and the hook's counters to out_dir/rank<r>.pt for the parent to compare."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own connections on loopback too
    torch.set_num_threads(1)  # four processes share a few cores
    store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=COLLECTIVE_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT)
    try:
        check_crafted_buckets(rank, world_size, seed)
        state = zt.CompressedAllreduceState(threshold_bytes=THRESHOLD_BYTES)
        result = {
            "compressed": train(zt.allreduce_hook, state, rank, seed),
            "uncompressed": train(zt.uncompressed_allreduce_hook, zt.CompressedAllreduceState(), rank, seed),
            "ddp_default": train(None, None, rank, seed),
            "initial": initial_parameters(seed),
            "compressed_buckets": state.compressed_buckets,
            "uncompressed_buckets": state.uncompressed_buckets,
            "ratio": state.compressed_output_bytes / max(1, state.compressed_input_bytes),
        }
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks(worker: Callable[..., None], world_size: int, out_dir: Path, seed: int) -> None:
    """Runs worker(rank, world_size, port, out_dir, seed) in world_size spawned processes; a rank's exception
    fails the test with its traceback, and ranks still running at the deadline are killed."""
    import torch.multiprocessing as mp

    # The parent holds the rendezvous store on a port the system chose (port 0) for as long as the ranks run:
    # no window in which another program could take the port.
    store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=COLLECTIVE_TIMEOUT, wait_for_workers=False)
    context = mp.start_processes(worker, args=(world_size, store.port, str(out_dir), seed), nprocs=world_size,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + RUN_DEADLINE_S
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"the {world_size} ranks did not finish within {RUN_DEADLINE_S:.0f} s (hang?)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(5)


def test_ddp_training_is_bit_identical(tmp_path: Path) -> None:
    start = time.monotonic()
    run_ranks(ddp_worker, WORLD_SIZE, tmp_path, SEED % (1 << 31))
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD_SIZE)]
    for rank, result in enumerate(results):
        # Both paths of the hook ran: the bf16 and fp32 buckets compressed, the fp16 one not.
        assert result["compressed_buckets"] > 0 and result["uncompressed_buckets"] > 0, result
        assert 0 < result["ratio"] < 1, result["ratio"]
        for i, (c, u, d, init) in enumerate(zip(result["compressed"], result["uncompressed"],
                                                result["ddp_default"], result["initial"])):
            where = f"rank {rank}, parameter {i} ({c.dtype}, {tuple(c.shape)})"
            assert not torch.equal(bits(c), bits(init)), where  # it did train
            assert torch.equal(bits(c), bits(u)), where  # compressed = uncompressed, bit for bit
            assert torch.equal(bits(c), bits(results[0]["compressed"][i])), where  # the same on every rank
            # DDP's default all_reduce adds in another order: the same to rounding, not bit for bit.
            torch.testing.assert_close(c.float(), d.float(), rtol=0.02, atol=0.02, msg=where)
    print(f"DDP run: {WORLD_SIZE} ranks, {TRAIN_STEPS} steps x 3 trainings in {time.monotonic() - start:.1f} s; "
          f"{results[0]['compressed_buckets']} buckets compressed (ratio {results[0]['ratio']:.3f}), "
          f"{results[0]['uncompressed_buckets']} not")


# ---- world size 1 on a GPU, NCCL: the GPU bucket codec

@pytest.mark.gpu
def test_ddp_training_on_a_gpu_with_nccl() -> None:
    """DDP on one GPU over NCCL (world size 1): the buckets are CUDA tensors, compressed and decoded by the GPU
    codec on the current stream; training with the compressed hook gives the uncompressed hook's bits."""
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        pytest.skip("needs a CUDA GPU visible to torch and NCCL")
    if not zipcomm.cuda_available():
        pytest.skip(f"zipcomm's GPU codec is not usable here: {zipcomm.build_info()}")
    if dist.is_initialized():
        pytest.skip("a default process group is already initialized in this process")
    from torch.nn.parallel import DistributedDataParallel

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=COLLECTIVE_TIMEOUT)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, timeout=COLLECTIVE_TIMEOUT)
    try:
        results = {}
        for name, hook in (("compressed", zt.allreduce_hook), ("uncompressed", zt.uncompressed_allreduce_hook)):
            torch.manual_seed(SEED % (1 << 31))
            module = MixedPrecisionModel().cuda()
            model = DistributedDataParallel(module, device_ids=[torch.cuda.current_device()])
            state = zt.CompressedAllreduceState(threshold_bytes=THRESHOLD_BYTES)
            model.register_comm_hook(state, hook)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
            data = torch.Generator(device="cuda").manual_seed(SEED % (1 << 31))
            for _ in range(TRAIN_STEPS):
                x = torch.randn(32, 16, generator=data, device="cuda")
                target = torch.randn(32, 8, generator=data, device="cuda")
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), target).backward()
                optimizer.step()
            torch.cuda.synchronize()
            results[name] = ([p.detach().clone() for p in module.parameters()], state)
        zipcomm.synchronize()
        compressed, state = results["compressed"]
        assert state.compressed_buckets > 0
        for i, (c, u) in enumerate(zip(compressed, results["uncompressed"][0])):
            assert torch.equal(bits(c), bits(u)), f"parameter {i} ({c.dtype}, {tuple(c.shape)})"
    finally:
        dist.destroy_process_group()
