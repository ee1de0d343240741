"""Modded-nanogpt's recipe elements that add weights to the model, each against what it
promises: U-net skips. Each is proven against a forward written out by hand, exactly off when
off, through the KV cache and a saved run, and refused by every export format."""

import pytest
import torch

from lmlab import LanguageModel, MaskSpec, preset
from lmlab.distill.student import cut_from
from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.model.heads import make_head
from lmlab.runs.run import load_run
from tests.hf_runs import pretrained_run
from tests.test_kv_cache import decode_and_compare

VOCAB = 50
CAUSAL = MaskSpec("causal")
# Each element's switch, on; the elements' tests below run for each.
ELEMENTS = {"unet_skips": dict(unet_skips=True)}


def model(family="modern", n_layers=4, seed=0, **changes) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = preset(f"{family}-tiny", VOCAB, 32, n_layers=n_layers, dropout=0.0, **changes)
    return LanguageModel(cfg, heads=("lm",)).eval()


def ids(rows=2, length=12) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(1))


def embedded(m: LanguageModel, x: torch.Tensor) -> torch.Tensor:
    backbone = m.backbone
    positions = torch.arange(x.shape[1])
    h = backbone.token_embedding(x)
    if backbone.position_embedding is not None:
        h = h + backbone.position_embedding(positions)
    if backbone.token_type_embedding is not None:
        h = h + backbone.token_type_embedding(torch.zeros_like(x))
    return backbone.embedding_norm(h), (backbone.rotary(positions)
                                        if backbone.rotary is not None else None)


def by_hand(m: LanguageModel, x: torch.Tensor, partners: dict[int, int]) -> torch.Tensor:
    """The backbone's forward written out: `partners` maps a block to the earlier block
    whose output joins its input, times skip weight `index`."""
    h, rotary = embedded(m, x)
    outputs = []
    for index, block in enumerate(m.backbone.blocks):
        if index in partners:
            source, weight = partners[index]
            h = h + m.backbone.skip_weights[weight] * outputs[source]
        h = block(h, CAUSAL, rotary, None)
        outputs.append(h)
    return m.backbone.final_norm(h)


@pytest.mark.parametrize("family", ["modern", "gpt2", "bert"])
@pytest.mark.parametrize(("n_layers", "partners"), [
    (4, {2: (1, 1), 3: (0, 0)}),
    (5, {3: (1, 1), 4: (0, 0)}),  # the middle block, 2, has no partner
    (2, {1: (0, 0)}),
])
def test_unet_skips_join_block_i_to_block_n_minus_1_minus_i(family, n_layers, partners):
    m = model(family, n_layers, unet_skips=True)
    assert m.backbone.skip_weights.shape == (n_layers // 2,)
    assert torch.equal(m.backbone.skip_weights, torch.ones(n_layers // 2))  # as modded-nanogpt
    with torch.no_grad():
        m.backbone.skip_weights.copy_(torch.linspace(0.5, 1.5, n_layers // 2))
        hidden = m(ids(), CAUSAL)["hidden"]
        assert hidden.shape == (2, 12, 64)
        torch.testing.assert_close(hidden, by_hand(m, ids(), partners))
        plain = by_hand(m, ids(), {})
    assert not torch.allclose(hidden, plain, atol=1e-5)  # post-norm: nearly scale-blind


def test_gradients_reach_every_skip_weight():
    m = model(n_layers=6, unet_skips=True).train()
    m(ids(), CAUSAL)["lm"].square().mean().backward()
    assert m.backbone.skip_weights.grad.shape == (3,)
    assert (m.backbone.skip_weights.grad != 0).all()


def test_unet_skips_off_is_the_plain_forward_and_adds_no_weights():
    plain, skipped = model(), model(unet_skips=True)
    assert set(skipped.state_dict()) - set(plain.state_dict()) == {"backbone.skip_weights"}
    with torch.no_grad():
        assert torch.equal(plain(ids(), CAUSAL)["hidden"], by_hand(plain, ids(), {}))
        skipped.backbone.skip_weights.zero_()  # the same weights, skips at zero
        assert torch.equal(skipped(ids(), CAUSAL)["lm"], plain(ids(), CAUSAL)["lm"])
    assert "unet_skips" not in plain.cfg.to_dict()
    with pytest.raises(ValueError, match="unet_skips needs at least 2 layers"):
        plain.cfg.with_changes(n_layers=1, unet_skips=True)


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("family", ["modern", "gpt2"])
def test_cached_decoding_equals_full_forward(element, family):
    m = model(family, n_layers=5, **ELEMENTS[element])
    with torch.no_grad():  # weights away from their start, so every element contributes
        for parameter in m.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape))
    decode_and_compare(m, ids(2, 11), prompt_len=5, mask_for=lambda seg: CAUSAL)


@pytest.mark.parametrize("element", ELEMENTS)
def test_a_saved_run_loads_back_with_the_element_and_its_weights(tmp_path, element):
    path = pretrained_run(tmp_path / "run", "modern", "clm", **ELEMENTS[element])
    run = load_run(path)
    for name, value in ELEMENTS[element].items():
        assert getattr(run.model.cfg, name) == value
    torch.manual_seed(0)  # the run's weights before pretrained_run jittered them
    fresh = LanguageModel(run.model.cfg, heads=tuple(run.model.heads)).state_dict()
    added = set(fresh) - set(model().state_dict())
    assert added
    loaded = run.model.state_dict()
    for name in added:  # the saved values came back, not the initial ones
        assert not torch.equal(loaded[name], fresh[name]), name
    x = torch.randint(0, run.model.cfg.vocab_size, (2, 9), generator=torch.Generator())
    with torch.no_grad():
        assert torch.equal(run.model(x, CAUSAL)["lm"], load_run(path).model(x, CAUSAL)["lm"])


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("format", ["hf", "gguf", "sentence-transformers"])
def test_every_export_format_refuses_the_element_in_one_line(tmp_path, element, format):
    run = load_run(pretrained_run(tmp_path / "run", "modern", "clm", **ELEMENTS[element]))
    with pytest.raises(ExportError, match=element) as error:
        export_run(run, tmp_path / "out", format=format)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("element", ELEMENTS)
def test_distilling_by_cutting_layers_is_refused_in_one_line(element):
    teacher = model(n_layers=4, **ELEMENTS[element])
    with pytest.raises(ValueError, match="--layers cuts models without") as error:
        cut_from(teacher, 2, lambda cfg: {"lm": make_head("lm", cfg)})
    assert "\n" not in str(error.value)
