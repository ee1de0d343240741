"""Packing plans and the block loader: coverage, determinism, rank sharding, resumption."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from lmlab.data.errors import DataError
from lmlab.data.loader import ArraySource, BlockBatches
from lmlab.data.packing import best_fit_plan, document_chunks, sentence_rows

EOS, PAD, SEP = 6, 0, 3


def corpus(documents: int = 300, seed: int = 0) -> ArraySource:
    """Documents of varied length, each ending with EOS, token ids unique per position."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 90, size=documents)
    stops = np.cumsum(lengths)
    spans = np.stack((stops - lengths, stops), axis=1)
    tokens = np.arange(10, 10 + int(stops[-1]), dtype=np.int64)
    tokens[stops - 1] = EOS
    sentences = np.array([[s, min(s + 7, e)] for a, e in spans for s in range(a, e, 7)])
    return ArraySource(tokens, spans, sentences)


def test_best_fit_keeps_every_token_once_and_cuts_only_long_documents():
    source = corpus()
    blocks = best_fit_plan(source.spans, 64)
    pieces = sorted(p for block in blocks for p in block)
    assert pieces == sorted(document_chunks(source.spans, 64))
    covered = np.concatenate([np.arange(a, b) for a, b in pieces])
    assert np.array_equal(np.sort(covered), np.arange(source.num_tokens))
    assert all(sum(b - a for a, b in block) <= 64 for block in blocks)
    short = {(a, b) for a, b in source.spans.tolist() if b - a <= 64}
    assert short <= set(pieces)  # a document that fits is never cut
    fill = source.num_tokens / (64 * len(blocks))
    assert fill > 0.95, fill


def test_sentence_rows_never_mix_documents_and_fit():
    source = corpus(50)
    rows = sentence_rows(source.sentences, source.spans, 32)
    doc_of = np.searchsorted(source.spans[:, 1], np.arange(source.num_tokens), side="right")
    for row in rows:
        assert len({int(doc_of[a]) for a, _ in row}) == 1
        assert sum(b - a for a, b in row) + len(row) - 1 <= 32 - 3


@pytest.mark.parametrize("packing", ["concatenate", "best_fit", "sentences"])
def test_batches_are_deterministic_and_epochs_reshuffle(packing):
    make = lambda: BlockBatches(corpus(), 32, 4, packing, PAD, SEP, seed=7)  # noqa: E731
    first, again = make(), make()
    n = first.batches_per_epoch
    assert torch.equal(first.batch(3).tokens, again.batch(3).tokens)
    assert not torch.equal(first.batch(0).tokens, first.batch(n).tokens)
    epoch0 = {tuple(r) for i in range(n) for r in first.batch(i).tokens.tolist()}
    epoch1 = {tuple(r) for i in range(n, 2 * n) for r in first.batch(i).tokens.tolist()}
    # the same blocks in another order, but for the remainder short of a full batch, which
    # changes with each epoch's permutation so that no block is left out for good
    assert len(epoch0) == len(epoch1) == 4 * n and len(epoch0 - epoch1) < 4
    assert first.batch(0).tokens.shape == (4, 32)


def test_sentence_batches_join_sentences_with_sep():
    batch = BlockBatches(corpus(), 32, 4, "sentences", PAD, SEP, seed=0).batch(0).tokens
    assert (batch == SEP).any() and (batch[:, 0] != SEP).all()


def test_ranks_get_disjoint_equal_shares_of_each_epoch():
    world = 3
    ranks = [BlockBatches(corpus(), 16, 2, "concatenate", seed=1, rank=r, world_size=world)
             for r in range(world)]
    n = ranks[0].batches_per_epoch
    assert all(r.batches_per_epoch == n for r in ranks)
    seen = [{tuple(row) for i in range(n) for row in r.batch(i).tokens.tolist()} for r in ranks]
    assert sum(map(len, seen)) == len(set().union(*seen)) == world * n * 2


def test_resuming_from_a_state_dict_continues_without_replay():
    uninterrupted = BlockBatches(corpus(), 32, 4, "best_fit", seed=3)
    expected = [b.tokens for _, b in zip(range(12), uninterrupted, strict=False)]
    first = BlockBatches(corpus(), 32, 4, "best_fit", seed=3)
    consumed = [b for _, b in zip(range(5), first, strict=False)]
    state = first.state_dict(consumed[-1])
    resumed = BlockBatches(corpus(), 32, 4, "best_fit", seed=3)
    resumed.load_state_dict(state)
    rest = [b.tokens for _, b in zip(range(7), resumed, strict=False)]
    assert all(torch.equal(a, b) for a, b in zip(expected, [c.tokens for c in consumed] + rest,
                                                strict=True))
    with pytest.raises(ValueError, match="seed"):
        BlockBatches(corpus(), 32, 4, "best_fit", seed=4).load_state_dict(state)


def test_dataloader_workers_give_the_single_process_order():
    dataset = BlockBatches(corpus(), 32, 4, "concatenate", seed=5)
    dataset.load_state_dict({"next_index": 2, "seed": 5})
    single = [b.tokens for _, b in zip(range(6), dataset, strict=False)]
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    parallel = [b.tokens for _, b in zip(range(6), loader, strict=False)]
    assert all(torch.equal(a, b) for a, b in zip(single, parallel, strict=True))


def test_clear_errors_for_unusable_datasets():
    source = corpus(20)
    with pytest.raises(DataError, match="no sentence offsets"):
        BlockBatches(ArraySource(source.tokens, source.spans), 32, 2, "sentences")
    with pytest.raises(DataError, match="too few for one batch"):
        BlockBatches(source, 512, 8, "concatenate", world_size=2)


def test_ranks_together_take_what_one_process_takes_in_as_many_batches():
    single = BlockBatches(corpus(), 16, 2, "concatenate", seed=2)
    ranks = [BlockBatches(corpus(), 16, 2, "concatenate", seed=2, rank=r, world_size=2)
             for r in range(2)]
    for index in range(3):
        together = torch.cat([r.batch(index).tokens for r in ranks])
        alone = torch.cat([single.batch(2 * index).tokens, single.batch(2 * index + 1).tokens])
        assert torch.equal(together, alone)
