"""`lmlab pretrain`: every training configuration field is an option; the run ends with its
summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmlab.commands.parsing import add_command
from lmlab.config.options import add_config_options, config_from_args
from lmlab.config.parsing import field_specs
from lmlab.config.training import TrainConfig


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


def pretrain_command(args: argparse.Namespace) -> int:
    import torch

    from lmlab.commands.pretrain_summary import print_summary
    from lmlab.data.preparation.entry import open_or_prepare
    from lmlab.kernels.machine import keep_freed_memory
    from lmlab.objectives.registry import check_before_data
    from lmlab.train.entry import pretrain

    config = config_from_args(args, TrainConfig)
    check_before_data(config)
    dataset = open_or_prepare(config.data)
    if not torch.cuda.is_available():
        keep_freed_memory()  # process-wide, so here, not in the library's pretrain()
    out = pretrain(config, dataset)
    print_summary(out, dataset, config)
    return 0
