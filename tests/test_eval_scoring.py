"""Scoring rules against their plain definitions: pseudo-log-likelihood one mask at a time,
sliding windows against independent chunks, each rule against the training objective's own
loss, and a hand-built model whose log-probabilities are known in closed form; continuations
scored after their contexts against the model called directly."""

import math

import pytest
import torch

from lmlab.config.presets import preset
from lmlab.eval import scoring
from lmlab.eval.evaluate import score_continuations
from lmlab.eval.rules import MaskedScoring, NextTokenScoring, SpanScoring
from lmlab.eval.scoring import score_documents
from lmlab.eval.windows import centred_windows, left_context_windows
from lmlab.model import LanguageModel, MaskSpec
from lmlab.objectives import CausalLM, PrefixLM, SpecialTokens
from lmlab.objectives.span_corruption import corrupt_spans
from lmlab.runs import Run
from tests.eval_models import favouring_model

CONTEXT = 24


@pytest.fixture(scope="module")
def special():
    return SpecialTokens.layout(vocab_size=90, n_sentinels=5)


def tiny(family: str, special, heads, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(preset(f"{family}-tiny", special.vocab_size, CONTEXT), heads).eval()


def documents(special, lengths=(3, 9, 17, 6, 22), seed=0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    first = max(special.all_ids) + 1
    return [torch.randint(first, special.vocab_size, (n,), generator=generator)
            for n in lengths]


def full_log_probs(model, ids, mask, head) -> torch.Tensor:
    """(T, V) log-probabilities from a plain forward of one row, every head position."""
    with torch.no_grad():
        logits = model(ids[None], mask, predict_at={head: None})[head]
    return torch.log_softmax(logits.float(), -1).reshape(len(ids), -1)


def test_pseudo_log_likelihood_batched_equals_one_mask_at_a_time(special):
    model = tiny("bert", special, ("mlm",))
    docs = documents(special)
    batched = score_documents(model, MaskedScoring(special), docs, batch_tokens=200)
    for doc, got, count in zip(docs, batched.log_likelihood, batched.predictions, strict=True):
        row = torch.cat((doc, torch.tensor([special.eos])))  # the document as in training
        expected = 0.0
        for i in range(len(doc)):
            masked = row.clone()
            masked[i] = special.mask
            expected += float(full_log_probs(model, masked, MaskSpec("bidirectional"),
                                             "mlm")[i, doc[i]])
        assert got == pytest.approx(expected, abs=1e-5)
        assert count == len(doc)  # every ordinary token once, [EOS] never


def test_masked_next_token_reads_one_position_earlier(special):
    model = tiny("gpt2", special, ("lm",))
    doc = documents(special, (11,))[0]
    got = score_documents(model, MaskedScoring(special, head="lm", next_token=True), [doc])
    row = torch.cat((doc, torch.tensor([special.eos])))
    expected = 0.0
    for i in range(1, len(doc)):  # the first token has nothing before it
        masked = row.clone()
        masked[i] = special.mask
        expected += float(full_log_probs(model, masked, MaskSpec("bidirectional"), "lm")[
            i - 1, doc[i]])
    assert got.log_likelihood[0] == pytest.approx(expected, abs=1e-5)
    assert got.predictions[0] == len(doc) - 1


@pytest.mark.parametrize("objective,rule", [
    (CausalLM, NextTokenScoring),
    (lambda s: PrefixLM(s, prefix_len=1), lambda s: NextTokenScoring(s, prefix=True)),
])
def test_next_token_rules_score_the_training_layout(special, objective, rule):
    """A document within the context scores minus the training loss of its own row."""
    model = tiny("gpt2", special, ("lm",))
    docs = documents(special)
    scores = score_documents(model, rule(special), docs, stride=CONTEXT)
    for doc, got, count in zip(docs, scores.log_likelihood, scores.predictions, strict=True):
        row = torch.cat((doc, torch.tensor([special.eos])))[None]
        training = objective(special)
        batch = training.make_batch(row, torch.Generator().manual_seed(0))
        with torch.no_grad():
            loss_sum, target_count = training.loss(model(**batch.model_inputs()),
                                                   batch).terms[training.name]
        assert got == pytest.approx(-float(loss_sum), abs=1e-4)
        assert count == int(target_count) == len(doc)  # tokens 2..n and the closing [EOS]


def test_span_rule_reads_the_t5_layout(special):
    """Each token as a one-token noise span, laid out by span corruption's own function."""
    model = tiny("gpt2", special, ("lm",))
    doc = documents(special, (12,))[0]
    got = score_documents(model, SpanScoring(special), [doc])
    source = torch.cat((doc, torch.tensor([special.eos])))
    expected = 0.0
    for i in range(len(doc)):
        noise = torch.zeros(len(source), dtype=torch.bool)
        noise[i] = True
        inputs, targets = corrupt_spans(source, noise, special.sentinels, special.eos)
        row = torch.cat((inputs, targets))
        mask = MaskSpec("prefix", prefix_len=torch.tensor([len(inputs)]))
        expected += float(full_log_probs(model, row, mask, "lm")[len(inputs), doc[i]])
    assert got.log_likelihood[0] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("plan", [left_context_windows, centred_windows])
@pytest.mark.parametrize("length,window,stride", [(1, 4, 2), (10, 4, 4), (37, 8, 3),
                                                  (37, 8, 1), (50, 16, 16), (16, 16, 5)])
def test_windows_score_every_token_exactly_once(plan, length, window, stride):
    scored = []
    for w in plan(length, window, stride):
        assert 0 <= w.start <= w.score_start < w.score_stop <= w.stop <= length
        assert w.stop - w.start <= window
        scored += range(w.score_start, w.score_stop)
    assert scored == list(range(length))


def test_left_context_windows_give_each_token_at_least_window_minus_stride():
    for w in left_context_windows(100, 16, 4)[1:]:
        assert w.score_start - w.start >= 16 - 4


def test_stride_equal_to_window_scores_independent_chunks(special):
    model = tiny("gpt2", special, ("lm",))
    doc = documents(special, (70,))[0]
    windowed = score_documents(model, NextTokenScoring(special), [doc], stride=CONTEXT)
    row = torch.cat((doc, torch.tensor([special.eos])))
    expected, count = 0.0, 0
    for start in range(0, len(row), CONTEXT):  # non-overlapping chunks, each on its own
        chunk = row[start:start + CONTEXT]
        log_probs = full_log_probs(model, chunk, MaskSpec("causal"), "lm")
        expected += float(log_probs[:-1].gather(1, chunk[1:, None]).sum())
        count += len(chunk) - 1
    assert windowed.log_likelihood[0] == pytest.approx(expected, abs=1e-4)
    assert windowed.predictions[0] == count == len(row) - math.ceil(len(row) / CONTEXT)


@pytest.mark.parametrize("stride", [1, 5, 12, 23])
def test_smaller_strides_score_every_token_but_the_first_once(special, stride):
    model = tiny("gpt2", special, ("lm",))
    doc = documents(special, (70,))[0]
    scores = score_documents(model, NextTokenScoring(special), [doc], stride=stride)
    assert scores.predictions[0] == len(doc)  # 71 tokens with [EOS], minus the first
    masked = score_documents(tiny("bert", special, ("mlm",)), MaskedScoring(special), [doc],
                             stride=stride)
    assert masked.predictions[0] == len(doc)


def test_a_hand_built_model_gives_closed_form_log_probabilities(special):
    favoured = 40
    model = favouring_model(special, favoured, logit=5.0, context=CONTEXT)
    log_z = math.log(math.exp(5.0) + special.vocab_size - 1)
    doc = torch.tensor([50, favoured, favoured, 51, favoured])
    scores = score_documents(model, NextTokenScoring(special), [doc])
    # Predicted: favoured ×3 (5 - log Z each), 51 and [EOS] (-log Z each).
    assert scores.log_likelihood[0] == pytest.approx(3 * 5.0 - 5 * log_z, abs=1e-5)
    assert scores.top1[0] == 3  # the favoured token is the most likely everywhere


@pytest.mark.parametrize("rule", [NextTokenScoring, MaskedScoring])
def test_scores_do_not_depend_on_how_rows_are_batched(special, rule, monkeypatch):
    model = tiny("bert" if rule is MaskedScoring else "gpt2", special,
                 ("mlm",) if rule is MaskedScoring else ("lm",))
    docs = documents(special, (30, 3, 9, 17, 6, 22))
    whole = score_documents(model, rule(special), docs, stride=8)
    monkeypatch.setattr(scoring, "LOGITS_PER_BATCH", 5 * special.vocab_size)  # 5 per batch
    batches, plain = [], scoring._log_probs
    monkeypatch.setattr(scoring, "_log_probs", lambda model, rule, chunks: batches.append(
        (sum(len(c.targets) for c in chunks), sum(len(c.ids) for c in chunks),
         max(c.ids.shape[1] for c in chunks))) or plain(model, rule, chunks))
    pieces = score_documents(model, rule(special), docs, stride=8, batch_tokens=40)
    for predictions, rows, length in batches:  # a single row may exceed a limit alone
        assert rows == 1 or (predictions <= 5 and rows * length <= 40)
    assert pieces.log_likelihood == pytest.approx(whole.log_likelihood, abs=1e-5)
    assert (pieces.predictions == whole.predictions).all()
    assert (pieces.top1 == whole.top1).all()


def direct_log_probs(model: LanguageModel, context: list[int], continuation: list[int],
                     prefix: bool) -> torch.Tensor:
    """(len(continuation), V) log-probabilities of the tokens after the context, from one
    forward pass over the whole row."""
    ids = torch.tensor([context + continuation[:-1]])
    mask = (MaskSpec("prefix", torch.tensor([len(context)])) if prefix
            else MaskSpec("causal"))
    with torch.inference_mode():
        logits = model(ids, mask, torch.arange(ids.shape[1])[None])["lm"][0]
    return logits[len(context) - 1:].log_softmax(-1)


def direct_log_likelihood(model, context, continuation, prefix: bool) -> float:
    read = direct_log_probs(model, context, continuation, prefix)
    return float(read.gather(1, torch.tensor(continuation)[:, None]).sum())


@pytest.mark.parametrize("spec", ["clm", "prefix"])
def test_a_continuation_is_scored_after_its_context(special, spec):
    """A causal model reads the context causally, a prefix LM as its bidirectional prefix, as
    each was trained; a context too long for the window loses its start, and the greedy
    continuation, only it, is recognised as such."""
    model = tiny("gpt2", special, ("lm",))
    run, prefix = Run.of(model, spec, special), spec == "prefix"
    generator = torch.Generator().manual_seed(1)
    context, long = (torch.randint(10, 90, (n,), generator=generator).tolist() for n in (5, 40))
    continuation = torch.randint(10, 90, (4,), generator=generator).tolist()
    ranked = direct_log_probs(model, context, [0], prefix)[0].argsort(descending=True).tolist()
    scores = score_continuations(run, [(context, continuation), (long, continuation),
                                       (context, ranked[:1]), (context, ranked[1:2])])
    kept = long[-(CONTEXT + 1 - len(continuation)):]  # the window's first inputs
    expected = [direct_log_likelihood(model, context, continuation, prefix),
                direct_log_likelihood(model, kept, continuation, prefix)]
    assert scores.log_likelihood[:2] == pytest.approx(expected, abs=1e-5)
    assert scores.predictions.tolist() == [4, 4, 1, 1]
    assert scores.top1[2:].tolist() == [1, 0]


def test_a_continuation_longer_than_the_window_is_refused(special):
    run = Run.of(tiny("gpt2", special, ("lm",)), "clm", special)
    with pytest.raises(ValueError, match="cannot be scored in a window of 24"):
        score_continuations(run, [([10], [11] * (CONTEXT + 1))])
    masked = Run.of(tiny("bert", special, ("mlm",)), "mlm", special)
    with pytest.raises(ValueError, match="never learned to predict the next token"):
        score_continuations(masked, [([10], [11])])
