"""Hugging Face `config.json` dictionaries both ways: round trips, what transformers makes of
them, HF's defaults for entries left out, and a named refusal for each thing lmlab cannot
reproduce exactly."""

import json

import pytest

from lmlab.config import ModelConfig
from lmlab.config.presets import preset, preset_names
from lmlab.export import config_from_hf, hf_config, hf_config_dict

LLAMA_GQA = preset("modern-tiny", vocab_size=300, max_seq_len=2048, n_heads=4, n_kv_heads=2,
                   head_size=24, ffn_size=80, tie_embeddings=False, rope_theta=500000.0)


def every_preset() -> list[tuple[str, ModelConfig]]:
    """Each preset with its own dropout and without."""
    return [(name.partition("-")[0], preset(name, vocab_size=1000, **dropout))
            for name in preset_names() for dropout in ({}, {"dropout": 0.0})]


TINY = [(family, preset(f"{family}-tiny", vocab_size=1000))
        for family in ("bert", "gpt2", "modern")]


@pytest.mark.parametrize("family,cfg", [*every_preset(), ("modern", LLAMA_GQA)])
def test_round_trip_through_the_dictionary(family, cfg):
    as_json = json.loads(json.dumps(hf_config_dict(cfg, family)))  # plain data, as saved
    assert config_from_hf(as_json) == (family, cfg)


@pytest.mark.parametrize("family,cfg", [*TINY, ("modern", LLAMA_GQA)])
def test_round_trip_through_transformers(family, cfg):
    pytest.importorskip("transformers")
    assert config_from_hf(hf_config(cfg, family).to_dict()) == (family, cfg)


def test_llama_dictionary_loads_with_its_sizes_in_transformers():
    pytest.importorskip("transformers")
    settings = hf_config_dict(LLAMA_GQA, "modern")
    assert settings["rope_theta"] == settings["rope_parameters"]["rope_theta"] == 500000.0
    config = hf_config(LLAMA_GQA, "modern")
    assert (config.num_key_value_heads, config.head_dim, config.intermediate_size) == (2, 24, 80)
    assert config.tie_word_embeddings is False
    # 5.x keeps the rotary base in rope_parameters, 4.x in rope_theta
    rope = getattr(config, "rope_parameters", None) or {"rope_theta": config.rope_theta}
    assert rope["rope_theta"] == 500000.0


def test_extra_settings_go_into_the_dictionary():
    cfg = preset("bert-tiny", vocab_size=100)
    settings = hf_config_dict(cfg, "bert", num_labels=3, pad_token_id=0)
    assert (settings["model_type"], settings["num_labels"], settings["pad_token_id"]) == (
        "bert", 3, 0)


def test_absent_entries_take_the_hf_class_defaults():
    family, gpt2 = config_from_hf({"model_type": "gpt2"})
    assert family == "gpt2"
    assert (gpt2.vocab_size, gpt2.d_model, gpt2.n_layers, gpt2.n_heads, gpt2.max_seq_len) == (
        50257, 768, 12, 12, 1024)
    assert gpt2.ffn_size is None and gpt2.ffn_dim == 4 * 768 and gpt2.tie_embeddings
    _, llama = config_from_hf({"model_type": "llama", "hidden_size": 64,
                               "num_attention_heads": 4, "rope_theta": 500000.0})
    assert (llama.kv_heads, llama.head_dim, llama.ffn_dim) == (4, 16, 11008)
    assert (llama.rope_theta, llama.tie_embeddings) == (500000.0, False)  # 4.x-style rotary


def test_rotary_base_is_read_from_either_key_and_rope_parameters_win():
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    newer = {**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    assert config_from_hf(newer)[1].rope_theta == 1e6
    assert config_from_hf({**newer, "rope_theta": 10.0})[1].rope_theta == 1e6
    assert config_from_hf({**base, "rope_scaling": None, "rope_theta": 7.0})[1].rope_theta == 7.0


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}


@pytest.mark.parametrize("config,message", [
    ({"model_type": "mistral"}, r"model_type='mistral' is not supported; .*bert, gpt2, llama"),
    ({}, "model_type=None is not supported"),
    ({"model_type": "bert", "hidden_act": "relu"}, "hidden_act='relu'"),
    ({"model_type": "bert", "position_embedding_type": "relative_key"},
     "position_embedding_type='relative_key'"),
    ({"model_type": "gpt2", "activation_function": "relu"}, "activation_function='relu'"),
    ({"model_type": "gpt2", "scale_attn_weights": False}, "scale_attn_weights=False"),
    ({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": True},
     "scale_attn_by_inverse_layer_idx=True"),
    ({**LLAMA, "hidden_act": "gelu"}, "hidden_act='gelu'"),
    ({**LLAMA, "attention_bias": True}, "attention_bias=True"),
    ({**LLAMA, "mlp_bias": True}, "mlp_bias=True"),
    ({**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
     "rope_scaling of type 'llama3'"),
    ({**LLAMA, "rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling of type 'linear'"),
    ({**LLAMA, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}},
     "rope_parameters of type 'yarn'"),
    ({**LLAMA, "num_key_value_heads": 3}, "n_kv_heads=3 does not divide n_heads=4"),
    ({"model_type": "bert", "hidden_size": 65}, "d_model=65 is not divisible by n_heads=12"),
])
def test_what_lmlab_cannot_reproduce_is_refused_by_name(config, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf(config)


def test_grouped_attention_is_refused_for_families_without_it():
    gpt2 = preset("gpt2-tiny", vocab_size=100, n_kv_heads=1)
    with pytest.raises(ValueError, match=r"does not fit the gpt2 family: n_kv_heads=1"):
        hf_config_dict(gpt2, "gpt2")
    bert = preset("bert-tiny", vocab_size=100, head_size=16)
    with pytest.raises(ValueError, match=r"does not fit the bert family: head_size=16"):
        hf_config_dict(bert, "bert")
