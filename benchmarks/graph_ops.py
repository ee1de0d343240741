"""What lmlab's compiled GPT-2 step computes, operation by operation, against nanoGPT's: the
ATen operations of the forward and backward graphs torch.compile hands its backend (AOT
autograd's), counted by kind, for lmlab's step as it compiles on a CUDA GPU (the whole logits
and a plain cross-entropy in the model's graph) and for nanoGPT's compiled model, at GPT-2
small's shape (sequence 1024, batch 1, bf16 autocast). Read on the CPU: these graphs are
the program before a device's kernels are chosen. Operations that only relabel memory (views,
transposes, getitem, detach) are left out of the comparison.

    NANOGPT=path/model.py python benchmarks/graph_ops.py [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

import torch
from record import ROOT, machine, write_results
from train_speed import SHAPES, Shape, lmlab_parts, nanogpt_model

OUT = ROOT / "benchmarks" / "results" / "graph_ops.json"
# Operations that move or compute nothing: a different layout choice, not different work.
RELABELS = {"aten.view.default", "aten._unsafe_view.default", "aten.t.default",
            "aten.transpose.int", "aten.detach.default", "<built-in function getitem>",
            "aten.expand.default", "aten.split.Tensor", "aten.split_with_sizes.default"}


def counting_backend(graphs: list[collections.Counter]):
    """A torch.compile backend that counts each graph's operations into `graphs` (forward
    first, then backward) and runs it as traced."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def count(graph_module, _inputs):
        graphs.append(collections.Counter(
            str(node.target) for node in graph_module.graph.nodes
            if node.op == "call_function" and str(node.target) not in RELABELS))
        return make_boxed_func(graph_module.forward)

    return aot_autograd(fw_compiler=count, bw_compiler=count)


def lmlab_graphs(shape: Shape) -> list[collections.Counter]:
    graphs: list[collections.Counter] = []
    parts = lmlab_parts("clm", False, shape, torch.device("cpu"), one_graph=True)
    step = torch.compile(parts.compute_loss, backend=counting_backend(graphs))
    with torch.autocast("cpu", torch.bfloat16):
        loss = step(parts.make_batch()).mean()
    loss.backward()
    return graphs


def nanogpt_graphs(model_file: Path, shape: Shape) -> list[collections.Counter]:
    graphs: list[collections.Counter] = []
    model = torch.compile(nanogpt_model(model_file, shape), backend=counting_backend(graphs))
    tokens = torch.randint(107, shape.vocab, (shape.batch, shape.seq + 1),
                           generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", torch.bfloat16):
        _, loss = model(tokens[:, :-1], tokens[:, 1:].contiguous())
    loss.backward()
    return graphs


def differences(ours: collections.Counter, theirs: collections.Counter) -> dict[str, int]:
    """lmlab's count minus nanoGPT's, for each operation whose counts differ."""
    return {op: ours[op] - theirs[op] for op in sorted(set(ours) | set(theirs))
            if ours[op] != theirs[op]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    model_file = Path(os.environ.get("NANOGPT", ROOT / ".nanogpt" / "model.py"))
    if not model_file.is_file():
        sys.exit(f"no nanoGPT model.py at {model_file}: set NANOGPT to its path")
    base = SHAPES["gpt2-124m"]
    shape = Shape(base.size, base.vocab, base.seq, 1)
    passes = {}
    for name, graphs in (("lmlab", lmlab_graphs(shape)),
                         ("nanogpt", nanogpt_graphs(model_file, shape))):
        if len(graphs) != 2:
            sys.exit(f"{name}: expected one forward and one backward graph, got {len(graphs)}")
        passes[name] = dict(zip(("forward", "backward"), graphs, strict=True))
    results = {"machine": machine(), "shape": {"seq_len": shape.seq, "batch_size": shape.batch,
                                                "vocab": shape.vocab},
               "left_out": sorted(RELABELS), "passes": {}}
    for part in ("forward", "backward"):
        ours, theirs = passes["lmlab"][part], passes["nanogpt"][part]
        results["passes"][part] = {
            "lmlab": dict(sorted(ours.items())), "nanogpt": dict(sorted(theirs.items())),
            "lmlab_total": sum(ours.values()), "nanogpt_total": sum(theirs.values()),
            "lmlab_minus_nanogpt": differences(ours, theirs)}
        print(f"{part}: lmlab {sum(ours.values())} operations, nanoGPT "
              f"{sum(theirs.values())}; differing: {differences(ours, theirs) or 'none'}")
    write_results(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
