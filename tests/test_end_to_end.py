"""Every objective the registry builds, through every command a user runs on what it trained,
on the real command line: `pretrain` → `eval` → `fill-mask` or `generate` (the other refused in
one line) → `embed` → `finetune --task classify` → `predict` → `export` → `serve`'s API; at
short contexts; under torchrun; and the same for runs imported from Hugging Face directories.
Each command must exit 0 with no traceback and leave the files it promises; `export` must do
what each objective's row of EXPORTS says: export, or refuse in one line giving that reason."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lmlab.config.presets import auto_family
from lmlab.data.special_tokens import SpecialTokens
from lmlab.objectives.registry import build_objective, example_specs
from lmlab.runs import load_run
from tests.cli_process import lmlab, refused, run_lmlab, serving, torchrun
from tests.test_hf_import import saved_bert, saved_gpt2, saved_llama

pytestmark = pytest.mark.slow

WORDS = ("the a cat dog bird sees likes runs home fast good bad river old young man woman "
         "city walks reads book").split()
TINY = ["--steps", "2", "--batch-size", "4", "--eval-every", "2"]
RUN_FILES = ["config.json", "tokenizer.json", "metrics.jsonl", "curves.png"]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(4, 12))).capitalize() + "."


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A prepared dataset of documents of several sentences (as NSP needs), and a labelled
    sentiment file for fine-tuning."""
    root = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    with open(root / "corpus.jsonl", "w") as corpus:
        for _ in range(300):
            text = " ".join(sentence(rng) for _ in range(rng.randint(3, 8)))
            corpus.write(json.dumps({"text": text}) + "\n")
    lmlab("prepare", root / "corpus.jsonl", "--out", root / "prepared", "--vocab-size", "400")
    labelled = root / "sentiment.tsv"
    labelled.write_text("label\tsentence\n" + "".join(
        f"{label}\t{sentence(rng)} {label}\n" for label in ["good", "bad"] * 16))
    return root


def names(run, key: str, path) -> bool:
    """Whether the run's config.json names `path` at `key` (dotted) relative to the run, so
    that a run moved together with what it was made from still finds it."""
    value = json.loads((run / "config.json").read_text())
    for part in key.split("."):
        value = value[part]
    return not value.startswith("/") and (run / value).resolve() == path.resolve()


def model_for(spec: str) -> str:
    """The tiny size of the family `--model auto` picks for the objective."""
    return f"{auto_family(build_objective(spec, SpecialTokens.layout(512, 100)))}-tiny"


@pytest.fixture(scope="module", params=example_specs())
def pretrained(request, data, tmp_path_factory):
    """(spec, run directory, what `lmlab pretrain` printed) for each objective."""
    spec = request.param
    out = tmp_path_factory.mktemp("runs") / "run"
    result = lmlab("pretrain", "--objective", spec, "--data", data / "prepared", "--model",
                   model_for(spec), "--seq-len", "32", *TINY, "--out", out)
    return spec, out, result.stdout


def test_pretrain_saves_the_run_and_ends_with_its_summary(pretrained, data):
    spec, run, printed = pretrained
    for name in RUN_FILES:
        assert (run / name).is_file(), name
    assert any((run / "checkpoints").iterdir())
    assert names(run, "dataset", data / "prepared")
    assert f"run saved in {run}" in printed
    assert "could not be shown" not in printed
    assert "held-out" in printed  # the example, on the run's own validation text


def test_eval_scores_the_run(pretrained, data, tmp_path):
    _, run, _ = pretrained
    lmlab("eval", run, "--data", data / "prepared", "--out", tmp_path / "eval.json")
    assert json.loads((tmp_path / "eval.json").read_text())


def test_fill_mask_or_generate_whichever_the_objective_offers(pretrained):
    _, run, _ = pretrained
    objective = load_run(run).objective
    fill = ["fill-mask", run, "The cat [MASK] home."]
    generate = ["generate", run, "The cat", "--max-new-tokens", "4", "--greedy"]
    if objective.fill_mask_head is not None:
        assert lmlab(*fill).stdout.strip()
    else:
        assert "fill-mask" in refused(*fill)
    if objective.can_generate:
        lmlab(*generate)
    else:
        assert "cannot generate" in refused(*generate)


def test_embed_writes_a_vector_per_text(pretrained, tmp_path):
    _, run, _ = pretrained
    lmlab("embed", run, "A sentence.", "Another one here.", "--out", tmp_path / "vectors.npy")
    vectors = np.load(tmp_path / "vectors.npy")
    assert vectors.shape[0] == 2 and np.isfinite(vectors).all()


def predicted_labels(run, *texts: str) -> set[str]:
    lines = lmlab("predict", run, *texts, "--json").stdout.splitlines()
    assert len(lines) == len(texts)
    return {json.loads(line)["label"] for line in lines}


BIDIRECTIONAL_DECODER = "reads part of its input bidirectionally"
TUNED_BIDIRECTIONAL = "fine-tuned with bidirectional attention"
# What `lmlab export` must do with each objective's pre-trained run and with that run
# fine-tuned as a classifier: "exports", or words its one-line refusal must hold.
EXPORTS = {
    "mlm": ("exports", "exports"),
    "mntp": ("predict each [MASK] at its own position", "exports"),
    "clm": ("exports", "exports"),
    "prefix": (BIDIRECTIONAL_DECODER, TUNED_BIDIRECTIONAL),
    "span": (BIDIRECTIONAL_DECODER, TUNED_BIDIRECTIONAL),
    "mlm+nsp": ("exports", "exports"),  # ModernBertForMaskedLM, the NSP head left out
    "rtd": ("Hugging Face has no modernbert class with the heads", "exports"),
    "mix:clm=1,mlm=15": (BIDIRECTIONAL_DECODER, TUNED_BIDIRECTIONAL),
    "alternate:span,prefix@1": (BIDIRECTIONAL_DECODER, TUNED_BIDIRECTIONAL),
    "then:clm,mlm@0.5": (BIDIRECTIONAL_DECODER, TUNED_BIDIRECTIONAL),
}


def test_every_objective_states_what_export_must_do():
    assert set(EXPORTS) == set(example_specs())


def exported_or_refused(run, out, expected: str) -> None:
    """`lmlab export` writes a directory transformers loads (it checks that itself) where
    `expected` is "exports"; else it refuses in one line holding `expected`."""
    result = run_lmlab("export", run, "--out", out)
    if expected == "exports":
        assert result.returncode == 0, result.stderr[-2000:]
        assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    else:
        assert result.returncode == 1 and not out.exists(), result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("lmlab: error")]
        assert len(errors) == 1 and expected in errors[0], result.stderr[-2000:]


@pytest.fixture(scope="module")
def tuned(pretrained, data, tmp_path_factory):
    """The pre-trained run fine-tuned as a sentiment classifier."""
    out = tmp_path_factory.mktemp("tuned") / "classifier"
    lmlab("finetune", pretrained[1], "--task", "classify", "--train", data / "sentiment.tsv",
          "--validation", data / "sentiment.tsv", *TINY, "--out", out)
    return out


def test_finetune_then_predict(pretrained, tuned):
    assert (tuned / "config.json").is_file() and any((tuned / "checkpoints").iterdir())
    assert names(tuned, "source.run", pretrained[1])
    assert predicted_labels(tuned, "the cat is good", "the dog is bad") <= {"good", "bad"}


def test_export_of_the_run_and_its_classifier(pretrained, tuned, tmp_path):
    run_expected, classifier_expected = EXPORTS[pretrained[0]]
    exported_or_refused(pretrained[1], tmp_path / "exported", run_expected)
    exported_or_refused(tuned, tmp_path / "exported-classifier", classifier_expected)


def test_serve_answers_every_feature_a_run_offers(pretrained, tuned):
    with serving(pretrained[1], tuned) as server:
        status, answer = server.request("GET", "/api/runs")
        assert status == 200 and len(answer["runs"]) == 2
        for served in answer["runs"]:
            for feature, (method, path, body) in FEATURES.items():
                if served["can"].get(feature):
                    status, reply = server.request(
                        method, path.format(run=served["name"]),
                        None if body is None else {"run": served["name"], **body})
                    assert status == 200, (served["name"], feature, reply)


FEATURES = {  # what /api/runs says a run can do → the request that does it
    "fill_mask": ("POST", "/api/fill-mask", {"text": "The cat [MASK] home."}),
    "generate": ("POST", "/api/generate", {"prompt": "The cat", "max_new_tokens": 3}),
    "embed": ("POST", "/api/embed", {"texts": ["A cat.", "A dog."]}),
    "predict": ("POST", "/api/predict", {"texts": ["the cat is good"]}),
    "metrics": ("GET", "/api/metrics?run={run}", None),
}


@pytest.mark.parametrize("spec", example_specs())
def test_a_short_context_run_ends_with_its_summary(spec, data, tmp_path):
    out = tmp_path / "run"
    printed = lmlab("pretrain", "--objective", spec, "--data", data / "prepared", "--model",
                    model_for(spec), "--seq-len", "16", *TINY, "--out", out).stdout
    assert f"run saved in {out}" in printed and "could not be shown" not in printed


@pytest.mark.parametrize("spec", [s for s in example_specs() if ":" in s])
def test_hybrids_under_torchrun_end_with_their_summary(spec, data, tmp_path):
    out = tmp_path / "run"
    printed = torchrun("pretrain", "--objective", spec, "--data", data / "prepared", "--model",
                       model_for(spec), "--seq-len", "32", *TINY, "--out", out).stdout
    assert printed.count(f"run saved in {out}") == 1  # rank 0 alone reports
    assert "could not be shown" not in printed


# An encoder without its MLM head, as sentence-transformers models are; two decoders.
IMPORTED = {"bert-encoder": (saved_bert, {"class_name": "BertModel"}), "gpt2": (saved_gpt2, {}),
            "llama": (saved_llama, {})}
# and what export must do with each fine-tuned as a classifier
# (GPT-2's tokenizer has no padding token, by which GPT2ForSequenceClassification finds a
# row's last token)
IMPORTED_CLASSIFIER_EXPORTS = {"bert-encoder": "exports", "gpt2": "no padding token",
                               "llama": "exports"}


@pytest.mark.parametrize("name", IMPORTED)
def test_an_imported_run_through_every_command(name, data, tmp_path):
    save, options = IMPORTED[name]
    save(tmp_path / "hf", **options)
    run = tmp_path / "run"
    lmlab("import", tmp_path / "hf", "--out", run)
    assert names(run, "imported.from", tmp_path / "hf")
    lmlab("embed", run, "A sentence.", "Another.", "--out", tmp_path / "vectors.npy")
    vectors = np.load(tmp_path / "vectors.npy")
    assert vectors.shape == (2, load_run(run).model.cfg.d_model) and np.isfinite(vectors).all()
    if load_run(run).objective.can_generate:
        lmlab("generate", run, "The quick", "--max-new-tokens", "4", "--greedy")
    else:
        assert "without its masked-LM head" in refused("fill-mask", run, "The [MASK] fox.")
    lmlab("export", run, "--out", tmp_path / "exported")  # back to its own family
    tuned = tmp_path / "classifier"
    lmlab("finetune", run, "--task", "classify", "--train", data / "sentiment.tsv",
          "--validation", data / "sentiment.tsv", *TINY, "--out", tuned)
    assert predicted_labels(tuned, "the cat is good") <= {"good", "bad"}
    exported_or_refused(tuned, tmp_path / "exported-classifier", IMPORTED_CLASSIFIER_EXPORTS[name])
