"""PyTorch's own distributed engine: process group from torchrun's environment, DDP or FSDP2
(`fully_shard`) wrapping, state gathering for checkpoints, and the global target counts that
make the loss independent of how a batch is split across ranks and micro-batches."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from lmlab.runs.checkpoints import untied


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
    """Leave the process group once every rank is done.

    Gloo's worker threads take the GIL to release the tensors of finished collectives; if the
    group is destroyed (by destroy_process_group, or later by freeing the DDP or FSDP objects
    that hold it) while one still waits for the GIL, joining that thread deadlocks. A barrier
    and a short sleep, which releases the GIL, let them finish first."""
    if dist.is_initialized():
        dist.barrier()
        time.sleep(0.2)
        dist.destroy_process_group()
        time.sleep(0.2)


def wrap(model: nn.Module, env: Env, strategy: str = "ddp") -> nn.Module:
    """DistributedDataParallel, or FSDP2 sharding of each block and then the rest, when
    distributed. FSDP2 replaces the parameters: build the optimizer after wrapping. Every
    parameter must get a gradient every step (objectives see to it), as DDP waits for all."""
    if not env.distributed:
        return model
    if strategy == "fsdp":
        for block in model.backbone.blocks:
            fully_shard(block)
        fully_shard(model)  # embeddings, final norm and heads (a tied weight stays one)
        return model
    device_ids = [env.device.index] if env.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool):
    """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP2) on all but the last
    micro-batch of a step."""
    if isinstance(model, nn.parallel.DistributedDataParallel) and not enabled:
        with model.no_sync():
            yield
        return
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(enabled)
    yield


def full_weights(model: nn.Module) -> dict[str, Tensor]:
    """Every weight once (a tied one under its first name), whole and on the CPU. Under FSDP2
    all ranks must call this; rank 0 gets the weights, the others an empty dict."""
    if is_sharded(model):
        # torch.distributed.checkpoint is slow to import, and only FSDP2 runs need it.
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
    else:
        weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return untied(weights, model)


def local_optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """This rank's shard of the optimizer state, as plain tensors (loadable with
    weights_only=True)."""
    state = optimizer.state_dict()
    state["state"] = {index: {k: v.to_local() if isinstance(v, DTensor) else v
                              for k, v in values.items()}
                      for index, values in state["state"].items()}
    return state


def load_local_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """The inverse of `local_optimizer_state`: shards become DTensors laid out like their
    parameters again."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    for index, values in state["state"].items():
        parameter = parameters[index]
        if not isinstance(parameter, DTensor):
            continue
        for key, value in values.items():
            if isinstance(value, Tensor) and value.shape == parameter.to_local().shape \
                    and value.dim() > 0:
                values[key] = DTensor.from_local(value, parameter.device_mesh,
                                                 parameter.placements, shape=parameter.shape,
                                                 stride=parameter.stride())
    optimizer.load_state_dict(state)


def barrier(env: Env) -> None:
    if env.distributed:
        dist.barrier()


def all_reduce_sum(values: dict[str, Tensor], env: Env) -> dict[str, Tensor]:
    """Sum each value over ranks (one collective for all of them)."""
    if not env.distributed or not values:
        return values
    names = sorted(values)
    stacked = torch.stack([values[n].detach().double().to(env.device) for n in names])
    dist.all_reduce(stacked)
    return {n: stacked[i] for i, n in enumerate(names)}


def any_rank(flags: tuple[bool, ...], env: Env) -> tuple[bool, ...]:
    """Each flag true if it is true on any rank (so all ranks take the same branch)."""
    if not env.distributed:
        return flags
    values = torch.tensor([float(flag) for flag in flags], device=env.device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return tuple(bool(v) for v in values.tolist())


def from_rank_0(value, env: Env):
    """Rank 0's `value` on every rank (a picklable object)."""
    if not env.distributed:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def broadcast_path(path: Path | None, env: Env) -> Path | None:
    holder = from_rank_0(str(path) if path else "", env)
    return Path(holder) if holder else None
