"""Labels in any script on a confusion matrix: drawn with an installed font that has their
characters, else by their index, and never a "Glyph ... missing from font" warning."""

import random

import numpy as np
import pytest
from fontTools.ttLib import TTFont
from matplotlib import font_manager

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.runs import plots
from lmlab.runs.plots import label_font, plot_confusion_matrix
from lmlab.train.entry import pretrain

CHINESE = ["体育", "财经"]
ARABIC = ["رياضة", "اقتصاد"]
PRIVATE = ["\U000f0000", "\U000f0001"]  # Unicode's private use: no installed font's letters


def fonts_drawing(labels: list[str]) -> set[str]:
    """The installed fonts whose character maps, read by fontTools, hold every character of
    `labels`; not Last Resort, which draws a box for each."""
    needed = {ord(c) for label in labels for c in label}
    return {font.fname for font in font_manager.fontManager.ttflist
            if not font.name.startswith("Last Resort") and needed <= characters(font.fname)}


def characters(font_file: str) -> set[int]:
    with TTFont(font_file, fontNumber=0, lazy=True) as font:
        return set(font.getBestCmap())


@pytest.mark.parametrize("labels", [CHINESE, ARABIC, ["neg", "pos"], PRIVATE])
def test_the_font_chosen_draws_every_character(labels):
    """A font when an installed one draws the labels (a CJK font for Chinese, where there is
    one), and that one; None when none does."""
    font, drawing = label_font(labels), fonts_drawing(labels)
    # get_file() gives a FontPath: a str subclass that also carries the face index
    assert (str(font.get_file()) in drawing) if drawing else font is None
    if labels in (ARABIC, ["neg", "pos"]):  # matplotlib's own DejaVu Sans has their letters
        assert drawing
    if labels is PRIVATE:
        assert not drawing


@pytest.mark.parametrize("labels", [CHINESE, ARABIC, PRIVATE])
def test_a_confusion_matrix_of_any_script_warns_of_nothing(labels, tmp_path, recwarn, capfd,
                                                          monkeypatch):
    """Labels no installed font draws are shown by their index."""
    ticks = []

    def save_png(figure, out_path):
        axis = figure.axes[0]
        ticks.extend([[t.get_text() for t in axis.get_xticklabels()],
                      [t.get_text() for t in axis.get_yticklabels()]])
        saving(figure, out_path)

    saving = plots.save_png
    monkeypatch.setattr(plots, "save_png", save_png)
    plot_confusion_matrix(np.array([[3, 1], [0, 2]]), labels, tmp_path / "confusion.png")
    assert ticks == 2 * [labels if fonts_drawing(labels) else ["0", "1"]]
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
