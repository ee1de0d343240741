"""`lmlab pretrain` on an in-memory synthetic Markov language, for subprocess and torchrun
tests: `python tests/synthetic_run.py --out RUN --steps 8 ...` takes every pretrain option."""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmlab.commands.pretrain import add_pretrain_options
from lmlab.config.options import config_from_args
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.objectives import SpecialTokens
from lmlab.train.entry import pretrain
from lmlab.train.stopping import RunStopped
from tests.markov_chain import MarkovChain

N_SYMBOLS = 50
FIRST_ID = 7


def synthetic_dataset(documents: int = 4000, length: int = 60):
    chain = MarkovChain.random(N_SYMBOLS, concentration=0.1, seed=0)
    rng = np.random.default_rng(0)
    special = SpecialTokens.layout(FIRST_ID + N_SYMBOLS)
    train = list(chain.sample(documents, length, rng) + FIRST_ID)
    validation = list(chain.sample(documents // 8, length, rng) + FIRST_ID)
    return chain, in_memory_dataset(train, validation, special)


def main() -> None:
    parser = argparse.ArgumentParser()
    add_pretrain_options(parser)
    try:
        pretrain(config_from_args(parser.parse_args(), TrainConfig), synthetic_dataset()[1])
    except RunStopped as stopped:  # as the command line exits
        sys.exit(128 + stopped.signum)


if __name__ == "__main__":
    main()
