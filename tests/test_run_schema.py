"""config.json through its schema (lmlab/runs/schema.py): what the current code writes reads
back unchanged, run directories in the shapes older versions wrote still load, and a
fine-tuned run's task is typed."""

import json
import random

import pytest

from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import LMLAB_SPECIAL_NAMES, special_tokens_of
from lmlab.finetune.entry import finetune
from lmlab.runs.run import RunLoadError, load_run
from lmlab.runs.schema import (
    Embedding,
    Reading,
    Resume,
    RunConfig,
    RunConfigError,
    RunTask,
    read_run_config,
)
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.train.entry import pretrain

WORDS = "the cat dog sees likes a bird runs home fast good bad".split()
MODEL = {"d_model": 32, "n_heads": 2, "n_layers": 1, "vocab_size": 64, "max_seq_len": 16}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A pre-trained run and a run fine-tuned from it, as the current code writes them."""
    root = tmp_path_factory.mktemp("schema")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(600)]
    tokenizer = train_tokenizer(texts, vocab_size=120, n_sentinels=2, kind="wordpiece")
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:500], ids[500:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    pretrained = pretrain(TrainConfig(objective="mlm", model="bert-tiny", seq_len=24,
                                      out=str(root / "pre"), batch_size=8, steps=1,
                                      eval_every=1), dataset)
    rows = "".join(f"{'pos' if 'good' in t else 'neg'}\t{t}\n" for t in texts[:40])
    (root / "rows.tsv").write_text("label\tsentence\n" + rows)
    tuned = finetune(pretrained, FinetuneConfig(
        train=str(root / "rows.tsv"), validation=str(root / "rows.tsv"), steps=1,
        batch_size=8, pooling="cls", out=str(root / "tuned")))
    return pretrained, tuned


def saved(run) -> dict:
    return json.loads((run / "config.json").read_text())


def test_what_the_current_code_writes_reads_back_unchanged(made):
    for run in made:
        assert RunConfig.from_json(saved(run)).to_json() == saved(run)


def test_a_fine_tuned_run_has_a_typed_task_and_a_pre_trained_run_none(made):
    pretrained, tuned = (load_run(run) for run in made)
    assert pretrained.task is None and pretrained.config.objective == "mlm"
    assert tuned.task == RunTask("classify", ("neg", "pos"), Reading("bidirectional", "cls"),
                                 "classify", {"num_labels": 2, "pooler": True})
    assert tuned.config.objective == "mlm"  # how its backbone learnt to read
    assert tuned.config.source.checkpoint == "step-00000001"
    assert tuned.config.settings(FinetuneConfig).pooling == "cls"


def old_shape(config: dict) -> dict:
    """`config` as the first versions wrote it: no tokenizer hash, dataset or grouped
    objective options, and a fine-tuned run's source as the path given."""
    config = {k: v for k, v in config.items() if k not in ("tokenizer_sha256", "dataset")}
    for settings in (config["train"], config.get("pretraining")):
        if settings is not None and "objective_options" in settings:
            settings.update(settings.pop("objective_options"))
    if "source" in config:
        config["source"] = {"run": "/somewhere/pre", "checkpoint": "/somewhere/pre/ckpt"}
    return config


def test_run_directories_in_the_old_shape_still_load(made):
    for run in made:
        (run / "config.json").write_text(json.dumps(old_shape(saved(run))))
    pretrained, tuned = (load_run(run) for run in made)
    assert pretrained.config.tokenizer_sha256 is None and pretrained.config.dataset is None
    assert pretrained.objective.name == "mlm" and pretrained.task is None
    assert tuned.task.labels == ("neg", "pos") and tuned.config.objective == "mlm"
    assert tuned.config.objective_options() == pretrained.config.objective_options()
    assert pretrained.config.special_token_names == LMLAB_SPECIAL_NAMES


def test_imported_and_resumed_entries_are_typed():
    config = RunConfig.from_json({
        "model": MODEL, "train": {"objective": "clm"}, "heads": {}, "special_tokens":
        {"bos": None}, "imported": {"from": "../hf", "architectures": ["GPT2Model"],
                                    "family": "gpt2"},
        "embedding": {"pooling": "mean-all", "normalize": True},
        "resumes": [{"from_checkpoint": "step-00000004",
                     "changed": {"steps": {"from": 4, "to": 8}}}]})
    assert config.named_heads == {} and config.imported.architectures == ("GPT2Model",)
    assert config.embedding == Embedding("mean-all", True)
    assert config.resumes == (Resume("step-00000004", {"steps": (4, 8)}),)
    assert config.to_json()["embedding"] == {"pooling": "mean-all", "normalize": True}


@pytest.mark.parametrize("broken", [
    [], {"train": {"objective": "mlm"}}, {"model": MODEL, "train": {}},
    {"model": {**MODEL, "no_such_field": 1}, "train": {"objective": "mlm"}},
    {"model": MODEL, "train": {"objective": 3}},
    {"model": MODEL, "train": {"objective": "mlm"}, "task": {"name": "classify"}}])
def test_a_config_that_describes_no_run_is_refused_in_one_line(broken):
    with pytest.raises(RunConfigError, match="^unreadable run configuration") as error:
        RunConfig.from_json(broken)
    assert "\n" not in str(error.value)


def test_a_run_directory_with_a_broken_config_is_a_load_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RunConfigError):
        read_run_config(tmp_path / "config.json")
    with pytest.raises(RunLoadError, match="config.json: unreadable run configuration"):
        load_run(tmp_path)
