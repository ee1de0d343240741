"""Untying the head late (--untie-at, modded-nanogpt): a tied head becomes a copy of the token
embedding at a fraction of the steps and trains apart from then on; the checkpoints after the
point hold it apart, a resume on either side of the point continues as the uninterrupted run,
and the untied run exports where its format takes an untied head."""

import json

import pytest
import torch
from safetensors.torch import load_file

from lmlab import LanguageModel, MaskSpec, preset
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.runs.checkpoints import checkpoint_name, publish_checkpoint, untied
from lmlab.runs.run import load_run
from lmlab.train import entry as pretraining
from lmlab.train import untie
from lmlab.train.optim import make_optimizer
from tests.hf_runs import pretrained_run
from tests.test_resume_rules import config, cut_after, dataset, train_rows  # noqa: F401

DECODER = "heads.lm.decoder.weight"
TABLE = "backbone.token_embedding.weight"


def tiny(**changes) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(preset("gpt2-tiny", 64, 16, dropout=0.0, **changes), heads=("lm",))


def test_untie_gives_the_head_a_copy_of_the_table_that_learns_apart():
    model = tiny()
    x = torch.randint(0, 64, (2, 9))
    before = model(x, MaskSpec("causal"))["lm"]
    table = model.backbone.token_embedding.weight
    assert model.tied_heads() == ["lm"]
    copies = model.untie()
    decoder = model.heads["lm"].decoder.weight
    assert copies == {decoder: table} and decoder is not table
    assert torch.equal(decoder, table)
    assert not model.cfg.tie_embeddings and not model.backbone.cfg.tie_embeddings
    assert model.tied_heads() == []
    assert torch.equal(model(x, MaskSpec("causal"))["lm"], before)  # the same function
    model(x, MaskSpec("causal"))["lm"].logsumexp(-1).sum().backward()
    assert not torch.equal(decoder.grad, table.grad)  # each its own gradient now
    assert model.num_parameters() == tiny().num_parameters() + table.numel()


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_the_rebuilt_optimizer_carries_every_state_and_copies_the_tables(tmp_path, name):
    model = tiny()
    cfg = config(tmp_path, optimizer=name).concrete("fp32", False, name)
    optimizer = make_optimizer(model, 1e-3, name=name, embedding_lr_scale=10.0)
    model(torch.randint(0, 64, (2, 9)), MaskSpec("causal"))["lm"].sum().backward()
    optimizer.step()
    table = model.backbone.token_embedding.weight
    rebuilt = untie.untie_and_rebuild_optimizer(model, optimizer, cfg)
    decoder = model.heads["lm"].decoder.weight
    assert set(rebuilt.state) == set(optimizer.state) | {decoder}
    for key, value in rebuilt.state[table].items():
        assert torch.equal(rebuilt.state[decoder][key], value)
        assert rebuilt.state[decoder][key] is not value  # a copy: they part from here on
    decayed = [group for group in rebuilt.param_groups if group.get("weight_decay")]
    assert any(any(p is decoder for p in group["params"]) for group in decayed)
    assert all(group.get("lr_scale", 1.0) == 1.0 for group in rebuilt.param_groups
               if any(p is decoder for p in group["params"]))  # as an untied head learns


def test_untying_inside_a_head_warm_up_keeps_the_frozen_body_in_the_optimizer(tmp_path):
    model = tiny()
    cfg = config(tmp_path, optimizer="adamw").concrete("fp32", False, "adamw")
    body = [p for name, p in model.named_parameters() if ".blocks." in name]
    for parameter in body:  # as a head warm-up freezes it
        parameter.requires_grad_(False)
    optimizer = make_optimizer(model, 1e-3, name="adamw", embedding_lr_scale=10.0)
    rebuilt = untie.untie_and_rebuild_optimizer(model, optimizer, cfg)
    held = {id(p) for group in rebuilt.param_groups for p in group["params"]}
    assert body and all(id(p) in held for p in body)  # it trains again after the warm-up
    assert not any(p.requires_grad for p in body)  # still frozen until then


def untie_config(tmp_path, **changes):
    return config(tmp_path, **{"untie_at": 0.5, "steps": 6, "keep_last": 3, **changes})


def weights(run, step: int) -> dict:
    return load_file(run / "checkpoints" / f"step-{step:08d}" / "model.safetensors")


def losses(tmp_path) -> list[float]:
    return [row["loss"] for row in train_rows(tmp_path)]


@pytest.mark.parametrize("resume_after", [2, 4])  # the checkpoints before and after the point
def test_the_run_unties_at_its_fraction_and_a_resume_continues_it(tmp_path, dataset,  # noqa: F811
                                                                  resume_after):
    assert untie.untie_step(0.5, 6) == 3
    whole = pretraining.pretrain(untie_config(tmp_path / "whole"), dataset)
    assert DECODER not in weights(whole, 2)  # tied: the table once
    assert not torch.equal(weights(whole, 4)[DECODER], weights(whole, 4)[TABLE])
    plain = pretraining.pretrain(config(tmp_path / "plain", steps=6, keep_last=3), dataset)
    assert DECODER not in weights(plain, 6)
    assert losses(tmp_path / "whole")[:4] == losses(tmp_path / "plain")[:4]  # step 4's: before
    assert losses(tmp_path / "whole")[4:] != losses(tmp_path / "plain")[4:]  # its update
    cut = cut_after(whole, tmp_path / "cut" / "run", step=resume_after)
    pretraining.pretrain(untie_config(tmp_path / "cut", resume=True), dataset)
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")
    final = [weights(run, 6) for run in (whole, cut)]
    assert set(final[0]) == set(final[1])
    assert all(torch.equal(final[0][name], final[1][name]) for name in final[0])
    loaded = load_run(whole).model
    assert not loaded.cfg.tie_embeddings
    assert torch.equal(loaded.heads["lm"].decoder.weight, final[0][DECODER])
    assert json.loads((whole / "config.json").read_text())["train"]["untie_at"] == 0.5


def untied_late(out, family: str, objective: str):
    """A run whose config ties the head, and whose last checkpoint holds it apart, as
    --untie-at leaves it."""
    path = pretrained_run(out, family, objective)
    model = load_run(path).model
    model.untie()
    with torch.no_grad():
        for head in model.heads.values():
            head.decoder.weight.add_(0.1 * torch.randn(head.decoder.weight.shape))
    publish_checkpoint(path / "checkpoints" / checkpoint_name(2), 2,
                       untied(model.state_dict(), model), {"loop": {}})
    return load_run(path)


def test_an_untied_run_exports_where_its_format_takes_an_untied_head(tmp_path):
    run = untied_late(tmp_path / "gpt2", "gpt2", "clm")
    assert not run.model.cfg.tie_embeddings
    assert json.loads((run.path / "config.json").read_text())["model"]["tie_embeddings"]
    export_run(run, tmp_path / "hf")  # its outputs checked against transformers' own
    saved = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert saved["tie_word_embeddings"] is False
    masked = untied_late(tmp_path / "bert", "bert", "mlm")
    with pytest.raises(ExportError, match="always tie them") as error:
        export_run(masked, tmp_path / "bert-hf")
    assert "\n" not in str(error.value)


def test_untie_at_is_refused_without_a_tied_head_or_outside_0_1(tmp_path,
                                                                dataset):  # noqa: F811
    with pytest.raises(ValueError, match="this model trains none") as error:
        pretraining.pretrain(untie_config(tmp_path, model_overrides={"tie_embeddings": False}),
                             dataset)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="--tokens chinchilla counts them"):
        pretraining.pretrain(untie_config(tmp_path, steps=None, tokens="chinchilla"), dataset)
    assert not (tmp_path / "run").exists()
    for fraction in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="untie_at is a fraction of the run's steps"):
            config(tmp_path, untie_at=fraction)
