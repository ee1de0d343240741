"""An imported BERT used further: fine-tuned, its run predicts and exports (it keeps the
imported tokenizer's roles: no [BOS]/[EOS]); exported bare, the backbone passes its own
check against transformers.

A tiny BERT saved by transformers; nothing is downloaded.
"""

from __future__ import annotations

import json

import torch
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from lmlab.cli import main
from tests.hf_runs import TEXTS
from tests.test_hf_import import (
    BERT_ROLES,
    TOLERANCE,
    bert_config,
    save_tokenizer,
    saved_bert,
    transformers,
)
from tests.test_hf_parity import jitter

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def saved_bert_of_its_own_tokens(directory):
    """A tiny BertModel whose tokenizer holds BERT's special tokens alone, as real BERT
    checkpoints do: no [BOS] or [EOS] that lmlab's own names could find."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(TEXTS, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=BERT_SPECIALS, show_progress=False))
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    torch.manual_seed(0)
    jitter(transformers.BertModel(bert_config(tokenizer.get_vocab_size())), 0).save_pretrained(
        directory)
    save_tokenizer(directory, tokenizer, **BERT_ROLES)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return code, out, err


def tiny_tsv(path, rows: int) -> str:
    words = ["fox", "dog", "capital", "sea", "shells", "quick", "lazy", "Paris"]
    lines = [f"{'pos' if i % 2 else 'neg'}\tthe {words[i % len(words)]} "
             f"{'jumps' if i % 2 else 'sleeps'}" for i in range(rows)]
    path.write_text("label\tsentence\n" + "\n".join(lines) + "\n")
    return str(path)


def test_a_fine_tuned_imported_bert_predicts_and_exports(tmp_path, capsys):
    saved_bert_of_its_own_tokens(tmp_path / "hf")
    assert run_cli(capsys, "import", tmp_path / "hf", "--out", tmp_path / "run")[0] == 0
    train, dev = tiny_tsv(tmp_path / "train.tsv", 16), tiny_tsv(tmp_path / "dev.tsv", 6)
    code, _, err = run_cli(capsys, "finetune", tmp_path / "run", "--task", "classify",
                           "--train", train, "--validation", dev, "--out", tmp_path / "ft",
                           "--steps", "3", "--batch-size", "8")
    assert code == 0, err
    code, out, err = run_cli(capsys, "predict", tmp_path / "ft", "--json", "the fox jumps")
    assert code == 0, err
    assert json.loads(out)["label"] in ("neg", "pos")
    code, out, err = run_cli(capsys, "export", tmp_path / "ft", "--out", tmp_path / "exp")
    assert code == 0, err
    assert "BertForSequenceClassification" in out
    exported = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "exp")
    assert exported.config.id2label == {0: "neg", 1: "pos"}
    imported = json.loads((tmp_path / "run" / "config.json").read_text())["special_tokens"]
    tuned = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert tuned["special_tokens"] == imported and imported["bos"] is None


@torch.no_grad()
def test_an_imported_bare_bert_exports_as_bert_model_and_passes_its_check(tmp_path, capsys):
    hf_model = saved_bert(tmp_path / "hf", "BertModel")
    assert run_cli(capsys, "import", tmp_path / "hf", "--out", tmp_path / "run")[0] == 0
    code, out, err = run_cli(capsys, "export", tmp_path / "run", "--out", tmp_path / "exp")
    assert code == 0, err
    assert "as BertModel" in out and "max |difference|" in out
    record = json.loads((tmp_path / "exp" / "lmlab-export.json").read_text())
    assert record["max_difference"] <= TOLERANCE
    exported = transformers.BertModel.from_pretrained(tmp_path / "exp",
                                                      add_pooling_layer=False).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    difference = (exported(input_ids=ids).last_hidden_state
                  - hf_model(input_ids=ids).last_hidden_state).abs().max()
    assert float(difference) <= TOLERANCE
