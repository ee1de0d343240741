"""DeBERTa-v3's gradient-disentangled embedding sharing (`--rtd-sharing gdes`): where each
loss's gradient goes, the zero residual at step 0, the merge a loaded run reads, and the run
saved and loaded as the rest of lmlab reads it."""

import json
from dataclasses import asdict

import pytest
import torch
from safetensors.torch import load_file

from lmlab.config.objective_options import ObjectiveOptions
from lmlab.config.presets import preset
from lmlab.data.special_tokens import SpecialTokens
from lmlab.finetune.entry import task_model
from lmlab.finetune.registry import make_task
from lmlab.model import LanguageModel, MaskSpec
from lmlab.model.sharing import DisentangledEmbedding, merge_sharing
from lmlab.objectives.registry import build_objective
from lmlab.runs.checkpoints import WEIGHTS
from lmlab.runs.run import load_run
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.train.warm_start import load_source, warm_started_model
from tests.hf_runs import save_run, tiny_tokenizer
from tests.test_hf_parity import jitter

SPECIAL = SpecialTokens.layout(vocab_size=64, n_sentinels=0)
CFG = preset("bert-tiny", 64, 16)


def rtd(sharing: str):
    return build_objective("rtd", SPECIAL, ObjectiveOptions(rtd_sharing=sharing))


def model_and_batch(sharing: str, seed: int = 0):
    objective = rtd(sharing)
    generator = torch.Generator().manual_seed(seed)
    ordinary = SPECIAL.ordinary_ids()
    tokens = ordinary[torch.randint(len(ordinary), (3, 16), generator=generator)]
    batch = objective.make_batch(tokens, generator)
    torch.manual_seed(seed)
    return objective, LanguageModel(CFG, heads=objective.build_heads(CFG)), batch


def term_gradients(sharing: str, term: str) -> dict[str, torch.Tensor | None]:
    """The gradient of one loss term on the shared table and on the residual (None: none)."""
    objective, model, batch = model_and_batch(sharing)
    total, _ = objective.loss(objective.outputs(model, batch), batch).terms[term]
    embedding = model.backbone.token_embedding
    tables = {"shared": embedding.weight, "residual": getattr(embedding, "residual", None)}
    present = {name: table for name, table in tables.items() if table is not None}
    found = torch.autograd.grad(total, list(present.values()), allow_unused=True)
    return {**dict.fromkeys(tables), **dict(zip(present, found, strict=True))}


def reaches(gradient: torch.Tensor | None) -> bool:
    return gradient is not None and bool(gradient.abs().sum() > 0)


def test_the_discriminator_trains_the_residual_alone_under_gdes():
    gradients = term_gradients("gdes", "discriminator")
    assert not reaches(gradients["shared"]) and reaches(gradients["residual"])


def test_the_generator_trains_the_shared_table_alone_under_gdes():
    gradients = term_gradients("gdes", "generator")
    assert reaches(gradients["shared"]) and not reaches(gradients["residual"])


def test_the_discriminator_trains_the_shared_table_under_electra_sharing():
    gradients = term_gradients("electra", "discriminator")
    assert reaches(gradients["shared"]) and gradients["residual"] is None


def test_the_generator_ties_to_the_table_the_backbone_reads_through():
    _, model, _ = model_and_batch("gdes")
    embedding = model.backbone.token_embedding
    generator = model.heads["generator"]
    assert isinstance(embedding, DisentangledEmbedding)
    assert generator.decoder.weight is embedding.weight
    assert generator.encoder.token_embedding[0].weight is embedding.weight


def test_step_zero_is_electra_sharing():
    """Same seed, same weights; the residual starts at zero, so the outputs are ELECTRA's."""
    outputs = {}
    for sharing in ("electra", "gdes"):
        objective, model, batch = model_and_batch(sharing)
        outputs[sharing] = objective.outputs(model.eval(), batch)
        state = model.state_dict()
        if sharing == "gdes":
            assert not state.pop("backbone.token_embedding.residual").any()
        outputs[sharing]["state"] = state
    electra, gdes = outputs["electra"], outputs["gdes"]
    assert electra["state"].keys() == gdes["state"].keys()
    assert all(torch.equal(electra["state"][k], gdes["state"][k]) for k in electra["state"])
    for name in ("generator", "rtd", "replaced"):
        assert torch.equal(electra[name], gdes[name])


def trained_gdes_model() -> tuple:
    """A GDES model whose residual is away from zero, with a batch."""
    objective, model, batch = model_and_batch("gdes")
    return objective, jitter(model, seed=1), batch


def test_the_merge_keeps_every_output_and_reads_e_g_plus_residual():
    objective, model, batch = trained_gdes_model()
    embedding = model.backbone.token_embedding
    shared, residual = embedding.weight.detach().clone(), embedding.residual.detach().clone()
    assert residual.abs().sum() > 0
    before = objective.outputs(model, batch)
    merge_sharing(model)
    table = model.backbone.token_embedding
    assert type(table) is torch.nn.Embedding and table.weight.requires_grad
    assert torch.equal(table.weight, shared + residual)
    generator = model.heads["generator"]
    assert torch.equal(generator.decoder.weight, shared)  # the generator keeps E_G
    assert generator.decoder.weight is not table.weight
    after = objective.outputs(model, batch)
    for name in ("generator", "rtd"):
        assert torch.allclose(before[name], after[name], atol=1e-6)


def test_a_plain_table_loads_as_e_g_with_a_zero_residual():
    """As continued pre-training with GDES starts from a run without it."""
    _, plain, _ = model_and_batch("electra")
    _, model, _ = model_and_batch("gdes", seed=1)
    model.backbone.load_state_dict(jitter(plain, seed=2).backbone.state_dict())
    embedding = model.backbone.token_embedding
    assert torch.equal(embedding.weight, plain.backbone.token_embedding.weight)
    assert not embedding.residual.any()


def test_gdes_adds_no_matmul_flops_and_embedding_parameters_only():
    cfg = preset("bert-mini", 64, 128)
    electra, gdes = (LanguageModel(cfg, heads=rtd(s).build_heads(cfg)) for s in ("electra", "gdes"))
    assert gdes.num_parameters() == electra.num_parameters() + 64 * cfg.d_model
    assert gdes.num_parameters(False) == electra.num_parameters(False)


@pytest.fixture
def saved_gdes_run(tmp_path):
    """A GDES run as `lmlab pretrain` saves it, and the model it saved."""
    tokenizer = tiny_tokenizer("bert")
    cfg = preset("bert-tiny", vocab_size=tokenizer.get_vocab_size(), max_seq_len=64,
                 dropout=0.0)
    options = ObjectiveOptions(rtd_sharing="gdes")
    objective = build_objective("rtd", SpecialTokens.layout(cfg.vocab_size, 0), options)
    torch.manual_seed(0)
    model = jitter(LanguageModel(cfg, heads=objective.build_heads(cfg)), seed=1)
    train = {"objective": "rtd", "objective_options": asdict(options)}
    return save_run(tmp_path / "run", model, tokenizer, {"train": train}), model


def test_a_gdes_run_saves_the_residual_and_loads_merged(saved_gdes_run):
    out, model = saved_gdes_run
    (checkpoint,) = (out / "checkpoints").iterdir()
    weights = load_file(checkpoint / WEIGHTS)
    embedding = model.backbone.token_embedding
    assert torch.equal(weights["backbone.token_embedding.residual"], embedding.residual)
    assert json.loads((out / "config.json").read_text())["train"]["objective_options"][
        "rtd_sharing"] == "gdes"
    run = load_run(out)
    merged = embedding.weight + embedding.residual
    assert torch.equal(run.model.backbone.token_embedding.weight, merged)
    assert torch.equal(run.model.heads["generator"].decoder.weight, embedding.weight)
    ids = torch.randint(5, model.cfg.vocab_size, (2, 10),
                        generator=torch.Generator().manual_seed(3))
    mask = MaskSpec("bidirectional")
    with torch.no_grad():
        ours, theirs = (m(ids, mask, predict_at={"rtd": None}) for m in (model, run.model))
    assert torch.allclose(ours["rtd"], theirs["rtd"], atol=1e-6)
    assert torch.allclose(ours["hidden"], theirs["hidden"], atol=1e-6)


def test_fine_tuning_starts_from_the_merged_table(saved_gdes_run):
    out, model = saved_gdes_run
    settings = FinetuneConfig(task="classify", train="train.tsv", validation="validation.tsv")
    tuned = task_model(load_run(out).model, make_task(settings, ["no", "yes"]), dropout=0.0)
    embedding = model.backbone.token_embedding
    assert torch.equal(tuned.backbone.token_embedding.weight,
                       embedding.weight + embedding.residual)


@pytest.mark.parametrize("sharing", ["electra", "gdes"])
def test_continued_pretraining_starts_from_the_merged_table(saved_gdes_run, sharing):
    """The model's own table wins over the generator's; under GDES again, E_Δ restarts at 0."""
    out, model = saved_gdes_run
    source = load_source(str(out))
    objective = build_objective("rtd", source.run.special, ObjectiveOptions(rtd_sharing=sharing))
    started = warm_started_model(source, objective.build_heads(source.model_cfg))
    embedding = model.backbone.token_embedding
    table = started.backbone.token_embedding
    assert torch.equal(table.weight, embedding.weight + embedding.residual)
    assert started.heads["generator"].decoder.weight is table.weight
    assert sharing == "electra" or not table.residual.any()
