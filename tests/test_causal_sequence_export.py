"""GPT-2 and Llama runs fine-tuned for a sequence task (classify, pairs, regress) export to
GPT2ForSequenceClassification / LlamaForSequenceClassification: loaded with the Auto class and
fed a batch the exported tokenizer pads, the model gives the logits lmlab's head gives and the
scores `lmlab predict` gives, each row read at its last real token, which HF finds by the
padding token; two texts are framed as lmlab joins them. A tokenizer without a padding token
of its own (none, or its [EOS], which closes every row) pads with another special token, so
that no row's last token is taken for padding; one with no such token, and runs saved with
BERT's pooler on a decoder, are refused in one line, and `lmlab finetune` says so before it
trains.

Tiny random runs built on the spot (tests/hf_runs.py); nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch

from lmlab.data.special_tokens import SpecialTokens
from lmlab.data.tokenizer import LMLAB_SPECIAL_NAMES, special_tokens_of
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.finetune.entry import warn_if_unexportable
from lmlab.infer.predict import fine_tuned_task, predict
from lmlab.runs.run import load_run
from lmlab.runs.schema import Reading
from lmlab.tasks.formats import example_files
from lmlab.tasks.framing import Encoder, closing_ids, padding_apart
from lmlab.tasks.readers import TextExample
from tests.hf_runs import finetuned_run
from tests.test_hf_parity import transformers

TOLERANCE = 1e-4
CLASSES = {"gpt2": "GPT2ForSequenceClassification", "modern": "LlamaForSequenceClassification"}
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paris.",
         "A language model reads text and predicts the words it cannot see."]
SECOND = ["Rome is the capital of Italy.", "She sells sea shells by the sea shore.", "A dog."]
TASKS = [("classify", ["neg", "pos"]), ("pairs", ["no", "yes"]), ("regress", None)]


def exported_model(run, out):
    exported = export_run(run, out)
    assert exported.max_difference is not None and exported.max_difference <= TOLERANCE
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    return exported, model, transformers.AutoTokenizer.from_pretrained(out)


def lmlab_batch(run, examples: list[TextExample]):
    """(task, batch) of `examples`, encoded, padded and pooled as fine-tuning and `lmlab
    predict` batch them."""
    task, cfg = fine_tuned_task(run)
    encoder = Encoder(run.require_tokenizer(), run.special, cfg.max_len, token_types=False)
    rows = task.encode(examples, encoder, training=False)
    return task, task.batch(rows, Reading(cfg.attention, cfg.pooling), token_types=False)


def lmlab_logits(run, texts: list[str]) -> torch.Tensor:
    """The run's head outputs for `texts`, as `lmlab predict` computes them."""
    _, cfg = fine_tuned_task(run)
    _, batch = lmlab_batch(run, example_files(cfg).from_texts(texts))
    with torch.no_grad():
        return run.model(**batch.model_inputs())["classify"]


@pytest.mark.parametrize("family", CLASSES)
@pytest.mark.parametrize(("task", "labels"), TASKS, ids=[task for task, _ in TASKS])
def test_decoder_sequence_heads_export_with_the_scores_lmlab_predicts(tmp_path, family, task,
                                                                      labels):
    run = load_run(finetuned_run(tmp_path / "run", task, labels, "last", "causal", family))
    exported, model, tokenizer = exported_model(run, tmp_path / "hf")
    assert type(model).__name__ == exported.target.architecture == CLASSES[family]
    config = model.config
    assert config.pad_token_id == run.special.pad
    assert config.num_labels == (len(labels) if labels else 1)
    assert config.problem_type == ("regression" if task == "regress"
                                   else "single_label_classification")
    if labels:
        assert [config.id2label[i] for i in range(len(labels))] == labels

    pairs = task == "pairs"
    encoded = tokenizer(TEXTS, SECOND if pairs else None, padding=True, return_tensors="pt")
    lengths = encoded["attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) == len(TEXTS)  # padded: the last tokens differ in place
    with torch.no_grad():
        theirs = model(**encoded).logits
    typed = [f"{a} ||| {b}" for a, b in zip(TEXTS, SECOND, strict=True)] if pairs else TEXTS
    assert float((lmlab_logits(run, typed) - theirs).abs().max()) <= TOLERANCE

    predicted = predict(run, typed, all_scores=True)
    if task == "regress":
        ours = torch.tensor([item["score"] for item in predicted])
        expected = theirs[:, 0]
    else:
        ours = torch.tensor([[item["scores"][label] for label in labels] for item in predicted])
        expected = theirs.softmax(-1)
    assert float((ours - expected).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("family", CLASSES)
@pytest.mark.parametrize(("task", "labels", "targets"), [
    ("classify", ["neg", "pos"], ["pos", "neg", "pos"]), ("regress", None, [0.5, -1.25, 3.0])])
def test_the_fine_tuning_loss_is_the_one_hf_trains_with(tmp_path, family, task, labels,
                                                        targets):
    """Cross-entropy, or squared error, on the last token's scores, averaged over the rows of
    a padded batch: what HF's class computes given the same labels."""
    run = load_run(finetuned_run(tmp_path / "run", task, labels, "last", "causal", family))
    _, model, _ = exported_model(run, tmp_path / "hf")
    examples = [TextExample(text, None, target, line)
                for line, (text, target) in enumerate(zip(TEXTS, targets, strict=True))]
    fine_tuning, batch = lmlab_batch(run, examples)
    with torch.no_grad():
        ours = fine_tuning.loss(run.model(**batch.model_inputs()), batch).mean()
        theirs = model(input_ids=batch.input_ids, labels=batch.extras["label"],
                       attention_mask=(batch.mask.segment_ids > 0).long()).loss
    assert abs(float(ours - theirs)) <= TOLERANCE


@pytest.mark.parametrize("family", CLASSES)
def test_a_decoder_sequence_head_with_bert_pooler_is_refused(tmp_path, family):
    """A run saved before the head recorded whether it has a pooler: it had one."""
    run = load_run(finetuned_run(tmp_path / "run", "classify", ["a", "b"], "last", "causal",
                                 family, head_options={"num_labels": 2}))
    assert set(run.model.heads["classify"].state_dict()) == {
        "pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias"}
    with pytest.raises(ExportError, match="dense \\+ tanh pooler.*--pooling last") as error:
        export_run(run, tmp_path / "hf")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "hf").exists()


def with_special_tokens(path, names: dict):
    """The run at `path`, its tokenizer's roles read as `names` says (lmlab's otherwise)."""
    config = json.loads((path / "config.json").read_text())
    config["special_tokens"] = {**LMLAB_SPECIAL_NAMES, **names}
    (path / "config.json").write_text(json.dumps(config))
    return load_run(path)


# An imported Llama's roles (no [PAD], [CLS], [SEP] or [MASK]), the same with its [EOS] as
# padding, and an imported GPT-2's (<|endoftext|> is every role it has).
LLAMA_LIKE = {"pad": None, "cls": None, "sep": None, "mask": None}
EOS_AS_PADDING = {**LLAMA_LIKE, "pad": "[EOS]"}
GPT2_LIKE = {**LLAMA_LIKE, "unk": "[EOS]", "bos": "[EOS]"}


@pytest.mark.parametrize(("family", "names"), [("gpt2", LLAMA_LIKE), ("modern", LLAMA_LIKE),
                                               ("gpt2", EOS_AS_PADDING)])
def test_without_a_padding_token_of_its_own_a_padded_batch_scores_as_lmlab_predicts(
        tmp_path, family, names):
    path = finetuned_run(tmp_path / "run", "classify", ["neg", "pos"], "last", "causal", family)
    run = with_special_tokens(path, names)
    _, model, tokenizer = exported_model(run, tmp_path / "hf")
    padding = model.config.pad_token_id
    assert padding == tokenizer.pad_token_id == run.special.unk != run.special.eos
    encoded = tokenizer(TEXTS, padding=True, return_tensors="pt")
    lengths = encoded["attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) == len(TEXTS)  # padded: the last tokens differ in place
    encoder = Encoder(run.require_tokenizer(), run.special, 64, token_types=False)
    for row, length, text in zip(encoded["input_ids"], lengths, TEXTS, strict=True):
        assert row[:length].tolist() == encoder.pair(text)[0]  # the rows lmlab reads
        assert row[length - 1] == run.special.eos and set(row[length:].tolist()) <= {padding}
    with torch.no_grad():
        theirs = model(**encoded).logits.softmax(-1)
    predicted = predict(run, TEXTS, all_scores=True)
    ours = torch.tensor([[item["scores"][label] for label in ("neg", "pos")]
                         for item in predicted])
    assert float((ours - theirs).abs().max()) <= TOLERANCE


def test_a_tokenizer_whose_only_special_token_closes_every_row_is_refused(tmp_path, capsys):
    """GPT-2's own: <|endoftext|> as padding would be taken for padding at every row's end,
    and an ordinary token declared the padding is split out of the words that hold it."""
    path = finetuned_run(tmp_path / "run", "classify", ["a", "b"], "last", "causal", "gpt2")
    run = with_special_tokens(path, GPT2_LIKE)
    assert run.special.pad is None and set(run.special.all_ids) == {run.special.eos}
    with pytest.raises(ExportError, match="no padding token, and no special token besides "
                                          "its eos token, which closes every row: Hugging "
                                          "Face's gpt2 sequence classes") as error:
        export_run(run, tmp_path / "hf")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "hf").exists()

    task, _ = fine_tuned_task(run)
    warn_if_unexportable(task, Reading("causal", "last"), run.special)
    assert capsys.readouterr().err.startswith(
        "lmlab finetune: lmlab export will refuse this run: the tokenizer has no padding token")
    own = special_tokens_of(run.require_tokenizer())  # lmlab's roles: [PAD] among them
    for special, pooling in ((run.special, "mean"), (own, "last")):
        warn_if_unexportable(task, Reading("causal", pooling), special)  # exportable: silent
        assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("roles", "padding"), [
    (dict(pad=0, sep=3, eos=5), 0), (dict(pad=5, unk=1, eos=5), 1),
    (dict(pad=3, cls=2, sep=3, eos=5), 2), (dict(unk=1, eos=5), 1), (dict(pad=0), 0),
    (dict(eos=5), "no special token besides its eos token"),
    (dict(pad=3, sep=3), "padding token is also its sep token"),
    (dict(unk=1, bos=2), "no \\[SEP\\] or \\[EOS\\] closes its rows")])
def test_the_padding_apart_from_every_row_s_end(roles, padding):
    special = SpecialTokens(vocab_size=16, **roles)
    if isinstance(padding, int):
        assert padding_apart(special) == padding not in closing_ids(special)
    else:
        with pytest.raises(ValueError, match=padding):
            padding_apart(special)


def test_a_tokenizer_without_cls_and_sep_frames_a_pair_as_lmlab_joins_it():
    """`A [EOS] B [EOS]`, as lmlab's fine-tuning encodes a pair for such a tokenizer (an
    imported Llama's): the exported tokenizer must give a pairs model the rows it learnt."""
    from lmlab.export.tokenizer_files import framed_as_lmlab_reads
    from tests.hf_runs import tiny_tokenizer

    tokenizer = tiny_tokenizer("modern")
    names = {**LMLAB_SPECIAL_NAMES, "cls": None, "sep": None}
    special = special_tokens_of(tokenizer, names=names)
    framed = framed_as_lmlab_reads(tokenizer, names, special, pair_framed=True)
    first, second = "Paris is the capital of France.", "Rome is the capital of Italy."
    ids, _ = Encoder(tokenizer, special, 64, token_types=False).pair(first, second)
    assert framed.encode(first, second).ids == ids
    assert ids.count(special.eos) == 2 and ids[-1] == special.eos
