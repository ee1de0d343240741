"""The `lmlab` command: one subcommand per step of the pipeline."""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import fields
from pathlib import Path

from lmlab.data.command import add_prepare_command
from lmlab.eval.commands import add_eval_command
from lmlab.infer.commands import add_infer_commands
from lmlab.train.checkpoint import CheckpointError
from lmlab.train.config import TrainConfig, field_types, parse_value, resolve_config
from lmlab.train.loop import TrainingError, pretrain

# Errors that describe bad input or a run that cannot go on: one line, no traceback. Anything
# else is a bug in lmlab and keeps its traceback.
USER_ERRORS = (ValueError, OSError, CheckpointError, TrainingError)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    """Every TrainConfig field is an option (`--lr 3e-4`); booleans are switches."""
    parser.add_argument("--config", type=Path, help="a YAML or TOML file of config fields")
    for name, kind in field_types().items():
        if kind is bool:
            parser.add_argument(_flag(name), dest=name, action="store_const", const="true",
                                default=None)
        else:
            parser.add_argument(_flag(name), dest=name, default=None, metavar=name.upper())


def check_before_data(config: TrainConfig) -> None:
    """Catch a bad objective or preset before minutes are spent preparing data."""
    from lmlab.objectives.base import SpecialTokens
    from lmlab.objectives.registry import build_objective
    from lmlab.presets import preset

    build_objective(config.objective, SpecialTokens.layout(1024, 100))
    if config.model != "auto":
        preset(config.model, vocab_size=1024)


def pretrain_command(args: argparse.Namespace) -> int:
    import torch

    from lmlab.data.dataset import open_or_prepare
    from lmlab.train.allocator import keep_freed_memory

    overrides = {f.name: parse_value(f.name, getattr(args, f.name))
                 for f in fields(TrainConfig) if getattr(args, f.name) is not None}
    config = resolve_config(args.config, overrides)
    check_before_data(config)
    dataset = open_or_prepare(config.data)
    if not torch.cuda.is_available():
        keep_freed_memory()  # process-wide, so here, not in the library's pretrain()
    out = pretrain(config, dataset)
    print(f"run saved in {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_prepare_command(commands)
    pretrain_parser = commands.add_parser("pretrain", help="pre-train a model")
    add_pretrain_arguments(pretrain_parser)
    pretrain_parser.set_defaults(run=pretrain_command)
    add_eval_command(commands)
    add_infer_commands(commands)
    return parser


def _suggest_option(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """argparse names an unknown option; say which known one was probably meant."""
    known = [_flag(f.name) for f in fields(TrainConfig)] + ["--config"]
    for arg in argv:
        option = arg.split("=")[0]
        if option.startswith("--") and option not in known:
            close = difflib.get_close_matches(option, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            parser.exit(2, f"lmlab: error: unknown option {option}{hint}\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv[:1] == ["pretrain"]:
        _suggest_option(parser, argv[1:])
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("lmlab: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"lmlab: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
