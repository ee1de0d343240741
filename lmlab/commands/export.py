"""`lmlab export` (a run → a Hugging Face directory) and `lmlab import` (the reverse)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lmlab.commands.parsing import add_command, add_run_arguments

# The names of lmlab.export.formats.FORMATS, kept here so the parser needs no torch.
FORMAT_NAMES = ("hf", "sentence-transformers", "gguf")


def add_export_commands(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "export", help="write a run as a Hugging Face, sentence-transformers or "
                                 "GGUF model",
        handler=export_command,
        description="Write a run (pre-trained or fine-tuned) in a format other tools load: "
                    "hf, a directory transformers loads with its Auto classes and pipelines; "
                    "sentence-transformers, that directory with the modules that pool as "
                    "lmlab embed does; gguf, one file for llama.cpp and Ollama (causal runs). "
                    "The export is then loaded back with the tool it is for (when installed) "
                    "and its outputs compared with the run's.")
    add_run_arguments(parser)
    parser.add_argument("--out", type=Path, required=True,
                        help="the directory to write (new, empty, or an earlier export); a "
                             "gguf export writes model.gguf in it, or the file itself when "
                             "--out ends with .gguf")
    parser.add_argument("--format", choices=FORMAT_NAMES, default="hf",
                        help="hf (default), sentence-transformers or gguf")
    parser.add_argument("--pooling", choices=("mean", "mean-all", "cls"), default=None,
                        help="sentence-transformers: how to pool (default: as lmlab embed "
                             "pools the run)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                        help="sentence-transformers: scale embeddings to unit length "
                             "(default: as lmlab embed does for the run)")
    parser.add_argument("--dtype", choices=("f32", "f16"), default=None,
                        help="gguf: the weights' type (default f16; norms stay f32)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip loading the export back with the tool it is for")

    parser = add_command(
        commands, "import", help="turn a Hugging Face model into an lmlab run",
        handler=import_command,
        description="Turn a Hugging Face model directory (BERT, GPT-2 or Llama-family, with "
                    "model.safetensors and tokenizer.json) or a GGUF file into a run that every "
                    "lmlab command reads: fill-mask, generate, embed, eval, finetune.")
    parser.add_argument("source", type=Path, metavar="HF_DIR",
                        help="a Hugging Face model directory, or a .gguf file")
    parser.add_argument("--out", type=Path, required=True, help="the run directory to write")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="read a pytorch_model.bin (tensors only, weights_only=True)")


def export_command(args: argparse.Namespace) -> int:
    from lmlab.export.writer import export_run
    from lmlab.runs.run import load_run

    options = {name: getattr(args, name) for name in ("pooling", "normalize", "dtype")
               if getattr(args, name) is not None}
    run = load_run(args.run_dir, args.checkpoint, args.device)
    exported = export_run(run, args.out, check=not args.no_check, format=args.format,
                          **options)
    checked = ("not checked" if exported.max_difference is None else
               f"checked: max |difference| {exported.max_difference:.1e}")
    print(f"exported {args.run_dir} as {exported.target.architecture} ({args.format}) to "
          f"{exported.out} ({checked})")
    if exported.target.note:
        print(exported.target.note)
    return 0


def import_command(args: argparse.Namespace) -> int:
    from lmlab.export.importer import import_hf

    imported = import_hf(args.source, args.out, args.allow_pickle)
    heads = ", ".join(imported.heads) or "no head"
    print(f"imported {args.source} ({imported.family} family, {heads}) as a run trained with "
          f"{imported.objective} in {imported.out}")
    if imported.embedding is not None:
        embedding = imported.embedding
        print(f"lmlab embed pools it as its sentence-transformers modules say: "
              f"{embedding.pooling} pooling"
              + (", normalised" if embedding.normalize else "")
              + (f", texts cut to {embedding.max_len} tokens" if embedding.max_len
                 else ""))
    if imported.embedding_note:
        print(imported.embedding_note, file=sys.stderr)
    if imported.left_out:
        print(f"left out the task head(s) {', '.join(imported.left_out)}: fine-tune the run "
              "with lmlab finetune")
    return 0
