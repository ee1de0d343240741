"""`lmlab export`: a run written as a Hugging Face directory must load in transformers with the
Auto classes and pipelines and compute what the run computes (fp32, atol 1e-5), its tokenizer
must frame texts as lmlab does, and runs no HF class reproduces are refused in one line.

Tiny random runs built on the spot (tests/hf_runs.py); nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from lmlab.cli import main
from lmlab.data.tokenizer import special_tokens_of
from lmlab.export.check import lmlab_outputs, sample_inputs
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.infer.fill_mask import fill_mask
from lmlab.infer.generate import generate
from lmlab.model import MaskSpec
from lmlab.runs.run import load_run
from lmlab.tasks.framing import Encoder
from tests.hf_runs import finetuned_run, pretrained_run
from tests.test_hf_parity import transformers

TOLERANCE = 1e-5
AUTO_CLASSES = {
    "BertForMaskedLM": "AutoModelForMaskedLM", "BertForPreTraining": "AutoModelForPreTraining",
    "GPT2LMHeadModel": "AutoModelForCausalLM", "LlamaForCausalLM": "AutoModelForCausalLM",
    "BertForSequenceClassification": "AutoModelForSequenceClassification",
    "BertForTokenClassification": "AutoModelForTokenClassification",
    "BertForQuestionAnswering": "AutoModelForQuestionAnswering",
    "ModernBertForMaskedLM": "AutoModelForMaskedLM",
    "ModernBertForSequenceClassification": "AutoModelForSequenceClassification",
    "ModernBertForTokenClassification": "AutoModelForTokenClassification",
    "ModernBertForQuestionAnswering": "AutoModelForQuestionAnswering",
}


def auto_loaded(directory, architecture: str):
    model = getattr(transformers, AUTO_CLASSES[architecture]).from_pretrained(directory)
    assert type(model).__name__ == architecture
    return model.eval()


def assert_same_as_run(run, exported) -> None:
    """The model the Auto class loads (not the named class export's check loads) gives the
    run's outputs on other inputs. The outputs are laid out by check.py's own helpers, so a
    slip in that layout would hide from both; the pipeline and fine-tuned-label tests below
    do not go through them."""
    from lmlab.export.check import hf_outputs

    model = auto_loaded(exported.out, exported.target.architecture)
    ids, attention_mask = sample_inputs(run, seed=1, target=exported.target)
    ours = lmlab_outputs(run, exported.target, ids, attention_mask)
    theirs = hf_outputs(model, exported.target, ids, attention_mask)
    assert ours.shape == theirs.shape
    assert float((ours - theirs).abs().max()) <= TOLERANCE


@pytest.mark.parametrize(("family", "objective", "architecture"), [
    ("bert", "mlm", "BertForMaskedLM"), ("bert", "mlm+nsp", "BertForPreTraining"),
    ("gpt2", "clm", "GPT2LMHeadModel"), ("modern", "clm", "LlamaForCausalLM"),
    ("modernbert", "mlm", "ModernBertForMaskedLM"),
    ("modernbert", "mlm+nsp", "ModernBertForMaskedLM")])  # the NSP head left out
def test_pretrained_runs_load_with_auto_classes_and_agree(tmp_path, family, objective,
                                                          architecture):
    run = load_run(pretrained_run(tmp_path / "run", family, objective))
    exported = export_run(run, tmp_path / "hf")
    assert exported.target.architecture == architecture
    assert exported.max_difference is not None and exported.max_difference <= TOLERANCE
    config = json.loads((exported.out / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert config["vocab_size"] == run.model.cfg.vocab_size
    assert (exported.out / "generation_config.json").is_file() == (family in ("gpt2", "modern"))
    assert_same_as_run(run, exported)


@pytest.mark.parametrize(("family", "pooling"), [("bert", "cls"), ("modernbert", "mean")])
@pytest.mark.parametrize(("task", "labels", "architecture"), [
    ("classify", ["negative", "positive"], "ForSequenceClassification"),
    ("regress", None, "ForSequenceClassification"),
    ("ner", ["O", "B-PER", "I-PER"], "ForTokenClassification"),
    ("qa", None, "ForQuestionAnswering")])
def test_fine_tuned_runs_load_with_their_labels_and_agree(tmp_path, task, labels,
                                                          architecture, family, pooling):
    architecture = {"bert": "Bert", "modernbert": "ModernBert"}[family] + architecture
    run = load_run(finetuned_run(tmp_path / "run", task, labels, pooling, family=family))
    exported = export_run(run, tmp_path / "hf")
    assert exported.target.architecture == architecture
    config = transformers.AutoConfig.from_pretrained(exported.out)
    if labels:
        assert [config.id2label[i] for i in range(len(labels))] == labels
        assert config.label2id == {label: i for i, label in enumerate(labels)}
    if task == "regress":
        assert config.num_labels == 1 and config.problem_type == "regression"
    assert_same_as_run(run, exported)


def test_tied_weights_are_stored_once_with_pt_metadata(tmp_path):
    run = load_run(pretrained_run(tmp_path / "run", "gpt2", "clm"))
    exported = export_run(run, tmp_path / "hf", check=False)
    assert exported.max_difference is None
    with safe_open(str(exported.out / "model.safetensors"), "pt") as weights:
        assert weights.metadata() == {"format": "pt"}
        assert "transformer.wte.weight" in weights.keys()
        assert "lm_head.weight" not in weights.keys()


def test_the_default_masked_model_is_the_modernbert_family():
    from lmlab.config.presets import auto_family
    from lmlab.objectives.registry import build_objective
    from tests.hf_runs import tiny_tokenizer

    special = special_tokens_of(tiny_tokenizer("bert"))
    assert auto_family(build_objective("mlm", special)) == "modernbert"
    assert auto_family(build_objective("clm", special)) == "modern"


@pytest.mark.parametrize(("family", "objective"), [
    ("bert", "mlm"), ("modernbert", "mlm"), ("modernbert", "mlm+nsp")])
def test_fill_mask_pipeline_gives_lmlab_top_tokens_and_probabilities(tmp_path, family,
                                                                     objective):
    run = load_run(pretrained_run(tmp_path / "run", family, objective))
    exported = export_run(run, tmp_path / "hf")
    text = "The quick brown [MASK] jumps over the lazy dog."
    pipe = transformers.pipeline("fill-mask", model=str(exported.out), top_k=5)
    theirs = pipe(text)
    ours = fill_mask(run, text, top_k=5)[0]
    assert [found["token"] for found in theirs] == [candidate.id for candidate in ours]
    assert max(abs(found["score"] - candidate.probability)
               for found, candidate in zip(theirs, ours, strict=True)) <= 1e-4


@pytest.mark.parametrize("family", ["gpt2", "modern"])
def test_text_generation_pipeline_gives_lmlab_greedy_text(tmp_path, family):
    run = load_run(pretrained_run(tmp_path / "run", family, "clm"))
    exported = export_run(run, tmp_path / "hf")
    prompt = "The quick brown fox"
    pipe = transformers.pipeline("text-generation", model=str(exported.out))
    theirs = pipe(prompt, max_new_tokens=12, do_sample=False, return_full_text=False)
    ours = generate(run, prompt, max_new_tokens=12, greedy=True, ignore_eos=True)
    assert theirs[0]["generated_text"] == ours.text


def test_exported_tokenizer_frames_a_pair_as_lmlab_does(tmp_path):
    run = load_run(pretrained_run(tmp_path / "run", "bert", "mlm"))
    exported = export_run(run, tmp_path / "hf", check=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported.out)
    first, second = "Paris is the capital of France.", "Rome is the capital of Italy."
    encoded = tokenizer(first, second)
    ids, types = Encoder(run.tokenizer, run.special, 64, token_types=True).pair(first, second)
    assert encoded["input_ids"] == ids
    assert encoded["token_type_ids"] == types
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id,
            tokenizer.pad_token_id) == (run.special.cls, run.special.sep, run.special.mask,
                                        run.special.pad)


def test_grouped_query_llama_with_untied_embeddings_round_trips(tmp_path):
    from lmlab.export.importer import import_hf

    run = load_run(pretrained_run(tmp_path / "run", "modern", "clm", n_heads=4, n_kv_heads=2,
                                  tie_embeddings=False))
    exported = export_run(run, tmp_path / "hf")
    config = json.loads((exported.out / "config.json").read_text())
    assert (config["num_key_value_heads"], config["tie_word_embeddings"]) == (2, False)
    assert_same_as_run(run, exported)
    back = load_run(import_hf(exported.out, tmp_path / "back").out)
    ids = torch.randint(len(run.special.all_ids), run.model.cfg.vocab_size, (2, 10))
    with torch.no_grad():
        assert torch.equal(back.model(ids, MaskSpec("causal"))["lm"],
                           run.model(ids, MaskSpec("causal"))["lm"])


@pytest.mark.parametrize(("make", "message"), [
    (lambda path: pretrained_run(path, "gpt2", "mix:clm=1,mlm=1"), "left to right only"),
    (lambda path: pretrained_run(path, "modern", "prefix"), "left to right only"),
    (lambda path: pretrained_run(path, "modern", "mlm"), "exports from the modernbert family"),
    (lambda path: pretrained_run(path, "modernbert", "mntp"), "pre-train with mlm"),
    (lambda path: finetuned_run(path, "classify", ["a", "b"], pooling="last",
                                family="modernbert"), "--pooling cls"),
    (lambda path: pretrained_run(path, "bert", "mntp"), "pre-train with mlm"),
    (lambda path: pretrained_run(path, "bert", "mlm", tie_embeddings=False), "always tie"),
    (lambda path: pretrained_run(path, "modern", "clm", qk_norm=True), "qk_norm=True"),
    (lambda path: pretrained_run(path, "gpt2", "clm", logit_softcap=15.0), "logit_softcap"),
    (lambda path: finetuned_run(path, "classify", ["a", "b"], pooling="mean"), "--pooling cls"),
    (lambda path: finetuned_run(path, "ner", ["O", "B"], attention="causal"),
     "--attention bidirectional"),
])
def test_runs_no_hf_class_reproduces_are_refused_in_one_line(tmp_path, make, message):
    run = load_run(make(tmp_path / "run"))
    with pytest.raises(ExportError, match=message) as error:
        export_run(run, tmp_path / "hf")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "hf").exists()


def test_cli_says_in_one_line_which_head_an_export_leaves_out(tmp_path, capsys):
    run = pretrained_run(tmp_path / "run", "modernbert", "mlm+nsp")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "ModernBertForMaskedLM" in printed[0]
    assert printed[1:] == ["left out the nsp head, which ModernBertForMaskedLM has no place "
                           "for; the rest of the run is exported whole"]
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as weights:
        assert not any("pooler" in key or "seq_relationship" in key for key in weights.keys())


def test_cli_exports_and_refuses_a_directory_holding_other_files(tmp_path, capsys):
    run = pretrained_run(tmp_path / "run", "bert", "mlm")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0
    assert "BertForMaskedLM" in capsys.readouterr().out
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 0  # replaces its own
    (tmp_path / "link").symlink_to(tmp_path / "hf")
    assert main(["export", str(run), "--out", str(tmp_path / "link")]) == 0
    assert (tmp_path / "link").is_symlink() and (tmp_path / "link" / "config.json").is_file()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["export", str(run), "--out", str(other)]) == 1
    assert "not an lmlab export" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_the_default_masked_run_fills_masks_in_transformers_pipeline(tmp_path):
    """`lmlab pretrain --objective mlm` as it is (--model auto), two steps, then export."""
    from lmlab.config.training import TrainConfig
    from lmlab.data.dataset import in_memory_dataset
    from lmlab.data.preparation.tokenizer_training import train_tokenizer
    from lmlab.train.entry import pretrain
    from tests.hf_runs import TEXTS

    tokenizer = train_tokenizer(TEXTS, vocab_size=300, kind="bpe")
    ids = [e.ids for e in tokenizer.encode_batch(TEXTS)]
    dataset = in_memory_dataset(ids[:70], ids[70:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    config = TrainConfig(objective="mlm", seq_len=64, out=str(tmp_path / "run"), batch_size=4,
                         steps=2, eval_every=2)
    run = load_run(pretrain(config, dataset))
    exported = export_run(run, tmp_path / "hf")
    assert exported.target.architecture == "ModernBertForMaskedLM"
    text = "The quick brown [MASK] jumps over the lazy dog."
    theirs = transformers.pipeline("fill-mask", model=str(exported.out), top_k=5)(text)
    ours = fill_mask(run, text, top_k=5)[0]
    assert [found["token"] for found in theirs] == [candidate.id for candidate in ours]
    assert max(abs(found["score"] - candidate.probability)
               for found, candidate in zip(theirs, ours, strict=True)) <= 1e-4
