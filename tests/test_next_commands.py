"""The commands a run suggests next repeat every setting that shaped it: read back by lmlab's
own parser, they give the run's configuration (its place, budget and start aside)."""

from __future__ import annotations

import shlex
from dataclasses import replace

import numpy as np
import pytest

from lmlab.cli import build_parser
from lmlab.commands.pretrain_summary import summary
from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.options import config_from_args, options_of
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.special_tokens import SpecialTokens
from lmlab.train.entry import pretrain


def parsed(words: list[str]) -> TrainConfig:
    assert words[:2] == ["lmlab", "pretrain"]
    return config_from_args(build_parser().parse_args(words[1:]), TrainConfig)


def test_options_of_reads_back_to_the_same_config():
    config = TrainConfig(objective="mlm", model="bert-tiny", seq_len=16, batch_size=4, lr=3e-4,
                         objective_options=ObjectiveOptions(mlm_rate=0.3, whole_word=True),
                         model_overrides={"dropout": 0.1},
                         data="my data", steps=2, out="runs/x")
    words = options_of(config)
    assert parsed(["lmlab", "pretrain", *words]) == config
    assert "--lr" in words and "--mlm-rate" in words and "--schedule" not in words  # a default
    left = options_of(config, leave_out=("steps", "out"))
    assert "--steps" not in left and "--out" not in left


@pytest.mark.slow
def test_the_suggested_longer_run_repeats_the_model_and_its_shape(tmp_path):
    rng = np.random.default_rng(0)
    special = SpecialTokens.layout(80, n_sentinels=10)
    documents = [rng.integers(20, 80, 40) for _ in range(60)]
    dataset = in_memory_dataset(documents[:50], documents[50:], special)
    config = TrainConfig(objective="mlm", model="bert-tiny", seq_len=16, batch_size=4, lr=2e-3,
                         steps=2, out=str(tmp_path / "my run"))
    out = pretrain(config, dataset)
    last = summary(out, dataset, config).splitlines()[-1]
    command, note = last.strip().split("   ")
    assert note == "(longer runs learn more)"
    again = parsed(shlex.split(command))
    assert again == replace(config, steps=None, minutes=30.0, overwrite=True)
