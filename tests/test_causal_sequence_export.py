"""GPT-2 and Llama runs fine-tuned for a sequence task (classify, pairs, regress) export to
GPT2ForSequenceClassification / LlamaForSequenceClassification: loaded with the Auto class and
fed a batch the exported tokenizer pads, the model gives the logits lmlab's head gives and the
scores `lmlab predict` gives, each row read at its last real token, which HF finds by the
padding token; two texts are framed as lmlab joins them. Runs saved with BERT's pooler on a
decoder, or with a tokenizer that has no padding token, are refused in one line.

Tiny random runs built on the spot (tests/hf_runs.py); nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch

from lmlab.data.tokenizer import LMLAB_SPECIAL_NAMES
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.finetune.encoding import Encoder
from lmlab.finetune.formats import example_files
from lmlab.finetune.predict import fine_tuned_task, predict
from lmlab.finetune.readers import TextExample
from lmlab.runs.run import load_run
from lmlab.runs.schema import Reading
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


def test_a_decoder_sequence_head_without_a_padding_token_is_refused(tmp_path):
    """GPT-2's own tokenizer has none: HF's class could not tell a row's last token."""
    path = finetuned_run(tmp_path / "run", "classify", ["a", "b"], "last", "causal", "gpt2")
    config = json.loads((path / "config.json").read_text())
    config["special_tokens"] = {**LMLAB_SPECIAL_NAMES, "pad": None}
    (path / "config.json").write_text(json.dumps(config))
    run = load_run(path)
    assert run.special.pad is None
    with pytest.raises(ExportError, match="no padding token") as error:
        export_run(run, tmp_path / "hf")
    assert "\n" not in str(error.value)


def test_a_tokenizer_without_cls_and_sep_frames_a_pair_as_lmlab_joins_it():
    """`A [EOS] B [EOS]`, as lmlab's fine-tuning encodes a pair for such a tokenizer (an
    imported Llama's): the exported tokenizer must give a pairs model the rows it learnt."""
    from lmlab.data.tokenizer import special_tokens_of
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
