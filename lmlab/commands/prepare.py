"""`lmlab prepare SOURCE[:WEIGHT]... --out DIR`: the command line over lmlab.data.prepare.

Options map one to one onto Recipe fields; a recipe file (YAML or TOML) gives defaults that
options override. `--tokenizer RUN` takes a run directory's tokenizer and the roles of its
special tokens (an imported run's are its own), so that the dataset suits `lmlab pretrain
--init RUN`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lmlab.commands.parsing import add_command
from lmlab.data.preparation.choices import NORMALISATIONS, SENTENCE_RULES


def add_prepare_command(commands) -> None:
    parser = add_command(
        commands, "prepare", help="turn text files into a dataset", handler=prepare_command,
        description="Read, clean, split and tokenize text into a dataset directory.")
    parser.add_argument("sources", nargs="*", metavar="SOURCE[:WEIGHT]",
                        help="files, directories or globs of .txt, .jsonl, .json, .csv, .tsv "
                        "(optionally .gz or .zst) and .parquet; a weight mixes sources by "
                        "up- or down-sampling; none = the built-in corpus")
    parser.add_argument("--out", type=Path, required=True, help="the dataset directory")
    parser.add_argument("--recipe", type=Path, help="a YAML or TOML file of recipe fields")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="processes cleaning and encoding side by side (the dataset is "
                             "the same for any number); default: one per core for inputs of "
                             "4 MB or more, else one")
    for add_options in (_add_engine_options, _add_reading_options, _add_cleaning_options,
                        _add_output_options):
        add_options(parser)


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    scale = parser.add_argument_group("engine (docs/prepare.md)")
    scale.add_argument("--engine", choices=("builtin", "datatrove"), default="builtin",
                       help="builtin (default): this process and --workers; datatrove: the "
                            "same steps as a datatrove pipeline, resumable task by task, with "
                            "datatrove's exact and MinHash dedup (pip install "
                            "'lmlab[datatrove]')")
    scale.add_argument("--executor", choices=("local", "ray"),
                       help="where the datatrove tasks run: local processes (default) or the "
                            "Ray cluster at RAY_ADDRESS (pip install 'lmlab[ray]')")
    scale.add_argument("--tasks", type=int, metavar="N",
                       help="datatrove tasks per parallel stage (default: one per core here, "
                            "or per CPU of the Ray cluster)")
    scale.add_argument("--verbose", action="store_true",
                       help="show datatrove's own output (by default one line a stage, its "
                            "logs in the work folder)")


def _add_reading_options(parser: argparse.ArgumentParser) -> None:
    reading = parser.add_argument_group("reading")
    reading.add_argument("--text-field", help="JSON field or CSV/TSV/Parquet column "
                         "(default: text)")
    reading.add_argument("--blank-line-documents", action="store_const", const=True,
                         help="in .txt files, blank lines separate documents")
    reading.add_argument("--strict", action="store_const", const=True,
                         help="fail on the first bad record instead of skipping and counting")


def _add_cleaning_options(parser: argparse.ArgumentParser) -> None:
    cleaning = parser.add_argument_group("cleaning")
    cleaning.add_argument("--normalisation", choices=NORMALISATIONS,
                          help="Unicode normalisation (default: NFC)")
    cleaning.add_argument("--keep-control-characters", dest="strip_control",
                          action="store_const", const=False,
                          help="keep control characters (removed by default)")
    cleaning.add_argument("--no-exact-dedup", dest="exact_dedup", action="store_const",
                          const=False, help="keep exact duplicate documents")
    cleaning.add_argument("--quality-filter", action="store_const", const=True,
                          help="drop documents failing Gopher's quality rules (web crawl)")
    near = cleaning.add_mutually_exclusive_group()
    near.add_argument("--near-dedup-threshold", type=float, metavar="JACCARD",
                      help="MinHash near-duplicate threshold (default: 0.8)")
    near.add_argument("--no-near-dedup", dest="near_dedup_threshold", action="store_const",
                      const="off", help="keep near-duplicate documents")


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("split and tokenizer")
    output.add_argument("--validation-fraction", type=float, help="default: 0.05")
    output.add_argument("--tokenizer", metavar="KIND|PATH|RUN", help="bpe (default), "
                        "wordpiece, unigram, a tokenizer.json to reuse, or a run directory "
                        "whose tokenizer to reuse (as lmlab pretrain --init RUN needs)")
    output.add_argument("--vocab-size", type=int, help="of a trained tokenizer (default 8192)")
    output.add_argument("--sentinels", type=int, help="<extra_id_N> tokens (default 100)")
    output.add_argument("--sentence-split", choices=SENTENCE_RULES,
                        help="punctuation (default) or lines: one sentence per line")
    output.add_argument("--seed", type=int, help="for sampling weighted sources (default 0)")


RECIPE_OPTIONS = ("text_field", "blank_line_documents", "strict", "normalisation",
                  "strip_control", "exact_dedup", "quality_filter", "near_dedup_threshold",
                  "validation_fraction", "tokenizer", "vocab_size", "sentinels",
                  "sentence_split", "seed")


def prepare_command(args: argparse.Namespace) -> int:
    from lmlab.data.preparation.entry import prepare

    fields = {name: getattr(args, name) for name in RECIPE_OPTIONS
              if getattr(args, name) is not None}
    if fields.get("near_dedup_threshold") == "off":
        fields["near_dedup_threshold"] = None
    if "tokenizer" in fields and Path(fields["tokenizer"]).is_dir():
        fields = {"sentinels": 0, **fields, **run_tokenizer(Path(fields["tokenizer"]))}
    out = prepare(args.sources or None, args.out, recipe_file=args.recipe,
                  workers=args.workers, engine=engine_of(args), **fields)
    print(f"dataset ready in {out} (statistics in {out / 'stats.txt'})")
    note = invalid_utf8_note(json.loads((out / "meta.json").read_text())["reading"])
    if note:
        print(note, file=sys.stderr)
    return 0


def engine_of(args: argparse.Namespace):
    """The datatrove engine the options ask for, or None for the built-in one."""
    if args.engine == "builtin":
        if args.executor is not None or args.tasks is not None:
            raise ValueError("--executor and --tasks choose where --engine datatrove runs")
        if args.verbose:
            raise ValueError("--verbose shows datatrove's own output: give --engine datatrove")
        return None
    if args.workers is not None:
        raise ValueError("--workers sizes the built-in engine; with --engine datatrove give "
                         "--tasks")
    from lmlab.extras import require_extra

    require_extra("datatrove", "datatrove", "--engine datatrove")
    if args.executor == "ray":
        require_extra("ray", "ray", "--executor ray")
    from lmlab.data.preparation.datatrove import Engine

    return Engine(args.executor or "local", args.tasks, args.verbose)


def run_tokenizer(run: Path) -> dict:
    """Recipe fields that reuse run `run`'s tokenizer: its tokenizer.json (checked against the
    SHA-256 config.json records) and the roles of its special tokens."""
    from lmlab.runs.layout import TOKENIZER
    from lmlab.runs.run import RunLoadError, check_tokenizer, read_config

    try:
        config = read_config(run)
        check_tokenizer(run, config)
    except RunLoadError as error:
        raise ValueError(f"--tokenizer {run}: a directory must be an lmlab run ({error}); "
                         "import a Hugging Face model first with lmlab import") from None
    if not (run / TOKENIZER).is_file():
        raise ValueError(f"{run} has no {TOKENIZER} (it was trained on token ids); give a "
                         "tokenizer.json or a tokenizer kind")
    roles = None if config.special_tokens is None else dict(config.special_tokens)
    return {"tokenizer": str(run / TOKENIZER), "special_tokens": roles}


def invalid_utf8_note(reading: dict) -> str | None:
    """One line for the user when documents held bytes that are not UTF-8."""
    if not reading.get("invalid_utf8_documents"):
        return None
    return (f"note: {reading['invalid_utf8_documents']:,} documents held invalid UTF-8: "
            f"{reading.get('invalid_utf8_bytes', '?')} bytes replaced by U+FFFD")
