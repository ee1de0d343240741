"""Bad input to the commands that prepare data and use runs: each case exits non-zero with one
line on stderr that names the problem, no traceback, and leaves nothing that looks complete."""

import errno
from pathlib import Path

import pytest

from lmlab.cli import main
from tests.hf_runs import pretrained_run


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """Tiny runs (never trained: bad input is refused before any model output matters) and
    the bad files the cases read."""
    root = tmp_path_factory.mktemp("bad-inputs")
    pretrained_run(root / "mlm", "bert", "mlm")
    pretrained_run(root / "clm", "gpt2", "clm")
    (root / "unclosed.csv").write_text('text,label\n"a quote that never closes,1\n'
                                       + "".join(f"row {i},1\n" for i in range(50)))
    (root / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00" * 20)
    (root / "not-utf8.txt").write_bytes(b"caf\xe9 [MASK]\n")
    (root / "empty.jsonl").write_text("\n\n")
    (root / "text.txt").write_text("the cat sat on the mat.\n")
    (root / "a-directory").mkdir()
    return root


# (id, arguments with {root} for the fixture's directory, what the one line says, paths that
# must not exist afterwards)
CASES = [
    ("prepare-unclosed-csv-quote", "prepare {root}/unclosed.csv --out {root}/d1",
     "unclosed.csv:2: a quote opened in this row is never closed", ["d1"]),
    ("prepare-binary-file", "prepare {root}/binary.txt --out {root}/d2",
     "binary.txt: looks like a binary file", ["d2"]),
    ("prepare-missing-source", "prepare {root}/nowhere.jsonl --out {root}/d3",
     "nowhere.jsonl: no such file or directory", ["d3"]),
    ("prepare-empty-corpus", "prepare {root}/empty.jsonl --out {root}/d4",
     "the corpus is empty", ["d4"]),
    ("prepare-bad-fraction", "prepare {root}/text.txt --out {root}/d5 --validation-fraction 1.5",
     "validation_fraction must be between 0 and 1", ["d5"]),
    ("eval-no-data", "eval {root}/mlm", "lmlab eval needs --data", []),
    ("eval-out-is-a-directory", "eval {root}/mlm --data {root}/text.txt --out {root}/a-directory",
     "a-directory is a directory; give a file name, such as", []),
    ("eval-out-under-a-file", "eval {root}/mlm --data {root}/text.txt --out {root}/text.txt/r.json",
     "text.txt is a file, so", []),
    ("eval-zero-batch-tokens", "eval {root}/mlm --data {root}/text.txt --batch-tokens 0",
     "batch_tokens must be at least 1", []),
    ("eval-dataset-that-is-a-file", "eval {root}/mlm --data {root}/nowhere.txt",
     "nowhere.txt: no such file or directory", []),
    ("fill-mask-file-is-a-directory", "fill-mask {root}/mlm --file {root}/a-directory",
     "a-directory is a directory; --file takes a file", []),
    ("fill-mask-binary-file", "fill-mask {root}/mlm --file {root}/binary.txt",
     "binary.txt is not UTF-8 text (invalid byte at offset 0)", []),
    ("fill-mask-no-mask", "fill-mask {root}/mlm a cat sat.", "text 1 has no [MASK] token", []),
    ("fill-mask-causal-run", "fill-mask {root}/clm a [MASK] sat.", "has no masked-LM head", []),
    ("fill-mask-missing-run", "fill-mask {root}/nowhere a [MASK].", "no such run directory", []),
    ("generate-greedy-samples", "generate {root}/clm the --greedy --num-samples 3",
     "greedy decoding gives one continuation, so 3 samples would be identical", []),
    ("generate-nan-temperature", "generate {root}/clm the --temperature nan",
     "temperature must be >= 0, got nan", []),
    ("generate-no-new-tokens", "generate {root}/clm the --max-new-tokens 0",
     "max_new_tokens must be at least 1", []),
    ("generate-masked-run", "generate {root}/mlm the", "cannot generate", []),
    ("embed-out-is-a-directory", "embed {root}/mlm a cat. --out {root}/a-directory",
     "a-directory is a directory; give a file name, such as", []),
    ("embed-out-under-a-file", "embed {root}/mlm a cat. --out {root}/text.txt/v.npy",
     "text.txt is a file, so", []),
    ("embed-cls-of-causal", "embed {root}/clm a cat. --pooling cls --out {root}/v1.npy",
     "cls pooling reads the first position", ["v1.npy"]),
    ("finetune-missing-train-file", "finetune {root}/mlm --task classify --train "
     "{root}/nowhere.tsv --validation {root}/nowhere.tsv --out {root}/ft1",
     "nowhere.tsv: cannot be read", ["ft1"]),
    ("finetune-missing-run", "finetune {root}/nowhere --task classify --train {root}/text.txt "
     "--validation {root}/text.txt --out {root}/ft2", "no such run directory", ["ft2"]),
    ("predict-pretrained-run", "predict {root}/mlm a fine film",
     "is not fine-tuned (it was pre-trained with mlm)", []),
    ("predict-file-is-a-directory", "predict {root}/mlm --file {root}/a-directory",
     "a-directory is a directory; --file takes a file", []),
    ("export-missing-run", "export {root}/nowhere --out {root}/ex1", "no such run directory",
     ["ex1"]),
    ("export-out-is-a-file", "export {root}/mlm --out {root}/text.txt",
     "text.txt exists and is not a directory", []),
    ("import-no-config", "import {root}/a-directory --out {root}/imp1",
     "has no config.json, so it is not a Hugging Face model directory", ["imp1"]),
    ("plan-data-is-a-file", "plan --data {root}/text.txt --minutes 1",
     "text.txt is a file, not a prepared dataset; make one from it with `lmlab prepare", []),
    ("plan-unknown-size", "plan --sizes huge --minutes 1", "unknown size 'huge'", []),
]


def error_line(err: str) -> str:
    """The one line written to stderr besides the progress bars of finished steps (the
    failed step's bar is cleared with carriage returns)."""
    *before, last = err.rstrip("\n").split("\n")
    assert err.endswith("\n") and all("%|" in line for line in before), err
    return last.rsplit("\r", 1)[-1]


def run_case(root: Path, args: str, capsys) -> tuple[int, str]:
    argv = [arg.replace("{root}", str(root)) for arg in args.split()]
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args,message,absent", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_input_is_refused_in_one_line(place, capsys, args, message, absent):
    code, err = run_case(place, args, capsys)
    assert code == 1
    assert "Traceback" not in err
    line = error_line(err)
    assert line.startswith("lmlab: error: ") and message in line, line
    for name in absent:
        assert not (place / name).exists()
    assert not list(place.glob(".*partial*")) and not list(place.glob(".*.tmp"))


def test_a_full_disk_in_prepare_names_the_dataset_and_leaves_nothing(place, capsys,
                                                                     monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lmlab.data.shards.TokenWriter.add", full)
    corpus = place / "corpus.jsonl"  # enough documents for both splits
    corpus.write_text("".join(f'{{"text": "the cat sat on mat number {i}."}}\n'
                              for i in range(100)))
    code, err = run_case(place, "prepare {root}/corpus.jsonl --out {root}/full", capsys)
    assert code == 1
    assert error_line(err) == (f"lmlab: error: no space left on device while writing "
                               f"{place / 'full'}; nothing was written")
    assert not (place / "full").exists() and not list(place.glob(".full.partial-*"))
