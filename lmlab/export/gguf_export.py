"""The GGUF format: one file llama.cpp, Ollama and transformers' GGUF reader load, for causal
runs of the llama (modern) and gpt2 families, written with the `gguf` package's GGUFWriter.

    DIR/model.gguf   architecture and sizes, the byte-level BPE tokenizer (tokens, merges,
                     special-token roles), and the weights under llama.cpp's tensor names
                     (or NAME.gguf, when --out names the file itself)

Matrices are stored as f16 (default) or f32, norms and biases as f32, as llama.cpp's own
converter does. llama.cpp's rotary pairs neighbouring dimensions where lmlab (and Hugging
Face's Llama) pair the two halves, so q and k rows are permuted as its converter permutes
them. The check loads the file with transformers and compares its logits with those of the
run's weights rounded to the file's type.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import torch

from lmlab.export.check import sample_inputs
from lmlab.export.hf import family_of
from lmlab.export.hf_format import transformers_installed
from lmlab.export.targets import CLASSES, ExportError, Format, Target
from lmlab.model import MaskSpec
from lmlab.runs import Run

FILE = "model.gguf"  # in the --out directory, unless --out names the file itself
LMLAB_NAME = "lmlab "  # how the file's general.name starts
ARCHITECTURES = {"modern": "llama", "gpt2": "gpt2"}  # lmlab family → GGUF architecture
GLOBAL_TENSORS = {"backbone.token_embedding.weight": "token_embd.weight",
                  "backbone.position_embedding.weight": "position_embd.weight",
                  "backbone.final_norm.weight": "output_norm.weight",
                  "backbone.final_norm.bias": "output_norm.bias",
                  "heads.lm.decoder.weight": "output.weight"}
_BLOCK = re.compile(r"^backbone\.blocks\.(\d+)\.(.+)\.(weight|bias)$")
# A block's lmlab module → llama.cpp's; qkv and a gated `up` are split where it splits them.
BLOCK_TENSORS = {
    "llama": {"attn.qkv": ("attn_q", "attn_k", "attn_v"), "mlp.up": ("ffn_gate", "ffn_up")},
    "gpt2": {"attn.qkv": ("attn_qkv",), "mlp.up": ("ffn_up",)},
}
COMMON_BLOCK_TENSORS = {"attn_norm": ("attn_norm",), "attn.out": ("attn_output",),
                        "mlp_norm": ("ffn_norm",), "mlp.down": ("ffn_down",)}
TOKEN_TYPES = {"normal": 1, "control": 3, "unused": 5}  # gguf.TokenType
# transformers' GGUF reader sizes GPT-2's position table at GPT2Config's default whatever the
# file says (it reads context_length as n_ctx, not n_positions); a shorter table is padded to
# it with zero rows, positions past the run's context that it never learnt.
GPT2_READER_POSITIONS = 1024


def target(run: Run, dtype: str = "f16") -> Target:
    """The causal LM the file holds; refused in one line for anything llama.cpp would not
    compute as the run does."""
    try:
        family = family_of(run.model.cfg)
    except ValueError as error:
        raise ExportError(f"{error}; GGUF export needs a gpt2 or modern run") from None
    if family not in ARCHITECTURES or run.task is not None or "lm" not in run.model.heads:
        raise ExportError("GGUF holds causal language models: export a run of the gpt2 or "
                          "modern family pre-trained with clm (use --format hf for others)")
    if family == "gpt2" and run.model.cfg.max_seq_len > GPT2_READER_POSITIONS:
        raise ExportError(f"transformers reads a GPT-2 GGUF file's positions as "
                          f"{GPT2_READER_POSITIONS}, fewer than the run's context of "
                          f"{run.model.cfg.max_seq_len}; use --format hf")
    if not run.objective.reads_causally:
        raise ExportError(f"the run was pre-trained with {run.spec}, which reads part of its "
                          "input bidirectionally; llama.cpp reads left to right only")
    model = json.loads(run.require_tokenizer().to_str())["model"]
    if model.get("type") != "BPE":
        raise ExportError(f"GGUF export needs a byte-level BPE tokenizer; the run's is "
                          f"{model.get('type')}")
    return Target(family, CLASSES[family, ("lm",)], ("lm",),
                  settings={"architecture": ARCHITECTURES[family], "dtype": dtype})


def gguf_tensors(run: Run, architecture: str) -> dict[str, torch.Tensor]:
    """The run's weights under llama.cpp's names, fp32."""
    cfg, found = run.model.cfg, {}
    rows = {"attn.qkv": [cfg.n_heads * cfg.head_dim] + [cfg.kv_heads * cfg.head_dim] * 2,
            "mlp.up": [cfg.ffn_dim] * 2}
    modules = {**COMMON_BLOCK_TENSORS, **BLOCK_TENSORS[architecture]}
    for key, tensor in run.model.state_dict().items():
        tensor, block = tensor.float(), _BLOCK.match(key)
        if block is None:
            found[GLOBAL_TENSORS[key]] = tensor
            continue
        index, module, kind = block.groups()
        names = modules[module]
        parts = tensor.split(rows[module]) if len(names) > 1 else [tensor]
        for name, part in zip(names, parts, strict=True):
            found[f"blk.{index}.{name}.{kind}"] = part
    if architecture == "gpt2":
        table = found["position_embd.weight"]
        found["position_embd.weight"] = torch.cat(
            (table, table.new_zeros(_context(run, architecture) - len(table), table.shape[1])))
    if architecture == "llama":  # llama.cpp's rotary layout
        for name in [n for n in found if n.endswith(("attn_q.weight", "attn_k.weight"))]:
            heads = cfg.n_heads if "attn_q" in name else cfg.kv_heads
            found[name] = _pair_neighbours(found[name], heads)
    return found


def _pair_neighbours(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of each head from half-split rotary order to llama.cpp's interleaved one."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))  # (heads, 2, half, d) → (heads·hd, d)


def _context(run: Run, architecture: str) -> int:
    """The context the file declares: the run's, GPT-2's padded (GPT2_READER_POSITIONS)."""
    context = run.model.cfg.max_seq_len
    return max(context, GPT2_READER_POSITIONS) if architecture == "gpt2" else context


def _stored(tensor: torch.Tensor, dtype: str) -> torch.Tensor:
    """As the file stores it: matrices in `dtype`, norms and biases f32."""
    return tensor.half() if dtype == "f16" and tensor.ndim == 2 else tensor


def _add_sizes(writer, run: Run, architecture: str) -> None:
    cfg = run.model.cfg
    writer.add_name(LMLAB_NAME + run.path.name)
    writer.add_context_length(_context(run, architecture))
    writer.add_embedding_length(cfg.d_model)
    writer.add_block_count(cfg.n_layers)
    writer.add_feed_forward_length(cfg.ffn_dim)
    writer.add_head_count(cfg.n_heads)
    if architecture == "gpt2":
        writer.add_layer_norm_eps(cfg.norm_eps)
        return
    writer.add_head_count_kv(cfg.kv_heads)
    writer.add_layer_norm_rms_eps(cfg.norm_eps)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_vocab_size(cfg.vocab_size)


def _add_tokenizer(writer, run: Run) -> None:
    """Byte-level BPE as GPT-2's GGUF files hold it: tokens by id (rows the tokenizer does
    not use named and marked unused), merges, the special tokens marked control."""
    tokenizer = run.require_tokenizer()
    by_id = {index: token for token, index in tokenizer.get_vocab(with_added_tokens=True).items()}
    special = set(run.special.all_ids)
    tokens = [by_id.get(index, f"[UNUSED{index}]") for index in range(run.model.cfg.vocab_size)]
    kinds = [TOKEN_TYPES["unused" if index not in by_id else
                         "control" if index in special else "normal"]
             for index in range(len(tokens))]
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    # GPT-2's pre-tokenizer regex, the one lmlab's ByteLevel splits text with; llama.cpp's
    # "default" splits punctuation and digits off first, so that "1024 (see below)" would
    # read as other tokens than lmlab reads
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(kinds)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    roles = {"bos": writer.add_bos_token_id, "eos": writer.add_eos_token_id,
             "pad": writer.add_pad_token_id, "unk": writer.add_unk_token_id}
    for role, add in roles.items():
        if getattr(run.special, role) is not None:
            add(getattr(run.special, role))
    writer.add_add_bos_token(False)  # lmlab reads a prompt as it is given
    writer.add_add_eos_token(False)


def write(run: Run, target: Target, staging: Path, check: bool) -> float | None:
    import gguf

    architecture, dtype = target.settings["architecture"], target.settings["dtype"]
    writer = gguf.GGUFWriter(staging / FILE, architecture)
    _add_sizes(writer, run, architecture)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16"
                         else gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, run)
    for name, tensor in gguf_tensors(run, architecture).items():
        writer.add_tensor(name, _stored(tensor, dtype).contiguous().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if not (check and transformers_installed()):
        return None
    return _max_difference(run, staging, dtype)


@torch.no_grad()
def _max_difference(run: Run, staging: Path, dtype: str) -> float:
    """Logits of the file as transformers reads it against the run's, its weights rounded as
    the file stores them."""
    import transformers

    theirs_model = transformers.AutoModelForCausalLM.from_pretrained(
        staging, gguf_file=FILE, dtype=torch.float32).eval()
    ours_model = copy.deepcopy(run.model).float().cpu().eval()
    for parameter in ours_model.parameters():
        parameter.copy_(_stored(parameter, dtype).float())
    ids, attention_mask = sample_inputs(run)
    real = attention_mask.bool()
    theirs = theirs_model(input_ids=ids, attention_mask=attention_mask).logits[real]
    ours = ours_model(ids, MaskSpec("causal", segment_ids=attention_mask))["lm"][real]
    return float((ours - theirs).abs().max())


def written_by_lmlab(path: Path) -> bool:
    """Whether `path` is a GGUF file lmlab wrote (its name, as `_add_sizes` gives it, says so),
    which a new export may replace."""
    import gguf

    try:
        name = gguf.GGUFReader(path).get_field("general.name")
    except (OSError, ValueError, IndexError, KeyError):  # not GGUF, or cut short
        return False
    return name is not None and str(name.contents()).startswith(LMLAB_NAME)


GGUF = Format(target, write, tolerance=1e-4, options=("dtype",), file=FILE,
              ours=written_by_lmlab)
