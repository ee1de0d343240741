"""benchmarks/graph_ops.py counts the operations of a compiled step's forward and backward graphs
(what it compares with nanoGPT's). On a GPT-2 step through the fused attention kernel, the
backward graph makes no clone: the gradients of q, k and v join in the layout the projection
gave them (split after moving the heads ahead of T, each layer's backward cloned them once
more)."""

from tests.benchmark_module import load_benchmark


def test_the_compiled_backward_makes_no_clone():
    graph_ops = load_benchmark("graph_ops")
    shape = graph_ops.Shape("tiny", 512, 512, 1)  # past plain attention's CPU lengths: SDPA
    forward, backward = graph_ops.lmlab_graphs(shape)
    layers = 2  # gpt2-tiny
    assert forward["aten.addmm.default"] == 4 * layers and forward["aten.mm.default"] == 1
    assert backward["aten.mm.default"] == 2 * (4 * layers + 1)
    assert backward["aten.clone.default"] == 0
    assert backward["aten.cat.default"] == layers  # each layer's q, k, v gradients joined
