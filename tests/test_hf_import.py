"""`lmlab import`: directories saved by transformers become runs that compute what the HF
model computes (fp32, atol 1e-5) and that lmlab's commands read; bad directories are refused
in one line with nothing written.

Random tiny HF models saved on the spot; nothing is downloaded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from lmlab.cli import main
from lmlab.export.hf_files import HFImportError
from lmlab.export.importer import import_hf
from lmlab.infer.embed import embed
from lmlab.infer.fill_mask import fill_mask
from lmlab.infer.generate import generate
from lmlab.model import MaskSpec
from lmlab.runs.run import load_run
from tests.hf_runs import TEXTS, pretrained_run, tiny_tokenizer
from tests.test_hf_parity import jitter, transformers

TOLERANCE = 1e-5


def gpt2_style_tokenizer() -> Tokenizer:
    """Byte-level BPE whose one special token, <|endoftext|>, is bos, eos and unk at once."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return tokenizer


def save_tokenizer(directory, tokenizer: Tokenizer, **roles) -> None:
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **roles).save_pretrained(
        directory)


BERT_ROLES = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                  mask_token="[MASK]")
GPT2_ROLES = dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                  unk_token="<|endoftext|>")


def bert_config(vocab_size: int, **extra):
    return transformers.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=64,
                                   max_position_embeddings=64, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0, **extra)


def saved_bert(directory, class_name: str = "BertForMaskedLM", seed: int = 0,
               fixed_length: int | None = None):
    """`fixed_length`: the tokenizer pads and cuts every text to it, as sentence-transformers'
    tokenizer.json files do."""
    tokenizer = tiny_tokenizer("bert")
    tokenizer.post_processor = processors.BertProcessing(
        ("[SEP]", tokenizer.token_to_id("[SEP]")), ("[CLS]", tokenizer.token_to_id("[CLS]")))
    if fixed_length:
        tokenizer.enable_padding(length=fixed_length, pad_token="[PAD]",
                                 pad_id=tokenizer.token_to_id("[PAD]"))
        tokenizer.enable_truncation(fixed_length)
    torch.manual_seed(seed)
    model = jitter(getattr(transformers, class_name)(bert_config(tokenizer.get_vocab_size())),
                   seed).eval()
    model.save_pretrained(directory)
    save_tokenizer(directory, tokenizer, **BERT_ROLES)
    return model


def saved_gpt2(directory, seed: int = 0):
    tokenizer = gpt2_style_tokenizer()
    config = transformers.GPT2Config(vocab_size=tokenizer.get_vocab_size(), n_embd=32, n_layer=2,
                                     n_head=2, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    model = jitter(transformers.GPT2LMHeadModel(config), seed).eval()
    model.save_pretrained(directory)
    save_tokenizer(directory, tokenizer, **GPT2_ROLES)
    return model


def saved_llama(directory, seed: int = 0):
    """Grouped-query attention (4 query heads, 2 key/value heads), a head width that is not
    hidden/heads, untied embeddings and a rope_theta of its own."""
    tokenizer = tiny_tokenizer("modern")
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=48,
        max_position_embeddings=64, rope_theta=50000.0, tie_word_embeddings=False,
        bos_token_id=5, eos_token_id=6, pad_token_id=0)
    torch.manual_seed(seed)
    model = jitter(transformers.LlamaForCausalLM(config), seed).eval()
    model.save_pretrained(directory)
    save_tokenizer(directory, tokenizer, bos_token="[BOS]", eos_token="[EOS]",
                   pad_token="[PAD]", unk_token="[UNK]")
    return model


def saved_modernbert(directory, class_name: str = "ModernBertForMaskedLM", seed: int = 0,
                     **extra):
    """ModernBERT as transformers builds it (tied embeddings, no bias in its head's dense
    layer, a rotary base of 160,000), every layer global."""
    tokenizer = tiny_tokenizer("modernbert")
    config = transformers.ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=3,
        num_attention_heads=2, intermediate_size=48, max_position_embeddings=64,
        pad_token_id=tokenizer.token_to_id("[PAD]"), bos_token_id=None, eos_token_id=None,
        cls_token_id=None, sep_token_id=None, **{"global_attn_every_n_layers": 1, **extra})
    torch.manual_seed(seed)
    model = jitter(getattr(transformers, class_name)(config), seed).eval()
    model.save_pretrained(directory)
    save_tokenizer(directory, tokenizer, **BERT_ROLES)
    return model


def sample(run, length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(10, run.model.cfg.vocab_size, (2, length), generator=generator)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, length // 2:] = 0
    return ids, attention_mask


@torch.no_grad()
def assert_same_logits(run, hf_model, head: str, causal: bool) -> None:
    ids, attention_mask = sample(run)
    mask = MaskSpec("causal" if causal else "bidirectional", segment_ids=attention_mask)
    ours = run.model(ids, mask)[head]
    theirs = hf_model(input_ids=ids, attention_mask=attention_mask)
    theirs = theirs.last_hidden_state if head == "hidden" else theirs.logits
    real = attention_mask.bool()
    assert float((ours[real] - theirs[real]).abs().max()) <= TOLERANCE


@pytest.mark.parametrize(("class_name", "heads"), [
    ("BertForMaskedLM", ("mlm",)), ("BertForPreTraining", ("mlm", "nsp")), ("BertModel", ())])
def test_bert_checkpoints_with_and_without_heads_import(tmp_path, class_name, heads):
    hf_model = saved_bert(tmp_path / "hf", class_name)
    imported = import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(imported.out)
    assert tuple(run.model.heads) == heads
    assert (run.special.cls, run.special.mask, run.special.bos, run.special.eos) == (2, 4, None,
                                                                                  None)
    if not heads:
        with pytest.raises(ValueError, match="without its masked-LM head"):
            fill_mask(run, "A [MASK] .")
    if class_name == "BertForPreTraining":
        ids, attention_mask = sample(run)
        with torch.no_grad():
            ours = run.model(ids, MaskSpec("bidirectional", segment_ids=attention_mask))
            theirs = hf_model(input_ids=ids, attention_mask=attention_mask)
        real = attention_mask.bool()
        assert float((ours["mlm"][real] - theirs.prediction_logits[real]).abs().max()) <= TOLERANCE
        assert float((ours["nsp"] - theirs.seq_relationship_logits).abs().max()) <= TOLERANCE
        return
    assert_same_logits(run, hf_model, "mlm" if class_name == "BertForMaskedLM" else "hidden",
                       causal=False)


@pytest.mark.parametrize(("class_name", "heads", "left_out"), [
    ("ModernBertForMaskedLM", ("mlm",), []), ("ModernBertModel", (), []),
    ("ModernBertForSequenceClassification", (), ["classifier", "head"])])
def test_modernbert_checkpoints_import(tmp_path, class_name, heads, left_out):
    hf_model = saved_modernbert(tmp_path / "hf", class_name)
    imported = import_hf(tmp_path / "hf", tmp_path / "run")
    assert (imported.family, imported.objective) == ("modernbert", "mlm")
    assert (imported.heads, imported.left_out) == (heads, left_out)
    run = load_run(imported.out)
    if heads:
        assert_same_logits(run, hf_model, "mlm", causal=False)
    elif class_name == "ModernBertModel":
        assert_same_logits(run, hf_model, "hidden", causal=False)


def test_modernbert_with_sliding_window_layers_is_refused(tmp_path, capsys):
    saved_modernbert(tmp_path / "hf", global_attn_every_n_layers=3)
    assert "global_attn_every_n_layers=1" in refused(tmp_path, capsys)


def test_legacy_position_ids_buffer_is_ignored(tmp_path):
    hf_model = saved_bert(tmp_path / "hf")
    weights = load_file(tmp_path / "hf" / "model.safetensors")
    weights["bert.embeddings.position_ids"] = torch.arange(64)[None]
    save_file(weights, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    assert_same_logits(run, hf_model, "mlm", causal=False)


def test_gpt2_imports_with_one_token_for_every_role(tmp_path):
    hf_model = saved_gpt2(tmp_path / "hf")
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    special = run.special
    assert special.bos == special.eos == special.unk == 0
    assert special.pad is None and special.mask is None
    assert_same_logits(run, hf_model, "lm", causal=True)


def test_grouped_query_llama_with_untied_embeddings_imports(tmp_path):
    hf_model = saved_llama(tmp_path / "hf")
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    cfg = run.model.cfg
    assert (cfg.n_heads, cfg.kv_heads, cfg.head_dim, cfg.tie_embeddings) == (4, 2, 16, False)
    assert cfg.rope_theta == 50000.0
    assert_same_logits(run, hf_model, "lm", causal=True)


def test_imported_decoder_generates_as_transformers_does(tmp_path):
    hf_model = saved_llama(tmp_path / "hf")
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    prompt = "The quick brown fox"
    ids = run.tokenizer.encode(prompt, add_special_tokens=False).ids
    theirs = hf_model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False,
                               min_new_tokens=10)[0, len(ids):].tolist()
    ours = generate(run, prompt, max_new_tokens=10, greedy=True, ignore_eos=True)
    assert ours.ids == theirs


def test_imported_encoder_fills_masks_and_embeds(tmp_path):
    hf_model = saved_bert(tmp_path / "hf")
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    text = "The quick brown [MASK] jumps over the lazy dog."
    encoded = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")(
        text, return_tensors="pt")
    with torch.no_grad():
        logits = hf_model(**encoded).logits[0]
    at = encoded["input_ids"][0].tolist().index(run.special.mask)
    assert [c.id for c in fill_mask(run, text, top_k=3)[0]] == logits[at].topk(3).indices.tolist()
    vectors = embed(run, ["Paris is the capital of France."], pooling="mean")
    assert np.isfinite(vectors).all() and vectors.shape == (1, 32)


@torch.no_grad()
def test_mean_embeddings_equal_bert_hidden_states_over_the_text_tokens(tmp_path):
    hf_model = saved_bert(tmp_path / "hf", "BertModel", fixed_length=32)
    run = load_run(import_hf(tmp_path / "hf", tmp_path / "run").out)
    texts = ["Paris is the capital of France.", "The quick brown fox jumps."]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    hidden = hf_model(**encoded).last_hidden_state
    lengths = encoded["attention_mask"].sum(1)
    expected = torch.stack([hidden[row, 1:length - 1].mean(0)  # without [CLS] and [SEP]
                            for row, length in enumerate(lengths.tolist())])
    ours = torch.from_numpy(embed(run, texts, pooling="mean"))
    assert float((ours - expected).abs().max()) <= TOLERANCE


def write_config(directory, **changes) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def refused(tmp_path, capsys, *extra: str) -> str:
    capsys.readouterr()  # what saving the HF model printed
    code = main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run"), *extra])
    error = capsys.readouterr().err
    assert code == 1 and error.count("\n") == 1 and "Traceback" not in error
    assert not (tmp_path / "run").exists()
    return error


def test_a_directory_without_config_or_weights_is_refused(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").unlink()
    assert "has no weights" in refused(tmp_path, capsys)
    (tmp_path / "hf" / "config.json").unlink()
    assert "has no config.json" in refused(tmp_path, capsys)


def test_an_unknown_architecture_is_named_with_the_supported_ones(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    write_config(tmp_path / "hf", model_type="t5", architectures=["T5ForConditionalGeneration"])
    error = refused(tmp_path, capsys)
    assert "t5" in error and all(name in error for name in ("bert", "gpt2", "llama"))


def test_weights_that_do_not_fit_the_config_name_the_tensor_and_shapes(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    write_config(tmp_path / "hf", intermediate_size=48)
    error = refused(tmp_path, capsys)
    assert "bert.encoder.layer.0.intermediate.dense.weight" in error
    assert "(64, 32)" in error and "(48, 32)" in error


def test_a_config_that_is_no_object_or_has_wrong_types_is_refused(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    write_config(tmp_path / "hf", hidden_size="32")
    assert "config.json does not describe" in refused(tmp_path, capsys)
    (tmp_path / "hf" / "config.json").write_text(json.dumps([config]))
    assert "expected a JSON object" in refused(tmp_path, capsys)


def test_corrupt_or_escaping_weight_files_are_refused(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert "not a readable safetensors file" in refused(tmp_path, capsys)
    weights.unlink()
    (tmp_path / "hf" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"bert.embeddings.word_embeddings.weight": "../outside.safetensors"}}))
    assert "is not a file name in the directory" in refused(tmp_path, capsys)


def test_a_missing_gguf_file_is_named(tmp_path, capsys):
    capsys.readouterr()
    assert main(["import", str(tmp_path / "model.gguf"), "--out", str(tmp_path / "run")]) == 1
    assert "no such GGUF file" in capsys.readouterr().err


def test_a_truncated_gguf_file_says_so_with_both_sizes(tmp_path, capsys):
    whole = tmp_path / "model.gguf"
    assert main(["export", str(pretrained_run(tmp_path / "clm", "gpt2", "clm")), "--format",
                 "gguf", "--out", str(whole), "--no-check"]) == 0
    data = whole.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-1000])  # the last tensor's data cut short, the header whole
    capsys.readouterr()
    assert main(["import", str(cut), "--out", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err == (
        f"lmlab: error: {cut} is truncated: its header describes {len(data):,} bytes, the "
        f"file has {len(data) - 1000:,} (copy or download it again)\n")
    assert not (tmp_path / "run").exists()


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    write_config(tmp_path / "hf", vocab_size=50)
    assert "tokenizer has" in refused(tmp_path, capsys)


def test_an_output_directory_holding_other_files_is_refused(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    capsys.readouterr()
    code = main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")])
    assert code == 1 and "not an imported run" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["notes.txt"]


def test_a_pickle_is_refused_unless_allowed_and_then_read_as_tensors_only(tmp_path, capsys):
    hf_model = saved_bert(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(hf_model.state_dict(), tmp_path / "hf" / "pytorch_model.bin")
    assert "--allow-pickle" in refused(tmp_path, capsys)
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run"),
                 "--allow-pickle"]) == 0
    assert_same_logits(load_run(tmp_path / "run"), hf_model, "mlm", causal=False)


def test_a_pickle_holding_code_is_refused_even_when_allowed(tmp_path, capsys):
    saved_bert(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save({"weights": print}, tmp_path / "hf" / "pytorch_model.bin")
    line = refused(tmp_path, capsys, "--allow-pickle")
    assert ("not a plain tensor checkpoint (Unsupported global: GLOBAL print was not an allowed "
            "global by default); lmlab reads only tensors") in line
    assert "\x1b" not in line and "weights_only` set to `False`" not in line


def test_cli_import_reports_the_run(tmp_path, capsys):
    saved_gpt2(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    assert "gpt2 family" in capsys.readouterr().out
    with pytest.raises(HFImportError):
        import_hf(tmp_path / "missing", tmp_path / "other")
