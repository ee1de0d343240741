"""A run directory damaged or cut short (a full disk mid-save, a stale staging directory, a
corrupt or swapped file): each is refused in one line that names the file and the way out,
and what is still good stays usable."""

import errno
import json
import pickle
import random
import shutil

import pytest
import torch
from safetensors.torch import save

from lmlab.cli import main
from lmlab.config.training import TrainConfig
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.preparation.tokenizer_training import train_tokenizer
from lmlab.data.tokenizer import special_tokens_of
from lmlab.export.importer import import_hf
from lmlab.finetune.entry import finetune
from lmlab.runs.checkpoints import list_checkpoints, sha256_of, verify_checkpoint
from lmlab.runs.run import load_run
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.train.entry import pretrain
from tests.test_checkpoint import Trap, refuse_torch_load, rewrite_with_checksum

WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "runs", "home", "fast"]
TRAIN = ["pretrain", "--objective", "clm", "--model", "gpt2-tiny", "--seq-len", "32",
         "--batch-size", "8", "--steps", "4", "--eval-every", "2", "--checkpoint-every", "2",
         "--log-every", "1", "--warmup-steps", "1"]


@pytest.fixture(scope="module")
def toy_dataset():
    """A toy text with its own small tokenizer, so runs have a tokenizer.json."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) + "."
             for _ in range(200)]
    tokenizer = train_tokenizer(texts, vocab_size=300)
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[:180], ids[180:], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return dataset


@pytest.fixture(scope="module")
def trained(toy_dataset, tmp_path_factory):
    """A run with checkpoints step-00000002 and step-00000004; tests damage copies of it."""
    out = tmp_path_factory.mktemp("trained") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster on a busy machine
    try:
        pretrain(TrainConfig(objective="clm", model="gpt2-tiny", seq_len=32, batch_size=8,
                             steps=4, eval_every=2, checkpoint_every=2, log_every=1,
                             warmup_steps=1, out=str(out)), toy_dataset)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture
def run(trained, tmp_path):
    """A copy of the trained run, to damage."""
    return shutil.copytree(trained, tmp_path / "run")


def flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def use_cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, last_line(err)


@pytest.fixture
def pretrain_cli(toy_dataset, monkeypatch, capsys):
    """`lmlab pretrain --out RUN OPTIONS...` on the toy dataset: (exit code, stderr's last
    line without the progress bars)."""
    monkeypatch.setattr("lmlab.data.preparation.entry.open_or_prepare", lambda path: toy_dataset)
    monkeypatch.setenv("LMLAB_MALLOC_TUNE", "0")  # leave this process's malloc alone

    def run(out, *options):
        capsys.readouterr()
        code = main([*TRAIN, "--out", str(out), *options])
        return code, last_line(capsys.readouterr().err)

    return run


def last_line(err: str) -> str:
    return err.rstrip("\n").rsplit("\n", 1)[-1].rsplit("\r", 1)[-1]


@pytest.mark.parametrize("wrapped", [False, True], ids=["oserror", "torch-runtimeerror"])
def test_a_full_disk_while_saving_is_one_line_and_resume_continues(tmp_path, monkeypatch,
                                                                   pretrain_cli, wrapped):
    out = tmp_path / "run"
    real_save = torch.save

    def full_at_step_4(state, file):
        if state["loop"]["step"] < 4:
            return real_save(state, file)
        file.write(b"the first bytes")
        if not wrapped:
            raise OSError(errno.ENOSPC, "No space left on device")
        try:  # as torch.save reports a failed write: a RuntimeError raised while handling it
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos "
                               "576 vs 534") from None

    monkeypatch.setattr(torch, "save", full_at_step_4)
    code, line = pretrain_cli(out)
    assert code == 1
    assert line == (f"lmlab: error: no space left on device while saving checkpoint "
                    f"step-00000004 in {out / 'checkpoints'}; the previous checkpoint "
                    "step-00000002 is intact; free some space and continue with --resume")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]
    assert verify_checkpoint(out / "checkpoints" / "step-00000002")["step"] == 2

    monkeypatch.setattr(torch, "save", real_save)
    stale = out / "checkpoints" / ".tmp-step-00000003"  # as a killed process leaves one
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half a file")
    code, _ = pretrain_cli(out, "--resume")
    assert code == 0
    assert not stale.exists()
    assert verify_checkpoint(list_checkpoints(out / "checkpoints")[-1])["step"] == 4


def test_a_corrupt_checkpoint_names_the_previous_one_to_load(run, capsys):
    last = run / "checkpoints" / "step-00000004"
    flip_last_byte(last / "model.safetensors")
    code, line = use_cli(capsys, "generate", str(run), "the", "--checkpoint", "last")
    assert code == 1
    assert line == (f"lmlab: error: checkpoint file {last / 'model.safetensors'} is missing or "
                    "corrupt (checksum mismatch); load the previous one with --checkpoint "
                    "step-00000002")
    code, _ = use_cli(capsys, "generate", str(run), "the", "--checkpoint", "step-00000002",
                      "--max-new-tokens", "2")
    assert code == 0


def test_fine_tuning_a_corrupt_checkpoint_names_its_own_option(run, capsys, tmp_path):
    last = run / "checkpoints" / "step-00000004"
    flip_last_byte(last / "model.safetensors")
    (tmp_path / "train.tsv").write_text("text\tlabel\nthe cat\ta\nthe dog\tb\n")
    code, line = use_cli(capsys, "finetune", str(run), "--task", "classify", "--train",
                         str(tmp_path / "train.tsv"), "--validation", str(tmp_path / "train.tsv"),
                         "--pretrained-checkpoint", "last", "--out", str(tmp_path / "ft"))
    assert code == 1
    assert line.endswith("(checksum mismatch); load the previous one with "
                         "--pretrained-checkpoint step-00000002")


def test_resuming_from_a_corrupt_checkpoint_names_the_previous_one(run, pretrain_cli):
    last = run / "checkpoints" / "step-00000004"
    flip_last_byte(last / "state.pt")
    code, line = pretrain_cli(run, "--resume", "--steps", "6")
    assert code == 1
    assert line == (f"lmlab: error: checkpoint file {last / 'state.pt'} is missing or corrupt "
                    "(checksum mismatch); to resume from the previous checkpoint "
                    f"step-00000002, move step-00000004 out of {run / 'checkpoints'}")


def test_using_a_run_loads_no_checkpoint_state(trained, monkeypatch):
    monkeypatch.setattr(torch, "load", refuse_torch_load)  # the optimizer is not read to infer
    assert load_run(trained).checkpoint.name in {"step-00000002", "step-00000004"}


def test_resuming_from_an_unreadable_state_names_the_previous_checkpoint(run, pretrain_cli):
    last = run / "checkpoints" / "step-00000004"
    rewrite_with_checksum(last, "state.pt", (last / "state.pt").read_bytes()[:1000])
    code, line = pretrain_cli(run, "--resume", "--steps", "6")
    assert code == 1
    assert line == (f"lmlab: error: {last / 'state.pt'} is truncated or not a checkpoint "
                    "state; to resume from the previous checkpoint step-00000002, move "
                    f"step-00000004 out of {run / 'checkpoints'}")


@pytest.mark.parametrize("pickled", ["torch.save", "code"])
def test_a_pickle_in_place_of_the_weights_is_refused_unread(run, capsys, pickled):
    last = run / "checkpoints" / "step-00000004"
    data = pickle.dumps(Trap(), protocol=2)  # unpickling it would end the test
    if pickled == "torch.save":
        torch.save(load_run(run, "last").model.state_dict(), last / "model.safetensors")
        data = (last / "model.safetensors").read_bytes()
    rewrite_with_checksum(last, "model.safetensors", data)
    code, line = use_cli(capsys, "generate", str(run), "the", "--checkpoint", "last")
    assert code == 1
    assert line == (f"lmlab: error: {last / 'model.safetensors'} is not a safetensors file "
                    "(Error while deserializing header: header too large); load the previous "
                    "one with --checkpoint step-00000002")


def test_weights_of_another_shape_are_named_in_one_line(run, capsys):
    last = run / "checkpoints" / "step-00000004"
    weights = load_run(run, "last").model.state_dict()
    name = next(key for key in weights if key.endswith("token_embedding.weight"))
    weights = {key: value.clone() for key, value in weights.items()}
    weights[name] = torch.zeros(weights[name].shape[0] + 1, weights[name].shape[1])
    rewrite_with_checksum(last, "model.safetensors", save(weights))
    code, line = use_cli(capsys, "generate", str(run), "the", "--checkpoint", "last")
    assert code == 1
    assert line.startswith(f"lmlab: error: checkpoint {last} does not fit this model: size "
                           f"mismatch for {name}: copying a param with shape")


def test_a_tokenizer_swapped_into_a_run_is_refused(run, capsys):
    tokenizer = run / "tokenizer.json"
    tokenizer.write_text(train_tokenizer(WORDS, vocab_size=300, kind="wordpiece").to_str())
    code, line = use_cli(capsys, "generate", str(run), "the")
    assert code == 1
    assert line == (f"lmlab: error: {tokenizer} is not the tokenizer this run was trained "
                    "with (its SHA-256 differs from the one recorded in config.json); put the "
                    "run's own tokenizer.json back")
    tokenizer.unlink()
    code, line = use_cli(capsys, "generate", str(run), "the")
    assert code == 1 and line == (f"lmlab: error: {tokenizer} is missing, but this run was "
                                  "trained with one (config.json records its SHA-256); put the "
                                  "run's own tokenizer.json back")


def test_a_run_saved_before_tokenizers_were_recorded_still_loads(run):
    config = json.loads((run / "config.json").read_text())
    del config["tokenizer_sha256"]
    (run / "config.json").write_text(json.dumps(config))
    assert load_run(run).tokenizer is not None


def test_fine_tuned_and_imported_runs_record_their_tokenizer(trained, tmp_path):
    from tests.test_hf_import import saved_gpt2

    rows = "".join(f"{label}\tthe cat {word} runs\n" for label, word in
                   [("pos", "likes"), ("neg", "sees")] * 8)
    (tmp_path / "rows.tsv").write_text("label\tsentence\n" + rows)
    fine_tuned = finetune(trained, FinetuneConfig(
        train=str(tmp_path / "rows.tsv"), validation=str(tmp_path / "rows.tsv"), steps=1,
        batch_size=8, out=str(tmp_path / "fine-tuned")))
    saved_gpt2(tmp_path / "hf")
    imported = import_hf(tmp_path / "hf", tmp_path / "imported").out
    for made in (fine_tuned, imported):
        config = json.loads((made / "config.json").read_text())
        assert config["tokenizer_sha256"] == sha256_of(made / "tokenizer.json")
        assert load_run(made).tokenizer is not None
