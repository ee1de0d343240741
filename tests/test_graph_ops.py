"""benchmarks/graph_ops.py counts the operations of a compiled step's forward and backward graphs
(what it compares with nanoGPT's). On a GPT-2 step through the fused attention kernel, the
backward graph copies nothing: the gradients of q, k and v join in the layout the projection
gave them (split after moving the heads ahead of T, each layer's backward copied them once
more)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its siblings
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_the_compiled_backward_copies_nothing():
    graph_ops = load("graph_ops")
    shape = graph_ops.Shape("tiny", 512, 512, 1)  # past plain attention's CPU lengths: SDPA
    forward, backward = graph_ops.lmlab_graphs(shape)
    layers = 2  # gpt2-tiny
    assert forward["aten.addmm.default"] == 4 * layers and forward["aten.mm.default"] == 1
    assert backward["aten.mm.default"] == 2 * (4 * layers + 1)
    assert backward["aten.clone.default"] == 0
    assert backward["aten.cat.default"] == layers  # each layer's q, k, v gradients joined
