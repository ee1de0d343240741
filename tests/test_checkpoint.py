"""Checkpoints: atomic, verified, exact round trip, pruning."""

import copy
import json
import pickle

import numpy as np
import pytest
import torch

from lmlab import LanguageModel, MaskSpec, preset
from lmlab.runs.checkpoints import (
    BEST,
    MANIFEST,
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    read_state,
    sha256_of,
)
from lmlab.runs.run import pick_checkpoint
from lmlab.train.checkpoint import prune_checkpoints, save_checkpoint
from lmlab.train.optim import make_optimizer


def trained_pair(seed=0):
    torch.manual_seed(seed)
    model = LanguageModel(preset("gpt2-tiny", 64, 16), heads=("lm",))
    optimizer = make_optimizer(model, 1e-3)
    model(torch.randint(0, 64, (2, 8)), MaskSpec("causal"))["lm"].sum().backward()
    optimizer.step()
    return model, optimizer


def assert_same_optimizer_state(expected: dict, got: dict) -> None:
    assert expected["param_groups"] == got["param_groups"]
    assert expected["state"].keys() == got["state"].keys()
    for index, entries in expected["state"].items():
        assert entries.keys() == got["state"][index].keys(), index
        for name, value in entries.items():
            assert torch.equal(value, got["state"][index][name]), (index, name)


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    model, optimizer = trained_pair()
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    state = {"optimizer": optimizer.state_dict(), "step": 7, "rng": torch.get_rng_state(),
             "numpy_rng": np.random.default_rng(3).bit_generator.state, "data": {"next": 5}}
    path = save_checkpoint(tmp_path, 7, model, state)
    fresh, fresh_optimizer = trained_pair(seed=1)
    fresh_optimizer.param_groups[0]["lr"] = 0.5  # hyperparameters must come back too
    # the fresh optimizer's moments differ, so matching below means they were restored
    assert not torch.equal(fresh_optimizer.state_dict()["state"][0]["exp_avg"],
                           saved_optimizer["state"][0]["exp_avg"])
    loaded = load_checkpoint(path, fresh)
    fresh_optimizer.load_state_dict(loaded["optimizer"])
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    restored = fresh_optimizer.state_dict()
    assert len(restored["state"]) == len(list(fresh.parameters()))  # Adam moments for each
    assert_same_optimizer_state(saved_optimizer, restored)
    assert fresh.heads["lm"].decoder.weight is fresh.backbone.token_embedding.weight  # still tied
    assert loaded["step"] == 7 and loaded["data"] == {"next": 5}
    assert torch.equal(loaded["rng"], state["rng"])
    assert loaded["numpy_rng"] == state["numpy_rng"]


def test_a_corrupt_file_is_named_with_the_previous_good_checkpoint(tmp_path):
    model, optimizer = trained_pair()
    save_checkpoint(tmp_path, 1, model, {"step": 1})
    bad = save_checkpoint(tmp_path, 2, model, {"step": 2})
    weights = bad / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model.safetensors is missing or corrupt "
                                              r"\(checksum mismatch\); load the previous one "
                                              r"with --checkpoint step-00000001$"):
        load_checkpoint(bad, model)


def test_an_interrupted_save_leaves_no_complete_looking_directory(tmp_path, monkeypatch):
    model, _ = trained_pair()
    save_checkpoint(tmp_path, 1, model, {"step": 1})

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, model, {"step": 2})
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001"]


def test_pruning_keeps_the_newest_and_the_named(tmp_path):
    model, _ = trained_pair()
    paths = [save_checkpoint(tmp_path, s, model, {"step": s}) for s in range(1, 6)]
    prune_checkpoints(tmp_path, keep_last=2, keep={paths[0]})
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step-00000001", "step-00000004", "step-00000005"]


def rewrite_with_checksum(checkpoint, name, data: bytes) -> None:
    """Replace a checkpoint file and its manifest entry: damage the checksum cannot see."""
    (checkpoint / name).write_bytes(data)
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    manifest["files"][name] = sha256_of(checkpoint / name)
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))


def refuse_torch_load(*args, **kwargs):
    raise AssertionError("a checkpoint's state was loaded")


@pytest.mark.parametrize("in_manifest", [True, False], ids=["manifest", "older-run"])
def test_the_best_checkpoint_is_found_from_the_last_ones_record(tmp_path, monkeypatch,
                                                                in_manifest):
    model, optimizer = trained_pair()
    state = {"loop": {"best_checkpoint": "step-00000001"}, "optimizer": optimizer.state_dict()}
    for step in (1, 2):  # runs saved before the manifest held the best hold it in the state
        save_checkpoint(tmp_path / "checkpoints", step, model, state,
                        {BEST: "step-00000001"} if in_manifest else None)
    if in_manifest:
        monkeypatch.setattr(torch, "load", refuse_torch_load)
    assert pick_checkpoint(tmp_path, "best").name == "step-00000001"


def test_an_older_runs_unreadable_state_names_the_previous_checkpoint(tmp_path):
    model, _ = trained_pair()
    save_checkpoint(tmp_path / "checkpoints", 1, model, {"loop": {}})
    last = save_checkpoint(tmp_path / "checkpoints", 2, model, {"loop": {}})
    rewrite_with_checksum(last, "state.pt", (last / "state.pt").read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"state.pt is truncated or not a checkpoint state; "
                                              r"load the previous one with --checkpoint "
                                              r"step-00000001$"):
        pick_checkpoint(tmp_path, "best")


class Trap:
    """Unpickling this would run code."""

    def __reduce__(self):
        return (exec, ("raise SystemExit('unpickled')",))


@pytest.mark.parametrize("data,problem", [
    (b"", "is truncated or not a checkpoint state"),
    (b"text, not a checkpoint state\n", "is truncated or not a checkpoint state"),
    (pickle.dumps(Trap(), protocol=2), "is truncated or not a checkpoint state"),
    ([1, 2], "is not a checkpoint state (it holds a list, not a dict)"),
], ids=["empty", "text", "arbitrary-pickle", "not-a-dict"])
def test_a_damaged_state_file_is_named_in_one_line(tmp_path, data, problem):
    if isinstance(data, bytes):
        (tmp_path / "state.pt").write_bytes(data)
    else:
        torch.save(data, tmp_path / "state.pt")
    with pytest.raises(CheckpointError) as caught:
        read_state(tmp_path)
    assert str(caught.value) == f"{tmp_path / 'state.pt'} {problem}"
