"""Generation: the KV-cache decoder equals repeated full forwards, prompts are laid out as the
objectives laid out training rows, and a tiny CLM trained on a cycle continues it."""

import pytest
import torch

from lmlab import Pretrained, load
from lmlab.config.presets import preset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.infer.generate import prepare_prompt
from lmlab.infer.infill import splice, split_spans, with_sentinels
from lmlab.infer.text_stream import IncrementalText
from lmlab.model import LanguageModel, MaskSpec
from lmlab.objectives import PrefixLM, SpanCorruption, SpecialTokens
from tests.conftest import seeded
from tests.cycle_language import SPECIAL, cycle, train_cycle_run

VOCAB, CONTEXT = 60, 40
RANDOM_SPECIAL = SpecialTokens.layout(VOCAB, n_sentinels=5)
FIRST_ORDINARY = 12
MODELS = [("gpt2", "clm"), ("gpt2", "prefix"), ("modern", "clm"), ("modern", "prefix")]


def random_pretrained(family: str, objective: str) -> Pretrained:
    """Untrained weights, scaled up so that greedy choices are not near-ties."""
    torch.manual_seed(0)
    cfg = preset(f"{family}-tiny", vocab_size=VOCAB, max_seq_len=CONTEXT, dropout=0.0,
                 init_std=0.2)
    return Pretrained.of(LanguageModel(cfg, ("lm",)).eval(), objective, RANDOM_SPECIAL)


def prompt_of(length: int, seed: int) -> list[int]:
    return torch.randint(FIRST_ORDINARY, VOCAB, (length,), generator=seeded(seed)).tolist()


# Two gaps, marked by the first two sentinels.
INFILL_PROMPT = [*prompt_of(4, seed=5), RANDOM_SPECIAL.sentinels[0], *prompt_of(3, seed=6),
                 RANDOM_SPECIAL.sentinels[1]]

@torch.no_grad()
def greedy_by_full_forwards(model, tokens: list[int], steps: int, prefix_len: int = 0):
    """The plain definition: run the whole sequence again for every new token."""
    tokens = list(tokens)
    for _ in range(steps):
        ids = torch.tensor([tokens])
        mask = (MaskSpec("prefix", prefix_len=torch.tensor([prefix_len])) if prefix_len
                else MaskSpec("causal"))
        tokens.append(int(model(ids, mask)["lm"][0, -1].argmax()))
    return tokens[-steps:]


@pytest.mark.parametrize("family,objective", MODELS)
def test_cached_greedy_generation_equals_full_forwards(family, objective):
    pretrained = random_pretrained(family, objective)
    prompt = prompt_of(7, seed=1)
    made = pretrained.generate(prompt, 12, greedy=True, ignore_eos=True)
    prefix_len = len(prompt) if objective == "prefix" else 0
    assert made.ids == greedy_by_full_forwards(pretrained.model, prompt, 12, prefix_len)
    assert made.finish_reason == "length"


@pytest.mark.parametrize("family,objective", MODELS)
def test_a_left_padded_batch_generates_what_each_prompt_does_alone(family, objective):
    pretrained = random_pretrained(family, objective)
    prompts = [prompt_of(3, seed=2), prompt_of(9, seed=3), prompt_of(6, seed=4)]
    made = pretrained.generate(prompts, 8, greedy=True, ignore_eos=True)
    for prompt, result in zip(prompts, made, strict=True):
        prefix_len = len(prompt) if objective == "prefix" else 0
        assert result.ids == greedy_by_full_forwards(pretrained.model, prompt, 8, prefix_len)


def infilled_by_full_forwards(pretrained: Pretrained, prompt: list[int], steps: int):
    """What greedy infilling of `prompt` decodes after the first sentinel, by full forwards
    over the layout the decoder prefills: the prompt and [EOS] bidirectionally, then
    <extra_id_0> causally."""
    layout = [*prompt, RANDOM_SPECIAL.eos, RANDOM_SPECIAL.sentinels[0]]
    return greedy_by_full_forwards(pretrained.model, layout, steps, prefix_len=len(prompt) + 1)


def test_infilling_prefills_the_prompt_and_eos_then_decodes_after_the_first_sentinel():
    pretrained = random_pretrained("gpt2", "span")
    made = pretrained.generate(INFILL_PROMPT, 10, greedy=True, ignore_eos=True)
    assert made.finish_reason == "length"  # no third gap opened: all 10 tokens compared
    assert made.ids == [RANDOM_SPECIAL.sentinels[0],
                        *infilled_by_full_forwards(pretrained, INFILL_PROMPT, 10)]


def test_infilling_ends_where_the_model_opens_a_gap_the_prompt_lacks():
    pretrained = random_pretrained("gpt2", "span")
    third_gap, forwards = RANDOM_SPECIAL.sentinels[2], []

    def open_a_third_gap_at_the_fourth_token(head, inputs, logits):
        forwards.append(logits.shape)  # the prompt's, then one a decoded token
        if len(forwards) == 4:
            logits[..., third_gap] = logits.max() + 1

    pretrained.model.heads["lm"].register_forward_hook(open_a_third_gap_at_the_fourth_token)
    made = pretrained.generate(INFILL_PROMPT, 10, greedy=True, ignore_eos=True)
    assert made.finish_reason == "eos" and len(forwards) == 4
    assert made.ids == [RANDOM_SPECIAL.sentinels[0],
                        *infilled_by_full_forwards(random_pretrained("gpt2", "span"),
                                                   INFILL_PROMPT, 3)]


def test_prompts_are_laid_out_as_the_objectives_laid_out_training_rows():
    special, tokens = RANDOM_SPECIAL, torch.tensor([prompt_of(24, seed=7)])
    prefix_batch = PrefixLM(special, prefix_len=9).make_batch(tokens, seeded(0))
    prefix_pretrained = random_pretrained("gpt2", "prefix")
    prepared = prepare_prompt(prefix_pretrained, tokens[0, :9].tolist())
    assert prepared.prefix_len == int(prefix_batch.mask.prefix_len[0]) == 9
    assert prefix_batch.positions[0, :9].tolist() == list(range(9))  # as the decoder counts

    span_batch = SpanCorruption(special, noise_density=0.3).make_batch(tokens, seeded(0))
    row, prefix_len = span_batch.input_ids[0].tolist(), int(span_batch.mask.prefix_len[0])
    corrupted = row[: prefix_len - 1]  # the training prefix without its closing [EOS]
    prepared = prepare_prompt(random_pretrained("gpt2", "span"), corrupted)
    # The prefix, then the first target token (always <extra_id_0>) fed causally.
    assert prepared.ids == row[: prefix_len + 1]
    assert prepared.prefix_len == prefix_len
    assert span_batch.positions[0, : prefix_len + 1].tolist() == list(range(prefix_len + 1))


def test_a_text_without_gaps_is_continued_through_a_final_sentinel():
    pretrained = random_pretrained("gpt2", "span")
    prepared = prepare_prompt(pretrained, [20, 21, 22])
    sentinel = RANDOM_SPECIAL.sentinels[0]
    assert prepared.ids == [20, 21, 22, sentinel, RANDOM_SPECIAL.eos, sentinel]
    assert prepared.gaps == 1


def test_sampling_is_reproducible_with_a_seed():
    pretrained = random_pretrained("gpt2", "clm")
    prompt = prompt_of(5, seed=8)

    def sample(seed):
        return [r.ids for r in pretrained.generate(prompt, 20, seed=seed, num_samples=3,
                                                   ignore_eos=True, top_p=0.95)]

    first = sample(3)
    assert first == sample(3)
    assert first != sample(4)
    assert len({tuple(ids) for ids in first}) > 1  # the samples of one call differ


def test_generation_stops_where_the_context_ends_and_long_prompts_are_refused():
    pretrained = random_pretrained("gpt2", "clm")
    made = pretrained.generate(prompt_of(CONTEXT - 3, seed=9), 10, greedy=True,
                               ignore_eos=True)
    assert len(made.ids) == 4 and made.finish_reason == "context"
    with pytest.raises(ValueError, match="41 tokens, longer than the model's context of 40"):
        pretrained.generate(prompt_of(CONTEXT + 1, seed=9), 5)
    long_prompt = prompt_of(CONTEXT + 30, seed=10)
    kept = prepare_prompt(pretrained, long_prompt, max_new_tokens=10, truncate_left=True)
    assert kept.ids == long_prompt[-(CONTEXT + 1 - 10):]
    made = pretrained.generate(long_prompt, 10, greedy=True, ignore_eos=True,
                               truncate_left=True)
    assert len(made.ids) == 10 and made.finish_reason == "length"
    with pytest.raises(ValueError, match="42 tokens with its sentinels.*cannot be truncated"):
        random_pretrained("gpt2", "span").generate(prompt_of(CONTEXT - 1, seed=9), 5,
                                                   truncate_left=True)


@pytest.mark.parametrize("objective", ["mlm", "mlm+nsp", "mntp"])
def test_a_model_trained_only_bidirectionally_refuses_to_generate(objective):
    pretrained = random_pretrained("gpt2", objective)
    with pytest.raises(ValueError, match="cannot generate; train with --objective clm"):
        pretrained.generate([20, 21], 5)


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["the quick brown fox jumps over the lazy dog; naïve café 日本語"] * 20
    return train_tokenizer(texts, vocab_size=320, n_sentinels=4)


def text_pretrained(tokenizer, objective: str) -> Pretrained:
    torch.manual_seed(0)
    special = special_tokens_of(tokenizer)
    cfg = preset("gpt2-tiny", vocab_size=special.vocab_size, max_seq_len=64, dropout=0.0)
    return Pretrained.of(LanguageModel(cfg, ("lm",)).eval(), objective, special, tokenizer)


def test_streamed_text_never_splits_a_character(tokenizer):
    text = "naïve café 日本語 costs 5€ — ok"  # "€" and "—" are unseen: one token per byte
    ids = tokenizer.encode(text).ids
    stream = IncrementalText(tokenizer)
    pieces = [stream.push(token) for token in ids]
    assert not any("\ufffd" in piece for piece in pieces)
    assert "".join(pieces) + stream.flush() == text
    assert pieces.count("") >= 4  # the bytes of "€" and "—" waited for the last one


def test_a_stop_string_is_never_shown_and_a_possible_one_waits(tokenizer):
    stream = IncrementalText(tokenizer, stop=["fox"])
    shown = ""
    for token in tokenizer.encode("the quick brown fox jumps").ids:
        shown += stream.push(token)
        if stream.stopped:
            break
    assert shown == stream.text == "the quick brown "
    waiting = IncrementalText(tokenizer, stop=["xyz"])
    shown = "".join(waiting.push(token) for token in tokenizer.encode("a max").ids)
    assert (shown, waiting.flush()) == ("a ma", "x")


def test_generation_ends_before_a_stop_string_and_streams_what_it_returns(tokenizer):
    pretrained = text_pretrained(tokenizer, "clm")
    free = pretrained.generate("the quick", 30, greedy=True, ignore_eos=True)
    stop = free.text[6:9]
    stopped = pretrained.generate("the quick", 30, greedy=True, ignore_eos=True, stop=stop)
    assert stopped.text == free.text[: free.text.index(stop)]
    assert stopped.finish_reason == "stop"
    pieces = list(pretrained.stream("the quick", 30, greedy=True, ignore_eos=True))
    assert "".join(pieces) == free.text and len(pieces) > 1


def test_gap_marks_become_sentinels_in_order_and_take_the_space_before_them():
    assert with_sentinels("The [X] fox jumps [Y] dog.", 10) == (
        "The<extra_id_0> fox jumps<extra_id_1> dog.", 2)
    assert with_sentinels("a <extra_id_5> b [Z]", 10) == ("a<extra_id_0> b<extra_id_1>", 2)
    assert with_sentinels("Once upon a time", 10) == ("Once upon a time<extra_id_0>", 1)
    with pytest.raises(ValueError, match="only 1 sentinel"):
        with_sentinels("[X] and [Y]", 1)


@pytest.mark.parametrize("mark", ["[W]", "[MASK]", "<mask>", "<X>", "<extra_id_a>"])
def test_an_unknown_gap_syntax_is_a_one_line_error(mark):
    with pytest.raises(ValueError, match=r"unknown sentinel syntax .* mark gaps with \[X\]"):
        with_sentinels(f"The {mark} fox", 10)


def test_generated_spans_are_spliced_into_the_prompt():
    s, eos = RANDOM_SPECIAL.sentinels, RANDOM_SPECIAL.eos
    spans = split_spans([s[0], 30, 31, s[1], 32, s[2], 33, eos], RANDOM_SPECIAL, gaps=2)
    assert spans == [[30, 31], [32]]  # a third gap's text is dropped
    assert split_spans([s[0], 30, eos], RANDOM_SPECIAL, gaps=2) == [[30], []]
    assert splice([20, s[0], 21, s[1]], spans, RANDOM_SPECIAL) == [20, 30, 31, 21, 32]


def test_infilled_text_keeps_the_prompt_around_each_fill(tokenizer):
    pretrained = text_pretrained(tokenizer, "span")
    made = pretrained.generate("the quick [X] jumps over [Y] dog", 12, seed=0)
    before, middle = made.text.split(" jumps over", 1)
    assert before == "the quick" + made.fills[0]
    assert middle == made.fills[1] + " dog"
    with pytest.raises(ValueError, match="unknown sentinel syntax '\\[W\\]'"):
        pretrained.generate("the quick [W] jumps")


@pytest.fixture(scope="module")
def cycle_clm(tmp_path_factory):
    out = train_cycle_run(tmp_path_factory.mktemp("clm") / "run", "clm", steps=100)
    return load(out, special=SPECIAL)


def test_a_tiny_clm_trained_on_a_cycle_continues_it_greedily(cycle_clm):
    prompts = [cycle(start, length) for start, length in [(0, 4), (7, 9), (13, 2)]]
    made = cycle_clm.generate(prompts, 12, greedy=True)
    for prompt, result in zip(prompts, made, strict=True):
        start = prompt[0] - cycle(0, 1)[0] + len(prompt)
        assert result.ids == cycle(start, 12)
