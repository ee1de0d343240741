"""Labels in any script on a confusion matrix: drawn with an installed font that has their
characters, else by their index, and never a "Glyph ... missing from font" warning."""

import random

import numpy as np
import pytest

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.tokenizer import special_tokens_of, train_tokenizer
from lmlab.report.plots import _characters, label_font, plot_confusion_matrix
from lmlab.train.pretrain import pretrain

CHINESE = ["体育", "财经"]
ARABIC = ["رياضة", "اقتصاد"]


@pytest.mark.parametrize("labels", [CHINESE, ARABIC, ["neg", "pos"]])
def test_the_font_chosen_draws_every_character(labels):
    font = label_font(labels)
    needed = {ord(c) for label in labels for c in label}
    assert font is None or needed <= _characters(font.get_file())
    assert font is None or "LastResort" not in font.get_file()  # boxes for every character
    if labels is not CHINESE:  # matplotlib's own DejaVu Sans has Latin and Arabic letters
        assert font is not None


@pytest.mark.parametrize("labels", [CHINESE, ARABIC])
def test_a_confusion_matrix_of_any_script_warns_of_nothing(labels, tmp_path, recwarn, capfd):
    plot_confusion_matrix(np.array([[3, 1], [0, 2]]), labels, tmp_path / "confusion.png")
    assert (tmp_path / "confusion.png").read_bytes().startswith(b"\x89PNG")
    assert [str(w.message) for w in recwarn] == []
    assert capfd.readouterr() == ("", "")


def test_fine_tuning_on_chinese_labels_prints_no_glyph_warning(tmp_path, recwarn, capfd):
    rng = random.Random(0)
    words = ["the", "cat", "dog", "runs", "home", "fast"]
    texts = [" ".join(rng.choices(words, k=8)) for _ in range(120)]
    tokenizer = train_tokenizer(texts, vocab_size=200, n_sentinels=4)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:100], ids[100:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    run = pretrain(TrainConfig(objective="mlm", model="bert-tiny", out=str(tmp_path / "mlm"),
                               seq_len=16, batch_size=4, steps=1, eval_every=1), dataset)
    data = tmp_path / "news.tsv"
    data.write_text("label\ttext\n" + "".join(f"{CHINESE[i % 2]}\t{texts[i]}\n"
                                              for i in range(16)))
    assert main(["finetune", str(run), "--train", str(data), "--validation", str(data),
                 "--out", str(tmp_path / "ft"), "--steps", "1", "--batch-size", "8"]) == 0
    assert (tmp_path / "ft" / "confusion-validation.png").is_file()
    out, err = capfd.readouterr()
    assert "Glyph" not in out + err
    assert not [w for w in recwarn if "Glyph" in str(w.message)]
