"""Objectives that leave a head idle on some steps train under DDP as in one process."""

import pytest

from tests.test_pretrain import run_script, torchrun, train_losses


@pytest.mark.slow
def test_alternating_objectives_under_ddp_match_one_process(tmp_path):
    """`alternate:clm,mlm@2` trains only the lm head on steps 1-2 and 5-6 and only the mlm
    head on steps 3-4; DDP must accept the idle head on every step and give one process's
    losses. Masks are drawn per rank, so the mlm steps replace every ordinary token by [MASK]:
    a draw that comes out the same on every rank and in one process."""
    args = ["--objective", "alternate:clm,mlm@2", "--steps", "6", "--batch-size", "8",
            "--micro-batch-size", "4", "--checkpoint-every", "6",
            "--mlm-rate", "1", "--mask-prob", "1", "--random-prob", "0",
            "--model-overrides", '{"dropout": 0.0}']
    run_script(tmp_path / "one", *args)
    run_script(tmp_path / "two", *args, launcher=torchrun(2))
    one, two = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert one.keys() == two.keys() == set(range(1, 7))
    for step in one:
        assert two[step] == pytest.approx(one[step], rel=1e-4), step
