"""The `lmlab` command: one subcommand per step of the pipeline."""

from __future__ import annotations

import argparse
import signal
import sys

from lmlab.commands.compare import add_compare_commands
from lmlab.commands.distill import add_distill_command
from lmlab.commands.eval import add_eval_command
from lmlab.commands.export import add_export_commands
from lmlab.commands.finetune import add_finetune_commands
from lmlab.commands.infer import add_infer_commands
from lmlab.commands.parsing import CommandParser, HelpFormatter, unknown_option_message
from lmlab.commands.prepare import add_prepare_command
from lmlab.commands.pretrain import add_pretrain_command
from lmlab.commands.serve import add_serve_command

# Errors that describe bad input or a run that cannot go on: one line, no traceback. Anything
# else is a bug in lmlab and keeps its traceback. Named by module, as the command line imports
# none of torch until a handler needs it: an error can only come from a module already loaded.
USER_ERRORS = {"builtins": ("ValueError", "OSError"),
               "lmlab.runs.checkpoints": ("CheckpointError",),
               "lmlab.train.loop": ("TrainingError",)}


def is_user_error(error: BaseException) -> bool:
    return any(isinstance(error, getattr(sys.modules[module], name))
               for module, names in USER_ERRORS.items() if module in sys.modules
               for name in names)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmlab", description=__doc__,
                                     formatter_class=HelpFormatter, allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=CommandParser)
    add_prepare_command(commands)
    add_pretrain_command(commands)
    add_eval_command(commands)
    add_infer_commands(commands)
    add_finetune_commands(commands)
    add_distill_command(commands)
    add_export_commands(commands)
    add_compare_commands(commands)
    add_serve_command(commands)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse `argv`; an unknown option is named with the closest option of its subcommand."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subcommand = parser._subparsers._group_actions[0].choices[args.command]
        option = next((a.split("=")[0] for a in unknown if a.startswith("-")), None)
        message = (unknown_option_message(subcommand, option) if option
                   else f"unexpected argument {unknown[0]!r}")
        subcommand.exit(2, f"{subcommand.prog}: error: {message}\n")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(build_parser(), argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt as interrupt:  # a run stopped by SIGTERM says so (RunStopped)
        print("lmlab: interrupted", file=sys.stderr)
        return 128 + getattr(interrupt, "signum", signal.SIGINT)
    except Exception as error:
        if not is_user_error(error):
            raise
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"lmlab: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
