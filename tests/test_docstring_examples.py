"""The before / after examples in the objectives' docstrings, run as written: each test reads
the example's lines from the docstring, maps its words to ids, forces any random draw to the
one the example shows, and checks the documented inputs and targets."""

import inspect
import itertools

import torch

from lmlab.objectives import (
    IGNORE_INDEX,
    CausalLM,
    MaskedLM,
    MaskedLMWithNSP,
    PrefixLM,
    SpanCorruption,
    SpecialTokens,
    Then,
    masking,
    nsp,
    span_corruption,
)
from lmlab.objectives.nsp import IS_NEXT, NOT_NEXT
from lmlab.objectives.registry import build_objective
from lmlab.objectives.span_corruption import span_counts

SPECIAL = SpecialTokens.layout(vocab_size=64, n_sentinels=2)
WORDS = "the cat sat on mat a dog down b c d e f s1 s2 s3 t1 t2".split()
VOCAB = {"|": SPECIAL.eos, "[CLS]": SPECIAL.cls, "[SEP]": SPECIAL.sep, "M": SPECIAL.mask,
         "<0>": SPECIAL.sentinels[0], "<1>": SPECIAL.sentinels[1], "-": IGNORE_INDEX,
         **{word: 20 + i for i, word in enumerate(WORDS)}}


def line(objective: type, label: str) -> list[str]:
    """The words after `label` on the docstring line it opens."""
    for text in inspect.getdoc(objective).splitlines():
        words = text.split()
        if words and words[0] == label:
            return words[1:]
    raise AssertionError(f"{objective.__name__}'s docstring has no {label!r} line")


def ids(words: list[str]) -> list[int]:
    """The example's ids: its words up to the first that is not in VOCAB (a comment)."""
    return [VOCAB[word] for word in itertools.takewhile(VOCAB.__contains__, words)]


def padded(row: list[int], length: int) -> list[int]:
    return row + [SPECIAL.pad] * (length - len(row))


def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


class ForcedDraws:
    """`torch` as one module sees it, but `rand` and `randint` hand out the given values in
    turn, each checked against the shape and range asked for."""

    def __init__(self, rand=(), randint=()):
        self.rand_values, self.randint_values = list(rand), list(randint)

    def __getattr__(self, name):
        return getattr(torch, name)

    def rand(self, size, generator=None, dtype=torch.float32):
        value = torch.tensor(self.rand_values.pop(0), dtype=dtype)
        shape = (size,) if isinstance(size, int) else tuple(size)
        assert value.shape == shape and ((0 <= value) & (value < 1)).all()
        return value

    def randint(self, *args, generator=None):
        low, high, size = (0, *args) if len(args) == 2 else args
        value = torch.tensor(self.randint_values.pop(0))
        assert value.shape == torch.Size(size) and ((low <= value) & (value < high)).all()
        return value

    def used_up(self) -> bool:
        return not self.rand_values and not self.randint_values


def test_causal_lm_example():
    tokens = torch.tensor([ids(line(CausalLM, "tokens"))])
    batch = CausalLM(SPECIAL).make_batch(tokens, generator())
    assert batch.input_ids[0].tolist() == ids(line(CausalLM, "inputs"))
    assert batch.targets[0].tolist() == ids(line(CausalLM, "targets"))
    # "causal, within each document": the [EOS] closes the first
    assert batch.mask.kind == "causal"
    assert batch.mask.segment_ids.tolist() == [[1, 1, 1, 1, 2, 2]]


def test_prefix_lm_example():
    assert "with a prefix of 3" in inspect.getdoc(PrefixLM)
    tokens = torch.tensor([ids(line(PrefixLM, "tokens"))])
    batch = PrefixLM(SPECIAL, prefix_len=3).make_batch(tokens, generator())
    assert batch.input_ids[0].tolist() == ids(line(PrefixLM, "inputs"))
    assert batch.targets[0].tolist() == ids(line(PrefixLM, "targets"))
    assert batch.mask.kind == "prefix" and batch.mask.prefix_len.tolist() == [3]


def test_masked_lm_example(monkeypatch):
    assert "rate 0.3" in inspect.getdoc(MaskedLM)
    tokens = ids(line(MaskedLM, "tokens"))  # [CLS] the cat sat down [SEP]
    mat = SPECIAL.ordinary_ids().tolist().index(VOCAB["mat"])
    draws = ForcedDraws(
        # selection below the rate at cat and down; [CLS] and [SEP] are never eligible
        rand=[[[0.0, 0.5, 0.1, 0.5, 0.2, 0.0]],
              # of the selected, cat below 0.8 becomes [MASK], down in [0.8, 0.9) random
              [[0.0, 0.0, 0.5, 0.0, 0.85, 0.0]]],
        randint=[[[0, 0, 0, 0, mat, 0]]])  # the random token drawn for down: mat
    monkeypatch.setattr(masking, "torch", draws)
    batch = MaskedLM(SPECIAL, rate=0.3).make_batch(torch.tensor([tokens]), generator())
    assert draws.used_up()
    assert batch.input_ids[0].tolist() == ids(line(MaskedLM, "inputs"))
    assert batch.targets[0].tolist() == ids(line(MaskedLM, "targets"))


def test_span_corruption_example(monkeypatch):
    objective = SpanCorruption(SPECIAL, noise_density=0.5, mean_span_length=2.0)
    assert "noise density 0.5, mean span length 2" in inspect.getdoc(SpanCorruption)
    tokens = ids(line(SpanCorruption, "tokens"))  # a b c d e f
    prefix, suffix = ids(line(SpanCorruption, "prefix")), ids(line(SpanCorruption, "suffix"))
    noise = torch.tensor([False, True, True, False, False, True])  # b c and f, as shown
    # a mask these settings can draw: their noise tokens and spans
    assert span_counts(6, 0.5, 2.0) == (3, 2)
    monkeypatch.setattr(span_corruption, "noise_mask", lambda length, *_: noise[:length])
    block = len(prefix) + len(suffix)  # the whole source fits, with no padding left
    batch = objective.make_batch(torch.tensor([padded(tokens, block)]), generator())
    assert batch.input_ids[0].tolist() == prefix + suffix
    assert batch.mask.kind == "prefix" and batch.mask.prefix_len.tolist() == [len(prefix)]
    # the loss is on the suffix, each token predicted from the position before it
    unscored = [IGNORE_INDEX] * (len(prefix) - 1)
    assert batch.targets[0].tolist() == unscored + suffix + [IGNORE_INDEX]


def test_masked_lm_with_nsp_example(monkeypatch):
    row = line(MaskedLMWithNSP, "row")  # s1 [SEP] s2 [SEP] s3   another row: t1 [SEP] t2
    other_row = row[row.index("row:") + 1:]
    tokens = torch.tensor([padded(ids(row), 8), padded(ids(other_row), 8)])
    is_next = line(MaskedLMWithNSP, "IsNext")
    types = [int(t) for t in is_next[is_next.index("types") + 1:]]
    unmasked = MaskedLMWithNSP(MaskedLM(SPECIAL, rate=0.0))  # the pairs, before masking

    # each row: A is its first sentence (split draw 0), then B is the rest (IsNext, < 0.5)
    draws = ForcedDraws(rand=[[0.1], [0.1]], randint=[[0], [0]])
    monkeypatch.setattr(nsp, "torch", draws)
    batch = unmasked.make_batch(tokens, generator())
    assert draws.used_up()
    assert batch.input_ids[0].tolist() == padded(ids(is_next), 8)
    assert batch.token_type_ids[0].tolist() == padded(types, 8)
    assert batch.extras["nsp_label"].tolist() == [IS_NEXT, IS_NEXT]

    # row 0's B instead from the other row (>= 0.5), from its second sentence: t2
    draws = ForcedDraws(rand=[[0.9], [0.1]], randint=[[0], [1], [1], [0]])
    monkeypatch.setattr(nsp, "torch", draws)
    batch = unmasked.make_batch(tokens, generator())
    assert draws.used_up()
    assert batch.input_ids[0].tolist() == padded(ids(line(MaskedLMWithNSP, "NotNext")), 8)
    assert batch.extras["nsp_label"].tolist() == [NOT_NEXT, IS_NEXT]


def test_sequence_example(monkeypatch):
    sequence = build_objective("then:clm,mlm@0.5", SPECIAL).for_run(4)
    assert "in a run of 4 steps switches at step round(0.5 × 4) = 2" in " ".join(
        inspect.getdoc(Then).split())
    assert sequence.switch_step == 2
    tokens = torch.tensor([ids(line(Then, "tokens"))])  # the cat sat | a dog
    causal = sequence.make_batch(tokens, generator(), step=1)
    assert causal.input_ids[0].tolist() == ids(line(Then, "inputs@1"))
    assert causal.targets[0].tolist() == ids(line(Then, "targets@1"))
    assert causal.mask.kind == "causal"
    # at step 2, masked LM at its default rate 0.15: cat drawn below it, and below 0.8, masked
    draws = ForcedDraws(rand=[[[0.5, 0.1, 0.5, 0.5, 0.5, 0.5]], [[0.5, 0.0, 0.5, 0.5, 0.5, 0.5]]],
                        randint=[[[0] * 6]])
    monkeypatch.setattr(masking, "torch", draws)
    masked = sequence.make_batch(tokens, generator(), step=2)
    assert draws.used_up()
    assert masked.input_ids[0].tolist() == ids(line(Then, "inputs@2"))
    assert masked.targets[0].tolist() == ids(line(Then, "targets@2"))
    assert masked.mask.kind == "bidirectional"


def test_replaced_token_detection_example(monkeypatch):
    from lmlab.objectives.rtd import ReplacedTokenDetection

    doc = ReplacedTokenDetection
    assert "rate 0.3" in inspect.getdoc(doc)
    tokens = ids(line(doc, "tokens"))  # [CLS] the cat sat down [SEP]
    draws = ForcedDraws(rand=[[[0.0, 0.5, 0.1, 0.5, 0.2, 0.0]],  # cat and down selected
                              [[0.0, 0.0, 0.5, 0.0, 0.5, 0.0]]],  # both become [MASK]
                        randint=[[[0] * 6]])  # random tokens, drawn and not used
    monkeypatch.setattr(masking, "torch", draws)
    objective = ReplacedTokenDetection(MaskedLM(SPECIAL, rate=0.3))
    batch = objective.make_batch(torch.tensor([tokens]), generator())
    assert draws.used_up()
    assert batch.input_ids[0].tolist() == ids(line(doc, "inputs"))
    assert batch.targets[0].tolist() == ids(line(doc, "targets"))
    sampled = ids(line(doc, "sampled"))  # a generator sure of dog, then of down

    def model(input_ids, predict_at, **_):
        if "generator" in predict_at:
            logits = torch.full((2, SPECIAL.vocab_size), -1e4)
            logits[0, VOCAB["dog"]] = logits[1, VOCAB["down"]] = 0.0
            return {"generator": logits}
        assert input_ids[0].tolist() == sampled  # the discriminator reads the samples
        return {"rtd": torch.zeros(predict_at["rtd"].flat.numel())}

    outputs = objective.outputs(model, batch)
    assert outputs["replaced"][0].tolist() == [float(w) for w in line(doc, "replaced")[:6]]
