"""The learning floor: on a language with a known entropy, a tiny model approaches the floor
and never goes below it (below would mean information leaking through the attention mask)."""

import numpy as np
import pytest
import torch

from lmlab.config.presets import preset
from lmlab.model import LanguageModel, MaskSpec
from lmlab.objectives import IGNORE_INDEX, CausalLM, MaskedLM, SpecialTokens
from tests.markov_chain import MarkovChain

FIRST_SYMBOL_ID = 7  # after the seven named special tokens


def train_against_floor(objective, family, chain, floor_of, steps, rows, length, lr,
                        leaky_mask=None):
    """Train with AdamW + one-cycle; every 100 steps return (eval loss, floor) on fixed data."""
    torch.manual_seed(0)
    special = objective.special
    model = LanguageModel(preset(f"{family}-tiny", special.vocab_size, length, dropout=0.0),
                          heads=objective.heads)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=steps,
                                                   pct_start=0.1)
    rng, generator = np.random.default_rng(1), torch.Generator().manual_seed(2)
    eval_symbols = chain.sample(256, length, np.random.default_rng(99))
    eval_batch = objective.make_batch(torch.from_numpy(eval_symbols + FIRST_SYMBOL_ID),
                                      torch.Generator().manual_seed(3))
    floor = floor_of(eval_symbols, eval_batch)
    history = []
    for step in range(1, steps + 1):
        tokens = torch.from_numpy(chain.sample(rows, length, rng) + FIRST_SYMBOL_ID)
        batch = objective.make_batch(tokens, generator)
        if leaky_mask is not None:
            batch.mask = leaky_mask
        loss = objective.loss(model(**batch.model_inputs()), batch).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0:
            model.eval()
            with torch.no_grad():
                if leaky_mask is not None:
                    eval_batch.mask = leaky_mask
                outputs = model(**eval_batch.model_inputs())
                history.append(float(objective.loss(outputs, eval_batch).mean()))
            model.train()
    return history, floor


def causal_floor(chain):
    return lambda symbols, batch: float(chain.next_symbol_nll(symbols).mean())


def masked_floor(chain):
    def floor(symbols, batch):
        hidden = (batch.targets != IGNORE_INDEX).numpy()
        return float(np.nanmean(chain.masked_symbol_nll(symbols, hidden)))
    return floor


@pytest.mark.slow
def test_causal_lm_reaches_within_10_percent_of_the_entropy_rate_and_never_below():
    chain = MarkovChain.random(n_symbols=50, concentration=0.1, seed=0)
    special = SpecialTokens.layout(vocab_size=FIRST_SYMBOL_ID + 50)
    history, floor = train_against_floor(CausalLM(special), "gpt2", chain, causal_floor(chain),
                                         steps=300, rows=32, length=64, lr=3e-3)
    assert floor == pytest.approx(chain.entropy_rate(), rel=0.02)  # the sample is typical
    assert all(loss > floor - 0.02 for loss in history), (history, floor)
    assert history[-1] < 1.10 * floor, (history, floor)


@pytest.mark.slow
def test_masked_lm_approaches_the_exact_posterior_entropy_and_never_goes_below():
    chain = MarkovChain.random(n_symbols=20, concentration=0.1, seed=0)
    special = SpecialTokens.layout(vocab_size=FIRST_SYMBOL_ID + 20)
    # Every selected position shows [MASK]: with "keep" or "random" inputs the floor would
    # need their probabilities too.
    objective = MaskedLM(special, rate=0.3, mask_prob=1.0, random_prob=0.0)
    history, floor = train_against_floor(objective, "modern", chain, masked_floor(chain),
                                         steps=800, rows=64, length=32, lr=4e-3)
    assert all(loss > floor - 0.02 for loss in history), (history, floor)
    assert history[-1] < 1.10 * floor, (history, floor)


@pytest.mark.slow
def test_the_floor_check_catches_a_leaking_mask():
    """Causal targets under a bidirectional mask can be copied: the loss falls through the
    floor within a few hundred steps, which is what the checks above would flag."""
    chain = MarkovChain.random(n_symbols=50, concentration=0.1, seed=0)
    special = SpecialTokens.layout(vocab_size=FIRST_SYMBOL_ID + 50)
    history, floor = train_against_floor(CausalLM(special), "modern", chain,
                                         causal_floor(chain), steps=200, rows=32, length=32,
                                         lr=3e-3, leaky_mask=MaskSpec("bidirectional"))
    assert history[-1] < floor - 0.5, (history, floor)
