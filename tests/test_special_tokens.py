"""Special-token roles a tokenizer may lack or share: BERT's has no [BOS] or [EOS], GPT-2's one
<|endoftext|> is its bos, eos and unk and it has no pad, mask, cls or sep. Objectives refuse
tokenizers without the roles they need, in one line; inference, scoring and fine-tuning frame
rows with the tokens that exist."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from lmlab.config.presets import preset
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.errors import DataError
from lmlab.data.tokenizer import LMLAB_SPECIAL_NAMES, SPECIAL_TOKENS, special_tokens_of
from lmlab.eval.rules import MaskedScoring, NextTokenScoring
from lmlab.finetune.qa_spans import make_windows
from lmlab.infer.fill_mask import fill_mask
from lmlab.infer.generate import generate
from lmlab.model import LanguageModel
from lmlab.objectives import SpecialTokens
from lmlab.objectives.documents import block_pad_id, blocks_pad_with
from lmlab.objectives.registry import build_objective
from lmlab.runs.reading import reading_document
from lmlab.runs.run import Run
from lmlab.tasks.framing import Encoder, Words

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
BERT_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT_NAMES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
              "mask": "[MASK]", "bos": None, "eos": None}
END = "<|endoftext|>"
GPT2_NAMES = {"unk": END, "bos": END, "eos": END}


def word_tokenizer(specials: list[str], last: list[str] = ()) -> Tokenizer:
    """Whitespace words; `specials` take the first ids, `last` the ids after the words (where
    GPT-2 keeps <|endoftext|>)."""
    tokens = [*specials, *WORDS, *last]
    unk = "[UNK]" if "[UNK]" in tokens else END
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([*specials, *last])
    return tokenizer


BERT_TOKENIZER = word_tokenizer(BERT_TOKENS)
GPT2_TOKENIZER = word_tokenizer([], [END])
BERT = special_tokens_of(BERT_TOKENIZER, names=BERT_NAMES)
GPT2 = special_tokens_of(GPT2_TOKENIZER, names=GPT2_NAMES)
GPT2_END = GPT2.eos  # the id after the words
VOCAB = 40


def tiny_run(spec: str, special: SpecialTokens, tokenizer: Tokenizer | None = None) -> Run:
    torch.manual_seed(0)
    cfg = preset("gpt2-tiny", vocab_size=special.vocab_size, max_seq_len=32, dropout=0.0,
                 init_std=0.2)
    objective = build_objective(spec, special)
    return Run.of(LanguageModel(cfg, objective.heads).eval(), spec, special, tokenizer)


# --- SpecialTokens ------------------------------------------------------------------------


def test_bert_like_roles_have_no_bos_or_eos():
    assert (BERT.pad, BERT.unk, BERT.cls, BERT.sep, BERT.mask) == (0, 1, 2, 3, 4)
    assert BERT.bos is BERT.eos is None
    assert BERT.all_ids == (0, 1, 2, 3, 4)
    assert BERT.padding_id == 0


def test_gpt2_like_roles_share_one_id():
    end = len(WORDS)
    assert GPT2.unk == GPT2.bos == GPT2.eos == end
    assert GPT2.pad is GPT2.mask is GPT2.cls is GPT2.sep is None
    assert GPT2.all_ids == (end,)
    assert int(GPT2.special_table().sum()) == 1 and end not in GPT2.ordinary_ids().tolist()
    assert GPT2.padding_id == end  # no [PAD]: its [EOS]
    assert SpecialTokens(VOCAB, unk=3).padding_id == 0  # neither: id 0


def test_require_names_the_missing_role_and_who_needs_it():
    assert GPT2.require("eos", "generation") == GPT2_END
    with pytest.raises(ValueError, match="^the tokenizer has no mask token, which fill-mask "
                                         "needs$"):
        GPT2.require("mask", "fill-mask")
    shared = SpecialTokens(VOCAB, pad=5, eos=5)  # SmolLM2's <|im_end|>
    with pytest.raises(ValueError, match="pad token is also its eos token"):
        shared.require_distinct("pad", "reading training blocks")
    assert BERT.require_distinct("pad", "reading training blocks") == 0


def test_ids_are_still_validated():
    with pytest.raises(ValueError, match=r"must lie in \[0, 10\)"):
        SpecialTokens(10, pad=0, eos=12)
    with pytest.raises(ValueError, match="sentinel ids must be distinct"):
        SpecialTokens(VOCAB, pad=0, eos=1, sentinels=(1, 2))
    with pytest.raises(ValueError, match="no room for ordinary"):
        SpecialTokens(3, pad=0, unk=1, eos=2)
    assert SpecialTokens(3, unk=0, bos=0, eos=0, sentinels=(1,)).all_ids == (0, 1)


# --- special_tokens_of ---------------------------------------------------------------------


def test_default_names_are_lmlabs_and_all_required():
    assert tuple(LMLAB_SPECIAL_NAMES.values()) == SPECIAL_TOKENS
    lmlab = word_tokenizer([*SPECIAL_TOKENS, "<extra_id_0>", "<extra_id_1>"])
    assert special_tokens_of(lmlab) == special_tokens_of(lmlab, names=LMLAB_SPECIAL_NAMES) == \
        SpecialTokens.layout(len(SPECIAL_TOKENS) + 2 + len(WORDS), n_sentinels=2)
    with pytest.raises(DataError, match=r"^bert.json lacks the special tokens \[BOS\], \[EOS\]$"):
        special_tokens_of(BERT_TOKENIZER, "bert.json")


def test_names_map_roles_and_a_missing_token_is_named():
    with pytest.raises(DataError, match="^gpt2.json lacks the mask token '<mask>'$"):
        special_tokens_of(GPT2_TOKENIZER, "gpt2.json", {**GPT2_NAMES, "mask": "<mask>"})
    with pytest.raises(DataError, match="unknown special-token role 'start'"):
        special_tokens_of(GPT2_TOKENIZER, "gpt2.json", {"start": END})
    # A role left out of the mapping is absent, like one mapped to None.
    assert special_tokens_of(BERT_TOKENIZER, names={"pad": "[PAD]", "mask": "[MASK]"}) == \
        SpecialTokens(BERT_TOKENIZER.get_vocab_size(), pad=0, mask=4)


# --- objectives ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec,special,message", [
    ("mlm", GPT2, "the tokenizer has no mask token, which masked LM (mlm) needs"),
    ("mntp", GPT2, "the tokenizer has no mask token, which masked next-token prediction "
                   "(mntp) needs"),
    ("mix:clm=1,mlm=15", GPT2, "the tokenizer has no mask token, which masked LM (mlm) needs"),
    ("prefix", GPT2, "the tokenizer has no pad token, which prefix LM (prefix) needs"),
    ("span", BERT, "the tokenizer has no eos token, which span corruption (span) needs"),
    ("span", SpecialTokens.layout(VOCAB), "span corruption (span) needs sentinel tokens "
                                          "<extra_id_0>…, which this tokenizer lacks"),
    ("mlm+nsp", SpecialTokens(VOCAB, pad=0, mask=1, sep=2),
     "the tokenizer has no cls token, which masked LM with next-sentence prediction "
     "(mlm+nsp) needs"),
])
def test_an_objective_refuses_a_tokenizer_without_a_role_it_needs(spec, special, message):
    with pytest.raises(ValueError) as error:
        build_objective(spec, special)
    assert str(error.value) == message


def test_roles_that_exist_suffice():
    assert build_objective("clm", GPT2).can_generate
    assert build_objective("mlm", BERT).fill_mask_head == ("mlm", 0)
    assert build_objective("mlm+nsp", BERT).framing == "pair"


def test_padded_blocks_need_a_pad_token_of_their_own():
    with pytest.raises(ValueError, match="no pad token, which reading training blocks needs"):
        block_pad_id(GPT2)
    shared = SpecialTokens(VOCAB, pad=3, eos=3)
    with pytest.raises(ValueError, match="pad token is also its eos token"):
        block_pad_id(shared)
    assert blocks_pad_with(GPT2) is None and blocks_pad_with(shared) is None
    assert blocks_pad_with(BERT) == BERT.pad


def test_without_a_pad_of_its_own_every_token_of_a_concatenated_block_is_text():
    # GPT-2 continued on its own text: blocks are concatenated documents, never padded
    tokens = torch.tensor([[5, 6, GPT2_END, 7]])
    batch = build_objective("clm", GPT2).make_batch(tokens, torch.Generator().manual_seed(0))
    assert batch.mask.segment_ids.tolist() == [[1, 1, 1, 2]]
    assert batch.targets.tolist() == [[6, GPT2_END, -100, -100]]
    with pytest.raises(ValueError, match="no pad token, which prefix LM"):
        build_objective("prefix", GPT2)  # its rows are padded


def test_without_eos_a_block_is_one_document_and_datasets_append_nothing():
    batch = build_objective("mlm", BERT).make_batch(torch.tensor([[5, 6, 7, 0]]),
                                                    torch.Generator().manual_seed(0))
    assert batch.mask.segment_ids.tolist() == [[1, 1, 1, 0]]
    dataset = in_memory_dataset([np.array([5, 6])], [np.array([7])], BERT)
    assert dataset.train.read(0, 2).tolist() == [5, 6] and dataset.train.num_tokens == 2


# --- inference, scoring, fine-tuning -------------------------------------------------------


def test_inference_frames_with_the_tokens_that_exist():
    ids = [5, 6, 7]
    assert reading_document(tiny_run("clm", GPT2), ids) == ([5, 6, 7, GPT2_END], slice(0, 3))
    assert reading_document(tiny_run("mlm", BERT), ids) == ([5, 6, 7], slice(0, 3))
    assert reading_document(tiny_run("mlm+nsp", BERT), ids) == ([2, 5, 6, 7, 3], slice(1, 4))


def test_fill_mask_without_a_mask_token_is_one_line():
    bert = tiny_run("mlm", BERT)
    mismatched = Run(bert.model, None, GPT2, bert.objective, "mlm")
    with pytest.raises(ValueError, match="^the tokenizer has no mask token, which fill-mask "
                                         "needs$"):
        fill_mask(mismatched, [[5, 6]])


def test_generation_without_eos_runs_to_max_tokens():
    run = tiny_run("clm", GPT2)
    first = generate(run, [5, 6, 7], 6, greedy=True, ignore_eos=True).ids[0]
    ends_at_first = SpecialTokens(GPT2.vocab_size, unk=first, bos=first, eos=first)
    stopped = generate(Run(run.model, None, ends_at_first, run.objective, "clm"), [5, 6, 7], 6,
                       greedy=True)
    assert (stopped.ids, stopped.finish_reason) == ([], "eos")
    no_eos = SpecialTokens(GPT2.vocab_size, unk=GPT2_END)
    made = generate(Run(run.model, None, no_eos, run.objective, "clm"), [5, 6, 7], 6,
                    greedy=True)
    assert len(made.ids) == 6 and made.finish_reason == "length" and made.ids[0] == first


def test_scoring_documents_end_with_eos_only_when_there_is_one():
    ids = torch.tensor([5, 6])
    assert NextTokenScoring(GPT2).document(ids).tolist() == [5, 6, GPT2_END]
    assert NextTokenScoring(BERT).document(ids).tolist() == [5, 6]
    assert "[EOS]" not in NextTokenScoring(BERT).description
    framed = MaskedScoring(BERT, framed=True)
    window = framed.window(8)
    (chunk,) = framed.chunks(ids, window, window)
    assert chunk.ids.tolist() == [[2, 4, 6, 3], [2, 5, 4, 3]] and chunk.positions.tolist() == [1, 2]


def ids_of(*words: str) -> list[int]:
    return [WORDS.index(word) for word in words]


def test_gpt2_like_fine_tuning_rows_close_each_text_with_eos():
    encoder = Encoder(GPT2_TOKENIZER, GPT2, max_len=16, token_types=False)
    assert encoder.pair("the cat") == ([*ids_of("the", "cat"), GPT2_END], [0, 0, 0])
    assert encoder.pair("the cat", "sat") == (
        [*ids_of("the", "cat"), GPT2_END, *ids_of("sat"), GPT2_END], [0, 0, 0, 1, 1])
    assert encoder.words(Words.joined(["a", "dog"])) == ([*ids_of("a", "dog"), GPT2_END],
                                                         [0, 1, None])
    short = Encoder(GPT2_TOKENIZER, GPT2, max_len=4, token_types=False)
    assert short.pair("the cat sat", "on") == (
        [*ids_of("the"), GPT2_END, *ids_of("on"), GPT2_END], [0, 0, 1, 1])


def test_fine_tuning_rows_without_cls_sep_or_eos_are_the_texts_alone():
    bare = Encoder(GPT2_TOKENIZER, SpecialTokens(GPT2.vocab_size, unk=GPT2_END), 16, False)
    assert bare.pair("the cat", "sat") == (ids_of("the", "cat", "sat"), [0, 0, 1])
    bert = Encoder(BERT_TOKENIZER, BERT, 16, True)
    assert bert.pair("the", "cat") == ([2, 5, 3, 6, 3], [0, 0, 0, 1, 1])


def test_qa_windows_without_cls_keep_the_question_first():
    (window,) = make_windows(0, [5, 6], [7, 8], [(0, 1), (2, 3)], None, GPT2_END, 16, 0)
    assert window.input_ids == [5, 6, GPT2_END, 7, 8, GPT2_END]
    assert window.token_type_ids == [0, 0, 0, 1, 1, 1]
    assert window.offsets == [None, None, None, (0, 1), (2, 3), None]
    with pytest.raises(ValueError, match="no position to stand for 'no answer'"):
        make_windows(0, [], [7], [(0, 1)], None, None, 16, 0)
