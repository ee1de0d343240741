"""Reading a Hugging Face model directory: its config, weights, tokenizer and the roles of
its special tokens, each refused in one line when it is missing or unsafe.

Weights come from `model.safetensors` (or its shards); a pickled `pytorch_model.bin` only when
the caller allows it, and then through `torch.load(weights_only=True)`, which refuses code. A
GGUF file is read through `transformers` (with the `gguf` package), dequantised to fp32.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import Tensor

from lmlab.data.tokenizer import without_padding_or_truncation
from lmlab.export.tokenizer_files import HF_ROLE_NAMES

# What `lmlab export` leaves beside the model: its source run and that run's objective.
EXPORT_RECORD = "lmlab-export.json"


class HFImportError(ValueError):
    """An HF directory that cannot be imported, stated in one line."""


@dataclass
class HFModel:
    """An HF model as read from disk, before any conversion."""

    config: dict  # config.json
    state: dict[str, Tensor]  # HF-named weights, as saved
    tokenizer: Tokenizer
    roles: dict[str, str | None]  # special-token role → token string (None: absent)
    source: str
    objective: str | None = None  # the lmlab objective, for a directory lmlab exported


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HFImportError(f"{path}: unreadable JSON ({error})") from None


def read_json_object(path: Path) -> dict:
    """A JSON object from `path`; anything else is refused in one line."""
    found = read_json(path)
    if not isinstance(found, dict):
        raise HFImportError(f"{path}: expected a JSON object, found {type(found).__name__}")
    return found


def _safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(path)
    except Exception as error:  # safetensors raises its own SafetensorError, not an OSError
        raise HFImportError(f"{path}: not a readable safetensors file ({error})") from None


def _shard_names(index: Path) -> list[str]:
    """The shard files an index names, each a plain file name beside it (never a path that
    would reach outside the model directory)."""
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFImportError(f"{index}: no weight_map of tensor names to shard files")
    names = sorted(set(weight_map.values()))
    for name in names:
        if not isinstance(name, str) or Path(name).name != name:
            raise HFImportError(f"{index}: shard {name!r} is not a file name in the directory")
    return names


def read_weights(directory: Path, allow_pickle: bool) -> dict[str, Tensor]:
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return _safetensors(single)
    if index.is_file():
        shards = _shard_names(index)
        missing = [name for name in shards if not (directory / name).is_file()]
        if missing:
            raise HFImportError(f"{index} names shards that are not there: {', '.join(missing)}")
        return {key: tensor for name in shards for key, tensor in
                _safetensors(directory / name).items()}
    pickled = directory / "pytorch_model.bin"
    if pickled.is_file():
        if not allow_pickle:
            raise HFImportError(f"{pickled} is a pickle, which can run code when loaded; convert "
                               "it to safetensors, or pass --allow-pickle to read its tensors "
                               "only (torch.load with weights_only=True)")
        try:
            state = torch.load(pickled, weights_only=True, map_location="cpu")
        except Exception as error:  # torch raises UnpicklingError and friends
            raise HFImportError(f"{pickled}: not a plain tensor checkpoint "
                                f"({_unpickler_reason(error)}); lmlab reads only tensors from a "
                                "pickle, never code") from None
        if not isinstance(state, dict) or not all(isinstance(t, Tensor) for t in state.values()):
            raise HFImportError(f"{pickled}: not a state dict of tensors")
        return state
    raise HFImportError(f"{directory} has no weights (model.safetensors, its shards, or "
                       "pytorch_model.bin)")


def _token_content(value) -> str | None:
    """A special token as tokenizer configs write it: a string, or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def special_roles(directory: Path, tokenizer: Tokenizer, config: dict) -> dict[str, str | None]:
    """Each role's token: from tokenizer_config.json / special_tokens_map.json, else from the
    ids config.json names (GPT-2's original files have only those)."""
    declared: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (directory / name).is_file():
            declared.update({k: v for k, v in read_json_object(directory / name).items()
                             if v is not None})
    roles = {role: _token_content(declared.get(hf_name))
             for role, hf_name in HF_ROLE_NAMES.items()}
    for role in ("pad", "bos", "eos"):
        token_id = config.get(f"{role}_token_id")
        if roles[role] is None and isinstance(token_id, int) and 0 <= token_id < 2**31:
            roles[role] = tokenizer.id_to_token(token_id)
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    # A role naming a token the vocabulary lacks cannot be used; treat it as absent.
    return {role: token if token in vocabulary else None for role, token in roles.items()}


def read_tokenizer(directory: Path) -> Tokenizer:
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise HFImportError(f"{directory} has no tokenizer.json (lmlab reads Hugging Face fast "
                           "tokenizers; save one with AutoTokenizer.from_pretrained(...)"
                           ".save_pretrained(DIR))")
    try:
        return without_padding_or_truncation(Tokenizer.from_file(str(path)))
    except Exception as error:  # tokenizers raises plain Exception for unreadable files
        raise HFImportError(f"{path}: not a Hugging Face tokenizer.json ({error})") from None


def read_hf_directory(directory: Path, allow_pickle: bool = False) -> HFModel:
    if directory.is_file():
        raise HFImportError(f"{directory} is a file, not a model lmlab imports: give a Hugging "
                            "Face model directory (config.json, weights, tokenizer) or a .gguf "
                            "file")
    if not directory.is_dir():
        raise HFImportError(f"{directory}: no such directory")
    if not (directory / "config.json").is_file():
        raise HFImportError(f"{directory} has no config.json, so it is not a Hugging Face "
                           "model directory")
    config = read_json_object(directory / "config.json")
    state = read_weights(directory, allow_pickle)
    tokenizer = read_tokenizer(directory)
    record = directory / EXPORT_RECORD
    objective = read_json_object(record).get("objective") if record.is_file() else None
    return HFModel(config, state, tokenizer, special_roles(directory, tokenizer, config),
                   str(directory), objective)


def read_gguf(path: Path) -> HFModel:
    """A GGUF file through transformers: its config, dequantised weights and tokenizer."""
    try:
        import gguf  # noqa: F401
        import transformers
    except ImportError as error:
        raise HFImportError(f"reading {path.name} needs transformers and gguf "
                           f"(pip install transformers gguf): {error}") from None
    if not path.is_file():
        raise HFImportError(f"{path}: no such GGUF file")
    needed, size = gguf_bytes_needed(path), path.stat().st_size
    if needed is not None and needed > size:
        raise HFImportError(f"{path} is truncated: its header describes {needed:,} bytes, the "
                            f"file has {size:,} (copy or download it again)")
    directory, name = str(path.parent), path.name
    try:
        config = transformers.AutoConfig.from_pretrained(directory, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=name, dtype=torch.float32)
        fast = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        if isinstance(error, struct.error):  # gguf's reader ran past the end of the file
            reason = f"it ends early: is it cut short? {reason}"
        raise HFImportError(f"{path}: transformers cannot read this GGUF file ({reason})") from None
    rows = model.get_input_embeddings().weight.shape[0]
    tokenizer = _within(without_padding_or_truncation(fast.backend_tokenizer), rows)
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    roles = {role: (token if (token := getattr(fast, hf_name, None)) in vocabulary else None)
             for role, hf_name in HF_ROLE_NAMES.items()}
    return HFModel(config.to_dict(), model.state_dict(), tokenizer, roles, str(path))


def gguf_bytes_needed(path: Path) -> int | None:
    """The size the GGUF file at `path` needs for the tensors its header describes (the end of
    the one that ends last), or None when the header itself cannot be read."""
    import gguf

    class Header(gguf.GGUFReader):
        def _build_tensors(self, start: int, fields: list) -> None:  # sizes, not tensors
            self.needed = start
            for field in fields:
                _, _, _, dims, kind, offset = field.parts
                block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind[0])]
                end = start + int(offset[0]) + int(dims.prod()) // block * block_bytes
                self.needed = max(self.needed, end)

    try:
        return Header(path).needed
    except (OSError, ValueError, IndexError, KeyError):  # cut inside its header, or not GGUF
        return None


def _within(tokenizer: Tokenizer, rows: int) -> Tokenizer:
    """The tokenizer without tokens past the embeddings' rows: transformers' GPT-2 tokenizer
    adds its own <|endoftext|> to a GGUF vocabulary that lacks it."""
    settings = json.loads(tokenizer.to_str())
    added = settings.get("added_tokens", [])
    if all(token["id"] < rows for token in added):
        return tokenizer
    settings["added_tokens"] = [token for token in added if token["id"] < rows]
    return Tokenizer.from_str(json.dumps(settings))


def _unpickler_reason(error: Exception) -> str:
    """What torch's weights-only unpickler refused (e.g. "Unsupported global: GLOBAL print
    was not an allowed global by default"): its first sentence, without the advice to load
    the file unsafely or the terminal colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    found = re.search(r"WeightsUnpickler error:\s*(.+)", text)
    return (found.group(1) if found else text.splitlines()[0]).split(". ")[0].strip()
