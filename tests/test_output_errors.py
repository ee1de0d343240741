"""Outputs that cannot be written, and a port that cannot be listened on, are one line naming
what the user gave: never a traceback, never the temporary name a write was making."""

import os
import random
from pathlib import Path

import pytest

from lmlab.atomic import atomic_directory, atomic_write, make_directory, staging_directory
from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.train.entry import pretrain


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A folder nothing can be made in: read-only by its mode, or, for root (whom modes do
    not stop), /proc, where no file can be made."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    yield folder if not os.access(folder, os.W_OK) else Path("/proc")
    folder.chmod(0o700)


def refusal(capsys, *args) -> str:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 1 and err.startswith("lmlab: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_one_line(capsys, port):
    err = refusal(capsys, "serve", "runs/none", "--port", port)
    assert err == f"lmlab: error: --port must be between 0 (any free port) and 65535, got {port}\n"


def test_writes_that_cannot_start_name_the_path_asked_for(unwritable):
    out = unwritable / "out"
    for attempt in (lambda: atomic_write(out / "f.json").__enter__(),
                    lambda: atomic_directory(out).__enter__(),
                    lambda: make_directory(out),
                    lambda: staging_directory(out, prefix=".out.partial-")):
        with pytest.raises(OSError) as raised:
            attempt()
        assert str(raised.value).startswith(f"{out}")
        assert " cannot be written: " in str(raised.value)
        assert raised.value.errno is not None
        assert ".tmp" not in str(raised.value) and ".partial-" not in str(raised.value)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    rng = random.Random(0)
    texts = [" ".join(rng.choices(["the", "cat", "dog", "runs"], k=8)) for _ in range(60)]
    tokenizer = train_tokenizer(texts, vocab_size=120, n_sentinels=4)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:50], ids[50:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return pretrain(TrainConfig(objective="mlm", model="bert-tiny", seq_len=16, batch_size=4,
                                steps=1, eval_every=1,
                                out=str(tmp_path_factory.mktemp("run") / "mlm")), dataset)


def test_commands_writing_to_an_unwritable_out_name_it(run, unwritable, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat runs\nthe dog runs\n" * 20)
    labelled = tmp_path / "train.tsv"
    labelled.write_text("label\ttext\n" + "pos\tthe cat runs\nneg\tthe dog runs\n" * 4)
    out = unwritable / "out"
    for args in (["prepare", texts], ["finetune", run, "--train", labelled, "--validation",
                                      labelled, "--steps", "1"],
                 ["embed", run, "the cat"], ["eval", run, "--data", texts]):
        err = refusal(capsys, *args, "--out", out)
        assert err.startswith(f"lmlab: error: {out} cannot be written: "), err
