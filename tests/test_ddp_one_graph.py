"""Under DDP the one-graph loss (whole logits and a plain cross-entropy compiled with the
model) gives the chunked loss's values and gradients, on two CPU processes over gloo."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lmlab.train.step import forward_loss
from tests.cli_process import free_port
from tests.test_compiled_step import batches, setup


def _rank(rank: int, port: int, name: str, found: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    try:
        objective, model = setup(name)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        batch = list(batches(objective, 1, seed=rank))[0]  # each rank its own rows
        results = {}
        for form, compiled in (("chunked", False), ("one-graph", True)):
            ddp.zero_grad(set_to_none=True)
            loss = forward_loss(ddp, objective, compile_model=compiled, one_graph=compiled)
            value = loss(batch).mean()
            value.backward()  # DDP averages the two ranks' gradients
            results[form] = (value.detach(), {n: p.grad.clone() for n, p in
                                              model.named_parameters() if p.grad is not None})
        found[rank] = results
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_the_one_graph_loss_under_ddp_equals_the_chunked_loss():
    name = "mlm"  # padded head positions too
    found = mp.Manager().dict()
    mp.spawn(_rank, args=(free_port(), name, found), nprocs=2)
    for rank in (0, 1):
        (loss, gradients), (whole_loss, whole_gradients) = (found[rank]["chunked"],
                                                            found[rank]["one-graph"])
        torch.testing.assert_close(whole_loss, loss, rtol=1e-5, atol=1e-6)
        assert whole_gradients.keys() == gradients.keys()
        for key, gradient in gradients.items():
            torch.testing.assert_close(whole_gradients[key], gradient, rtol=1e-4, atol=1e-5)
    assert not torch.equal(found[0]["chunked"][0], found[1]["chunked"][0])  # rows differ
