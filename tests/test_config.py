"""Config validation, derived sizes and presets."""

import pytest

from lmlab import LanguageModel, ModelConfig, preset, preset_names
from lmlab.objectives import SpecialTokens


def test_derived_sizes_are_computed():
    plain = ModelConfig(vocab_size=100, d_model=256, n_heads=4)
    assert plain.head_dim == 64 and plain.ffn_dim == 1024
    gated = plain.with_changes(activation="swiglu")
    assert gated.ffn_dim == 704 and gated.ffn_dim % 64 == 0  # ≈ 8/3 · d, rounded up


def test_imported_sizes_override_the_derived_ones():
    cfg = ModelConfig(vocab_size=100, d_model=96, n_heads=5, n_kv_heads=1, head_size=32,
                      ffn_size=200, activation="swiglu")  # 96 / 5 heads: fine with head_size
    assert (cfg.kv_heads, cfg.head_dim, cfg.ffn_dim) == (1, 32, 200)
    derived = ModelConfig(vocab_size=100, d_model=96, n_heads=4)
    assert (derived.kv_heads, derived.head_dim, derived.ffn_dim) == (4, 24, 384)


def test_configs_saved_before_the_size_overrides_are_saved_alike():
    saved = ModelConfig(vocab_size=100).to_dict()
    assert not {"n_kv_heads", "head_size", "ffn_size"} & saved.keys()  # as before they existed
    assert ModelConfig(**saved) == ModelConfig(vocab_size=100)
    grouped = ModelConfig(vocab_size=100, n_heads=4, n_kv_heads=2)
    assert ModelConfig(**grouped.to_dict()) == grouped


@pytest.mark.parametrize("change,message", [
    ({"norm": "batchnorm"}, "norm='batchnorm' is not one of"),
    ({"d_model": 65}, "not divisible by n_heads"),
    ({"n_layers": 0}, "n_layers must be positive"),
    ({"dropout": 1.5}, "dropout must be in"),
    ({"n_heads": 4, "n_kv_heads": 3}, "n_kv_heads=3 does not divide n_heads=4"),
    ({"n_kv_heads": 0}, "n_kv_heads must be positive"),
    ({"ffn_size": -1}, "ffn_size must be positive"),
    ({"positions": "rotary", "head_size": 7}, "rotary positions need an even head dimension"),
])
def test_bad_config_is_a_clear_error(change, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(vocab_size=100, **change)


def test_unknown_field_is_named():
    with pytest.raises(ValueError, match="unknown model config field.*d_modle"):
        ModelConfig(vocab_size=100).with_changes(d_modle=3)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_builds(name):
    cfg = preset(name, vocab_size=128, max_seq_len=64)
    assert cfg.d_model % cfg.n_heads == 0
    if name.endswith("tiny"):
        assert LanguageModel(cfg).num_parameters() > 0


def test_family_switches():
    bert, gpt2, modern = (preset(f"{f}-tiny", 100) for f in ("bert", "gpt2", "modern"))
    assert (bert.norm_placement, bert.positions, bert.type_vocab_size) == ("post", "learned", 2)
    assert (gpt2.norm_placement, gpt2.activation) == ("pre", "gelu_tanh")
    assert (modern.norm, modern.positions, modern.activation, modern.bias) == (
        "rmsnorm", "rotary", "swiglu", False)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ValueError, match="unknown preset 'bart-tiny'.*bert-tiny"):
        preset("bart-tiny", 100)


def test_special_tokens_are_validated():
    with pytest.raises(ValueError, match="no room for ordinary"):
        SpecialTokens.layout(vocab_size=7)
    with pytest.raises(ValueError, match=r"must lie in \[0, 10\)"):
        SpecialTokens(10, pad=0, unk=1, cls=2, sep=3, mask=4, bos=5, eos=12)
