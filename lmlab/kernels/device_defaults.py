"""What `--precision auto` and `--compile auto` resolve to on a device, and why: the one place
these defaults are decided.

On a GPU with bf16 tensor cores (compute capability 8.0 and up: A100, H100, H200, L4, RTX 30xx
and later) training runs in bf16 autocast over fp32 master weights, compiled: there the
products' bf16 peak is many times fp32's (989 against 67 TFLOP/s on an H100, its datasheet) and
compilation fuses the element-wise work between them. fp32 products that remain run on TF32
tensor cores. On the CPU the defaults stay fp32 and eager, as lmlab has trained there all
along; bf16 and compilation are options there, neither measured faster by default."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# compute capability from which a CUDA GPU has bf16 tensor cores (Ampere)
BF16_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class DeviceFacts:
    """What the defaults depend on: the device's kind, its name and, for a CUDA GPU, its
    compute capability."""

    kind: str  # "cpu", "cuda", "mps", ...
    name: str
    capability: tuple[int, int] | None = None

    @property
    def bf16_tensor_cores(self) -> bool:
        return self.kind == "cuda" and self.capability is not None and \
            self.capability >= BF16_CAPABILITY


def device_facts(device: torch.device) -> DeviceFacts:
    if device.type == "cuda":
        return DeviceFacts("cuda", torch.cuda.get_device_name(device),
                           torch.cuda.get_device_capability(device))
    return DeviceFacts(device.type, device.type)


@dataclass(frozen=True)
class Choice:
    """A resolved setting and the reason, as the run's first lines say it."""

    value: str | bool
    reason: str


def precision_for(asked: str, facts: DeviceFacts) -> Choice:
    """`asked` ("auto", "fp32", "bf16" or "fp16") resolved on the device."""
    if asked != "auto":
        return Choice(asked, "as asked")
    if facts.bf16_tensor_cores:
        return Choice("bf16", f"bf16 autocast with fp32 master weights: {facts.name} has bf16 "
                              "tensor cores")
    if facts.kind == "cuda":
        return Choice("fp32", f"{facts.name} has no bf16 tensor cores (compute capability "
                              f"{facts.capability}); fp32 products on TF32 where it can")
    return Choice("fp32", f"fp32 on the {facts.kind} (--precision bf16 is an option)")


def compile_for(asked: bool | None, facts: DeviceFacts) -> Choice:
    """`asked` (True, False, or None for auto) resolved on the device."""
    if asked is not None:
        return Choice(asked, "as asked")
    if facts.kind == "cuda":
        return Choice(True, "torch.compile on a GPU: the model as one graph, its element-wise "
                            "work fused")
    return Choice(False, f"eager on the {facts.kind}: compiling is not measured faster there "
                         "(--compile is an option)")


def allow_tf32(device: torch.device) -> bool:
    """Let fp32 products and convolutions on a CUDA device run on TF32 tensor cores (10-bit
    mantissa inputs, fp32 accumulation), as autocast's fp32 leftovers and an fp32 run may;
    returns whether it was done."""
    if device.type != "cuda":
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True
