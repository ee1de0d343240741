"""`lmlab pretrain`: every training configuration field is an option."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmlab.command_line import add_command, add_config_options
from lmlab.train.config import TrainConfig, field_specs, flat_fields, parse_value, resolve_config


def add_pretrain_command(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "pretrain", help="pre-train a model", handler=pretrain_command,
        description="Pre-train a model with an objective on a prepared dataset (default: the "
                    "built-in corpus). Options override a --config file; a budget is --steps, "
                    "--tokens or --minutes, the first reached ending the run.")
    add_pretrain_options(parser)


def add_pretrain_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="a YAML or TOML file of config fields")
    add_config_options(parser, field_specs(TrainConfig))


def config_from_args(args: argparse.Namespace, config_class: type = TrainConfig):
    """The --config file, then the options given, as a `config_class`."""
    overrides = {name: parse_value(name, getattr(args, name), config_class)
                 for name in flat_fields(config_class) if getattr(args, name) is not None}
    return resolve_config(args.config, overrides, config_class)


def check_before_data(config: TrainConfig) -> None:
    """Catch a bad objective or preset before minutes are spent preparing data."""
    from lmlab.objectives.base import SpecialTokens
    from lmlab.objectives.registry import build_objective
    from lmlab.presets import preset

    build_objective(config.objective, SpecialTokens.layout(1024, 100), config.objective_options)
    if config.model != "auto":
        preset(config.model, vocab_size=1024)


def pretrain_command(args: argparse.Namespace) -> int:
    import torch

    from lmlab.data.dataset import open_or_prepare
    from lmlab.train.allocator import keep_freed_memory
    from lmlab.train.pretrain import pretrain
    from lmlab.train.summary import print_summary

    config = config_from_args(args)
    check_before_data(config)
    dataset = open_or_prepare(config.data)
    if not torch.cuda.is_available():
        keep_freed_memory()  # process-wide, so here, not in the library's pretrain()
    out = pretrain(config, dataset)
    print_summary(out, dataset, config)
    return 0
