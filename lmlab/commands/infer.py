"""`lmlab fill-mask`, `lmlab generate` and `lmlab embed`: a trained run on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from lmlab.commands.parsing import (
    add_command,
    add_run_arguments,
    check_output_file,
    read_texts,
)
from lmlab.infer.choices import POOLINGS

if TYPE_CHECKING:
    from lmlab.infer.generate import Generation
    from lmlab.runs import Run


def add_infer_commands(commands: argparse._SubParsersAction) -> None:
    fill = add_command(commands, "fill-mask", help="rank the likely tokens for each [MASK]",
                       handler=fill_mask_command)
    add_run_arguments(fill, "pre-trained")
    _add_text_arguments(fill, "texts containing [MASK]")
    fill.add_argument("--top-k", type=int, default=5, help="candidates per mask")
    fill.add_argument("--json", action="store_true", help="one JSON object per text")
    _add_threads_argument(fill)

    gen = add_command(commands, "generate", help="continue a prompt, or fill the gaps in it",
                      handler=generate_command)
    add_run_arguments(gen, "pre-trained")
    gen.add_argument("prompt", nargs="?", help="the prompt; none = --ids or stdin. Span "
                     "models fill gaps marked [X], [Y], [Z] or <extra_id_0>, …")
    gen.add_argument("--ids", help="the prompt as token ids, such as '7 8 9'")
    gen.add_argument("--max-new-tokens", type=int, default=50, help="tokens to generate at most")
    gen.add_argument("--greedy", action="store_true", help="always the most likely token")
    gen.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    gen.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    gen.add_argument("--top-p", type=float, help="sample among the most likely tokens "
                     "holding this much probability")
    gen.add_argument("--repetition-penalty", type=float, default=1.0,
                     help="divide the odds of tokens already in the text by this (1 = off)")
    gen.add_argument("--seed", type=int, help="for reproducible samples")
    gen.add_argument("--stop", action="append", default=[], metavar="TEXT",
                     help="end the continuation at this text (repeatable)")
    gen.add_argument("--num-samples", type=int, default=1, help="independent continuations")
    gen.add_argument("--truncate-left", action="store_true",
                     help="drop the prompt's start when it does not fit the context")
    gen.add_argument("--json", action="store_true", help="one JSON object per sample")
    _add_threads_argument(gen)

    emb = add_command(commands, "embed", help="one vector per text, saved as .npy or printed",
                      handler=embed_command)
    add_run_arguments(emb)
    _add_text_arguments(emb, "texts")
    emb.add_argument("--out", type=Path, help="the .npy file to write; none = one JSON "
                     "object per text on stdout, its text and its embedding")
    emb.add_argument("--pooling", choices=POOLINGS,
                     help="average the text's tokens, or every token read ([CLS]/[SEP] too), "
                     "or take the first position; default: the run's own (an imported "
                     "sentence-transformers model's), else mean-all")
    emb.add_argument("--normalize", action=argparse.BooleanOptionalAction,
                     help="scale vectors to unit length; default: as the run records")
    _add_threads_argument(emb)


def _add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, help="CPU threads; default: one when a forward "
                        "pass reads a few rows, else all cores (or OMP_NUM_THREADS)")


def _add_text_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("texts", nargs="*", help=f"{what}; none = --ids, --file or stdin")
    parser.add_argument("--ids", action="append", metavar="IDS", help="a text as token ids, "
                        "such as '7 8 9' (repeatable; for runs without a tokenizer)")
    parser.add_argument("--file", type=Path, help="read texts from a file, one per line")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass")


def _load(args: argparse.Namespace) -> Run:
    from lmlab.runs import load_run

    return load_run(args.run_dir, args.checkpoint, args.device)


def _read_texts(args: argparse.Namespace) -> list[str] | None:
    """Texts from the arguments, --file or stdin; None when --ids gives token ids instead."""
    return None if args.ids else read_texts(args.texts, args.file)


def _inputs(args: argparse.Namespace, texts: list[str] | None, run: Run) -> list:
    from lmlab.runs.reading import parse_ids

    return texts if texts is not None else [parse_ids(i, run.special.mask) for i in args.ids]


def _shown(token: str) -> str:
    return token.strip() or repr(token)


def fill_mask_command(args: argparse.Namespace) -> int:
    from lmlab.infer.fill_mask import fill_mask
    from lmlab.kernels.machine import threads_for

    texts = _read_texts(args)
    with threads_for(min(len(texts or args.ids), args.batch_size), args.threads):
        run = _load(args)
        results = fill_mask(run, _inputs(args, texts, run), args.top_k, args.batch_size)
    for text, masks in zip(args.ids or texts, results, strict=True):
        if args.json:
            print(json.dumps({"text": text, "masks": [[asdict(c) for c in mask]
                                                      for mask in masks]}))
            continue
        print(text)
        for number, mask in enumerate(masks, 1):
            ranked = "  ".join(f"{_shown(c.token)} ({c.probability:.3f})" for c in mask)
            print(f"  {number}: {ranked}")
    return 0


def generate_command(args: argparse.Namespace) -> int:
    from lmlab.infer.generate import GenerationOptions, check_length, generate, generation_mode
    from lmlab.kernels.machine import threads_for
    from lmlab.runs.reading import parse_ids

    options = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                   repetition_penalty=args.repetition_penalty, greedy=args.greedy,
                   seed=args.seed, stop=args.stop, num_samples=args.num_samples,
                   truncate_left=args.truncate_left)
    GenerationOptions(**options)  # refuses bad options before a model is loaded
    check_length(args.max_new_tokens)
    prompt = args.ids or args.prompt
    if prompt is None:
        if sys.stdin.isatty():
            raise ValueError("no prompt: give it as an argument, with --ids or on stdin")
        prompt = sys.stdin.read().rstrip("\n")
    given = parse_ids(prompt) if args.ids else prompt
    with threads_for(args.num_samples, args.threads):
        run = _load(args)
        mode = generation_mode(run, given)  # refuses a model that cannot generate
        streaming = not args.json and args.num_samples == 1 and mode != "infill"
        shows_prompt = not args.ids and mode != "infill"
        if streaming and shows_prompt:
            print(prompt, end="", flush=True)

        def show(_: int, piece: str) -> None:
            print(piece, end="", flush=True)

        results = generate(run, given, args.max_new_tokens,
                           on_text=show if streaming else None, **options)
    results = results if isinstance(results, list) else [results]
    for number, result in enumerate(results, 1):
        if args.json:
            print(json.dumps({"prompt": prompt, **asdict(result)}))
            continue
        if streaming:
            print("" if result.text is not None else str(result))
        else:
            if len(results) > 1:
                print(f"--- sample {number} ---")
            print((prompt if shows_prompt else "") + str(result))
        _note_finish(result, run)
    return 0


def _note_finish(result: Generation, run: Run) -> None:
    if result.finish_reason == "context":
        print(f"(stopped: the model's context of {run.max_seq_len} tokens is full)",
              file=sys.stderr)


def embed_command(args: argparse.Namespace) -> int:
    from lmlab.atomic import make_directory
    from lmlab.infer.embed import embed, embedding_reading, save_npy
    from lmlab.kernels.machine import threads_for

    if args.out is not None:
        check_output_file(args.out, "vectors.npy")
    texts = _read_texts(args)
    with threads_for(min(len(texts or args.ids), args.batch_size), args.threads):
        run = _load(args)
        pooling, normalize = embedding_reading(run, args.pooling, args.normalize)
        vectors = embed(run, _inputs(args, texts, run), pooling, normalize, args.batch_size)
    if args.out is None:
        for text, vector in zip(args.ids or texts, vectors, strict=True):
            print(json.dumps({"text": text, "embedding": vector.tolist()}))
        return 0
    make_directory(args.out.parent)
    save_npy(vectors, args.out)
    print(f"{len(vectors)} embeddings of {vectors.shape[1]} dimensions ({pooling} pooling"
          f"{', normalised' if normalize else ''}) written to {args.out}")
    return 0
