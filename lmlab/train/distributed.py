"""PyTorch's own distributed engine: process group from torchrun's environment, DDP
wrapping, and the global target counts that make the loss independent of how a batch is
split across ranks and micro-batches."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass(frozen=True)
class Env:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup() -> Env:
    """Join the process group torchrun describes (gloo on CPU, nccl on GPU), if any."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    return Env(rank, world_size, local_rank, device)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, env: Env) -> nn.Module:
    """DistributedDataParallel when distributed."""
    if not env.distributed:
        return model
    device_ids = [env.device.index] if env.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def gradient_sync(model: nn.Module, enabled: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of a step."""
    if enabled:
        return contextlib.nullcontext()
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def all_reduce_sum(values: dict[str, Tensor], env: Env) -> dict[str, Tensor]:
    """Sum each value over ranks (one collective for all of them)."""
    if not env.distributed or not values:
        return values
    names = sorted(values)
    stacked = torch.stack([values[n].detach().double().to(env.device) for n in names])
    dist.all_reduce(stacked)
    return {n: stacked[i] for i, n in enumerate(names)}


def any_rank(flag: bool, env: Env) -> bool:
    """True if `flag` is true on any rank (so all ranks take the same branch)."""
    if not env.distributed:
        return flag
    value = torch.tensor([float(flag)], device=env.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
