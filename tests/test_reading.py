"""The reading side over a prepared directory (memory-mapped TokenFile): determinism, rank
sharding, resumption mid-epoch, DataLoader workers, and NSP training on real sentences."""

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import lmlab.data
from lmlab.config.training import TrainConfig
from lmlab.data.loader import BlockBatches
from lmlab.runs.metrics import read_metrics
from lmlab.train.entry import pretrain

WORDS = "a cat sat on the warm mat while two dogs ran past an old red barn".split()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(0)
    texts = [" ".join(" ".join(rng.choice(WORDS, size=rng.integers(3, 10))).capitalize() + "."
                      for _ in range(rng.integers(2, 7))) for _ in range(300)]
    out = lmlab.data.prepare_documents(texts, tmp_path_factory.mktemp("d") / "data",
                                       vocab_size=300, sentinels=4, validation_fraction=0.1)
    return lmlab.data.open_dataset(out)


def batches(dataset, packing, **options):
    special = dataset.special
    return BlockBatches(dataset.train, 32, 4, packing, special.pad, special.sep, **options)


@pytest.mark.parametrize("packing", ["concatenate", "best_fit", "sentences"])
def test_batches_are_deterministic_and_ranks_share_without_overlap(dataset, packing):
    one, again = batches(dataset, packing, seed=3), batches(dataset, packing, seed=3)
    assert torch.equal(one.batch(5).tokens, again.batch(5).tokens)
    # Rank r's i-th batch is the single process's batch 2i + r: the ranks split each epoch
    # of distinct blocks between them, and together take what one process takes.
    ranks = [batches(dataset, packing, seed=3, rank=r, world_size=2) for r in range(2)]
    assert ranks[0].batches_per_epoch == ranks[1].batches_per_epoch > 1
    for i in range(ranks[0].batches_per_epoch):
        for r in range(2):
            assert torch.equal(ranks[r].batch(i).tokens, one.batch(2 * i + r).tokens)


def test_resuming_mid_epoch_continues_without_replay(dataset):
    uninterrupted = [b.tokens for _, b in zip(range(9), batches(dataset, "sentences", seed=1),
                                              strict=False)]
    first = batches(dataset, "sentences", seed=1)
    consumed = [b for _, b in zip(range(4), first, strict=False)]
    resumed = batches(dataset, "sentences", seed=1)
    resumed.load_state_dict(first.state_dict(consumed[-1]))
    rest = [b.tokens for _, b in zip(range(5), resumed, strict=False)]
    assert all(torch.equal(a, b) for a, b in
               zip(uninterrupted, [c.tokens for c in consumed] + rest, strict=True))


def test_workers_reopen_the_files_and_give_the_single_process_order(dataset):
    assert len(pickle.dumps(dataset.train)) < 1000  # paths, not the token stream
    source = batches(dataset, "best_fit", seed=2)
    single = [b.tokens for _, b in zip(range(6), source, strict=False)]
    loader = DataLoader(source, batch_size=None, num_workers=2)
    parallel = [b.tokens for _, b in zip(range(6), loader, strict=False)]
    assert all(torch.equal(a, b) for a, b in zip(single, parallel, strict=True))


def test_bert_pretraining_runs_on_prepared_sentences(dataset, tmp_path):
    config = TrainConfig(objective="mlm+nsp", model="bert-tiny", out=str(tmp_path / "run"),
                         seq_len=32, batch_size=4, steps=2, eval_every=2, eval_batches=1,
                         checkpoint_every=2, log_every=1)
    out = pretrain(config, dataset)
    train = [r for r in read_metrics(out) if r["kind"] == "train"]
    assert train[-1]["step"] == 2 and all(np.isfinite(r["loss"]) for r in train)
