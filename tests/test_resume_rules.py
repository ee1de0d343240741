"""What `--resume` may change: a longer budget (recorded in config.json, the schedule stretched
to it), how the run is watched; nothing else, and never a run that is not there. Bad options
are refused before the run directory is written. How a command finds its --out, through the
command line: a run there needs --resume or --overwrite, a resume asking for another run says
so, and a finished run says it is finished without training."""

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from lmlab.cli import main
from lmlab.config import ModelConfig
from lmlab.config.training import TrainConfig
from lmlab.runs.checkpoints import list_checkpoints
from lmlab.runs.layout import RunDirError
from lmlab.runs.metrics import read_metrics
from lmlab.runs.opening import open_run_dir, prepare_run_dir
from lmlab.runs.schema import RunConfig
from lmlab.train import entry as pretraining
from lmlab.train.schedule import Schedule
from tests.synthetic_run import synthetic_dataset


@pytest.fixture(scope="module")
def dataset():
    return synthetic_dataset()[1]


def config(tmp_path, **changes) -> TrainConfig:
    base = dict(objective="clm", model="gpt2-tiny", out=str(tmp_path / "run"), seq_len=32,
                batch_size=8, steps=4, lr=3e-3, log_every=1, eval_every=2, checkpoint_every=2,
                warmup_steps=1, schedule="cosine")
    return TrainConfig(**{**base, **changes})


def saved_config(tmp_path) -> dict:
    return json.loads((tmp_path / "run" / "config.json").read_text())


def train_rows(tmp_path) -> list[dict]:
    return [r for r in read_metrics(tmp_path / "run") if r["kind"] == "train"]



def cut_after(run: Path, into: Path, step: int) -> Path:
    """A copy of `run` at `into` as if it had stopped after `step`: its later checkpoints
    gone (the records after them stay, as a run killed there leaves them)."""
    shutil.copytree(run, into)
    for later in list_checkpoints(into / "checkpoints"):
        if int(later.name.split("-")[1]) > step:
            shutil.rmtree(later)
    return into

def test_resume_without_a_run_is_refused_and_writes_nothing(tmp_path, dataset):
    with pytest.raises(RunDirError, match="holds no run to continue; leave out --resume"):
        pretraining.pretrain(config(tmp_path, resume=True), dataset)
    assert not (tmp_path / "run").exists()


def test_a_change_to_what_the_run_learns_is_refused_by_name(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path), dataset)
    before = saved_config(tmp_path)
    with pytest.raises(RunDirError, match=r"changes lr 0\.003 → 0\.001, seed 0 → 1; only a "
                                          r"longer --steps"):
        pretraining.pretrain(config(tmp_path, resume=True, steps=8, lr=1e-3, seed=1), dataset)
    with pytest.raises(RunDirError, match="changes minutes None → 2.0"):
        pretraining.pretrain(config(tmp_path, resume=True, minutes=2.0), dataset)
    assert saved_config(tmp_path) == before


def test_a_longer_budget_continues_the_run_and_is_recorded(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path), dataset)
    first = train_rows(tmp_path)
    pretraining.pretrain(config(tmp_path, resume=True, steps=8, log_every=2), dataset)
    rows = train_rows(tmp_path)
    assert rows[:len(first)] == first and rows[-1]["step"] == 8
    assert [r["step"] for r in rows[len(first):]] == [6, 8]  # logged as newly asked
    # the schedule stretched to the new end, with the run's own warm-up
    stretched = Schedule("cosine", 8, 1, 0.1)
    assert [r["lr"] for r in rows] == pytest.approx(
        [3e-3 * Schedule("cosine", 4, 1, 0.1)(r["step"] - 1) for r in first]
        + [3e-3 * stretched(r["step"] - 1) for r in rows[len(first):]])
    saved = saved_config(tmp_path)
    assert saved["train"]["steps"] == 8 and saved["train"]["log_every"] == 2
    assert saved["resumes"] == [{"from_checkpoint": "step-00000004",
                               "changed": {"steps": {"from": 4, "to": 8}}}]


def test_a_resume_that_names_no_budget_keeps_the_saved_one(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path), dataset)
    pretraining.pretrain(config(tmp_path, resume=True, steps=None), dataset)
    assert train_rows(tmp_path)[-1]["step"] == 4
    assert saved_config(tmp_path)["train"]["steps"] == 4 and "resumes" not in saved_config(tmp_path)


def test_a_budget_the_run_already_passed_is_refused(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path), dataset)
    with pytest.raises(ValueError, match="has trained 4 steps; a budget of 3 steps"):
        pretraining.pretrain(config(tmp_path, resume=True, steps=3), dataset)


def test_a_run_with_no_checkpoint_yet_starts_from_step_0(tmp_path, dataset, capsys):
    pretraining.pretrain(config(tmp_path, steps=1, checkpoint_every=5), dataset)
    for checkpoint in (tmp_path / "run" / "checkpoints").iterdir():
        for file in checkpoint.iterdir():
            file.unlink()
        checkpoint.rmdir()
    (tmp_path / "run" / "metrics.jsonl").unlink()
    pretraining.pretrain(config(tmp_path, steps=1, checkpoint_every=5, resume=True), dataset)
    assert "has no checkpoint yet: starting from step 0" in capsys.readouterr().out
    assert [r["step"] for r in train_rows(tmp_path)] == [1]


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused_before_writing(tmp_path,
                                                                                 dataset):
    with pytest.raises(ValueError, match="batch_size 8 is not a multiple of micro_batch_size 3"):
        pretraining.pretrain(config(tmp_path, micro_batch_size=3), dataset)
    assert not (tmp_path / "run").exists()


def test_a_longer_budget_still_applies_after_a_resume_cut_short(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path), dataset)
    # as a resume stopped after writing config.json, before its first checkpoint, leaves it
    saved = saved_config(tmp_path)
    saved["train"]["steps"] = 8
    saved["resumes"] = [{"from_checkpoint": "step-00000004",
                         "changed": {"steps": {"from": 4, "to": 8}}}]
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    pretraining.pretrain(config(tmp_path, resume=True, steps=8), dataset)
    assert train_rows(tmp_path)[-1]["step"] == 8


def test_a_refused_budget_leaves_config_json_as_it_was(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path), dataset)
    before = saved_config(tmp_path)
    with pytest.raises(ValueError, match="has trained 4 steps; a budget of 3 steps"):
        pretraining.pretrain(config(tmp_path, resume=True, steps=3), dataset)
    assert saved_config(tmp_path) == before


def test_a_run_continues_only_with_the_tokenizer_it_was_trained_with(tmp_path):
    def words(*vocabulary: str) -> str:
        return Tokenizer(WordLevel({w: i for i, w in enumerate(vocabulary)}, "a")).to_str()

    config = RunConfig(ModelConfig(vocab_size=2), {"objective": "clm", "steps": 4})
    out = tmp_path / "run"
    prepare_run_dir(open_run_dir(out, config.train, False, False, ()), config,
                    tokenizer_json=words("a", "b"))
    with pytest.raises(RunDirError, match="was trained with another tokenizer"):
        prepare_run_dir(open_run_dir(out, config.train, True, False, ()), config,
                        tokenizer_json=words("a", "c"))  # of the same size
    with pytest.raises(RunDirError, match="another tokenizer \\(vocab_size 2 → 3;"):
        open_run_dir(out, config.train, True, False, (), tokenizer_json=words("a", "b", "c"))
    assert (tmp_path / "run" / "tokenizer.json").read_text() == words("a", "b")


def test_a_run_saved_before_the_embedding_rate_resumes_at_the_rate_it_had(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path / "new"), dataset)
    assert saved_config(tmp_path / "new")["train"]["embedding_lr_scale"] == 10.0  # the number
    pretraining.pretrain(config(tmp_path, embedding_lr_scale=1.0), dataset)
    path = tmp_path / "run" / "config.json"
    older = saved_config(tmp_path)
    del older["train"]["embedding_lr_scale"]  # as runs were saved before the option
    path.write_text(json.dumps(older))
    with pytest.raises(RunDirError, match="changes embedding_lr_scale 1.0 → 10.0"):
        pretraining.pretrain(config(tmp_path, resume=True, steps=6), dataset)
    pretraining.pretrain(config(tmp_path, resume=True, steps=6, embedding_lr_scale=1.0), dataset)
    assert train_rows(tmp_path)[-1]["step"] == 6


@pytest.mark.parametrize("option", ["muon_momentum_warmup_steps", "seq_len_warmup_steps",
                                    "batch_size_warmup_steps", "rtd_recipe"])
def test_a_run_saved_before_an_option_resumes_as_it_ran(tmp_path, dataset, option):
    pretraining.pretrain(config(tmp_path), dataset)
    path = tmp_path / "run" / "config.json"
    older = saved_config(tmp_path)
    del older["train"][option]  # as runs were saved before the option
    path.write_text(json.dumps(older))
    pretraining.pretrain(config(tmp_path, resume=True, steps=6), dataset)
    assert train_rows(tmp_path)[-1]["step"] == 6


def test_config_json_records_the_optimizer_auto_stood_for(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path / "clm"), dataset)
    pretraining.pretrain(config(tmp_path / "mlm", objective="mlm", model="bert-tiny"), dataset)
    assert saved_config(tmp_path / "clm")["train"]["optimizer"] == "muon"
    assert saved_config(tmp_path / "mlm")["train"]["optimizer"] == "adamw"


def test_a_run_saved_when_auto_was_recorded_resumes_with_muon(tmp_path, dataset):
    pretraining.pretrain(config(tmp_path, objective="mlm", model="bert-tiny",
                                optimizer="muon"), dataset)
    path = tmp_path / "run" / "config.json"
    older = saved_config(tmp_path)
    older["train"]["optimizer"] = "auto"  # as runs were saved before the resolved name
    path.write_text(json.dumps(older))
    pretraining.pretrain(config(tmp_path, objective="mlm", model="bert-tiny", resume=True,
                                steps=6), dataset)
    assert saved_config(tmp_path)["train"]["optimizer"] == "muon"
    assert train_rows(tmp_path)[-1]["step"] == 6


TINY_OPTIONS = ("--seq-len", "32", "--batch-size", "8", "--log-every", "1", "--eval-every", "2",
                "--checkpoint-every", "2", "--warmup-steps", "1")


@pytest.fixture
def pretrain_cli(dataset, monkeypatch, capsys):
    """`lmlab pretrain` on the synthetic dataset: (exit code, stdout, stderr's last line)."""
    monkeypatch.setattr("lmlab.data.preparation.entry.open_or_prepare", lambda path: dataset)

    def run(*args):
        capsys.readouterr()
        code = main(["pretrain", *map(str, args), *TINY_OPTIONS])
        out, err = capsys.readouterr()
        return code, out, (err.strip().splitlines() or [""])[-1]

    return run


def test_a_run_there_needs_resume_or_overwrite_before_any_budget_talk(tmp_path, pretrain_cli):
    out = tmp_path / "run"
    assert pretrain_cli("--objective", "clm", "--model", "gpt2-tiny", "--steps", "4",
                        "--out", out)[0] == 0
    newest = out / "checkpoints" / "step-00000004"
    for file in newest.iterdir():  # as a run killed after its step-2 checkpoint leaves it
        file.unlink()
    newest.rmdir()
    before = saved_config(tmp_path), train_rows(tmp_path)
    refusal = (f"lmlab: error: {out} holds a run already; pass --resume to continue it or "
               "--overwrite to replace it (or choose another --out)")
    # the same command again, and one whose budget the run has passed: the same one line
    assert pretrain_cli("--objective", "clm", "--model", "gpt2-tiny", "--steps", "4",
                        "--out", out)[::2] == (1, refusal)
    assert pretrain_cli("--objective", "mlm", "--model", "bert-tiny", "--steps", "2",
                        "--out", out)[::2] == (1, refusal)
    assert (saved_config(tmp_path), train_rows(tmp_path)) == before
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-00000002"]


def test_a_resume_asking_for_another_run_names_it(tmp_path, pretrain_cli):
    out = tmp_path / "run"
    assert pretrain_cli("--objective", "clm", "--model", "gpt2-tiny", "--steps", "2",
                        "--out", out)[0] == 0
    before = saved_config(tmp_path)
    code, printed, line = pretrain_cli("--objective", "mlm", "--model", "bert-tiny",
                                       "--steps", "1", "--resume", "--out", out)
    assert (code, line) == (1, (
        f"lmlab: error: {out} was trained with --objective clm and --model gpt2-tiny; this asks "
        "for --objective mlm and --model bert-tiny, which is another run: give it another "
        "--out, or --overwrite to replace this one"))
    assert "precision" not in printed  # refused before the run is planned
    assert saved_config(tmp_path) == before


def test_resuming_a_finished_run_says_so_and_trains_nothing(tmp_path, pretrain_cli):
    out = tmp_path / "run"
    assert pretrain_cli("--objective", "clm", "--model", "gpt2-tiny", "--steps", "4",
                        "--out", out)[0] == 0
    before = saved_config(tmp_path), train_rows(tmp_path)
    for budget in ((), ("--steps", "4")):  # none given, or the run's own
        code, printed, _ = pretrain_cli("--objective", "clm", "--model", "gpt2-tiny",
                                        "--resume", "--out", out, *budget)
        assert code == 0
        assert printed.splitlines()[0] == (
            f"{out} is finished: it trained its 4 steps, so there is nothing to resume; its "
            f"results are in {out} (metrics.jsonl, curves.png); give --resume a larger --steps "
            "or --tokens to train it further")
        assert "step 5 of 4" not in printed and "starts" not in printed
        assert (saved_config(tmp_path), train_rows(tmp_path)) == before
    # a larger budget continues it
    assert pretrain_cli("--objective", "clm", "--model", "gpt2-tiny", "--resume",
                        "--steps", "6", "--out", out)[0] == 0
    assert train_rows(tmp_path)[-1]["step"] == 6
