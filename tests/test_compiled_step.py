"""The compiled step's forms, each equal to the plain one: head positions padded to a fixed
count (padding reads no target), and the one-graph loss (whole logits and a plain
cross-entropy, the CUDA default) forced on the CPU against the chunked, fused loss. In the slow
set, every objective and a composite compile into whole graphs once: no graph break, and no
graph compiled after the first step."""

import pytest
import torch

from lmlab import LanguageModel, SpecialTokens, preset
from lmlab.kernels import attention
from lmlab.kernels.compile_counts import CompileCounts, compile_counts, reset_compile_counts
from lmlab.kernels.linear_cross_entropy import IGNORE_INDEX
from lmlab.model.selectors import Positions
from lmlab.objectives.registry import build_objective
from lmlab.train.step import forward_loss

OBJECTIVES = ["clm", "mlm", "mntp", "prefix", "span", "mlm+nsp", "rtd", "mix:clm=1,mlm=1"]
SPECIAL = SpecialTokens.layout(300, n_sentinels=20)
ROWS, LENGTH = 4, 32


def setup(name: str):
    objective = build_objective(name, SPECIAL)
    torch.manual_seed(0)
    family = "gpt2" if objective.reads_causally else "bert"
    model = LanguageModel(preset(f"{family}-tiny", 300, LENGTH, dropout=0.0),
                          heads=objective.heads)
    return objective, model


def batches(objective, count: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    first = max(SPECIAL.all_ids) + 1
    for step in range(count):
        tokens = torch.randint(first, 300, (ROWS, LENGTH), generator=generator)
        tokens[:, LENGTH // 2 + step] = SPECIAL.eos  # documents packed in every row
        yield objective.make_batch(tokens, generator, step)


def loss_and_gradients(model, compute_loss, batch):
    model.zero_grad(set_to_none=True)
    loss = compute_loss(batch)
    loss.mean().backward()
    return loss.mean().detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                  if p.grad is not None}


def test_padded_positions_read_no_target():
    targets = torch.tensor([[5, 6, 7], [8, 9, 10]])
    at = Positions(torch.tensor([1, 5])).padded(4)
    assert at.flat.tolist() == [1, 5, -1, -1]
    assert at.read(targets).tolist() == [6, 10, IGNORE_INDEX, IGNORE_INDEX]
    assert at.shifted(2, 3).flat.tolist() == [7, 11, -1, -1]


def test_padded_positions_write_nothing():
    into = torch.tensor([[5, 6, 7], [8, 9, 10]])
    at = Positions(torch.tensor([1, 5])).padded(4)
    assert at.real().tolist() == [True, True, False, False]
    written = at.write(torch.tensor([60, 100, 1, 2]), into=into)
    assert written.tolist() == [[5, 60, 7], [8, 9, 100]]  # the last position kept its 10
    assert at.rows(1, 2, 3).flat.tolist() == [2]


@pytest.mark.parametrize("name", OBJECTIVES)
def test_padding_positions_changes_no_loss_or_gradient(name):
    objective, model = setup(name)
    for batch in batches(objective, 2):
        bound = objective.target_bound(ROWS, LENGTH)
        padded = batch.with_positions_padded(bound)
        for head, at in batch.predict_at.items():
            if isinstance(at, Positions) and at.flat.numel():  # more than the bound: every one
                expected = bound if at.flat.numel() <= bound else ROWS * LENGTH
                assert padded.predict_at[head].flat.numel() == expected
        plain = forward_loss(model, objective, compile_model=False)
        loss, gradients = loss_and_gradients(model, plain, batch)
        padded_loss, padded_gradients = loss_and_gradients(model, plain, padded)
        torch.testing.assert_close(padded_loss, loss, rtol=1e-5, atol=1e-6)
        for key, gradient in gradients.items():
            torch.testing.assert_close(padded_gradients[key], gradient, rtol=1e-4, atol=1e-6)


def test_the_masked_bound_holds_the_masked_count_with_room_to_spare():
    objective = build_objective("mlm", SPECIAL)
    bound = objective.target_bound(16, 1024)
    assert 16 * 1024 * 0.15 < bound < 16 * 1024 * 0.2 and bound % 64 == 0
    assert build_objective("clm", SPECIAL).target_bound(16, 1024) == 16 * 1024


@pytest.mark.parametrize("name", OBJECTIVES)
def test_the_one_graph_loss_equals_the_chunked_loss(name):
    objective, model = setup(name)
    chunked = forward_loss(model, objective, compile_model=False, one_graph=False)
    whole = forward_loss(model, objective, compile_model=False, one_graph=True)
    for batch in batches(objective, 2):
        loss, gradients = loss_and_gradients(model, chunked, batch)
        whole_loss, whole_gradients = loss_and_gradients(model, whole, batch)
        torch.testing.assert_close(whole_loss, loss, rtol=1e-5, atol=1e-6)
        assert whole_gradients.keys() == gradients.keys()
        for key, gradient in gradients.items():
            torch.testing.assert_close(whole_gradients[key], gradient, rtol=1e-4, atol=1e-6)


def compiled_counts(name: str, one_graph: bool, steps: int = 4):
    """Graph breaks, graphs after the first step, and the compiled losses against the eager
    chunked ones, over `steps` steps of fresh batches."""
    torch._dynamo.reset()
    reset_compile_counts()
    objective, model = setup(name)
    compiled = forward_loss(model, objective, compile_model=True, one_graph=one_graph)
    eager = forward_loss(model, objective, compile_model=False, one_graph=False)
    first = None
    for batch in batches(objective, steps):
        loss, _ = loss_and_gradients(model, compiled, batch)
        first = first or compile_counts()
        torch.testing.assert_close(loss, loss_and_gradients(model, eager, batch)[0],
                                   rtol=1e-4, atol=1e-5)
    return first.graph_breaks, compile_counts().since(first)


@pytest.mark.slow
@pytest.mark.parametrize("one_graph", [False, True], ids=["chunked", "one-graph"])
@pytest.mark.parametrize("name", OBJECTIVES)
def test_every_objective_compiles_once_without_a_break(name, one_graph):
    first_breaks, later = compiled_counts(name, one_graph)
    assert (first_breaks, later.graph_breaks, later.graphs) == (0, 0, 0)


@pytest.mark.slow
def test_a_block_mask_built_before_the_compiled_model_costs_no_break(monkeypatch):
    """FlexAttention's route (CUDA's) forced on the CPU, forward only (it has no backward
    pass there): packed documents' block masks, built outside the graph, reach every layer
    with no break or recompilation, and the losses are SDPA's with the dense mask."""
    torch._dynamo.reset()
    reset_compile_counts()
    objective, model = setup("clm")
    eager = forward_loss(model, objective, compile_model=False)
    compiled = forward_loss(model, objective, compile_model=True, one_graph=False)
    first = None
    with torch.no_grad():
        for batch in batches(objective, 3):
            expected = eager(batch).mean()
            monkeypatch.setattr(attention, "FLEX_DEVICES", frozenset({"cuda", "cpu"}))
            torch.testing.assert_close(compiled(batch).mean(), expected, rtol=1e-5, atol=1e-6)
            monkeypatch.setattr(attention, "FLEX_DEVICES", frozenset({"cuda"}))
            first = first or compile_counts()
    assert first.graph_breaks == 0 and compile_counts().since(first) == CompileCounts(0, 0)
