"""`lmlab fill-mask`, `lmlab generate` and `lmlab embed`: a trained run on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from lmlab.infer.embed import POOLINGS, save_npy
from lmlab.infer.generate import Generation, generation_mode
from lmlab.infer.inputs import parse_ids
from lmlab.infer.pretrained import Pretrained, load


class _IntermixedParser(argparse.ArgumentParser):
    """Accepts texts after options (`RUN --top-k 3 "text"`), which plain argparse refuses
    once a positional argument takes a variable number of values."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing:  # parse_known_intermixed_args calls back into this method
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _add_parser(commands: argparse._SubParsersAction, name: str,
                help: str) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help, description=help)
    parser.__class__ = _IntermixedParser  # the subcommand table builds plain parsers
    return parser


def add_infer_commands(commands: argparse._SubParsersAction) -> None:
    fill = _add_parser(commands, "fill-mask", help="rank the likely tokens for each [MASK]")
    _add_run_arguments(fill)
    _add_text_arguments(fill, "texts containing [MASK]")
    fill.add_argument("--top-k", type=int, default=5, help="candidates per mask")
    fill.add_argument("--json", action="store_true", help="one JSON object per text")
    fill.set_defaults(run=fill_mask_command)

    gen = _add_parser(commands, "generate", help="continue a prompt, or fill the gaps in it")
    _add_run_arguments(gen)
    gen.add_argument("prompt", nargs="?", help="the prompt; none = --ids or stdin. Span "
                     "models fill gaps marked [X], [Y], [Z] or <extra_id_0>, …")
    gen.add_argument("--ids", help="the prompt as token ids, such as '7 8 9'")
    gen.add_argument("--max-new-tokens", type=int, default=50)
    gen.add_argument("--greedy", action="store_true", help="always the most likely token")
    gen.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    gen.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    gen.add_argument("--top-p", type=float, help="sample among the most likely tokens "
                     "holding this much probability")
    gen.add_argument("--repetition-penalty", type=float, default=1.0)
    gen.add_argument("--seed", type=int, help="for reproducible samples")
    gen.add_argument("--stop", action="append", default=[], metavar="TEXT",
                     help="end the continuation at this text (repeatable)")
    gen.add_argument("--num-samples", type=int, default=1)
    gen.add_argument("--truncate-left", action="store_true",
                     help="drop the prompt's start when it does not fit the context")
    gen.add_argument("--json", action="store_true", help="one JSON object per sample")
    gen.set_defaults(run=generate_command)

    emb = _add_parser(commands, "embed", help="one vector per text, saved as .npy")
    _add_run_arguments(emb)
    _add_text_arguments(emb, "texts")
    emb.add_argument("--out", type=Path, required=True, help="the .npy file to write")
    emb.add_argument("--pooling", choices=POOLINGS, default="mean")
    emb.add_argument("--normalize", action="store_true", help="scale vectors to unit length")
    emb.set_defaults(run=embed_command)


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN",
                        help="a run directory written by lmlab pretrain")
    parser.add_argument("--checkpoint", default="best", help="best, last or a checkpoint name")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, …")


def _add_text_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("texts", nargs="*", help=f"{what}; none = --ids, --file or stdin")
    parser.add_argument("--ids", action="append", metavar="IDS", help="a text as token ids, "
                        "such as '7 8 9' (repeatable; for runs without a tokenizer)")
    parser.add_argument("--file", type=Path, help="read texts from a file, one per line")
    parser.add_argument("--batch-size", type=int, default=32)


def _load(args: argparse.Namespace) -> Pretrained:
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return load(args.run_dir, args.checkpoint, device)


def _read_inputs(args: argparse.Namespace, pretrained: Pretrained) -> list:
    """Texts from the arguments, --file or stdin; or token id lists from --ids."""
    if args.ids:
        return [parse_ids(ids, pretrained.special.mask) for ids in args.ids]
    if args.texts:
        return list(args.texts)
    if args.file is not None:
        if not args.file.is_file():
            raise ValueError(f"{args.file}: no such file")
        lines = args.file.read_text(encoding="utf-8").splitlines()
    elif sys.stdin.isatty():
        raise ValueError("no texts: give them as arguments, with --file or on stdin")
    else:
        lines = sys.stdin.read().splitlines()
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise ValueError(f"{args.file or 'stdin'} holds no text")
    return texts


def _shown(token: str) -> str:
    return token.strip() or repr(token)


def fill_mask_command(args: argparse.Namespace) -> int:
    pretrained = _load(args)
    inputs = _read_inputs(args, pretrained)
    results = pretrained.fill_mask(inputs, args.top_k, args.batch_size)
    for text, masks in zip(args.ids or inputs, results, strict=True):
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
    pretrained = _load(args)
    prompt = args.ids or args.prompt
    if prompt is None:
        if sys.stdin.isatty():
            raise ValueError("no prompt: give it as an argument, with --ids or on stdin")
        prompt = sys.stdin.read().rstrip("\n")
    given = parse_ids(prompt) if args.ids else prompt
    mode = generation_mode(pretrained, given)  # refuses a model that cannot generate
    streaming = not args.json and args.num_samples == 1 and mode != "infill"
    shows_prompt = not args.ids and mode != "infill"
    if streaming and shows_prompt:
        print(prompt, end="", flush=True)

    def show(_: int, piece: str) -> None:
        print(piece, end="", flush=True)

    results = pretrained.generate(
        given, args.max_new_tokens, on_text=show if streaming else None,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        repetition_penalty=args.repetition_penalty, greedy=args.greedy, seed=args.seed,
        stop=args.stop, num_samples=args.num_samples, truncate_left=args.truncate_left)
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
        _note_finish(result, pretrained)
    return 0


def _note_finish(result: Generation, pretrained: Pretrained) -> None:
    if result.finish_reason == "context":
        print(f"(stopped: the model's context of {pretrained.max_seq_len} tokens is full)",
              file=sys.stderr)


def embed_command(args: argparse.Namespace) -> int:
    pretrained = _load(args)
    vectors = pretrained.embed(_read_inputs(args, pretrained), args.pooling, args.normalize,
                               args.batch_size)
    save_npy(vectors, args.out)
    print(f"{len(vectors)} embeddings of {vectors.shape[1]} dimensions ({args.pooling} "
          f"pooling) written to {args.out}")
    return 0
