"""`lmlab export --format sentence-transformers|gguf`: a sentence-transformers directory
that `SentenceTransformer(DIR).encode` reads as `lmlab embed` embeds (<= 1e-5), and a GGUF
file that transformers' GGUF reader loads with the run's logits and greedy text, and that
`lmlab import` reads back. Tiny random runs (tests/hf_runs.py); nothing is downloaded."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from lmlab.cli import main
from lmlab.commands.export import FORMAT_NAMES
from lmlab.export.formats import FORMATS
from lmlab.export.importer import import_hf
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.infer.embed import embed
from lmlab.infer.generate import generate
from lmlab.model import MaskSpec
from lmlab.runs.run import load_run
from tests.hf_runs import pretrained_run
from tests.test_hf_parity import transformers

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of France."]


def test_the_command_line_offers_every_format():
    assert FORMAT_NAMES == tuple(FORMATS)


@pytest.mark.parametrize(("family", "objective", "pooling", "normalize"), [
    ("modernbert", "mlm", "mean-all", True), ("modernbert", "mlm", "cls", False),
    ("bert", "mlm+nsp", "cls", True), ("modern", "clm", "mean-all", False)])
def test_sentence_transformers_encodes_as_lmlab_embeds(tmp_path, family, objective, pooling,
                                                       normalize):
    from sentence_transformers import SentenceTransformer

    run = load_run(pretrained_run(tmp_path / "run", family, objective))
    exported = export_run(run, tmp_path / "st", format="sentence-transformers",
                          pooling=pooling, normalize=normalize)
    assert exported.max_difference <= 1e-5
    modules = json.loads((exported.out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == (
        ["Transformer", "Pooling"] + (["Normalize"] if normalize else []))
    theirs = SentenceTransformer(str(exported.out), device="cpu").encode(TEXTS)
    ours = embed(run, TEXTS, pooling, normalize)
    assert float(abs(theirs - ours).max()) <= 1e-5
    imported = import_hf(exported.out, tmp_path / "back")  # the pooling is read back
    assert (imported.embedding.pooling, imported.embedding.normalize) == (pooling, normalize)


@pytest.mark.parametrize(("family", "objective", "pooling"), [
    ("bert", "mlm", "cls"), ("bert", "mlm+nsp", "cls"), ("modernbert", "mlm", "mean-all"),
    ("modern", "clm", "mean-all"), ("gpt2", "clm", "mean-all")])
def test_sentence_transformers_loads_the_export_without_a_warning(tmp_path, capfd, caplog,
                                                                  family, objective, pooling):
    """Every weight the loaded class expects is in the export: a bare BertModel's pooler too
    (the next-sentence head's where one was trained, else zeros), so transformers neither
    draws one at random nor prints its load report."""
    import logging

    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    run = load_run(pretrained_run(tmp_path / "run", family, objective))
    exported = export_run(run, tmp_path / "st", format="sentence-transformers",
                          pooling=pooling, check=False)
    capfd.readouterr()
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("error")
        model = SentenceTransformer(str(exported.out), device="cpu")
    shown = capfd.readouterr()
    assert "LOAD REPORT" not in shown.out + shown.err and "MISSING" not in shown.out + shown.err
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert float(abs(model.encode(TEXTS) - embed(run, TEXTS, pooling)).max()) <= 1e-5
    if family == "bert":
        pooler = load_file(exported.out / "model.safetensors")["pooler.dense.weight"]
        if "nsp" in run.model.heads:  # the trained one
            assert torch.equal(pooler, run.model.heads["nsp"].pooler.weight.detach())
        else:
            assert not pooler.any()


def test_a_masked_run_exports_to_sentence_transformers_as_lmlab_embeds_it(tmp_path):
    """lmlab embed's default pools every token read, as sentence-transformers does, so the
    README's masked run exports with no flags; the text-only mean has no counterpart."""
    run = load_run(pretrained_run(tmp_path / "run", "modernbert", "mlm"))
    with pytest.raises(ExportError, match="--pooling mean-all") as error:
        export_run(run, tmp_path / "st", format="sentence-transformers", pooling="mean")
    assert "\n" not in str(error.value) and not (tmp_path / "st").exists()
    exported = export_run(run, tmp_path / "st", format="sentence-transformers")
    back = load_run(import_hf(exported.out, tmp_path / "back").out)
    assert float(abs(embed(back, TEXTS) - embed(run, TEXTS)).max()) <= 1e-6
    assert float(abs(embed(run, TEXTS) - embed(run, TEXTS, "mean-all")).max()) == 0


@pytest.mark.parametrize("family", ["modern", "gpt2"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gguf_reads_back_in_transformers_with_lmlab_greedy_text(tmp_path, family, dtype):
    run = load_run(pretrained_run(tmp_path / "run", family, "clm"))
    exported = export_run(run, tmp_path / "gguf", format="gguf", dtype=dtype)
    assert exported.max_difference <= 1e-4
    files = {"gguf_file": "model.gguf"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported.out, **files)
    model = transformers.AutoModelForCausalLM.from_pretrained(exported.out, dtype=torch.float32,
                                                              **files)
    prompt = "The quick brown fox"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert ids[0].tolist() == run.tokenizer.encode(prompt, add_special_tokens=False).ids
    theirs = model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    ours = generate(run, prompt, max_new_tokens=12, greedy=True, ignore_eos=True)
    assert theirs[0, ids.shape[1]:].tolist() == ours.ids
    back = load_run(import_hf(exported.out / "model.gguf", tmp_path / "back").out)
    sample = torch.randint(len(run.special.all_ids), run.model.cfg.vocab_size, (2, 10))
    with torch.no_grad():
        difference = (back.model(sample, MaskSpec("causal"))["lm"]
                      - run.model(sample, MaskSpec("causal"))["lm"]).abs().max()
    assert float(difference) <= (1e-6 if dtype == "f32" else 1e-2)  # f16: rounded weights


def test_gguf_names_the_pre_tokenizer_lmlab_splits_text_with(tmp_path):
    """llama.cpp splits text before BPE as the file's tokenizer.ggml.pre says: "gpt-2" is the
    regex of lmlab's ByteLevel pre-tokenizer ("default" splits punctuation and digits off
    first); benchmarks/llama_cpp_parity.py tokenises prompts in llama.cpp itself."""
    import gguf

    run = load_run(pretrained_run(tmp_path / "run", "gpt2", "clm"))
    assert json.loads(run.tokenizer.to_str())["pre_tokenizer"]["use_regex"] is True
    exported = export_run(run, tmp_path / "tiny.gguf", check=False, format="gguf")
    field = gguf.GGUFReader(exported.out).get_field("tokenizer.ggml.pre")
    assert field.contents() == "gpt-2"


@pytest.mark.parametrize(("family", "objective", "options", "message"), [
    ("modernbert", "mlm", {"format": "gguf"}, "causal language models"),
    ("modern", "prefix", {"format": "gguf"}, "left to right only"),
    ("modern", "clm", {"format": "sentence-transformers", "pooling": "cls"}, "causal model"),
    ("modern", "clm", {"format": "hf", "pooling": "cls"},
     "--pooling applies only to --format sentence-transformers, not hf"),
    ("modern", "clm", {"format": "hf", "bits": 4}, "'bits' is no option of any export format"),
])
def test_formats_refuse_in_one_line_before_writing(tmp_path, family, objective, options,
                                                   message):
    run = load_run(pretrained_run(tmp_path / "run", family, objective))
    with pytest.raises(ExportError, match=message) as error:
        export_run(run, tmp_path / "out", **options)
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()


def test_cli_exports_each_format(tmp_path, capsys):
    run = pretrained_run(tmp_path / "run", "modern", "clm")
    assert main(["export", str(run), "--out", str(tmp_path / "g"), "--format", "gguf",
                 "--dtype", "f32"]) == 0
    assert "(gguf)" in capsys.readouterr().out and (tmp_path / "g" / "model.gguf").is_file()
    assert main(["export", str(run), "--out", str(tmp_path / "s"), "--format",
                 "sentence-transformers", "--pooling", "mean-all", "--normalize"]) == 0
    assert (tmp_path / "s" / "2_Normalize").is_dir()
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(tmp_path / "h"), "--dtype", "f16"]) == 1
    assert capsys.readouterr().err == ("lmlab: error: --dtype applies only to --format gguf, "
                                       "not hf: leave it out, or export with --format gguf\n")


def test_gguf_out_naming_a_file_writes_that_file_with_its_tokenizer(tmp_path, capsys):
    run = pretrained_run(tmp_path / "run", "gpt2", "clm")
    out = tmp_path / "models" / "tiny.gguf"
    assert main(["export", str(run), "--out", str(out), "--format", "gguf"]) == 0
    assert "checked" in capsys.readouterr().out
    assert out.is_file() and sorted(p.name for p in out.parent.iterdir()) == ["tiny.gguf"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out.parent, gguf_file=out.name)
    prompt = "The quick brown fox"
    assert (tokenizer(prompt).input_ids
            == load_run(run).tokenizer.encode(prompt, add_special_tokens=False).ids)
    assert main(["export", str(run), "--out", str(out), "--format", "gguf"]) == 0  # its own
    other = tmp_path / "other.gguf"
    other.write_bytes(b"not a model")
    assert main(["export", str(run), "--out", str(other), "--format", "gguf"]) == 1
    assert "is not a file lmlab exported" in capsys.readouterr().err
    assert other.read_bytes() == b"not a model"
